//! Presence without flaps, with real processes: a planned room move and a gateway drain show
//! the room no `member.join` / `member.leave` while its members stay; a member who does not
//! come back leaves after the grace window, and counts stay exact. A seated VIP adopted as away
//! after a failover stays protected from admins until they rejoin.
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use kit::client::{Client, Event};
use kit::cluster::{Cluster, ClusterOptions};
use protocol::{ErrorCode, RoomId};
use serde_json::{Value, json};
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(10);
const GRACE_MS: u64 = 3_000;

/// A cluster whose nodes read `toml` as their configuration file.
async fn cluster_with(toml: &str, env: &[(&str, &str)]) -> (Cluster, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chorus.toml");
    std::fs::write(&path, toml).unwrap();
    let mut vars = vec![("CHORUS_CONFIG".into(), path.display().to_string())];
    vars.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let cluster = Cluster::start(ClusterOptions {
        env: vars,
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    (cluster, dir)
}

/// Every event `c` receives until its own chat `text` comes back: presence published before
/// that chat has arrived by then (one link per gateway, in order).
async fn events_until_own_chat(c: &mut Client, room: &RoomId, text: &str) -> Vec<Event> {
    let deadline = Instant::now() + WAIT;
    // The room may be between owners: the chat is retried until it lands.
    loop {
        match c.chat(room, text).await {
            Ok(_) => break,
            Err(e) => assert!(Instant::now() < deadline, "chat never landed: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = deadline.saturating_duration_since(Instant::now());
    c.events_until_chat(text, left).await.unwrap()
}

fn presence(events: &[Event]) -> Vec<&Event> {
    events
        .iter()
        .filter(|e| matches!(e.ev.as_str(), "member.join" | "member.leave" | "room.left"))
        .collect()
}

/// The whole member list (pages of 200), retried while the room is between owners.
async fn member_list(c: &mut Client, room: &RoomId) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        match c
            .request("member.list", json!({"room": room, "limit": 200}))
            .await
        {
            Ok(v) => return v,
            Err(e) => assert!(Instant::now() < deadline, "member.list failed: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn away(list: &Value) -> usize {
    list["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["away"] == true)
        .count()
}

#[tokio::test]
async fn a_planned_move_shows_no_presence_and_keeps_every_member() {
    let (cluster, _dir) = cluster_with(&format!("presence_grace_ms = {GRACE_MS}\n"), &[]).await;
    let mut obs = cluster.connect(0, "obs").await.unwrap();
    let room = obs
        .create_room(json!({"room": "moving", "seats": 4}))
        .await
        .unwrap();
    obs.join(&room, false, None).await.unwrap();
    let mut members = Vec::new();
    for i in 0..6 {
        let mut m = cluster.connect(i % 2, &format!("m{i}")).await.unwrap();
        m.join_retrying(&room, None, WAIT).await.unwrap();
        members.push(m);
    }
    members[0]
        .request("seat.take", json!({"room": room, "seat": 2}))
        .await
        .unwrap();
    let before = member_list(&mut obs, &room).await;
    assert_eq!(before["count"], 7);
    events_until_own_chat(&mut obs, &room, "before").await;

    let (owner, _) = cluster.room_owner("moving").await.unwrap().unwrap();
    let target = cluster.other_shard(&owner).unwrap();
    let r = cluster.move_room("moving", &target).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(Some((now, _))) = cluster.room_owner("moving").await
            && now == target
        {
            break;
        }
        assert!(Instant::now() < deadline, "the move never completed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The gateways rejoin their sessions at the new owner: every member back, none away,
    // well within the window.
    let deadline = Instant::now() + WAIT;
    let after = loop {
        let l = member_list(&mut obs, &room).await;
        if away(&l) == 0 {
            break l;
        }
        assert!(Instant::now() < deadline, "members stayed away: {l}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(after["count"], 7);
    // Same members, same order, same join times.
    let users = |l: &Value| -> Vec<(Value, Value)> {
        l["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["user"].clone(), m["joined_at"].clone()))
            .collect()
    };
    assert_eq!(users(&before), users(&after));
    let m0 = after["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["user"] == "m0")
        .unwrap();
    assert_eq!(m0["seat"], 2, "the seat stayed held: {m0}");
    let seen = events_until_own_chat(&mut obs, &room, "after").await;
    assert!(
        presence(&seen).is_empty(),
        "the move showed presence: {seen:?}"
    );
    // Nobody is away any more (checked above), so no window is left to end with a leave.
    for m in &mut members {
        let seen = m.queued_events();
        assert!(
            !seen.iter().any(|e| e.ev == "room.left"),
            "a member was told to leave: {seen:?}"
        );
    }
    assert_eq!(member_list(&mut obs, &room).await["count"], 7);
}

#[tokio::test]
async fn a_gateway_drain_shows_no_presence_for_members_who_return() {
    let (cluster, _dir) = cluster_with(
        &format!("presence_grace_ms = {GRACE_MS}\n"),
        &[("CHORUS_DRAIN_WINDOW_MS", "300")],
    )
    .await;
    let mut obs = cluster.connect(0, "obs").await.unwrap();
    let room = obs
        .create_room(json!({"room": "drained", "seats": 4}))
        .await
        .unwrap();
    obs.join(&room, false, None).await.unwrap();
    let mut members = Vec::new();
    for i in 0..4 {
        let mut m = cluster.connect(1, &format!("d{i}")).await.unwrap();
        m.join_retrying(&room, None, WAIT).await.unwrap();
        members.push(m);
    }
    events_until_own_chat(&mut obs, &room, "before").await;

    // Gateway 1 drains (SIGTERM): its sockets close with 1001, the clients reconnect to
    // gateway 0 and rejoin from where they were; d3 never comes back.
    cluster.gateways[1].node.terminate().unwrap();
    let mut back = Vec::new();
    for (i, mut m) in members.into_iter().enumerate() {
        let close = m.closed(WAIT).await.unwrap();
        assert_eq!(close.map(|c| u16::from(c.code)), Some(1001));
        if i == 3 {
            continue;
        }
        let pos = m.position(&room).cloned().unwrap();
        let mut n = cluster.connect(0, &format!("d{i}")).await.unwrap();
        n.set_position(&room, pos.epoch, pos.seq);
        let ok = n.join_retrying(&room, None, WAIT).await.unwrap();
        assert_eq!(ok["resync"], false, "resumed from where it was");
        back.push(n);
    }
    let dropped = Instant::now();
    let seen = events_until_own_chat(&mut obs, &room, "after").await;
    assert!(
        presence(&seen).is_empty(),
        "the drain showed presence: {seen:?}"
    );
    let l = member_list(&mut obs, &room).await;
    assert_eq!(l["count"], 5, "{l}");
    assert_eq!(away(&l), 1, "d3 is away: {l}");
    // d3's window passes: one member.leave, and the count is exact.
    let left = obs
        .next_event_named("member.leave", Duration::from_millis(GRACE_MS) + WAIT)
        .await
        .unwrap();
    assert_eq!(left.d, json!({"user": "d3", "reason": "disconnected"}));
    assert!(dropped.elapsed() < Duration::from_millis(GRACE_MS) + WAIT);
    let l = member_list(&mut obs, &room).await;
    assert_eq!(l["count"], 4);
    assert_eq!(away(&l), 0);
}

/// A user whose connection dropped is away in their room for the grace window; joining
/// another room meanwhile, through another gateway, ends that at once (`switched`), so the
/// user is in one room even while the first one would still wait for them.
#[tokio::test]
async fn joining_elsewhere_in_the_grace_window_ends_the_away_member_at_once() {
    // A window far longer than the test waits: a leave can only come from the switch.
    let (cluster, _dir) = cluster_with("presence_grace_ms = 60000\n", &[]).await;
    let mut obs = cluster.connect(0, "obs").await.unwrap();
    let a = obs.create_room(json!({"room": "first"})).await.unwrap();
    obs.join(&a, false, None).await.unwrap();
    let mut u1 = cluster.connect(1, "wanderer").await.unwrap();
    u1.join(&a, false, None).await.unwrap();
    let ev = obs.next_event_named("member.join", WAIT).await.unwrap();
    assert_eq!(ev.d["user"], "wanderer");
    // The registry records the join just after its reply: wait until it shows (through a
    // follower's `follow.rooms`) so that the close below comes after it.
    obs.request("follow.add", json!({"user": "wanderer"}))
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    while obs.request("follow.rooms", json!({})).await.unwrap()["rooms"][0]["room"] != "first" {
        assert!(
            Instant::now() < deadline,
            "the join never reached the registry"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    u1.close().await;
    // Away, not gone: still listed.
    let deadline = Instant::now() + WAIT;
    loop {
        let list = member_list(&mut obs, &a).await;
        if away(&list) == 1 {
            assert_eq!(list["count"], 2);
            break;
        }
        assert!(Instant::now() < deadline, "never away: {list}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut u2 = cluster.connect(0, "wanderer").await.unwrap();
    let b = u2.create_room(json!({"room": "second"})).await.unwrap();
    u2.join(&b, false, None).await.unwrap();
    let ev = obs.next_event_named("member.leave", WAIT).await.unwrap();
    assert_eq!(ev.d, json!({"user": "wanderer", "reason": "switched"}));
    let list = member_list(&mut obs, &a).await;
    assert_eq!(list["count"], 1, "{list}");
}

/// After its owner is killed, the room's new owner adopts the seat holders as away members,
/// with no standing: until a protected VIP among them rejoins, an admin's moderation of them
/// has their spend read from the ledger and is refused, not taken for level 0. The owner may.
#[tokio::test]
async fn a_seated_vip_not_back_after_a_failover_is_still_protected_from_admins() {
    let toml = "presence_grace_ms = 60000\n\n[vip]\nthresholds = [10, 100]\nentrance_level = 2\nprotected_level = 2\n";
    let (mut cluster, _dir) = cluster_with(toml, &[]).await;
    let token = Some(cluster.admin_token.as_str());
    let r = kit::admin::grant(cluster.gateways[0].admin, token, "vip", 100, "seed-vip")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let mut host = cluster.connect(0, "hana").await.unwrap();
    let room = host.create_room(json!({"room": "vip-fo"})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut adm = cluster.connect(1, "adm").await.unwrap();
    adm.join(&room, false, None).await.unwrap();
    host.request(
        "room.admin",
        json!({"room": room, "user": "adm", "admin": true}),
    )
    .await
    .unwrap();
    // The VIP sits, then spends 100 coins here: level 2, protected, known to this owner.
    let mut vip = cluster.connect(1, "vip").await.unwrap();
    vip.join(&room, false, None).await.unwrap();
    vip.request("seat.take", json!({"room": room, "seat": 1}))
        .await
        .unwrap();
    let g = json!({"room": room, "req_id": "v1", "gift": "heart", "count": 2, "to": ["hana"]});
    vip.request("gift.send", g).await.unwrap();
    let e = adm
        .request("seat.kick", json!({"room": room, "user": "vip"}))
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Some(ErrorCode::VipProtected),
        "before the failover"
    );

    let (owner, _) = cluster.room_owner("vip-fo").await.unwrap().unwrap();
    cluster.shard_mut(&owner).unwrap().node.kill9().unwrap();
    for c in [&mut host, &mut adm, &mut vip] {
        let left = c.next_event_named("room.left", WAIT).await.unwrap();
        assert_eq!(left.d["reason"], "unavailable");
    }
    // The owner and the admin come back; the VIP does not (yet): adopted, away, seated.
    let ja = host.join_retrying(&room, None, WAIT).await.unwrap();
    assert_eq!(ja["snapshot"]["seats"][1]["user"], "vip", "seats restored");
    adm.join_retrying(&room, None, WAIT).await.unwrap();
    for (op, d) in kit::client::vip_covered_moderations(&room, "vip", 1) {
        let e = adm.request(op, d).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::VipProtected), "{op}");
    }
    let list = member_list(&mut adm, &room).await;
    let seated = list["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["user"] == "vip")
        .unwrap_or_else(|| panic!("the VIP is gone: {list}"))
        .clone();
    assert_eq!(seated["seat"], 1, "{list}");
    host.request("seat.kick", json!({"room": room, "user": "vip"}))
        .await
        .unwrap();
}
