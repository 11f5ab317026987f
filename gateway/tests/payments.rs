//! The payment provider's webhook end to end on a standalone server: signature and replay
//! failures change nothing, a payment credits once however often it is notified (20 at once
//! included), and a refund after spending leaves a debt that blocks gifts until a top-up
//! covers it.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gateway::GatewayConfig;
use protocol::{ErrorCode, RoomId};
use serde_json::{Value, json};
use shard::ShardConfig;

use crate::support::server;
use crate::support::webhook;
use server::Server;
use webhook::{chorus_headers, now, send};

const SECRET: &[u8] = b"payments-test-secret";
const ADMIN: &str = "payments-admin";
const HOOK_SECRET: &str = "provider-shared-secret";
const PATH: &str = "/payments/webhook";

async fn start() -> Server {
    let products: BTreeMap<String, i64> = [("coins_100".to_owned(), 100), ("coins_50".into(), 50)]
        .into_iter()
        .collect();
    let gateway = GatewayConfig {
        rate_per_sec: 10_000,
        rate_burst: 10_000,
        drain_window: Duration::from_millis(100),
        payments_webhook_secret: Some(HOOK_SECRET.into()),
        payment_products: Arc::new(products),
        ..GatewayConfig::default()
    };
    Server::launch(SECRET, ADMIN, gateway, ShardConfig::default()).await
}

fn paid(id: &str, user: &str, product: &str) -> String {
    json!({"type": "payment.succeeded", "payment_id": id, "user": user, "product": product})
        .to_string()
}

async fn post(s: &Server, body: &str) -> (u16, Value) {
    send(
        s.admin,
        "POST",
        PATH,
        &chorus_headers(HOOK_SECRET, now(), body),
        body,
    )
    .await
}

async fn balance(s: &Server, user: &str) -> i64 {
    kit::admin::wallet(s.admin, Some(ADMIN), user)
        .await
        .unwrap()
        .json()["balance"]
        .as_i64()
        .unwrap()
}

#[tokio::test]
async fn unsigned_stale_or_forged_notifications_change_nothing() {
    let s = start().await;
    let body = paid("p1", "alice", "coins_100");
    let forged = chorus_headers("not-the-secret", now(), &body);
    let stale = chorus_headers(HOOK_SECRET, now() - 3_600, &body);
    let ahead = chorus_headers(HOOK_SECRET, now() + 3_600, &body);
    // Signed for one body, sent with another.
    let other = paid("p1", "alice", "coins_50");
    let swapped = chorus_headers(HOOK_SECRET, now(), &other);
    for headers in [vec![], forged, stale, ahead, swapped] {
        let (status, answer) = send(s.admin, "POST", PATH, &headers, &body).await;
        assert_eq!(status, 401, "{answer}");
    }
    // Not JSON, but unsigned: refused as unsigned, not as a bad body.
    let (status, _) = send(s.admin, "POST", PATH, &[], "{not json").await;
    assert_eq!(status, 401);
    assert_eq!(balance(&s, "alice").await, 0);
    let (_, totals) = admin_totals(&s).await;
    assert_eq!(totals["totals"]["topped_up"], 0);
    // Signed but unknown product or type: 400, nothing credited.
    let (status, _) = post(&s, &paid("p2", "alice", "diamonds")).await;
    assert_eq!(status, 400);
    let (status, _) = post(&s, &json!({"type": "x", "payment_id": "p3"}).to_string()).await;
    assert_eq!(status, 400);
    assert_eq!(balance(&s, "alice").await, 0);
    s.stop().await;
}

async fn admin_totals(s: &Server) -> (u16, Value) {
    let r = kit::admin::call(s.admin, "GET", "/admin/ledger/totals", Some(ADMIN), None)
        .await
        .unwrap();
    (r.status, r.json())
}

#[tokio::test]
async fn twenty_concurrent_retries_of_one_payment_credit_once() {
    let s = start().await;
    let body = paid("pay-42", "bob", "coins_100");
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (addr, body) = (s.admin, body.clone());
        tasks.push(tokio::spawn(async move {
            let headers = chorus_headers(HOOK_SECRET, now(), &body);
            send(addr, "POST", PATH, &headers, &body).await
        }));
    }
    let mut applied = 0;
    for t in tasks {
        let (status, answer) = t.await.unwrap();
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["balance"], 100, "{answer}");
        if answer["applied"] == true {
            applied += 1;
        }
    }
    assert_eq!(applied, 1);
    assert_eq!(balance(&s, "bob").await, 100);
    // The same payment id for another product is a conflict: nothing more.
    let (status, _) = post(&s, &paid("pay-42", "bob", "coins_50")).await;
    assert_eq!(status, 409);
    let (_, totals) = admin_totals(&s).await;
    assert_eq!(totals["totals"]["topped_up"], 100);
    assert_eq!(totals["conserved"], true, "{totals}");
    s.stop().await;
}

#[tokio::test]
async fn a_refund_after_spending_is_a_debt_that_blocks_gifts_until_a_top_up_covers_it() {
    let s = start().await;
    let (status, _) = post(&s, &paid("pay-1", "carol", "coins_100")).await;
    assert_eq!(status, 200);
    let mut c = s.connect("carol").await;
    let mut d = s.connect("dave").await;
    let room = RoomId::from("debts");
    c.join(&room, false, None).await.unwrap();
    d.join(&room, false, None).await.unwrap();
    let gift = |req: &str| json!({"room": room, "req_id": req, "gift": "heart", "count": 1, "to": ["dave"]});
    c.request("gift.send", gift("g1")).await.unwrap();
    assert_eq!(balance(&s, "carol").await, 50);
    let refund = json!({"type": "payment.refunded", "payment_id": "pay-1"}).to_string();
    let (status, r) = post(&s, &refund).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        (r["balance"].as_i64(), r["debt"].as_i64()),
        (Some(0), Some(50))
    );
    let (status, again) = post(&s, &refund).await;
    assert_eq!((status, again["applied"].as_bool()), (200, Some(false)));
    let (status, _) = post(
        &s,
        &json!({"type": "payment.refunded", "payment_id": "nope"}).to_string(),
    )
    .await;
    assert_eq!(status, 404);
    // Coins granted meanwhile cannot be spent while the debt stands.
    kit::admin::grant(s.admin, Some(ADMIN), "carol", 100, "ops")
        .await
        .unwrap();
    let e = c.request("gift.send", gift("g2")).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InsufficientFunds));
    let (_, totals) = admin_totals(&s).await;
    assert_eq!(totals["totals"]["debt"], 50);
    assert_eq!(totals["conserved"], true, "{totals}");
    // A top-up covers the debt first; then gifts go through again.
    let (status, t) = post(&s, &paid("pay-2", "carol", "coins_100")).await;
    assert_eq!(status, 200);
    assert_eq!(
        (t["debt_paid"].as_i64(), t["balance"].as_i64()),
        (Some(50), Some(150))
    );
    c.request("gift.send", gift("g3")).await.unwrap();
    assert_eq!(balance(&s, "carol").await, 100);
    let (_, totals) = admin_totals(&s).await;
    assert_eq!(totals["totals"]["debt"], 0);
    assert_eq!(totals["conserved"], true, "{totals}");
    s.stop().await;
}
