//! Robot rooms on a cluster of real processes, and the incident they once caused: robots that
//! act less often than the lease TTL must not make their room change owner (leases renew on
//! the node's timer, never on writes), robots run only on the owner and move with the room,
//! and a killed owner's robots come back on the next one without two runtimes at once.
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use kit::cluster::{Cluster, ClusterOptions};
use protocol::RoomId;
use serde_json::json;
use storage::robots::RobotStore;
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(10);

/// A cluster whose nodes read `toml` as their configuration file.
async fn cluster_with(options: ClusterOptions, toml: &str) -> (Cluster, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chorus.toml");
    std::fs::write(&path, toml).unwrap();
    let cluster = Cluster::start(ClusterOptions {
        env: vec![("CHORUS_CONFIG".into(), path.display().to_string())],
        ..options
    })
    .await
    .unwrap();
    (cluster, dir)
}

async fn store(cluster: &Cluster) -> RobotStore {
    let redis = storage::redis::Redis::connect(&cluster.redis.url())
        .await
        .unwrap();
    RobotStore::redis(&redis)
}

/// A chatting robot room `room` whose robot speaks every `every_s` seconds.
fn chatty(room: &str, every_s: f64) -> Vec<u8> {
    json!({
        "room": room,
        "robots": [{"id": format!("bot:{room}")}],
        "chat": {"every_s": every_s, "phrases": ["la la la"]},
        "jitter": 0.1,
    })
    .to_string()
    .into_bytes()
}

/// The sum of `metric` over every shard.
async fn shard_sum(cluster: &Cluster, metric: &str) -> f64 {
    let mut sum = 0.0;
    for s in &cluster.shards {
        sum += kit::admin::metric(s.admin, metric).await.unwrap();
    }
    sum
}

