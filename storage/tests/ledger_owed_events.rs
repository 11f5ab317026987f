//! Conformance of owed gift events on every ledger engine (SQLite and PostgreSQL always,
//! Scylla when `CHORUS_SCYLLA_NODES` is set): a settled gift whose event its runtime could not
//! publish is recorded once and listed for its room until exactly one caller takes it, and a
//! retry that finishes a saga left open owes its event, unless the owner's recovery finished it
//! first (then the recovery publishes it): of two finishers exactly one claims the event. The rest of the ledger's contract is
//! in `ledger_conformance.rs`.

// The checks live in helper fns shared by every engine, not in #[test] fns themselves.
#![allow(clippy::unwrap_used)]

use protocol::RoomId;
use storage::ledger::{
    GiftOrder, GiftOutcome, GiftResult, Ledger, RecoveryOutcome, SagaState, SettleOutcome,
};
use uuid::Uuid;

use crate::support::ledger as fixture;
use fixture::{Fixture, postgres, scylla, sqlite};

conformance!(
    an_owed_gift_event_is_listed_until_one_caller_takes_it,
    a_retry_that_finishes_an_open_saga_owes_its_event,
    a_saga_finished_by_a_retry_and_a_recovery_has_one_publisher,
);

/// A saga left debited (its owner died) is finished by a retry of the request and by the
/// owner's recovery, racing: exactly one of them claims the gift's event (the retry owes it, or
/// the recovery reports it settled and publishes it), never both. A settle that finds the saga
/// settled says so. The chaos suite found the race: both claimed, and the room published the
/// gift twice.
async fn a_saga_finished_by_a_retry_and_a_recovery_has_one_publisher(f: Fixture) {
    let (s, host) = (f.user("s"), f.user("host"));
    let room = f.room("r");
    let l = &f.ledger;
    l.grant(&s, 1_000, "seed").await.unwrap();
    let to = std::slice::from_ref(&host);

    // In turn: the retry settles it between the recovery's look and its settle.
    let first = f.order(&s, "q0", &room, 10, to);
    l.begin(&first, 1).await.unwrap();
    l.debit(&first, 1).await.unwrap();
    assert!(matches!(
        l.send_gift(&first, 1).await.unwrap(),
        GiftOutcome::Duplicate {
            first: GiftResult::Settled { .. }
        }
    ));
    assert!(matches!(
        l.settle(&first, 1).await.unwrap(),
        SettleOutcome::AlreadySettled { balance: 990 }
    ));
    assert_eq!(
        l.recover(&first, 1, true).await.unwrap(),
        RecoveryOutcome::AlreadyTerminal(SagaState::Settled)
    );
    assert_eq!(owed(l, &room, 0).await, vec![first.clone()]);
    assert!(l.take_unpublished(&room, first.gift_id).await.unwrap());

    // At once, through two handles (two connections; for SQLite, two writers on one file).
    let second = f.second_handle().await;
    for i in 1..=8 {
        let o = f.order(&s, &format!("q{i}"), &room, 10, to);
        l.begin(&o, 1).await.unwrap();
        l.debit(&o, 1).await.unwrap();
        let (recovered, retried) = if i % 2 == 0 {
            tokio::join!(l.recover(&o, 1, true), second.send_gift(&o, 1))
        } else {
            let (b, a) = tokio::join!(second.send_gift(&o, 1), l.recover(&o, 1, true));
            (a, b)
        };
        let recovered = recovered.unwrap();
        assert!(
            matches!(
                retried.unwrap(),
                GiftOutcome::Duplicate {
                    first: GiftResult::Settled { .. }
                }
            ),
            "order {i}"
        );
        let owed_now = owed(l, &room, 0).await;
        let by_recovery = recovered == RecoveryOutcome::Settled;
        let by_retry = owed_now.iter().any(|g| g.gift_id == o.gift_id);
        assert!(
            by_recovery ^ by_retry,
            "order {i}: recovery {recovered:?}, owed by the retry: {by_retry}"
        );
        if by_retry {
            assert!(l.take_unpublished(&room, o.gift_id).await.unwrap());
        }
        // Two settles racing: one moved it.
        let p = f.order(&s, &format!("p{i}"), &room, 10, to);
        l.begin(&p, 1).await.unwrap();
        l.debit(&p, 1).await.unwrap();
        let (a, b) = tokio::join!(l.settle(&p, 1), second.settle(&p, 1));
        let moved = [a.unwrap(), b.unwrap()]
            .iter()
            .filter(|o| matches!(o, SettleOutcome::Settled { .. }))
            .count();
        assert_eq!(moved, 1, "order p{i}");
    }
    // Every gift debited once: 17 gifts of 10 coins.
    assert_eq!(l.balance(&s).await.unwrap(), 1_000 - 170);
    assert!(l.audit_totals().await.unwrap().is_conserved());
}

