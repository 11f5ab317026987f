//! Cluster invariants with real processes: a real `redis-server`, `chorus shard` and `chorus
//! gateway` processes on free loopback ports, real WebSocket clients.
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use kit::client::resume::ResumingClient;
use kit::client::{Client, ClientError};
use kit::cluster::{Cluster, ClusterOptions};
use protocol::RoomId;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::support;

use support::{HISTORY_FAILED, WAIT, alice_and_bob_in, events_until_room_left, one_shard_cluster};

/// Waits for `room.left` with reason `unavailable` for `room`.
async fn wait_room_left(c: &mut Client, within: Duration) -> Value {
    c.next_event_named("room.left", within).await.unwrap().d
}

#[tokio::test]
async fn users_on_two_gateways_chat_in_order_through_three_shards() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let mut a = cluster.connect(0, "alice").await.unwrap();
    let mut b = cluster.connect(1, "bob").await.unwrap();
    let mut rooms = Vec::new();
    for i in 0..6 {
        rooms.push(RoomId::from(format!("xroom-{i}")));
    }
    let room = rooms[0].clone();
    a.join_retrying(&room, None, WAIT).await.unwrap();
    let jb = b.join_retrying(&room, None, WAIT).await.unwrap();
    assert_eq!(jb["snapshot"]["members"], 2);
    assert_eq!(
        a.next_event_named("member.join", WAIT).await.unwrap().d["user"],
        "bob"
    );
    let base = jb["seq"].as_u64().unwrap();
    for i in 0..30 {
        let c = if i % 2 == 0 { &mut a } else { &mut b };
        let seq = c.chat(&room, &format!("m{i}")).await.unwrap();
        assert_eq!(seq, base + i + 1);
    }
    for c in [&mut a, &mut b] {
        let mut got = Vec::new();
        while got.len() < 30 {
            let e = c.next_event(WAIT).await.unwrap();
            if e.ev == "chat" {
                got.push((e.seq.unwrap(), e.d["text"].as_str().unwrap().to_owned()));
            }
        }
        let want: Vec<(u64, String)> = (0..30).map(|i| (base + i + 1, format!("m{i}"))).collect();
        assert_eq!(got, want);
        let p = c.position(&room).unwrap();
        assert_eq!((p.gaps, p.duplicates), (0, 0));
    }
    // Rooms spread over the shards, and every node's admin API names the same owner.
    let mut owners = std::collections::HashSet::new();
    for r in &rooms[1..] {
        a.join_retrying(r, None, WAIT).await.unwrap();
        let (owner, fence) = cluster.room_owner(r.as_str()).await.unwrap().unwrap();
        assert!(fence > 0);
        let shard = cluster.shard(&owner).unwrap();
        let j = kit::admin::get(
            shard.admin,
            &format!("/admin/rooms/{r}"),
            Some(&cluster.admin_token),
        )
        .await
        .unwrap()
        .json();
        assert_eq!(j["running_here"], true);
        owners.insert(owner);
    }
    assert!(owners.len() >= 2, "rooms on one shard only: {owners:?}");
    // The admin API refuses calls without the token.
    let r = kit::admin::get(cluster.gateways[0].admin, "/admin/rooms/xroom-0", None)
        .await
        .unwrap();
    assert_eq!(r.status, 401);
}