/// Waits until every shard together reports `metric` at `want` at least.
async fn wait_sum(cluster: &Cluster, metric: &str, want: f64, within: Duration) -> f64 {
    let deadline = Instant::now() + within;
    loop {
        let sum = shard_sum(cluster, metric).await;
        if sum >= want || Instant::now() > deadline {
            return sum;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The incident: `rooms` robot rooms whose robots act every 2×TTL, watched for 5×TTL. Returns
/// (owner changes seen, robot runtime starts beyond one per room, leases lost).
async fn robot_rooms_over_five_ttls(renew_on_traffic: bool, rooms: usize) -> (usize, f64, f64) {
    let ttl = Duration::from_secs(1);
    let (cluster, _dir) = cluster_with(
        ClusterOptions {
            shards: 3,
            gateways: 1,
            lease_ttl: ttl,
            renew_on_traffic,
            ..ClusterOptions::default()
        },
        "robot_reconcile_ms = 250\n",
    )
    .await;
    let store = store(&cluster).await;
    let names: Vec<String> = (0..rooms).map(|i| format!("robots-{i}")).collect();
    for n in &names {
        store
            .put(
                &RoomId::from(n.as_str()),
                chatty(n, 2.0 * ttl.as_secs_f64()),
            )
            .await
            .unwrap();
    }
    let started = wait_sum(
        &cluster,
        "chorus_robot_runtime_starts_total",
        rooms as f64,
        WAIT * 3,
    )
    .await;
    assert!(
        started >= rooms as f64,
        "only {started} of {rooms} robot rooms started"
    );
    let mut owners = Vec::new();
    for n in &names {
        owners.push(cluster.room_owner(n).await.unwrap());
    }
    let starts = shard_sum(&cluster, "chorus_robot_runtime_starts_total").await;
    let lost = shard_sum(&cluster, "chorus_lease_lost_total").await;
    tokio::time::sleep(ttl * 5).await;
    let mut changes = 0;
    for (n, before) in names.iter().zip(&owners) {
        if cluster.room_owner(n).await.unwrap() != *before {
            changes += 1;
        }
    }
    let restarts = shard_sum(&cluster, "chorus_robot_runtime_starts_total").await - starts;
    let lost = shard_sum(&cluster, "chorus_lease_lost_total").await - lost;
    if !renew_on_traffic {
        // Nothing a non-owner did: no recovery of another owner's sagas, no refused action.
        assert_eq!(
            shard_sum(&cluster, "chorus_sagas_recovered_total").await,
            0.0
        );
        assert_eq!(
            shard_sum(&cluster, "chorus_robot_actions_total{kind=\"refused\"}").await,
            0.0
        );
        let chats = shard_sum(&cluster, "chorus_robot_actions_total{kind=\"chat\"}").await;
        assert!(
            chats >= rooms as f64 * 2.0,
            "the robots spoke only {chats} times"
        );
    }
    eprintln!(
        "ROBOT ROOMS renew_on_traffic={renew_on_traffic}: {rooms} rooms, owner changes {changes}, restarts {restarts}, leases lost {lost}"
    );
    (changes, restarts, lost)
}

#[tokio::test]
async fn robot_rooms_that_act_less_often_than_the_ttl_keep_their_owner() {
    let (changes, restarts, lost) = robot_rooms_over_five_ttls(false, 200).await;
    assert_eq!((changes, restarts, lost), (0, 0.0, 0.0));
}

/// The incident's bug behind the test-only switch (renewing on room traffic): the same robot
/// rooms lose their owners, which the check above detects.
#[tokio::test]
async fn renewing_leases_on_traffic_makes_robot_rooms_change_owner() {
    let (changes, restarts, _) = robot_rooms_over_five_ttls(true, 20).await;
    assert!(
        changes > 0 || restarts > 0.0,
        "the switch did not break anything"
    );
}

#[tokio::test]
async fn a_killed_owners_robots_resume_on_the_next_owner_and_never_run_twice() {
    let ttl = Duration::from_secs(2);
    let (mut cluster, _dir) = cluster_with(
        ClusterOptions {
            lease_ttl: ttl,
            ..ClusterOptions::default()
        },
        "robot_reconcile_ms = 250\n",
    )
    .await;
    store(&cluster)
        .await
        .put(&RoomId::from("lively"), chatty("lively", 0.2))
        .await
        .unwrap();
    let room = RoomId::from("lively");
    wait_sum(&cluster, "chorus_robot_runtime_starts_total", 1.0, WAIT).await;
    let mut human = cluster.connect(0, "human").await.unwrap();
    human.join_retrying(&room, None, WAIT).await.unwrap();
    let first = human.next_event_named("chat", WAIT).await.unwrap();
    assert_eq!(first.d["robot"], true);
    let (owner, _) = cluster.room_owner("lively").await.unwrap().unwrap();
    let killed = Instant::now();
    cluster.shard_mut(&owner).unwrap().node.kill9().unwrap();
    let left = human.next_event_named("room.left", WAIT).await.unwrap();
    assert_eq!(left.d["reason"], "unavailable");
    human.join_retrying(&room, None, WAIT).await.unwrap();
    // Robot chat again, from the next owner, within TTL + 2 s of the kill.
    let mut last_epoch = 0;
    let mut resumed = None;
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        let Ok(ev) = human.next_event_named("chat", WAIT).await else {
            break;
        };
        let epoch = ev.epoch.unwrap();
        assert!(
            epoch >= last_epoch,
            "an event of epoch {epoch} after one of {last_epoch}: two runtimes"
        );
        last_epoch = epoch;
        if epoch > first.epoch.unwrap() && resumed.is_none() {
            resumed = Some(killed.elapsed());
        }
        if resumed.is_some_and(|r| killed.elapsed() > r + Duration::from_secs(1)) {
            break;
        }
    }
    let resumed = resumed.expect("the robots never came back");
    eprintln!(
        "ROBOTS RESUMED after kill -9: {} ms (TTL {} ms)",
        resumed.as_millis(),
        ttl.as_millis()
    );
    assert!(
        resumed <= ttl + Duration::from_secs(2),
        "robots resumed after {resumed:?}"
    );
    let (new_owner, _) = cluster.room_owner("lively").await.unwrap().unwrap();
    assert_ne!(new_owner, owner);
}

#[tokio::test]
async fn robots_move_with_their_room() {
    let (cluster, _dir) =
        cluster_with(ClusterOptions::default(), "robot_reconcile_ms = 250\n").await;
    store(&cluster)
        .await
        .put(&RoomId::from("mover"), chatty("mover", 0.2))
        .await
        .unwrap();
    let room = RoomId::from("mover");
    wait_sum(&cluster, "chorus_robot_runtime_starts_total", 1.0, WAIT).await;
    let mut human = cluster.connect(0, "human").await.unwrap();
    human.join_retrying(&room, None, WAIT).await.unwrap();
    let before = human.next_event_named("chat", WAIT).await.unwrap();
    let (owner, _) = cluster.room_owner("mover").await.unwrap().unwrap();
    let target = cluster.other_shard(&owner).unwrap();
    let r = cluster.move_room("mover", &target).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    // The robots speak again from the new owner; the human was moved without a room.left.
    let deadline = Instant::now() + WAIT;
    loop {
        let ev = human.next_event(WAIT).await.unwrap();
        assert_ne!(ev.ev, "room.left", "a planned move evicts nobody");
        if ev.ev == "chat" && ev.epoch > before.epoch {
            assert_eq!(ev.d["robot"], true);
            break;
        }
        assert!(Instant::now() < deadline, "no robot chat after the move");
    }
    let (now_owner, _) = cluster.room_owner("mover").await.unwrap().unwrap();
    assert_eq!(now_owner, target);
    let on_target = cluster.shard(&target).unwrap().admin;
    let starts = kit::admin::metric(on_target, "chorus_robot_runtime_starts_total")
        .await
        .unwrap();
    assert_eq!(starts, 1.0, "the robots started on the new owner");
}

/// Robots set to visit a room that does not exist (deleted after they were configured) are
/// not loaded at every reconcile pass, a lease claim and a ledger fence each time: once found
/// roomless, the room is left alone until its configuration changes or the room is created,
/// when the robots come.
#[tokio::test]
async fn robots_visiting_a_room_that_is_gone_are_not_loaded_every_pass() {
    let (cluster, _dir) = cluster_with(
        ClusterOptions {
            shards: 1,
            gateways: 1,
            ..ClusterOptions::default()
        },
        "robot_reconcile_ms = 100\n",
    )
    .await;
    let room = RoomId::from("gone");
    let visiting = json!({
        "room": "gone",
        "create": false,
        "robots": [{"id": "bot:visitor"}],
        "chat": {"every_s": 0.5, "phrases": ["hello?"]},
    });
    store(&cluster)
        .await
        .put(&room, visiting.to_string().into_bytes())
        .await
        .unwrap();
    let claims = "chorus_lease_acquired_total";
    assert_eq!(wait_sum(&cluster, claims, 1.0, WAIT).await, 1.0);
    // Twenty passes: each would have claimed the room again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(shard_sum(&cluster, claims).await, 1.0);
    assert_eq!(
        shard_sum(&cluster, "chorus_robot_runtime_starts_total").await,
        0.0
    );
    // A member creates the room: its runtime reads the configuration, and the robots come.
    let mut human = cluster.connect(0, "human").await.unwrap();
    human
        .create_room(json!({"room": "gone", "title": "back"}))
        .await
        .unwrap();
    human.join(&room, false, None).await.unwrap();
    let hello = human.next_event_named("chat", WAIT).await.unwrap();
    assert_eq!(hello.d["robot"], true);
}
