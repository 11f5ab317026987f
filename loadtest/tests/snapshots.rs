//! Room snapshots with a real `chorus` process: a room writes its durable state as it changes,
//! so a room that unloads unchanged since its last write writes nothing more, and its next load
//! reads the state it had.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::net::SocketAddr;
use std::time::Duration;

use kit::standalone::Server;
use serde_json::json;
use tokio::time::Instant;

const SECRET: &str = "snapshot-secret";
const ADMIN: &str = "snapshot-admin";
const SKIPPED: &str = "chorus_shard_snapshot_writes_skipped_total";
const WAIT: Duration = Duration::from_secs(10);

/// Waits until the admin API no longer finds `room` running (it unloaded).
async fn wait_unloaded(admin: SocketAddr, room: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let path = format!("/admin/rooms/{room}");
        let r = kit::admin::get(admin, &path, Some(ADMIN)).await.unwrap();
        if r.status == 404 {
            return;
        }
        assert!(Instant::now() < deadline, "room {room} never unloaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_room_unchanged_since_its_last_write_unloads_without_one_and_reloads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let node = Server::start(
        dir.path(),
        SECRET,
        ADMIN,
        &[],
        &[("CHORUS_IDLE_UNLOAD_MS", "300")],
    )
    .await
    .unwrap();
    let admin = node.admin;
    let mut alice = node.connect("alice").await.unwrap();
    let mut bob = node.connect("bob").await.unwrap();
    let room = alice
        .create_room(json!({"room": "calm", "title": "calm", "seats": 4, "password": "pw"}))
        .await
        .unwrap();
    alice.join(&room, false, Some("pw")).await.unwrap();
    bob.join(&room, false, Some("pw")).await.unwrap();
    // Seat moves change the durable state; each is written as it happens.
    let took = bob
        .request("seat.take", json!({"room": room, "seat": 2}))
        .await
        .unwrap();
    assert_eq!(took["seat"], 2);
    alice
        .request("chat.send", json!({"room": room, "text": "hi"}))
        .await
        .unwrap();
    assert_eq!(kit::admin::metric(admin, SKIPPED).await.unwrap(), 0.0);
    // Bob leaves holding his seat (the seat frees: another write), then alice leaves.
    bob.request("room.leave", json!({"room": room}))
        .await
        .unwrap();
    alice
        .request("room.leave", json!({"room": room}))
        .await
        .unwrap();
    wait_unloaded(admin, "calm").await;
    assert_eq!(
        kit::admin::metric(admin, SKIPPED).await.unwrap(),
        1.0,
        "the unload wrote a snapshot that was already stored"
    );

    // The next load reads what the room had: title, lock, seat count, the freed seat.
    let ok = bob.join(&room, false, Some("pw")).await.unwrap();
    let snap = &ok["snapshot"];
    assert_eq!(snap["title"], "calm");
    assert_eq!(snap["owner"], "alice");
    assert_eq!(snap["locked"], true);
    let seats = snap["seats"].as_array().unwrap();
    assert_eq!(seats.len(), 4);
    assert!(seats.iter().all(|s| s["user"].is_null()), "{snap}");
    // A seat held when the connection drops: the room frees it (a write), then unloads
    // (none), and the next load finds the seat free.
    bob.request("seat.take", json!({"room": room, "seat": 1}))
        .await
        .unwrap();
    drop(bob);
    wait_unloaded(admin, "calm").await;
    assert_eq!(kit::admin::metric(admin, SKIPPED).await.unwrap(), 2.0);
    let ok = alice.join(&room, false, Some("pw")).await.unwrap();
    let seats = ok["snapshot"]["seats"].as_array().unwrap().clone();
    assert!(seats.iter().all(|s| s["user"].is_null()), "{seats:?}");
    drop(node);
}
