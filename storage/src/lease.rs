//! Room leases with fencing tokens: claim, batched renew, release, holder.
//!
//! Only the holder of a room's lease runs the room (docs/ARCHITECTURE.md, section 4). Each successful claim of a
//! free lease gets a fencing token from a per-room counter that never resets, so tokens strictly
//! increase across owners and across expiry; every write the room makes to shared state carries
//! its token (the snapshot store's fenced writes) and is rejected unless it is the live lease's.
//!
//! # Engines
//! - [`RedisLeases`] (`lease/redis.rs`): atomic Lua scripts. Keys
//!   `room:{R}:lease` (hash `owner`, `fence`; `PEXPIRE` = TTL) and `room:{R}:fence` (counter,
//!   no TTL). Renewal of all a node's leases is one round trip.
//! - [`InProcessLeases`] (`lease/in_process.rs`): a mutex-guarded map on
//!   `tokio::time::Instant`, for standalone mode and paused-time tests.
//!
//! # Client-side timing rule (self-fencing)
//! Take `t0 = tokio::time::Instant::now()` **before** sending a claim or renew. When it
//! succeeds, the holder may act until `deadline = t0 + ttl - safety_margin`, where
//! `safety_margin >= Redis RTT + clock drift × ttl` (≥ 250–500 ms for a 10 s TTL; see
//! [`MIN_SAFETY_MARGIN`]). Renew every `ttl / 3` from a dedicated task (never piggy-backed on
//! room traffic). Before every side effect check `now < deadline`; at the deadline stop the
//! room. A renew that returns `false` for a room, or an error that lasts until the deadline,
//! means the room is lost: cancel its runtime at once.

mod in_process;
mod redis;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use protocol::{FencingToken, NodeId, RoomId};

pub use self::in_process::InProcessLeases;
pub use self::redis::{RENEW_CHUNK_MAX, RedisLeases};
use crate::error::Result;

/// The smallest safety margin a holder should subtract from its local deadline: covers a
/// loopback/LAN round trip plus clock-rate drift over a 10 s TTL.
pub const MIN_SAFETY_MARGIN: Duration = Duration::from_millis(500);

/// Who holds a lease: `"<node_id>/<boot_id>"`. Derefs to `&str`, which is what the store
/// functions take (any string of that shape works).
///
/// The boot id is random per process, so a restarted node is a *new* owner: it must wait for its
/// former self's lease to expire and cannot inherit its fencing token.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseOwner(Arc<str>);

impl LeaseOwner {
    /// The owner string for `node` in this process (uses [`boot_id`]).
    pub fn for_this_process(node: &NodeId) -> Self {
        Self::new(node, boot_id())
    }

    /// The owner string for `node` with an explicit `boot` id (tests simulate restarts with it).
    pub fn new(node: &NodeId, boot: &str) -> Self {
        Self(format!("{node}/{boot}").into())
    }

    /// The owner as stored in the lease: `"<node_id>/<boot_id>"`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The node part of the owner string.
    pub fn node(&self) -> &str {
        node_of(&self.0)
    }
}

impl std::ops::Deref for LeaseOwner {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for LeaseOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The node part of an owner string such as `"s1/4f2a…"` (the whole string if it has no `/`).
pub fn node_of(owner: &str) -> &str {
    owner.split_once('/').map_or(owner, |(node, _)| node)
}

/// This process's boot id: 128 random bits in hex, drawn once per process.
pub fn boot_id() -> &'static str {
    static BOOT_ID: OnceLock<String> = OnceLock::new();
    BOOT_ID.get_or_init(|| format!("{:032x}", rand::random::<u128>()))
}

/// The result of a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The caller holds the lease with this token. Re-claiming a lease the caller already holds
    /// extends it and keeps its token.
    Acquired {
        /// The token every write of this ownership must carry.
        fence: FencingToken,
    },
    /// Someone else holds the lease; retry after it expires or is released.
    HeldBy {
        /// The holder's owner string, `"<node_id>/<boot_id>"`.
        owner: String,
        /// The holder's token.
        fence: FencingToken,
    },
}

/// Lease store: one of the two engines, cheap to clone, no dyn dispatch.
#[derive(Clone, Debug)]
pub enum LeaseStore {
    /// In-process map (standalone mode, paused-time tests).
    InProcess(InProcessLeases),
    /// Redis with atomic Lua scripts.
    Redis(RedisLeases),
}

impl LeaseStore {
    /// A fresh, empty in-process store.
    pub fn in_process() -> Self {
        Self::InProcess(InProcessLeases::new())
    }

    /// A Redis-backed store on `redis`'s shared connection.
    pub fn redis(redis: &crate::redis::Redis) -> Self {
        Self::Redis(RedisLeases::new(redis))
    }

