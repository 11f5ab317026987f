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
    let elsewhere = Window {
        target: "s2".into(),
        ..pause.clone()
    };
    let wipe = Window {
        kind: Some(FaultKind::RedisWipe),
        target: "redis".into(),
        ..pause.clone()
    };
    for (w, violations) in [(pause, 0), (storm, 1), (elsewhere, 1), (wipe, 0)] {
        assert_eq!(
            single_writer(&[], &audit, &inputs(), std::slice::from_ref(&w)).violations,
            violations,
            "{w:?}"
        );
    }
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
    assert_eq!(acked_delivered(&h, &[], &EndState::default()).violations, 0);
    // At two positions (a retry applied it again in the next epoch): twice.
    let h = vec![ev(2, "a", 1, 1, "a#1"), ev(3, "b", 2, 1, "a#1")];
    assert_eq!(acked_delivered(&h, &[], &EndState::default()).violations, 1);
    // A convergence line is retried until answered: it may land twice.
    let h = vec![ev(2, "a", 1, 1, "fin:a"), ev(3, "a", 1, 2, "fin:a")];
    assert_eq!(acked_delivered(&h, &[], &EndState::default()).violations, 0);
    let gift = |t, e, s| Record {
        op: Some("gift".into()),
        text: None,
        order: Some("o-1".into()),
        ..ev(t, "b", e, s, "")
    };
    assert_eq!(
        acked_delivered(&[gift(2, 1, 4), gift(3, 1, 4)], &[], &EndState::default()).violations,
        0
    );
    assert_eq!(
        acked_delivered(&[gift(2, 1, 4), gift(3, 1, 5)], &[], &EndState::default()).violations,
        1
    );
}

#[test]
fn a_settled_gift_never_answered_still_owes_its_event() {
    let order = order_id("a", "g1");
    let attempt = Record {
        t: 5,
        kind: Some(Kind::Unknown),
        client: Some("a".into()),
        room: Some("r".into()),
        op: Some("gift.send".into()),
        req: Some("g1".into()),
        ..Record::default()
    };
    let end = EndState {
        sagas: vec![Saga {
            gift_id: order.clone(),
            state: "SETTLED".into(),
            sender: "a".into(),
            recipients: vec!["b".into()],
            cost: 10,
            share_each: 5,
        }],
        ..EndState::default()
    };
    let lost = acked_delivered(std::slice::from_ref(&attempt), &[], &end);
    assert_eq!((lost.checked, lost.violations), (1, 1));
    let event = Record {
        op: Some("gift".into()),
        text: None,
        order: Some(order),
        ..ev(9, "b", 1, 1, "")
    };
    assert_eq!(
        acked_delivered(&[attempt.clone(), event], &[], &end).violations,
        0
    );
    // Around a Redis wipe the open record may go with Redis: excused.
    let wipe = Window {
        kind: Some(FaultKind::RedisWipe),
        target: "redis".into(),
        start: 4,
        end: 6,
    };
    let excused = acked_delivered(&[attempt], &[wipe], &end);
    assert_eq!((excused.violations, excused.excused), (0, 1));
    let mut voided = end;
    voided.sagas[0].state = "VOIDED".into();
    assert_eq!(acked_delivered(&[], &[], &voided).checked, 0);
}

#[test]
fn a_kill_pause_or_move_that_moved_no_room_fails_the_effect_checker() {
    let kill = Window {
        kind: Some(FaultKind::KillShard),
        target: "s1".into(),
        start: 100,
        end: 3_100,
    };
    let taken_over = vec![serve(1, 1, "s1/x"), serve(4_000, 2, "s2/y")];
    let v = faults_took_effect(&taken_over, std::slice::from_ref(&kill), &inputs());
    assert_eq!((v.checked, v.violations), (1, 0));
    // Served again by the shard's next process: a new fence too.
    let restarted = vec![serve(1, 1, "s1/x"), serve(4_000, 2, "s1/z")];
    assert_eq!(
        faults_took_effect(&restarted, std::slice::from_ref(&kill), &inputs()).violations,
        0
    );
    // Nothing moved, or only past the bound (the heal + TTL + recovery bound).
    let kept = vec![serve(1, 1, "s1/x")];
    assert_eq!(
        faults_took_effect(&kept, std::slice::from_ref(&kill), &inputs()).violations,
        1
    );
    let late = vec![serve(1, 1, "s1/x"), serve(3_100 + 17_001, 2, "s2/y")];
    assert_eq!(
        faults_took_effect(&late, std::slice::from_ref(&kill), &inputs()).violations,
        1
    );
    // A shard that served no room: the fault struck nothing.
    let elsewhere = vec![serve(1, 1, "s2/y"), serve(4_000, 2, "s3/w")];
    let v = faults_took_effect(&elsewhere, std::slice::from_ref(&kill), &inputs());
    assert!(
        v.examples.iter().any(|e| e.contains("struck no room")),
        "{v:?}"
    );
    // A move of room r, and kinds with no ownership effect to check.
    let mv = Window {
        kind: Some(FaultKind::MoveRoom),
        target: "r".into(),
        ..kill.clone()
    };
    assert_eq!(
        faults_took_effect(&taken_over, std::slice::from_ref(&mv), &inputs()).violations,
        0
    );
    assert_eq!(faults_took_effect(&kept, &[mv], &inputs()).violations, 1);
    let storm = Window {
        kind: Some(FaultKind::ReconnectStorm),
        ..kill
    };
    assert_eq!(faults_took_effect(&kept, &[storm], &inputs()).checked, 0);
}

#[test]
fn an_outage_longer_than_its_faults_hold_and_the_bound_fails_liveness() {
    let op = |t: u64, kind: Kind| Record {
        t,
        kind: Some(kind),
        client: Some("a".into()),
        room: Some("r".into()),
        op: Some("chat.send".into()),
        ..Record::default()
    };
    let fin = |t: u64| ev(t, "a", 1, 9, "fin:a");
    let kill = Window {
        kind: Some(FaultKind::KillShard),
        target: "s1".into(),
        start: 1_000,
        end: 4_000,
    };
    // Down from 1,000 (the last success) to 21,000: 20 s, within 3 s hold + 2 s TTL + 15 s.
    let h = vec![
        op(1_000, Kind::Ok),
        op(2_000, Kind::Fail),
        op(21_000, Kind::Ok),
        fin(21_500),
    ];
    let (v, _) = liveness(&h, &inputs(), std::slice::from_ref(&kill));
    assert_eq!(v.violations, 0, "{v:?}");
    // 1 ms longer fails; and with no fault in force only TTL + 15 s is allowed.
    let h = vec![
        op(1_000, Kind::Ok),
        op(2_000, Kind::Unknown),
        op(21_001, Kind::Ok),
        fin(21_500),
    ];
    assert_eq!(liveness(&h, &inputs(), &[kill]).0.violations, 1);
    let h = vec![
        op(1_000, Kind::Ok),
        op(2_000, Kind::Fail),
        op(18_001, Kind::Ok),
        fin(21_500),
    ];
    assert_eq!(liveness(&h, &inputs(), &[]).0.violations, 1);
}
