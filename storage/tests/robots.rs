//! The robot configuration store against a real redis-server and against SQLite: the same
//! contract on both (what the admin API writes, every shard's reconcile reads), plus the Redis
//! layout and what an unreachable Redis answers.
// Test helpers outside `#[test]` fns are test code too (clippy's allow-unwrap-in-tests skips them).
#![allow(clippy::unwrap_used)]

use kit::redis::RedisServer;
use protocol::RoomId;
use storage::StorageError;
use storage::redis::Redis;
use storage::robots::RobotStore;

/// Configurations are opaque bytes: JSON in practice, but nothing is parsed or re-encoded.
const PARTY: &[u8] = br#"{"room":"party","robots":[{"id":"bot:amy"}]}"#;
const LOUNGE: &[u8] = "{\"room\":\"lounge\",\"title\":\"Caf\u{e9} \u{1f3a4}\"}".as_bytes();

fn rooms(all: &[(RoomId, Vec<u8>)]) -> Vec<&str> {
    all.iter().map(|(r, _)| r.as_str()).collect()
}

/// The contract, on `store`; `other` is a second handle on the same data (another
/// connection, or the database reopened) that must see every write.
async fn contract(store: RobotStore, other: impl AsyncFnOnce() -> RobotStore) {
    let (party, lounge, attic) = (
        RoomId::from("party"),
        RoomId::from("lounge"),
        RoomId::from("attic"),
    );
    assert_eq!(store.get(&party).await.unwrap(), None);
    assert!(store.list().await.unwrap().is_empty());
    assert!(!store.delete(&party).await.unwrap());

    store.put(&party, b"old".to_vec()).await.unwrap();
    store.put(&party, PARTY.to_vec()).await.unwrap();
    store.put(&lounge, LOUNGE.to_vec()).await.unwrap();
    store.put(&attic, b"{}".to_vec()).await.unwrap();
    // The last write wins, byte for byte.
    assert_eq!(store.get(&party).await.unwrap().as_deref(), Some(PARTY));
    assert_eq!(store.get(&lounge).await.unwrap().as_deref(), Some(LOUNGE));

    let again = other().await;
    let all = again.list().await.unwrap();
    // Listed by room id, whatever the write order.
    assert_eq!(rooms(&all), ["attic", "lounge", "party"]);
    assert_eq!(all[2].1, PARTY);

    assert!(again.delete(&attic).await.unwrap());
    assert!(!again.delete(&attic).await.unwrap());
    assert_eq!(store.get(&attic).await.unwrap(), None);
    assert_eq!(rooms(&store.list().await.unwrap()), ["lounge", "party"]);

    // A replace holds only over the bytes it read: not over another edit, not over a delete.
    assert!(
        store
            .replace(&lounge, LOUNGE.to_vec(), b"v2".to_vec())
            .await
            .unwrap()
    );
    assert!(
        !store
            .replace(&lounge, LOUNGE.to_vec(), b"v3".to_vec())
            .await
            .unwrap()
    );
    assert_eq!(
        store.get(&lounge).await.unwrap().as_deref(),
        Some(&b"v2"[..])
    );
    assert!(store.delete(&lounge).await.unwrap());
    assert!(
        !store
            .replace(&lounge, b"v2".to_vec(), b"v4".to_vec())
            .await
            .unwrap()
    );
    assert_eq!(store.get(&lounge).await.unwrap(), None);
    store.put(&lounge, LOUNGE.to_vec()).await.unwrap();
}

#[tokio::test]
async fn redis_configs_put_get_list_delete_across_connections() {
    let server = RedisServer::start().await.unwrap();
    let redis = Redis::connect(&server.url()).await.unwrap();
    let url = server.url();
    contract(RobotStore::redis(&redis), async move || {
        RobotStore::redis(&Redis::connect(&url).await.unwrap())
    })
    .await;
    // One hash, one field per room: what an operator sees with redis-cli.
    assert_eq!(
        server.integer(&["HLEN", "robots:configs"]).await.unwrap(),
        2
    );
    assert_eq!(
        server
            .integer(&["HEXISTS", "robots:configs", "party"])
            .await
            .unwrap(),
        1
    );
}

#[tokio::test]
async fn sqlite_configs_put_get_list_delete_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let store = RobotStore::sqlite(&path).await.unwrap();
    contract(store, async move || {
        RobotStore::sqlite(&path).await.unwrap()
    })
    .await;
}

#[tokio::test]
async fn redis_unreachable_is_unavailable() {
    let server = RedisServer::start().await.unwrap();
    let store = RobotStore::redis(&Redis::connect(&server.url()).await.unwrap());
    store
        .put(&RoomId::from("party"), PARTY.to_vec())
        .await
        .unwrap();
    server.pause().unwrap();
    let err = store.list().await.unwrap_err();
    server.resume().unwrap();
    assert!(matches!(err, StorageError::Unavailable { .. }), "{err:?}");
    assert!(err.is_retryable());
    // Back once Redis answers again (the connection manager may reconnect first).
    let start = tokio::time::Instant::now();
    loop {
        match store.list().await {
            Ok(all) => break assert_eq!(rooms(&all), ["party"]),
            Err(e) => assert!(start.elapsed().as_secs() < 5, "still failing: {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
