//! End-to-end tests of the room directory on a standalone node (issue 37): `room.list` after
//! 10,000 rooms created and 9,000 closed lists exactly the 1,000 live ones, pinned first; a
//! room that unloads or closes leaves the list within the staleness bound; the owner's region
//! and search; `GET /admin/rooms` and directory pins.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::HashSet;
use std::time::Duration;

use gateway::GatewayConfig;
use kit::client::Client;
use protocol::ErrorCode;
use serde_json::{Value, json};
use shard::ShardConfig;
use tokio::time::Instant;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"test-secret-for-the-directory";
const ADMIN: &str = "admin-token";
/// How long a change may take to show in `room.list`: a publish tick (1 s), the gateway's
/// page cache (1 s), and slack for a loaded test machine.
const BOUND: Duration = Duration::from_secs(10);

async fn start(tune: impl FnOnce(&mut ShardConfig)) -> Server {
    let gateway = GatewayConfig {
        drain_window: Duration::from_millis(100),
        // Thousands of creates on a few connections: no per-connection rate limit.
        rate_per_sec: 1_000_000,
        rate_burst: 1_000_000,
        ..GatewayConfig::default()
    };
    let mut shard = ShardConfig {
        // Creating thousands of rooms is this test's point: no quotas.
        room_creates_per_min: 0,
        max_rooms_per_user: 0,
        ..ShardConfig::default()
    };
    tune(&mut shard);
    Server::launch(SECRET, ADMIN, gateway, shard).await
}

/// A client whose token says its user is in `region`.
async fn connect_in(s: &Server, user: &str, region: &str) -> Client {
    #[derive(serde::Serialize)]
    struct Claims<'a> {
        sub: &'a str,
        exp: u64,
        region: &'a str,
    }
    let exp = jsonwebtoken::get_current_timestamp() + 600;
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &Claims {
            sub: user,
            exp,
            region,
        },
        &jsonwebtoken::EncodingKey::from_secret(SECRET).unwrap(),
    )
    .unwrap();
    kit::client::connect(&s.url, Some(&token)).await.unwrap()
}

/// Every room of a listing, page by page (bounded), in order.
async fn list_all(c: &mut Client, d: Value) -> Vec<Value> {
    c.room_list_all(d).await.unwrap()
}

fn ids(rooms: &[Value]) -> Vec<String> {
    rooms
        .iter()
        .map(|r| r["room"].as_str().unwrap().to_owned())
        .collect()
}

/// Polls `room.list` until `done` holds for the whole listing of `d`, within [`BOUND`].
async fn wait_list(c: &mut Client, d: Value, what: &str, done: impl Fn(&[Value]) -> bool) {
    let deadline = Instant::now() + BOUND;
    loop {
        let rooms = list_all(c, d.clone()).await;
        if done(&rooms) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {BOUND:?}; listed {:?}",
            ids(&rooms).iter().take(20).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn admin(s: &Server, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let r = kit::admin::call(s.admin, method, path, Some(ADMIN), body)
        .await
        .unwrap();
    (r.status, r.json())
}

#[tokio::test]
async fn ten_thousand_created_nine_thousand_closed_lists_the_live_thousand_pinned_first() {
    const OWNERS: usize = 8;
    const ROOMS: usize = 10_000;
    let s = start(|_| {}).await;
    // Owners create their rooms at once, each on its own connection, then close nine in ten.
    let mut conns = Vec::new();
    for o in 0..OWNERS {
        conns.push(s.connect(&format!("owner{o}")).await);
    }
    let owners = kit::client::create_rooms_close_nine_in_ten(conns, ROOMS, |i| format!("r{i:05}"))
        .await
        .unwrap();
    // Two featured rooms: one pinned everywhere, one for another region only.
    let (st, _) = admin(
        &s,
        "POST",
        "/admin/rooms/r04500/pin",
        Some(json!({"scope": "global"})),
    )
    .await;
    assert_eq!(st, 200);
    let (st, _) = admin(
        &s,
        "POST",
        "/admin/rooms/r00700/pin",
        Some(json!({"scope": "region", "region": "eu"})),
    )
    .await;
    assert_eq!(st, 200);
    let live: HashSet<String> = (0..ROOMS)
        .filter(|i| i % 10 == 0)
        .map(|i| format!("r{i:05}"))
        .collect();
    let mut c = s.connect("reader").await;
    wait_list(
        &mut c,
        json!({"limit": 100}),
        "the 1,000 live rooms",
        |rooms| {
            let got = ids(rooms);
            got.len() == live.len() && got.iter().cloned().collect::<HashSet<_>>() == live
        },
    )
    .await;
    let rooms = list_all(&mut c, json!({"limit": 100})).await;
    assert_eq!(rooms[0]["room"], "r04500", "the global pin comes first");
    assert_eq!(rooms[0]["pinned"], true);
    assert!(rooms[1..].iter().all(|r| r.get("pinned").is_none()));
    // The admin API pages the same directory.
    let (st, page) = admin(&s, "GET", "/admin/rooms?limit=5", None).await;
    assert_eq!(st, 200);
    assert_eq!(page["rooms"].as_array().unwrap().len(), 5);
    assert_eq!(page["rooms"][0]["room"], "r04500");
    let (st, _) = admin(&s, "DELETE", "/admin/rooms/r04500/pin", None).await;
    assert_eq!(st, 200);
    let (st, _) = admin(&s, "DELETE", "/admin/rooms/r04500/pin", None).await;
    assert_eq!(st, 404);
    drop(owners);
    s.stop().await;
}

#[tokio::test]
async fn rooms_leave_the_list_when_they_unload_or_close() {
    let s = start(|sh| sh.idle_unload = Duration::from_millis(500)).await;
    let mut alice = connect_in(&s, "alice", "eu").await;
    let mut bob = s.connect("bob").await;
    alice
        .create_room(json!({"room": "jazz", "title": "Late Night Jazz", "seats": 4}))
        .await
        .unwrap();
    alice
        .create_room(json!({"room": "empty", "title": "Nobody here", "seats": 4}))
        .await
        .unwrap();
    bob.join(&"jazz".into(), false, None).await.unwrap();
    let mut c = s.connect("reader").await;
    // The room with a member stays; the empty one unloads and leaves.
    wait_list(&mut c, json!({}), "the empty room unloads", |rooms| {
        ids(rooms) == ["jazz"]
    })
    .await;
    let rooms = list_all(&mut c, json!({})).await;
    assert_eq!(rooms[0]["members"], 1);
    assert_eq!(rooms[0]["owner"], "alice");
    assert_eq!(
        rooms[0]["region"], "eu",
        "the owner's region, from their token"
    );
    // Region filter and search.
    assert_eq!(
        ids(&list_all(&mut c, json!({"region": "eu"})).await),
        ["jazz"]
    );
    assert!(list_all(&mut c, json!({"region": "us"})).await.is_empty());
    assert_eq!(
        ids(&list_all(&mut c, json!({"query": "NIGHT"})).await),
        ["jazz"]
    );
    assert_eq!(
        ids(&list_all(&mut c, json!({"query": "ja"})).await),
        ["jazz"]
    );
    assert!(list_all(&mut c, json!({"query": "blues"})).await.is_empty());
    // Bad arguments are refused with a code.
    for bad in [
        json!({"limit": 0}),
        json!({"limit": 101}),
        json!({"cursor": "zz"}),
        json!({"region": "e u"}),
    ] {
        let e = c.request("room.list", bad.clone()).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::BadRequest), "{bad}");
    }
    // A closed room leaves within the bound.
    alice.join(&"jazz".into(), false, None).await.unwrap();
    let closed_at = Instant::now();
    alice
        .request("room.close", json!({"room": "jazz"}))
        .await
        .unwrap();
    wait_list(
        &mut c,
        json!({}),
        "the closed room leaves",
        <[Value]>::is_empty,
    )
    .await;
    assert!(closed_at.elapsed() < BOUND);
    s.stop().await;
}

