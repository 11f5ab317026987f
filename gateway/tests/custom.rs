//! End-to-end tests of app-defined room messages on a standalone node: a member's
//! `custom.send`, sequenced or volatile, the app backend's `POST /admin/rooms/{id}/messages`,
//! and what a member who resumes is replayed of them.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use gateway::GatewayConfig;
use kit::client::Client;
use protocol::{ErrorCode, RoomId};
use serde_json::{Value, json};
use shard::ShardConfig;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"test-secret-for-custom-messages";
const ADMIN: &str = "custom-admin";
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

async fn post(s: &Server, room: &str, body: Value) -> (u16, Value) {
    let path = format!("/admin/rooms/{room}/messages");
    let r = kit::admin::call(s.admin, "POST", &path, Some(ADMIN), Some(body))
        .await
        .unwrap();
    (r.status, r.json())
}

/// `host`'s room `id` with bob and carol in it.
async fn room_of_three(s: &Server, id: &str) -> (RoomId, [Client; 3]) {
    let mut host = s.connect("host").await;
    let room = host.create_room(json!({"room": id})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut bob = s.connect("bob").await;
    bob.join(&room, false, None).await.unwrap();
    let mut carol = s.connect("carol").await;
    carol.join(&room, false, None).await.unwrap();
    (room, [host, bob, carol])
}

#[tokio::test]
async fn members_and_the_app_backend_send_custom_messages_sequenced_or_volatile() {
    let s = start().await;
    let (room, [mut host, mut bob, mut carol]) = room_of_three(&s, "party").await;
    let d = json!({"room": room, "type": "game.move", "data": {"x": 3, "y": [1, 2]}});
    let ok = bob.request("custom.send", d).await.unwrap();
    let seq = ok["seq"].as_u64().unwrap();
    for c in [&mut host, &mut bob, &mut carol] {
        let ev = c.next_event_named("custom", WAIT).await.unwrap();
        assert_eq!(ev.seq, Some(seq));
        assert_eq!(
            ev.d,
            json!({"from": "bob", "type": "game.move", "data": {"x": 3, "y": [1, 2]}})
        );
    }
    // Volatile: everyone gets it, with no seq, and the room's position does not move.
    let ok = carol
        .request(
            "custom.send",
            json!({"room": room, "type": "like", "volatile": true}),
        )
        .await
        .unwrap();
    assert_eq!(ok, json!({}));
    for c in [&mut host, &mut bob, &mut carol] {
        let ev = c.next_event_named("custom", WAIT).await.unwrap();
        assert_eq!((ev.seq, ev.epoch), (None, None));
        assert_eq!(ev.d, json!({"from": "carol", "type": "like"}));
    }
    // The app's backend: a system message, sequenced right after bob's.
    let (st, out) = post(
        &s,
        "party",
        json!({"type": "notice", "data": {"text": "Welcome"}}),
    )
    .await;
    assert_eq!((st, out["seq"].as_u64()), (200, Some(seq + 1)), "{out}");
    for c in [&mut host, &mut bob, &mut carol] {
        let ev = c.next_event_named("custom", WAIT).await.unwrap();
        assert_eq!(ev.seq, Some(seq + 1));
        assert_eq!(
            ev.d,
            json!({"system": true, "type": "notice", "data": {"text": "Welcome"}})
        );
    }
    let (st, out) = post(&s, "party", json!({"type": "confetti", "volatile": true})).await;
    assert_eq!((st, out), (200, json!({"room": "party"})));
    let ev = host.next_event_named("custom", WAIT).await.unwrap();
    assert_eq!(
        (ev.seq, ev.d),
        (None, json!({"system": true, "type": "confetti"}))
    );
    s.stop().await;
}

#[tokio::test]
async fn a_resuming_member_is_replayed_the_sequenced_messages_and_not_the_volatile_ones() {
    let s = start().await;
    let (room, [mut host, bob, carol]) = room_of_three(&s, "resume").await;
    drop(carol);
    let since = bob.since(&room).unwrap();
    bob.close().await;
    let send =
        |kind: &str, volatile: bool| json!({"room": room, "type": kind, "volatile": volatile});
    host.request("custom.send", send("kept.1", false))
        .await
        .unwrap();
    host.request("custom.send", send("gone", true))
        .await
        .unwrap();
    let (st, _) = post(&s, "resume", json!({"type": "kept.2"})).await;
    assert_eq!(st, 200);
    let (st, _) = post(&s, "resume", json!({"type": "gone", "volatile": true})).await;
    assert_eq!(st, 200);
    let mut bob = s.connect("bob").await;
    bob.set_position(&room, since.epoch, since.seq);
    let ok = bob.join(&room, true, None).await.unwrap();
    assert_eq!(ok["resync"], false);
    let replayed: Vec<String> = bob
        .queued_events()
        .iter()
        .filter(|e| e.ev == "custom")
        .map(|e| e.d["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(replayed, ["kept.1", "kept.2"]);
    s.stop().await;
}

#[tokio::test]
async fn bad_messages_missing_rooms_and_chat_mutes_are_refused() {
    let s = start().await;
    let (room, [mut host, mut bob, _carol]) = room_of_three(&s, "rules").await;
    for (body, why) in [
        (json!({"type": "two words"}), "type"),
        (json!({"type": "big", "data": "x".repeat(3000)}), "data"),
        (json!({"type": "ok", "extra": 1}), "unknown field"),
        (
            json!({"type": "ok", "data": {"t": "\u{1b}[2J"}}),
            "control or bidi",
        ),
    ] {
        let (st, out) = post(&s, "rules", body).await;
        assert_eq!(st, 400, "{out}");
        assert!(out["error"].as_str().unwrap().contains(why), "{out}");
    }
    let (st, out) = post(&s, "nowhere", json!({"type": "notice"})).await;
    assert_eq!(
        (st, out["code"].clone()),
        (404, json!("ROOM_NOT_FOUND")),
        "{out}"
    );
    for d in [
        json!({"room": room, "type": "bad type"}),
        json!({"room": room, "type": "ok", "data": ["rtl \u{202E}txt.exe"]}),
    ] {
        let e = bob.request("custom.send", d).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::BadRequest));
    }
    host.request(
        "chat.mute",
        json!({"room": room, "user": "bob", "seconds": 60}),
    )
    .await
    .unwrap();
    for volatile in [false, true] {
        let d = json!({"room": room, "type": "like", "volatile": volatile});
        let e = bob.request("custom.send", d).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::ChatMuted));
    }
    // Not a member: nothing to send to.
    let mut dave = s.connect("dave").await;
    let e = dave
        .request("custom.send", json!({"room": room, "type": "like"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NotInRoom));
    s.stop().await;
}

