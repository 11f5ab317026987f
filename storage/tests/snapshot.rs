//! Fenced snapshots and history against a real redis-server and against SQLite (with the
//! in-process lease store on paused time). The same contract runs on both.
// Test helpers outside `#[test]` fns are test code too (clippy's allow-unwrap-in-tests skips them).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use bytes::Bytes;
use kit::redis::RedisServer;
use protocol::RoomId;
use storage::StorageError;
use storage::lease::{ClaimOutcome, InProcessLeases, LeaseStore};
use storage::redis::Redis;
use storage::snapshot::{Change, HistoryEntry, ROOMS_DB_FILE, SnapshotStore, Stored};
use tokio::time::Instant;
use uuid::Uuid;

use crate::support::owner as support;
use support::owner;

use crate::support::admin as admin_support;
use admin_support::{admin, command_calls};

/// Lease TTL for tests that never let a lease expire.
const LONG_TTL: Duration = Duration::from_secs(30);
/// Lease TTL for tests that wait for expiry.
const SHORT_TTL: Duration = Duration::from_millis(200);
/// Upper bound on waiting for a Redis lease to expire.
const WAIT_LIMIT: Duration = Duration::from_secs(5);
/// Pause between polls of a real Redis.
const POLL: Duration = Duration::from_millis(10);

struct Env {
    leases: LeaseStore,
    snaps: SnapshotStore,
    paused: bool,
}

impl Env {
    async fn claim(&self, room: &RoomId, who: &str, ttl: Duration) -> u64 {
        match self.leases.claim(room, &owner(who), ttl).await.unwrap() {
            ClaimOutcome::Acquired { fence } => fence,
            other => panic!("expected Acquired, got {other:?}"),
        }
    }

    async fn let_expire(&self, room: &RoomId, ttl: Duration) {
        if self.paused {
            tokio::time::advance(ttl).await;
            assert_eq!(self.leases.holder(room).await.unwrap(), None);
            return;
        }
        let start = Instant::now();
        while self.leases.holder(room).await.unwrap().is_some() {
            assert!(start.elapsed() < WAIT_LIMIT, "lease did not expire");
            tokio::time::sleep(POLL).await;
        }
    }
}

fn fenced(r: Result<(), StorageError>, token: u64) {
    match r {
        Err(StorageError::Fenced { token: t }) => assert_eq!(t, token),
        other => panic!("expected Fenced({token}), got {other:?}"),
    }
}

/// A change of `entries` and `state` that closes no gift.
fn change<'a>(entries: &'a [(u64, &'a [u8])], state: Option<&'a [u8]>) -> Change<'a> {
    Change {
        entries,
        state,
        closed: &[],
        more_waiting: false,
    }
}

// ---------- contract ----------

async fn save_and_load(env: Env) {
    let room = RoomId::from("save");
    assert_eq!(env.snaps.load(&room).await.unwrap(), None);
    assert!(!env.snaps.exists(&room).await.unwrap());
    let f = env.claim(&room, "a", LONG_TTL).await;
    // A claim alone makes no room.
    assert!(!env.snaps.exists(&room).await.unwrap());
    env.snaps.save(&room, f, b"v1").await.unwrap();
    assert!(env.snaps.exists(&room).await.unwrap());
    env.snaps.save(&room, f, b"v2").await.unwrap();
    assert_eq!(
        env.snaps.load(&room).await.unwrap(),
        Some(Stored {
            fence: f,
            bytes: Bytes::from_static(b"v2")
        })
    );
    // Empty state and binary bytes round-trip.
    env.snaps.save(&room, f, &[0, 255, 0]).await.unwrap();
    assert_eq!(
        env.snaps.load(&room).await.unwrap().unwrap().bytes,
        Bytes::from_static(&[0, 255, 0])
    );
}

