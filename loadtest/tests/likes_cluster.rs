//! The like counter in a cluster, with real processes: likes from members on two gateways are
//! announced to both, and a total a member has seen survives the owner's `kill -9` (it was
//! written with the room's state before the `room.likes` that showed it went out).
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use kit::client::Client;
use kit::cluster::Cluster;
use protocol::RoomId;
use serde_json::json;

use crate::support;

use support::WAIT;

/// Waits for the `room.likes` that shows `total` (earlier ones may come first).
async fn sees_total(c: &mut Client, total: u64) {
    loop {
        let ev = c.next_event_named("room.likes", WAIT).await.unwrap();
        let t = ev.d["total"].as_u64().unwrap();
        if t >= total {
            assert_eq!(t, total, "{:?}", ev.d);
            return;
        }
    }
}

#[tokio::test]
async fn likes_cross_gateways_and_a_seen_total_survives_a_killed_owner() {
    let mut cluster = Cluster::of(2, 2).await.unwrap();
    let room = RoomId::from("hearts");
    let mut alice = cluster.connect(0, "alice").await.unwrap();
    let mut bob = cluster.connect(1, "bob").await.unwrap();
    alice.join_retrying(&room, None, WAIT).await.unwrap();
    bob.join_retrying(&room, None, WAIT).await.unwrap();
    let ok = bob
        .request("like.send", json!({"room": room, "count": 5}))
        .await
        .unwrap();
    assert_eq!(ok, json!({"total": 5}));
    let ok = alice
        .request("like.send", json!({"room": room, "count": 2}))
        .await
        .unwrap();
    assert_eq!(ok, json!({"total": 7}));
    for c in [&mut alice, &mut bob] {
        sees_total(c, 7).await;
    }
    // Seen by the members, so written: the next owner starts from it.
    let (owner, _) = cluster.room_owner("hearts").await.unwrap().unwrap();
    cluster.shard_mut(&owner).unwrap().node.kill9().unwrap();
    let mut carol = cluster.connect(1, "carol").await.unwrap();
    let ok = carol.join_retrying(&room, None, WAIT * 4).await.unwrap();
    assert_eq!(ok["snapshot"]["likes"], 7, "{ok}");
    let ok = carol
        .request("like.send", json!({"room": room}))
        .await
        .unwrap();
    assert_eq!(ok, json!({"total": 8}));
    sees_total(&mut carol, 8).await;
}
