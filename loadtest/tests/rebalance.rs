//! Rebalancing with real processes under live traffic: draining a shard, adding, weighting
//! and removing nodes, and moving a room by hand while its owner is frozen.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::HashMap;
use std::time::Duration;

use kit::client::{Client, ClientError};
use kit::cluster::{Cluster, ClusterOptions};
use kit::node::{NODE_READY_TIMEOUT, wait_listening};
use protocol::{ErrorCode, RoomId};
use serde_json::{Value, json};
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(10);

/// How long a join retries while the room's ownership moves.
const JOIN_WITHIN: Duration = Duration::from_secs(30);

/// How long a request refused with `UNAVAILABLE` while its room moves is retried.
const RETRY_WITHIN: Duration = Duration::from_secs(20);
/// Pause between such retries: the move needs a moment, not a busy loop.
const RETRY_PAUSE: Duration = Duration::from_millis(25);
/// How long a drained node may keep running rooms.
const DRAIN_WITHIN: Duration = Duration::from_secs(30);

/// How long a follower keeps reading, once the load is over, for its room's last
/// acknowledged events: longer than any delivery, so an event missing after it is lost.
const FOLLOW_TAIL: Duration = Duration::from_secs(20);
/// Upper bound on a follower's whole run (load, settling, then [`FOLLOW_TAIL`]).
const FOLLOW_LIMIT: Duration = Duration::from_secs(180);

