//! Wallet operations end to end on a standalone server: statements (`wallet.history` and
//! `GET /admin/wallets/{user}/history`) and coin sellers (`wallet.transfer`,
//! `/admin/sellers/{user}`), host settlements (`POST /admin/settlements`) and rewards (sign-up,
//! `wallet.checkin`).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use gateway::GatewayConfig;
use protocol::{ErrorCode, RoomId};
use serde_json::{Value, json};
use shard::ShardConfig;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"wallet-test-secret";
const ADMIN: &str = "wallet-admin";

async fn start() -> Server {
    start_with(0, 0).await
}

/// A server crediting `signup` coins on a first connection and `checkin` per daily check-in.
async fn start_with(signup: i64, checkin: i64) -> Server {
    let gateway = GatewayConfig {
        rate_per_sec: 10_000,
        rate_burst: 10_000,
        drain_window: Duration::from_millis(100),
        transfer_daily_limit: 300,
        signup_reward: signup,
        checkin_reward: checkin,
        ..GatewayConfig::default()
    };
    Server::launch(SECRET, ADMIN, gateway, ShardConfig::default()).await
}

async fn grant(s: &Server, user: &str, amount: i64, key: &str) {
    let r = kit::admin::grant(s.admin, Some(ADMIN), user, amount, key)
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
}

async fn admin_get(s: &Server, path: &str) -> (u16, Value) {
    let r = kit::admin::call(s.admin, "GET", path, Some(ADMIN), None)
        .await
        .unwrap();
    let status = r.status;
    (status, r.json())
}

#[tokio::test]
async fn a_user_pages_their_statement_and_an_operator_reads_anyones() {
    let s = start().await;
    for i in 0..5 {
        grant(&s, "alice", 100, &format!("k{i}")).await;
    }
    let mut a = s.connect("alice").await;
    let room = RoomId::from("statement");
    a.join(&room, false, None).await.unwrap();
    let mut b = s.connect("bob").await;
    b.join(&room, false, None).await.unwrap();
    let gift = json!({"room": room, "req_id": "g1", "gift": "rose", "count": 1, "to": ["bob"]});
    a.request("gift.send", gift).await.unwrap();

    let first = a
        .request("wallet.history", json!({"limit": 4}))
        .await
        .unwrap();
    let m = first["movements"].as_array().unwrap();
    assert_eq!(m.len(), 4);
    assert_eq!(m[0]["kind"], "gift_sent");
    assert_eq!(m[0]["account"], "coins");
    assert_eq!(m[0]["amount"], -10);
    assert_eq!(m[0]["balance_after"], 490);
    assert_eq!(m[0]["counterparty"], "bob");
    assert_eq!(m[1]["kind"], "grant");
    assert_eq!(m[1]["key"], "k4");
    let next = first["next"].as_str().unwrap();
    let second = a
        .request("wallet.history", json!({"cursor": next, "limit": 4}))
        .await
        .unwrap();
    let keys: Vec<&str> = second["movements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["k1", "k0"]);
    assert!(second.get("next").is_none(), "{second}");
    let grants = a
        .request("wallet.history", json!({"kind": "gift_sent"}))
        .await
        .unwrap();
    assert_eq!(grants["movements"].as_array().unwrap().len(), 1);

    // Bad arguments are refused with a code, and the connection stays usable.
    for bad in [json!({"kind": "bogus"}), json!({"cursor": "nope"})] {
        let e = a.request("wallet.history", bad).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::BadRequest));
    }

    // The operator's view of bob: the gift received, on the earnings balance.
    let (status, bob) = admin_get(&s, "/admin/wallets/bob/history").await;
    assert_eq!(status, 200, "{bob}");
    let m = bob["movements"].as_array().unwrap();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0]["kind"], "gift_received");
    assert_eq!(m[0]["account"], "earnings");
    assert_eq!(m[0]["counterparty"], "alice");
    let (status, page) = admin_get(&s, "/admin/wallets/alice/history?limit=2&kind=grant").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["movements"].as_array().unwrap().len(), 2);
    let (status, _) = admin_get(&s, "/admin/wallets/alice/history?kind=nope").await;
    assert_eq!(status, 400);
    // The contract's bounds: a limit outside 1..=100 is refused, not clamped.
    for limit in ["0", "101", "x"] {
        let path = format!("/admin/wallets/alice/history?limit={limit}");
        assert_eq!(admin_get(&s, &path).await.0, 400, "limit={limit}");
    }
    let refused = kit::admin::call(s.admin, "GET", "/admin/wallets/bob/history", None, None)
        .await
        .unwrap();
    assert_eq!(refused.status, 401);
    s.stop().await;
}

