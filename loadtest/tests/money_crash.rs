//! A node killed between a gift's debit and its settle: after a restart the owner's recovery
//! settles the saga; nothing is debited twice and nothing is voided. Real `chorus` processes.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::net::SocketAddr;
use std::time::Duration;

use kit::cluster::{Cluster, ClusterOptions};
use kit::node::{NODE_READY_TIMEOUT, wait_listening};
use kit::standalone::Server;
use protocol::RoomId;
use serde_json::json;
use tokio::time::Instant;

const SECRET: &str = "crash-secret";
const ADMIN: &str = "crash-admin";

async fn standalone(dir: &std::path::Path, crash: bool) -> Server {
    standalone_with(dir, crash, &[]).await
}

async fn standalone_with(dir: &std::path::Path, crash: bool, extra: &[(&str, &str)]) -> Server {
    let mut env = extra.to_vec();
    if crash {
        env.push(("CHORUS_TEST_CRASH_AFTER_DEBIT", "1"));
    }
    Server::start(dir, SECRET, ADMIN, &[], &env).await.unwrap()
}

async fn wallet(admin: SocketAddr, token: &str, user: &str) -> serde_json::Value {
    kit::admin::wallet(admin, Some(token), user)
        .await
        .unwrap()
        .json()
}

/// Grants alice the 100 coins each test's gift (a 10-coin rose to bob) draws on.
async fn grant_alice(admin: SocketAddr, token: &str) {
    let r = kit::admin::grant(admin, Some(token), "alice", 100, "g1")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
}

