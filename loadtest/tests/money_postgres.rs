//! A cluster whose ledger is PostgreSQL: two shards and two gateways (real `chorus` processes,
//! a real redis-server, a throwaway PostgreSQL server) book gifts sent through both gateways
//! exactly once; then, in a second cluster on the same ledger, a shard killed between a gift's
//! debit and its settle leaves a saga the other shard settles once. Coins are conserved.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::net::SocketAddr;
use std::time::Duration;

use kit::cluster::{Cluster, ClusterOptions};
use kit::postgres::PgServer;
use protocol::{RoomId, UserId};
use serde_json::{Value, json};
use storage::ledger::{EntryKind, Ledger, SagaState, gift_id};
use tokio::time::Instant;

/// Roses each sender sends in the first cluster (10 coins each, 5 to the recipient).
const ROSES: i64 = 20;

async fn wallet(admin: SocketAddr, token: &str, user: &str) -> Value {
    kit::admin::wallet(admin, Some(token), user)
        .await
        .unwrap()
        .json()
}

async fn grant(admin: SocketAddr, token: &str, user: &str, amount: i64) {
    let r = kit::admin::grant(admin, Some(token), user, amount, &format!("seed-{user}"))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
}

async fn assert_conserved(admin: SocketAddr, token: &str) {
    let totals = kit::admin::ledger_totals(admin, Some(token))
        .await
        .unwrap()
        .json();
    assert_eq!(totals["conserved"], true, "{totals}");
}

fn rose(room: &RoomId, req: &str, to: &str) -> Value {
    json!({"room": room, "req_id": req, "gift": "rose", "to": [to]})
}

fn options(ledger: &str, extra: &[(&str, &str)]) -> ClusterOptions {
    let mut env = vec![("CHORUS_LEDGER".to_owned(), ledger.to_owned())];
    env.extend(
        extra
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned())),
    );
    ClusterOptions {
        shards: 2,
        gateways: 2,
        env,
        ..ClusterOptions::default()
    }
}