#[tokio::test]
async fn the_owner_mutes_the_rooms_chat_for_members_and_lifts_it() {
    let s = start().await;
    let (room, [mut host, mut bob, mut carol]) = room_of_three(&s, "hush").await;
    host.request(
        "room.admin",
        json!({"room": room, "user": "carol", "admin": true}),
    )
    .await
    .unwrap();
    let mute = |on: bool| json!({"room": room, "chat_muted": on});
    host.request("room.update", mute(true)).await.unwrap();
    let ev = bob.next_event_named("room.update", WAIT).await.unwrap();
    assert_eq!(ev.d, json!({"by": "host", "chat_muted": true}));
    let mut dave = s.connect("dave").await;
    let ok = dave.join(&room, false, None).await.unwrap();
    assert_eq!(ok["snapshot"]["chat_muted"], true);
    let e = bob
        .request("chat.send", json!({"room": room, "text": "hi"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::ChatMuted));
    let e = bob
        .request(
            "custom.send",
            json!({"room": room, "type": "like", "volatile": true}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::ChatMuted));
    // The staff still speak.
    carol.chat(&room, "admins may").await.unwrap();
    host.chat(&room, "and the owner").await.unwrap();
    carol.request("room.update", mute(false)).await.unwrap();
    bob.chat(&room, "back").await.unwrap();
    let ok = dave.join(&room, false, None).await.unwrap();
    assert!(ok["snapshot"].get("chat_muted").is_none(), "{ok}");
    s.stop().await;
}

#[tokio::test]
async fn room_attributes_are_set_by_staff_and_the_backend_and_outlive_an_unload() {
    let shard = ShardConfig {
        idle_unload: Duration::from_millis(200),
        ..ShardConfig::default()
    };
    let s = Server::launch(SECRET, ADMIN, GatewayConfig::default(), shard).await;
    let (room, [mut host, mut bob, carol]) = room_of_three(&s, "attrs").await;
    let set = json!({"room": room, "set": {"theme": "night", "pk": [3, 1]}});
    host.request("room.attrs", set).await.unwrap();
    let ev = bob.next_event_named("room.attrs", WAIT).await.unwrap();
    assert_eq!(
        ev.d,
        json!({"by": "host", "set": {"pk": [3, 1], "theme": "night"}})
    );
    let e = bob
        .request("room.attrs", json!({"room": room, "set": {"theme": "day"}}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Forbidden));
    // The backend changes one and removes the other: only that is announced, with no `by`.
    let path = "/admin/rooms/attrs/attrs";
    let body = json!({"set": {"pk": [4, 1], "theme": "night"}, "remove": ["song"]});
    let r = kit::admin::call(s.admin, "PUT", path, Some(ADMIN), Some(body))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let ev = bob.next_event_named("room.attrs", WAIT).await.unwrap();
    assert_eq!(ev.d, json!({"by": null, "set": {"pk": [4, 1]}}));
    assert_eq!(r.json()["seq"], ev.seq.unwrap());
    let bad = json!({"set": {"bad key": 1}});
    let r = kit::admin::call(s.admin, "PUT", path, Some(ADMIN), Some(bad))
        .await
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.body);
    // Everyone leaves, the room unloads; a joiner finds the attributes as they were.
    for c in [&mut host, &mut bob] {
        c.request("room.leave", json!({"room": room}))
            .await
            .unwrap();
    }
    drop(carol);
    s.wait_unloaded("attrs", WAIT * 3).await;
    let mut dave = s.connect("dave").await;
    let ok = dave.join(&room, false, None).await.unwrap();
    assert_eq!(
        ok["snapshot"]["attrs"],
        json!({"pk": [4, 1], "theme": "night"})
    );
    s.stop().await;
}

