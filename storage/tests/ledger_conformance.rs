//! One conformance suite for every ledger engine: SQLite and PostgreSQL always (a throwaway
//! server per test, started from the installed binaries: a missing PostgreSQL fails the
//! tests); Scylla when `CHORUS_SCYLLA_NODES` (e.g. `127.0.0.1:9042`) names a reachable cluster.
//! Its subjects kept in files of their own: owed gift events (`ledger_owed_events.rs`), guards
//! and standings (`guard_conformance.rs`), wallets (`wallet_conformance.rs`), app boards
//! (`app_rank_conformance.rs`); the throughput benchmark is `ledger_bench.rs`.

// The checks live in helper fns shared by both engines, not in #[test] fns themselves.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;

use protocol::{RoomId, UserId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use storage::StorageError;
use storage::ledger::{
    Board, DebitOutcome, EntryKind, FenceInstall, GiftOrder, GiftOutcome, GiftResult, LuckyPrize,
    Period, RecoveryOutcome, SagaState, VoidOutcome, VoidReason, saga,
};

use crate::support::ledger as fixture;
use fixture::{Fixture, postgres, scylla, sqlite};

conformance!(
    concurrent_gifts_never_overdraw,
    same_request_debits_once,
    a_request_id_reused_elsewhere_is_refused_and_changes_nothing,
    grants_are_idempotent_by_key,
    stale_fence_is_rejected_and_changes_nothing,
    a_fence_installed_by_another_node_fences_this_ones_writes,
    crash_between_debit_and_settle_is_settled_by_owner,
    non_owner_recovery_never_voids_a_debited_saga,
    owner_voids_only_undebited_sagas,
    money_is_conserved_over_random_gifts,
    leaderboards_rank_settled_gifts,
    rewards_are_idempotent_by_key_and_apart_from_grants,
);

async fn concurrent_gifts_never_overdraw(f: Fixture) {
    let sender = f.user("rich");
    let host = f.user("host");
    let room = f.room("r");
    const PRICE: i64 = 7;
    f.ledger.grant(&sender, PRICE * 10, "seed").await.unwrap();
    let ledger = Arc::new(f.ledger.clone());
    let mut tasks = Vec::new();
    for i in 0..20 {
        let order = f.order(
            &sender,
            &format!("req-{i}"),
            &room,
            PRICE,
            std::slice::from_ref(&host),
        );
        let ledger = Arc::clone(&ledger);
        tasks.push(tokio::spawn(
            async move { ledger.send_gift(&order, 1).await },
        ));
    }
    let (mut settled, mut nsf) = (0, 0);
    for t in tasks {
        match t.await.unwrap().unwrap() {
            GiftOutcome::Settled { balance, .. } => {
                assert!(balance >= 0);
                settled += 1;
            }
            GiftOutcome::InsufficientFunds { balance } => {
                assert!((0..PRICE).contains(&balance));
                nsf += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((settled, nsf), (10, 10));
    assert_eq!(f.ledger.balance(&sender).await.unwrap(), 0);
    assert!(f.ledger.audit_totals().await.unwrap().is_conserved());
}

async fn same_request_debits_once(f: Fixture) {
    let sender = f.user("s");
    let host = f.user("h");
    let room = f.room("r");
    f.ledger.grant(&sender, 100, "seed").await.unwrap();
    let mut order = f.order(&sender, "req-1", &room, 30, std::slice::from_ref(&host));
    order.request = 0x5eed;
    let first = f.ledger.send_gift(&order, 1).await.unwrap();
    let GiftOutcome::Settled { order_id, balance } = first else {
        panic!("first send: {first:?}");
    };
    assert_eq!(order_id, order.gift_id);
    assert_eq!(balance, 70);
    // The sender's wallet holds the debit under the gift id; nobody else's does.
    assert_eq!(
        f.ledger.wallet_entry(&sender, order.gift_id).await.unwrap(),
        Some(EntryKind::Debit)
    );
    assert_eq!(
        f.ledger.wallet_entry(&host, order.gift_id).await.unwrap(),
        None
    );
    // The request's fingerprint is stored with the order: a reuse of the request id for
    // another request can be told from a retry.
    let stored = f.ledger.saga(order.gift_id).await.unwrap().unwrap();
    assert_eq!(stored.order.request, 0x5eed);
    let again = f.ledger.send_gift(&order, 1).await.unwrap();
    assert_eq!(
        again,
        GiftOutcome::Duplicate {
            first: GiftResult::Settled {
                order_id,
                balance: 70
            }
        }
    );
    // Concurrent retries of one new request: still one debit.
    let order2 = f.order(&sender, "req-2", &room, 30, std::slice::from_ref(&host));
    let (a, b) = tokio::join!(
        f.ledger.send_gift(&order2, 1),
        f.ledger.send_gift(&order2, 1)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.result(), b.result());
    assert!(
        matches!(a, GiftOutcome::Duplicate { .. }) ^ matches!(b, GiftOutcome::Duplicate { .. })
    );
    assert_eq!(f.ledger.balance(&sender).await.unwrap(), 40);
    assert_eq!(f.ledger.earnings(&host).await.unwrap(), 30);
    // A request refused for funds stays refused: its id is spent.
    let big = f.order(&sender, "req-3", &room, 1_000, std::slice::from_ref(&host));
    let nsf = f.ledger.send_gift(&big, 1).await.unwrap();
    assert_eq!(nsf, GiftOutcome::InsufficientFunds { balance: 40 });
    assert_eq!(
        f.ledger.wallet_entry(&sender, big.gift_id).await.unwrap(),
        Some(EntryKind::Void)
    );
    assert_eq!(
        f.ledger.send_gift(&big, 1).await.unwrap(),
        GiftOutcome::Duplicate {
            first: GiftResult::InsufficientFunds { balance: 40 }
        }
    );
    // Coins that arrive later do not revive it, and its retry moves no coin.
    f.ledger.grant(&sender, 2_000, "top-up").await.unwrap();
    assert_eq!(
        f.ledger.send_gift(&big, 1).await.unwrap(),
        GiftOutcome::Duplicate {
            first: GiftResult::InsufficientFunds { balance: 40 }
        }
    );
    assert_eq!(f.ledger.balance(&sender).await.unwrap(), 2_040);
    assert_eq!(f.ledger.earnings(&host).await.unwrap(), 30);
    assert!(f.ledger.audit_totals().await.unwrap().is_conserved());
}

/// A client may use one request id in two rooms (the gift id is the sender's request id): the
/// second room's send is refused as `Reused` before any fence is compared, so it neither looks
/// like a newer owner's write (the second room's fence below the first's is no `Fenced`) nor
/// touches the first room's saga. The same holds for another gift under one id in one room.
async fn a_request_id_reused_elsewhere_is_refused_and_changes_nothing(f: Fixture) {
    let sender = f.user("s");
    let host = f.user("h");
    let (a, b) = (f.room("a"), f.room("b"));
    let to = std::slice::from_ref(&host);
    f.ledger.grant(&sender, 100, "seed").await.unwrap();
    f.ledger.install_fence(&a, 7, "n1/a").await.unwrap();
    f.ledger.install_fence(&b, 2, "n1/b").await.unwrap();
    let mut in_a = f.order(&sender, "req-1", &a, 10, to);
    in_a.request = 0xa;
    assert!(matches!(
        f.ledger.send_gift(&in_a, 7).await.unwrap(),
        GiftOutcome::Settled { balance: 90, .. }
    ));
    let mut in_b = f.order(&sender, "req-1", &b, 50, to);
    in_b.request = 0xb;
    for fence in [2, 9] {
        let err = f.ledger.send_gift(&in_b, fence).await.unwrap_err();
        assert!(matches!(err, StorageError::Reused { .. }), "{err:?}");
        assert_eq!(err.code(), protocol::ErrorCode::IdempotencyConflict);
        let err = f.ledger.begin(&in_b, fence).await.unwrap_err();
        assert!(matches!(err, StorageError::Reused { .. }), "{err:?}");
    }
    // Another gift under the same id in room a: refused too; a retry of the first is not.
    let mut other = f.order(&sender, "req-1", &a, 20, to);
    other.request = 0xc;
    let err = f.ledger.send_gift(&other, 7).await.unwrap_err();
    assert!(matches!(err, StorageError::Reused { .. }), "{err:?}");
    assert!(matches!(
        f.ledger.send_gift(&in_a, 7).await.unwrap(),
        GiftOutcome::Duplicate { .. }
    ));
    let stored = f.ledger.saga(in_a.gift_id).await.unwrap().unwrap();
    assert_eq!((stored.order.room, stored.fence), (a.clone(), 7));
    assert_eq!(f.ledger.balance(&sender).await.unwrap(), 90);
    assert_eq!(f.ledger.earnings(&host).await.unwrap(), 5);
    // Room a's owner still writes with its fence: nothing raised it.
    let next = f.order(&sender, "req-2", &a, 10, to);
    assert!(matches!(
        f.ledger.send_gift(&next, 7).await.unwrap(),
        GiftOutcome::Settled { balance: 80, .. }
    ));
    assert!(f.ledger.audit_totals().await.unwrap().is_conserved());
}

async fn grants_are_idempotent_by_key(f: Fixture) {
    let u = f.user("u");
    assert_eq!(f.ledger.balance(&u).await.unwrap(), 0);
    let g = f.ledger.grant(&u, 50, "k1").await.unwrap();
    assert!(g.applied);
    assert_eq!(g.balance, 50);
    assert_eq!(g.amount, 50);
    let again = f.ledger.grant(&u, 50, "k1").await.unwrap();
    assert!(!again.applied);
    assert_eq!(again.balance, 50);
    // The key's first amount comes back, so a reuse for another amount can be told apart.
    let reused = f.ledger.grant(&u, 70, "k1").await.unwrap();
    assert_eq!(
        (reused.applied, reused.amount, reused.balance),
        (false, 50, 50)
    );
    let other = f.ledger.grant(&u, 5, "k2").await.unwrap();
    assert_eq!(other.balance, 55);
    assert_eq!(f.ledger.balance(&u).await.unwrap(), 55);
    assert!(f.ledger.grant(&u, 0, "k3").await.is_err());
}

/// A room rocket's reward: paid once per key however often it is retried (a crash, a new
/// owner), its keys never taken by an admin grant's, and the books still close.
async fn rewards_are_idempotent_by_key_and_apart_from_grants(f: Fixture) {
    let u = f.user("winner");
    let key = "rocket:room-1:1:winner";
    let first = f.ledger.rocket_reward(&u, 40, key).await.unwrap();
    assert_eq!((first.applied, first.amount, first.balance), (true, 40, 40));
    for _ in 0..3 {
        let again = f.ledger.rocket_reward(&u, 40, key).await.unwrap();
        assert_eq!((again.applied, again.balance), (false, 40));
    }
    // The same text as an admin grant key is another key: the grant credits too.
    let grant = f.ledger.grant(&u, 5, key).await.unwrap();
    assert_eq!((grant.applied, grant.balance), (true, 45));
    // The next launch's key pays again.
    let next = f
        .ledger
        .rocket_reward(&u, 10, "rocket:room-1:2:winner")
        .await
        .unwrap();
    assert_eq!(next.balance, 55);
    assert!(
        f.ledger
            .rocket_reward(&u, 0, "rocket:room-1:3:winner")
            .await
            .is_err()
    );
    assert!(f.ledger.audit_totals().await.unwrap().is_conserved());
}

async fn stale_fence_is_rejected_and_changes_nothing(f: Fixture) {
    let sender = f.user("s");
    let host = f.user("h");
    let room = f.room("r");
    f.ledger.grant(&sender, 100, "seed").await.unwrap();
    // The room's first fence says so (its owner has no saga to recover); no later one does.
    assert_eq!(
        f.ledger.install_fence(&room, 5, "n1/a").await.unwrap(),
        FenceInstall::First
    );
    assert_eq!(
        f.ledger.install_fence(&room, 5, "n1/a").await.unwrap(),
        FenceInstall::Installed
    );
    assert_eq!(
        f.ledger.install_fence(&room, 4, "n2/b").await.unwrap(),
        FenceInstall::Stale { current: 5 }
    );
    let order = f.order(&sender, "req-1", &room, 10, std::slice::from_ref(&host));
    let err = f.ledger.send_gift(&order, 4).await.unwrap_err();
    assert!(matches!(err, StorageError::Fenced { token: 4 }), "{err:?}");
    assert!(f.ledger.saga(order.gift_id).await.unwrap().is_none());

    f.ledger.begin(&order, 5).await.unwrap();
    assert_eq!(
        f.ledger.install_fence(&room, 6, "n2/b").await.unwrap(),
        FenceInstall::Installed
    );
    let err = f.ledger.debit(&order, 5).await.unwrap_err();
    assert!(matches!(err, StorageError::Fenced { .. }), "{err:?}");
    let rec = f.ledger.saga(order.gift_id).await.unwrap().unwrap();
    assert_eq!(rec.state, SagaState::Pending);
    assert_eq!(f.ledger.balance(&sender).await.unwrap(), 100);
    assert!(matches!(
        f.ledger.void(&order, 5, VoidReason::Cancelled).await,
        Err(StorageError::Fenced { .. })
    ));

    // The new owner moves it; a saga-level fence also stops an older token.
    assert!(matches!(
        f.ledger.debit(&order, 6).await.unwrap(),
        DebitOutcome::Debited { balance: 90 }
    ));
    f.ledger.touch(&order, 8).await.unwrap();
    let err = f.ledger.settle(&order, 7).await.unwrap_err();
    assert!(matches!(err, StorageError::Fenced { token: 7 }), "{err:?}");
    assert_eq!(
        f.ledger.saga(order.gift_id).await.unwrap().unwrap().state,
        SagaState::Debited
    );
    f.ledger.settle(&order, 8).await.unwrap();
    assert_eq!(
        f.ledger.saga(order.gift_id).await.unwrap().unwrap().state,
        SagaState::Settled
    );
}

/// Two nodes on one ledger (a cluster's shards may share one SQLite file): once the new owner
/// installed its fence through its own handle, the old owner's handle refuses the old token,
/// though it checked that room's fence a moment before.
async fn a_fence_installed_by_another_node_fences_this_ones_writes(f: Fixture) {
    let sender = f.user("s");
    let host = f.user("h");
    let room = f.room("r");
    f.ledger.grant(&sender, 100, "seed").await.unwrap();
    f.ledger.install_fence(&room, 5, "n1/a").await.unwrap();
    let first = f.order(&sender, "req-1", &room, 10, std::slice::from_ref(&host));
    assert!(matches!(
        f.ledger.send_gift(&first, 5).await.unwrap(),
        GiftOutcome::Settled { balance: 90, .. }
    ));

    let other = f.second_handle().await;
    assert_eq!(
        other.install_fence(&room, 6, "n2/b").await.unwrap(),
        FenceInstall::Installed
    );
    let late = f.order(&sender, "req-2", &room, 10, std::slice::from_ref(&host));
    let err = f.ledger.send_gift(&late, 5).await.unwrap_err();
    assert!(matches!(err, StorageError::Fenced { token: 5 }), "{err:?}");
    assert!(f.ledger.saga(late.gift_id).await.unwrap().is_none());
    assert_eq!(f.ledger.balance(&sender).await.unwrap(), 90);
    // The new owner's token goes through either handle.
    assert!(matches!(
        f.ledger.send_gift(&late, 6).await.unwrap(),
        GiftOutcome::Settled { balance: 80, .. }
    ));
    let third = f.order(&sender, "req-3", &room, 10, std::slice::from_ref(&host));
    assert!(matches!(
        other.send_gift(&third, 6).await.unwrap(),
        GiftOutcome::Settled { balance: 70, .. }
    ));
}

async fn crash_between_debit_and_settle_is_settled_by_owner(f: Fixture) {
    let sender = f.user("s");
    let hosts = [f.user("h1"), f.user("h2")];
    let room = f.room("r");
    f.ledger.grant(&sender, 100, "seed").await.unwrap();
    let order = f.order(&sender, "req-1", &room, 10, &hosts);
    f.ledger.begin(&order, 1).await.unwrap();
    assert_eq!(
        f.ledger.wallet_entry(&sender, order.gift_id).await.unwrap(),
        None
    );
    assert!(matches!(
        f.ledger.debit(&order, 1).await.unwrap(),
        DebitOutcome::Debited { balance: 80 }
    ));
    assert_eq!(
        f.ledger.wallet_entry(&sender, order.gift_id).await.unwrap(),
        Some(EntryKind::Debit)
    );
    // A second debit finds the claim and changes nothing.
    assert!(matches!(
        f.ledger.debit(&order, 1).await.unwrap(),
        DebitOutcome::Debited { balance: 80 }
    ));
    assert_eq!(f.ledger.balance(&sender).await.unwrap(), 80);
    // "Crash": settle never runs. The next owner installs a higher fence and recovers.
    f.ledger.install_fence(&room, 2, "n2/b").await.unwrap();
    // The orphan sweep finds the room (other tests' rooms may be listed too), once the saga
    // is old enough.
    assert!(
        f.ledger
            .rooms_with_open_sagas(0)
            .await
            .unwrap()
            .contains(&room)
    );
    let hour = 3_600_000;
    assert!(
        !f.ledger
            .rooms_with_open_sagas(hour)
            .await
            .unwrap()
            .contains(&room)
    );
    let pending = f.ledger.pending_sagas(&room, 0).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].state, SagaState::Debited);
    let recovered = &pending[0].order;
    assert_eq!(
        f.ledger.recover(recovered, 2, true).await.unwrap(),
        RecoveryOutcome::Settled
    );
    assert_eq!(
        f.ledger.recover(recovered, 2, true).await.unwrap(),
        RecoveryOutcome::AlreadyTerminal(SagaState::Settled)
    );
    assert!(f.ledger.pending_sagas(&room, 0).await.unwrap().is_empty());
    assert!(
        !f.ledger
            .rooms_with_open_sagas(0)
            .await
            .unwrap()
            .contains(&room)
    );
    assert_eq!(f.ledger.balance(&sender).await.unwrap(), 80);
    for h in &hosts {
        assert_eq!(f.ledger.earnings(h).await.unwrap(), 5);
    }
    // The old owner's late settle is fenced out; a client retry sees the settled result.
    assert!(matches!(
        f.ledger.settle(&order, 1).await,
        Err(StorageError::Fenced { .. })
    ));
    assert!(matches!(
        f.ledger.send_gift(&order, 2).await.unwrap(),
        GiftOutcome::Duplicate {
            first: GiftResult::Settled { balance: 80, .. }
        }
    ));
    assert!(f.ledger.audit_totals().await.unwrap().is_conserved());
}

/// The production bug: a non-owner's recovery marked debited sagas "compensated".
async fn non_owner_recovery_never_voids_a_debited_saga(f: Fixture) {
    let sender = f.user("s");
    let host = f.user("h");
    let room = f.room("r");
    f.ledger.grant(&sender, 100, "seed").await.unwrap();
    f.ledger.install_fence(&room, 3, "owner").await.unwrap();
    let order = f.order(&sender, "req-1", &room, 25, std::slice::from_ref(&host));
    f.ledger.begin(&order, 3).await.unwrap();
    f.ledger.debit(&order, 3).await.unwrap();

    // The non-owner (stale fence 2, or even a guessed higher one) releases and writes nothing.
    for fence in [2, 3, 9] {
        assert_eq!(
            f.ledger.recover(&order, fence, false).await.unwrap(),
            RecoveryOutcome::Released
        );
    }
    let report = saga::recover_room(&f.ledger, &room, 2, false, 0)
        .await
        .unwrap();
    assert_eq!((report.released, report.voided, report.settled), (1, 0, 0));
    let rec = f.ledger.saga(order.gift_id).await.unwrap().unwrap();
    assert_eq!(rec.state, SagaState::Debited);
    assert_eq!(rec.fence, 3);
    assert_eq!(f.ledger.balance(&sender).await.unwrap(), 75);

    // An owner with a stale token is fenced, not terminal.
    assert!(matches!(
        f.ledger.recover(&order, 2, true).await,
        Err(StorageError::Fenced { .. })
    ));
    assert_eq!(
        f.ledger.saga(order.gift_id).await.unwrap().unwrap().state,
        SagaState::Debited
    );

    // Even an owner's void loses to the debit that holds the key.
    assert_eq!(
        f.ledger
            .void(&order, 3, VoidReason::Recovered)
            .await
            .unwrap(),
        VoidOutcome::Debited
    );
    let report = saga::recover_room(&f.ledger, &room, 3, true, 0)
        .await
        .unwrap();
    assert_eq!((report.settled, report.voided), (1, 0));
    assert_eq!(
        f.ledger.saga(order.gift_id).await.unwrap().unwrap().state,
        SagaState::Settled
    );
    assert_eq!(f.ledger.balance(&sender).await.unwrap(), 75);
    assert_eq!(f.ledger.earnings(&host).await.unwrap(), 12);
    assert!(f.ledger.audit_totals().await.unwrap().is_conserved());
}

async fn owner_voids_only_undebited_sagas(f: Fixture) {
    let sender = f.user("s");
    let host = f.user("h");
    let room = f.room("r");
    f.ledger.grant(&sender, 100, "seed").await.unwrap();
    let order = f.order(&sender, "req-1", &room, 40, std::slice::from_ref(&host));
    f.ledger.begin(&order, 1).await.unwrap();
    assert_eq!(
        f.ledger.recover(&order, 1, false).await.unwrap(),
        RecoveryOutcome::Released
    );
    assert_eq!(
        f.ledger.saga(order.gift_id).await.unwrap().unwrap().state,
        SagaState::Pending
    );
    assert_eq!(
        f.ledger.recover(&order, 1, true).await.unwrap(),
        RecoveryOutcome::Voided
    );
    assert_eq!(
        f.ledger.wallet_entry(&sender, order.gift_id).await.unwrap(),
        Some(EntryKind::Void)
    );
    // The void claim holds the key: the late debit cannot happen.
    assert_eq!(
        f.ledger.debit(&order, 1).await.unwrap(),
        DebitOutcome::Voided
    );
    assert_eq!(f.ledger.balance(&sender).await.unwrap(), 100);
    assert_eq!(
        f.ledger.send_gift(&order, 1).await.unwrap(),
        GiftOutcome::Duplicate {
            first: GiftResult::Voided
        }
    );
}

async fn money_is_conserved_over_random_gifts(f: Fixture) {
    const USERS: usize = 16;
    const GIFTS: usize = 3_000;
    const CONCURRENCY: usize = 64;
    let users: Vec<UserId> = (0..USERS).map(|i| f.user(&format!("u{i}"))).collect();
    let rooms = [f.room("a"), f.room("b"), f.room("c")];
    let before = f.ledger.audit_totals().await.unwrap();
    for (i, u) in users.iter().enumerate() {
        f.ledger
            .grant(u, 5_000 + 100 * i as i64, "seed")
            .await
            .unwrap();
    }
    let mut rng = StdRng::seed_from_u64(7);
    let mut orders: Vec<GiftOrder> = Vec::with_capacity(GIFTS);
    for i in 0..GIFTS {
        // Every tenth order is a client retry of the one before (same request, same content).
        if i % 10 == 9 {
            orders.push(orders[i - 1].clone());
            continue;
        }
        let s = rng.random_range(0..USERS);
        let n = rng.random_range(1..=3);
        let mut to: Vec<UserId> = Vec::new();
        while to.len() < n {
            let r = users[rng.random_range(0..USERS)].clone();
            if !to.contains(&r) {
                to.push(r);
            }
        }
        // Every tenth order repeats an earlier request id (a client retry).
        let req = if i % 10 == 9 {
            format!("req-{}", i - 1)
        } else {
            format!("req-{i}")
        };
        let mut o = f.order(
            &users[s],
            &req,
            &rooms[rng.random_range(0..rooms.len())],
            rng.random_range(1..=60),
            &to,
        );
        o.count = rng.random_range(1..=3);
        o.share_bp = rng.random_range(0..=10_000);
        if rng.random_bool(0.1) {
            let multiplier = rng.random_range(1..=50);
            o.lucky = Some(LuckyPrize {
                multiplier,
                coins: o.unit_price * i64::from(multiplier),
            });
        }
        orders.push(o);
    }
    let ledger = Arc::new(f.ledger.clone());
    let mut expected_earnings: HashMap<UserId, i64> = HashMap::new();
    let mut settled_ids = std::collections::HashSet::new();
    for chunk in orders.chunks(CONCURRENCY) {
        let mut tasks = Vec::new();
        for o in chunk {
            let (ledger, o) = (Arc::clone(&ledger), o.clone());
            tasks.push(tokio::spawn(
                async move { (ledger.send_gift(&o, 1).await, o) },
            ));
        }
        for t in tasks {
            let (out, o) = t.await.unwrap();
            let out = out.unwrap();
            let settled = matches!(out.result(), GiftResult::Settled { .. });
            if settled && settled_ids.insert(o.gift_id) {
                for r in &o.recipients {
                    *expected_earnings.entry(r.clone()).or_default() += o.earnings_per_recipient();
                }
            }
        }
    }
    assert!(settled_ids.len() > GIFTS / 2, "most gifts should settle");
    let after = f.ledger.audit_totals().await.unwrap();
    assert!(after.is_conserved(), "{after:?}");
    let granted: i64 = (0..USERS as i64).map(|i| 5_000 + 100 * i).sum();
    assert_eq!(after.granted - before.granted, granted);
    for u in &users {
        assert_eq!(
            f.ledger.earnings(u).await.unwrap(),
            expected_earnings.get(u).copied().unwrap_or(0),
            "{u}"
        );
        assert!(f.ledger.balance(u).await.unwrap() >= 0);
    }
}

async fn leaderboards_rank_settled_gifts(f: Fixture) {
    let [a, b, c, h1, h2] = ["a", "b", "c", "h1", "h2"].map(|n| f.user(n));
    let room = f.room("r");
    let other = f.room("other");
    for u in [&a, &b, &c] {
        f.ledger.grant(u, 1_000, "seed").await.unwrap();
    }
    let send = |s: &UserId, req: &str, unit: i64, to: &[UserId], room: &RoomId| {
        let o = f.order(s, req, room, unit, to);
        let l = f.ledger.clone();
        async move { l.send_gift(&o, 1).await.unwrap() }
    };
    send(&a, "1", 10, std::slice::from_ref(&h1), &room).await;
    send(&b, "1", 30, &[h1.clone(), h2.clone()], &room).await; // b spends 60
    send(&c, "1", 20, std::slice::from_ref(&h2), &room).await;
    send(&a, "2", 15, std::slice::from_ref(&h2), &room).await; // a spends 25
    send(&c, "2", 500, std::slice::from_ref(&h1), &other).await; // other room: not counted
    send(&a, "3", 5_000, std::slice::from_ref(&h1), &room).await; // insufficient funds: not counted
    // Accepted eight days ago: before this week's Monday, so in the all-time boards only.
    let mut old = f.order(&c, "old", &room, 100, std::slice::from_ref(&h1));
    old.created_ms -= 8 * 86_400_000;
    f.ledger.send_gift(&old, 1).await.unwrap();

    for period in [Period::Day, Period::Week] {
        let senders = f
            .ledger
            .leaderboard(&room, Board::Senders, period, 10)
            .await
            .unwrap();
        assert_eq!(
            senders,
            vec![(b.clone(), 60), (a.clone(), 25), (c.clone(), 20)],
            "{period:?}"
        );
        let receivers = f
            .ledger
            .leaderboard(&room, Board::Receivers, period, 10)
            .await
            .unwrap();
        assert_eq!(
            receivers,
            vec![(h2.clone(), 65), (h1.clone(), 40)],
            "{period:?}"
        );
    }
    let all = |board| f.ledger.leaderboard(&room, board, Period::All, 10);
    assert_eq!(
        all(Board::Senders).await.unwrap(),
        vec![(c.clone(), 120), (b.clone(), 60), (a.clone(), 25)]
    );
    assert_eq!(
        all(Board::Receivers).await.unwrap(),
        vec![(h1.clone(), 140), (h2.clone(), 65)]
    );
    let top = f
        .ledger
        .leaderboard(&room, Board::Senders, Period::All, 1)
        .await
        .unwrap();
    assert_eq!(top, vec![(c.clone(), 120)]);
    assert!(
        f.ledger
            .leaderboard(&f.room("empty"), Board::Senders, Period::All, 5)
            .await
            .unwrap()
            .is_empty()
    );
}
