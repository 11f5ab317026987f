//! Top-ups per second through `POST /payments/webhook` on a standalone server (SQLite ledger),
//! signature check, JSON, one ledger booking and its statement line per payment
//! (docs/BENCHMARKS-LOG.md, "Wallet top-ups"). By hand, in release:
//!
//! `cargo test --release -p gateway --test it -- --ignored --nocapture payments_bench::`
//!
//! `CHORUS_BENCH_TOPUPS` payments (default 20,000), each a new payment id, from
//! `CHORUS_BENCH_SENDERS` keep-alive connections (default 32) at once.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use gateway::GatewayConfig;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::json;
use shard::ShardConfig;
use tokio::net::TcpStream;

use crate::support::server;
use crate::support::webhook;
use server::Server;
use webhook::{chorus_headers, now};

const HOOK_SECRET: &str = "bench-secret";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a measurement: run by hand in release (see the module docs)"]
async fn top_ups_per_second_through_the_webhook() {
    let total = env_usize("CHORUS_BENCH_TOPUPS", 20_000);
    let senders = env_usize("CHORUS_BENCH_SENDERS", 32);
    let products: BTreeMap<String, i64> = [("coins_100".to_owned(), 100)].into_iter().collect();
    let gateway = GatewayConfig {
        drain_window: Duration::from_millis(100),
        payments_webhook_secret: Some(HOOK_SECRET.into()),
        payment_products: Arc::new(products),
        ..GatewayConfig::default()
    };
    let s = Server::launch(b"bench", "bench-admin", gateway, ShardConfig::default()).await;
    let per = total / senders;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..senders {
        let addr = s.admin;
        tasks.push(tokio::spawn(async move {
            let stream = TcpStream::connect(addr).await.unwrap();
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .unwrap();
            tokio::spawn(conn);
            for i in 0..per {
                let body = json!({
                    "type": "payment.succeeded", "payment_id": format!("p{t}-{i}"),
                    "user": format!("u{}", i % 1000), "product": "coins_100",
                })
                .to_string();
                let mut req = hyper::Request::builder()
                    .method("POST")
                    .uri("/payments/webhook")
                    .header("host", addr.to_string());
                for (k, v) in chorus_headers(HOOK_SECRET, now(), &body) {
                    req = req.header(k, v);
                }
                sender.ready().await.unwrap();
                let resp = sender
                    .send_request(req.body(Full::new(Bytes::from(body))).unwrap())
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 200);
                resp.into_body().collect().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let took = started.elapsed();
    let done = per * senders;
    println!(
        "webhook top-ups: {done} in {took:?} = {:.0}/s ({senders} connections)",
        done as f64 / took.as_secs_f64()
    );
    let r = kit::admin::call(
        s.admin,
        "GET",
        "/admin/ledger/totals",
        Some("bench-admin"),
        None,
    )
    .await
    .unwrap();
    let totals = r.json();
    assert_eq!(
        totals["totals"]["topped_up"],
        i64::try_from(done * 100).unwrap()
    );
    assert_eq!(totals["conserved"], true);
    s.stop().await;
}
