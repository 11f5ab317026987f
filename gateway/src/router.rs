//! Sends room commands to the shard that runs the room.
//!
//! Standalone mode has one in-process shard. A cluster routes by the placement ring over the
//! shard links; a shard that does not hold the room's lease answers `UNAVAILABLE` with the
//! owner it knows, and the gateway retries (see `Core::from_shard`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};

use protocol::link::Command;
use protocol::ring::{Placement, Ring};
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
    placement: RwLock<Arc<Placement>>,
    links: RwLock<HashMap<NodeId, Arc<ShardLink>>>,
    /// The ring without the shards whose link is down, cached for the down set it was built
    /// for: while a shard is unreachable its rooms go to their next owner at once, instead of
    /// waiting for its heartbeat to go stale.
    degraded: RwLock<Option<(Vec<NodeId>, Arc<Ring>)>>,
    /// The room-owning members with a fresh heartbeat, whatever their weight: a drained shard
    /// (weight 0) is off the ring but runs the rooms it has not handed off yet (one at a time,
    /// throttled), and is where their commands must go until then.
    live: RwLock<HashSet<NodeId>>,
}

impl Default for Routes {
    fn default() -> Self {
        Self {
            placement: RwLock::new(Arc::new(Placement::new(
                Ring::new(0, &[], protocol::ring::DEFAULT_VNODES_PER_WEIGHT),
                [],
            ))),
            links: RwLock::new(HashMap::new()),
            degraded: RwLock::new(None),
            live: RwLock::new(HashSet::new()),
        }
    }
}

impl Routes {
    /// The current placement.
    pub fn placement(&self) -> Arc<Placement> {
        self.placement
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the placement.
    pub fn set_placement(&self, p: Placement) {
        *self
            .placement
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(p);
    }

    /// Replaces the set of live room-owning members: those with a fresh heartbeat, on the
    /// ring or drained, to which a lease holder's hint may send a command.
    pub fn set_live(&self, live: HashSet<NodeId>) {
        *self.live.write().unwrap_or_else(PoisonError::into_inner) = live;
    }

    /// Whether `node` is a room-owning member with a fresh heartbeat (on the ring or drained).
    fn is_live(&self, node: &NodeId) -> bool {
        self.live
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(node)
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

    /// The shard the placement puts `room` on.
    pub fn owner(&self, room: &RoomId) -> Option<NodeId> {
        self.placement().owner(room).cloned()
    }

    /// The shard to send `room`'s commands to: the ring owner, or, when its link is down, the
    /// owner on the ring of the reachable shards.
    fn reachable_owner(&self, room: &RoomId) -> Option<Arc<ShardLink>> {
        let placement = self.placement();
        let owner = placement.owner(room)?;
        if let Some(l) = self.link(owner).filter(|l| l.is_up()) {
            return Some(l);
        }
        let ring = placement.ring();
        let down: Vec<NodeId> = ring
            .nodes()
            .iter()
            .filter(|(n, _)| !self.link(n).is_some_and(|l| l.is_up()))
            .map(|(n, _)| n.clone())
            .collect();
        let cached = self
            .degraded
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|(d, r)| *d == down && r.version() == ring.version())
            .map(|(_, r)| r.clone());
        let degraded = match cached {
            Some(r) => r,
            None => {
                let up: Vec<(NodeId, u32)> = ring
                    .nodes()
                    .iter()
                    .filter(|(n, _)| !down.contains(n))
                    .cloned()
                    .collect();
                let r = Arc::new(Ring::new(
                    ring.version(),
                    &up,
                    protocol::ring::DEFAULT_VNODES_PER_WEIGHT,
                ));
                *self
                    .degraded
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = Some((down, r.clone()));
                r
            }
        };
        let owner = degraded.owner(room)?;
        self.link(owner)
    }
}

impl Router {
    /// The membership version of the placement in use (`None` in standalone).
    pub fn placement_version(&self) -> Option<u64> {
        match self {
            Self::Local(_) => None,
            Self::Cluster(r) => Some(r.placement().ring().version()),
        }
    }

    /// The shard that takes `room`'s commands now (or `hint`, the owner a shard named); never
    /// waits. `None` when no shard can take them now (the caller retries).
    pub(crate) fn route(&self, room: &RoomId, hint: Option<&NodeId>) -> Option<Route<'_>> {
        match self {
            Self::Local(shard) => Some(Route::Local(shard)),
            Self::Cluster(routes) => {
                // Follow a shard's hint only to a live member: a dead ex-owner (stale
                // heartbeat, or removed) still named by its unexpired lease must not receive
                // commands. A drained one (weight 0, off the ring) is live: it runs the rooms
                // it has not handed off yet, and the ring's owner names it until it does.
                let hinted = hint
                    .filter(|h| routes.is_live(h))
                    .and_then(|h| routes.link(h))
                    .filter(|l| l.is_up());
                hinted
                    .or_else(|| routes.reachable_owner(room))
                    .map(Route::Link)
            }
        }
    }
}

/// Where one command goes.
pub(crate) enum Route<'a> {
    /// The in-process shard.
    Local(&'a Shard),
    /// A shard over its link.
    Link(Arc<ShardLink>),
}

impl Route<'_> {
    /// The shard at the other end of a link (`None` in process: it cannot go down alone).
    pub(crate) fn shard(&self) -> Option<&NodeId> {
        match self {
            Self::Local(_) => None,
            Self::Link(l) => Some(&l.node),
        }
    }

    /// Hands the command over; false when the link could not take it.
    pub(crate) fn send(self, cmd: Command) -> bool {
        match self {
            Self::Local(shard) => {
                shard.dispatch(cmd);
                true
            }
            Self::Link(link) => link.send(cmd),
        }
    }
}