#[tokio::test]
async fn recent_gifts_raise_a_rooms_score() {
    let s = start(|_| {}).await;
    let r = kit::admin::grant(s.admin, Some(ADMIN), "alice", 1000, "g1")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    // "quiet": 2 members and 100 coins of gifts; "crowd": 4 members, no gifts.
    let mut alice = s.connect("alice").await;
    let mut bob = s.connect("bob").await;
    alice
        .create_room(json!({"room": "quiet", "seats": 4}))
        .await
        .unwrap();
    alice.join(&"quiet".into(), false, None).await.unwrap();
    bob.join(&"quiet".into(), false, None).await.unwrap();
    let mut crowd = Vec::new();
    for u in ["c1", "c2", "c3", "c4"] {
        let mut c = s.connect(u).await;
        c.join(&"crowd".into(), false, None).await.unwrap();
        crowd.push(c);
    }
    let mut reader = s.connect("reader").await;
    wait_list(&mut reader, json!({}), "the crowd ranks first", |rooms| {
        ids(rooms) == ["crowd", "quiet"] && rooms[0]["score"] == 4.0
    })
    .await;
    // 10 roses of 10 coins: 100 coins, worth 10 members while fresh.
    alice
        .request(
            "gift.send",
            json!({"room": "quiet", "req_id": "g-1", "gift": "rose", "count": 10, "to": ["bob"]}),
        )
        .await
        .unwrap();
    wait_list(
        &mut reader,
        json!({}),
        "the gifted room ranks first",
        |rooms| {
            ids(rooms) == ["quiet", "crowd"]
                && rooms[0]["score"]
                    .as_f64()
                    .is_some_and(|s| (11.9..=12.0).contains(&s))
        },
    )
    .await;
    // Nothing more happens in "quiet": its gift value still decays (halving every 10
    // minutes), so its score falls below 12 within seconds, not at its next event.
    wait_list(
        &mut reader,
        json!({}),
        "a quiet room's score decays",
        |rooms| {
            rooms
                .iter()
                .find(|r| r["room"] == "quiet")
                .and_then(|r| r["score"].as_f64())
                .is_some_and(|s| s < 11.95)
        },
    )
    .await;
    drop((alice, bob, crowd));
    s.stop().await;
}

/// The listing shows the owner's region as their profile has it now: an owner who clears
/// their region (`user.update`) no longer shows one, nor is listed under the old one.
#[tokio::test]
async fn an_owner_who_clears_their_region_leaves_its_listing() {
    let s = start(|_| {}).await;
    let mut alice = connect_in(&s, "alice", "eu").await;
    let room = alice
        .create_room(json!({"room": "talk", "seats": 4}))
        .await
        .unwrap();
    alice.join(&room, false, None).await.unwrap();
    let mut c = s.connect("reader").await;
    wait_list(&mut c, json!({"region": "eu"}), "listed in eu", |rooms| {
        ids(rooms) == ["talk"] && rooms[0]["region"] == "eu"
    })
    .await;
    alice
        .request("user.update", json!({"region": ""}))
        .await
        .unwrap();
    wait_list(&mut c, json!({}), "the region is gone", |rooms| {
        ids(rooms) == ["talk"] && rooms[0].get("region").is_none()
    })
    .await;
    assert!(list_all(&mut c, json!({"region": "eu"})).await.is_empty());
    s.stop().await;
}