#[tokio::test]
async fn only_marked_sellers_transfer_once_per_request_within_the_daily_limit() {
    let s = start().await;
    grant(&s, "seller", 1_000, "stock").await;
    let mut seller = s.connect("seller").await;
    let t = |to: &str, amount: i64, req: &str| json!({"to": to, "amount": amount, "req_id": req});
    // A regular user: a clear code, nothing moves.
    let e = seller
        .request("wallet.transfer", t("buyer", 100, "t1"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NotASeller));
    let marked = kit::admin::call(s.admin, "PUT", "/admin/sellers/seller", Some(ADMIN), None)
        .await
        .unwrap();
    assert_eq!(marked.status, 200, "{}", marked.body);
    assert_eq!(
        admin_get(&s, "/admin/sellers/seller").await.1["seller"],
        true
    );
    assert_eq!(
        admin_get(&s, "/admin/sellers/buyer").await.1["seller"],
        false
    );
    let ok = seller
        .request("wallet.transfer", t("buyer", 100, "t1"))
        .await
        .unwrap();
    assert_eq!(
        (ok["balance"].as_i64(), ok["applied"].as_bool()),
        (Some(900), Some(true))
    );
    // The same req_id again: the first answer, nothing more moves.
    let again = seller
        .request("wallet.transfer", t("buyer", 100, "t1"))
        .await
        .unwrap();
    assert_eq!(
        (again["balance"].as_i64(), again["applied"].as_bool()),
        (Some(900), Some(false))
    );
    let reused = seller
        .request("wallet.transfer", t("buyer", 5, "t1"))
        .await
        .unwrap_err();
    assert_eq!(reused.code(), Some(ErrorCode::IdempotencyConflict));
    // The daily limit (300 in this server's config): 100 used.
    let over = seller
        .request("wallet.transfer", t("buyer", 201, "t2"))
        .await
        .unwrap_err();
    assert_eq!(over.code(), Some(ErrorCode::QuotaExceeded));
    for bad in [t("seller", 1, "t3"), t("buyer", 0, "t3"), t("buyer", 1, "")] {
        let e = seller.request("wallet.transfer", bad).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::BadRequest));
    }
    let mut buyer = s.connect("buyer").await;
    let w = buyer.request("wallet.balance", json!({})).await.unwrap();
    assert_eq!(w["balance"], 100);
    let h = buyer.request("wallet.history", json!({})).await.unwrap();
    assert_eq!(h["movements"][0]["kind"], "transfer");
    assert_eq!(h["movements"][0]["counterparty"], "seller");
    // The buyer is no seller: they cannot pass coins on.
    let e = buyer
        .request("wallet.transfer", t("other", 1, "x"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NotASeller));
    let unmarked = kit::admin::call(
        s.admin,
        "DELETE",
        "/admin/sellers/seller",
        Some(ADMIN),
        None,
    )
    .await
    .unwrap();
    assert_eq!(unmarked.status, 200);
    let e = seller
        .request("wallet.transfer", t("buyer", 1, "t4"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NotASeller));
    let (_, totals) = admin_get(&s, "/admin/ledger/totals").await;
    assert_eq!(totals["conserved"], true, "{totals}");
    // No check-in reward configured: the op says so.
    let e = seller
        .request("wallet.checkin", json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::BadRequest));
    s.stop().await;
}

#[tokio::test]
async fn an_operator_settles_a_hosts_earnings_once_at_the_configured_rate() {
    let s = start().await;
    grant(&s, "fan", 1_000, "g").await;
    let mut fan = s.connect("fan").await;
    let mut host = s.connect("host").await;
    let room = RoomId::from("settle");
    fan.join(&room, false, None).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    let gift = json!({"room": room, "req_id": "g1", "gift": "rocket", "count": 1, "to": ["host"]});
    fan.request("gift.send", gift).await.unwrap();
    let post = |body: Value| {
        kit::admin::call(
            s.admin,
            "POST",
            "/admin/settlements",
            Some(ADMIN),
            Some(body),
        )
    };
    let body = json!({"settlement_id": "2026-12-host", "user": "host", "earnings": 400, "period": "2026-12"});
    let r = post(body.clone()).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    // The default rate: one payout unit per earnings coin.
    assert_eq!(
        (
            v["payout"].as_i64(),
            v["earnings"].as_i64(),
            v["applied"].as_bool()
        ),
        (Some(400), Some(100), Some(true))
    );
    let again = post(body).await.unwrap().json();
    assert_eq!(again["applied"], false);
    let over = post(json!({"settlement_id": "s2", "user": "host", "earnings": 101}))
        .await
        .unwrap();
    assert_eq!(over.status, 422, "{}", over.body);
    let h = host
        .request("wallet.history", json!({"kind": "settlement"}))
        .await
        .unwrap();
    assert_eq!(h["movements"][0]["amount"], -400);
    assert_eq!(h["movements"][0]["account"], "earnings");
    let (_, totals) = admin_get(&s, "/admin/ledger/totals").await;
    assert_eq!(totals["totals"]["settled"], 400);
    assert_eq!(totals["conserved"], true, "{totals}");
    s.stop().await;
}

