//! The account suspension store against a real redis-server and against SQLite: one contract
//! on both engines (put, replace, lift, the version every change moves, expired ones dropped).

use kit::redis::RedisServer;
use protocol::UserId;
use storage::redis::Redis;
use storage::suspensions::{Suspension, SuspensionStore};

const NOW: u64 = 1_800_000_000_000;

fn until(until: Option<u64>, reason: &str) -> Suspension {
    Suspension {
        reason: Some(reason.to_owned()),
        until,
        at: NOW,
        by: Some("mod-anna".to_owned()),
    }
}

async fn sorted(s: &SuspensionStore) -> (u64, Vec<(UserId, Suspension)>) {
    let (v, mut all) = s.all().await.unwrap();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    (v, all)
}

async fn contract(s: SuspensionStore) {
    let (ann, bob, cid) = (
        UserId::from("ann"),
        UserId::from("bob"),
        UserId::from("auth0|cid"),
    );
    assert_eq!(s.version().await.unwrap(), 0);
    assert_eq!(s.all().await.unwrap(), (0, Vec::new()));

    // Each change moves the version; a user's second suspension replaces the first.
    let v1 = s.put(&ann, &until(None, "spam"), NOW).await.unwrap();
    let v2 = s
        .put(&bob, &until(Some(NOW + 60_000), "ads"), NOW)
        .await
        .unwrap();
    let v3 = s
        .put(&ann, &until(Some(NOW + 5_000), "spam, shortened"), NOW)
        .await
        .unwrap();
    assert!(v1 < v2 && v2 < v3, "{v1} {v2} {v3}");
    assert_eq!(s.version().await.unwrap(), v3);
    assert_eq!(
        sorted(&s).await,
        (
            v3,
            vec![
                (ann.clone(), until(Some(NOW + 5_000), "spam, shortened")),
                (bob.clone(), until(Some(NOW + 60_000), "ads")),
            ]
        )
    );

    // A change after ann's time drops hers; a suspension without a time stays.
    let v4 = s
        .put(&cid, &until(None, "fraud"), NOW + 10_000)
        .await
        .unwrap();
    let (v, all) = sorted(&s).await;
    assert_eq!(v, v4);
    let users: Vec<&str> = all.iter().map(|(u, _)| u.as_str()).collect();
    assert_eq!(users, ["auth0|cid", "bob"]);

    // Lifting: once; a lift of nobody moves nothing.
    assert!(s.lift(&bob).await.unwrap());
    let v5 = s.version().await.unwrap();
    assert!(v5 > v4);
    assert!(!s.lift(&bob).await.unwrap());
    assert_eq!(s.version().await.unwrap(), v5, "nothing changed");
    assert_eq!(sorted(&s).await.1, vec![(cid, until(None, "fraud"))]);

    assert!(until(Some(NOW + 1), "x").holds_at(NOW));
    assert!(!until(Some(NOW), "x").holds_at(NOW));
    assert!(until(None, "x").holds_at(u64::MAX));
}

#[tokio::test]
async fn the_sqlite_store_keeps_the_contract_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    contract(SuspensionStore::sqlite(dir.path()).await.unwrap()).await;
    let again = SuspensionStore::sqlite(dir.path()).await.unwrap();
    let (v, all) = again.all().await.unwrap();
    assert_eq!((v, all.len()), (5, 1), "on disk, version and all");
}

#[tokio::test]
async fn the_redis_store_keeps_the_contract() {
    let server = RedisServer::start().await.unwrap();
    let redis = Redis::connect(&server.url()).await.unwrap();
    contract(SuspensionStore::redis(&redis)).await;
}