async fn stale_token_is_rejected(env: Env) {
    let room = RoomId::from("stale");
    let fa = env.claim(&room, "a", SHORT_TTL).await;
    env.snaps.save(&room, fa, b"from a").await.unwrap();
    // A is paused past its TTL; B takes over and writes.
    env.let_expire(&room, SHORT_TTL).await;
    let fb = env.claim(&room, "b", LONG_TTL).await;
    assert!(fb > fa);
    env.snaps.save(&room, fb, b"from b").await.unwrap();
    // A wakes up and tries to write with its old token: every write is refused.
    fenced(env.snaps.save(&room, fa, b"stale").await, fa);
    fenced(
        env.snaps
            .write_change(&room, fa, change(&[(1, b"stale")], Some(b"stale")), 10)
            .await,
        fa,
    );
    fenced(env.snaps.delete(&room, fa).await, fa);
    assert!(
        env.snaps.load_history(&room).await.unwrap().is_empty(),
        "a refused change wrote nothing"
    );
    // A token that never held the lease is refused too.
    fenced(env.snaps.save(&room, fb + 1, b"future").await, fb + 1);
    assert_eq!(
        env.snaps.load(&room).await.unwrap(),
        Some(Stored {
            fence: fb,
            bytes: Bytes::from_static(b"from b")
        })
    );
}

async fn expired_lease_cannot_write(env: Env) {
    let room = RoomId::from("expired");
    let f = env.claim(&room, "a", SHORT_TTL).await;
    env.snaps.save(&room, f, b"v1").await.unwrap();
    env.let_expire(&room, SHORT_TTL).await;
    // No competitor, but the lease is gone: the write must re-claim first.
    fenced(env.snaps.save(&room, f, b"v2").await, f);
    let g = env.claim(&room, "a", LONG_TTL).await;
    assert!(g > f);
    env.snaps.save(&room, g, b"v2").await.unwrap();
}

async fn released_lease_cannot_write(env: Env) {
    let room = RoomId::from("released");
    let f = env.claim(&room, "a", LONG_TTL).await;
    assert!(env.leases.release(&room, &owner("a"), f).await.unwrap());
    fenced(env.snaps.save(&room, f, b"late").await, f);
}

async fn history_is_bounded_and_fenced(env: Env) {
    let room = RoomId::from("history");
    assert!(env.snaps.load_history(&room).await.unwrap().is_empty());
    let f = env.claim(&room, "a", LONG_TTL).await;
    for seq in 1..=3u64 {
        let ev = format!("ev{seq}");
        env.snaps
            .write_change(&room, f, change(&[(seq, ev.as_bytes())], None), 3)
            .await
            .unwrap();
    }
    // One change's events in one write, in order.
    env.snaps
        .write_change(&room, f, change(&[(4, b"ev4"), (5, b"ev5")], None), 3)
        .await
        .unwrap();
    env.snaps
        .write_change(&room, f, change(&[], None), 3)
        .await
        .unwrap();
    let want: Vec<HistoryEntry> = (3..=5u64)
        .map(|seq| HistoryEntry {
            fence: f,
            seq,
            bytes: Bytes::from(format!("ev{seq}")),
        })
        .collect();
    assert_eq!(env.snaps.load_history(&room).await.unwrap(), want);
    // History alone does not make a snapshot.
    assert_eq!(env.snaps.load(&room).await.unwrap(), None);
    // A change with state: the events and the state in one write.
    env.snaps
        .write_change(&room, f, change(&[(6, b"ev6")], Some(b"seated")), 3)
        .await
        .unwrap();
    assert_eq!(
        env.snaps.load(&room).await.unwrap(),
        Some(Stored {
            fence: f,
            bytes: Bytes::from_static(b"seated")
        })
    );
    let history = env.snaps.load_history(&room).await.unwrap();
    assert_eq!(history.last().map(|e| e.seq), Some(6));
    assert_eq!(history.len(), 3);

    env.snaps.save(&room, f, b"state").await.unwrap();
    env.snaps.delete(&room, f).await.unwrap();
    assert_eq!(env.snaps.load(&room).await.unwrap(), None);
    assert!(env.snaps.load_history(&room).await.unwrap().is_empty());
    // The live owner can write again after a delete.
    env.snaps.save(&room, f, b"again").await.unwrap();
}

