//! The room directory on a cluster of real processes (redis-server, two shards, one gateway):
//! rooms published by both shards are listed, closed ones leave, pinned first; and when a
//! shard is killed its rooms stop being listed within the staleness bound (nobody removed them:
//! its entries are filtered by its silence, then swept).
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::HashSet;
use std::time::Duration;

use kit::client::Client;
use kit::cluster::{Cluster, ClusterOptions};
use serde_json::{Value, json};
use tokio::time::Instant;

/// A change shows within a publish tick (1 s) and the page cache (1 s); a dead shard's
/// entries within `directory_stale_ms` (5 s). Slack for a loaded machine.
const BOUND: Duration = Duration::from_secs(15);
const ROOMS: usize = 1000;
const OWNERS: usize = 8;

async fn list_all(c: &mut Client) -> Vec<Value> {
    c.room_list_all(json!({"limit": 100})).await.unwrap()
}

fn ids(rooms: &[Value]) -> HashSet<String> {
    rooms
        .iter()
        .map(|r| r["room"].as_str().unwrap().to_owned())
        .collect()
}

async fn wait_for(c: &mut Client, want: &HashSet<String>, what: &str) -> Vec<Value> {
    let deadline = Instant::now() + BOUND;
    loop {
        let rooms = list_all(c).await;
        if ids(&rooms) == *want && rooms.len() == want.len() {
            return rooms;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {BOUND:?} ({} listed, {} wanted)",
            rooms.len(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn the_directory_lists_live_rooms_of_live_shards_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chorus.toml");
    // No quotas or rate limits (thousands of creates); rooms stay loaded for the whole test.
    std::fs::write(
        &path,
        "room_creates_per_min = 0\nmax_rooms_per_user = 0\nrate_per_sec = 1000000\n\
         rate_burst = 1000000\nidle_unload_ms = 600000\n",
    )
    .unwrap();
    let mut cluster = Cluster::start(ClusterOptions {
        shards: 2,
        gateways: 1,
        env: vec![
            ("CHORUS_CONFIG".into(), path.display().to_string()),
            ("CHORUS_LOG".into(), "warn".into()),
        ],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let mut conns = Vec::new();
    for o in 0..OWNERS {
        conns.push(cluster.connect(0, &format!("owner{o}")).await.unwrap());
    }
    let owners = kit::client::create_rooms_close_nine_in_ten(conns, ROOMS, |i| format!("c{i:04}"))
        .await
        .unwrap();
    let live: HashSet<String> = (0..ROOMS)
        .filter(|i| i % 10 == 0)
        .map(|i| format!("c{i:04}"))
        .collect();
    let pin = cluster
        .admin(
            "POST",
            "/admin/rooms/c0500/pin",
            Some(json!({"scope": "global"})),
        )
        .await
        .unwrap();
    assert_eq!(pin.status, 200, "{}", pin.body);
    let mut c = cluster.connect(0, "reader").await.unwrap();
    let rooms = wait_for(&mut c, &live, "the live rooms of both shards").await;
    assert_eq!(rooms[0]["room"], "c0500");
    assert_eq!(rooms[0]["pinned"], true);

    // Which shard owns which live room; both must own some for the kill to mean anything.
    let mut on_s1 = HashSet::new();
    for room in &live {
        let (owner, _) = cluster.room_owner(room).await.unwrap().unwrap();
        if owner == "s1" {
            on_s1.insert(room.clone());
        }
    }
    assert!(
        !on_s1.is_empty() && on_s1.len() < live.len(),
        "{} on s1",
        on_s1.len()
    );
    cluster.shard_mut("s1").unwrap().node.kill9().unwrap();
    let survivors: HashSet<String> = live.difference(&on_s1).cloned().collect();
    wait_for(&mut c, &survivors, "a killed shard's rooms leave the list").await;
    drop(owners);
}
