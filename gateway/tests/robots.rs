//! Robots end to end on a standalone server: a configured robot room is created and run by its
//! owner, robots are marked in every event, their gifts go through the ledger from a funded
//! robot wallet, and the reconcile stops and starts them as the configuration changes.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use gateway::GatewayConfig;
use kit::client::Client;
use protocol::RoomId;
use serde_json::{Value, json};
use shard::ShardConfig;
use storage::robots::RobotStore;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"test-secret-for-robots";
const ADMIN: &str = "robots-admin";
const WAIT: Duration = Duration::from_secs(5);

async fn start() -> Server {
    start_with(false).await
}

async fn start_with(ranks_without_robots: bool) -> Server {
    start_tuned(ranks_without_robots, |_| {}).await
}

async fn start_tuned(ranks_without_robots: bool, tune: impl FnOnce(&mut ShardConfig)) -> Server {
    let gateway = GatewayConfig {
        drain_window: Duration::from_millis(100),
        ranks_without_robots,
        ..GatewayConfig::default()
    };
    let mut shard = ShardConfig {
        robot_reconcile: Duration::from_millis(100),
        ..ShardConfig::default()
    };
    tune(&mut shard);
    Server::launch(SECRET, ADMIN, gateway, shard).await
}

/// Writes `config` for its room straight into the node's configuration store.
async fn configure(s: &Server, config: &Value) {
    let store = RobotStore::sqlite(s.dir.path()).await.unwrap();
    let room = RoomId::from(config["room"].as_str().unwrap());
    store
        .put(&room, config.to_string().into_bytes())
        .await
        .unwrap();
}

/// Waits until `room` runs (the reconcile loaded or created it).
async fn running(s: &Server, room: &RoomId) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let r = kit::admin::get(s.admin, &format!("/admin/rooms/{room}"), Some(ADMIN))
            .await
            .unwrap();
        if r.status == 200 {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{room} never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The next event named `name` whose `d[key]` is `value`.
async fn event_where(c: &mut Client, name: &str, key: &str, value: &Value) -> Value {
    loop {
        let ev = c.next_event_named(name, WAIT).await.unwrap();
        if &ev.d[key] == value {
            return ev.d;
        }
    }
}

#[tokio::test]
async fn a_robot_room_is_made_and_run_by_its_owner_and_follows_its_configuration() {
    let s = start().await;
    let mut config = json!({
        "room": "robots",
        "title": "Robot party",
        "seats": 4,
        "robots": [{"id": "bot:amy", "name": "Amy"}, {"id": "bot:bo", "name": "Bo"}],
        "chat": {"every_s": 0.3, "phrases": ["hello humans"]},
        "seat": {"every_s": 0.3, "stay_s": 30},
    });
    configure(&s, &config).await;
    let room = RoomId::from("robots");
    // The server auto-creates rooms on join: wait for the robots' room rather than make one.
    running(&s, &room).await;
    let mut alice = s.connect("alice").await;
    let joined = alice.join(&room, false, None).await.unwrap();
    assert_eq!(
        joined["snapshot"]["owner"], "bot:amy",
        "the first robot owns it"
    );
    assert_eq!(joined["snapshot"]["title"], "Robot party");
    let chat = event_where(&mut alice, "chat", "text", &json!("hello humans")).await;
    assert_eq!(chat["robot"], true);
    assert!(chat["from"].as_str().unwrap().starts_with("bot:"));
    // A robot takes a seat (perhaps before Alice came), and its audio counts as published (no
    // publish deadline).
    let seated = |snap: &Value| {
        snap["snapshot"]["seats"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["robot"] == true).cloned())
    };
    // A fresh snapshot: seat events before this point may have gone by while waiting for the
    // chat above.
    let now = alice.join(&room, false, None).await.unwrap();
    let seat = match seated(&now) {
        Some(seat) if seat["publishing"] == true => seat,
        _ => event_where(&mut alice, "seat.update", "publishing", &json!(true)).await,
    };
    assert_eq!(seat["robot"], true);
    assert_eq!(seat.get("publish_by"), None);
    let snap = alice.join(&room, false, None).await.unwrap();
    assert_eq!(snap["snapshot"]["robots"], 2);

    // Disabled: the robots leave within a reconcile, and say nothing more.
    config["enabled"] = json!(false);
    configure(&s, &config).await;
    for _ in 0..2 {
        let left = alice.next_event_named("member.leave", WAIT).await.unwrap();
        assert!(left.d["user"].as_str().unwrap().starts_with("bot:"));
    }
    let snap = alice.join(&room, false, None).await.unwrap();
    assert_eq!(snap["snapshot"].get("robots"), None);
    assert!(
        snap["snapshot"]["seats"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["robot"].is_null()),
        "their seats were freed: {snap}"
    );
    // Enabled again: they come back, marked.
    config["enabled"] = json!(true);
    configure(&s, &config).await;
    let back = alice.next_event_named("member.join", WAIT).await.unwrap();
    assert_eq!(back.d["robot"], true);
    s.stop().await;
}