/// A gift is open from before its ledger call until the write that publishes its event: a
/// second open of it says so, a stale owner cannot open one, a write that carries the event
/// closes it with the event (and a fenced write closes nothing), and a delete drops them all.
async fn open_gifts_close_with_the_write_that_publishes_them(env: Env) {
    let room = RoomId::from("gifts");
    let (g1, g2, g3) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
    assert!(env.snaps.open_gifts(&room).await.unwrap().is_empty());
    let fa = env.claim(&room, "a", SHORT_TTL).await;
    assert_eq!(
        env.snaps.open_batch(&room, fa, &[g1]).await.unwrap(),
        [true]
    );
    assert_eq!(
        env.snaps
            .open_batch(&room, fa, &[g2, g1, g3])
            .await
            .unwrap(),
        [true, false, true],
        "a second open of one gift finds it open"
    );
    assert!(
        env.snaps
            .open_batch(&room, fa, &[])
            .await
            .unwrap()
            .is_empty()
    );
    let mut open = env.snaps.open_gifts(&room).await.unwrap();
    open.sort();
    assert_eq!(open, vec![g1, g2, g3]);

    // g1's event and the close of g2 (refused) in one write.
    let published = Change {
        entries: &[(1, b"gift g1")],
        state: None,
        closed: &[g1, g2],
        more_waiting: false,
    };
    env.snaps
        .write_change(&room, fa, published, 10)
        .await
        .unwrap();
    assert_eq!(env.snaps.open_gifts(&room).await.unwrap(), vec![g3]);
    assert_eq!(env.snaps.load_history(&room).await.unwrap().len(), 1);
    // Closing alone is a write too.
    let only_closes = Change {
        closed: &[g3],
        ..Change::default()
    };
    env.snaps
        .write_change(&room, fa, only_closes, 10)
        .await
        .unwrap();
    assert!(env.snaps.open_gifts(&room).await.unwrap().is_empty());

    // The owner's lease expires and b takes the room: a's open and a's close are refused.
    assert_eq!(
        env.snaps.open_batch(&room, fa, &[g1]).await.unwrap(),
        [true]
    );
    env.let_expire(&room, SHORT_TTL).await;
    let fb = env.claim(&room, "b", LONG_TTL).await;
    match env.snaps.open_batch(&room, fa, &[g2]).await {
        Err(StorageError::Fenced { token }) => assert_eq!(token, fa),
        other => panic!("a stale owner opened a gift: {other:?}"),
    }
    let stale = Change {
        entries: &[(2, b"stale gift g1")],
        state: None,
        closed: &[g1],
        more_waiting: false,
    };
    fenced(env.snaps.write_change(&room, fa, stale, 10).await, fa);
    assert_eq!(
        env.snaps.open_gifts(&room).await.unwrap(),
        vec![g1],
        "what a's runtime left open, b finds"
    );
    assert_eq!(env.snaps.load_history(&room).await.unwrap().len(), 1);
    env.snaps.save(&room, fb, b"state").await.unwrap();
    env.snaps.delete(&room, fb).await.unwrap();
    assert!(env.snaps.open_gifts(&room).await.unwrap().is_empty());
}

// ---------- Redis ----------

async fn redis_env() -> (RedisServer, Env) {
    let server = RedisServer::start().await.unwrap();
    let redis = Redis::connect(&server.url()).await.unwrap();
    let env = Env {
        leases: LeaseStore::redis(&redis),
        snaps: SnapshotStore::redis(&redis),
        paused: false,
    };
    (server, env)
}

#[tokio::test]
async fn redis_save_and_load() {
    let (_server, env) = redis_env().await;
    save_and_load(env).await;
}

#[tokio::test]
async fn redis_stale_token_is_rejected() {
    let (_server, env) = redis_env().await;
    stale_token_is_rejected(env).await;
}

