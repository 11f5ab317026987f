//! The pages a standalone node serves: the demo room on the client port (plain GETs answered
//! beside the WebSocket endpoint, which still answers `426` to a plain GET of `/ws`), demo
//! tokens only with the demo flag (each user's demo coins granted once, through the ledger),
//! and the operator dashboard with `GET /admin/leases` on the admin port.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::net::SocketAddr;
use std::time::Duration;

use gateway::GatewayConfig;
use kit::admin::{AdminResponse, call};
use serde_json::{Value, json};
use shard::ShardConfig;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"web-test-secret";
const ADMIN: &str = "web-admin";

async fn start(demo: bool) -> Server {
    let gateway = GatewayConfig {
        drain_window: Duration::from_millis(100),
        demo_tokens: demo,
        ..GatewayConfig::default()
    };
    Server::launch(SECRET, ADMIN, gateway, ShardConfig::default()).await
}

fn ws_addr(s: &Server) -> SocketAddr {
    s.url
        .trim_start_matches("ws://")
        .trim_end_matches("/ws")
        .parse()
        .unwrap()
}

async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> AdminResponse {
    call(addr, "GET", path, token, None).await.unwrap()
}

#[tokio::test]
async fn the_demo_page_is_served_and_tokens_need_the_demo_flag() {
    let s = start(false).await;
    let ws = ws_addr(&s);
    let page = get(ws, "/", None).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Chorus demo room"), "{}", page.body);
    let js = get(ws, "/demo.js", None).await;
    assert_eq!(js.status, 200);
    assert!(js.body.len() > 1000, "the built bundle");
    assert_eq!(get(ws, "/chorus.css", None).await.status, 200);
    let off = get(ws, "/demo/token?user=alice", None).await;
    assert_eq!(off.status, 404, "no demo tokens without the flag");
    assert!(off.body.contains("--demo"), "{}", off.body);
    // What is not a page is still answered as before: 426 for a plain GET.
    let plain = get(ws, "/ws", None).await;
    assert_eq!(plain.status, 426);
    // The whole text, as long as its Content-Length says.
    assert_eq!(
        plain.body,
        "this is a WebSocket endpoint: open a WebSocket to /ws\n"
    );
    assert_eq!(get(ws, "/dashboard", None).await.status, 426);
    // The WebSocket endpoint works as ever beside the pages.
    let mut c = s.connect("wendy").await;
    c.request("ping", json!({})).await.unwrap();
    s.stop().await;
}

#[tokio::test]
async fn the_demo_flag_mints_tokens_and_grants_demo_coins_once() {
    let s = start(true).await;
    let ws = ws_addr(&s);
    assert_eq!(get(ws, "/demo/token", None).await.status, 400, "no user");
    for bad in ["bad%20name", "bot:amy", "x%3Cy", &"a".repeat(65)] {
        let r = get(ws, &format!("/demo/token?user={bad}"), None).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
    }
    let mut balance = 0;
    for _ in 0..2 {
        let r = get(ws, "/demo/token?user=dora", None).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let token = r.json()["token"].as_str().unwrap().to_owned();
        let mut c = kit::client::connect(&s.url, Some(&token)).await.unwrap();
        let w = c.request("wallet.balance", json!({})).await.unwrap();
        balance = w["balance"].as_i64().unwrap();
    }
    assert_eq!(balance, 1000, "the demo coins are granted once per user");
    // The name arrives encoded as the page sends it; `:` is valid in one.
    let r = get(ws, "/demo/token?user=dora%3A2", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    s.stop().await;
}

#[tokio::test]
async fn the_dashboard_and_the_leases_are_on_the_admin_port() {
    let s = start(false).await;
    let page = get(s.admin, "/dashboard", None).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("operator dashboard"));
    assert_eq!(get(s.admin, "/dashboard.js", None).await.status, 200);
    assert_eq!(
        get(s.admin, "/admin/leases", None).await.status,
        401,
        "the data needs the token"
    );
    let mut c = s.connect("lee").await;
    c.request("room.join", json!({"room": "leased"}))
        .await
        .unwrap();
    let leases = get(s.admin, "/admin/leases", Some(ADMIN)).await;
    assert_eq!(leases.status, 200, "{}", leases.body);
    let v: Value = leases.json();
    let rooms = v["shards"][0]["rooms"].as_array().unwrap();
    let room = rooms.iter().find(|r| r["room"] == "leased").unwrap();
    assert!(room["fence"].as_u64().is_some(), "{v}");
    // A node's metrics through the admin API (the dashboard's charts).
    assert_eq!(get(s.admin, "/admin/metrics", None).await.status, 401);
    let own = get(s.admin, "/admin/metrics?node=standalone", Some(ADMIN)).await;
    assert_eq!(own.status, 200);
    assert!(own.body.contains("chorus_"), "{}", own.body);
    // The id is decoded as the page encodes it (`encodeURIComponent`).
    let encoded = get(s.admin, "/admin/metrics?node=stand%61lone", Some(ADMIN)).await;
    assert_eq!(encoded.status, 200, "{}", encoded.body);
    let missing = get(s.admin, "/admin/metrics?node=nope", Some(ADMIN)).await;
    assert_eq!(missing.status, 404);
    // Path segments are decoded too: the page encodes a room id, and `:` is valid in one.
    c.request("room.join", json!({"room": "party:1"}))
        .await
        .unwrap();
    let room = get(s.admin, "/admin/rooms/party%3A1", Some(ADMIN)).await;
    assert_eq!(room.status, 200, "{}", room.body);
    assert_eq!(room.json()["room"], "party:1", "{}", room.body);
    s.stop().await;
}

/// A node given an empty admin token has no admin token: every `/admin/*` call is refused,
/// with or without an `Authorization` header (an empty token must not match an absent one).
#[tokio::test]
async fn an_empty_admin_token_opens_nothing() {
    let s = Server::launch(SECRET, "", GatewayConfig::default(), ShardConfig::default()).await;
    for token in [None, Some("")] {
        let r = get(s.admin, "/admin/ledger/totals", token).await;
        assert_eq!(r.status, 401, "{token:?}: {}", r.body);
    }
    s.stop().await;
}