/// Waits (at most `within`) until bob has earned the rose's 5 coins: `what` failed otherwise.
async fn wait_bob_credited(admin: SocketAddr, token: &str, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    while wallet(admin, token, "bob").await["earnings"] != 5 {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn assert_conserved(admin: SocketAddr, token: &str) {
    let totals = kit::admin::ledger_totals(admin, Some(token))
        .await
        .unwrap()
        .json();
    assert_eq!(totals["conserved"], true, "{totals}");
}

/// Starts a node that aborts between a gift's debit and its settle, has alice send bob a rose
/// in the brand-new `room`, and waits for the crash. Returns the gift's request.
async fn crash_mid_gift(dir: &std::path::Path, room: &RoomId, req_id: &str) -> serde_json::Value {
    let mut node = standalone(dir, true).await;
    let admin = node.admin;
    wait_listening(admin, NODE_READY_TIMEOUT).await.unwrap();
    grant_alice(admin, ADMIN).await;
    let mut a = node.connect("alice").await.unwrap();
    let mut b = node.connect("bob").await.unwrap();
    a.join(room, false, None).await.unwrap();
    b.join(room, false, None).await.unwrap();
    // A brand-new room has no previous owner and no saga: its load sweeps nothing.
    assert_eq!(kit::admin::metric(admin, SKIPPED).await.unwrap(), 1.0);
    let req = json!({"room": room, "req_id": req_id, "gift": "rose", "to": ["bob"]});
    let _ = a.send("gift.send", req.clone()).await.unwrap();
    // The node aborts after the debit, before the settle.
    let status = node.node.wait_exit(Duration::from_secs(10)).await.unwrap();
    assert!(status.is_some(), "the node did not crash");
    req
}

const SKIPPED: &str = "chorus_saga_sweeps_skipped_total";
const LOADED: &str = "chorus_saga_orphan_rooms_loaded_total";

#[tokio::test]
async fn a_crash_between_debit_and_settle_is_settled_once_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let room = RoomId::from("crash");
    let req = crash_mid_gift(dir.path(), &room, "crash-1").await;

    let node = standalone(dir.path(), false).await;
    let admin = node.admin;
    wait_listening(admin, NODE_READY_TIMEOUT).await.unwrap();
    let mut a = node.connect("alice").await.unwrap();
    // Loading the room starts the owner's recovery, which settles the debited saga: the room
    // had an owner, so its load does not skip the sweep.
    a.join(&room, false, None).await.unwrap();
    assert_eq!(kit::admin::metric(admin, SKIPPED).await.unwrap(), 0.0);
    let within = Duration::from_secs(10);
    wait_bob_credited(admin, ADMIN, within, "recovery did not settle the saga").await;
    assert_eq!(
        wallet(admin, ADMIN, "alice").await["balance"],
        90,
        "debited exactly once"
    );
    // The client's retry returns the settled order, not a void, and debits nothing more.
    let ok = a.request("gift.send", req).await.unwrap();
    assert_eq!(ok["balance"], 90);
    assert_eq!(wallet(admin, ADMIN, "alice").await["balance"], 90);
    assert_eq!(wallet(admin, ADMIN, "bob").await["earnings"], 5);
    assert_conserved(admin, ADMIN).await;
}

/// The same crash, but nobody comes back to the room: the node's orphan sweep loads it and
/// its owner's recovery settles the saga.
#[tokio::test]
async fn a_crashed_saga_in_a_room_nobody_rejoins_is_settled_by_the_orphan_sweep() {
    let dir = tempfile::tempdir().unwrap();
    crash_mid_gift(dir.path(), &RoomId::from("orphan"), "orphan-1").await;

    let sweep = [("CHORUS_ORPHAN_SWEEP_MS", "200")];
    let node = standalone_with(dir.path(), false, &sweep).await;
    let admin = node.admin;
    wait_listening(admin, NODE_READY_TIMEOUT).await.unwrap();
    assert_eq!(
        wallet(admin, ADMIN, "alice").await["balance"],
        90,
        "debited before the crash"
    );
    assert_eq!(
        wallet(admin, ADMIN, "bob").await["earnings"],
        0,
        "not credited yet"
    );
    // No client connects: only the sweep can load the room. The saga is at least a few
    // seconds old before the sweep lists it (it skips sagas a live owner may still move).
    let within = Duration::from_secs(20);
    wait_bob_credited(
        admin,
        ADMIN,
        within,
        "the orphan sweep did not settle the saga",
    )
    .await;
    assert_eq!(
        wallet(admin, ADMIN, "alice").await["balance"],
        90,
        "debited once"
    );
    assert_eq!(kit::admin::metric(admin, LOADED).await.unwrap(), 1.0);
    assert_conserved(admin, ADMIN).await;
}

/// In a cluster the crashed owner stays down and nobody rejoins: the ring moves the room to
/// the other shard, whose orphan sweep loads it once the dead owner's lease has expired, and
/// its recovery settles the gift.
#[tokio::test]
async fn a_dead_owners_saga_is_settled_by_another_shard_when_nobody_rejoins() {
    let mut cluster = Cluster::start(ClusterOptions {
        shards: 2,
        gateways: 1,
        env: vec![
            ("CHORUS_TEST_CRASH_AFTER_DEBIT".into(), "1".into()),
            ("CHORUS_ORPHAN_SWEEP_MS".into(), "200".into()),
        ],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let admin = cluster.gateways[0].admin;
    let token = cluster.admin_token.clone();
    grant_alice(admin, &token).await;
    let room = RoomId::from("orphan-cluster");
    let within = Duration::from_secs(10);
    let mut a = cluster.connect(0, "alice").await.unwrap();
    let mut b = cluster.connect(0, "bob").await.unwrap();
    a.join_retrying(&room, None, within).await.unwrap();
    b.join_retrying(&room, None, within).await.unwrap();
    let (owner, _) = cluster.room_owner(room.as_str()).await.unwrap().unwrap();
    let req = json!({"room": room, "req_id": "orphan-c1", "gift": "rose", "to": ["bob"]});
    let _ = a.send("gift.send", req).await.unwrap();
    let dead = cluster.shard_mut(&owner).unwrap();
    let status = dead.node.wait_exit(Duration::from_secs(10)).await.unwrap();
    assert!(status.is_some(), "the owner did not crash");
    a.close().await;
    b.close().await;
    assert_eq!(
        wallet(admin, &token, "alice").await["balance"],
        90,
        "debited before the crash"
    );

    let within = Duration::from_secs(30);
    wait_bob_credited(
        admin,
        &token,
        within,
        "no shard settled the dead owner's saga",
    )
    .await;
    assert_eq!(
        wallet(admin, &token, "alice").await["balance"],
        90,
        "debited once"
    );
    let survivor = cluster.shards.iter().find(|s| s.id != owner).unwrap();
    assert!(kit::admin::metric(survivor.admin, LOADED).await.unwrap() >= 1.0);
    let (new_owner, _) = cluster.room_owner(room.as_str()).await.unwrap().unwrap();
    assert_eq!(new_owner, survivor.id);
}

/// A robot's gift, cut by a crash between its debit and its settle, is settled once by the
/// next runtime's recovery; the robot's budget, counted before the order, is not spent again.
#[tokio::test]
async fn a_robot_gift_cut_by_a_crash_is_settled_once_and_its_budget_holds() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("chorus.toml");
    std::fs::write(&conf, "robot_reconcile_ms = 200\n").unwrap();
    let conf = conf.display().to_string();
    let room = RoomId::from("robogift");
    let env = [("CHORUS_CONFIG", conf.as_str())];
    let mut node = standalone_with(dir.path(), true, &env).await;
    let admin = node.admin;
    wait_listening(admin, NODE_READY_TIMEOUT).await.unwrap();
    let r = kit::admin::grant(admin, Some(ADMIN), "bot:giver", 100, "fund")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let mut b = node.connect("bob").await.unwrap();
    b.join(&room, false, None).await.unwrap();
    // One rose of budget: exactly one gift, ever.
    let config = json!({
        "room": "robogift",
        "create": false,
        "robots": [{"id": "bot:giver"}],
        "gift": {"every_s": 0.2, "gift": "rose", "budget": 10},
    });
    let store = storage::robots::RobotStore::sqlite(dir.path())
        .await
        .unwrap();
    store
        .put(&room, config.to_string().into_bytes())
        .await
        .unwrap();
    let status = node.node.wait_exit(Duration::from_secs(10)).await.unwrap();
    assert!(status.is_some(), "the node did not crash mid-gift");

    let node = standalone_with(dir.path(), false, &env).await;
    let admin = node.admin;
    wait_listening(admin, NODE_READY_TIMEOUT).await.unwrap();
    // Bob comes back; the room's load recovers the robot's saga, and its robot runs again.
    let mut b = node.connect("bob").await.unwrap();
    b.join(&room, false, None).await.unwrap();
    wait_bob_credited(
        admin,
        ADMIN,
        Duration::from_secs(10),
        "the robot's gift was not settled",
    )
    .await;
    // The robot is back in the room (it may have come before Bob).
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.join(&room, false, None).await.unwrap()["snapshot"]["robots"] != 1 {
        assert!(Instant::now() < deadline, "the robot did not come back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Longer than several gift intervals: no second gift.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        wallet(admin, ADMIN, "bot:giver").await["balance"],
        90,
        "debited once"
    );
    assert_eq!(wallet(admin, ADMIN, "bob").await["earnings"], 5);
    assert_conserved(admin, ADMIN).await;
}
