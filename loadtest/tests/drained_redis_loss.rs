//! A drained shard stays drained when Redis loses the ring: real redis-server (restarted
//! without its data) and real node processes.
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use kit::cluster::Cluster;
use serde_json::Value;
use tokio::time::Instant;

/// Bound on each wait below: a few heartbeats and ring refreshes.
const WAIT: Duration = Duration::from_secs(15);

/// The member `id` in `GET /admin/nodes`, if it is one.
async fn member(c: &Cluster, id: &str) -> Option<Value> {
    let r = c.admin("GET", "/admin/nodes", None).await.ok()?.json();
    r["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["id"] == id)
        .cloned()
}

/// Waits until `id` has stamped two more heartbeats (its age fell twice): the heartbeat
/// loop has then read the membership at least once since the call.
async fn two_heartbeats(c: &Cluster, id: &str) {
    let deadline = Instant::now() + WAIT;
    let mut last = u64::MAX;
    let mut beats = 0;
    while beats < 2 {
        let age = member(c, id)
            .await
            .and_then(|n| n["heartbeat_age_ms"].as_u64());
        if let Some(age) = age {
            if age < last && last != u64::MAX {
                beats += 1;
            }
            last = age;
        }
        assert!(Instant::now() < deadline, "{id} stamped no heartbeats");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_drained_shard_rejoins_drained_after_redis_loses_the_ring() {
    let mut cluster = Cluster::of(2, 1).await.unwrap();
    cluster.wait_converged().await.unwrap();
    let r = cluster.admin("POST", "/admin/nodes/s1/drain", None).await;
    assert_eq!(r.unwrap().status, 200);
    two_heartbeats(&cluster, "s1").await;

    cluster.redis.restart().await.unwrap();
    // Both shards notice the lost membership and join again; the gateway sees them.
    let deadline = Instant::now() + WAIT;
    let (s1, s2) = loop {
        if let (Some(s1), Some(s2)) = (member(&cluster, "s1").await, member(&cluster, "s2").await) {
            break (s1, s2);
        }
        assert!(Instant::now() < deadline, "the shards never joined again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(s2["weight"], 1, "{s2}");
    assert_eq!(
        s1["weight"], 0,
        "the drained shard rejoined with weight: {s1}"
    );
    let ring = cluster
        .admin("GET", "/admin/ring", None)
        .await
        .unwrap()
        .json();
    let on_ring: Vec<&Value> = ring["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["on_ring"] == true)
        .map(|n| &n["id"])
        .collect();
    assert_eq!(on_ring, vec!["s2"], "{ring}");
}
