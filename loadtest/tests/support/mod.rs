//! What the cluster test files share: the usual wait, a one-shard cluster, alice and bob in a
//! room, and the metrics they read.

use std::time::Duration;

use kit::client::Client;
use kit::cluster::{Cluster, ClusterOptions};
use protocol::RoomId;

/// How long a test waits for one step.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// Alice and Bob, both through the first gateway, joined to `room`.
pub(crate) async fn alice_and_bob_in(cluster: &Cluster, room: &RoomId) -> (Client, Client) {
    let mut a = cluster.connect(0, "alice").await.unwrap();
    let mut b = cluster.connect(0, "bob").await.unwrap();
    a.join_retrying(room, None, WAIT).await.unwrap();
    b.join_retrying(room, None, WAIT).await.unwrap();
    (a, b)
}

/// One shard and one gateway with 2-s leases: one process runs every room, and its runtime
/// stops soon after Redis stops answering.
pub(crate) async fn one_shard_cluster() -> Cluster {
    Cluster::start(ClusterOptions {
        shards: 1,
        gateways: 1,
        lease_ttl: Duration::from_secs(2),
        ..ClusterOptions::default()
    })
    .await
    .unwrap()
}

/// The events `c` receives up to its `room.left` (reason `unavailable`), which ends the list.
pub(crate) async fn events_until_room_left(c: &mut Client) -> Vec<kit::client::Event> {
    let mut seen = Vec::new();
    loop {
        let e = c.next_event(WAIT).await.unwrap();
        if e.ev == "room.left" {
            assert_eq!(e.d["reason"], "unavailable", "{e:?}");
            return seen;
        }
        seen.push(e);
    }
}

/// History writes a shard's rooms could not make (not fenced), and so did not publish.
pub(crate) const HISTORY_FAILED: &str = "chorus_shard_history_write_failures_total";
