//! Members on standalone, end to end: profiles from token claims in `member.join` and `chat`,
//! a drop and return within the grace window that shows no presence, the window passing
//! (`member.leave`, seat freed), and `member.list` paging while clients come and go.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::HashSet;
use std::time::Duration;

use gateway::GatewayConfig;
use kit::client::{self, Client, Event};
use protocol::{ErrorCode, RoomId};
use serde_json::{Value, json};
use shard::ShardConfig;
use tokio::time::Instant;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"test-secret-for-members";
const WAIT: Duration = Duration::from_secs(5);

impl Server {
    async fn with_grace(grace: Duration) -> Server {
        let gateway = GatewayConfig {
            drain_window: Duration::from_millis(100),
            ..GatewayConfig::default()
        };
        let shard = ShardConfig {
            presence_grace: grace,
            ..ShardConfig::default()
        };
        Server::launch(SECRET, "admin-token", gateway, shard).await
    }

    /// Connects `user` with a token whose `name` claim is `name`.
    async fn connect_named(&self, user: &str, name: &str) -> Client {
        let claims = json!({
            "sub": user,
            "exp": jsonwebtoken::get_current_timestamp() + 600,
            "name": name,
        });
        let token = jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(SECRET).unwrap(),
        )
        .unwrap();
        client::connect(&self.url, Some(&token)).await.unwrap()
    }
}

/// Every event `c` receives until its own chat `text` comes back (sent here): a point after
/// which any presence published before it has arrived (one link, in order).
async fn events_until_own_chat(c: &mut Client, room: &RoomId, text: &str) -> Vec<Event> {
    c.chat(room, text).await.unwrap();
    c.events_until_chat(text, WAIT).await.unwrap()
}

fn presence(events: &[Event]) -> Vec<&Event> {
    events
        .iter()
        .filter(|e| e.ev.starts_with("member.") && e.ev != "member.count")
        .collect()
}

