//! Lease contract against a real redis-server and against the in-process engine (paused time).
//!
//! The same contract functions run on both engines; only the way time passes differs: Redis
//! TTLs run on the wall clock, the in-process engine on tokio's paused clock.
// Test helpers outside `#[test]` fns are test code too (clippy's allow-unwrap-in-tests skips them).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use kit::redis::RedisServer;
use protocol::{NodeId, RoomId};
use storage::StorageError;
use storage::lease::{ClaimOutcome, LeaseOwner, LeaseStore, RENEW_CHUNK_MAX};
use storage::redis::Redis;
use tokio::time::Instant;

use crate::support::owner as support;
use support::owner;

use crate::support::admin as admin_support;
use admin_support::{admin, command_calls};

/// Lease TTL for tests that never let a lease expire.
const LONG_TTL: Duration = Duration::from_secs(30);
/// Lease TTL for tests that wait for expiry: short, so Redis tests stay fast.
const SHORT_TTL: Duration = Duration::from_millis(200);
/// Lease TTL of the bulk claims: long enough that claiming thousands one by one on a busy
/// machine never lets the first ones expire, and shorter than [`LONG_TTL`].
const BULK_TTL: Duration = Duration::from_secs(10);
/// Upper bound on waiting for anything that should happen within a TTL or a reconnect.
const WAIT_LIMIT: Duration = Duration::from_secs(5);
/// Pause between polls of a real Redis.
const POLL: Duration = Duration::from_millis(10);

#[derive(Clone, Copy, PartialEq)]
enum Clock {
    /// tokio's clock is paused: time only moves by `advance`.
    Paused,
    /// Real Redis: time is the wall clock.
    Real,
}