#[tokio::test]
async fn redis_expired_lease_cannot_write() {
    let (_server, env) = redis_env().await;
    expired_lease_cannot_write(env).await;
}

#[tokio::test]
async fn redis_released_lease_cannot_write() {
    let (_server, env) = redis_env().await;
    released_lease_cannot_write(env).await;
}

#[tokio::test]
async fn redis_history_is_bounded_and_fenced() {
    let (_server, env) = redis_env().await;
    history_is_bounded_and_fenced(env).await;
}

/// A full history is trimmed in steps: Redis keeps at least the newest `max_len` entries and
/// at most `max_len / 8` more, so a busy room trims once per `max_len / 8 + 1` pushes rather
/// than on every push.
#[tokio::test]
async fn redis_a_full_history_is_trimmed_in_steps() {
    const MAX: u64 = 16;
    let (server, env) = redis_env().await;
    let mut admin = admin(&server).await;
    let room = RoomId::from("steps");
    let f = env.claim(&room, "a", LONG_TTL).await;
    for seq in 1..=64u64 {
        let ev = format!("ev{seq}");
        env.snaps
            .write_change(
                &room,
                f,
                change(&[(seq, ev.as_bytes())], None),
                MAX as usize,
            )
            .await
            .unwrap();
        let seqs: Vec<u64> = env
            .snaps
            .load_history(&room)
            .await
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        let kept = seqs.len() as u64;
        assert!(
            kept >= seq.min(MAX) && kept <= MAX + MAX / 8,
            "{kept} entries kept after {seq} pushes"
        );
        assert_eq!(seqs, (seq + 1 - kept..=seq).collect::<Vec<_>>());
    }
    // Past 18 entries, back to 16: at the 19th push, the 22nd, … the 64th.
    assert_eq!(command_calls(&mut admin, "ltrim").await, 16);
}

#[tokio::test]
async fn redis_open_gifts_close_with_the_write_that_publishes_them() {
    let (_server, env) = redis_env().await;
    open_gifts_close_with_the_write_that_publishes_them(env).await;
}

#[tokio::test]
async fn redis_token_below_high_water_is_rejected() {
    let (server, env) = redis_env().await;
    let room = RoomId::from("hwm");
    let f = env.claim(&room, "a", LONG_TTL).await;
    env.snaps.save(&room, f, b"v1").await.unwrap();
    // A higher token wrote while the lease key was lost (e.g. Redis regressed its counter).
    let mut admin = admin(&server).await;
    redis::cmd("HSET")
        .arg("room:{hwm}:state")
        .arg("hwm")
        .arg(f + 10)
        .exec_async(&mut admin)
        .await
        .unwrap();
    fenced(env.snaps.save(&room, f, b"v2").await, f);
    redis::cmd("SCRIPT")
        .arg("FLUSH")
        .exec_async(&mut admin)
        .await
        .unwrap();
    // After NOSCRIPT the fenced write is still evaluated (and still refused).
    fenced(env.snaps.save(&room, f, b"v2").await, f);
}

/// A change without state raises the high-water mark to its token the first time that token
/// writes (so an older token is refused after it), and leaves it alone after that.
#[tokio::test]
async fn redis_a_change_raises_the_high_water_mark() {
    let (server, env) = redis_env().await;
    let room = RoomId::from("hwm-change");
    let mut admin = admin(&server).await;
    let hwm = |admin: &mut redis::aio::MultiplexedConnection| {
        let mut admin = admin.clone();
        async move {
            redis::cmd("HGET")
                .arg("room:{hwm-change}:state")
                .arg("hwm")
                .query_async::<Option<u64>>(&mut admin)
                .await
                .unwrap()
        }
    };
    let a = env.claim(&room, "a", SHORT_TTL).await;
    env.snaps
        .write_change(&room, a, change(&[(1, b"ev1")], None), 10)
        .await
        .unwrap();
    assert_eq!(hwm(&mut admin).await, Some(a));
    // The next owner's first change raises it; the old token is refused from then on.
    env.let_expire(&room, SHORT_TTL).await;
    let b = env.claim(&room, "b", LONG_TTL).await;
    assert!(b > a);
    env.snaps
        .write_change(&room, b, change(&[(1, b"ev1b")], None), 10)
        .await
        .unwrap();
    env.snaps
        .write_change(&room, b, change(&[(2, b"ev2b")], None), 10)
        .await
        .unwrap();
    assert_eq!(hwm(&mut admin).await, Some(b));
    fenced(
        env.snaps
            .write_change(&room, a, change(&[(3, b"stale")], None), 10)
            .await,
        a,
    );
    assert_eq!(env.snaps.load_history(&room).await.unwrap().len(), 3);
}

