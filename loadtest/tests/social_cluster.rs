//! The social layer across gateways with real processes: direct messages between gateways
//! (acknowledged: one the closing connection got but did not acknowledge comes again; the
//! app's own message through the other gateway's admin API),
//! an offline message delivered on connect through the other gateway, one room per user when
//! two joins race on two gateways, a SIGKILLed gateway's registry entries going away, a
//! backlog read that failed in a Redis blip tried again while its session lives, and a message
//! to a user on a draining gateway arriving once, before the 1001 or after the reconnect.
//!
//! These need the `chorus` binary built (`cargo build --bins`).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use kit::client::Client;
use kit::cluster::{Cluster, ClusterOptions};
use protocol::{NodeId, RoomId, UserId};
use serde_json::{Value, json};
use storage::redis::Redis;
use storage::registry::{ALIVE_TTL, Registry};
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(10);

async fn cluster() -> Cluster {
    Cluster::of(1, 2).await.unwrap()
}

async fn send(c: &mut Client, to: &str, text: &str, req: &str) -> Value {
    c.request("im.send", json!({"to": to, "text": text, "req_id": req}))
        .await
        .unwrap()
}

async fn next_im(c: &mut Client) -> Value {
    c.next_event_named("im", WAIT).await.unwrap().d
}

#[tokio::test]
async fn direct_messages_cross_gateways_and_an_offline_one_arrives_through_the_other_gateway() {
    let cluster = cluster().await;
    let mut ann = cluster.connect(0, "ann").await.unwrap();
    let mut ann_elsewhere = cluster.connect(1, "ann").await.unwrap();
    let mut bob = cluster.connect_acking(1, "bob").await.unwrap();
    let ok = send(&mut ann, "bob", "across", "k1").await;
    for c in [&mut bob, &mut ann_elsewhere] {
        let m = next_im(c).await;
        assert_eq!(
            (m["id"].clone(), m["text"].as_str()),
            (ok["id"].clone(), Some("across"))
        );
    }
    // A retry through the other gateway answers the first message and delivers nothing.
    let again = send(&mut ann_elsewhere, "bob", "across", "k1").await;
    assert_eq!(again, ok);

    // Bob goes offline without acknowledging "across"; what Ann sends meanwhile arrives, in
    // order, through gateway 0, after "across". His gateway may still hold the closing
    // connection and queue the first messages to it: not acknowledged, they stay owed.
    bob.close().await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            send(&mut ann, "bob", &format!("off {i}"), &format!("off-{i}")).await["id"].clone(),
        );
    }
    let mut bob = cluster.connect_acking(0, "bob").await.unwrap();
    let m = next_im(&mut bob).await;
    assert_eq!(
        (&m["id"], m["text"].as_str()),
        (&ok["id"], Some("across")),
        "got by the closed connection but not acknowledged: owed"
    );
    for (i, id) in ids.iter().enumerate() {
        let m = next_im(&mut bob).await;
        assert_eq!(
            (&m["id"], m["text"].as_str()),
            (id, Some(format!("off {i}").as_str()))
        );
    }
    ids.push(ok["id"].clone());
    bob.request("im.ack", json!({ "ids": ids })).await.unwrap();
    send(&mut ann_elsewhere, "bob", "live again", "k-live").await;
    assert_eq!(
        next_im(&mut bob).await["text"],
        "live again",
        "no duplicate, no retry echo"
    );
    // The app's message through gateway 1's admin API reaches Bob on gateway 0, marked.
    let token = Some(cluster.admin_token.as_str());
    let body = json!({"from": "official", "text": "from the app", "req_id": "app-1"});
    let path = "/admin/users/bob/messages";
    let sent = kit::admin::call(cluster.gateways[1].admin, "POST", path, token, Some(body))
        .await
        .unwrap();
    assert_eq!(sent.status, 200, "{}", sent.body);
    let m = next_im(&mut bob).await;
    assert_eq!(
        (&m["id"], &m["from"], &m["system"]),
        (&sent.json()["id"], &json!("official"), &json!(true))
    );
    // A figure for the notes: send to receipt across gateways (debug build, loopback).
    // Five senders: each user's burst is 10 messages.
    let mut ms = Vec::new();
    for u in 0..5 {
        let mut sender = cluster.connect(1, &format!("timer{u}")).await.unwrap();
        for i in 0..10 {
            let t = Instant::now();
            let sent = send(&mut sender, "bob", "timed", &format!("t{i}")).await;
            assert_eq!(next_im(&mut bob).await["id"], sent["id"]);
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    ms.sort_by(f64::total_cmp);
    eprintln!(
        "IM_CROSS_GATEWAY send->receipt ms: p50 {:.2} p99 {:.2} (50 messages)",
        ms[25], ms[49]
    );
}

/// `room`'s member count, read by `observer` (a member) through a fresh snapshot.
async fn members(observer: &mut Client, room: &RoomId) -> u64 {
    let j = observer.join_retrying(room, None, WAIT).await.unwrap();
    j["snapshot"]["members"].as_u64().unwrap()
}

#[tokio::test]
async fn two_joins_of_one_user_racing_on_two_gateways_end_in_exactly_one_room() {
    let cluster = cluster().await;
    let mut on_g0 = cluster.connect(0, "ann").await.unwrap();
    let mut on_g1 = cluster.connect(1, "ann").await.unwrap();
    for round in 0..4 {
        let (a, b) = (
            RoomId::from(format!("race-a{round}")),
            RoomId::from(format!("race-b{round}")),
        );
        let mut watch_a = cluster.connect(0, &format!("wa{round}")).await.unwrap();
        let mut watch_b = cluster.connect(1, &format!("wb{round}")).await.unwrap();
        assert_eq!(members(&mut watch_a, &a).await, 1);
        assert_eq!(members(&mut watch_b, &b).await, 1);
        // Both joins leave before either reply is read.
        let ja = on_g0.send("room.join", json!({"room": a})).await.unwrap();
        let jb = on_g1.send("room.join", json!({"room": b})).await.unwrap();
        on_g0.reply_to(ja, WAIT).await.unwrap();
        on_g1.reply_to(jb, WAIT).await.unwrap();
        // Settles with Ann in exactly one of the two rooms, told where she was taken out.
        let deadline = Instant::now() + WAIT;
        let (in_a, in_b) = loop {
            let in_a = members(&mut watch_a, &a).await - 1;
            let in_b = members(&mut watch_b, &b).await - 1;
            if in_a + in_b == 1 || Instant::now() >= deadline {
                break (in_a, in_b);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(in_a + in_b, 1, "round {round}: in a {in_a}, in b {in_b}");
        let (left, left_room) = if in_a == 1 {
            (&mut on_g1, &b)
        } else {
            (&mut on_g0, &a)
        };
        // A connection may also hold a `room.left` for the room it was leaving when this
        // round began (a notice of the other gateway's swap can overtake its own join's
        // reply); the one for this round's room must come.
        let deadline = Instant::now() + WAIT;
        let notice = loop {
            let left_in = deadline.saturating_duration_since(Instant::now());
            let d = left.next_event_named("room.left", left_in).await.unwrap().d;
            if d["room"] == left_room.as_str() {
                break d;
            }
        };
        assert_eq!(notice["reason"].as_str(), Some("switched"));
        // Still one a moment later: nothing undoes it.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let again = (
            members(&mut watch_a, &a).await - 1,
            members(&mut watch_b, &b).await - 1,
        );
        assert_eq!(again, (in_a, in_b), "round {round}");
    }
}

#[tokio::test]
async fn a_gateway_killed_with_sigkill_leaves_no_registry_entry_that_delivers_to_it() {
    let mut cluster = cluster().await;
    let redis = Redis::connect(&cluster.redis.url()).await.unwrap();
    let registry = Registry::redis(&redis);
    let bob_id = UserId::from("bob");
    let mut ann = cluster.connect(0, "ann").await.unwrap();
    let bob = cluster.connect(1, "bob").await.unwrap();
    let g2 = NodeId::from(cluster.gateways[1].id.as_str());
    let deadline = Instant::now() + WAIT;
    while registry.gateways_of(&bob_id).await.unwrap() != [g2.clone()] {
        assert!(Instant::now() < deadline, "bob never registered on {g2}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.gateways[1].node.kill9().unwrap();
    let killed = Instant::now();
    // Sent while the dead gateway may still look alive: kept for Bob, not lost.
    let early = send(&mut ann, "bob", "while dying", "k1").await;
    let deadline = killed + ALIVE_TTL + Duration::from_secs(3);
    while !registry.gateways_of(&bob_id).await.unwrap().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the dead gateway's entry outlived its TTL"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(bob);
    let late = send(&mut ann, "bob", "after", "k2").await;
    let mut bob = cluster.connect(0, "bob").await.unwrap();
    assert_eq!(next_im(&mut bob).await["id"], early["id"]);
    assert_eq!(next_im(&mut bob).await["id"], late["id"]);
}

#[tokio::test]
async fn a_second_connection_in_the_same_room_through_another_gateway_replaces_the_first() {
    let cluster = cluster().await;
    let room = RoomId::from("same");
    let mut watch = cluster.connect(0, "watcher").await.unwrap();
    assert_eq!(members(&mut watch, &room).await, 1);
    let mut first = cluster.connect(0, "ann").await.unwrap();
    let mut second = cluster.connect(1, "ann").await.unwrap();
    first.join_retrying(&room, None, WAIT).await.unwrap();
    second.join_retrying(&room, None, WAIT).await.unwrap();
    let notice = first.next_event_named("room.left", WAIT).await.unwrap().d;
    assert_eq!(
        notice["reason"], "replaced",
        "the room's rule, not a switch"
    );
    assert_eq!(members(&mut watch, &room).await, 2);
    second
        .request("chat.send", json!({"room": room, "text": "still in"}))
        .await
        .unwrap();
}

#[tokio::test]
async fn direct_messages_flow_again_after_redis_restarts_and_loses_everything() {
    let mut cluster = cluster().await;
    let mut ann = cluster.connect(0, "ann").await.unwrap();
    let mut bob = cluster.connect(1, "bob").await.unwrap();
    send(&mut ann, "bob", "before", "k-before").await;
    assert_eq!(next_im(&mut bob).await["text"], "before");
    cluster.redis.restart().await.unwrap();
    // The gateways subscribe again and register their sessions again: a message gets through.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    for i in 0.. {
        assert!(
            Instant::now() < deadline,
            "no message got through; got {got:?}"
        );
        let sent = ann
            .request(
                "im.send",
                json!({"to": "bob", "text": format!("after {i}"), "req_id": format!("a{i}")}),
            )
            .await;
        let Ok(sent) = sent else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        if let Ok(e) = bob.next_event_named("im", Duration::from_millis(500)).await {
            got.push(e.d["id"].as_u64().unwrap());
            if e.d["id"] == sent["id"] {
                break;
            }
        }
    }
    let mut unique = got.clone();
    unique.dedup();
    assert_eq!(unique, got, "no message twice");
    // Settled: Bob's connection is registered again, so messages arrive live, one by one.
    for i in 0..3 {
        let sent = send(&mut ann, "bob", &format!("live {i}"), &format!("live-{i}")).await;
        assert_eq!(next_im(&mut bob).await["id"], sent["id"], "live {i}");
    }
}

/// Waits until the registry says `user` is in `room` (or in none, for `None`).
async fn registry_says(registry: &Registry, user: &str, room: Option<&str>) {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = registry.rooms_of(&[UserId::from(user)]).await.unwrap();
        let here = now.first().map(|(_, e)| e.room.as_str().to_owned());
        if here.as_deref() == room {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{user} in {here:?}, expected {room:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_registry_knows_the_room_a_user_is_in_until_they_leave_or_are_kicked() {
    let cluster = cluster().await;
    let redis = Redis::connect(&cluster.redis.url()).await.unwrap();
    let registry = Registry::redis(&redis);
    let mut host = cluster.connect(0, "host").await.unwrap();
    let room = host
        .create_room(json!({"room": "reg-room", "title": "t"}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut ann = cluster.connect(1, "ann").await.unwrap();
    ann.join_retrying(&room, None, WAIT).await.unwrap();
    registry_says(&registry, "ann", Some("reg-room")).await;
    registry_says(&registry, "host", Some("reg-room")).await;
    ann.request("room.leave", json!({"room": room}))
        .await
        .unwrap();
    registry_says(&registry, "ann", None).await;
    ann.join_retrying(&room, None, WAIT).await.unwrap();
    registry_says(&registry, "ann", Some("reg-room")).await;
    host.request("room.kick", json!({"room": room, "user": "ann"}))
        .await
        .unwrap();
    let left = ann.next_event_named("room.left", WAIT).await.unwrap().d;
    assert_eq!(left["reason"], "kicked");
    registry_says(&registry, "ann", None).await;
    // A closed connection takes its entry with it.
    drop(host);
    registry_says(&registry, "host", None).await;
}

/// How many of a gateway's connect-time store calls (registration, backlog read) failed, by
/// its log.
fn connect_store_failures(log: &str) -> usize {
    log.lines()
        .filter(|l| {
            l.contains("Could not register a connection")
                || l.contains("Could not read owed direct messages")
        })
        .count()
}

#[tokio::test]
async fn a_backlog_read_that_failed_in_a_redis_blip_is_tried_again_while_the_session_lives() {
    let cluster = cluster().await;
    let mut ann = cluster.connect(0, "ann").await.unwrap();
    let sent = send(&mut ann, "bob", "while away", "k-away").await;
    // Bob connects while Redis is frozen: `hello` needs no Redis, but his registration and
    // backlog read time out. Redis comes back once two of them failed (the registration and
    // the read, or a registration and its retry), with Bob still connected.
    cluster.redis.pause().unwrap();
    let mut bob = cluster.connect(1, "bob").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while connect_store_failures(&cluster.gateways[1].node.log().unwrap()) < 2 {
        assert!(Instant::now() < deadline, "no store call failed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.redis.resume().unwrap();
    let m = next_im(&mut bob).await;
    assert_eq!(
        (&m["id"], m["text"].as_str()),
        (&sent["id"], Some("while away")),
        "the owed message came without a reconnect"
    );
}

#[tokio::test]
async fn a_direct_message_to_a_user_on_a_draining_gateway_arrives_once_before_the_close_or_after() {
    let cluster = Cluster::start(ClusterOptions {
        shards: 1,
        gateways: 2,
        env: vec![("CHORUS_DRAIN_WINDOW_MS".into(), "4000".into())],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let mut ann = cluster.connect(0, "ann").await.unwrap();
    // Bob's connection does not acknowledge (the stricter rule: delivered once queued), and
    // shares the draining gateway with others, so his 1001 comes somewhere in the window.
    let mut others = Vec::new();
    for i in 0..7 {
        others.push(cluster.connect(1, &format!("other{i}")).await.unwrap());
    }
    let mut bob = cluster.connect(1, "bob").await.unwrap();
    cluster.gateways[1].node.terminate().unwrap();
    let deadline = Instant::now() + WAIT;
    while !cluster.gateways[1].node.log().unwrap().contains("Draining") {
        assert!(
            Instant::now() < deadline,
            "the gateway did not start draining"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sent = send(&mut ann, "bob", "during the drain", "k-drain").await;
    let mut before_close = Vec::new();
    let close = loop {
        match bob.next_event(WAIT).await {
            Ok(e) if e.ev == "im" => before_close.push(e.d["id"].clone()),
            Ok(_) => {}
            Err(kit::client::ClientError::Closed(f)) => break f.map(|f| u16::from(f.code)),
            Err(e) => panic!("no close in time: {e:?}"),
        }
    };
    assert_eq!(close, Some(1001));
    // Bob reconnects elsewhere: the message comes now unless it came before the close, and
    // never twice (the next message after it is a fresh one).
    let mut bob = cluster.connect(0, "bob").await.unwrap();
    if before_close.is_empty() {
        assert_eq!(
            next_im(&mut bob).await["id"],
            sent["id"],
            "lost in the drain"
        );
    } else {
        assert_eq!(before_close, vec![sent["id"].clone()]);
    }
    let fresh = send(&mut ann, "bob", "after", "k-after").await;
    assert_eq!(next_im(&mut bob).await["id"], fresh["id"], "no duplicate");
}
