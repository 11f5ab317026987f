//! App-wide leaderboards end to end on a standalone server: `rank.get` with `scope: "app"`
//! sums the gifts of every room, asked by real WebSocket clients (one of them in no room);
//! the room boards stay per room; bad scopes and shapes are refused with `BAD_REQUEST`.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use gateway::GatewayConfig;
use protocol::{ErrorCode, RoomId};
use serde_json::{Value, json};
use shard::ShardConfig;
use shard::gifts::Catalog;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"app-rank-test-secret";
const ADMIN: &str = "app-rank-admin";

async fn start() -> Server {
    let gateway = GatewayConfig {
        rate_per_sec: 10_000,
        rate_burst: 10_000,
        drain_window: Duration::from_millis(100),
        ..GatewayConfig::default()
    };
    let shard = ShardConfig {
        catalog: std::sync::Arc::new(Catalog::default_with_secret(b"lucky".to_vec())),
        ..ShardConfig::default()
    };
    Server::launch(SECRET, ADMIN, gateway, shard).await
}

async fn grant(s: &Server, user: &str, amount: i64) {
    let r = kit::admin::grant(s.admin, Some(ADMIN), user, amount, "seed")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
}

fn gift(room: &RoomId, req: &str, gift: &str, to: Value) -> Value {
    json!({"room": room, "req_id": req, "gift": gift, "count": 1, "to": to})
}

fn entries(v: &Value) -> Vec<(String, i64)> {
    v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["user"].as_str().unwrap().to_owned(),
                e["score"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_app_board_sums_every_room_and_the_room_board_its_own() {
    let s = start().await;
    grant(&s, "alice", 100_000).await;
    grant(&s, "carol", 100_000).await;
    let (r1, r2) = (RoomId::from("app-r1"), RoomId::from("app-r2"));
    let mut a = s.connect("alice").await;
    let mut b = s.connect("bob").await;
    let mut c = s.connect("carol").await;
    let mut d = s.connect("dave").await;
    // Rose 10, rocket 1,000 (the default catalog); one room at a time (a user is in one).
    let sends = [
        ("alice", &r1, "a1", "rocket", json!(["bob"])),
        ("carol", &r1, "c1", "rose", json!(["bob", "dave"])),
        ("carol", &r2, "c2", "rocket", json!(["dave"])),
        ("alice", &r2, "a2", "rose", json!(["dave"])),
        ("carol", &r2, "c3", "rose", json!(["bob"])),
    ];
    for room in [&r1, &r2] {
        for client in [&mut a, &mut b, &mut c, &mut d] {
            client.join(room, false, None).await.unwrap();
        }
        for (who, _, req, g, to) in sends.iter().filter(|x| x.1 == room) {
            let client = if *who == "alice" { &mut a } else { &mut c };
            let order = gift(room, req, g, to.clone());
            client.request("gift.send", order).await.unwrap();
        }
    }
    // Eve is in no room: an app board needs none.
    let mut e = s.connect("eve").await;
    let app = |board: &str, period: &str, limit: u32| json!({"scope": "app", "board": board, "period": period, "limit": limit});
    let senders = e
        .request("rank.get", app("senders", "day", 10))
        .await
        .unwrap();
    assert_eq!(
        entries(&senders),
        vec![("carol".to_owned(), 1_030), ("alice".to_owned(), 1_010)],
        "{senders}"
    );
    assert_eq!(senders["scope"], "app");
    assert!(senders.get("room").is_none(), "{senders}");
    for period in ["week", "all"] {
        let receivers = e
            .request("rank.get", app("receivers", period, 10))
            .await
            .unwrap();
        assert_eq!(
            entries(&receivers),
            vec![("dave".to_owned(), 1_020), ("bob".to_owned(), 1_020)]
                .into_iter()
                .rev()
                .collect::<Vec<_>>(),
            "ties by user id: {receivers}"
        );
    }
    let top = e
        .request("rank.get", app("senders", "all", 1))
        .await
        .unwrap();
    assert_eq!(entries(&top), vec![("carol".to_owned(), 1_030)]);
    // Limits clamp into 1..=100: 0 gives one entry.
    let clamped = e
        .request("rank.get", app("senders", "all", 0))
        .await
        .unwrap();
    assert_eq!(entries(&clamped).len(), 1, "{clamped}");
    // The room board is still the room's own.
    let room = e
        .request(
            "rank.get",
            json!({"room": r1, "board": "senders", "period": "day"}),
        )
        .await
        .unwrap();
    assert_eq!(
        entries(&room),
        vec![("alice".to_owned(), 1_000), ("carol".to_owned(), 20)]
    );
    let explicit = e
        .request(
            "rank.get",
            json!({"scope": "room", "room": r2, "board": "receivers"}),
        )
        .await
        .unwrap();
    assert_eq!(
        entries(&explicit),
        vec![("dave".to_owned(), 1_010), ("bob".to_owned(), 10)]
    );
    s.stop().await;
}

#[tokio::test]
async fn bad_scopes_and_shapes_are_bad_requests() {
    let s = start().await;
    let mut a = s.connect("alice").await;
    for (d, why) in [
        (
            json!({"scope": "galaxy", "board": "senders"}),
            "unknown scope",
        ),
        (
            json!({"scope": "app", "room": "r1", "board": "senders"}),
            "a room at app scope",
        ),
        (json!({"board": "senders"}), "a room board without a room"),
        (json!({"scope": "app", "board": "nope"}), "bad board"),
        (
            json!({"scope": "app", "board": "senders", "period": "year"}),
            "bad period",
        ),
    ] {
        let err = a.request("rank.get", d).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::BadRequest), "{why}: {err:?}");
    }
    let empty = a
        .request("rank.get", json!({"scope": "app", "board": "senders"}))
        .await
        .unwrap();
    assert_eq!(empty["entries"], json!([]), "{empty}");
    assert_eq!(empty["period"], "all");
    // The node stays up.
    a.request("rank.get", json!({"scope": "app", "board": "receivers"}))
        .await
        .unwrap();
    s.stop().await;
}