/// A busy room's changes do not wait for the shard's history write interval: with a 250 ms
/// interval, 100 chat lines sent at once are all stored and answered well inside the 25 s that
/// one call per interval would take (each change after the first has more behind it).
#[tokio::test]
async fn a_busy_room_writes_without_waiting_for_the_write_interval() {
    const LINES: u64 = 100;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("chorus.toml");
    std::fs::write(&config, "history_write_interval_us = 250000\n").unwrap();
    let cluster = Cluster::start(ClusterOptions {
        shards: 1,
        gateways: 1,
        env: vec![
            ("CHORUS_CONFIG".into(), config.display().to_string()),
            ("CHORUS_RATE_PER_SEC".into(), "10000".into()),
            ("CHORUS_RATE_BURST".into(), "10000".into()),
        ],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let room = RoomId::from("busy");
    let (mut a, mut b) = alice_and_bob_in(&cluster, &room).await;
    let started = Instant::now();
    let mut ids = Vec::new();
    for i in 0..LINES {
        let d = json!({"room": room.as_str(), "text": format!("m{i}")});
        ids.push(a.send("chat.send", d).await.unwrap());
    }
    for id in ids {
        a.reply_to(id, WAIT).await.unwrap();
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "{LINES} lines took {took:?}: the busy room waited for the interval"
    );
    let mut chats = 0;
    while chats < LINES {
        if b.next_event(WAIT).await.unwrap().ev == "chat" {
            chats += 1;
        }
    }
    let p = b.position(&room).unwrap();
    assert_eq!((p.gaps, p.duplicates), (0, 0));
}

/// Watches a room with members and no traffic for 3×TTL; returns the number of samples in
/// which its owner or fence differed from the first (an ownership change or lease steal).
async fn quiet_room_ownership_changes(renew_on_traffic: bool) -> usize {
    let ttl = Duration::from_secs(1);
    let cluster = Cluster::start(ClusterOptions {
        shards: 2,
        gateways: 1,
        lease_ttl: ttl,
        renew_on_traffic,
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let room = RoomId::from("quiet");
    let (mut a, _b) = alice_and_bob_in(&cluster, &room).await;
    let first = cluster.room_owner("quiet").await.unwrap().unwrap();
    let mut changes = 0;
    let end = Instant::now() + ttl * 3 + ttl / 2;
    while Instant::now() < end {
        let now = cluster.room_owner("quiet").await.unwrap();
        if now.as_ref() != Some(&first) {
            changes += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The members were never told to leave.
    let stray: Vec<_> = a
        .queued_events()
        .into_iter()
        .filter(|e| e.ev == "room.left")
        .collect();
    if !renew_on_traffic {
        assert!(stray.is_empty(), "members were evicted: {stray:?}");
    }
    changes
}

#[tokio::test]
async fn a_quiet_room_keeps_its_owner_for_three_ttls() {
    assert_eq!(quiet_room_ownership_changes(false).await, 0);
}

/// The seed incident's bug behind the test-only switch: leases renewed on traffic expire in a
/// quiet room. This proves the test above can fail.
#[tokio::test]
async fn renewing_on_traffic_loses_quiet_rooms_which_the_check_detects() {
    assert!(quiet_room_ownership_changes(true).await > 0);
}

#[tokio::test]
async fn killing_the_owner_fails_over_within_ttl_plus_two_seconds() {
    let ttl = Duration::from_secs(2);
    let mut cluster = Cluster::start(ClusterOptions {
        lease_ttl: ttl,
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let mut a = cluster.connect(0, "alice").await.unwrap();
    let mut b = cluster.connect(1, "bob").await.unwrap();
    let room = a
        .create_room(json!({"room": "busy", "title": "t", "seats": 4, "password": "pw"}))
        .await;
    let room = match room {
        Ok(r) => r,
        Err(e) => panic!("create failed: {e:?}"),
    };
    a.join(&room, false, None).await.unwrap();
    a.request("seat.take", json!({"room": room, "seat": 2}))
        .await
        .unwrap();
    b.join(&room, false, Some("pw")).await.unwrap();
    // Carol sits, and will not come back after the failover.
    let mut c = cluster.connect(0, "carol").await.unwrap();
    c.join(&room, false, Some("pw")).await.unwrap();
    c.request("seat.take", json!({"room": room, "seat": 3}))
        .await
        .unwrap();
    // Publishing audio: no publish deadline will free the seat.
    c.request("mic.publishing", json!({"room": room, "on": true}))
        .await
        .unwrap();
    for i in 0..10 {
        a.chat(&room, &format!("before {i}")).await.unwrap();
    }
    let (owner, fence) = cluster.room_owner("busy").await.unwrap().unwrap();
    let old_epoch = a.since(&room).unwrap().epoch;
    assert_eq!(old_epoch, fence);

    let killed_at = Instant::now();
    cluster.shard_mut(&owner).unwrap().node.kill9().unwrap();
    assert_eq!(wait_room_left(&mut a, WAIT).await["reason"], "unavailable");
    let ja = a.join_retrying(&room, None, ttl * 5).await.unwrap();
    let failover = killed_at.elapsed();
    let snap = &ja["snapshot"];
    assert_eq!(snap["owner"], "alice", "owner restored");
    assert_eq!(snap["locked"], true, "password restored");
    assert_eq!(snap["seats"][2]["user"], "alice", "seats restored");
    let new_epoch = ja["epoch"].as_u64().unwrap();
    assert!(new_epoch > old_epoch, "epoch {new_epoch} after {old_epoch}");
    let (new_owner, new_fence) = cluster.room_owner("busy").await.unwrap().unwrap();
    assert_ne!(new_owner, owner);
    assert_eq!(new_fence, new_epoch);
    wait_room_left(&mut b, WAIT).await;
    b.join_retrying(&room, Some("pw"), WAIT).await.unwrap();
    // Chat continues in the new epoch with consecutive seq.
    let s1 = a.chat(&room, "after").await.unwrap();
    let s2 = b.chat(&room, "after 2").await.unwrap();
    assert_eq!(s2, s1 + 1);
    // No member list came over with the crash, but the seats did: carol is an away member of
    // the new runtime, so her seat is freed when her connection closes (or, at the latest,
    // when the grace window passes), not held by nobody for ever.
    assert_eq!(snap["seats"][3]["user"], "carol", "seats restored");
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = a.next_event_named("seat.update", left).await.unwrap();
        if e.d["index"] == 3 && e.d["user"].is_null() {
            // Her gateway's leave when her connection closed, or the window's end.
            let reason = e.d["reason"].as_str().unwrap_or_default();
            assert!(["left_room", "disconnected"].contains(&reason), "{e:?}");
            break;
        }
    }
    eprintln!(
        "FAILOVER kill -9: {} ms (TTL {} ms)",
        failover.as_millis(),
        ttl.as_millis()
    );
    assert!(
        failover <= ttl + Duration::from_secs(2),
        "failover took {failover:?}"
    );
}

#[tokio::test]
async fn a_paused_owner_is_fenced_and_never_interleaves_old_epoch_events() {
    let ttl = Duration::from_secs(4);
    let cluster = Cluster::start(ClusterOptions {
        shards: 3,
        gateways: 1,
        lease_ttl: ttl,
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let room = RoomId::from("paused");
    let (mut a, mut b) = alice_and_bob_in(&cluster, &room).await;
    a.request("seat.take", json!({"room": room, "seat": 0}))
        .await
        .unwrap();
    let (owner, old_fence) = cluster.room_owner("paused").await.unwrap().unwrap();
    let paused = cluster.shard(&owner).unwrap();
    paused.node.pause().unwrap();
    let stopped_at = Instant::now();
    // Commands sent now sit in the paused owner's socket buffer.
    let _ = b
        .send(
            "chat.send",
            json!({"room": room, "text": "to the paused owner"}),
        )
        .await;
    assert_eq!(
        wait_room_left(&mut a, ttl * 3).await["reason"],
        "unavailable"
    );
    let ja = a.join_retrying(&room, None, ttl * 4).await.unwrap();
    let takeover = stopped_at.elapsed();
    let new_epoch = ja["epoch"].as_u64().unwrap();
    assert!(new_epoch > old_fence);
    assert_eq!(ja["snapshot"]["seats"][0]["user"], "alice");
    // Resume the old owner after 1.5 × TTL.
    let resume_at = stopped_at + ttl * 3 / 2;
    tokio::time::sleep_until(resume_at.max(Instant::now())).await;
    paused.node.resume().unwrap();
    // Traffic in the new epoch; the old owner's queued command must not surface.
    for i in 0..10 {
        a.chat(&room, &format!("new {i}")).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut max_epoch = 0;
    while Instant::now() < deadline {
        match a.next_event(Duration::from_millis(200)).await {
            Ok(e) => {
                if let Some(ep) = e.epoch {
                    assert!(
                        ep >= max_epoch,
                        "event of epoch {ep} after epoch {max_epoch}: {e:?}"
                    );
                    max_epoch = ep;
                    assert_ne!(e.d["text"], "to the paused owner", "{e:?}");
                }
            }
            Err(ClientError::Timeout) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(max_epoch >= new_epoch);
    // The fence only moves forward. Once the old owner is back on the ring the placement may
    // hand the room back to it: then it runs it under a new, higher fence.
    let (_, now_fence) = cluster.room_owner("paused").await.unwrap().unwrap();
    assert!(now_fence >= new_epoch);
    let deadline = Instant::now() + WAIT;
    loop {
        let j = kit::admin::get(
            paused.admin,
            "/admin/rooms/paused",
            Some(&cluster.admin_token),
        )
        .await
        .unwrap()
        .json();
        if j["running_here"] == false || j["local_fence"].as_u64() > Some(old_fence) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "old owner still runs the room under its old fence"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "TAKEOVER after SIGSTOP: {} ms (TTL {} ms)",
        takeover.as_millis(),
        ttl.as_millis()
    );
}

/// The deadline before every side effect (docs/ARCHITECTURE.md, section 4): an owner frozen after it wrote
/// an event to the fenced history and before it broadcast it (a test switch holds the broadcast
/// long enough to pause the node there) wakes past its deadline and broadcasts nothing. The
/// event is not lost: the new owner replays it from the fenced history to the member who
/// rejoins, once.
#[tokio::test]
async fn an_owner_frozen_between_its_write_and_its_broadcast_withholds_the_broadcast() {
    let ttl = Duration::from_secs(2);
    let cluster = Cluster::start(ClusterOptions {
        shards: 3,
        gateways: 1,
        lease_ttl: ttl,
        env: vec![("CHORUS_TEST_HOLD_BROADCAST_MS".into(), "5000".into())],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let room = RoomId::from("held");
    // Joins cause no sequenced event, so nothing is held before the chat.
    let (mut a, mut b) = alice_and_bob_in(&cluster, &room).await;
    let (owner, _) = cluster.room_owner("held").await.unwrap().unwrap();
    let frozen = cluster.shard(&owner).unwrap();
    let _ = b
        .send("chat.send", json!({"room": room, "text": "held"}))
        .await
        .unwrap();
    // The owner logs the hold once the chat is in the fenced history; pause it there.
    let deadline = Instant::now() + WAIT;
    while !frozen
        .node
        .log()
        .unwrap()
        .contains("Test hold before broadcast.")
    {
        assert!(
            Instant::now() < deadline,
            "the owner never held a broadcast"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    frozen.node.pause().unwrap();
    assert_eq!(
        wait_room_left(&mut a, ttl * 5).await["reason"],
        "unavailable"
    );
    // A new owner holds the lease once this join succeeds: the frozen owner's deadline, set
    // before the lease's expiry in Redis, has passed.
    let rejoined = a.join_retrying(&room, None, ttl * 5).await.unwrap();
    assert!(rejoined["resync"] == false, "{rejoined}");
    frozen.node.resume().unwrap();
    assert!(
        kit::admin::wait_metric(frozen.admin, WITHHELD, 1.0, WAIT)
            .await
            .unwrap(),
        "the frozen owner did not withhold its broadcast"
    );
    // The chat reached alice once: replayed by the new owner on her rejoin.
    let mut copies = 0;
    while let Ok(e) = a.next_event(Duration::from_millis(500)).await {
        if e.ev == "chat" && e.d["text"] == "held" {
            copies += 1;
        }
    }
    assert_eq!(copies, 1);
}

/// A history write that fails (not fenced: here Redis refuses writes that need memory, while
/// lease renewals go on) must not be published: members would see an event no new owner can
/// replay. The sender is refused, the runtime stops without saving and tells its members to
/// rejoin, and the next runtime runs under a new token and epoch (the old token wrote, so the
/// same node must not number events in its epoch again). Alice, who resumes from her last
/// event, gets no resync, never the refused chat, and the next chat in the new epoch.
#[tokio::test]
async fn a_failed_history_write_publishes_nothing_and_the_next_runtime_starts_a_new_epoch() {
    let cluster = one_shard_cluster().await;
    let room = RoomId::from("no-history");
    let (mut a, mut b) = alice_and_bob_in(&cluster, &room).await;
    b.chat(&room, "before").await.unwrap();
    let before = a.next_event_named("chat", WAIT).await.unwrap();
    let old_epoch = before.epoch.unwrap();
    let chat = json!({"room": room, "text": "refused"});
    refused_while_redis_is_full(&cluster, &mut b, "chat.send", chat, 1.0).await;
    let seen = events_until_room_left(&mut a).await;
    assert!(seen.iter().all(|e| e.ev != "chat"), "published: {seen:?}");
    assert_eq!(wait_room_left(&mut b, WAIT).await["reason"], "unavailable");
    for c in [&mut a, &mut b] {
        let rejoined = c.join_retrying(&room, None, WAIT).await.unwrap();
        assert_eq!(rejoined["resync"], false, "{rejoined}");
    }
    b.chat(&room, "after").await.unwrap();
    let e = a.next_event_named("chat", WAIT).await.unwrap();
    assert_eq!(e.d["text"], "after", "{e:?}");
    assert!(
        e.epoch.unwrap() > old_epoch,
        "the next runtime reused epoch {old_epoch}: {e:?}"
    );
    assert_eq!(e.seq, Some(1));
    // A refused seat.take is not applied either: the next runtime starts from the last saved
    // state, where the seat is free.
    let take = json!({"room": room, "seat": 0});
    refused_while_redis_is_full(&cluster, &mut b, "seat.take", take, 2.0).await;
    let seen = events_until_room_left(&mut a).await;
    assert!(
        seen.iter().all(|e| e.ev != "seat.update"),
        "published: {seen:?}"
    );
    let rejoined = a.join_retrying(&room, None, WAIT).await.unwrap();
    assert_ne!(
        rejoined["snapshot"]["seats"][0]["user"], "bob",
        "{rejoined}"
    );
    assert!(rejoined["epoch"].as_u64() > e.epoch, "{rejoined}");
}

/// Sends `op` from `c` while Redis refuses every write that needs memory (lease renewals go
/// on), waits until the shard has counted `failures` failed history writes in all, lets Redis
/// take writes again, and requires the request to have been refused: `UNAVAILABLE`, or
/// `NOT_IN_ROOM` from the next runtime when the gateway's retry reached it first.
async fn refused_while_redis_is_full(
    cluster: &Cluster,
    c: &mut Client,
    op: &str,
    d: Value,
    failures: f64,
) {
    cluster.redis.config_set("maxmemory", "1").await.unwrap();
    let sent = c.send(op, d).await.unwrap();
    let shard = cluster.shards.first().unwrap();
    let failed = kit::admin::wait_metric(shard.admin, HISTORY_FAILED, failures, WAIT).await;
    cluster.redis.config_set("maxmemory", "0").await.unwrap();
    let refused = c.reply_to(sent, WAIT).await;
    assert!(
        matches!(refused, Err(ClientError::Server(_))),
        "{op} accepted although its history write failed: {refused:?}"
    );
    assert!(failed.unwrap(), "the history write of {op} did not fail");
}

/// Broadcasts a room runtime withheld past its lease deadline (the shard's counter).
const WITHHELD: &str = "chorus_shard_broadcasts_withheld_total";

#[tokio::test]
async fn the_cluster_recovers_from_a_redis_restart_with_one_owner() {
    let mut cluster = Cluster::start(ClusterOptions {
        shards: 2,
        gateways: 1,
        lease_ttl: Duration::from_secs(2),
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let mut a = cluster.connect(0, "alice").await.unwrap();
    let room = RoomId::from("redis-restart");
    a.join_retrying(&room, None, WAIT).await.unwrap();
    a.chat(&room, "before").await.unwrap();
    cluster.redis.restart().await.unwrap();
    // Keep using the room for 3 TTLs (rejoining whenever told to), then it must work.
    let until = Instant::now() + Duration::from_secs(6);
    let mut ok_after = 0;
    while Instant::now() < until || ok_after == 0 {
        assert!(
            Instant::now() < until + Duration::from_secs(15),
            "no recovery after a Redis restart"
        );
        match a.chat(&room, "after").await {
            Ok(_) => ok_after += 1,
            Err(ClientError::Server(_)) => {
                let _ = a.join(&room, true, None).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
        for e in a.queued_events() {
            if e.ev == "room.left" {
                let _ = a.join(&room, true, None).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.chat(&room, "final").await.unwrap();
    // Exactly one shard runs the room.
    let mut running = 0;
    for s in &cluster.shards {
        let j = kit::admin::get(
            s.admin,
            "/admin/rooms/redis-restart",
            Some(&cluster.admin_token),
        )
        .await
        .unwrap()
        .json();
        if j["running_here"] == true {
            running += 1;
        }
    }
    assert_eq!(running, 1);
    assert!(cluster.room_owner("redis-restart").await.unwrap().is_some());
}

/// How long a follower keeps reading, once the publisher is done, for the last acknowledged
/// text to arrive: longer than any delivery, so a text missing after it is lost, not late.
const FOLLOW_TAIL: Duration = Duration::from_secs(20);
/// Upper bound on a follower's whole run (the publisher's 40 s, then [`FOLLOW_TAIL`]).
const FOLLOW_LIMIT: Duration = Duration::from_secs(90);

/// Whether a follower may stop: the publisher has named its last acknowledged text (in
/// `last`) and it is among `texts`, or [`FOLLOW_TAIL`] has passed since it was named
/// (`tail_deadline` starts then; the caller's comparison then reports what is missing).
fn follow_done(
    last: &tokio::sync::watch::Receiver<Option<String>>,
    texts: &[String],
    tail_deadline: &mut Option<Instant>,
) -> bool {
    let Some(last) = last.borrow().clone() else {
        return false;
    };
    let deadline = *tail_deadline.get_or_insert_with(|| Instant::now() + FOLLOW_TAIL);
    texts.contains(&last) || Instant::now() >= deadline
}

/// Follows a room until it has seen the last acknowledged text (see [`follow_done`]): records
/// every chat text in order, and on `room.left` rejoins with `since` (retrying while
/// ownership moves). Returns the texts and whether a resync ever happened.
async fn follow(
    mut c: Client,
    room: RoomId,
    last: tokio::sync::watch::Receiver<Option<String>>,
) -> (Vec<String>, bool) {
    let started = Instant::now();
    let mut texts = Vec::new();
    let mut resynced = false;
    let mut tail_deadline = None;
    while !follow_done(&last, &texts, &mut tail_deadline) {
        assert!(started.elapsed() < FOLLOW_LIMIT, "follower never finished");
        match c.next_event(Duration::from_millis(200)).await {
            Ok(e) if e.ev == "chat" => {
                texts.push(e.d["text"].as_str().unwrap_or_default().to_owned())
            }
            Ok(e) if e.ev == "room.left" => {
                let j = c
                    .join_retrying(&room, None, Duration::from_secs(20))
                    .await
                    .unwrap();
                if j["resync"] == true {
                    resynced = true;
                }
            }
            Ok(_) | Err(ClientError::Timeout) => {}
            Err(e) => panic!("follower failed: {e:?}"),
        }
    }
    // Drain what is already queued.
    for e in c.queued_events() {
        if e.ev == "chat" {
            texts.push(e.d["text"].as_str().unwrap_or_default().to_owned());
        }
    }
    (texts, resynced)
}

async fn follow_resuming(
    mut c: ResumingClient,
    last: tokio::sync::watch::Receiver<Option<String>>,
) -> (Vec<String>, bool) {
    let started = Instant::now();
    let mut texts = Vec::new();
    let mut tail_deadline = None;
    while !follow_done(&last, &texts, &mut tail_deadline) {
        assert!(
            started.elapsed() < FOLLOW_LIMIT,
            "resuming client never finished"
        );
        match c.next_event(Duration::from_millis(200)).await {
            Ok(e) if e.ev == "chat" => {
                texts.push(e.d["text"].as_str().unwrap_or_default().to_owned())
            }
            Ok(_) | Err(ClientError::Timeout) => {}
            Err(e) => panic!("resuming client failed: {e:?}"),
        }
    }
    for e in c.client().queued_events() {
        if e.ev == "chat" {
            texts.push(e.d["text"].as_str().unwrap_or_default().to_owned());
        }
    }
    assert!(c.resumes >= 1, "the resuming client never resumed");
    (texts, c.resyncs > 0)
}

#[tokio::test]
async fn killing_the_owner_under_traffic_loses_no_event_for_resuming_clients() {
    let ttl = Duration::from_secs(2);
    let mut cluster = Cluster::start(ClusterOptions {
        lease_ttl: ttl,
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let room = RoomId::from("traffic");
    let mut p = cluster.connect(0, "publisher").await.unwrap();
    p.join_retrying(&room, None, WAIT).await.unwrap();
    // The publisher names its last acknowledged text here once it is done.
    let (last_tx, last_rx) = tokio::sync::watch::channel(None);
    let mut followers = Vec::new();
    for (g, user) in [(0, "o1"), (1, "o2")] {
        let mut c = cluster.connect(g, user).await.unwrap();
        c.join_retrying(&room, None, WAIT).await.unwrap();
        followers.push(tokio::spawn(follow(c, room.clone(), last_rx.clone())));
    }
    // The third follower is the library's self-resuming client.
    let urls: Vec<String> = cluster
        .gateways
        .iter()
        .rev()
        .map(|g| g.url.clone())
        .collect();
    let resuming = ResumingClient::connect(urls, cluster.token("o3").unwrap(), room.clone())
        .await
        .unwrap();
    followers.push(tokio::spawn(follow_resuming(resuming, last_rx)));
    let (owner, _) = cluster.room_owner("traffic").await.unwrap().unwrap();
    let mut acked = Vec::new();
    let total = 120;
    let mut i = 0;
    let deadline = Instant::now() + Duration::from_secs(40);
    while i < total {
        assert!(Instant::now() < deadline, "publisher stuck at {i}");
        if i == 40 && acked.len() == 40 {
            cluster.shard_mut(&owner).unwrap().node.kill9().unwrap();
        }
        let text = format!("m{i}");
        match p.chat(&room, &text).await {
            Ok(_) => {
                acked.push(text);
                i += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(_) => {
                for e in p.queued_events() {
                    let _ = e;
                }
                let _ = p.join(&room, true, None).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    // Each follower reads until the last acknowledged text reached it (or FOLLOW_TAIL passed),
    // then the texts are compared.
    last_tx.send(acked.last().cloned()).unwrap();
    let mut results = Vec::new();
    for f in followers {
        results.push(f.await.unwrap());
    }
    for (texts, resynced) in &results {
        assert!(
            !resynced,
            "a follower needed a resync although the history moved with the room"
        );
        for a in &acked {
            assert!(texts.contains(a), "acknowledged {a} missing");
        }
        let mut sorted = texts.clone();
        sorted.dedup();
        assert_eq!(&sorted, texts, "duplicate events delivered");
    }
    assert_eq!(
        results[0].0, results[1].0,
        "followers saw different sequences"
    );
    assert_eq!(
        results[1].0, results[2].0,
        "followers saw different sequences"
    );
}

/// A request on its way to a shard whose link then goes down is answered `UNAVAILABLE` at
/// once (whether the shard ran it is unknown), not after the gateway's 15 s retry budget.
#[tokio::test]
async fn a_request_lost_with_its_shards_link_is_answered_at_once() {
    let mut cluster = Cluster::of(2, 1).await.unwrap();
    let room = RoomId::from("lost");
    let (mut a, mut b) = alice_and_bob_in(&cluster, &room).await;
    let (owner, _) = cluster.room_owner("lost").await.unwrap().unwrap();
    // Stopped, the owner keeps its socket open: the chat waits there, unanswered.
    cluster.shard(&owner).unwrap().node.pause().unwrap();
    let chat = b
        .send("chat.send", json!({"room": room, "text": "into the void"}))
        .await
        .unwrap();
    // A connection's frames are handled in order: the ping's answer means the chat was routed.
    b.request("ping", json!({})).await.unwrap();
    let killed_at = Instant::now();
    cluster.shard_mut(&owner).unwrap().node.kill9().unwrap();
    let e = b.reply_to(chat, WAIT).await.unwrap_err();
    assert_eq!(e.code(), Some(protocol::ErrorCode::Unavailable), "{e:?}");
    assert!(
        killed_at.elapsed() < Duration::from_secs(5),
        "answered {:?} after the link went down",
        killed_at.elapsed()
    );
    // The members the shard served are told to rejoin, as before.
    assert_eq!(wait_room_left(&mut a, WAIT).await["reason"], "unavailable");
}

/// A request the gateway gave up on (its retry budget ran out while the owner, stopped, held
/// it) gets one answer, the gateway's `UNAVAILABLE`: the owner's reply once it goes on is not
/// passed on, and a join the owner made then is undone, since its client was told it failed.
#[tokio::test]
async fn a_reply_after_the_retry_budget_is_not_a_second_answer() {
    let cluster = Cluster::start(ClusterOptions {
        shards: 1,
        gateways: 1,
        // Long enough that the owner keeps its lease through the pause and runs what it holds.
        lease_ttl: Duration::from_secs(10),
        env: vec![("CHORUS_ROUTE_RETRY_MS".into(), "1000".into())],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let room = RoomId::from("late");
    let (mut a, mut b) = alice_and_bob_in(&cluster, &room).await;
    let mut c = cluster.connect(0, "carol").await.unwrap();
    let (owner, _) = cluster.room_owner("late").await.unwrap().unwrap();
    cluster.shard(&owner).unwrap().node.pause().unwrap();
    let chat = b
        .send("chat.send", json!({"room": room, "text": "held"}))
        .await
        .unwrap();
    let join = c.send("room.join", json!({"room": room})).await.unwrap();
    for (client, id) in [(&mut b, chat), (&mut c, join)] {
        let e = client.reply_to(id, WAIT).await.unwrap_err();
        assert_eq!(e.code(), Some(protocol::ErrorCode::Unavailable), "{e:?}");
    }
    cluster.shard(&owner).unwrap().node.resume().unwrap();
    // The owner ran both: alice sees the line and carol come, then carol go again. The line
    // and the join came on two connections, so the gateway may have routed either first.
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let e = a.next_event(WAIT).await.unwrap();
        if e.d["user"] == "bob" {
            continue;
        }
        seen.push(match e.ev.as_str() {
            "chat" => format!("chat {}", e.d["text"].as_str().unwrap_or_default()),
            "member.join" => format!("join {}", e.d["user"].as_str().unwrap_or_default()),
            "member.leave" => format!(
                "leave {} {}",
                e.d["user"].as_str().unwrap_or_default(),
                e.d["reason"].as_str().unwrap_or_default()
            ),
            _ => continue,
        });
    }
    let joined = seen.iter().position(|e| e == "join carol");
    let left = seen.iter().position(|e| e == "leave carol left");
    assert!(seen.contains(&"chat held".to_owned()), "{seen:?}");
    assert!(joined.is_some() && joined < left, "{seen:?}");
    // Replies come in order: once a later request's is in, an owner's late reply would be too.
    b.chat(&room, "after").await.unwrap();
    let join_again = c.send("room.join", json!({"room": room})).await.unwrap();
    c.reply_to(join_again, WAIT).await.unwrap();
    for client in [&mut b, &mut c] {
        match client.next_reply(Duration::ZERO).await {
            Err(ClientError::Timeout) => {}
            other => panic!("a second answer: {other:?}"),
        }
    }
}

/// A chat line whose history write went unanswered (Redis frozen past the owner's 2 s bound)
/// may still be stored. Its sender is told `UNAVAILABLE` and the gateway does not send it
/// again, so when Redis comes back and the write lands, the line is in the history once: a
/// member resuming sees it once, not again from a retry in the next epoch.
#[tokio::test]
async fn a_write_that_may_have_landed_is_not_sent_again() {
    let cluster = Cluster::start(ClusterOptions {
        shards: 1,
        gateways: 1,
        // Longer than the freeze: the lease still holds when the write lands.
        lease_ttl: Duration::from_secs(10),
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let room = RoomId::from("unknown-outcome");
    let (mut a, mut b) = alice_and_bob_in(&cluster, &room).await;
    a.chat(&room, "before").await.unwrap();
    cluster.redis.pause().unwrap();
    let held = b
        .send("chat.send", json!({"room": room, "text": "held"}))
        .await
        .unwrap();
    // The write times out, the runtime stops and tells its members.
    let seen = events_until_room_left(&mut a).await;
    assert!(seen.iter().all(|e| e.d["text"] != "held"), "{seen:?}");
    cluster.redis.resume().unwrap();
    let e = b.reply_to(held, WAIT).await.unwrap_err();
    assert_eq!(e.code(), Some(protocol::ErrorCode::Unavailable), "{e:?}");
    // Alice resumes: the line that landed is replayed to her, once; then Bob's next line.
    a.join_retrying(&room, None, WAIT).await.unwrap();
    b.join_retrying(&room, None, WAIT).await.unwrap();
    b.chat(&room, "after").await.unwrap();
    let got = a.events_until_chat("after", WAIT).await.unwrap();
    let held_lines = got.iter().filter(|e| e.d["text"] == "held").count();
    assert_eq!(held_lines, 1, "{got:?}");
}
