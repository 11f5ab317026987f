//! Reports: what a member may report, duplicates, and each reporter's allowance.

use protocol::client::{MAX_REPORTS_PER_WINDOW, REPORT_WINDOW_MS, ReportSend};

use super::tests_rights::{party, session, u};
use super::*;

fn report(user: Option<&str>, seq: Option<Seq>, reason: &str) -> ReportSend {
    ReportSend {
        room: RoomId::from("r1"),
        user: user.map(u),
        seq,
        reason: reason.into(),
        text: None,
    }
}

fn file(r: &mut RoomState, who: &str, rep: &ReportSend, now: u64) -> Result<Filed, Rejected> {
    let at = session(r, who);
    r.report(&u(who), &at, rep, now)
}

/// A line names its sender; a user, the room, or a line are each a report; the same report
/// again is a duplicate and a different reason is not.
#[test]
fn a_member_reports_a_line_a_user_or_the_room_and_a_repeat_is_a_duplicate() {
    let mut r = party();
    let seq = r
        .chat_line(&u("t"), "buy coins at example.com".into(), 1_000)
        .unwrap()
        .events[0]
        .0;
    let filed = file(&mut r, "mem", &report(None, Some(seq), "spam"), 2_000).unwrap();
    assert_eq!(
        filed,
        Filed {
            user: Some(u("t")),
            seq: Some(seq),
            duplicate: false
        }
    );
    let again = file(&mut r, "mem", &report(Some("t"), Some(seq), "spam"), 3_000).unwrap();
    assert!(again.duplicate);
    let other = file(&mut r, "mem", &report(None, Some(seq), "fraud"), 3_000).unwrap();
    assert!(!other.duplicate);
    let room = file(&mut r, "mem", &report(None, None, "other"), 3_000).unwrap();
    assert_eq!((room.user, room.duplicate), (None, false));
    let user = file(&mut r, "lis", &report(Some("t"), None, "abuse"), 3_000).unwrap();
    assert_eq!(user.user, Some(u("t")));
    // A report changes nothing in the room.
    assert_eq!(r.seq(), seq);
}

/// Oneself, a user who did not send the line, an unknown line, a bad reason and a
/// non-member are refused, and nothing is remembered for them.
#[test]
fn bad_reports_are_refused() {
    let mut r = party();
    let seq = r.chat_line(&u("t"), "hello".into(), 1_000).unwrap().events[0].0;
    let mut code = |who, rep: ReportSend| file(&mut r, who, &rep, 2_000).unwrap_err().code;
    assert_eq!(
        code("t", report(None, Some(seq), "spam")),
        ErrorCode::BadRequest
    );
    assert_eq!(
        code("t", report(Some("t"), None, "spam")),
        ErrorCode::BadRequest
    );
    assert_eq!(
        code("mem", report(Some("lis"), Some(seq), "spam")),
        ErrorCode::BadRequest
    );
    assert_eq!(
        code("mem", report(None, Some(seq + 1), "spam")),
        ErrorCode::NoSuchMessage
    );
    assert_eq!(
        code("mem", report(None, None, "no way")),
        ErrorCode::BadRequest
    );
    assert_eq!(
        code("stranger", report(None, None, "spam")),
        ErrorCode::NotInRoom
    );
    assert!(r.recent.as_ref().is_none_or(|m| m.reports.is_empty()));
}

/// A reporter files at most five reports a window in a room; the refusal says when the next
/// may go, and then it does. Duplicates do not count.
#[test]
fn a_reporter_is_held_to_five_reports_a_window() {
    let mut r = party();
    for (i, who) in ["t", "lis", "adm", "req", "host"].iter().enumerate() {
        let now = 1_000 + i as u64;
        file(&mut r, "mem", &report(Some(who), None, "spam"), now).unwrap();
        assert!(
            file(&mut r, "mem", &report(Some(who), None, "spam"), now)
                .unwrap()
                .duplicate
        );
    }
    assert_eq!(MAX_REPORTS_PER_WINDOW, 5);
    let err = file(&mut r, "mem", &report(None, None, "spam"), 2_000).unwrap_err();
    assert_eq!(err.code, ErrorCode::RateLimited);
    let next = 1_000 + REPORT_WINDOW_MS;
    assert!(
        err.msg.contains(&format!("the next at {next}")),
        "{}",
        err.msg
    );
    // Another member is not held back; at the time named, the reporter goes on.
    file(&mut r, "lis", &report(None, None, "spam"), 2_000).unwrap();
    assert_eq!(
        file(&mut r, "mem", &report(None, None, "spam"), next - 1)
            .unwrap_err()
            .code,
        ErrorCode::RateLimited
    );
    file(&mut r, "mem", &report(None, None, "spam"), next).unwrap();
}
