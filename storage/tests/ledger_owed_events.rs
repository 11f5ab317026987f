//! Conformance of owed gift events on every ledger engine (SQLite and PostgreSQL always,
//! Scylla when `CHORUS_SCYLLA_NODES` is set): a settled gift whose event its runtime could not
//! publish is recorded once and listed for its room until exactly one caller takes it, and a
//! retry that finishes a saga left open owes its event. The rest of the ledger's contract is
//! in `ledger_conformance.rs`.

// The checks live in helper fns shared by every engine, not in #[test] fns themselves.
#![allow(clippy::unwrap_used)]

use protocol::RoomId;
use storage::ledger::{GiftOrder, GiftOutcome, GiftResult, Ledger};
use uuid::Uuid;

#[macro_use]
#[path = "support/ledger.rs"]
mod fixture;
use fixture::{Fixture, postgres, scylla, sqlite};

conformance!(
    an_owed_gift_event_is_listed_until_one_caller_takes_it,
    a_retry_that_finishes_an_open_saga_owes_its_event,
);

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
