//! Sends room commands to the shard that runs the room.
//!
//! Standalone mode has one in-process shard. A cluster routes by the placement ring over the
//! shard links; a shard that does not hold the room's lease answers `UNAVAILABLE` with the
//! owner it knows, and the gateway retries (see `Core::from_shard`).

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use protocol::link::{Command, ToShard};
use protocol::ring::Ring;
use protocol::{NodeId, RoomId};
use shard::Shard;

use crate::link::ShardLink;

/// Where room commands go.
#[derive(Clone)]
pub enum Router {
    /// The in-process shard of standalone mode.
    Local(Shard),
    /// Shards reached over links, placed by the ring.
    Cluster(Arc<Routes>),
}

/// The ring and the links of a cluster gateway.
pub struct Routes {
    ring: RwLock<Arc<Ring>>,
    links: RwLock<HashMap<NodeId, Arc<ShardLink>>>,
}

impl Default for Routes {
    fn default() -> Self {
        Self {
            ring: RwLock::new(Arc::new(Ring::new(
                0,
                &[],
                protocol::ring::DEFAULT_VNODES_PER_WEIGHT,
            ))),
            links: RwLock::new(HashMap::new()),
        }
    }
}

impl Routes {
    /// The current ring.
    pub fn ring(&self) -> Arc<Ring> {
        self.ring
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the ring.
    pub fn set_ring(&self, ring: Ring) {
        *self.ring.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(ring);
    }

    /// Whether a link to `node` exists.
    pub(crate) fn has_link(&self, node: &NodeId) -> bool {
        self.links
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(node)
    }

    pub(crate) fn add_link(&self, link: Arc<ShardLink>) {
        self.links
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(link.node.clone(), link);
    }

    fn link(&self, node: &NodeId) -> Option<Arc<ShardLink>> {
        self.links
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(node)
            .cloned()
    }

    /// The shard the ring places `room` on.
    pub fn owner(&self, room: &RoomId) -> Option<NodeId> {
        self.ring().owner(room).cloned()
    }
}

impl Router {
    /// Hands a command to the room's shard (or to `hint`, the owner a shard named); never
    /// waits. False when no shard can take it now (the caller retries).
    pub(crate) fn send(&self, cmd: Command, hint: Option<&NodeId>) -> bool {
        match self {
            Self::Local(shard) => {
                shard.dispatch(ToShard::Command(cmd));
                true
            }
            Self::Cluster(routes) => {
                let hinted = hint.and_then(|h| routes.link(h)).filter(|l| l.is_up());
                let link = match hinted {
                    Some(l) => l,
                    None => match routes.owner(&cmd.room).and_then(|o| routes.link(&o)) {
                        Some(l) => l,
                        None => return false,
                    },
                };
                link.send(ToShard::Command(cmd))
            }
        }
    }
}
