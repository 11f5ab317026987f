//! App-defined room messages in a cluster, with real processes: a volatile `custom` crosses
//! gateways, the app backend's system message is sent through either gateway's admin API, and
//! a member who resumes after the owner is killed is replayed the sequenced messages (from the
//! fenced history the new owner loads) and none of the volatile ones, and finds the room's
//! attributes as the old owner left them.
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::net::SocketAddr;

use kit::cluster::Cluster;
use protocol::RoomId;
use serde_json::{Value, json};

use crate::support;

use support::WAIT;

async fn post(cluster: &Cluster, admin: SocketAddr, room: &RoomId, body: Value) -> (u16, Value) {
    let path = format!("/admin/rooms/{room}/messages");
    let token = Some(cluster.admin_token.as_str());
    let r = kit::admin::call(admin, "POST", &path, token, Some(body))
        .await
        .unwrap();
    (r.status, r.json())
}

#[tokio::test]
async fn messages_cross_gateways_and_the_sequenced_ones_survive_a_killed_owner() {
    let mut cluster = Cluster::of(2, 2).await.unwrap();
    let (g0, g1) = (cluster.gateways[0].admin, cluster.gateways[1].admin);
    let room = RoomId::from("notices");
    let mut alice = cluster.connect(0, "alice").await.unwrap();
    let mut bob = cluster.connect(1, "bob").await.unwrap();
    alice.join_retrying(&room, None, WAIT).await.unwrap();
    bob.join_retrying(&room, None, WAIT).await.unwrap();
    // Volatile, from a member on the other gateway.
    bob.request(
        "custom.send",
        json!({"room": room, "type": "like", "volatile": true}),
    )
    .await
    .unwrap();
    for c in [&mut alice, &mut bob] {
        let ev = c.next_event_named("custom", WAIT).await.unwrap();
        assert_eq!(
            (ev.seq, ev.d),
            (None, json!({"from": "bob", "type": "like"}))
        );
    }
    // The app backend, through the second gateway: both members get it, sequenced.
    let (st, out) = post(
        &cluster,
        g1,
        &room,
        json!({"type": "notice", "data": "one"}),
    )
    .await;
    assert_eq!(st, 200, "{out}");
    let seq = out["seq"].as_u64().unwrap();
    for c in [&mut alice, &mut bob] {
        let ev = c.next_event_named("custom", WAIT).await.unwrap();
        assert_eq!(ev.seq, Some(seq), "{ev:?}");
        assert_eq!(
            ev.d,
            json!({"system": true, "type": "notice", "data": "one"})
        );
    }
    // Bob goes; the room goes on without him, then its owner is killed.
    let since = bob.since(&room).unwrap();
    bob.close().await;
    let (st, _) = post(
        &cluster,
        g0,
        &room,
        json!({"type": "notice", "data": "two"}),
    )
    .await;
    assert_eq!(st, 200);
    let (st, _) = post(
        &cluster,
        g0,
        &room,
        json!({"type": "gone", "volatile": true}),
    )
    .await;
    assert_eq!(st, 200);
    alice
        .request("custom.send", json!({"room": room, "type": "kept"}))
        .await
        .unwrap();
    alice
        .request(
            "custom.send",
            json!({"room": room, "type": "gone", "volatile": true}),
        )
        .await
        .unwrap();
    // The owner's room attributes are state: the next owner starts from them.
    alice
        .request(
            "room.attrs",
            json!({"room": room, "set": {"theme": "night"}}),
        )
        .await
        .unwrap();
    let (owner, _) = cluster.room_owner("notices").await.unwrap().unwrap();
    cluster.shard_mut(&owner).unwrap().node.kill9().unwrap();
    // Bob comes back through the other gateway, from where he was.
    let mut bob = cluster.connect(0, "bob").await.unwrap();
    bob.set_position(&room, since.epoch, since.seq);
    let ok = bob.join_retrying(&room, None, WAIT * 4).await.unwrap();
    assert_eq!(ok["resync"], false, "the history moved with the room: {ok}");
    assert_eq!(ok["snapshot"]["attrs"], json!({"theme": "night"}));
    let replayed: Vec<Value> = bob
        .queued_events()
        .iter()
        .filter(|e| e.ev == "custom")
        .map(|e| json!([e.d["type"], e.d["data"]]))
        .collect();
    assert_eq!(replayed, [json!(["notice", "two"]), json!(["kept", null])]);
    // The new owner takes the backend's messages too.
    let (st, out) = post(
        &cluster,
        g1,
        &room,
        json!({"type": "notice", "data": "three"}),
    )
    .await;
    assert_eq!(st, 200, "{out}");
    let ev = bob.next_event_named("custom", WAIT).await.unwrap();
    assert_eq!(ev.d["data"], "three");
}
