//! The app backend's moderation end to end on a standalone node: `POST
//! /admin/rooms/{id}/moderation` kicks, bans and mutes users of a live room and lifts those,
//! with the events members see, the `BANNED` join, the audit list, and the refusals; `POST
//! /admin/rooms/{id}/close` and `…/open` close a room past its owner and reopen it, and `PATCH
//! /admin/rooms/{id}` changes its info.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use gateway::GatewayConfig;
use protocol::ErrorCode;
use serde_json::{Value, json};
use shard::ShardConfig;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"test-secret-for-backend-moderation";
const ADMIN: &str = "moderation-admin";
const WAIT: Duration = Duration::from_secs(5);

async fn start() -> Server {
    Server::launch(
        SECRET,
        ADMIN,
        GatewayConfig::default(),
        ShardConfig::default(),
    )
    .await
}

async fn moderate(s: &Server, room: &str, body: Value) -> (u16, Value) {
    call(
        s,
        "POST",
        &format!("/admin/rooms/{room}/moderation"),
        Some(body),
    )
    .await
}

async fn call(s: &Server, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let r = kit::admin::call(s.admin, method, path, Some(ADMIN), body)
        .await
        .unwrap();
    (r.status, r.json())
}

#[tokio::test]
async fn the_backend_bans_mutes_and_kicks_members_and_lifts_those() {
    let s = start().await;
    let mut host = s.connect("host").await;
    let room = host.create_room(json!({"room": "report"})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut bob = s.connect("bob").await;
    bob.join(&room, false, None).await.unwrap();
    let mut carol = s.connect("carol").await;
    carol.join(&room, false, None).await.unwrap();

    // A mute: carol's chat is refused until it is lifted.
    let (st, out) = moderate(&s, "report", json!({"action": "mute", "user": "carol"})).await;
    assert_eq!(st, 200, "{out}");
    let ev = host.next_event_named("moderation", WAIT).await.unwrap();
    assert_eq!(
        (&ev.d["action"], &ev.d["user"], &ev.d["by"], ev.seq),
        (
            &json!("chat_mute"),
            &json!("carol"),
            &Value::Null,
            out["seq"].as_u64()
        )
    );
    let e = carol.chat(&room, "hi").await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::ChatMuted));
    let (st, _) = moderate(&s, "report", json!({"action": "unmute", "user": "carol"})).await;
    assert_eq!(st, 200);
    carol.chat(&room, "back").await.unwrap();

    // A ban for a minute: bob is taken out and cannot come back.
    let ban = json!({"action": "ban", "user": "bob", "seconds": 60});
    let (st, out) = moderate(&s, "report", ban).await;
    assert_eq!(st, 200, "{out}");
    let left = bob.next_event_named("room.left", WAIT).await.unwrap();
    assert_eq!(left.d["reason"], "kicked");
    let ev = host.next_event_named("member.leave", WAIT).await.unwrap();
    assert_eq!(
        (&ev.d["user"], &ev.d["reason"]),
        (&json!("bob"), &json!("kicked"))
    );
    let e = bob.join(&room, false, None).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Banned));
    let bans = host
        .request("room.bans", json!({"room": room}))
        .await
        .unwrap();
    assert_eq!(bans["bans"][0]["user"], "bob");
    assert_eq!(bans["bans"][0]["by"], Value::Null);
    let (st, _) = moderate(&s, "report", json!({"action": "unban", "user": "bob"})).await;
    assert_eq!(st, 200);
    bob.join(&room, false, None).await.unwrap();

    // A kick: out, and free to come back.
    let (st, _) = moderate(&s, "report", json!({"action": "kick", "user": "carol"})).await;
    assert_eq!(st, 200);
    let left = carol.next_event_named("room.left", WAIT).await.unwrap();
    assert_eq!(left.d["reason"], "kicked");
    carol.join(&room, false, None).await.unwrap();

    // The audit list has every action, each with no `by`.
    let r = kit::admin::call(
        s.admin,
        "GET",
        "/admin/rooms/report/moderation",
        Some(ADMIN),
        None,
    )
    .await
    .unwrap();
    let audit: Vec<(String, Value)> = r.json()["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["action"].as_str().unwrap().to_owned(), a["by"].clone()))
        .collect();
    let actions: Vec<&str> = audit.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(
        actions,
        ["chat_mute", "chat_unmute", "ban", "unban", "kick"]
    );
    assert!(audit.iter().all(|(_, by)| by.is_null()), "{audit:?}");
    s.stop().await;
}