#[tokio::test]
async fn a_postgres_ledger_cluster_books_gifts_once_and_settles_a_crashed_saga_once() {
    let pg = PgServer::start().await.unwrap();
    let url = pg.url("postgres");
    let within = Duration::from_secs(10);

    // 1. Gifts through both gateways, in two rooms, each booked once; a retry books nothing.
    let cluster = Cluster::start(options(&url, &[])).await.unwrap();
    let admin = cluster.gateways[0].admin;
    let token = cluster.admin_token.clone();
    grant(admin, &token, "alice", 1_000).await;
    grant(admin, &token, "carol", 1_000).await;
    let (room_a, room_b) = (RoomId::from("pg-a"), RoomId::from("pg-b"));
    let mut alice = cluster.connect(0, "alice").await.unwrap();
    let mut bob = cluster.connect(1, "bob").await.unwrap();
    let mut carol = cluster.connect(1, "carol").await.unwrap();
    let mut dave = cluster.connect(0, "dave").await.unwrap();
    alice.join_retrying(&room_a, None, within).await.unwrap();
    bob.join_retrying(&room_a, None, within).await.unwrap();
    carol.join_retrying(&room_b, None, within).await.unwrap();
    dave.join_retrying(&room_b, None, within).await.unwrap();
    for i in 0..ROSES {
        let a = alice
            .request("gift.send", rose(&room_a, &format!("a{i}"), "bob"))
            .await
            .unwrap();
        assert_eq!(a["balance"], 1_000 - 10 * (i + 1), "{a}");
        let c = carol
            .request("gift.send", rose(&room_b, &format!("c{i}"), "dave"))
            .await
            .unwrap();
        assert_eq!(c["balance"], 1_000 - 10 * (i + 1), "{c}");
    }
    let retry = alice
        .request("gift.send", rose(&room_a, "a0", "bob"))
        .await
        .unwrap();
    // The retry gets the first result again (the balance right after that gift), and the
    // wallets below show that it debited nothing.
    assert_eq!(retry["balance"], 990, "{retry}");
    for (user, balance, earnings) in [
        ("alice", 1_000 - 10 * ROSES, 0),
        ("carol", 1_000 - 10 * ROSES, 0),
        ("bob", 0, 5 * ROSES),
        ("dave", 0, 5 * ROSES),
    ] {
        let w = wallet(cluster.gateways[1].admin, &token, user).await;
        assert_eq!(
            (&w["balance"], &w["earnings"]),
            (&json!(balance), &json!(earnings)),
            "{user}: {w}"
        );
    }
    assert_conserved(admin, &token).await;
    // The batches' commit times reach the shards' metrics (the dashboard's ledger chart).
    let mut commits = 0.0;
    for shard in &cluster.shards {
        commits += kit::admin::metric(shard.admin, "chorus_ledger_group_commit_seconds_count")
            .await
            .unwrap();
    }
    assert!(
        commits >= 1.0,
        "{commits} batch commits in the shards' metrics"
    );
    for c in [alice, bob, carol, dave] {
        c.close().await;
    }
    drop(cluster);

    // 2. A second cluster on the same ledger (fresh Redis): the owner of a room dies between
    //    a gift's debit and its settle, nobody rejoins, and the other shard's orphan sweep
    //    settles it once.
    let crash = [
        ("CHORUS_TEST_CRASH_AFTER_DEBIT", "1"),
        ("CHORUS_ORPHAN_SWEEP_MS", "200"),
    ];
    let mut cluster = Cluster::start(options(&url, &crash)).await.unwrap();
    let admin = cluster.gateways[1].admin;
    let room = RoomId::from("pg-crash");
    let mut alice = cluster.connect(0, "alice").await.unwrap();
    let mut bob = cluster.connect(1, "bob").await.unwrap();
    alice.join_retrying(&room, None, within).await.unwrap();
    bob.join_retrying(&room, None, within).await.unwrap();
    let (owner, _) = cluster.room_owner(room.as_str()).await.unwrap().unwrap();
    let _ = alice
        .send("gift.send", rose(&room, "crash-1", "bob"))
        .await
        .unwrap();
    let dead = cluster.shard_mut(&owner).unwrap();
    let status = dead.node.wait_exit(within).await.unwrap();
    assert!(status.is_some(), "the owner did not crash");
    alice.close().await;
    bob.close().await;
    let after = 1_000 - 10 * (ROSES + 1);
    assert_eq!(wallet(admin, &token, "alice").await["balance"], after);

    let deadline = Instant::now() + Duration::from_secs(30);
    while wallet(admin, &token, "bob").await["earnings"] != 5 * (ROSES + 1) {
        assert!(
            Instant::now() < deadline,
            "no shard settled the dead owner's saga"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        wallet(admin, &token, "alice").await["balance"],
        after,
        "debited once"
    );
    assert_conserved(admin, &token).await;

    // The ledger itself: the saga settled, one debit under its id, everything conserved.
    let ledger = Ledger::open(&url, &std::env::temp_dir()).await.unwrap();
    let id = gift_id(&UserId::from("alice"), "crash-1");
    let saga = ledger.saga(id).await.unwrap().unwrap();
    assert_eq!(saga.state, SagaState::Settled);
    assert_eq!(
        ledger.wallet_entry(&"alice".into(), id).await.unwrap(),
        Some(EntryKind::Debit)
    );
    let totals = ledger.audit_totals().await.unwrap();
    assert!(totals.is_conserved(), "{totals:?}");
    assert_eq!(totals.granted, 2_000);
    let survivor = cluster.shards.iter().find(|s| s.id != owner).unwrap();
    let (new_owner, _) = cluster.room_owner(room.as_str()).await.unwrap().unwrap();
    assert_eq!(new_owner, survivor.id);
}
