//! Robots across a restart of a standalone node: the robots' runtime stops without a word
//! (their seats are saved with the room), and the next start runs the configuration it finds.
//! A robot that configuration no longer lists must not keep its seat, held by nobody.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::Path;
use std::time::Duration;

use gateway::GatewayConfig;
use gateway::standalone::{self, Running, StandaloneConfig};
use kit::client::Client;
use protocol::RoomId;
use serde_json::{Value, json};
use shard::ShardConfig;
use storage::robots::RobotStore;
use tokio::time::Instant;

const SECRET: &[u8] = b"test-secret-for-robot-restarts";
const WAIT: Duration = Duration::from_secs(5);

async fn start(dir: &Path) -> Running {
    standalone::start(StandaloneConfig {
        ws_addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_owned(),
        jwt_secret: SECRET.to_vec(),
        admin_token: Some("admin".into()),
        gateway: GatewayConfig {
            drain_window: Duration::from_millis(50),
            ..GatewayConfig::default()
        },
        shard: ShardConfig {
            robot_reconcile: Duration::from_millis(100),
            ..ShardConfig::default()
        },
        ledger: String::new(),
    })
    .await
    .unwrap()
}

async fn connect(node: &Running, user: &str) -> Client {
    let token = kit::token(SECRET, user).unwrap();
    kit::client::connect(&format!("ws://{}/ws", node.ws_addr), Some(&token))
        .await
        .unwrap()
}

/// The configuration of room `stage`: `robots` take seats at once and stay.
async fn configure(dir: &Path, robots: &[&str]) {
    let robots: Vec<Value> = robots.iter().map(|r| json!({"id": r})).collect();
    let config = json!({
        "room": "stage", "seats": 4, "robots": robots,
        "seat": {"every_s": 0.2, "stay_s": 3600}, "jitter": 0,
    });
    let store = RobotStore::sqlite(dir).await.unwrap();
    store
        .put(&RoomId::from("stage"), config.to_string().into_bytes())
        .await
        .unwrap();
}

/// The users seated in `room` (a fresh snapshot), sorted.
async fn seated(c: &mut Client, room: &RoomId) -> Vec<String> {
    let snap = c.join(room, false, None).await.unwrap();
    let mut users: Vec<String> = snap["snapshot"]["seats"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["user"].as_str().map(str::to_owned))
        .collect();
    users.sort();
    users
}

/// Asks `seated` until it is `want`, within [`WAIT`].
async fn wait_seated(c: &mut Client, room: &RoomId, want: &[&str]) {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = seated(c, room).await;
        if now == want {
            return;
        }
        assert!(Instant::now() < deadline, "seated {now:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_robot_dropped_from_the_configuration_during_a_restart_gives_its_seat_back() {
    let dir = tempfile::tempdir().unwrap();
    let room = RoomId::from("stage");
    configure(dir.path(), &["bot:amy", "bot:bo"]).await;
    let node = start(dir.path()).await;
    let mut eve = connect(&node, "eve").await;
    wait_seated(&mut eve, &room, &["bot:amy", "bot:bo"]).await;
    drop(eve);
    node.stop(WAIT).await;
    // While the node is down, the operator drops Bo.
    configure(dir.path(), &["bot:amy"]).await;
    let node = start(dir.path()).await;
    let mut eve = connect(&node, "eve").await;
    wait_seated(&mut eve, &room, &["bot:amy"]).await;
    // The freed seat is a seat like any other.
    let taken = eve
        .request("seat.take", json!({"room": "stage"}))
        .await
        .unwrap();
    assert!(taken["seat"].is_u64(), "{taken}");
    node.stop(WAIT).await;
}
