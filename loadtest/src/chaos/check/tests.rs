//! The checkers on small hand-made histories: each catches what it is for, and passes what
//! the protocol allows.
#![allow(clippy::unwrap_used, reason = "test code")]

use super::*;

fn ev(t: u64, client: &str, e: u64, s: u64, text: &str) -> Record {
    Record {
        t,
        kind: Some(Kind::Event),
        client: Some(client.into()),
        room: Some("r".into()),
        op: Some("chat".into()),
        epoch: Some(e),
        seq: Some(s),
        text: Some(text.into()),
        ..Record::default()
    }
}

fn join(t: u64, client: &str, since: Option<(u64, u64)>, at: (u64, u64), resync: bool) -> Record {
    Record {
        t,
        kind: Some(Kind::Ok),
        client: Some(client.into()),
        room: Some("r".into()),
        op: Some("room.join".into()),
        since,
        epoch: Some(at.0),
        seq: Some(at.1),
        resync: Some(resync),
        ..Record::default()
    }
}

fn serve(t: u64, fence: u64, owner: &str) -> AuditLine {
    AuditLine {
        t,
        node: "s".into(),
        what: "serve".into(),
        room: "r".into(),
        fence,
        owner: owner.into(),
        detail: String::new(),
        gift: String::new(),
    }
}

fn inputs() -> Inputs {
    Inputs {
        ttl: Duration::from_secs(2),
        grant: 100,
        members: BTreeMap::from([("r".to_owned(), vec!["a".to_owned()])]),
        recovery_bound: Duration::from_secs(15),
    }
}

#[test]
fn order_passes_a_filled_gap_and_fails_an_unfilled_one() {
    let good = vec![
        join(1, "a", None, (1, 0), false),
        ev(2, "a", 1, 1, "x"),
        ev(3, "a", 1, 3, "z"),
        // The replay fills (1,2) and repeats (1,3) before the reply.
        ev(4, "a", 1, 2, "y"),
        ev(5, "a", 1, 3, "z"),
        join(6, "a", Some((1, 1)), (1, 3), false),
    ];
    assert_eq!(order(&good).violations, 0);
    let bad = vec![
        join(1, "a", None, (1, 0), false),
        ev(2, "a", 1, 1, "x"),
        ev(3, "a", 1, 3, "z"),
        // Answered without a resync, yet nothing was replayed.
        join(6, "a", Some((1, 1)), (1, 3), false),
    ];
    assert_eq!(order(&bad).violations, 1);
    let resynced = vec![
        join(1, "a", None, (1, 0), false),
        ev(2, "a", 1, 1, "x"),
        ev(3, "a", 1, 3, "z"),
        join(6, "a", Some((1, 1)), (1, 3), true),
    ];
    assert_eq!(order(&resynced).violations, 0);
}

#[test]
fn single_writer_fails_a_reused_fence_and_two_contents_at_one_position() {
    let h = vec![ev(2, "a", 1, 1, "x"), ev(3, "b", 1, 1, "x")];
    let audit = vec![serve(1, 1, "s1/x"), serve(5, 2, "s2/y")];
    assert_eq!(single_writer(&h, &audit, &inputs(), &[]).violations, 0);
    let audit = vec![serve(1, 1, "s1/x"), serve(5, 1, "s1/x")];
    assert_eq!(single_writer(&h, &audit, &inputs(), &[]).violations, 1);
    let h = vec![ev(2, "a", 1, 1, "x"), ev(3, "b", 1, 1, "other")];
    let audit = vec![serve(1, 1, "s1/x")];
    assert_eq!(single_writer(&h, &audit, &inputs(), &[]).violations, 1);
}

#[test]
fn a_lease_lost_counts_only_outside_a_fault_that_can_take_it() {
    let mut lost = serve(10_000, 1, "s1/x");
    lost.what = "stop".into();
    lost.detail = "lease_lost".into();
    let audit = vec![serve(1, 1, "s1/x"), lost];
    let pause = Window {
        kind: Some(FaultKind::PauseShard),
        target: "s1".into(),
        start: 8_000,
        end: 9_000,
    };
    let storm = Window {
        kind: Some(FaultKind::ReconnectStorm),
        ..pause.clone()
    };
    assert_eq!(
        single_writer(&[], &audit, &inputs(), &[pause]).violations,
        0
    );
    assert_eq!(
        single_writer(&[], &audit, &inputs(), &[storm]).violations,
        1
    );
}

#[test]
fn recovery_fails_a_fence_its_owner_never_served() {
    let mut rec = serve(10, 1, "s1/x");
    rec.what = "recover".into();
    rec.detail = "settled".into();
    let end = EndState::default();
    let audit = vec![serve(1, 1, "s1/x"), rec.clone()];
    assert_eq!(recovery(&[], &audit, &end).violations, 0);
    let mut other = rec;
    other.owner = "s2/y".into();
    let audit = vec![serve(1, 1, "s1/x"), other];
    assert_eq!(recovery(&[], &audit, &end).violations, 1);
}

#[test]
fn a_chat_line_or_gift_order_at_two_positions_is_delivered_twice() {
    // The same line seen by two members at one position: once.
    let h = vec![ev(2, "a", 1, 1, "a#1"), ev(3, "b", 1, 1, "a#1")];
    assert_eq!(acked_delivered(&h, &[]).violations, 0);
    // At two positions (a retry applied it again in the next epoch): twice.
    let h = vec![ev(2, "a", 1, 1, "a#1"), ev(3, "b", 2, 1, "a#1")];
    assert_eq!(acked_delivered(&h, &[]).violations, 1);
    // A convergence line is retried until answered: it may land twice.
    let h = vec![ev(2, "a", 1, 1, "fin:a"), ev(3, "a", 1, 2, "fin:a")];
    assert_eq!(acked_delivered(&h, &[]).violations, 0);
    let gift = |t, e, s| Record {
        op: Some("gift".into()),
        text: None,
        order: Some("o-1".into()),
        ..ev(t, "b", e, s, "")
    };
    assert_eq!(
        acked_delivered(&[gift(2, 1, 4), gift(3, 1, 4)], &[]).violations,
        0
    );
    assert_eq!(
        acked_delivered(&[gift(2, 1, 4), gift(3, 1, 5)], &[]).violations,
        1
    );
}
