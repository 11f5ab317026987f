//! End-to-end tests of the seat, role and moderation vocabulary on a standalone node: real
//! WebSocket clients over loopback, every rule applied by the room's owner.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use gateway::GatewayConfig;
use kit::client::{Client, ClientError};
use protocol::{ErrorCode, RoomId};
use serde_json::{Value, json};
use shard::ShardConfig;

use crate::support::server;
use crate::support::webhook;
use server::Server;
use webhook::{chorus_headers, now, send};

const SECRET: &[u8] = b"test-secret-for-seats";
const WAIT: Duration = Duration::from_secs(5);
/// The RTC webhook secret the servers here accept.
const WEBHOOK: &str = "seats-webhook-secret";

async fn start(tune: impl FnOnce(&mut ShardConfig)) -> Server {
    let gateway = GatewayConfig {
        drain_window: Duration::from_millis(100),
        rtc_webhook_secret: Some(WEBHOOK.into()),
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

/// A room `id` owned by `host` in `mode`, with `admins` made admins and everyone joined.
async fn party(
    s: &Server,
    id: &str,
    mode: &str,
    names: &[&str],
    admins: &[&str],
) -> (RoomId, Vec<Client>) {
    let mut clients = Vec::new();
    let mut host = s.connect("host").await;
    let room = host
        .create_room(json!({"room": id, "seats": 4, "seat_mode": mode}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    for name in names {
        let mut c = s.connect(name).await;
        c.join(&room, false, None).await.unwrap();
        clients.push(c);
    }
    for a in admins {
        host.request(
            "room.admin",
            json!({"room": room, "user": a, "admin": true}),
        )
        .await
        .unwrap();
    }
    clients.insert(0, host);
    (room, clients)
}

#[tokio::test]
async fn two_admins_answer_one_request_at_once_and_exactly_one_wins_for_everyone() {
    let s = start(|_| {}).await;
    let (room, mut c) = party(&s, "apply", "apply", &["a1", "a2", "bob"], &["a1", "a2"]).await;
    let [host, a1, a2, bob] = c.as_mut_slice() else {
        unreachable!()
    };
    // Bob may not take a seat in an apply-mode room; he asks.
    let e = bob
        .request("seat.take", json!({"room": room}))
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::Forbidden);
    let ok = bob
        .request("seat.request", json!({"room": room, "seat": 2}))
        .await
        .unwrap();
    assert!(ok["expires_at"].as_u64().is_some());
    for admin in [&mut *a1, &mut *a2] {
        let ev = admin.next_event_named("seat.request", WAIT).await.unwrap();
        assert_eq!(
            (ev.d["user"].clone(), ev.d["seat"].clone()),
            (json!("bob"), json!(2))
        );
        assert!(ev.seq.is_none(), "requests are volatile");
    }
    // Both answer at once: one approve, one reject.
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
        (Ok(ok), Err(e)) => {
            assert_eq!(ok["seat"], 2);
            assert_eq!(e.code(), Some(ErrorCode::NoSuchRequest));
            "approved"
        }
        (Err(e), Ok(_)) => {
            assert_eq!(e.code(), Some(ErrorCode::NoSuchRequest));
            "rejected"
        }
        other => panic!("exactly one answer wins: {other:?}"),
    };
    // Both admins and the requester see the same single outcome.
    for c in [&mut *a1, &mut *a2, &mut *bob] {
        let ev = c
            .next_event_named("seat.request.update", WAIT)
            .await
            .unwrap();
        assert_eq!(ev.d["state"], outcome);
        assert_eq!(ev.d["user"], "bob");
    }
    if outcome == "approved" {
        let ev = host.next_event_named("seat.update", WAIT).await.unwrap();
        assert_eq!(
            (ev.d["user"].clone(), ev.d["reason"].clone()),
            (json!("bob"), json!("approved"))
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn an_invitation_accepted_after_its_time_out_is_refused_as_expired() {
    let s = start(|sh| sh.seat_invite_ttl = Duration::from_millis(300)).await;
    let (room, mut c) = party(&s, "inv", "apply", &["bob"], &[]).await;
    let [host, bob] = c.as_mut_slice() else {
        unreachable!()
    };
    host.request(
        "seat.invite",
        json!({"room": room, "user": "bob", "seat": 1}),
    )
    .await
    .unwrap();
    let ev = bob.next_event_named("seat.invite", WAIT).await.unwrap();
    assert_eq!(
        (ev.d["by"].clone(), ev.d["seat"].clone()),
        (json!("host"), json!(1))
    );
    // The server expires it and tells the invitee and the host.
    for c in [&mut *bob, &mut *host] {
        let ev = c
            .next_event_named("seat.invite.update", WAIT)
            .await
            .unwrap();
        assert_eq!(ev.d["state"], "expired");
    }
    let e = bob
        .request("seat.invite.accept", json!({"room": room}))
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::RequestExpired);
    // A fresh invitation accepted in time seats him, whatever the seat mode.
    host.request("seat.invite", json!({"room": room, "user": "bob"}))
        .await
        .unwrap();
    bob.next_event_named("seat.invite", WAIT).await.unwrap();
    let ok = bob
        .request("seat.invite.accept", json!({"room": room}))
        .await
        .unwrap();
    assert_eq!(ok["seat"], 0);
    s.stop().await;
}

/// Bob takes seat 1 and stays silent; carol takes seat 2 and publishes.
async fn bob_on_1_carol_publishing_on_2(bob: &mut Client, carol: &mut Client, room: &RoomId) {
    bob.request("seat.take", json!({"room": room, "seat": 1}))
        .await
        .unwrap();
    carol
        .request("seat.take", json!({"room": room, "seat": 2}))
        .await
        .unwrap();
    carol
        .request("mic.publishing", json!({"room": room, "on": true}))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_seat_without_audio_is_freed_at_its_deadline_and_publishing_keeps_it() {
    // Carol's seat.take and mic.publishing must both land within the deadline, on a loaded
    // machine too; bob's freeing is waited for (WAIT per event), not timed.
    let s = start(|sh| sh.publish_deadline = Duration::from_secs(2)).await;
    let (room, mut c) = party(&s, "mic", "free", &["bob", "carol"], &[]).await;
    let [host, bob, carol] = c.as_mut_slice() else {
        unreachable!()
    };
    bob_on_1_carol_publishing_on_2(bob, carol, &room).await;
    // Bob never publishes: the server frees his seat, and only his.
    let freed = loop {
        let ev = host.next_event_named("seat.update", WAIT).await.unwrap();
        if ev.d["reason"] == "publish_timeout" {
            break ev;
        }
    };
    assert_eq!(
        (freed.d["index"].clone(), freed.d["user"].clone()),
        (json!(1), Value::Null)
    );
    assert_eq!(
        (freed.d["cause"].clone(), freed.d["by"].clone()),
        (json!("server"), Value::Null)
    );
    let snap = host.join(&room, false, None).await.unwrap();
    assert_eq!(snap["snapshot"]["seats"][2]["user"], "carol");
    assert_eq!(snap["snapshot"]["seats"][2]["publishing"], true);
    let e = bob
        .request("mic.publishing", json!({"room": room, "on": true}))
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::NotSeated);
    s.stop().await;
}

/// An admin swaps two seated members in one command: every member sees both seats change
/// (`swapped`), each user keeps their publishing state, and a member cannot swap, nor anyone
/// push a holder off without `swap`.
#[tokio::test]
async fn an_admin_swaps_two_seated_members_and_everyone_sees_both_seats() {
    let s = start(|_| {}).await;
    let (room, mut c) = party(&s, "swap", "free", &["a1", "bob", "carol"], &["a1"]).await;
    let [host, a1, bob, carol] = c.as_mut_slice() else {
        unreachable!()
    };
    bob_on_1_carol_publishing_on_2(bob, carol, &room).await;
    let plain = json!({"room": room, "seat": 2, "user": "bob"});
    let e = a1.request("seat.move", plain).await.unwrap_err();
    assert_eq!(code(e), ErrorCode::SeatTaken);
    let e = bob
        .request("seat.move", json!({"room": room, "seat": 2, "swap": true}))
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::Forbidden, "a member cannot swap");

    let ok = a1
        .request(
            "seat.move",
            json!({"room": room, "seat": 2, "user": "bob", "swap": true}),
        )
        .await
        .unwrap();
    assert_eq!(ok, json!({"seat": 2}));
    for who in [&mut *host, &mut *bob, &mut *carol] {
        let first = loop {
            let ev = who.next_event_named("seat.update", WAIT).await.unwrap();
            if ev.d["reason"] == "swapped" {
                break ev;
            }
        };
        let second = who.next_event_named("seat.update", WAIT).await.unwrap();
        let seen: Vec<_> = [&first, &second]
            .iter()
            .map(|e| {
                (
                    e.d["index"].clone(),
                    e.d["user"].clone(),
                    e.d["publishing"].clone(),
                    e.d["by"].clone(),
                    e.d["reason"].clone(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                (
                    json!(1),
                    json!("carol"),
                    json!(true),
                    json!("a1"),
                    json!("swapped")
                ),
                (
                    json!(2),
                    json!("bob"),
                    json!(false),
                    json!("a1"),
                    json!("swapped")
                ),
            ]
        );
    }
    let snap = host.join(&room, false, None).await.unwrap();
    let seats = &snap["snapshot"]["seats"];
    assert_eq!(
        (&seats[1]["user"], &seats[2]["user"]),
        (&json!("carol"), &json!("bob"))
    );
    s.stop().await;
}

#[tokio::test]
async fn a_kick_with_a_ban_removes_the_member_until_the_ban_ends_and_it_is_audited() {
    let s = start(|_| {}).await;
    let (room, mut c) = party(&s, "kick", "free", &["mod", "bob"], &["mod"]).await;
    let [host, m, bob] = c.as_mut_slice() else {
        unreachable!()
    };
    bob.request("seat.take", json!({"room": room}))
        .await
        .unwrap();
    // An admin may not kick the owner.
    let e = m
        .request("room.kick", json!({"room": room, "user": "host"}))
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::Forbidden);
    m.request(
        "room.kick",
        json!({"room": room, "user": "bob", "ban_seconds": 1}),
    )
    .await
    .unwrap();
    let left = bob.next_event_named("room.left", WAIT).await.unwrap();
    assert_eq!(left.d["reason"], "kicked");
    let ev = host.next_event_named("moderation", WAIT).await.unwrap();
    assert_eq!(
        (
            ev.d["action"].clone(),
            ev.d["user"].clone(),
            ev.d["by"].clone()
        ),
        (json!("kick"), json!("bob"), json!("mod"))
    );
    assert!(ev.d["until"].as_u64().is_some());
    let gone = host.next_event_named("member.leave", WAIT).await.unwrap();
    assert_eq!(gone.d["reason"], "kicked");
    let e = bob.join(&room, false, None).await.unwrap_err();
    assert_eq!(code(e), ErrorCode::Banned);
    // Bob is out of the room: his ops say so, and he can join another.
    let e = bob
        .request("chat.send", json!({"room": room, "text": "hi"}))
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::NotInRoom);
    let bans = m.request("room.bans", json!({"room": room})).await.unwrap();
    assert_eq!(bans["bans"][0]["user"], "bob");
    // The ban ends by itself; the audit list is readable through the admin API.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    bob.join(&room, false, None).await.unwrap();
    let inspect = kit::admin::get(
        s.admin,
        &format!("/admin/rooms/{room}/moderation"),
        Some("admin-token"),
    )
    .await
    .unwrap()
    .json();
    let actions: Vec<&str> = inspect["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["action"].as_str())
        .collect();
    assert_eq!(actions, ["admin_set", "kick"], "{inspect}");
    assert_eq!(inspect["bans"], json!([]), "the ban ended");
    s.stop().await;
}

#[tokio::test]
async fn a_chat_mute_survives_the_room_unloading_and_closing_takes_everyone_out() {
    let s = start(|sh| sh.idle_unload = Duration::from_millis(200)).await;
    let (room, mut c) = party(&s, "mute", "free", &["bob"], &[]).await;
    let [host, bob] = c.as_mut_slice() else {
        unreachable!()
    };
    host.request(
        "chat.mute",
        json!({"room": room, "user": "bob", "seconds": 600}),
    )
    .await
    .unwrap();
    let e = bob.chat(&room, "hi").await.unwrap_err();
    assert_eq!(code(e), ErrorCode::ChatMuted);
    for c in [&mut *host, &mut *bob] {
        c.request("room.leave", json!({"room": room}))
            .await
            .unwrap();
    }
    // Empty, the room unloads; its next runtime loads the mute with it.
    s.wait_unloaded(room.as_str(), WAIT).await;
    host.join(&room, false, None).await.unwrap();
    bob.join(&room, false, None).await.unwrap();
    let e = bob.chat(&room, "hi").await.unwrap_err();
    assert_eq!(code(e), ErrorCode::ChatMuted);
    // The owner closes the room: everyone gets room.left "closed"; nobody joins until reopened.
    host.request("room.close", json!({"room": room}))
        .await
        .unwrap();
    for c in [&mut *host, &mut *bob] {
        let ev = c.next_event_named("room.left", WAIT).await.unwrap();
        assert_eq!(ev.d["reason"], "closed");
    }
    let e = bob.join(&room, false, None).await.unwrap_err();
    assert_eq!(code(e), ErrorCode::RoomClosed);
    let e = bob
        .request("room.open", json!({"room": room}))
        .await
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::Forbidden);
    host.request("room.open", json!({"room": room}))
        .await
        .unwrap();
    bob.join(&room, false, None).await.unwrap();
    s.stop().await;
}

/// A signed webhook about `user` in room `r1`.
async fn report(s: &Server, secret: &str, id: &str, user: &str, event: &str, at_ms: u64) -> u16 {
    let body =
        json!({"id": id, "room": "r1", "user": user, "event": event, "at": at_ms}).to_string();
    let headers = chorus_headers(secret, now(), &body);
    send(s.admin, "POST", "/rtc/webhook", &headers, &body)
        .await
        .0
}

#[tokio::test]
async fn webhooks_drive_the_seat_once_each_in_time_order_and_refused_ones_change_nothing() {
    let s = start(|sh| sh.publish_deadline = Duration::from_secs(10)).await;
    let mut owner = s.connect("owner").await;
    let room = owner
        .create_room(json!({"room": "r1", "seats": 4}))
        .await
        .unwrap();
    owner.join(&room, false, None).await.unwrap();
    let mut bob = s.connect("bob").await;
    bob.join(&room, false, None).await.unwrap();
    bob.request("seat.take", json!({"room": room, "seat": 1}))
        .await
        .unwrap();
    let taken = owner.next_event_named("seat.update", WAIT).await.unwrap();
    assert!(taken.d["publish_by"].as_u64().is_some(), "deadline armed");

    // Times a little in the past: a report from the future counts as now.
    let t1 = (now() - 5) * 1000;
    assert_eq!(report(&s, WEBHOOK, "e1", "bob", "published", t1).await, 202);
    let ev = owner.next_event_named("seat.update", WAIT).await.unwrap();
    assert_eq!(
        (&ev.d["publishing"], &ev.d["cause"], ev.d.get("publish_by")),
        (&json!(true), &json!("server"), None)
    );
    // The same event again, a "stopped" older than it, and a forged one: accepted or refused,
    // none of them changes the seat.
    assert_eq!(report(&s, WEBHOOK, "e1", "bob", "published", t1).await, 202);
    assert_eq!(
        report(&s, WEBHOOK, "e0", "bob", "unpublished", t1 - 5000).await,
        202
    );
    assert_eq!(
        report(&s, "not-the-secret", "e9", "bob", "unpublished", t1 + 500).await,
        401
    );
    // The next seat change is the genuine, newer stop: its deadline counts from its own time.
    assert_eq!(
        report(&s, WEBHOOK, "e2", "bob", "left", t1 + 1000).await,
        202
    );
    let ev = owner.next_event_named("seat.update", WAIT).await.unwrap();
    assert_eq!(ev.d["publishing"], false);
    assert_eq!(ev.d["publish_by"], json!(t1 + 1000 + 10_000));
    assert!(
        owner.queued_events().iter().all(|e| e.ev != "seat.update"),
        "no other seat change"
    );
    s.stop().await;
}