/// A new configuration that drops a robot makes it leave, and the robots that stay keep
/// acting though their places in the list changed.
#[tokio::test]
async fn robots_that_stay_keep_acting_when_the_list_changes() {
    let s = start().await;
    let mut config = json!({
        "room": "reorder",
        "robots": [{"id": "bot:amy"}, {"id": "bot:bo"}],
        "chat": {"every_s": 0.3, "phrases": ["still here"]},
    });
    configure(&s, &config).await;
    let room = RoomId::from("reorder");
    running(&s, &room).await;
    let mut alice = s.connect("alice").await;
    alice.join(&room, false, None).await.unwrap();
    event_where(&mut alice, "chat", "from", &json!("bot:bo")).await;
    config["robots"] = json!([{"id": "bot:bo"}]);
    configure(&s, &config).await;
    event_where(&mut alice, "member.leave", "user", &json!("bot:amy")).await;
    // Bo, first in the list now, still chats (it is the only robot left).
    let chat = event_where(&mut alice, "chat", "from", &json!("bot:bo")).await;
    assert_eq!(chat["robot"], true);
    let snap = alice.join(&room, false, None).await.unwrap();
    assert_eq!(snap["snapshot"]["robots"], 1);
    s.stop().await;
}

/// A closed room with robots configured keeps its runtime though nobody is in it: unloading it
/// when idle would only have the reconcile load it again, over and over.
#[tokio::test]
async fn a_closed_robot_room_stays_loaded_rather_than_reloading() {
    let s = start_tuned(false, |sh| sh.idle_unload = Duration::from_millis(200)).await;
    let mut host = s.connect("host").await;
    let room = host
        .create_room(json!({"room": "shut", "seats": 4}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    configure(
        &s,
        &json!({"room": "shut", "create": false, "robots": [{"id": "bot:amy"}]}),
    )
    .await;
    event_where(&mut host, "member.join", "user", &json!("bot:amy")).await;
    host.request("room.close", json!({"room": room}))
        .await
        .unwrap();
    let fence = s.room_fence(room.as_str()).await.expect("running");
    // Five idle periods and more than ten reconciles: the same runtime throughout.
    let until = tokio::time::Instant::now() + Duration::from_millis(1_500);
    while tokio::time::Instant::now() < until {
        assert_eq!(s.room_fence(room.as_str()).await, Some(fence), "reloaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.stop().await;
}

#[tokio::test]
async fn robots_fill_a_human_room_only_below_its_threshold() {
    let s = start().await;
    let mut host = s.connect("host").await;
    let room = host
        .create_room(json!({"room": "quiet", "seats": 4}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    configure(
        &s,
        &json!({
            "room": "quiet",
            "create": false,
            "fill_below": 2,
            "robots": [{"id": "bot:cy"}],
        }),
    )
    .await;
    let came = host.next_event_named("member.join", WAIT).await.unwrap();
    assert_eq!(
        (came.d["user"].clone(), came.d["robot"].clone()),
        (json!("bot:cy"), json!(true))
    );
    // A second human arrives: the robot makes room.
    let mut bob = s.connect("bob").await;
    bob.join(&room, false, None).await.unwrap();
    let gone = event_where(&mut host, "member.leave", "user", &json!("bot:cy")).await;
    assert_eq!(gone["reason"], "left");
    s.stop().await;
}

#[tokio::test]
async fn robot_gifts_go_through_the_ledger_within_their_budget() {
    robot_gifts(false).await;
}

#[tokio::test]
async fn robots_can_be_left_out_of_leaderboards() {
    robot_gifts(true).await;
}

/// A funded robot gifts the host until its budget is spent; the senders' board lists it marked
/// as a robot, or leaves it out (`ranks_without_robots`).
async fn robot_gifts(ranks_without_robots: bool) {
    let s = start_with(ranks_without_robots).await;
    let grant = kit::admin::grant(s.admin, Some(ADMIN), "bot:rich", 100, "fund-1")
        .await
        .unwrap();
    assert_eq!(grant.status, 200, "{}", grant.body);
    let mut host = s.connect("host").await;
    let room = host
        .create_room(json!({"room": "gifts", "seats": 4}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    configure(
        &s,
        &json!({
            "room": "gifts",
            "create": false,
            "robots": [{"id": "bot:rich"}],
            "gift": {"every_s": 0.2, "gift": "rose", "budget": 30},
        }),
    )
    .await;
    // Three roses of 10 coins: the budget, not the wallet, ends them.
    for _ in 0..3 {
        let g = host.next_event_named("gift", WAIT).await.unwrap();
        assert_eq!(
            (g.d["from"].clone(), g.d["robot"].clone()),
            (json!("bot:rich"), json!(true))
        );
        assert_eq!(g.d["to"], json!(["host"]));
    }
    assert!(
        host.next_event_named("gift", Duration::from_millis(800))
            .await
            .is_err()
    );
    let wallet = kit::admin::wallet(s.admin, Some(ADMIN), "bot:rich")
        .await
        .unwrap()
        .json();
    assert_eq!(wallet["balance"], 70, "{wallet}");
    let totals = kit::admin::ledger_totals(s.admin, Some(ADMIN))
        .await
        .unwrap()
        .json();
    assert_eq!(totals["conserved"], true, "{totals}");
    s.stop().await;
}

/// A visiting robot with no behaviour of its own (nothing due for an hour) that a host kicks
/// comes back at its next presence check, about a second later (PROTOCOL.md, section 4.6).
#[tokio::test]
async fn a_kicked_robot_comes_back_at_the_next_presence_check() {
    let s = start().await;
    let mut host = s.connect("host").await;
    let room = host
        .create_room(json!({"room": "visited", "seats": 4}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    configure(
        &s,
        &json!({"room": "visited", "create": false, "robots": [{"id": "bot:dee"}]}),
    )
    .await;
    event_where(&mut host, "member.join", "user", &json!("bot:dee")).await;
    host.request("room.kick", json!({"room": "visited", "user": "bot:dee"}))
        .await
        .unwrap();
    event_where(&mut host, "member.leave", "user", &json!("bot:dee")).await;
    // Within WAIT (5 s), well past the second the document promises.
    let back = event_where(&mut host, "member.join", "user", &json!("bot:dee")).await;
    assert_eq!(back["robot"], true);
    s.stop().await;
}

/// The presence check of a `fill_below` room runs about once a second however busy the room
/// is: a room whose humans keep talking still sees its robot leave when a human arrives.
#[tokio::test]
async fn robots_leave_a_busy_room_as_humans_arrive() {
    let s = start().await;
    let mut host = s.connect("host").await;
    let room = host
        .create_room(json!({"room": "busy", "seats": 4}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    configure(
        &s,
        &json!({"room": "busy", "create": false, "fill_below": 2, "robots": [{"id": "bot:eve"}]}),
    )
    .await;
    event_where(&mut host, "member.join", "user", &json!("bot:eve")).await;
    let mut bob = s.connect("bob").await;
    bob.join(&room, false, None).await.unwrap();
    // The host talks every 100 ms (within its rate) while the robot should make room.
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut i = 0;
    loop {
        let left = host
            .queued_events()
            .into_iter()
            .any(|e| e.ev == "member.leave" && e.d["user"] == "bot:eve");
        if left {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the robot stayed in a busy room with two humans"
        );
        host.chat(&room, &format!("line {i}")).await.unwrap();
        i += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.stop().await;
}
