//! The room rocket on a standalone server: `rocket.progress` (volatile, latest wins, bounded
//! rate) while gifts fuel it, then `rocket.launch` with the rewards booked in the ledger.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::sync::Arc;
use std::time::Duration;

use gateway::GatewayConfig;
use protocol::RoomId;
use serde_json::json;
use shard::ShardConfig;
use shard::state::{RocketLevel, RocketRules};
use tokio::time::Instant;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"rocket-test-secret";
const ADMIN: &str = "rocket-admin";
const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn gifts_fuel_the_rocket_and_a_full_level_launches_with_paid_rewards() {
    let gateway = GatewayConfig {
        rate_per_sec: 10_000,
        rate_burst: 10_000,
        drain_window: Duration::from_millis(100),
        ..GatewayConfig::default()
    };
    let shard = ShardConfig {
        rocket: Arc::new(RocketRules {
            levels: vec![
                RocketLevel {
                    fuel: 100,
                    top: vec![30],
                    present: 1,
                    present_coins: 10,
                },
                RocketLevel {
                    fuel: 1_000,
                    top: vec![],
                    present: 0,
                    present_coins: 0,
                },
            ],
            daily_cap: 0,
            progress_interval_ms: 200,
        }),
        ..ShardConfig::default()
    };
    let s = Server::launch(SECRET, ADMIN, gateway, shard).await;
    let r = kit::admin::grant(s.admin, Some(ADMIN), "alice", 1_000, "g")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let room = RoomId::from("rocket");
    let mut a = s.connect("alice").await;
    let mut w = s.connect("watcher").await;
    a.join(&room, false, None).await.unwrap();
    w.join(&room, false, None).await.unwrap();
    let started = Instant::now();
    for i in 0..5 {
        let g = json!({"room": room, "req_id": format!("p{i}"), "gift": "rose", "to": ["watcher"]});
        a.request("gift.send", g).await.unwrap();
    }
    // Latest wins: progress events come until one shows all 50 coins of fuel.
    let mut progress = 0;
    loop {
        let e = w.next_event_named("rocket.progress", WAIT).await.unwrap();
        progress += 1;
        assert_eq!(
            (e.d["level"].as_u64(), e.d["target"].as_i64()),
            (Some(1), Some(100))
        );
        assert!(e.seq.is_none(), "volatile: not sequenced");
        if e.d["fuel"] == 50 {
            break;
        }
    }
    // Bounded rate: at most one per 200 ms interval (and the first at once).
    let bound = started.elapsed().as_millis() / 200 + 1;
    assert!(
        progress as u128 <= bound,
        "{progress} progress events over {bound}"
    );
    let mut last_order = None;
    for i in 5..10 {
        let g = json!({"room": room, "req_id": format!("p{i}"), "gift": "rose", "to": ["watcher"]});
        last_order = Some(a.request("gift.send", g).await.unwrap()["order"].clone());
    }
    let e = w.next_event_named("rocket.launch", WAIT).await.unwrap();
    assert!(e.seq.is_some(), "sequenced");
    // The tenth rose filled the level: the launch names it and its sender.
    assert!(e.d["order"].is_string(), "{}", e.d);
    assert_eq!(Some(&e.d["order"]), last_order.as_ref());
    assert_eq!(e.d["by"], "alice");
    assert_eq!(
        (e.d["launch"].as_u64(), e.d["level"].as_u64()),
        (Some(1), Some(1))
    );
    let rewards = e.d["rewards"].as_array().unwrap();
    assert_eq!(rewards.len(), 2);
    assert_eq!(
        (rewards[0]["user"].as_str(), rewards[0]["coins"].as_i64()),
        (Some("alice"), Some(30))
    );
    assert_eq!(
        (rewards[1]["user"].as_str(), rewards[1]["why"].as_str()),
        (Some("watcher"), Some("present"))
    );
    // Booked before the announcement.
    let alice = kit::admin::wallet(s.admin, Some(ADMIN), "alice")
        .await
        .unwrap()
        .json();
    assert_eq!(alice["balance"], 1_000 - 100 + 30);
    let watcher = kit::admin::wallet(s.admin, Some(ADMIN), "watcher")
        .await
        .unwrap()
        .json();
    assert_eq!(watcher["balance"], 10);
    // The next level starts from zero fuel.
    let e = w.next_event_named("rocket.progress", WAIT).await.unwrap();
    assert_eq!(
        (
            e.d["level"].as_u64(),
            e.d["fuel"].as_i64(),
            e.d["launches"].as_u64()
        ),
        (Some(2), Some(0), Some(1))
    );
    // One gift worth more than level 2 (1,000) and level 1 after it (100): both launch, one
    // after the other, each naming that gift; the 50 left over stay in level 2.
    let r = kit::admin::grant(s.admin, Some(ADMIN), "alice", 2_000, "g2")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let g = json!({"room": room, "req_id": "big", "gift": "rose", "count": 115, "to": ["watcher"]});
    let big = a.request("gift.send", g).await.unwrap()["order"].clone();
    for (launch, level) in [(2, 2), (3, 1)] {
        let e = w.next_event_named("rocket.launch", WAIT).await.unwrap();
        assert_eq!(
            (e.d["launch"].as_u64(), e.d["level"].as_u64()),
            (Some(launch), Some(level)),
            "{}",
            e.d
        );
        assert_eq!((&e.d["order"], e.d["by"].as_str()), (&big, Some("alice")));
    }
    let totals = kit::admin::ledger_totals(s.admin, Some(ADMIN))
        .await
        .unwrap()
        .json();
    assert_eq!(totals["conserved"], true, "{totals}");
    s.stop().await;
}