/// Waits until no shard has a move planned or in flight, twice in a row.
async fn settled(c: &Cluster) -> Value {
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut quiet = 0;
    loop {
        let r = c
            .admin("GET", "/admin/rebalance", None)
            .await
            .unwrap()
            .json();
        if r["planned"] == 0 && r["in_flight"] == 0 {
            quiet += 1;
            if quiet >= 2 {
                return r;
            }
        } else {
            quiet = 0;
        }
        assert!(Instant::now() < deadline, "rebalance did not settle: {r}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until every shard routes by the ring the gateway reads now, or a newer one: each has
/// then been told of the change and plans the moves it asks for.
async fn shards_follow_ring(c: &Cluster) {
    let ring = c.admin("GET", "/admin/ring", None).await.unwrap().json();
    let version = ring["version"].as_u64().unwrap();
    let deadline = Instant::now() + WAIT;
    for s in &c.shards {
        loop {
            let j = kit::admin::get(s.admin, "/admin/local", Some(&c.admin_token))
                .await
                .unwrap()
                .json();
            if j["ring_version"].as_u64().is_some_and(|v| v >= version) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} never routed by ring version {version}: {j}",
                s.id
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Moves completed so far over every shard (`GET /admin/rebalance`).
async fn moves_done(c: &Cluster) -> u64 {
    let r = c
        .admin("GET", "/admin/rebalance", None)
        .await
        .unwrap()
        .json();
    r["done"].as_u64().unwrap()
}

/// Loads every room at its placed owner (a join), then reads the owners.
async fn owners(c: &Cluster, probe: &mut Client, rooms: &[RoomId]) -> HashMap<RoomId, String> {
    let mut out = HashMap::new();
    for r in rooms {
        probe.join_retrying(r, None, JOIN_WITHIN).await.unwrap();
        let (owner, _) = c.room_owner(r.as_str()).await.unwrap().unwrap();
        out.insert(r.clone(), owner);
    }
    out
}

/// Waits until the gateway's ring lists `n` shards on the ring.
async fn ring_has(c: &Cluster, n: usize) {
    let deadline = Instant::now() + WAIT;
    loop {
        let r = c.admin("GET", "/admin/ring", None).await.unwrap().json();
        let on = r["nodes"]
            .as_array()
            .map_or(0, |a| a.iter().filter(|n| n["on_ring"] == true).count());
        if on == n {
            return;
        }
        assert!(Instant::now() < deadline, "ring never had {n} shards: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn percentile(mut v: Vec<u64>, p: f64) -> u64 {
    v.sort_unstable();
    if v.is_empty() {
        return 0;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

#[tokio::test]
async fn draining_a_shard_under_chat_and_gift_load_moves_every_room_without_loss() {
    let cluster = Cluster::of(3, 1).await.unwrap();
    ring_has(&cluster, 3).await;
    let rooms: Vec<RoomId> = (0..12).map(|i| RoomId::from(format!("load-{i}"))).collect();
    let mut pubs = Vec::new();
    let mut followers = Vec::new();
    // Once the load is over, each room's publisher names its last acknowledged chat text and
    // its acknowledged gifts on the room's channel here.
    let mut targets = Vec::new();
    for (i, room) in rooms.iter().enumerate() {
        let token = Some(cluster.admin_token.as_str());
        let r = kit::admin::grant(
            cluster.gateways[0].admin,
            token,
            &format!("p{i}"),
            100_000,
            "g",
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        let mut f = cluster.connect(0, &format!("f{i}")).await.unwrap();
        f.join_retrying(room, None, JOIN_WITHIN).await.unwrap();
        let mut p = cluster.connect(0, &format!("p{i}")).await.unwrap();
        p.join_retrying(room, None, JOIN_WITHIN).await.unwrap();
        pubs.push(p);
        let room = room.clone();
        let (target_tx, target) = tokio::sync::watch::channel(None::<(Option<String>, i64)>);
        targets.push(target_tx);
        followers.push(tokio::spawn(async move {
            let started = Instant::now();
            let (mut chats, mut gifts, mut left) = (Vec::new(), 0i64, 0u64);
            // Reads until the last acknowledged text and every acknowledged gift arrived, or
            // FOLLOW_TAIL passed since they were named (the comparison then says what is
            // missing).
            let mut tail_deadline = None;
            loop {
                if let Some((last, gifts_acked)) = target.borrow().clone() {
                    let deadline =
                        *tail_deadline.get_or_insert_with(|| Instant::now() + FOLLOW_TAIL);
                    let all_chats = last.is_none_or(|t| chats.contains(&t));
                    if (all_chats && gifts >= gifts_acked) || Instant::now() >= deadline {
                        break;
                    }
                }
                assert!(started.elapsed() < FOLLOW_LIMIT, "follower never finished");
                match f.next_event(Duration::from_millis(100)).await {
                    Ok(e) if e.ev == "chat" => chats.push(e.d["text"].as_str().unwrap().to_owned()),
                    Ok(e) if e.ev == "gift" => gifts += 1,
                    Ok(e) if e.ev == "room.left" => left += 1,
                    Ok(_) | Err(ClientError::Timeout) => {}
                    Err(e) => panic!("follower: {e:?}"),
                }
            }
            for e in f.queued_events() {
                match e.ev.as_str() {
                    "chat" => chats.push(e.d["text"].as_str().unwrap().to_owned()),
                    "gift" => gifts += 1,
                    _ => {}
                }
            }
            let pos = f.position(&room).cloned().unwrap_or_default();
            (chats, gifts, left, pos)
        }));
    }
    let mut probe = cluster.connect(0, "probe").await.unwrap();
    let before = owners(&cluster, &mut probe, &rooms).await;
    let mut count: HashMap<&str, usize> = HashMap::new();
    for o in before.values() {
        *count.entry(o.as_str()).or_default() += 1;
    }
    let drained = count
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(o, _)| (*o).to_owned())
        .unwrap();
    let moving = count[drained.as_str()];

    // Traffic, with the drain in the middle.
    let mut acked: Vec<Vec<String>> = vec![Vec::new(); rooms.len()];
    let mut gifts_acked = vec![0i64; rooms.len()];
    let mut drain_started = None;
    let mut drain_watch = None;
    let mut worst_ms = vec![0u64; rooms.len()];
    let load_until = Instant::now() + Duration::from_secs(5);
    let mut n = 0u64;
    while Instant::now() < load_until {
        if n == 60 {
            let path = format!("/admin/nodes/{drained}/drain");
            let r = cluster.admin("POST", &path, None).await.unwrap();
            assert_eq!(r.status, 200);
            let started = Instant::now();
            drain_started = Some(started);
            // Time until the drained node runs no room.
            let addr = cluster.shard(&drained).unwrap().admin;
            let token = cluster.admin_token.clone();
            drain_watch = Some(tokio::spawn(async move {
                loop {
                    let j = kit::admin::get(addr, "/admin/local", Some(&token))
                        .await
                        .unwrap()
                        .json();
                    if j["rooms_running"] == 0 {
                        return started.elapsed();
                    }
                    assert!(
                        started.elapsed() < DRAIN_WITHIN,
                        "the drained node still runs rooms: {j}"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }));
        }
        let i = (n as usize) % rooms.len();
        let p = &mut pubs[i];
        let sent_at = Instant::now();
        // A request refused with UNAVAILABLE (its room is moving) is retried after a pause,
        // for at most RETRY_WITHIN: the move should be long done by then.
        let retry_until = sent_at + RETRY_WITHIN;
        if n % 5 == 4 {
            let req = json!({"room": rooms[i], "req_id": format!("g{n}"), "gift": "rose", "to": [format!("f{i}")]});
            loop {
                match p.request("gift.send", req.clone()).await {
                    Ok(_) => {
                        gifts_acked[i] += 1;
                        break;
                    }
                    Err(e) if e.code() == Some(ErrorCode::Unavailable) => {}
                    Err(e) => panic!("gift: {e:?}"),
                }
                assert!(
                    Instant::now() < retry_until,
                    "gift g{n} unavailable too long"
                );
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        } else {
            let text = format!("m{n}");
            loop {
                match p.chat(&rooms[i], &text).await {
                    Ok(_) => {
                        acked[i].push(text);
                        break;
                    }
                    Err(e) if e.code() == Some(ErrorCode::Unavailable) => {}
                    Err(e) => panic!("chat: {e:?}"),
                }
                assert!(
                    Instant::now() < retry_until,
                    "chat m{n} unavailable too long"
                );
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
        if drain_started.is_some() {
            worst_ms[i] = worst_ms[i].max(sent_at.elapsed().as_millis() as u64);
        }
        n += 1;
    }
    let report = settled(&cluster).await;
    assert!(drain_started.is_some());
    let drain_time = drain_watch.unwrap().await.unwrap();
    let after = owners(&cluster, &mut probe, &rooms).await;
    assert!(
        after.values().all(|o| *o != drained),
        "rooms left on the drained shard: {after:?}"
    );
    // Each follower reads until its room's last acknowledged events reached it, then every
    // room is checked.
    for (i, t) in targets.iter().enumerate() {
        t.send(Some((acked[i].last().cloned(), gifts_acked[i])))
            .unwrap();
    }
    for (i, f) in followers.into_iter().enumerate() {
        let (chats, gifts, left, pos) = f.await.unwrap();
        assert_eq!(left, 0, "room {i}: a client was told to leave");
        assert_eq!(
            (pos.gaps, pos.duplicates),
            (0, 0),
            "room {i}: gap or duplicate"
        );
        assert_eq!(
            chats, acked[i],
            "room {i}: chat lost, duplicated or reordered"
        );
        assert_eq!(gifts, gifts_acked[i], "room {i}: gift events");
        let w = kit::admin::get(
            cluster.gateways[0].admin,
            &format!("/admin/wallets/p{i}"),
            Some(&cluster.admin_token),
        )
        .await
        .unwrap()
        .json();
        assert_eq!(
            w["balance"],
            100_000 - 10 * gifts_acked[i],
            "room {i}: double debit"
        );
    }
    let totals = cluster
        .admin("GET", "/admin/ledger/totals", None)
        .await
        .unwrap()
        .json();
    assert_eq!(totals["conserved"], true, "{totals}");
    let moved_rooms: Vec<usize> = (0..rooms.len())
        .filter(|i| before[&rooms[*i]] == drained)
        .collect();
    let client_pause: Vec<u64> = moved_rooms.iter().map(|i| worst_ms[*i]).collect();
    let took: Vec<u64> = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| {
            n["rebalance"]["recent"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|m| m["took_ms"].as_u64())
        .collect();
    assert!(took.len() >= moving, "moves recorded: {took:?}");
    eprintln!(
        "DRAIN: {moving} rooms moved off {drained} in {} ms; old-owner stop per room p50 {} ms, p99 {} ms; \
         client-seen pause (slowest request per moved room) p50 {} ms, p99 {} ms",
        drain_time.as_millis(),
        percentile(took.clone(), 0.5),
        percentile(took, 0.99),
        percentile(client_pause.clone(), 0.5),
        percentile(client_pause, 0.99),
    );
}

#[tokio::test]
async fn adding_weighting_and_removing_nodes_moves_only_the_rooms_that_must_move() {
    let mut cluster = Cluster::of(3, 1).await.unwrap();
    ring_has(&cluster, 3).await;
    let rooms: Vec<RoomId> = (0..48)
        .map(|i| RoomId::from(format!("place-{i}")))
        .collect();
    let mut probe = cluster.connect(0, "probe").await.unwrap();
    let before = owners(&cluster, &mut probe, &rooms).await;

    // Add s4: about a quarter of the rooms move, all of them to s4.
    let s4 = cluster.spawn_shard("s4").await.unwrap();
    wait_listening(s4.admin, NODE_READY_TIMEOUT).await.unwrap();
    cluster.shards.push(s4);
    ring_has(&cluster, 4).await;
    shards_follow_ring(&cluster).await;
    settled(&cluster).await;
    let added = owners(&cluster, &mut probe, &rooms).await;
    let moved: Vec<&RoomId> = rooms.iter().filter(|r| before[*r] != added[*r]).collect();
    assert!(
        moved.iter().all(|r| added[*r] == "s4"),
        "a room moved elsewhere than s4"
    );
    assert!(
        (4..=24).contains(&moved.len()),
        "{} of 48 moved to the 4th node",
        moved.len()
    );

    // Weight s1 3×: rooms move only to s1.
    let done_before = moves_done(&cluster).await;
    let weight = Some(json!({"weight": 3}));
    let r = cluster.admin("PUT", "/admin/nodes/s1/weight", weight);
    assert_eq!(r.await.unwrap().status, 200);
    shards_follow_ring(&cluster).await;
    // A move is recorded once it is done: the planner had planned every move of its shard
    // by then, and `settled` waits for the rest.
    let deadline = Instant::now() + Duration::from_secs(30);
    while moves_done(&cluster).await <= done_before {
        assert!(
            Instant::now() < deadline,
            "no room moved after the weight change"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    settled(&cluster).await;
    let weighted = owners(&cluster, &mut probe, &rooms).await;
    let to_s1: Vec<&RoomId> = rooms.iter().filter(|r| added[*r] != weighted[*r]).collect();
    assert!(!to_s1.is_empty(), "no room moved to the heavier node");
    assert!(
        to_s1.iter().all(|r| weighted[*r] == "s1"),
        "a weight change moved rooms elsewhere"
    );

    // Remove s4: its rooms move, no other room does.
    let r = cluster
        .admin("DELETE", "/admin/nodes/s4", None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    ring_has(&cluster, 3).await;
    shards_follow_ring(&cluster).await;
    settled(&cluster).await;
    let removed = owners(&cluster, &mut probe, &rooms).await;
    for r in &rooms {
        if weighted[r] == "s4" {
            assert_ne!(removed[r], "s4");
        } else {
            assert_eq!(
                removed[r], weighted[r],
                "{r} moved although its node stayed"
            );
        }
    }
    eprintln!(
        "PLACEMENT: add moved {} of 48 (expected ~12), weight x3 moved {} to s1",
        moved.len(),
        to_s1.len()
    );
}

/// A drained shard is off the ring but still runs each of its rooms until that room's turn to
/// be handed off (throttled; here 1 room/s, so most rooms wait seconds). The ring's new owner
/// refuses their commands naming the drained shard as the lease holder, and the gateway must
/// follow that hint: members' requests are answered at once, not only after their room moved.
#[tokio::test]
async fn a_drained_shard_answers_for_its_rooms_until_it_hands_them_off() {
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "handoff_rate_per_sec = 1\n").unwrap();
    let cluster = Cluster::start(ClusterOptions {
        shards: 2,
        gateways: 1,
        env: vec![(
            "CHORUS_CONFIG".to_owned(),
            config.path().display().to_string(),
        )],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    ring_has(&cluster, 2).await;
    // Rooms on s1, each with one member.
    let mut members = Vec::new();
    for i in 0..40 {
        if members.len() == 8 {
            break;
        }
        let room = RoomId::from(format!("drain-serves-{i}"));
        let mut c = cluster.connect(0, &format!("member-{i}")).await.unwrap();
        c.join_retrying(&room, None, JOIN_WITHIN).await.unwrap();
        let (owner, _) = cluster.room_owner(room.as_str()).await.unwrap().unwrap();
        if owner == "s1" {
            members.push((room, c));
        } else {
            c.close().await;
        }
    }
    assert!(members.len() >= 5, "only {} rooms on s1", members.len());

    let r = cluster.admin("POST", "/admin/nodes/s1/drain", None).await;
    assert_eq!(r.unwrap().status, 200);
    ring_has(&cluster, 1).await;
    shards_follow_ring(&cluster).await;
    // Every member asks at once; at 1 handoff a second the last rooms move seconds later.
    let asked = Instant::now();
    let mut ids = Vec::new();
    for (room, c) in &mut members {
        let d = json!({"room": room, "text": "during the drain"});
        ids.push(c.send("chat.send", d).await.unwrap());
    }
    let answers = futures_util::future::join_all(
        members
            .iter_mut()
            .zip(&ids)
            .map(|((_, c), id)| c.reply_to(*id, Duration::from_secs(3))),
    )
    .await;
    let took = asked.elapsed();
    for ((room, _), a) in members.iter().zip(&answers) {
        assert!(a.is_ok(), "{room} during the drain: {a:?} after {took:?}");
    }
    // The drain was still going on: the drained shard answered for rooms it still ran.
    let r = cluster
        .admin("GET", "/admin/rebalance", None)
        .await
        .unwrap()
        .json();
    let left = r["planned"].as_u64().unwrap() + r["in_flight"].as_u64().unwrap();
    assert!(left > 0, "the drain ended before the answers: {r}");

    // Once it is over, every room runs on s2 and its member is still in it.
    settled(&cluster).await;
    for (room, c) in &mut members {
        c.chat(room, "after the drain").await.unwrap();
        let (owner, _) = cluster.room_owner(room.as_str()).await.unwrap().unwrap();
        assert_eq!(owner, "s2", "{room}");
    }
    eprintln!(
        "DRAIN at 1 handoff/s: {} rooms' requests answered in {} ms",
        members.len(),
        took.as_millis()
    );
}

#[tokio::test]
async fn moving_a_room_whose_owner_is_frozen_completes_after_lease_expiry_with_one_owner() {
    let ttl = Duration::from_secs(2);
    let cluster = Cluster::start(ClusterOptions {
        shards: 3,
        gateways: 1,
        lease_ttl: ttl,
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    ring_has(&cluster, 3).await;
    let room = RoomId::from("frozen");
    let mut a = cluster.connect(0, "alice").await.unwrap();
    a.join_retrying(&room, None, JOIN_WITHIN).await.unwrap();
    let (owner, fence) = cluster.room_owner("frozen").await.unwrap().unwrap();
    let target = cluster.other_shard(&owner).unwrap();
    let frozen = cluster.shard(&owner).unwrap();
    frozen.node.pause().unwrap();
    let started = Instant::now();
    let to = Some(json!({"to": target}));
    let r = cluster.admin("POST", "/admin/rooms/frozen/move", to);
    assert_eq!(r.await.unwrap().status, 200);
    // The client keeps trying; the move completes once the frozen owner's lease expires.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "the move never completed");
        if let Ok(Some((now, f))) = cluster.room_owner("frozen").await
            && now == target
        {
            assert!(f > fence);
            break;
        }
        let _ = a.join(&room, true, None).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = started.elapsed();
    assert!(
        took >= ttl / 2,
        "moved before the frozen owner's lease could expire: {took:?}"
    );
    a.join_retrying(&room, None, JOIN_WITHIN).await.unwrap();
    a.chat(&room, "on the new owner").await.unwrap();
    // Thaw the old owner: it must not take the room back (the pin says otherwise) and its
    // old runtime stops.
    frozen.node.resume().unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let j = kit::admin::get(
            frozen.admin,
            "/admin/rooms/frozen",
            Some(&cluster.admin_token),
        )
        .await
        .unwrap()
        .json();
        if j["running_here"] == false {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the thawed owner still runs the room"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (now, _) = cluster.room_owner("frozen").await.unwrap().unwrap();
    assert_eq!(now, target);
    eprintln!(
        "MOVE with frozen owner: {} ms (TTL {} ms)",
        took.as_millis(),
        ttl.as_millis()
    );
}

/// A move the new owner cannot resume its members from (here its history does not load, so
/// it cannot replay) is not hidden from them: the gateway's rejoin for the client is refused,
/// the client gets `room.left` `unavailable`, rejoins by itself and gets the resync.
#[tokio::test]
async fn a_move_that_cannot_be_resumed_is_told_to_the_client() {
    let cluster = Cluster::of(2, 1).await.unwrap();
    ring_has(&cluster, 2).await;
    let room = RoomId::from("unresumable");
    let mut a = cluster.connect(0, "alice").await.unwrap();
    a.join_retrying(&room, None, JOIN_WITHIN).await.unwrap();
    a.chat(&room, "before").await.unwrap();
    let (owner, _) = cluster.room_owner("unresumable").await.unwrap().unwrap();
    let target = cluster.other_shard(&owner).unwrap();
    // An entry no loader can read.
    let pushed = cluster
        .redis
        .integer(&["RPUSH", "room:{unresumable}:history", "x"])
        .await
        .unwrap();
    assert_eq!(pushed, 2);
    let to = Some(json!({"to": target}));
    let r = cluster.admin("POST", "/admin/rooms/unresumable/move", to);
    assert_eq!(r.await.unwrap().status, 200);
    let left = loop {
        let e = a.next_event(WAIT).await.unwrap();
        if e.ev == "room.left" {
            break e;
        }
    };
    assert_eq!(left.d["reason"], "unavailable");
    let ok = a.join_retrying(&room, None, JOIN_WITHIN).await.unwrap();
    assert_eq!(ok["resync"], true, "{ok}");
    let (now, _) = cluster.room_owner("unresumable").await.unwrap().unwrap();
    assert_eq!(now, target);
    a.chat(&room, "after").await.unwrap();
}

#[tokio::test]
async fn admin_calls_without_the_token_are_refused() {
    let cluster = Cluster::of(1, 1).await.unwrap();
    let calls = [
        ("GET", "/admin/ring"),
        ("GET", "/admin/nodes"),
        ("GET", "/admin/rooms/x"),
        ("GET", "/admin/rebalance"),
        ("POST", "/admin/nodes"),
        ("PUT", "/admin/nodes/s1/weight"),
        ("POST", "/admin/nodes/s1/drain"),
        ("DELETE", "/admin/nodes/s1"),
        ("POST", "/admin/rooms/x/move"),
        ("POST", "/admin/wallets/u/grant"),
    ];
    for addr in [cluster.gateways[0].admin, cluster.shards[0].admin] {
        for (method, path) in calls {
            for token in [None, Some("wrong-token")] {
                let r = kit::admin::call(addr, method, path, token, Some(json!({})))
                    .await
                    .unwrap();
                assert_eq!(r.status, 401, "{method} {path} with {token:?} on {addr}");
            }
        }
    }
    // With the token, a join under an id no other call could name, or with an address that
    // does not parse, is refused.
    for body in [
        json!({"id": "shard 3", "weight": 1, "link_addr": "127.0.0.1:1"}),
        json!({"id": "s9", "weight": 1, "link_addr": "nowhere"}),
    ] {
        let r = cluster
            .admin("POST", "/admin/nodes", Some(body.clone()))
            .await
            .unwrap();
        assert_eq!(r.status, 400, "{body}: {}", r.body);
    }
    // And the ring is unchanged.
    let ring = cluster
        .admin("GET", "/admin/ring", None)
        .await
        .unwrap()
        .json();
    assert_eq!(ring["nodes"][0]["weight"], 1);
    assert_eq!(ring["nodes"].as_array().map(Vec::len), Some(1), "{ring}");
}

/// A gateway is a member of the ring's membership but owns no rooms: weighting, draining or
/// re-weighting it through `POST /admin/nodes` would move nothing, so each is refused (400)
/// rather than answered as a ring change, and the ring's version stays.
#[tokio::test]
async fn weighting_or_draining_a_gateway_is_refused() {
    let cluster = Cluster::of(1, 1).await.unwrap();
    let version = |r: Value| r["version"].as_u64().unwrap();
    let before = version(
        cluster
            .admin("GET", "/admin/ring", None)
            .await
            .unwrap()
            .json(),
    );
    let calls = [
        ("PUT", "/admin/nodes/g1/weight", Some(json!({"weight": 0}))),
        ("POST", "/admin/nodes/g1/drain", None),
        (
            "POST",
            "/admin/nodes",
            Some(json!({"id": "g1", "weight": 3})),
        ),
    ];
    for (method, path, body) in calls {
        let r = cluster.admin(method, path, body).await.unwrap();
        assert_eq!(r.status, 400, "{method} {path}: {}", r.body);
    }
    let after = version(
        cluster
            .admin("GET", "/admin/ring", None)
            .await
            .unwrap()
            .json(),
    );
    assert_eq!(before, after, "a refused call changed the ring");
    // A shard is still weighted and drained as before.
    let r = cluster.admin("POST", "/admin/nodes/s1/drain", None).await;
    assert_eq!(r.unwrap().status, 200);
}