#[tokio::test]
async fn a_first_connection_is_rewarded_once_and_a_checkin_once_a_day() {
    let s = start_with(25, 5).await;
    // Three first connections at once: one sign-up reward.
    let (a, b, c) = tokio::join!(s.connect("fresh"), s.connect("fresh"), s.connect("fresh"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let w = kit::admin::wallet(s.admin, Some(ADMIN), "fresh")
            .await
            .unwrap()
            .json();
        if w["balance"] == 25 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no sign-up reward: {w}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop((b, c));
    let mut a = a;
    let first = a.request("wallet.checkin", json!({})).await.unwrap();
    assert_eq!(
        (first["applied"].as_bool(), first["balance"].as_i64()),
        (Some(true), Some(30))
    );
    let again = a.request("wallet.checkin", json!({})).await.unwrap();
    assert_eq!(
        (again["applied"].as_bool(), again["balance"].as_i64()),
        (Some(false), Some(30))
    );
    // Reconnecting never rewards the sign-up again.
    let mut d = s.connect("fresh").await;
    let h = d
        .request("wallet.history", json!({"kind": "reward"}))
        .await
        .unwrap();
    assert_eq!(h["movements"].as_array().unwrap().len(), 2, "{h}");
    let w = kit::admin::wallet(s.admin, Some(ADMIN), "fresh")
        .await
        .unwrap()
        .json();
    assert_eq!(w["balance"], 30);
    // One ledger call in all: concurrent first connections share it, and this process
    // remembers the user after it.
    let calls = kit::admin::metric(s.admin, "chorus_signup_reward_calls_total")
        .await
        .unwrap();
    assert_eq!(calls, 1.0, "sign-up reward ledger calls");
    s.stop().await;
}

/// `chorus admin wallets`: the binary's calls for statements, sellers, settlements and totals
/// reach the admin API, print its JSON answer, and fail on a refusal.
#[tokio::test]
async fn the_admin_cli_settles_reads_statements_and_sets_sellers() {
    let s = start().await;
    grant(&s, "fan", 1_000, "g").await;
    let mut fan = s.connect("fan").await;
    let mut host = s.connect("host").await;
    let room = RoomId::from("cli-settle");
    fan.join(&room, false, None).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    let gift = json!({"room": room, "req_id": "g1", "gift": "rocket", "count": 1, "to": ["host"]});
    fan.request("gift.send", gift).await.unwrap();
    let addr = s.admin.to_string();
    // The server runs on this test's runtime: the binary is awaited, never waited for.
    let chorus = async |args: &[&str]| {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_chorus"))
            .args(["admin", "--addr", addr.as_str(), "wallets"])
            .args(args)
            .env("CHORUS_ADMIN_TOKEN", ADMIN)
            .output()
            .await
            .unwrap();
        let json = serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null);
        (out.status.success(), json)
    };
    let settle = ["settle", "cli-1", "host", "200", "--period", "2026-12"];
    let (ok, v) = chorus(&settle).await;
    assert!(ok, "{v}");
    assert_eq!(
        (v["payout"].as_i64(), v["applied"].as_bool()),
        (Some(200), Some(true)),
        "{v}"
    );
    let (ok, again) = chorus(&settle).await;
    assert!(ok && again["applied"] == false, "{again}");
    let (ok, refused) = chorus(&["settle", "cli-2", "host", "1000"]).await;
    assert!(!ok, "more than earned is refused: {refused}");
    let (ok, h) = chorus(&["history", "host", "--kind", "settlement", "--limit", "5"]).await;
    assert!(ok, "{h}");
    assert_eq!(h["movements"][0]["amount"], -200, "{h}");
    for (verb, seller) in [("add-seller", true), ("remove-seller", false)] {
        assert!(chorus(&[verb, "fan"]).await.0, "{verb}");
        let (ok, v) = chorus(&["seller", "fan"]).await;
        assert!(ok && v["seller"] == seller, "{verb}: {v}");
    }
    let (ok, totals) = chorus(&["totals"]).await;
    assert!(ok && totals["conserved"] == true, "{totals}");
    s.stop().await;
}
