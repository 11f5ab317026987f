//! The app backend's hand on a room as a whole: closing it so that only the backend reopens
//! it, and changing its info past the staff's rights.

use protocol::client::{BackendManage, RoomUpdate};

use super::tests_rights::{at, party, run, u};
use super::*;

fn close(reason: &str) -> BackendManage {
    BackendManage::Close {
        reason: reason.into(),
    }
}

fn update() -> RoomUpdate {
    RoomUpdate {
        room: RoomId::from("r1"),
        title: None,
        notice: None,
        cover: None,
        seat_mode: None,
        host_seat: None,
        chat_muted: None,
        slow_mode: None,
    }
}

/// A room the backend closes empties, refuses joiners with the reason, and stays closed to its
/// owner's `room.open`; only the backend reopens it.
#[test]
fn a_room_the_backend_closes_is_reopened_by_the_backend_only() {
    let mut r = party();
    let out = r
        .backend_manage(&close("reported for spam"), 1_000)
        .unwrap();
    assert!(out.durable_changed);
    assert_eq!(r.member_count(), 0);
    assert_eq!(out.evicted.len(), 6);
    assert!(out.evicted.iter().all(|e| e.reason == "closed"));
    assert!(r.durable.seats.iter().all(|s| s.user.is_none()));
    assert!(r.durable.requests.is_empty());
    let last = r.durable.audit.back().unwrap();
    assert_eq!((last.action.as_str(), last.by.as_ref()), ("close", None));
    // Joiners are told why; the owner cannot reopen it.
    let refused = r.join(&u("mem"), at(10), None, 2_000).unwrap_err();
    assert_eq!(refused.code, ErrorCode::RoomClosed);
    assert_eq!(
        refused.msg,
        "the room is closed by the platform: reported for spam"
    );
    let refused = run(
        &mut r,
        "host",
        serde_json::json!({"op": "room.open", "d": {"room": "r1"}}),
        2_000,
    )
    .unwrap_err();
    assert_eq!(refused.code, ErrorCode::Forbidden);
    assert!(r.durable.closed);
    // Closing again replaces the reason and announces nothing; the state survives a save.
    let again = r.backend_manage(&close(""), 3_000).unwrap();
    assert!(again.events.is_empty() && again.evicted.is_empty());
    let saved: Durable = serde_json::from_value(serde_json::to_value(&r.durable).unwrap()).unwrap();
    assert_eq!(
        saved.platform_closed.as_deref(),
        Some(&PlatformClose {
            reason: String::new(),
            at: 3_000
        })
    );
    assert_eq!(
        r.join(&u("mem"), at(10), None, 3_000).unwrap_err().msg,
        "the room is closed by the platform"
    );
    // The backend reopens it: joins go through, and a second reopen changes nothing.
    let open = r.backend_manage(&BackendManage::Open, 4_000).unwrap();
    assert!(open.durable_changed);
    assert!(!r.durable.closed && r.durable.platform_closed.is_none());
    assert_eq!(r.durable.audit.back().unwrap().action, "reopen");
    r.join(&u("mem"), at(10), None, 4_000).unwrap();
    assert!(
        !r.backend_manage(&BackendManage::Open, 5_000)
            .unwrap()
            .durable_changed
    );
    // A room its owner closed is reopened by the backend too, and a saved room of old
    // (no such field) reads as not closed by the platform.
    r.join(&u("host"), at(11), None, 5_000).unwrap();
    r.room_close(&u("host"), 6_000).unwrap();
    assert!(r.durable.platform_closed.is_none());
    r.backend_manage(&BackendManage::Open, 7_000).unwrap();
    assert!(!r.durable.closed);
    let mut old = serde_json::to_value(&r.durable).unwrap();
    old.as_object_mut().unwrap().remove("platform_closed");
    let old: Durable = serde_json::from_value(old).unwrap();
    assert!(old.platform_closed.is_none());
    // A reason past 200 characters, or of two lines, changes nothing.
    for bad in ["x".repeat(201), "two\nlines".into()] {
        let err = r.backend_manage(&close(&bad), 8_000).unwrap_err();
        assert_eq!(err.code, ErrorCode::BadRequest);
    }
    assert!(!r.durable.closed && r.durable.platform_closed.is_none());
}

/// The backend changes the room's info with no `by`, and reserves seat 0 from anyone on it
/// (an admin here, whom an admin could not move).
#[test]
fn the_backend_changes_the_rooms_info_past_the_staffs_rights() {
    let mut r = party();
    r.durable.seats[0].user = Some(u("adm"));
    let u1 = RoomUpdate {
        title: Some("Late night".into()),
        host_seat: Some(true),
        slow_mode: Some(30),
        ..update()
    };
    let out = r
        .backend_manage(&BackendManage::Update(u1.clone()), 1_000)
        .unwrap();
    assert!(out.durable_changed);
    let [
        (_, Sequenced::RoomUpdate(info)),
        (_, Sequenced::SeatUpdate(freed)),
    ] = &out.events[..]
    else {
        panic!("{:?}", out.events);
    };
    assert_eq!(info.by, None);
    assert_eq!(info.title.as_deref(), Some("Late night"));
    assert_eq!((info.host_seat, info.slow_mode), (Some(true), Some(30)));
    assert_eq!((freed.seat.index, freed.seat.user.clone()), (0, None));
    assert_eq!(freed.by, None);
    assert_eq!(r.durable.title, "Late night");
    // The same again changes nothing; a field that fails its check changes nothing at all.
    let same = r.backend_manage(&BackendManage::Update(u1), 2_000).unwrap();
    assert!(same.events.is_empty() && !same.durable_changed);
    let bad = RoomUpdate {
        title: Some("ok".into()),
        slow_mode: Some(301),
        ..update()
    };
    let err = r
        .backend_manage(&BackendManage::Update(bad), 3_000)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::BadRequest);
    assert_eq!(r.durable.title, "Late night");
}
