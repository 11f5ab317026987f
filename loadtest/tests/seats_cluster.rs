//! Seat and moderation state across owners, with real processes: a ban set through one
//! gateway holds on another after its owner is killed; a chat mute and a publish deadline
//! survive a planned move and a failover, and the last owner frees the seat at the deadline
//! the first one set (a deadline is a time in the room's state, not a timer).
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kit::client::Client;
use kit::cluster::{Cluster, ClusterOptions};
use protocol::{ErrorCode, RoomId};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A cluster whose nodes read `toml` as their configuration file.
async fn cluster_with(toml: &str) -> (Cluster, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chorus.toml");
    std::fs::write(&path, toml).unwrap();
    let cluster = Cluster::start(ClusterOptions {
        env: vec![("CHORUS_CONFIG".into(), path.display().to_string())],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    (cluster, dir)
}

/// Kills `room`'s owner; returns its id once another shard owns the room.
async fn kill_owner(cluster: &mut Cluster, room: &str) -> String {
    let (owner, _) = cluster.room_owner(room).await.unwrap().unwrap();
    cluster.shard_mut(&owner).unwrap().node.kill9().unwrap();
    owner
}

async fn rejoin(c: &mut Client, room: &RoomId) {
    let left = c.next_event_named("room.left", WAIT).await.unwrap();
    assert_eq!(left.d["reason"], "unavailable");
    c.join_retrying(room, None, WAIT).await.unwrap();
}

#[tokio::test]
async fn a_ban_set_on_one_gateway_refuses_a_join_on_another_after_the_owner_is_killed() {
    let (mut cluster, _dir) = cluster_with("").await;
    let mut host = cluster.connect(0, "host").await.unwrap();
    let mut bob = cluster.connect(1, "bob").await.unwrap();
    let room = host
        .create_room(json!({"room": "banned", "seats": 4}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    bob.join(&room, false, None).await.unwrap();
    host.request("room.ban", json!({"room": room, "user": "bob"}))
        .await
        .unwrap();
    let left = bob.next_event_named("room.left", WAIT).await.unwrap();
    assert_eq!(left.d["reason"], "kicked");
    let old = kill_owner(&mut cluster, "banned").await;
    rejoin(&mut host, &room).await;
    let (new, _) = cluster.room_owner("banned").await.unwrap().unwrap();
    assert_ne!(new, old);
    // Bob's join through the other gateway reaches the new owner, which loaded the ban.
    let e = bob.join_retrying(&room, None, WAIT).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Banned));
    // The record, read through a gateway from the durable state, shows who did it.
    let record = cluster
        .admin("GET", "/admin/rooms/banned/moderation", None)
        .await
        .unwrap();
    assert_eq!(record.status, 200, "{}", record.body);
    let record = record.json();
    assert_eq!(record["bans"][0]["user"], "bob");
    assert_eq!(record["bans"][0]["by"], "host");
    assert_eq!(record["audit"][0]["action"], "ban");
    // Lifted, it lets him in.
    host.request("room.unban", json!({"room": room, "user": "bob"}))
        .await
        .unwrap();
    bob.join_retrying(&room, None, WAIT).await.unwrap();
}

#[tokio::test]
async fn a_mute_and_a_publish_deadline_survive_a_planned_move_and_a_failover() {
    const DEADLINE_MS: u64 = 8000;
    let (mut cluster, _dir) = cluster_with(&format!("publish_deadline_ms = {DEADLINE_MS}\n")).await;
    let mut host = cluster.connect(0, "host").await.unwrap();
    let mut bob = cluster.connect(1, "bob").await.unwrap();
    let room = host
        .create_room(json!({"room": "mic", "seats": 4}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    bob.join(&room, false, None).await.unwrap();
    host.request(
        "chat.mute",
        json!({"room": room, "user": "bob", "seconds": 600}),
    )
    .await
    .unwrap();
    bob.request("seat.take", json!({"room": room, "seat": 1}))
        .await
        .unwrap();
    let taken = host.next_event_named("seat.update", WAIT).await.unwrap();
    let deadline = taken.d["publish_by"].as_u64().unwrap();

    // A planned move: the members follow without noticing; the mute and the deadline move too.
    let (first, fence) = cluster.room_owner("mic").await.unwrap().unwrap();
    let target = cluster.other_shard(&first).unwrap();
    let r = cluster.move_room("mic", &target).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let moved_by = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(Some((owner, f))) = cluster.room_owner("mic").await
            && owner == target
            && f > fence
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < moved_by,
            "the move never completed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let e = bob.chat(&room, "after the move").await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::ChatMuted));
    // The host follows unnoticed too: a chat answered by the new owner shows its rejoin landed.
    host.chat(&room, "after the move").await.unwrap();

    // A failover: the next owner loads both from the durable state.
    kill_owner(&mut cluster, "mic").await;
    rejoin(&mut host, &room).await;
    rejoin(&mut bob, &room).await;
    let snap = host.join(&room, true, None).await.unwrap();
    assert_eq!(snap["snapshot"]["seats"][1]["user"], "bob");
    assert_eq!(snap["snapshot"]["seats"][1]["publish_by"], deadline);
    let e = bob.chat(&room, "after the failover").await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::ChatMuted));
    // Bob never publishes: the seat is freed at the first owner's deadline, not one re-armed
    // by a later owner (which would come a whole deadline after it loaded).
    let loaded_at = now_ms();
    assert!(
        loaded_at < deadline,
        "the failover ended after the deadline; lengthen it"
    );
    let freed = loop {
        let ev = host.next_event_named("seat.update", WAIT).await.unwrap();
        if ev.d["reason"] == "publish_timeout" {
            break ev;
        }
    };
    let freed_at = now_ms();
    assert_eq!(
        (&freed.d["index"], &freed.d["cause"]),
        (&json!(1), &json!("server"))
    );
    assert!(
        freed_at >= deadline,
        "freed early at {freed_at} < {deadline}"
    );
    assert!(
        freed_at < loaded_at + DEADLINE_MS,
        "freed at {freed_at}: a deadline re-armed at load ({loaded_at}), not the original {deadline}"
    );
}

#[tokio::test]
async fn admins_on_two_gateways_answer_one_request_once_and_a_late_invitation_is_refused() {
    let (cluster, _dir) = cluster_with("seat_invite_ttl_ms = 1000\n").await;
    let mut host = cluster.connect(0, "host").await.unwrap();
    let room = host
        .create_room(json!({"room": "apply", "seats": 4, "seat_mode": "apply"}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut a1 = cluster.connect(0, "a1").await.unwrap();
    let mut a2 = cluster.connect(1, "a2").await.unwrap();
    let mut bob = cluster.connect(1, "bob").await.unwrap();
    let mut carol = cluster.connect(0, "carol").await.unwrap();
    for c in [&mut a1, &mut a2, &mut bob, &mut carol] {
        c.join(&room, false, None).await.unwrap();
    }
    for a in ["a1", "a2"] {
        host.request(
            "room.admin",
            json!({"room": room, "user": a, "admin": true}),
        )
        .await
        .unwrap();
    }
    bob.request("seat.request", json!({"room": room}))
        .await
        .unwrap();
    for a in [&mut a1, &mut a2] {
        a.next_event_named("seat.request", WAIT).await.unwrap();
    }
    let approve = a1
        .send("seat.approve", json!({"room": room, "user": "bob"}))
        .await
        .unwrap();
    let reject = a2
        .send("seat.reject", json!({"room": room, "user": "bob"}))
        .await
        .unwrap();
    let approved = a1.reply_to(approve, WAIT).await;
    let rejected = a2.reply_to(reject, WAIT).await;
    let outcome = match (&approved, &rejected) {
        (Ok(_), Err(e)) if e.code() == Some(ErrorCode::NoSuchRequest) => "approved",
        (Err(e), Ok(_)) if e.code() == Some(ErrorCode::NoSuchRequest) => "rejected",
        other => panic!("exactly one answer wins: {other:?}"),
    };
    for c in [&mut a1, &mut a2, &mut bob] {
        let ev = c
            .next_event_named("seat.request.update", WAIT)
            .await
            .unwrap();
        assert_eq!(ev.d["state"], outcome);
    }
    // An invitation through one gateway, answered too late through the other.
    a2.request("seat.invite", json!({"room": room, "user": "carol"}))
        .await
        .unwrap();
    carol.next_event_named("seat.invite", WAIT).await.unwrap();
    let expired = carol
        .next_event_named("seat.invite.update", WAIT)
        .await
        .unwrap();
    assert_eq!(expired.d["state"], "expired");
    let e = carol
        .request("seat.invite.accept", json!({"room": room}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::RequestExpired));
}