fn acquired(outcome: ClaimOutcome) -> u64 {
    match outcome {
        ClaimOutcome::Acquired { fence } => fence,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// Lets `ttl` pass without renewing, then waits until the lease of `room` is gone. `claimed`
/// is an instant taken before the claim was sent: on the wall clock the lease was set after
/// it, so it may not expire less than `ttl` after it.
async fn let_expire(
    clock: Clock,
    store: &LeaseStore,
    room: &RoomId,
    ttl: Duration,
    claimed: Instant,
) {
    match clock {
        // No time passes during an in-process claim on the paused clock: now is the claim's
        // instant, and the lease must hold until exactly `ttl` later.
        Clock::Paused => {
            tokio::time::advance(ttl - Duration::from_millis(1)).await;
            assert!(store.holder(room).await.unwrap().is_some(), "expired early");
            tokio::time::advance(Duration::from_millis(1)).await;
            assert_eq!(store.holder(room).await.unwrap(), None);
        }
        Clock::Real => loop {
            if store.holder(room).await.unwrap().is_none() {
                // Redis expiry has millisecond precision; allow 1 ms of rounding.
                assert!(
                    claimed.elapsed() + Duration::from_millis(1) >= ttl,
                    "expired early"
                );
                return;
            }
            assert!(claimed.elapsed() < WAIT_LIMIT, "lease did not expire");
            tokio::time::sleep(POLL).await;
        },
    }
}

// ---------- contract, shared by both engines ----------

async fn claim_and_conflict(store: LeaseStore) {
    let room = RoomId::from("conflict");
    let (a, b) = (owner("a"), owner("b"));
    let fa = acquired(store.claim(&room, &a, LONG_TTL).await.unwrap());
    assert_eq!(
        store.claim(&room, &b, LONG_TTL).await.unwrap(),
        ClaimOutcome::HeldBy {
            owner: a.to_string(),
            fence: fa
        }
    );
    // Re-claiming by the holder keeps its token.
    assert_eq!(
        acquired(store.claim(&room, &a, LONG_TTL).await.unwrap()),
        fa
    );
    assert_eq!(
        store.holder(&room).await.unwrap(),
        Some((a.to_string(), fa))
    );
    // A restarted process (same node, new boot id) is another owner.
    let a_again = LeaseOwner::new(&NodeId::from("a"), "boot-2");
    assert!(matches!(
        store.claim(&room, &a_again, LONG_TTL).await.unwrap(),
        ClaimOutcome::HeldBy { .. }
    ));
}

/// A runtime that stopped without releasing its lease (past its deadline) leaves the lease
/// live under its token; the next runtime of the same process passes that token as the floor
/// (it is the room's durable high-water mark) and must get a new one, or it would number its
/// events in the old epoch again.
async fn a_holder_whose_token_wrote_gets_a_new_one(store: LeaseStore) {
    let room = RoomId::from("reclaim");
    let (a, b) = (owner("a"), owner("b"));
    let f1 = acquired(store.claim(&room, &a, LONG_TTL).await.unwrap());
    // A retried claim (the floor below the token: nothing wrote with it) keeps the token.
    assert_eq!(
        acquired(
            store
                .claim_above(&room, &a, LONG_TTL, f1 - 1)
                .await
                .unwrap()
        ),
        f1
    );
    let f2 = acquired(store.claim_above(&room, &a, LONG_TTL, f1).await.unwrap());
    assert!(
        f2 > f1,
        "{f2} > {f1}: a token that wrote is never handed out again"
    );
    assert_eq!(
        store.holder(&room).await.unwrap(),
        Some((a.to_string(), f2))
    );
    assert_eq!(
        store
            .renew(&a, &[(room.clone(), f1), (room.clone(), f2)], LONG_TTL)
            .await
            .unwrap(),
        vec![false, true]
    );
    // Another owner still finds the lease held.
    assert_eq!(
        store.claim_above(&room, &b, LONG_TTL, f2).await.unwrap(),
        ClaimOutcome::HeldBy {
            owner: a.to_string(),
            fence: f2
        }
    );
}

async fn fence_strictly_increases(clock: Clock, store: LeaseStore) {
    let room = RoomId::from("fences");
    let (a, b, c) = (owner("a"), owner("b"), owner("c"));
    let f1 = acquired(store.claim(&room, &a, LONG_TTL).await.unwrap());
    assert!(store.release(&room, &a, f1).await.unwrap());
    let claimed = Instant::now();
    let f2 = acquired(store.claim(&room, &b, SHORT_TTL).await.unwrap());
    assert!(f2 > f1, "{f2} > {f1} across owners");
    let_expire(clock, &store, &room, SHORT_TTL, claimed).await;
    // The expired holder cannot renew its old token.
    assert_eq!(
        store
            .renew(&b, &[(room.clone(), f2)], LONG_TTL)
            .await
            .unwrap(),
        vec![false]
    );
    let f3 = acquired(store.claim(&room, &c, LONG_TTL).await.unwrap());
    assert!(f3 > f2, "{f3} > {f2} across expiry");
    // The same owner coming back after expiry also gets a new token.
    assert!(store.release(&room, &c, f3).await.unwrap());
    let f4 = acquired(store.claim(&room, &b, LONG_TTL).await.unwrap());
    assert!(f4 > f3);
    // A floor lifts the next token above a durable high-water mark.
    assert!(store.release(&room, &b, f4).await.unwrap());
    let floor = f4 + 100;
    let f5 = acquired(store.claim_above(&room, &a, LONG_TTL, floor).await.unwrap());
    assert_eq!(f5, floor + 1);
}

async fn renew_keeps_and_reports(clock: Clock, store: LeaseStore) {
    let (a, b) = (owner("a"), owner("b"));
    let mine = RoomId::from("renew-mine");
    let theirs = RoomId::from("renew-theirs");
    let fm = acquired(store.claim(&mine, &a, SHORT_TTL).await.unwrap());
    let ft = acquired(store.claim(&theirs, &b, LONG_TTL).await.unwrap());
    let batch = [
        (mine.clone(), fm),
        (theirs.clone(), ft),               // held by b
        (mine.clone(), fm + 1),             // wrong token
        (RoomId::from("never-claimed"), 1), // no lease at all
    ];
    // Renewing with a long TTL keeps the short lease alive well past its first TTL.
    assert_eq!(
        store.renew(&a, &batch, LONG_TTL).await.unwrap(),
        vec![true, false, false, false]
    );
    match clock {
        Clock::Paused => tokio::time::advance(SHORT_TTL * 3).await,
        Clock::Real => tokio::time::sleep(SHORT_TTL * 2).await,
    }
    assert_eq!(
        store.holder(&mine).await.unwrap(),
        Some((a.to_string(), fm))
    );
    assert!(store.renew(&a, &[], LONG_TTL).await.unwrap().is_empty());
}

async fn expiry_without_renewal(clock: Clock, store: LeaseStore) {
    let room = RoomId::from("expiry");
    let a = owner("a");
    let claimed = Instant::now();
    let f = acquired(store.claim(&room, &a, SHORT_TTL).await.unwrap());
    let_expire(clock, &store, &room, SHORT_TTL, claimed).await;
    assert!(!store.release(&room, &a, f).await.unwrap());
    // Someone else can now claim it.
    assert!(f < acquired(store.claim(&room, &owner("b"), LONG_TTL).await.unwrap()));
}

async fn release_only_by_holder(store: LeaseStore) {
    let room = RoomId::from("release");
    let (a, b) = (owner("a"), owner("b"));
    let f = acquired(store.claim(&room, &a, LONG_TTL).await.unwrap());
    assert!(
        !store.release(&room, &b, f).await.unwrap(),
        "not the holder"
    );
    assert!(
        !store.release(&room, &a, f + 1).await.unwrap(),
        "wrong token"
    );
    assert!(!store.release(&RoomId::from("nope"), &a, f).await.unwrap());
    assert_eq!(store.holder(&room).await.unwrap(), Some((a.to_string(), f)));
    assert!(store.release(&room, &a, f).await.unwrap());
    assert_eq!(store.holder(&room).await.unwrap(), None);
    assert!(
        !store.release(&room, &a, f).await.unwrap(),
        "already released"
    );
}

// ---------- in-process engine, paused time ----------

#[tokio::test(start_paused = true)]
async fn in_process_claim_and_conflict() {
    claim_and_conflict(LeaseStore::in_process()).await;
}

#[tokio::test(start_paused = true)]
async fn in_process_a_holder_whose_token_wrote_gets_a_new_one() {
    a_holder_whose_token_wrote_gets_a_new_one(LeaseStore::in_process()).await;
}

#[tokio::test(start_paused = true)]
async fn in_process_fence_strictly_increases() {
    fence_strictly_increases(Clock::Paused, LeaseStore::in_process()).await;
}

#[tokio::test(start_paused = true)]
async fn in_process_renew_keeps_and_reports() {
    renew_keeps_and_reports(Clock::Paused, LeaseStore::in_process()).await;
}

#[tokio::test(start_paused = true)]
async fn in_process_expiry_without_renewal() {
    expiry_without_renewal(Clock::Paused, LeaseStore::in_process()).await;
}

#[tokio::test(start_paused = true)]
async fn in_process_release_only_by_holder() {
    release_only_by_holder(LeaseStore::in_process()).await;
}

#[tokio::test(start_paused = true)]
async fn in_process_renews_many_leases() {
    let store = LeaseStore::in_process();
    let a = owner("a");
    let mut leases = Vec::new();
    for i in 0..1_000 {
        let room = RoomId::from(format!("many-{i}"));
        let f = acquired(store.claim(&room, &a, SHORT_TTL).await.unwrap());
        leases.push((room, f));
    }
    tokio::time::advance(SHORT_TTL / 2).await;
    assert!(
        store
            .renew(&a, &leases, SHORT_TTL)
            .await
            .unwrap()
            .iter()
            .all(|ok| *ok)
    );
    tokio::time::advance(SHORT_TTL * 3 / 4).await;
    // Renewed at TTL/2, so alive at 5/4 TTL after the claims.
    assert!(store.holder(&leases[999].0).await.unwrap().is_some());
}

// ---------- Redis engine, real redis-server ----------

async fn redis_store() -> (RedisServer, Redis, LeaseStore) {
    let server = RedisServer::start().await.unwrap();
    let redis = Redis::connect(&server.url()).await.unwrap();
    let store = LeaseStore::redis(&redis);
    (server, redis, store)
}

#[tokio::test]
async fn redis_claim_and_conflict() {
    let (_server, _redis, store) = redis_store().await;
    claim_and_conflict(store).await;
}

#[tokio::test]
async fn redis_a_holder_whose_token_wrote_gets_a_new_one() {
    let (_server, _redis, store) = redis_store().await;
    a_holder_whose_token_wrote_gets_a_new_one(store).await;
}

#[tokio::test]
async fn redis_fence_strictly_increases() {
    let (_server, _redis, store) = redis_store().await;
    fence_strictly_increases(Clock::Real, store).await;
}

#[tokio::test]
async fn redis_renew_keeps_and_reports() {
    let (_server, _redis, store) = redis_store().await;
    renew_keeps_and_reports(Clock::Real, store).await;
}

#[tokio::test]
async fn redis_expiry_without_renewal() {
    let (_server, _redis, store) = redis_store().await;
    expiry_without_renewal(Clock::Real, store).await;
}

#[tokio::test]
async fn redis_release_only_by_holder() {
    let (_server, _redis, store) = redis_store().await;
    release_only_by_holder(store).await;
}

/// Claims `n` rooms for `a` with [`BULK_TTL`] and returns their (room, token) pairs.
async fn claim_many(
    store: &LeaseStore,
    a: &LeaseOwner,
    prefix: &str,
    n: usize,
) -> Vec<(RoomId, u64)> {
    let mut leases = Vec::with_capacity(n);
    for i in 0..n {
        let room = RoomId::from(format!("{prefix}-{i}"));
        let f = acquired(store.claim(&room, a, BULK_TTL).await.unwrap());
        leases.push((room, f));
    }
    leases
}

/// Renews one lease so the renew script is in Redis's cache (the first call of a script on a
/// fresh server is answered NOSCRIPT, then loaded and retried).
async fn warm_renew_script(store: &LeaseStore, a: &LeaseOwner, lease: &(RoomId, u64)) {
    let ok = store
        .renew(a, std::slice::from_ref(lease), BULK_TTL)
        .await
        .unwrap();
    assert_eq!(ok, vec![true]);
}

#[tokio::test]
async fn redis_renews_1000_leases_in_one_round_trip() {
    let (server, _redis, store) = redis_store().await;
    let mut admin = admin(&server).await;
    let a = owner("a");
    let n = RENEW_CHUNK_MAX;
    let leases = claim_many(&store, &a, "batch", n).await;
    warm_renew_script(&store, &a, &leases[0]).await;

    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .exec_async(&mut admin)
        .await
        .unwrap();
    let t0 = Instant::now();
    let renewed = store.renew(&a, &leases, LONG_TTL).await.unwrap();
    let took = t0.elapsed();
    assert_eq!(renewed.iter().filter(|ok| **ok).count(), n);
    // One EVALSHA carried all 1,000 renewals: one round trip, no fallback to EVAL.
    assert_eq!(command_calls(&mut admin, "evalsha").await, 1);
    assert_eq!(command_calls(&mut admin, "eval").await, 0);
    println!("renewed {n} leases in one round trip in {took:?}");

    // Every lease now has the long TTL (the claims used a shorter one).
    for (room, _) in [&leases[0], &leases[n / 2], &leases[n - 1]] {
        let pttl: i64 = redis::cmd("PTTL")
            .arg(format!("room:{{{room}}}:lease"))
            .query_async(&mut admin)
            .await
            .unwrap();
        assert!(
            pttl > i64::try_from(SHORT_TTL.as_millis()).unwrap(),
            "{pttl}"
        );
    }
}

#[tokio::test]
async fn redis_renews_10000_leases_in_one_pipeline() {
    let (server, _redis, store) = redis_store().await;
    let mut admin = admin(&server).await;
    let a = owner("a");
    let n = 10 * RENEW_CHUNK_MAX;
    let leases = claim_many(&store, &a, "big", n).await;
    warm_renew_script(&store, &a, &leases[0]).await;
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .exec_async(&mut admin)
        .await
        .unwrap();
    let t0 = Instant::now();
    let renewed = store.renew(&a, &leases, LONG_TTL).await.unwrap();
    let took = t0.elapsed();
    assert_eq!(renewed.iter().filter(|ok| **ok).count(), n);
    // Ten script calls of 1,000 leases, sent as one pipeline.
    assert_eq!(command_calls(&mut admin, "evalsha").await, 10);
    println!("renewed {n} leases in one pipeline (10 script calls) in {took:?}");
}

/// Retries `op` while Redis is unavailable (the connection manager reconnects in the
/// background after a restart), up to [`WAIT_LIMIT`].
macro_rules! retry_unavailable {
    ($op:expr) => {{
        let start = Instant::now();
        loop {
            match $op.await {
                Err(e @ StorageError::Unavailable { .. }) => {
                    assert!(start.elapsed() < WAIT_LIMIT, "still unavailable: {e}");
                    tokio::time::sleep(POLL).await;
                }
                other => break other.unwrap(),
            }
        }
    }};
}

#[tokio::test]
async fn redis_survives_script_flush() {
    let (server, _redis, store) = redis_store().await;
    let mut admin = admin(&server).await;
    let a = owner("a");
    let room = RoomId::from("flushed");
    let f = acquired(store.claim(&room, &a, LONG_TTL).await.unwrap());
    let many = claim_many(&store, &a, "flushed-many", RENEW_CHUNK_MAX + 1).await;

    for _ in 0..2 {
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .exec_async(&mut admin)
            .await
            .unwrap();
        // Single-chunk batch path.
        assert_eq!(
            store
                .renew(&a, &[(room.clone(), f)], LONG_TTL)
                .await
                .unwrap(),
            vec![true]
        );
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .exec_async(&mut admin)
            .await
            .unwrap();
        // Multi-chunk pipeline path.
        assert!(
            store
                .renew(&a, &many, LONG_TTL)
                .await
                .unwrap()
                .iter()
                .all(|ok| *ok)
        );
    }
    redis::cmd("SCRIPT")
        .arg("FLUSH")
        .exec_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(acquired(store.claim(&room, &a, LONG_TTL).await.unwrap()), f);
    redis::cmd("SCRIPT")
        .arg("FLUSH")
        .exec_async(&mut admin)
        .await
        .unwrap();
    assert!(store.release(&room, &a, f).await.unwrap());
}

#[tokio::test]
async fn redis_survives_a_restart() {
    let (mut server, _redis, store) = redis_store().await;
    let a = owner("a");
    let room = RoomId::from("restarted");
    let f = acquired(store.claim(&room, &a, LONG_TTL).await.unwrap());
    // Warm the script cache so the restart really empties it.
    assert_eq!(
        store
            .renew(&a, &[(room.clone(), f)], LONG_TTL)
            .await
            .unwrap(),
        vec![true]
    );

    server.restart().await.unwrap();

    // No persistence: the lease is gone, so the renew says "lost" (after the reconnect).
    assert_eq!(
        retry_unavailable!(store.renew(&a, &[(room.clone(), f)], LONG_TTL)),
        vec![false]
    );
    // The fence counter was lost too; the durable floor keeps tokens increasing (2.4).
    let g = acquired(retry_unavailable!(
        store.claim_above(&room, &a, LONG_TTL, f)
    ));
    assert!(g > f);
    assert_eq!(
        retry_unavailable!(store.renew(&a, &[(room.clone(), g)], LONG_TTL)),
        vec![true]
    );
    assert!(retry_unavailable!(store.release(&room, &a, g)));
}

#[tokio::test]
async fn redis_unreachable_is_unavailable() {
    let (server, _redis, store) = redis_store().await;
    let a = owner("a");
    server.pause().unwrap();
    let err = store
        .claim(&RoomId::from("frozen"), &a, LONG_TTL)
        .await
        .unwrap_err();
    server.resume().unwrap();
    assert!(matches!(err, StorageError::Unavailable { .. }), "{err:?}");
    assert!(err.is_retryable());
}