    /// Loads the Redis scripts into Redis' script cache (nothing to do in process). A node
    /// does it before it claims rooms: otherwise every room claimed at once at start, or
    /// after a Redis restart, finds the script missing and loads it itself.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn preload(&self) -> Result<()> {
        match self {
            Self::InProcess(_) => Ok(()),
            Self::Redis(r) => r.preload().await,
        }
    }

    /// Claims `room` for `owner` for `ttl`. See the module's timing rule for the deadline.
    ///
    /// # Errors
    /// [`crate::StorageError::Unavailable`] when Redis cannot be reached (the claim may or may
    /// not have happened: a retry by the same owner is safe, it keeps the token).
    pub async fn claim(&self, room: &RoomId, owner: &str, ttl: Duration) -> Result<ClaimOutcome> {
        self.claim_above(room, owner, ttl, 0).await
    }

    /// Like [`LeaseStore::claim`], but the token granted is greater than `floor` (a durable
    /// high-water mark, for when Redis lost its fence counter). That
    /// holds for the owner's own live lease too: it keeps its token only while the token is
    /// above `floor`. At or below it, a runtime of this owner has already written with the token
    /// (and stopped without releasing it, e.g. past its lease deadline), so the owner gets a new
    /// one: a new runtime starts a new epoch and never numbers events its predecessor numbered.
    ///
    /// # Errors
    /// As [`LeaseStore::claim`].
    pub async fn claim_above(
        &self,
        room: &RoomId,
        owner: &str,
        ttl: Duration,
        floor: FencingToken,
    ) -> Result<ClaimOutcome> {
        match self {
            Self::InProcess(s) => Ok(s.claim(room, owner, ttl, floor)),
            Self::Redis(s) => s.claim(room, owner, ttl, floor).await,
        }
    }

    /// Renews every `(room, token)` lease of `owner` for `ttl` in ONE round trip; entry `i` of
    /// the result says whether lease `i` was still held with that token (and is now extended).
    /// `false` means the room is lost: stop its runtime.
    ///
    /// # Errors
    /// [`crate::StorageError::Unavailable`] when Redis cannot be reached; the holder keeps its
    /// old deadline and must stop at it unless a later renew succeeds.
    pub async fn renew(
        &self,
        owner: &str,
        leases: &[(RoomId, FencingToken)],
        ttl: Duration,
    ) -> Result<Vec<bool>> {
        match self {
            Self::InProcess(s) => Ok(s.renew(owner, leases, ttl)),
            Self::Redis(s) => s.renew(owner, leases, ttl).await,
        }
    }

    /// Releases `room` if `owner` holds it with `fence` (compare-and-delete); `false` otherwise.
    ///
    /// # Errors
    /// [`crate::StorageError::Unavailable`] when Redis cannot be reached.
    pub async fn release(&self, room: &RoomId, owner: &str, fence: FencingToken) -> Result<bool> {
        match self {
            Self::InProcess(s) => Ok(s.release(room, owner, fence)),
            Self::Redis(s) => s.release(room, owner, fence).await,
        }
    }

    /// The live holder of `room` and its token, if the lease is held.
    ///
    /// # Errors
    /// [`crate::StorageError::Unavailable`] when Redis cannot be reached;
    /// [`crate::StorageError::Corrupt`] when the stored lease cannot be read.
    pub async fn holder(&self, room: &RoomId) -> Result<Option<(String, FencingToken)>> {
        match self {
            Self::InProcess(s) => Ok(s.holder(room)),
            Self::Redis(s) => s.holder(room).await,
        }
    }
}

/// Redis key of a room's lease hash. The `{R}` hash tag keeps all of a room's keys in one
/// cluster slot, so each per-room script stays single-slot.
pub(crate) fn lease_key(room: &RoomId) -> String {
    format!("room:{{{room}}}:lease")
}

/// Redis key of a room's fence counter (never expires, never resets).
pub(crate) fn fence_key(room: &RoomId) -> String {
    format!("room:{{{room}}}:fence")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_strings() {
        let owner = LeaseOwner::new(&NodeId::from("s1"), "b00t");
        assert_eq!(owner.as_str(), "s1/b00t");
        assert_eq!(owner.node(), "s1");
        assert_eq!(node_of("plain"), "plain");
        let mine = LeaseOwner::for_this_process(&NodeId::from("s1"));
        assert_eq!(mine, LeaseOwner::for_this_process(&NodeId::from("s1")));
        assert_eq!(boot_id().len(), 32);
    }

    #[test]
    fn keys_share_a_hash_tag() {
        let room = RoomId::from("r1");
        assert_eq!(lease_key(&room), "room:{r1}:lease");
        assert_eq!(fence_key(&room), "room:{r1}:fence");
    }
}
