//! The room rocket under a crash: a node killed (abort, as kill -9) after a launch's rewards
//! were booked and before the launch was announced. After a restart the room's owner pays the
//! same launch again under the same keys (nothing credited twice) and announces it once; a
//! further restart announces nothing more. Real `chorus` processes.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::net::SocketAddr;
use std::time::Duration;

use kit::node::{NODE_READY_TIMEOUT, wait_listening};
use kit::standalone::Server;
use protocol::RoomId;
use serde_json::{Value, json};

const SECRET: &str = "rocket-secret";
const ADMIN: &str = "rocket-admin";
/// One level: 100 coins of fuel; 30 to the top contributor, 10 to one present member.
const CONFIG: &str = "[[rocket_levels]]\nfuel = 100\ntop = [30]\npresent = 1\npresent_coins = 10\n";

async fn node(dir: &std::path::Path, config: &std::path::Path, crash: bool) -> Server {
    let config = config.to_str().unwrap();
    let mut env = vec![("CHORUS_CONFIG", config)];
    if crash {
        env.push(("CHORUS_TEST_CRASH_AFTER_ROCKET_PAYOUT", "1"));
    }
    let s = Server::start(dir, SECRET, ADMIN, &[], &env).await.unwrap();
    wait_listening(s.admin, NODE_READY_TIMEOUT).await.unwrap();
    s
}

async fn wallet(admin: SocketAddr, user: &str) -> Value {
    kit::admin::wallet(admin, Some(ADMIN), user)
        .await
        .unwrap()
        .json()
}

/// alice's, bob's and carol's coins.
async fn balances(admin: SocketAddr) -> [i64; 3] {
    let mut out = [0; 3];
    for (i, u) in ["alice", "bob", "carol"].iter().enumerate() {
        out[i] = wallet(admin, u).await["balance"].as_i64().unwrap();
    }
    out
}

/// The `rocket.launch` events among the events up to (and without) `marker`'s chat.
async fn launches_until_chat(
    c: &mut kit::client::Client,
    room: &RoomId,
    marker: &str,
) -> Vec<Value> {
    c.chat(room, marker).await.unwrap();
    let events = c
        .events_until_chat(marker, Duration::from_secs(20))
        .await
        .unwrap();
    events
        .into_iter()
        .filter(|e| e.ev == "rocket.launch")
        .map(|e| e.d)
        .collect()
}

#[tokio::test]
async fn a_launch_killed_between_payout_and_event_is_paid_once_and_announced_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rocket.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let room = RoomId::from("rocket");

    // 1. alice fills the level with ten roses to bob; the node dies after the payout.
    let mut n = node(dir.path(), &config, true).await;
    let r = kit::admin::grant(n.admin, Some(ADMIN), "alice", 100, "g1")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let mut a = n.connect("alice").await.unwrap();
    let mut b = n.connect("bob").await.unwrap();
    a.join(&room, false, None).await.unwrap();
    b.join(&room, false, None).await.unwrap();
    for i in 0..10 {
        let g = json!({"room": room, "req_id": format!("r{i}"), "gift": "rose", "to": ["bob"]});
        if i < 9 {
            a.request("gift.send", g).await.unwrap();
        } else {
            // The last one launches: the node may die before its answer.
            a.send("gift.send", g).await.unwrap();
        }
    }
    let status = n.node.wait_exit(Duration::from_secs(20)).await.unwrap();
    assert!(status.is_some(), "the node did not crash after the payout");
    drop(a);
    drop(b);

    // 2. Restarted: the rewards were booked before the crash (alice 0 + 30; bob, the one
    // present member besides her, 10), and the launch was not announced.
    let n = node(dir.path(), &config, false).await;
    let paid = balances(n.admin).await;
    assert_eq!(paid, [30, 10, 0], "the payout before the crash");
    // Loading the room (carol's join) makes its owner pay the launch again and announce it.
    let mut c = n.connect("carol").await.unwrap();
    c.join(&room, false, None).await.unwrap();
    let ev = c
        .next_event_named("rocket.launch", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(ev.d["launch"], 1);
    assert_eq!(ev.d["fuel"], 100);
    let rewards: Vec<(String, i64)> = ev.d["rewards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["user"].as_str().unwrap().to_owned(),
                w["coins"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(rewards, vec![("alice".into(), 30), ("bob".into(), 10)]);
    assert!(
        launches_until_chat(&mut c, &room, "after-1")
            .await
            .is_empty(),
        "announced once"
    );
    assert_eq!(balances(n.admin).await, paid, "paid once");
    let totals = kit::admin::ledger_totals(n.admin, Some(ADMIN))
        .await
        .unwrap()
        .json();
    assert_eq!(totals["conserved"], true, "{totals}");
    c.close().await;
    drop(n);

    // 3. Another restart: nothing pending, nothing announced or paid again.
    let n = node(dir.path(), &config, false).await;
    let mut c = n.connect("carol").await.unwrap();
    c.join(&room, false, None).await.unwrap();
    assert!(
        launches_until_chat(&mut c, &room, "after-2")
            .await
            .is_empty()
    );
    assert_eq!(balances(n.admin).await, paid);
}
