//! End-to-end tests of the like counter on a standalone node: `like.send` from real clients,
//! the coalesced `room.likes` every member gets, and the total in the snapshot of a joiner,
//! also after the room unloaded.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use tokio::time::Instant;

use gateway::GatewayConfig;
use kit::client::Client;
use protocol::ErrorCode;
use serde_json::{Value, json};
use shard::ShardConfig;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"test-secret-for-the-like-counter";
const ADMIN: &str = "likes-admin";
const WAIT: Duration = Duration::from_secs(5);

/// `room.likes` events until one shows `total`: their `d`s, in order.
async fn likes_until(c: &mut Client, total: u64) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let ev = c.next_event_named("room.likes", WAIT).await.unwrap();
        assert_eq!((ev.epoch, ev.seq), (None, None), "volatile: {:?}", ev.d);
        let t = ev.d["total"].as_u64().unwrap();
        seen.push(ev.d);
        if t >= total {
            assert_eq!(t, total, "{seen:?}");
            return seen;
        }
    }
}

#[tokio::test]
async fn a_burst_of_likes_reaches_every_member_coalesced_and_the_total_outlives_an_unload() {
    let interval = Duration::from_millis(400);
    let shard = ShardConfig {
        likes_interval: interval,
        idle_unload: Duration::from_millis(200),
        ..ShardConfig::default()
    };
    let s = Server::launch(SECRET, ADMIN, GatewayConfig::default(), shard).await;
    let mut host = s.connect("host").await;
    let room = host.create_room(json!({"room": "hearts"})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut bob = s.connect("bob").await;
    bob.join(&room, false, None).await.unwrap();
    let mut carol = s.connect("carol").await;
    carol.join(&room, false, None).await.unwrap();

    // 30 calls of 3 likes each from bob and carol, as fast as the sockets go.
    let started = Instant::now();
    let mut last = 0;
    for i in 0..30 {
        let c = if i % 2 == 0 { &mut bob } else { &mut carol };
        let ok = c
            .request("like.send", json!({"room": room, "count": 3}))
            .await
            .unwrap();
        let total = ok["total"].as_u64().unwrap();
        assert_eq!(total, last + 3, "each reply counts its own likes in");
        last = total;
    }
    let sending = started.elapsed();
    for c in [&mut host, &mut bob, &mut carol] {
        let seen = likes_until(c, 90).await;
        // Coalesced: one event at once, then at most one an interval.
        let bound = 2 + (sending.as_millis() / interval.as_millis()) as usize;
        assert!(
            seen.len() <= bound,
            "{} events for 30 calls in {sending:?}",
            seen.len()
        );
        let added: u64 = seen.iter().map(|d| d["added"].as_u64().unwrap()).sum();
        assert_eq!(added, 90, "every like is in exactly one event: {seen:?}");
        let recent = seen.last().unwrap()["recent"].as_array().unwrap().clone();
        assert!(!recent.is_empty() && recent.len() <= 2, "{recent:?}");
    }
    // A joiner's snapshot has the total.
    let mut dave = s.connect("dave").await;
    let ok = dave.join(&room, false, None).await.unwrap();
    assert_eq!(ok["snapshot"]["likes"], 90);

    // Everyone leaves, the room unloads; the total is still there.
    for c in [&mut host, &mut bob, &mut carol, &mut dave] {
        c.request("room.leave", json!({"room": room}))
            .await
            .unwrap();
    }
    s.wait_unloaded("hearts", WAIT * 3).await;
    let mut erin = s.connect("erin").await;
    let ok = erin.join(&room, false, None).await.unwrap();
    assert_eq!(ok["snapshot"]["likes"], 90);
    let ok = erin
        .request("like.send", json!({"room": room}))
        .await
        .unwrap();
    assert_eq!(ok, json!({"total": 91}));
    let seen = likes_until(&mut erin, 91).await;
    assert_eq!(seen, [json!({"total": 91, "added": 1, "recent": ["erin"]})]);
    s.stop().await;
}

#[tokio::test]
async fn bad_counts_and_non_members_are_refused_and_change_nothing() {
    let shard = ShardConfig::default();
    let s = Server::launch(SECRET, ADMIN, GatewayConfig::default(), shard).await;
    let mut host = s.connect("host").await;
    let room = host.create_room(json!({"room": "strict"})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    for bad in [json!(0), json!(101)] {
        let e = host
            .request("like.send", json!({"room": room, "count": bad}))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::BadRequest), "{bad}");
    }
    let e = host
        .request("like.send", json!({"room": room, "count": "many"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::BadFrame));
    let mut dave = s.connect("dave").await;
    let e = dave
        .request("like.send", json!({"room": room}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NotInRoom));
    let e = dave
        .request("like.send", json!({"room": "nowhere"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::RoomNotFound));
    // Nothing was counted: the first real like makes the total 1.
    let ok = host
        .request("like.send", json!({"room": room}))
        .await
        .unwrap();
    assert_eq!(ok, json!({"total": 1}));
    s.stop().await;
}