/// A retry that finishes a saga an earlier attempt left open (debited, never settled: its
/// runtime died) owes the gift's event, since nobody published it; a retry of a gift settled
/// before owes nothing (its first attempt published it).
async fn a_retry_that_finishes_an_open_saga_owes_its_event(f: Fixture) {
    let (s, host) = (f.user("s"), f.user("host"));
    let room = f.room("r");
    f.ledger.grant(&s, 100, "seed").await.unwrap();
    let left_open = f.order(&s, "q1", &room, 10, std::slice::from_ref(&host));
    f.ledger.begin(&left_open, 1).await.unwrap();
    f.ledger.debit(&left_open, 1).await.unwrap();
    let settled = f.order(&s, "q2", &room, 10, std::slice::from_ref(&host));
    assert!(matches!(
        f.ledger.send_gift(&settled, 1).await.unwrap(),
        GiftOutcome::Settled { .. }
    ));
    for o in [&left_open, &settled] {
        let again = f.ledger.send_gift(o, 1).await.unwrap();
        assert!(
            matches!(
                again,
                GiftOutcome::Duplicate {
                    first: GiftResult::Settled { .. }
                }
            ),
            "{again:?}"
        );
    }
    let owed: Vec<_> = f
        .ledger
        .unpublished_gifts(&room, 0)
        .await
        .unwrap()
        .iter()
        .map(|o| o.gift_id)
        .collect();
    assert_eq!(owed, vec![left_open.gift_id]);
    assert_eq!(f.ledger.balance(&s).await.unwrap(), 80);
    // A second retry finds it settled: owed once, still.
    f.ledger.send_gift(&left_open, 1).await.unwrap();
    assert_eq!(f.ledger.unpublished_gifts(&room, 0).await.unwrap().len(), 1);
}

/// A settled gift whose event its runtime could not publish is recorded once, listed for its
/// room (and the room for the orphan sweep) until exactly one caller takes it. Nothing but a
/// settled gift is ever recorded.
async fn an_owed_gift_event_is_listed_until_one_caller_takes_it(f: Fixture) {
    let sender = f.user("s");
    let host = f.user("h");
    let room = f.room("r");
    let other = f.room("o");
    let to = std::slice::from_ref(&host);
    let l = &f.ledger;
    l.grant(&sender, 100, "seed").await.unwrap();
    let settled = f.order(&sender, "req-1", &room, 10, to);
    assert!(matches!(
        l.send_gift(&settled, 1).await.unwrap(),
        GiftOutcome::Settled { .. }
    ));
    let refused = f.order(&sender, "req-2", &room, 1_000, to);
    assert!(matches!(
        l.send_gift(&refused, 1).await.unwrap(),
        GiftOutcome::InsufficientFunds { .. }
    ));
    let pending = f.order(&sender, "req-3", &other, 10, to);
    l.begin(&pending, 1).await.unwrap();
    assert!(owed(l, &room, 0).await.is_empty());
    assert!(!swept(l, &room, 0).await);

    let unknown = Uuid::new_v4();
    for id in [
        settled.gift_id,
        settled.gift_id,
        refused.gift_id,
        pending.gift_id,
        unknown,
    ] {
        l.mark_unpublished(id).await.unwrap();
    }
    assert_eq!(
        owed(l, &room, 0).await,
        vec![settled.clone()],
        "only the settled gift, once"
    );
    assert!(owed(l, &other, 0).await.is_empty());
    assert!(
        owed(l, &room, 60_000).await.is_empty(),
        "recorded under a minute ago"
    );
    assert!(swept(l, &room, 0).await);
    assert!(!swept(l, &room, 60_000).await);

    let id = settled.gift_id;
    assert!(
        !l.take_unpublished(&other, id).await.unwrap(),
        "another room's"
    );
    assert!(l.take_unpublished(&room, id).await.unwrap());
    assert!(
        !l.take_unpublished(&room, id).await.unwrap(),
        "taken already"
    );
    assert!(owed(l, &room, 0).await.is_empty());
    assert!(!swept(l, &room, 0).await);

    // Two nodes take the same record at once: one of them gets it.
    l.mark_unpublished(id).await.unwrap();
    let second = f.second_handle().await;
    let (a, b) = tokio::join!(
        l.take_unpublished(&room, id),
        second.take_unpublished(&room, id)
    );
    assert!(a.unwrap() ^ b.unwrap(), "taken by exactly one");
    // The money is where the settled gift put it.
    assert_eq!(l.balance(&sender).await.unwrap(), 90);
}

/// The room's owed gift events recorded at least `min_age_ms` ago.
async fn owed(l: &Ledger, room: &RoomId, min_age_ms: i64) -> Vec<GiftOrder> {
    l.unpublished_gifts(room, min_age_ms).await.unwrap()
}

/// Whether the orphan sweep's list (rooms with work at least `min_age_ms` old) holds `room`.
async fn swept(l: &Ledger, room: &RoomId, min_age_ms: i64) -> bool {
    l.rooms_with_open_sagas(min_age_ms)
        .await
        .unwrap()
        .contains(room)
}
