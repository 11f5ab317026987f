//! Room quotas and retention in both snapshot engines: the creator's count of stored rooms,
//! touched times, and the fenced removal of rooms nobody joined (issue 42, point 2).
// Test helpers outside `#[test]` fns are test code too (clippy's allow-unwrap-in-tests skips them).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use kit::redis::RedisServer;
use protocol::{RoomId, UserId};
use storage::StorageError;
use storage::lease::{ClaimOutcome, InProcessLeases, LeaseStore};
use storage::redis::Redis;
use storage::snapshot::{Change, Created, Expired, ROOMS_DB_FILE, SnapshotStore};
use uuid::Uuid;

use crate::support::owner as support;
use support::owner;

const TTL: Duration = Duration::from_secs(30);

async fn claim(leases: &LeaseStore, room: &RoomId) -> u64 {
    match leases.claim(room, &owner("a"), TTL).await.unwrap() {
        ClaimOutcome::Acquired { fence } => fence,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

fn rooms(ids: &[&str]) -> Vec<RoomId> {
    ids.iter().map(|r| RoomId::from(*r)).collect()
}

async fn quotas_touches_and_retention(leases: LeaseStore, snaps: SnapshotStore) {
    let (alice, bob) = (UserId::from("alice"), UserId::from("bob"));
    let [r1, r2, r3] = ["r1", "r2", "r3"].map(RoomId::from);
    let f1 = claim(&leases, &r1).await;
    let f2 = claim(&leases, &r2).await;
    let f3 = claim(&leases, &r3).await;
    // The cap counts the creator's stored rooms.
    for (r, f) in [(&r1, f1), (&r2, f2)] {
        let c = snaps.create(r, f, b"s", &alice, 2, 1000).await.unwrap();
        assert_eq!(c, Created::Created);
    }
    assert_eq!(snaps.owned_count(&alice).await.unwrap(), 2);
    let c = snaps.create(&r3, f3, b"s", &alice, 2, 1000).await.unwrap();
    assert_eq!(c, Created::AtQuota);
    assert_eq!(
        snaps.load(&r3).await.unwrap(),
        None,
        "a refused create writes nothing"
    );
    assert_eq!(
        snaps.untouched_since(u64::MAX, 0, 10).await.unwrap(),
        rooms(&["r1", "r2"])
    );
    let c = snaps.create(&r3, f3, b"s", &bob, 2, 1000).await.unwrap();
    assert_eq!(c, Created::Created);
    assert_eq!(snaps.owned_count(&bob).await.unwrap(), 1);
    // Creations are fenced like every write.
    let stale = snaps.create(&r1, f1 + 100, b"s", &alice, 0, 1000).await;
    assert!(
        matches!(stale, Err(StorageError::Fenced { .. })),
        "{stale:?}"
    );

    // A join touches r2; r1 and r3 stay untouched since their creation.
    snaps.touch(&r2, 5000).await.unwrap();
    snaps.touch(&r2, 4000).await.unwrap(); // touched times never go back
    assert_eq!(
        snaps.untouched_since(3000, 0, 10).await.unwrap(),
        rooms(&["r1", "r3"])
    );
    assert_eq!(
        snaps.untouched_since(3000, 1, 10).await.unwrap(),
        rooms(&["r3"])
    );
    assert_eq!(snaps.expire(&r2, f2, 3000).await.unwrap(), Expired::Kept);
    assert_eq!(snaps.expire(&r2, f2, 4500).await.unwrap(), Expired::Kept);
    assert!(
        snaps.load(&r2).await.unwrap().is_some(),
        "a joined room stays"
    );

    // An open gift holds r1; once closed, r1 goes with its history.
    let gift = Uuid::new_v4();
    snaps.open_batch(&r1, f1, &[gift]).await.unwrap();
    let entries: &[(u64, &[u8])] = &[(1, b"e1")];
    let change = Change {
        entries,
        state: None,
        closed: &[],
        more_waiting: false,
    };
    snaps.write_change(&r1, f1, change, 10).await.unwrap();
    assert_eq!(snaps.expire(&r1, f1, 3000).await.unwrap(), Expired::Kept);
    let close = Change {
        entries: &[],
        state: None,
        closed: &[gift],
        more_waiting: false,
    };
    snaps.write_change(&r1, f1, close, 10).await.unwrap();
    // Only the lease's holder removes a room.
    let stale = snaps.expire(&r1, f1 + 100, 3000).await;
    assert!(
        matches!(stale, Err(StorageError::Fenced { .. })),
        "{stale:?}"
    );
    assert_eq!(snaps.expire(&r1, f1, 3000).await.unwrap(), Expired::Deleted);
    assert_eq!(snaps.load(&r1).await.unwrap(), None);
    assert!(snaps.load_history(&r1).await.unwrap().is_empty());
    assert!(snaps.open_gifts(&r1).await.unwrap().is_empty());
    assert_eq!(
        snaps.owned_count(&alice).await.unwrap(),
        1,
        "the slot is free again"
    );
    assert_eq!(
        snaps.untouched_since(3000, 0, 10).await.unwrap(),
        rooms(&["r3"])
    );
    // A late touch brings nothing back; a new owner of the id gets a higher token.
    snaps.touch(&r1, 9000).await.unwrap();
    assert_eq!(
        snaps.untouched_since(u64::MAX, 0, 10).await.unwrap(),
        rooms(&["r3", "r2"])
    );
    assert!(leases.release(&r1, &owner("a"), f1).await.unwrap());
    assert!(claim(&leases, &r1).await > f1);
    let c = snaps.create(&r1, f1 + 1, b"s", &alice, 2, 1000).await;
    assert!(matches!(
        c,
        Ok(Created::Created) | Err(StorageError::Fenced { .. })
    ));
}

#[tokio::test]
async fn redis_quotas_touches_and_retention() {
    let server = RedisServer::start().await.unwrap();
    let redis = Redis::connect(&server.url()).await.unwrap();
    quotas_touches_and_retention(LeaseStore::redis(&redis), SnapshotStore::redis(&redis)).await;
}

#[tokio::test]
async fn sqlite_quotas_touches_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let leases = InProcessLeases::new();
    let snaps = SnapshotStore::sqlite(dir.path(), leases.clone())
        .await
        .unwrap();
    quotas_touches_and_retention(LeaseStore::InProcess(leases), snaps).await;
}

/// A `rooms.db` written before touched times existed: its rooms count as touched at the
/// upgrade (so retention removes them later, unless joined) and for no creator.
#[tokio::test]
async fn sqlite_rooms_from_before_the_upgrade_are_touched_at_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    {
        let conn = rusqlite::Connection::open(dir.path().join(ROOMS_DB_FILE)).unwrap();
        conn.execute_batch(
            "CREATE TABLE room_state (room TEXT PRIMARY KEY, hwm INTEGER NOT NULL,
                                      fence INTEGER, data BLOB);
             INSERT INTO room_state VALUES ('old', 3, 3, x'7b7d');",
        )
        .unwrap();
    }
    let before = now_ms();
    let snaps = SnapshotStore::sqlite(dir.path(), InProcessLeases::new())
        .await
        .unwrap();
    assert!(
        snaps
            .untouched_since(before, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        snaps.untouched_since(u64::MAX, 0, 10).await.unwrap(),
        rooms(&["old"])
    );
    assert!(snaps.load(&RoomId::from("old")).await.unwrap().is_some());
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}
