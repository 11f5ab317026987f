//! End-to-end tests of standalone mode: a real server on loopback, real WebSocket clients.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use protocol::{ErrorCode, RoomId};
use serde_json::json;

use crate::support::server;
use server::Server;

use crate::support::standalone;
use standalone::{RawWs, WAIT, code};

#[tokio::test]
async fn two_users_chat_in_order_with_consecutive_seq() {
    let s = Server::start().await;
    let mut a = s.connect("alice").await;
    let mut b = s.connect("bob").await;
    let room = a
        .create_room(json!({"room": "r1", "title": "Friday", "seats": 4}))
        .await
        .unwrap();
    assert_eq!(room, RoomId::from("r1"));
    let ja = a.join(&room, false, None).await.unwrap();
    assert_eq!(ja["snapshot"]["owner"], "alice");
    assert_eq!(ja["snapshot"]["members"], 1);
    assert_eq!(ja["snapshot"]["seats"].as_array().unwrap().len(), 4);
    assert_eq!(ja["resync"], false);
    let jb = b.join(&room, false, None).await.unwrap();
    assert_eq!(jb["snapshot"]["members"], 2);
    let join = a.next_event_named("member.join", WAIT).await.unwrap();
    assert_eq!(join.d["user"], "bob");
    assert_eq!(join.epoch, None, "presence is volatile: no epoch/seq");

    let base = jb["seq"].as_u64().unwrap();
    for i in 0..20 {
        let (c, who) = if i % 2 == 0 {
            (&mut a, "alice")
        } else {
            (&mut b, "bob")
        };
        let seq = c.chat(&room, &format!("{who} {i}")).await.unwrap();
        assert_eq!(seq, base + i + 1);
    }
    for c in [&mut a, &mut b] {
        let mut seqs = Vec::new();
        while seqs.len() < 20 {
            let e = c.next_event(WAIT).await.unwrap();
            if e.ev == "chat" {
                assert_eq!(e.room.as_ref(), Some(&room));
                assert_eq!(
                    e.d["text"].as_str().unwrap().split(' ').nth(1).unwrap(),
                    (seqs.len()).to_string()
                );
                seqs.push(e.seq.unwrap());
            }
        }
        let want: Vec<u64> = (base + 1..=base + 20).collect();
        assert_eq!(seqs, want);
        let p = c.position(&room).unwrap();
        assert_eq!((p.gaps, p.duplicates), (0, 0));
    }
    s.stop().await;
}

#[tokio::test]
async fn seats_take_leave_and_conflicts() {
    let s = Server::start().await;
    let mut a = s.connect("alice").await;
    let mut b = s.connect("bob").await;
    let room = a
        .create_room(json!({"room": "seats", "seats": 2}))
        .await
        .unwrap();
    a.join(&room, false, None).await.unwrap();
    b.join(&room, false, None).await.unwrap();
    let ok = a
        .request("seat.take", json!({"room": room, "seat": 1}))
        .await
        .unwrap();
    assert_eq!(ok["seat"], 1);
    for c in [&mut a, &mut b] {
        let e = c.next_event_named("seat.update", WAIT).await.unwrap();
        let d = &e.d;
        assert_eq!(
            [&d["index"], &d["user"], &d["locked"], &d["muted"]],
            [&json!(1), &json!("alice"), &json!(false), &json!(false)]
        );
        // Who acted and why, and the publish deadline the seat now has.
        assert_eq!((&d["by"], &d["cause"]), (&json!("alice"), &json!("self")));
        assert!(d["publish_by"].as_u64().is_some(), "{d}");
        assert!(e.seq.is_some() && e.epoch.is_some());
    }
    let err = b
        .request("seat.take", json!({"room": room, "seat": 1}))
        .await
        .unwrap_err();
    assert_eq!(code(err), ErrorCode::SeatTaken);
    let ok = b.request("seat.take", json!({"room": room})).await.unwrap();
    assert_eq!(ok["seat"], 0, "first free seat");
    let mut c = s.connect("carol").await;
    c.join(&room, false, None).await.unwrap();
    let err = c
        .request("seat.take", json!({"room": room}))
        .await
        .unwrap_err();
    assert_eq!(code(err), ErrorCode::NoFreeSeat);
    a.request("seat.leave", json!({"room": room}))
        .await
        .unwrap();
    let e = b.next_event_named("seat.update", WAIT).await.unwrap();
    let e = if e.d["index"] == 0 {
        b.next_event_named("seat.update", WAIT).await.unwrap()
    } else {
        e
    };
    assert_eq!(e.d["index"], 1);
    assert_eq!(e.d["user"], serde_json::Value::Null);
    // A non-member cannot take a seat.
    let mut d = s.connect("dave").await;
    let err = d
        .request("seat.take", json!({"room": room}))
        .await
        .unwrap_err();
    assert_eq!(code(err), ErrorCode::NotInRoom);
    s.stop().await;
}