/// Changes of many rooms made at once share one script call, and each room is fenced and
/// written on its own inside it: a stale token refuses that room's change alone, and changes
/// of every shape (events with a state, events that close gifts, a close alone) land whole.
#[tokio::test]
async fn redis_changes_made_at_once_share_a_call_and_are_fenced_room_by_room() {
    let (_server, env) = redis_env().await;
    let SnapshotStore::Redis(redis_snaps) = &env.snaps else {
        unreachable!("a Redis env")
    };
    let rooms: Vec<RoomId> = (0..20)
        .map(|i| RoomId::from(format!("batch-{i}")))
        .collect();
    let mut fences = Vec::new();
    for room in &rooms {
        let f = env.claim(room, "a", LONG_TTL).await;
        env.snaps
            .open_batch(room, f, &[Uuid::from_u128(1), Uuid::from_u128(2)])
            .await
            .unwrap();
        fences.push(f);
    }
    let gifts = [Uuid::from_u128(1)];
    let entries: &[(u64, &[u8])] = &[(1, b"first"), (2, b"second")];
    // Room 0 writes a state with its events, room 1 closes a gift with its events, room 2
    // only closes a gift, room 3 carries a stale token; the rest write one event each.
    let shape = |i: usize| match i {
        0 => (fences[0], change(entries, Some(b"state 0"))),
        1 => (
            fences[1],
            Change {
                entries: &entries[..1],
                closed: &gifts,
                ..Change::default()
            },
        ),
        2 => (
            fences[2],
            Change {
                closed: &gifts,
                ..Change::default()
            },
        ),
        3 => (
            fences[3] + 1,
            Change {
                entries: &entries[..1],
                state: Some(b"stale"),
                closed: &gifts,
                more_waiting: false,
            },
        ),
        _ => (fences[i], change(&entries[1..], None)),
    };
    let results = futures_util::future::join_all(rooms.iter().enumerate().map(|(i, room)| {
        let (fence, change) = shape(i);
        env.snaps.write_change(room, fence, change, 10)
    }))
    .await;
    for (i, r) in results.into_iter().enumerate() {
        if i == 3 {
            fenced(r, fences[3] + 1);
        } else {
            r.unwrap();
        }
    }
    assert_eq!(
        redis_snaps.change_batches(),
        (1, 20),
        "the twenty changes went in one call"
    );
    let history = |i: usize| env.snaps.load_history(&rooms[i]);
    let open = |i: usize| env.snaps.open_gifts(&rooms[i]);
    assert_eq!(history(0).await.unwrap().len(), 2);
    let stored = env.snaps.load(&rooms[0]).await.unwrap().unwrap();
    assert_eq!(&stored.bytes[..], b"state 0");
    assert_eq!(open(0).await.unwrap().len(), 2);
    assert_eq!(history(1).await.unwrap().len(), 1);
    assert_eq!(open(1).await.unwrap(), vec![Uuid::from_u128(2)]);
    assert!(history(2).await.unwrap().is_empty());
    assert_eq!(open(2).await.unwrap(), vec![Uuid::from_u128(2)]);
    assert!(
        history(3).await.unwrap().is_empty(),
        "the stale room wrote nothing"
    );
    assert!(env.snaps.load(&rooms[3]).await.unwrap().is_none());
    assert_eq!(open(3).await.unwrap().len(), 2);
    for i in 4..rooms.len() {
        let h = history(i).await.unwrap();
        assert_eq!((h.len(), h[0].seq, &h[0].bytes[..]), (1, 2, &b"second"[..]));
    }
}