#[tokio::test]
async fn profiles_from_claims_ride_on_join_chat_and_the_list() {
    let s = Server::with_grace(Duration::from_millis(500)).await;
    let mut bob = s.connect_named("bob", "Bob").await;
    let mut amy = s.connect_named("amy", "Amy").await;
    let room = RoomId::from("prof");
    bob.join(&room, false, None).await.unwrap();
    amy.join(&room, false, None).await.unwrap();
    let j = bob.next_event_named("member.join", WAIT).await.unwrap();
    assert_eq!(j.d, json!({"user": "amy", "p": {"name": "Amy"}}));
    amy.chat(&room, "hi").await.unwrap();
    let c = bob.next_event_named("chat", WAIT).await.unwrap();
    assert_eq!(c.d["p"], json!({"name": "Amy"}));
    let page = bob
        .request("member.list", json!({"room": room}))
        .await
        .unwrap();
    assert_eq!(page["count"], 2);
    let names: Vec<&Value> = page["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["p"]["name"])
        .collect();
    assert_eq!(names, [&json!("Bob"), &json!("Amy")], "owner first");
    assert_eq!(page["members"][0]["role"], "owner");
    // A gift carries the sender's profile and the recipients' by user.
    let r = kit::admin::grant(s.admin, Some("admin-token"), "amy", 100, "g")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    amy.request(
        "gift.send",
        json!({"room": room, "req_id": "r1", "gift": "rose", "count": 1, "to": ["bob"]}),
    )
    .await
    .unwrap();
    let g = bob.next_event_named("gift", WAIT).await.unwrap();
    assert_eq!(g.d["p"], json!({"name": "Amy"}));
    assert_eq!(g.d["to_p"], json!({"bob": {"name": "Bob"}}));
    s.stop().await;
}

#[tokio::test]
async fn a_return_within_the_window_shows_no_presence_and_the_window_passing_does() {
    let grace = Duration::from_millis(1_500);
    let s = Server::with_grace(grace).await;
    let mut bob = s.connect("bob").await;
    let mut amy = s.connect("amy").await;
    let room = RoomId::from("grace");
    bob.join(&room, false, None).await.unwrap();
    amy.join(&room, false, None).await.unwrap();
    amy.request("seat.take", json!({"room": room, "seat": 1}))
        .await
        .unwrap();
    events_until_own_chat(&mut bob, &room, "sync0").await;

    // Amy's connection drops; she is back through a new one within the window.
    amy.close().await;
    let mut amy = s.connect("amy").await;
    let ok = amy.join(&room, false, None).await.unwrap();
    assert_eq!(ok["snapshot"]["members"], 2);
    assert_eq!(
        ok["snapshot"]["seats"][1]["user"], "amy",
        "the seat stayed hers"
    );
    let seen = events_until_own_chat(&mut bob, &room, "sync1").await;
    assert!(presence(&seen).is_empty(), "bob saw presence: {seen:?}");

    // She drops again and stays away: bob sees her marked away, then the window passes.
    amy.close().await;
    let dropped = Instant::now();
    let deadline = dropped + WAIT;
    loop {
        let page = bob
            .request("member.list", json!({"room": room}))
            .await
            .unwrap();
        let away = page["members"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["user"] == "amy" && m["away"] == true);
        if away {
            assert_eq!(page["count"], 2);
            break;
        }
        assert!(Instant::now() < deadline, "amy never shown away");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The seat's release (sequenced) comes just before the `member.leave` (volatile).
    let mut seat_freed = false;
    let deadline = Instant::now() + grace + WAIT;
    loop {
        let e = bob
            .next_event(deadline.saturating_duration_since(Instant::now()))
            .await
            .unwrap();
        if e.ev == "seat.update" && e.d["index"] == 1 {
            assert_eq!(e.d["user"], Value::Null, "the seat is free: {e:?}");
            assert_eq!(e.d["reason"], "left_room");
            seat_freed = true;
        }
        if e.ev == "member.leave" {
            assert_eq!(e.d, json!({"user": "amy", "reason": "disconnected"}));
            break;
        }
    }
    assert!(seat_freed);
    assert!(
        dropped.elapsed() >= grace - Duration::from_millis(100),
        "left before the window"
    );
    let ok = bob.join(&room, false, None).await.unwrap();
    assert_eq!(ok["snapshot"]["members"], 1);
    s.stop().await;
}

#[tokio::test]
async fn member_list_pages_under_churn_list_stable_members_once() {
    let s = Server::with_grace(Duration::from_millis(500)).await;
    let room = RoomId::from("churn");
    let mut viewer = s.connect("viewer").await;
    viewer.join(&room, false, None).await.unwrap();
    let mut stable = Vec::new();
    for i in 0..40 {
        let mut c = s.connect(&format!("s{i:02}")).await;
        c.join(&room, false, None).await.unwrap();
        stable.push(c);
    }
    let mut leaving = Vec::new();
    for i in 0..20 {
        let mut c = s.connect(&format!("l{i:02}")).await;
        c.join(&room, false, None).await.unwrap();
        leaving.push(c);
    }
    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut joined = Vec::new();
    for page in 0..50 {
        let mut d = json!({"room": room, "limit": 6});
        if let Some(c) = &cursor {
            d["cursor"] = json!(c);
        }
        let p = viewer.request("member.list", d).await.unwrap();
        for m in p["members"].as_array().unwrap() {
            seen.push(m["user"].as_str().unwrap().to_owned());
        }
        // Churn between pages: one leaves, one new joins.
        if let Some(mut c) = leaving.pop() {
            c.request("room.leave", json!({"room": room}))
                .await
                .unwrap();
        }
        let mut n = s.connect(&format!("n{page:02}")).await;
        n.join(&room, false, None).await.unwrap();
        joined.push(n);
        match p["cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "a member listed twice: {seen:?}");
    for i in 0..40 {
        let name = format!("s{i:02}");
        assert!(unique.contains(&name), "{name} skipped");
    }
    assert!(unique.contains(&"viewer".to_owned()));
    // Bad pages are refused; a non-member may not list.
    let e = viewer
        .request("member.list", json!({"room": room, "limit": 500}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::BadRequest));
    let mut out = s.connect("outsider").await;
    let e = out
        .request("member.list", json!({"room": room}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NotInRoom));
    s.stop().await;
}
