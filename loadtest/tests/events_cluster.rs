//! The event webhook in a cluster, with real processes: each shard sends the events of the
//! rooms it runs, and a planned move of a room shows the app no one leaving or joining; the
//! new owner goes on where the old one stopped.
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use kit::cluster::{Cluster, ClusterOptions};
use kit::hooks::Receiver;
use serde_json::{Value, json};
use shard::events::signature;
use tokio::time::Instant;

use crate::support;

use support::WAIT;

const HOOK_SECRET: &str = "cluster-event-webhook-secret";

#[tokio::test]
async fn a_planned_move_shows_the_app_nobody_leaving_and_the_new_owner_goes_on() {
    let mut hooks = Receiver::start(0).await.unwrap();
    let cluster = Cluster::start(ClusterOptions {
        shards: 2,
        gateways: 1,
        env: vec![
            ("CHORUS_EVENTS_WEBHOOK_URL".into(), hooks.url.clone()),
            ("CHORUS_EVENTS_WEBHOOK_SECRET".into(), HOOK_SECRET.into()),
        ],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let mut alice = cluster.connect(0, "alice").await.unwrap();
    let room = alice
        .create_room(json!({"room": "moving", "seats": 4}))
        .await
        .unwrap();
    alice.join(&room, false, None).await.unwrap();
    let mut bob = cluster.connect(0, "bob").await.unwrap();
    bob.join_retrying(&room, None, WAIT).await.unwrap();

    let (owner, _) = cluster.room_owner("moving").await.unwrap().unwrap();
    let target = cluster.other_shard(&owner).unwrap();
    let r = cluster.move_room("moving", &target).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let deadline = Instant::now() + WAIT;
    while cluster
        .room_owner("moving")
        .await
        .ok()
        .flatten()
        .map(|o| o.0)
        != Some(target.clone())
    {
        assert!(Instant::now() < deadline, "the move never completed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Commands wait for the members' rejoin at the new owner, then go there.
    alice
        .request("seat.take", json!({"room": room, "seat": 1}))
        .await
        .unwrap();
    bob.request("room.leave", json!({"room": room}))
        .await
        .unwrap();

    let (events, refused) = hooks
        .delivered_until(
            |e| e["kind"] == "member.left" && e["data"]["user"] == "bob",
            WAIT * 2,
            |post| {
                let want = signature(HOOK_SECRET.as_bytes(), &post.timestamp, &post.body);
                assert_eq!(post.signature, want, "every batch is signed");
            },
        )
        .await;
    assert!(refused.is_empty());
    let seen: Vec<(String, Value, String)> = events
        .iter()
        .map(|e| {
            let user = e["data"]["user"].clone();
            let by = e["data"]["by"].clone();
            let who = if user.is_null() { by } else { user };
            (
                e["kind"].as_str().unwrap().to_owned(),
                who,
                e["node"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("room.created".into(), json!("alice"), owner.clone()),
            ("member.joined".into(), json!("alice"), owner.clone()),
            ("member.joined".into(), json!("bob"), owner.clone()),
            ("seat.changed".into(), json!("alice"), target.clone()),
            ("member.left".into(), json!("bob"), target.clone()),
        ],
        "no leave or join for the move, and the new owner sends what follows it"
    );
}
