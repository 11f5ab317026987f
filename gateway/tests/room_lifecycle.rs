//! End-to-end tests of room quotas and retention on a standalone node (issue 42, point 2):
//! per-user creation rate and cap of stored rooms answer `QUOTA_EXCEEDED`; rooms nobody joins
//! for the retention leave `rooms.db`, joined and occupied ones stay.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use gateway::GatewayConfig;
use kit::client::ClientError;
use protocol::{ErrorCode, RoomId};
use serde_json::json;
use shard::ShardConfig;
use tokio::time::Instant;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"test-secret-for-room-lifecycle";

async fn start(tune: impl FnOnce(&mut ShardConfig)) -> Server {
    let gateway = GatewayConfig {
        drain_window: Duration::from_millis(100),
        ..GatewayConfig::default()
    };
    let mut shard = ShardConfig::default();
    tune(&mut shard);
    Server::launch(SECRET, "admin-token", gateway, shard).await
}

fn code(e: ClientError) -> ErrorCode {
    e.code()
        .unwrap_or_else(|| panic!("expected an error reply, got {e:?}"))
}

#[tokio::test]
async fn creations_beyond_the_per_minute_allowance_answer_quota_exceeded() {
    let s = start(|sh| {
        sh.room_creates_per_min = 3;
        sh.max_rooms_per_user = 0;
    })
    .await;
    let mut alice = s.connect("alice").await;
    for i in 0..3 {
        alice
            .create_room(json!({"room": format!("a{i}"), "seats": 4}))
            .await
            .unwrap();
    }
    let e = alice
        .create_room(json!({"room": "a3", "seats": 4}))
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::QuotaExceeded);
    // A join that would auto-create a room is a creation too.
    let e = alice
        .join(&RoomId::from("a4"), false, None)
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::QuotaExceeded);
    // Joining an existing room is no creation; another user has an allowance of their own.
    alice.join(&RoomId::from("a0"), false, None).await.unwrap();
    let mut bob = s.connect("bob").await;
    bob.create_room(json!({"room": "b0", "seats": 4}))
        .await
        .unwrap();
    s.stop().await;
}

#[tokio::test]
async fn a_user_at_the_cap_of_stored_rooms_cannot_create_another() {
    let s = start(|sh| {
        sh.room_creates_per_min = 0;
        sh.max_rooms_per_user = 2;
        sh.idle_unload = Duration::from_millis(100);
    })
    .await;
    let mut alice = s.connect("alice").await;
    for id in ["c0", "c1"] {
        alice
            .create_room(json!({"room": id, "seats": 4}))
            .await
            .unwrap();
    }
    // The count is the store's, not a runtime's: it holds after the rooms unloaded.
    for id in ["c0", "c1"] {
        s.wait_unloaded(id, Duration::from_secs(5)).await;
    }
    let e = alice
        .create_room(json!({"room": "c2", "seats": 4}))
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::QuotaExceeded);
    let e = alice
        .join(&RoomId::from("c3"), false, None)
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::QuotaExceeded);
    // Her rooms still work; the refused ones do not exist.
    alice.join(&RoomId::from("c0"), false, None).await.unwrap();
    let mut bob = s.connect("bob").await;
    bob.join(&RoomId::from("c2"), false, None).await.unwrap();
    let owner = moderation(&s, "c2").await.unwrap();
    assert_eq!(owner["owner"], "bob", "the refused create wrote nothing");
    // A transfer does not move the count: it follows the creator.
    bob.join(&RoomId::from("c0"), false, None).await.unwrap();
    alice
        .request("room.transfer", json!({"room": "c0", "user": "bob"}))
        .await
        .unwrap();
    assert_eq!(moderation(&s, "c0").await.unwrap()["owner"], "bob");
    let e = alice
        .create_room(json!({"room": "c4", "seats": 4}))
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::QuotaExceeded);
    s.stop().await;
}

/// The room's moderation record from durable storage (`None`: not stored), read through the
/// admin API, which touches nothing.
async fn moderation(s: &Server, room: &str) -> Option<serde_json::Value> {
    let r = kit::admin::get(
        s.admin,
        &format!("/admin/rooms/{room}/moderation"),
        Some("admin-token"),
    )
    .await
    .unwrap();
    match r.status {
        200 => Some(r.json()),
        404 => None,
        other => panic!("moderation of {room}: HTTP {other}: {}", r.body),
    }
}

#[tokio::test]
async fn retention_removes_rooms_nobody_joined_and_keeps_joined_and_occupied_ones() {
    const RETENTION: Duration = Duration::from_secs(4);
    let s = start(|sh| {
        sh.auto_create = false;
        sh.room_retention = RETENTION;
        sh.retention_sweep = Duration::from_millis(200);
        sh.idle_unload = Duration::from_millis(100);
    })
    .await;
    let started = Instant::now();
    let mut alice = s.connect("alice").await;
    for id in ["stale", "joined", "occupied"] {
        alice
            .create_room(json!({"room": id, "seats": 4}))
            .await
            .unwrap();
    }
    // Carol stays in one room all along; bob joins another halfway through the retention.
    let mut carol = s.connect("carol").await;
    carol
        .join(&RoomId::from("occupied"), false, None)
        .await
        .unwrap();
    tokio::time::sleep_until(started + RETENTION / 2).await;
    let mut bob = s.connect("bob").await;
    let joined = RoomId::from("joined");
    bob.join(&joined, false, None).await.unwrap();
    bob.request("room.leave", json!({"room": joined}))
        .await
        .unwrap();
    // The unjoined room goes after the retention (the admin API reads without touching).
    let deadline = started + RETENTION * 2;
    while moderation(&s, "stale").await.is_some() {
        assert!(
            Instant::now() < deadline,
            "an unjoined room outlived its retention"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        Instant::now() < started + RETENTION + RETENTION / 2,
        "the sweep took too long for this test to tell joined rooms apart"
    );
    assert!(
        moderation(&s, "joined").await.is_some(),
        "a joined room was removed"
    );
    assert!(
        moderation(&s, "occupied").await.is_some(),
        "a room with a member was removed"
    );
    let e = bob
        .join(&RoomId::from("stale"), false, None)
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::RoomNotFound);
    bob.join(&joined, false, None).await.unwrap();
    s.stop().await;
}
