//! Staying in the ring and reading it: a node's heartbeat loop, the wait for the next
//! membership change, and the placement computed from a membership view.

use std::collections::HashSet;
use std::time::Duration;

use protocol::ring::{DEFAULT_VNODES_PER_WEIGHT, Placement, Ring};
use protocol::{NodeId, RoomId};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Membership, NodeSpec, RingView, RingWatch};

/// How often a node stamps its heartbeat.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// A shard whose heartbeat is older than this gets no new rooms: three missed heartbeats.
pub const STALE_AFTER: Duration = Duration::from_secs(3);
/// How often a node re-reads the membership even without a pub/sub message.
pub const RING_REFRESH: Duration = Duration::from_secs(1);

impl RingView {
    /// The ids of members whose heartbeat is older than [`STALE_AFTER`].
    pub fn stale_ids(&self) -> HashSet<NodeId> {
        self.stale(STALE_AFTER)
            .into_iter()
            .map(|n| n.id.clone())
            .collect()
    }

    /// The live, weighted room-owning members (fresh heartbeat, a link address, weight above
    /// 0): the shards rooms are placed on.
    pub fn live_shards(&self) -> Vec<(NodeId, u32)> {
        let stale = self.stale_ids();
        self.nodes
            .iter()
            .filter(|n| n.role.owns_rooms() && !n.link_addr.is_empty())
            .filter(|n| !stale.contains(&n.id) && n.weight > 0)
            .map(|n| (n.id.clone(), n.weight))
            .collect()
    }

    /// Where rooms belong: the ring over `live` (see [`RingView::live_shards`]) plus the
    /// operators' pins. Every node computes the same placement from the same view.
    pub fn placement(&self, live: &[(NodeId, u32)]) -> Placement {
        let ring = Ring::new(self.version, live, DEFAULT_VNODES_PER_WEIGHT);
        let pins = self
            .pins
            .iter()
            .map(|(r, n)| (RoomId::from(r.as_str()), n.clone()));
        Placement::new(ring, pins)
    }
}

impl Membership {
    /// Heartbeats `spec` (joined with `weight`) every [`HEARTBEAT_INTERVAL`] until `shutdown`,
    /// then leaves the ring. A membership that went backwards means Redis lost its data: the
    /// node joins again with the last weight it read for itself, so a drained node stays
    /// drained. One that moved on without the node means an operator removed it: it stays out
    /// until it restarts.
    pub async fn keep_in_ring(self, spec: NodeSpec, weight: u32, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(HEARTBEAT_INTERVAL);
        let mut seen_version = 0;
        let mut weight = weight;
        let mut removed = false;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            match self.heartbeat(&spec.id).await {
                Ok(true) => {
                    removed = false;
                    if let Ok(view) = self.list().await {
                        seen_version = seen_version.max(view.version);
                        if let Some(me) = view.get(&spec.id) {
                            weight = me.weight;
                        }
                    }
                }
                Ok(false) => {
                    let version = self.list().await.map(|v| v.version).unwrap_or(0);
                    if version < seen_version || seen_version == 0 {
                        info!(node = %spec.id, weight, "Not in the ring (membership lost); joining.");
                        match self.join(&spec, weight).await {
                            Ok(v) => seen_version = v,
                            Err(e) => warn!(error = %e, "Ring join failed."),
                        }
                    } else if !removed {
                        removed = true;
                        warn!(node = %spec.id, "Removed from the ring by an operator; staying out until restarted.");
                    }
                }
                Err(e) => warn!(error = %e, "Heartbeat failed."),
            }
        }
        if let Err(e) = self.remove(&spec.id).await {
            warn!(error = %e, "Could not leave the ring on shutdown.");
        }
    }

    /// Waits for the next membership change: a pub/sub message on `watch` or the periodic
    /// re-read timer ([`RING_REFRESH`]; messages sent while disconnected are lost). A lost
    /// watch is opened again. Returns false on shutdown.
    pub async fn next_change(
        &self,
        watch: &mut Option<RingWatch>,
        shutdown: &CancellationToken,
    ) -> bool {
        let changed = async {
            match watch.as_mut() {
                Some(w) => w.changed().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return false,
            () = tokio::time::sleep(RING_REFRESH) => {}
            c = changed => if c.is_none() { *watch = self.watch().await.ok(); },
        }
        true
    }
}
