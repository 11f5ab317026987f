//! Guards across gateways, with real processes: a guard bought through one gateway shows at
//! once (`member.update` with `guard`) in the host's room where the buyer's connection on the
//! other gateway sits.
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use kit::cluster::Cluster;
use serde_json::json;
use tokio::time::Instant;

#[tokio::test]
async fn a_guard_bought_on_one_gateway_shows_in_the_room_held_through_the_other() {
    let cluster = Cluster::of(1, 2).await.unwrap();
    let token = Some(cluster.admin_token.as_str());
    let g0 = cluster.gateways[0].admin;
    let r = kit::admin::grant(g0, token, "alice", 5_000, "seed")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let mut hana = cluster.connect(0, "hana").await.unwrap();
    let room = hana
        .create_room(json!({"room": "hana-room"}))
        .await
        .unwrap();
    let mut w = cluster.connect(0, "watcher").await.unwrap();
    w.join(&room, false, None).await.unwrap();
    // alice sits in the room through gateway 1 ...
    let mut in_room = cluster.connect(1, "alice").await.unwrap();
    in_room.join(&room, false, None).await.unwrap();
    // ... and buys through gateway 0.
    let mut buyer = cluster.connect(0, "alice").await.unwrap();
    let ok = buyer
        .request(
            "guard.buy",
            json!({"host": "hana", "plan": "week", "req_id": "x1"}),
        )
        .await
        .unwrap();
    assert_eq!(ok["applied"], true);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = w.next_event(left).await.unwrap();
        if e.ev == "member.update" && e.d["user"] == "alice" {
            assert_eq!(e.d["guard"], true, "{:?}", e.d);
            break;
        }
    }
    let listed = w
        .request("guard.list", json!({"room": room}))
        .await
        .unwrap();
    assert_eq!(listed["guards"][0]["user"], "alice");
}
