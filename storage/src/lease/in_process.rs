//! In-process lease engine: a mutex-guarded map on `tokio::time::Instant`.
//!
//! Same contract as the Redis engine, for standalone mode (one process owns every room) and for
//! paused-time tests (`tokio::time::pause()` drives expiry; Redis TTLs cannot be paused).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use protocol::{FencingToken, RoomId};
use tokio::time::Instant;

use super::ClaimOutcome;

/// Leases held in this process's memory; clones share the same map.
#[derive(Clone, Debug, Default)]
pub struct InProcessLeases {
    inner: Arc<Mutex<Leases>>,
}

#[derive(Debug, Default)]
struct Leases {
    held: HashMap<RoomId, Held>,
    /// Per-room fence counters; like Redis's `room:{R}:fence`, never reset or removed.
    fences: HashMap<RoomId, FencingToken>,
}

#[derive(Debug)]
struct Held {
    owner: Arc<str>,
    fence: FencingToken,
    expires_at: Instant,
}

impl Leases {
    /// The live lease of `room`, dropping it first if it expired at or before `now`.
    fn live(&mut self, room: &RoomId, now: Instant) -> Option<&mut Held> {
        if self.held.get(room).is_some_and(|h| h.expires_at <= now) {
            self.held.remove(room);
        }
        self.held.get_mut(room)
    }
}

impl InProcessLeases {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Leases> {
        // A panic while holding this lock cannot leave the map half-updated (each operation is
        // a few inserts), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// See [`super::LeaseStore::claim_above`].
    pub fn claim(
        &self,
        room: &RoomId,
        owner: &str,
        ttl: Duration,
        floor: FencingToken,
    ) -> ClaimOutcome {
        let now = Instant::now();
        let mut leases = self.lock();
        if let Some(held) = leases.live(room, now) {
            if *held.owner != *owner {
                return ClaimOutcome::HeldBy {
                    owner: held.owner.to_string(),
                    fence: held.fence,
                };
            }
            // The caller's own lease: its token again, unless a runtime already wrote with
            // it (the floor says so), which a new ownership must not do under the same token.
            if held.fence > floor {
                held.expires_at = now + ttl;
                return ClaimOutcome::Acquired { fence: held.fence };
            }
        }
        let counter = leases.fences.entry(room.clone()).or_insert(0);
        *counter = (*counter).max(floor) + 1;
        let fence = *counter;
        leases.held.insert(
            room.clone(),
            Held {
                owner: owner.into(),
                fence,
                expires_at: now + ttl,
            },
        );
        ClaimOutcome::Acquired { fence }
    }

    /// See [`super::LeaseStore::renew`].
    pub fn renew(
        &self,
        owner: &str,
        leases: &[(RoomId, FencingToken)],
        ttl: Duration,
    ) -> Vec<bool> {
        let now = Instant::now();
        let mut map = self.lock();
        leases
            .iter()
            .map(|(room, fence)| match map.live(room, now) {
                Some(held) if *held.owner == *owner && held.fence == *fence => {
                    held.expires_at = now + ttl;
                    true
                }
                _ => false,
            })
            .collect()
    }

    /// See [`super::LeaseStore::release`].
    pub fn release(&self, room: &RoomId, owner: &str, fence: FencingToken) -> bool {
        let now = Instant::now();
        let mut map = self.lock();
        match map.live(room, now) {
            Some(held) if *held.owner == *owner && held.fence == fence => {
                map.held.remove(room);
                true
            }
            _ => false,
        }
    }

    /// See [`super::LeaseStore::holder`].
    pub fn holder(&self, room: &RoomId) -> Option<(String, FencingToken)> {
        let now = Instant::now();
        self.lock()
            .live(room, now)
            .map(|h| (h.owner.to_string(), h.fence))
    }

    /// Makes every token granted for `room` from now on greater than `floor`: standalone mode
    /// seeds the counters from the durable high-water tokens in `rooms.db` at start, since this
    /// in-memory counter restarts at zero with the process.
    pub fn raise_fence_floor(&self, room: &RoomId, floor: FencingToken) {
        let mut leases = self.lock();
        let counter = leases.fences.entry(room.clone()).or_insert(0);
        *counter = (*counter).max(floor);
    }

    /// Whether `fence` is the token of `room`'s live lease (the fencing check of the SQLite
    /// snapshot engine).
    pub fn is_live(&self, room: &RoomId, fence: FencingToken) -> bool {
        self.holder(room).is_some_and(|(_, f)| f == fence)
    }
}
