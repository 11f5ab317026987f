//! `/healthz` and `/readyz` on real nodes: liveness stays up while readiness follows what the
//! node needs (Redis for a cluster node, the ledger everywhere it has one).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::net::SocketAddr;
use std::time::Duration;

use kit::admin::{self, AdminResponse};
use kit::cluster::{Cluster, ClusterOptions};
use kit::postgres::PgServer;
use kit::standalone::Server;
use tokio::time::Instant;

/// Longest a node may take to notice a change of what it depends on.
const NOTICE: Duration = Duration::from_secs(10);

async fn readyz(addr: SocketAddr) -> AdminResponse {
    admin::get(addr, "/readyz", None).await.unwrap()
}

/// Polls `/readyz` until its status is `want`; returns the last answer.
async fn ready_becomes(addr: SocketAddr, want: u16) -> AdminResponse {
    let deadline = Instant::now() + NOTICE;
    loop {
        let r = readyz(addr).await;
        if r.status == want {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "{addr}: /readyz stayed {} ({}), wanted {want}",
            r.status,
            r.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn live(addr: SocketAddr) {
    let r = admin::get(addr, "/healthz", None).await.unwrap();
    assert_eq!((r.status, r.body.as_str()), (200, "ok\n"), "{addr}");
}

/// Waits for `/readyz` to turn `503` with a problem naming `what`, and checks that the node
/// stays live: not ready is not dead, and an orchestrator must not restart it for this.
async fn unready_for(addr: SocketAddr, what: &str) {
    let v = ready_becomes(addr, 503).await.json();
    assert_eq!(v["ready"], false, "{addr}: {v}");
    let problems = v["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p.as_str().unwrap().starts_with(what)),
        "{addr}: {v}"
    );
    live(addr).await;
}

#[tokio::test]
async fn cluster_nodes_are_unready_while_redis_is_frozen_and_stay_live() {
    let cluster = Cluster::of(1, 1).await.unwrap();
    let nodes = [cluster.shards[0].admin, cluster.gateways[0].admin];
    for addr in nodes {
        live(addr).await;
        let r = ready_becomes(addr, 200).await;
        assert_eq!(r.json(), serde_json::json!({ "ready": true }), "{addr}");
    }
    cluster.redis.pause().unwrap();
    for addr in nodes {
        unready_for(addr, "redis").await;
    }
    cluster.redis.resume().unwrap();
    for addr in nodes {
        ready_becomes(addr, 200).await;
    }
}

#[tokio::test]
async fn a_standalone_node_is_ready_when_its_ledger_takes_writes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "health-secret", "health-admin", &[], &[])
        .await
        .unwrap();
    let admin = server.admin;
    live(admin).await;
    let r = readyz(admin).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), serde_json::json!({ "ready": true }));
}

/// A cluster on a PostgreSQL ledger: the shard (which books the gifts) and the gateway (which
/// reads wallets) are unready while the ledger's server is down, and ready again once it is
/// back, live all along.
#[tokio::test]
async fn cluster_nodes_are_unready_while_their_ledger_is_down() {
    let mut pg = PgServer::start().await.unwrap();
    let cluster = Cluster::start(ClusterOptions {
        shards: 1,
        gateways: 1,
        env: vec![("CHORUS_LEDGER".into(), pg.url("postgres"))],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let nodes = [cluster.shards[0].admin, cluster.gateways[0].admin];
    for addr in nodes {
        ready_becomes(addr, 200).await;
    }
    pg.stop();
    for addr in nodes {
        unready_for(addr, "ledger").await;
    }
    pg.restart().await.unwrap();
    for addr in nodes {
        ready_becomes(addr, 200).await;
    }
}