/// A store's calls are paced: a change within the interval of the last call waits out the
/// rest of it, with whatever else queued meanwhile; a busy room's change (more wait behind it)
/// and a change after a quiet spell go at once.
#[tokio::test]
async fn redis_changes_within_the_write_interval_wait_for_one_call() {
    const INTERVAL: Duration = Duration::from_secs(1);
    const EVENT: &[(u64, &[u8])] = &[(1, b"ev")];
    let server = RedisServer::start().await.unwrap();
    let redis = Redis::connect(&server.url()).await.unwrap();
    let env = Env {
        leases: LeaseStore::redis(&redis),
        snaps: SnapshotStore::redis_paced(&redis, INTERVAL),
        paused: false,
    };
    let SnapshotStore::Redis(paced) = &env.snaps else {
        unreachable!("a Redis env")
    };
    let rooms: Vec<RoomId> = (0..5).map(|i| RoomId::from(format!("paced-{i}"))).collect();
    let mut fences = Vec::new();
    for room in &rooms {
        fences.push(env.claim(room, "a", LONG_TTL).await);
    }
    let write = |i: usize, more_waiting: bool| {
        let change = Change {
            more_waiting,
            ..change(EVENT, None)
        };
        env.snaps.write_change(&rooms[i], fences[i], change, 10)
    };
    let first_queued = Instant::now();
    write(0, false).await.unwrap();
    assert_eq!(
        paced.change_batches(),
        (1, 1),
        "the first change goes alone"
    );
    let (b, c) = tokio::join!(write(1, false), write(2, false));
    b.unwrap();
    c.unwrap();
    assert!(
        first_queued.elapsed() >= INTERVAL,
        "the second call waited out the interval"
    );
    assert_eq!(
        paced.change_batches(),
        (2, 3),
        "the two waited for one call"
    );
    let busy = Instant::now();
    write(3, true).await.unwrap();
    assert!(
        busy.elapsed() < INTERVAL,
        "a busy room's change goes at once"
    );
    assert_eq!(paced.change_batches(), (3, 4));
    tokio::time::sleep(INTERVAL).await;
    let quiet = Instant::now();
    write(4, false).await.unwrap();
    assert!(
        quiet.elapsed() < INTERVAL,
        "after a quiet spell a change goes at once"
    );
    assert_eq!(paced.change_batches(), (4, 5));
    for room in &rooms {
        assert_eq!(env.snaps.load_history(room).await.unwrap().len(), 1);
    }
}

/// A shard loads the lease, room and directory scripts before its rooms run, a gateway the registry's and
/// the direct messages' before it takes connections: they are in Redis' script cache at once, and loading them
/// again adds nothing.
#[tokio::test]
async fn redis_preload_puts_the_scripts_in_the_cache() {
    let (server, env) = redis_env().await;
    let redis = Redis::connect(&server.url()).await.unwrap();
    let (registry, im, directory) = (
        storage::registry::Registry::redis(&redis),
        storage::im::ImStore::redis(&redis),
        storage::directory::DirectoryStore::redis(&redis),
    );
    let mut admin = admin(&server).await;
    let cached = |admin: &mut redis::aio::MultiplexedConnection| {
        let mut admin = admin.clone();
        async move {
            let info: String = redis::cmd("INFO")
                .arg("memory")
                .query_async(&mut admin)
                .await
                .unwrap();
            info.lines()
                .find_map(|l| l.strip_prefix("number_of_cached_scripts:"))
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap()
        }
    };
    let before = cached(&mut admin).await;
    for _ in 0..2 {
        env.leases.preload().await.unwrap();
        env.snaps.preload().await.unwrap();
        registry.preload().await.unwrap();
        im.preload().await.unwrap();
        directory.preload().await.unwrap();
        assert_eq!(cached(&mut admin).await - before, 3 + 7 + 5 + 3 + 1);
    }
}