#[tokio::test]
async fn the_owner_locks_a_seat_members_see_it_nobody_takes_it_and_it_survives_a_reload() {
    let s = Server::start_with(|_, sh| sh.idle_unload = Duration::from_millis(300)).await;
    let mut host = s.connect("host").await;
    let mut bob = s.connect("bob").await;
    let room = host
        .create_room(json!({"room": "locks", "seats": 2}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    bob.join(&room, false, None).await.unwrap();
    let err = bob
        .request(
            "seat.lock",
            json!({"room": room, "seat": 1, "locked": true}),
        )
        .await
        .unwrap_err();
    assert_eq!(code(err), ErrorCode::Forbidden);
    let ok = host
        .request(
            "seat.lock",
            json!({"room": room, "seat": 1, "locked": true}),
        )
        .await
        .unwrap();
    assert_eq!(ok, json!({}));
    for c in [&mut host, &mut bob] {
        let e = c.next_event_named("seat.update", WAIT).await.unwrap();
        let d = &e.d;
        assert_eq!(
            [&d["index"], &d["user"], &d["locked"], &d["muted"]],
            [&json!(1), &json!(null), &json!(true), &json!(false)]
        );
        assert_eq!((&d["by"], &d["cause"]), (&json!("host"), &json!("admin")));
        assert!(e.seq.is_some(), "seat.update is sequenced");
    }
    let err = bob
        .request("seat.take", json!({"room": room, "seat": 1}))
        .await
        .unwrap_err();
    assert_eq!(code(err), ErrorCode::SeatLocked);
    // The lock is durable: the room unloads when empty and reloads with it.
    for c in [&mut host, &mut bob] {
        c.request("room.leave", json!({"room": room}))
            .await
            .unwrap();
    }
    let admin = s.running.as_ref().unwrap().admin_addr;
    let deadline = tokio::time::Instant::now() + WAIT;
    while kit::admin::get(admin, "/admin/rooms/locks", Some("admin-token"))
        .await
        .unwrap()
        .status
        != 404
    {
        assert!(tokio::time::Instant::now() < deadline, "never unloaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ok = bob.join(&room, false, None).await.unwrap();
    assert_eq!(ok["snapshot"]["seats"][1]["locked"], true);
    assert_eq!(ok["snapshot"]["seats"][0]["locked"], false);
    s.stop().await;
}

#[tokio::test]
async fn locked_rooms_missing_rooms_and_bad_arguments() {
    let s = Server::start_with(|_, sh| sh.auto_create = false).await;
    let mut a = s.connect("alice").await;
    let mut b = s.connect("bob").await;
    let room = a
        .create_room(json!({"room": "locked", "seats": 8, "password": "pw"}))
        .await
        .unwrap();
    let err = b.join(&room, false, None).await.unwrap_err();
    assert_eq!(code(err), ErrorCode::RoomLocked);
    let err = b.join(&room, false, Some("wrong")).await.unwrap_err();
    assert_eq!(code(err), ErrorCode::RoomLocked);
    let ok = b.join(&room, false, Some("pw")).await.unwrap();
    assert_eq!(ok["snapshot"]["locked"], true);
    let err = b
        .join(&RoomId::from("nope"), false, None)
        .await
        .unwrap_err();
    assert_eq!(code(err), ErrorCode::RoomNotFound);
    let err = a.create_room(json!({"room": "locked"})).await.unwrap_err();
    assert_eq!(code(err), ErrorCode::RoomExists);
    let err = a
        .create_room(json!({"room": "big", "seats": 21}))
        .await
        .unwrap_err();
    assert_eq!(code(err), ErrorCode::BadRequest);
    let err = a.create_room(json!({"room": "bad id!"})).await.unwrap_err();
    assert_eq!(code(err), ErrorCode::BadRequest);
    let err = b.chat(&room, &"x".repeat(501)).await.unwrap_err();
    assert_eq!(code(err), ErrorCode::BadRequest);
    // Generated ids when none is given.
    let generated = a.create_room(json!({"title": "no id"})).await.unwrap();
    assert!(!generated.as_str().is_empty());
    s.stop().await;
}

#[tokio::test]
async fn auto_create_on_join_makes_the_joiner_owner() {
    let s = Server::start().await;
    let mut a = s.connect("alice").await;
    let ok = a.join(&RoomId::from("fresh"), false, None).await.unwrap();
    assert_eq!(ok["snapshot"]["owner"], "alice");
    s.stop().await;
}

#[tokio::test]
async fn switching_rooms_leaves_the_first() {
    let s = Server::start().await;
    let mut a = s.connect("alice").await;
    let mut b = s.connect("bob").await;
    let r1 = RoomId::from("one");
    let r2 = RoomId::from("two");
    b.join(&r1, false, None).await.unwrap();
    a.join(&r1, false, None).await.unwrap();
    b.next_event_named("member.join", WAIT).await.unwrap();
    a.join(&r2, false, None).await.unwrap();
    let left = b.next_event_named("member.leave", WAIT).await.unwrap();
    assert_eq!(left.d, json!({"user": "alice", "reason": "switched"}));
    // Alice no longer gets r1's chat; her r1 chat is refused.
    b.chat(&r1, "only bob hears").await.unwrap();
    let err = a.chat(&r1, "hello?").await.unwrap_err();
    assert_eq!(code(err), ErrorCode::NotInRoom);
    a.chat(&r2, "in two").await.unwrap();
    let e = a.next_event_named("chat", WAIT).await.unwrap();
    assert_eq!(e.room, Some(r2.clone()));
    // Leaving explicitly.
    a.request("room.leave", json!({"room": r2})).await.unwrap();
    let err = a.chat(&r2, "gone").await.unwrap_err();
    assert_eq!(code(err), ErrorCode::NotInRoom);
    s.stop().await;
}

#[tokio::test]
async fn second_connection_replaces_the_first_in_a_room() {
    let s = Server::start().await;
    let mut a1 = s.connect("alice").await;
    let mut a2 = s.connect("alice").await;
    let mut b = s.connect("bob").await;
    let room = RoomId::from("rep");
    b.join(&room, false, None).await.unwrap();
    a1.join(&room, false, None).await.unwrap();
    let ok = a2.join(&room, false, None).await.unwrap();
    assert_eq!(ok["snapshot"]["members"], 2, "replaced, not added");
    let left = a1.next_event_named("room.left", WAIT).await.unwrap();
    assert_eq!(left.d, json!({"room": "rep", "reason": "replaced"}));
    b.chat(&room, "hi").await.unwrap();
    assert_eq!(
        a2.next_event_named("chat", WAIT).await.unwrap().d["text"],
        "hi"
    );
    let err = a1.chat(&room, "stale").await.unwrap_err();
    assert_eq!(code(err), ErrorCode::NotInRoom);
    s.stop().await;
}

#[tokio::test]
async fn disconnect_leaves_the_room() {
    // After the grace window (kept short here; gateway/tests/members.rs tests the window).
    let s = Server::start_with(|_, sh| sh.presence_grace = Duration::from_millis(200)).await;
    let mut a = s.connect("alice").await;
    let mut b = s.connect("bob").await;
    let room = RoomId::from("dc");
    b.join(&room, false, None).await.unwrap();
    a.join(&room, false, None).await.unwrap();
    a.close().await;
    let left = b.next_event_named("member.leave", WAIT).await.unwrap();
    assert_eq!(left.d, json!({"user": "alice", "reason": "disconnected"}));
    s.stop().await;
}

#[tokio::test]
async fn resume_replays_missed_events_or_resyncs() {
    let s = Server::start_with(|_, sh| sh.history_events = 10).await;
    let mut a = s.connect("alice").await;
    let mut b = s.connect("bob").await;
    let room = RoomId::from("resume");
    a.join(&room, false, None).await.unwrap();
    b.join(&room, false, None).await.unwrap();
    b.chat(&room, "seen").await.unwrap();
    b.next_event_named("chat", WAIT).await.unwrap();
    let since = b.since(&room).unwrap();
    b.close().await;
    let mut sent = Vec::new();
    for i in 0..5 {
        sent.push(a.chat(&room, &format!("m{i}")).await.unwrap());
    }
    let mut b = s.connect("bob").await;
    b.set_position(&room, since.epoch, since.seq);
    let ok = b.join(&room, true, None).await.unwrap();
    assert_eq!(ok["resync"], false);
    let replayed: Vec<u64> = b
        .queued_events()
        .iter()
        .filter(|e| e.ev == "chat")
        .map(|e| e.seq.unwrap())
        .collect();
    assert_eq!(
        replayed, sent,
        "exactly the missed events, in order, before the reply"
    );
    // Beyond the history (10 events): resync, nothing replayed.
    let since = b.since(&room).unwrap();
    b.close().await;
    for i in 0..15 {
        a.chat(&room, &format!("n{i}")).await.unwrap();
    }
    let mut b = s.connect("bob").await;
    b.set_position(&room, since.epoch, since.seq);
    let ok = b.join(&room, true, None).await.unwrap();
    assert_eq!(ok["resync"], true);
    assert!(b.queued_events().iter().all(|e| e.ev != "chat"));
    s.stop().await;
}

#[tokio::test]
async fn presence_is_coalesced_in_big_rooms() {
    let s = Server::start_with(|_, sh| {
        sh.presence_full_max = 3;
        sh.member_count_interval = Duration::from_millis(100);
    })
    .await;
    let room = RoomId::from("big");
    let mut host = s.connect("host").await;
    host.join(&room, false, None).await.unwrap();
    let mut listener = s.connect("l0").await;
    listener.join(&room, false, None).await.unwrap();
    let mut others = Vec::new();
    for i in 1..8 {
        let mut c = s.connect(&format!("l{i}")).await;
        c.join(&room, false, None).await.unwrap();
        others.push(c);
    }
    // The owner keeps per-member presence.
    let mut joins = 0;
    while joins < 7 {
        if host.next_event(WAIT).await.unwrap().ev == "member.join" {
            joins += 1;
        }
    }
    // A listener gets member.count, reaching the full count, and far fewer than 7 joins.
    let mut listener_joins = 0;
    loop {
        let e = listener.next_event(WAIT).await.unwrap();
        match e.ev.as_str() {
            "member.join" => listener_joins += 1,
            "member.count" if e.d["count"] == 9 => break,
            _ => {}
        }
    }
    assert!(
        listener_joins <= 3,
        "listener got {listener_joins} member.join"
    );
    s.stop().await;
}

#[tokio::test]
async fn bad_input_gets_errors_and_the_node_stays_up() {
    let s = Server::start().await;
    let mut watcher = s.connect("watcher").await;
    let mut talker = s.connect("talker").await;
    let room = RoomId::from("bad");
    watcher.join(&room, false, None).await.unwrap();
    talker.join(&room, false, None).await.unwrap();

    let mut bad = s.connect("mallory").await;
    bad.send_raw("{not json").await.unwrap();
    let r = bad.next_reply(WAIT).await.unwrap();
    assert_eq!(
        (r.re, r.result.unwrap_err().code),
        (None, ErrorCode::BadFrame)
    );
    bad.send_raw(r#"{"id":9,"op":"chat.send","d":{"room":5}}"#)
        .await
        .unwrap();
    let r = bad.next_reply(WAIT).await.unwrap();
    assert_eq!(
        (r.re, r.result.unwrap_err().code),
        (Some(9), ErrorCode::BadFrame)
    );
    bad.send_raw(r#"{"id":10,"op":"teleport","d":{}}"#)
        .await
        .unwrap();
    let r = bad.next_reply(WAIT).await.unwrap();
    assert_eq!(
        (r.re, r.result.unwrap_err().code),
        (Some(10), ErrorCode::UnknownOp)
    );
    bad.send_binary(vec![1, 2, 3]).await.unwrap();
    let r = bad.next_reply(WAIT).await.unwrap();
    assert_eq!(r.result.unwrap_err().code, ErrorCode::BadFrame);
    // Still open and useful.
    let pong = bad.request("ping", json!({})).await.unwrap();
    assert!(pong["t"].as_u64().unwrap() > 0);

    // Oversize frame: 1009.
    bad.send_raw("x".repeat(70 * 1024)).await.unwrap();
    let close = bad.closed(WAIT).await.unwrap().expect("close frame");
    assert_eq!(u16::from(close.code), 1009);

    // The others are unaffected.
    talker.chat(&room, "still here").await.unwrap();
    assert_eq!(
        watcher.next_event_named("chat", WAIT).await.unwrap().d["text"],
        "still here"
    );
    s.stop().await;
}

#[tokio::test]
async fn an_empty_room_unloads_after_the_idle_time_and_reloads_with_its_state() {
    let s = Server::start_with(|_, sh| sh.idle_unload = Duration::from_millis(300)).await;
    let admin = s.running.as_ref().unwrap().admin_addr;
    let mut a = s.connect("alice").await;
    let room = a
        .create_room(json!({"room": "idle", "seats": 3, "password": "pw"}))
        .await
        .unwrap();
    a.join(&room, false, None).await.unwrap();
    let loaded = kit::admin::get(admin, "/admin/rooms/idle", Some("admin-token"))
        .await
        .unwrap();
    assert_eq!(loaded.status, 200);
    a.request("room.leave", json!({"room": room}))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let r = kit::admin::get(admin, "/admin/rooms/idle", Some("admin-token"))
            .await
            .unwrap();
        if r.status == 404 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the empty room never unloaded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Joining again reloads it from its snapshot, with a new epoch.
    let ok = a.join(&room, false, None).await.unwrap();
    assert_eq!(ok["snapshot"]["locked"], true);
    assert_eq!(ok["snapshot"]["owner"], "alice");
    assert_eq!(ok["snapshot"]["seats"].as_array().unwrap().len(), 3);
    s.stop().await;
}

/// Writes `reqs` in one write (as a client that does not wait between them would), then reads
/// until each has its reply; returns the replies by id and the events that came meanwhile.
async fn send_all(
    ws: &mut RawWs,
    reqs: &[serde_json::Value],
) -> (
    std::collections::HashMap<u64, serde_json::Value>,
    Vec<serde_json::Value>,
) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    for r in reqs {
        ws.feed(Message::text(r.to_string())).await.unwrap();
    }
    ws.flush().await.unwrap();
    let (mut replies, mut events) = (std::collections::HashMap::new(), Vec::new());
    while replies.len() < reqs.len() {
        match tokio::time::timeout(WAIT, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                let v: serde_json::Value = serde_json::from_str(&t).unwrap();
                match v.get("re").and_then(serde_json::Value::as_u64) {
                    Some(re) => {
                        replies.insert(re, v);
                    }
                    None => events.push(v),
                }
            }
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => {}
            other => panic!("unexpected {other:?} with {replies:?}"),
        }
    }
    (replies, events)
}

/// A client leaves a room and asks to join it again in the same write, and the room refuses
/// that join (a wrong password): the client is out, and none of the room's events reach it.
#[tokio::test]
async fn a_refused_rejoin_right_after_a_leave_leaves_the_client_out_of_the_room() {
    let s = Server::for_bursts().await;
    let mut owner = s.connect("rejoin-owner").await;
    let room = owner
        .create_room(json!({"room": "rejoin-locked", "seats": 4, "password": "p"}))
        .await
        .unwrap();
    owner
        .create_room(json!({"room": "rejoin-open", "seats": 4}))
        .await
        .unwrap();
    owner.join(&room, false, Some("p")).await.unwrap();
    let mut guest = s.raw("rejoin-guest").await;
    let op = |id: u64, op: &str, d: serde_json::Value| json!({"id": id, "op": op, "d": d});
    let (r, _) = send_all(
        &mut guest,
        &[op(1, "room.join", json!({"room": room, "password": "p"}))],
    )
    .await;
    assert!(r[&1].get("ok").is_some(), "{r:?}");
    let (r, _) = send_all(
        &mut guest,
        &[
            op(2, "room.leave", json!({"room": room})),
            op(3, "room.join", json!({"room": room, "password": "wrong"})),
        ],
    )
    .await;
    assert!(r[&2].get("ok").is_some(), "{r:?}");
    assert_eq!(r[&3]["err"]["code"], "ROOM_LOCKED", "{r:?}");
    // Once the owner has its own chat line, every member's outbox holds it: the reply the guest
    // asks for afterwards queues behind anything the room sent it.
    owner.chat(&room, "members only").await.unwrap();
    owner.next_event_named("chat", WAIT).await.unwrap();
    let (r, events) = send_all(
        &mut guest,
        &[op(
            4,
            "chat.send",
            json!({"room": room, "text": "still here?"}),
        )],
    )
    .await;
    let leaked: Vec<_> = events.iter().filter(|e| e["ev"] == "chat").collect();
    assert!(leaked.is_empty(), "a refused guest got {leaked:?}");
    // And the room agrees: the guest is not a member.
    assert_eq!(r[&4]["err"]["code"], "NOT_IN_ROOM", "{r:?}");
    s.stop().await;
}

/// A client hops A → B → A with both joins in one write (a quick swipe back): it must end up
/// in A. The switch to B makes the gateway leave A on the client's behalf; that leave must not
/// undo the join of A that followed it.
#[tokio::test]
async fn a_quick_hop_back_leaves_the_client_in_the_room_it_came_back_to() {
    let s = Server::for_bursts().await;
    let mut owner = s.connect("hop-owner").await;
    for r in ["hop-a", "hop-b"] {
        owner
            .create_room(json!({"room": r, "seats": 4}))
            .await
            .unwrap();
    }
    let mut ws = s.raw("hopper").await;
    let join = |id: u64, room: &str| json!({"id": id, "op": "room.join", "d": {"room": room}});
    let (r, _) = send_all(&mut ws, &[join(1, "hop-a")]).await;
    assert!(r[&1].get("ok").is_some(), "{r:?}");
    let mut id = 1;
    for hop in 0..20 {
        let (r, _) = send_all(&mut ws, &[join(id + 1, "hop-b"), join(id + 2, "hop-a")]).await;
        assert!(
            r[&(id + 1)].get("ok").is_some() && r[&(id + 2)].get("ok").is_some(),
            "{r:?}"
        );
        // Still a member of A: a seat there is granted.
        let take = json!({"id": id + 3, "op": "seat.take", "d": {"room": "hop-a"}});
        let leave = json!({"id": id + 4, "op": "seat.leave", "d": {"room": "hop-a"}});
        let (r, _) = send_all(&mut ws, &[take, leave]).await;
        assert!(r[&(id + 3)].get("ok").is_some(), "hop {hop}: {r:?}");
        id += 4;
    }
    s.stop().await;
}
