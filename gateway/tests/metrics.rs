//! `/metrics` on the admin port: open by default; with a metrics token, only a request bearing
//! it is answered (401 otherwise, the admin token included).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use gateway::GatewayConfig;
use shard::ShardConfig;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"metrics-test-secret";
const ADMIN: &str = "metrics-admin";
const METRICS: &str = "metrics-scraper-token";

async fn start(metrics_token: Option<&str>) -> Server {
    let gateway = GatewayConfig {
        metrics_token: metrics_token.map(str::to_owned),
        ..GatewayConfig::default()
    };
    Server::launch(SECRET, ADMIN, gateway, ShardConfig::default()).await
}

async fn status(s: &Server, token: Option<&str>) -> u16 {
    kit::admin::call(s.admin, "GET", "/metrics", token, None)
        .await
        .unwrap()
        .status
}

#[tokio::test]
async fn with_a_metrics_token_metrics_need_it() {
    let s = start(Some(METRICS)).await;
    assert_eq!(status(&s, None).await, 401);
    assert_eq!(status(&s, Some("wrong")).await, 401);
    assert_eq!(
        status(&s, Some(ADMIN)).await,
        401,
        "the admin token is not it"
    );
    let ok = kit::admin::call(s.admin, "GET", "/metrics", Some(METRICS), None)
        .await
        .unwrap();
    assert_eq!(ok.status, 200);
    assert!(ok.body.contains("process_"), "{}", ok.body);
    // Health stays open.
    assert_eq!(
        kit::admin::call(s.admin, "GET", "/healthz", None, None)
            .await
            .unwrap()
            .status,
        200
    );
    s.stop().await;
}

#[tokio::test]
async fn without_a_metrics_token_metrics_are_open() {
    let s = start(None).await;
    assert_eq!(status(&s, None).await, 200);
    assert_eq!(status(&s, Some("anything")).await, 200);
    s.stop().await;
}