#[tokio::test]
async fn slow_mode_holds_members_to_a_line_an_interval_and_says_when_the_next_may_go() {
    let s = start().await;
    let (room, [mut host, mut bob, _carol]) = room_of_three(&s, "slow").await;
    host.request("room.update", json!({"room": room, "slow_mode": 1}))
        .await
        .unwrap();
    let ev = bob.next_event_named("room.update", WAIT).await.unwrap();
    assert_eq!(ev.d, json!({"by": "host", "slow_mode": 1}));
    bob.chat(&room, "first").await.unwrap();
    let e = bob.chat(&room, "too soon").await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::SlowMode));
    // The refusal names the time (unix ms) the next line may go: at that time it does.
    let msg = e.to_string();
    let next: u64 = msg
        .rsplit("the next at ")
        .next()
        .and_then(|t| t.split(' ').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no time in {msg:?}"));
    // The staff are never held back.
    for i in 0..3 {
        host.chat(&room, &format!("host {i}")).await.unwrap();
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    tokio::time::sleep(Duration::from_millis(next.saturating_sub(now) + 1)).await;
    bob.chat(&room, "second").await.unwrap();
    let mut dave = s.connect("dave").await;
    let ok = dave.join(&room, false, None).await.unwrap();
    assert_eq!(ok["snapshot"]["slow_mode"], 1);
    let e = host
        .request("room.update", json!({"room": room, "slow_mode": 301}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::BadRequest));
    s.stop().await;
}

#[tokio::test]
async fn a_chat_line_is_recalled_by_its_sender_or_the_staff_and_a_resume_replays_the_recall() {
    let s = start().await;
    let (room, [mut host, mut bob, carol]) = room_of_three(&s, "recall").await;
    let since = carol.since(&room).unwrap();
    carol.close().await;
    let line = bob.chat(&room, "oops").await.unwrap();
    let recall = |seq: u64| json!({"room": room, "seq": seq});
    bob.request("chat.recall", recall(line)).await.unwrap();
    let ev = host.next_event_named("chat.recall", WAIT).await.unwrap();
    assert_eq!(ev.d, json!({"line": line, "from": "bob", "by": "bob"}));
    assert_eq!(ev.seq, Some(line + 1));
    // Again: answered, nothing new. The owner takes a line of bob's back; bob cannot do that
    // to the owner's.
    bob.request("chat.recall", recall(line)).await.unwrap();
    let rude = bob.chat(&room, "rude").await.unwrap();
    let own = host.chat(&room, "owner's").await.unwrap();
    let e = bob.request("chat.recall", recall(own)).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Forbidden));
    host.request("chat.recall", recall(rude)).await.unwrap();
    let e = host
        .request("chat.recall", recall(own + 100))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NoSuchMessage));
    // Carol resumes: each line, then the recall that hides it, in order.
    let mut carol = s.connect("carol").await;
    carol.set_position(&room, since.epoch, since.seq);
    let ok = carol.join(&room, true, None).await.unwrap();
    assert_eq!(ok["resync"], false);
    let replayed: Vec<Value> = carol
        .queued_events()
        .iter()
        .filter(|e| e.ev.starts_with("chat"))
        .map(|e| json!([e.ev, e.seq, e.d.get("line")]))
        .collect();
    assert_eq!(
        replayed,
        [
            json!(["chat", line, null]),
            json!(["chat.recall", line + 1, line]),
            json!(["chat", rude, null]),
            json!(["chat", own, null]),
            json!(["chat.recall", own + 1, rude]),
        ]
    );
    s.stop().await;
}