#[tokio::test]
async fn the_owner_absent_users_bad_bodies_and_missing_rooms_are_refused() {
    let s = start().await;
    let mut host = s.connect("host").await;
    let room = host.create_room(json!({"room": "strict"})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    let (st, out) = moderate(&s, "strict", json!({"action": "ban", "user": "host"})).await;
    assert_eq!((st, &out["code"]), (403, &json!("FORBIDDEN")), "{out}");
    let (st, out) = moderate(&s, "strict", json!({"action": "kick", "user": "nobody"})).await;
    assert_eq!(
        (st, &out["code"]),
        (404, &json!("USER_NOT_IN_ROOM")),
        "{out}"
    );
    let (st, out) = moderate(&s, "nowhere", json!({"action": "kick", "user": "x"})).await;
    assert_eq!((st, &out["code"]), (404, &json!("ROOM_NOT_FOUND")), "{out}");
    for bad in [
        json!({"action": "smite", "user": "x"}),
        json!({"action": "ban"}),
        json!({"action": "ban", "user": "x", "extra": 1}),
        json!({"action": "ban", "user": "x", "seconds": 0}),
        json!(["ban", "x", 60]),
    ] {
        let (st, out) = moderate(&s, "strict", bad.clone()).await;
        assert_eq!(st, 400, "{bad} → {out}");
    }
    // Banning someone not present works: the ban waits for them.
    let (st, _) = moderate(&s, "strict", json!({"action": "ban", "user": "later"})).await;
    assert_eq!(st, 200);
    let mut later = s.connect("later").await;
    let e = later.join(&room, false, None).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Banned));
    s.stop().await;
}

/// The backend changes a live room's info (`by` null), closes it past its owner with a reason
/// the joiners are told, and reopens it.
#[tokio::test]
async fn the_backend_changes_closes_and_reopens_a_room_its_owner_cannot_reopen() {
    let s = start().await;
    let mut host = s.connect("host").await;
    let room = host.create_room(json!({"room": "lounge"})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut bob = s.connect("bob").await;
    bob.join(&room, false, None).await.unwrap();

    // Its info: announced with no `by`, and in force (the chat is muted for members).
    let change = json!({"title": "Renamed", "chat_muted": true});
    let (st, out) = call(&s, "PATCH", "/admin/rooms/lounge", Some(change)).await;
    assert_eq!(st, 200, "{out}");
    let ev = bob.next_event_named("room.update", WAIT).await.unwrap();
    assert_eq!(
        (&ev.d["title"], &ev.d["chat_muted"], &ev.d["by"], ev.seq),
        (
            &json!("Renamed"),
            &json!(true),
            &Value::Null,
            out["seq"].as_u64()
        )
    );
    let e = bob.chat(&room, "hi").await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::ChatMuted));
    for bad in [json!({"titel": "x"}), json!({"slow_mode": 301}), json!([])] {
        let (st, out) = call(&s, "PATCH", "/admin/rooms/lounge", Some(bad.clone())).await;
        assert_eq!(st, 400, "{bad} → {out}");
    }

    // Closed with a reason: everyone out, joins refused with it, the owner cannot reopen.
    let why = json!({"reason": "reported for spam"});
    let (st, out) = call(&s, "POST", "/admin/rooms/lounge/close", Some(why)).await;
    assert_eq!(st, 200, "{out}");
    for c in [&mut host, &mut bob] {
        let left = c.next_event_named("room.left", WAIT).await.unwrap();
        assert_eq!(left.d["reason"], "closed");
    }
    let e = bob.join(&room, false, None).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::RoomClosed));
    assert!(e.to_string().contains("reported for spam"), "{e}");
    let e = host
        .request("room.open", json!({"room": room}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Forbidden));
    let (st, info) = call(&s, "GET", "/admin/rooms/lounge", None).await;
    assert_eq!(st, 200);
    let closed = &info["details"]["platform_closed"];
    assert_eq!(closed["reason"], "reported for spam", "{info}");

    // Reopened by the backend (no body needed): the owner and members come back.
    let (st, out) = call(&s, "POST", "/admin/rooms/lounge/open", None).await;
    assert_eq!(st, 200, "{out}");
    host.join(&room, false, None).await.unwrap();
    bob.join(&room, false, None).await.unwrap();
    let (st, out) = call(&s, "POST", "/admin/rooms/nowhere/close", None).await;
    assert_eq!((st, &out["code"]), (404, &json!("ROOM_NOT_FOUND")), "{out}");
    let long = json!({"reason": "x".repeat(201)});
    let (st, _) = call(&s, "POST", "/admin/rooms/lounge/close", Some(long)).await;
    assert_eq!(st, 400);
    s.stop().await;
}