// ---------- SQLite + in-process leases, paused time ----------

async fn sqlite_env(dir: &std::path::Path) -> Env {
    let leases = InProcessLeases::new();
    Env {
        snaps: SnapshotStore::sqlite(dir, leases.clone()).await.unwrap(),
        leases: LeaseStore::InProcess(leases),
        paused: true,
    }
}

#[tokio::test(start_paused = true)]
async fn sqlite_save_and_load() {
    let dir = tempfile::tempdir().unwrap();
    save_and_load(sqlite_env(dir.path()).await).await;
    assert!(dir.path().join(ROOMS_DB_FILE).exists());
}

#[tokio::test(start_paused = true)]
async fn sqlite_stale_token_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    stale_token_is_rejected(sqlite_env(dir.path()).await).await;
}

#[tokio::test(start_paused = true)]
async fn sqlite_expired_lease_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    expired_lease_cannot_write(sqlite_env(dir.path()).await).await;
}

#[tokio::test(start_paused = true)]
async fn sqlite_released_lease_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    released_lease_cannot_write(sqlite_env(dir.path()).await).await;
}

#[tokio::test(start_paused = true)]
async fn sqlite_history_is_bounded_and_fenced() {
    let dir = tempfile::tempdir().unwrap();
    history_is_bounded_and_fenced(sqlite_env(dir.path()).await).await;
}

#[tokio::test(start_paused = true)]
async fn sqlite_open_gifts_close_with_the_write_that_publishes_them() {
    let dir = tempfile::tempdir().unwrap();
    open_gifts_close_with_the_write_that_publishes_them(sqlite_env(dir.path()).await).await;
}

#[tokio::test(start_paused = true)]
async fn sqlite_restart_keeps_state_and_tokens_increasing() {
    let dir = tempfile::tempdir().unwrap();
    let room = RoomId::from("restart");
    let old = {
        let env = sqlite_env(dir.path()).await;
        let f1 = env.claim(&room, "a", LONG_TTL).await;
        assert!(env.leases.release(&room, &owner("a"), f1).await.unwrap());
        let f2 = env.claim(&room, "a", LONG_TTL).await;
        env.snaps.save(&room, f2, b"before").await.unwrap();
        env.snaps
            .write_change(&room, f2, change(&[(1, b"ev")], None), 10)
            .await
            .unwrap();
        f2
    };
    // A new process: fresh in-process leases, same rooms.db.
    let env = sqlite_env(dir.path()).await;
    assert_eq!(
        env.snaps.load(&room).await.unwrap(),
        Some(Stored {
            fence: old,
            bytes: Bytes::from_static(b"before")
        })
    );
    assert_eq!(env.snaps.load_history(&room).await.unwrap().len(), 1);
    // The lease counter was seeded from the stored high-water token.
    let f = env.claim(&room, "a", LONG_TTL).await;
    assert!(f > old, "{f} > {old}");
    env.snaps.save(&room, f, b"after").await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn sqlite_token_below_high_water_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let env = sqlite_env(dir.path()).await;
    let room = RoomId::from("hwm");
    let f = env.claim(&room, "a", LONG_TTL).await;
    env.snaps.save(&room, f, b"v1").await.unwrap();
    // Raise the stored high-water token out of band (as a higher owner's write would).
    let raw = rusqlite::Connection::open(dir.path().join(ROOMS_DB_FILE)).unwrap();
    raw.execute(
        "UPDATE room_state SET hwm = ?1 WHERE room = 'hwm'",
        [i64::try_from(f + 10).unwrap()],
    )
    .unwrap();
    drop(raw);
    fenced(env.snaps.save(&room, f, b"v2").await, f);
}
