//! The lease keeper: claims a room's lease before its runtime starts, renews all of the node's
//! leases in one round trip every TTL/3 on a timer (never on room traffic), and cancels a
//! room's runtime the moment its lease is lost or cannot be proven before the local deadline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protocol::{FencingToken, NodeId, RoomId};
use storage::StorageError;
use storage::lease::{ClaimOutcome, LeaseOwner, LeaseStore, node_of};
use tokio::time::{Instant, MissedTickBehavior, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::metrics as m;

/// Safety margin taken off the TTL for the local deadline: covers clock drift between this
/// process and the lease store, and the time to stop a runtime.
const LOCAL_DEADLINE_MARGIN_DIVISOR: u32 = 10;

/// The outcome of claiming a room.
#[derive(Debug)]
pub(crate) enum Claim {
    /// This node owns the room: run it with this fence; stop when `token` is cancelled.
    Acquired {
        fence: FencingToken,
        token: CancellationToken,
        valid: Validity,
    },
    /// Another node holds the lease.
    HeldBy { owner: Option<NodeId> },
}

/// Until when a lease is proven held: milliseconds after the keeper's base instant, shared
/// between the keeper (which extends it) and the room (which checks it before every command).
pub(crate) type Validity = Arc<AtomicU64>;

#[derive(Debug)]
struct Held {
    fence: FencingToken,
    token: CancellationToken,
    /// The lease is proven held until this local instant.
    valid_until: Instant,
    valid: Validity,
}

/// Keeps the node's leases.
#[derive(Debug)]
pub(crate) struct Owner {
    store: LeaseStore,
    /// `<node id>/<boot id>`: a restarted process is a different owner.
    owner_id: LeaseOwner,
    ttl: Duration,
    held: Mutex<HashMap<RoomId, Held>>,
    /// Claim floors learnt from the ledger's fences.
    floors: Mutex<HashMap<RoomId, FencingToken>>,
    /// The instant validity times count from.
    base: Instant,
    /// Test-only: renew a room's lease when it has traffic instead of on the timer (the seed
    /// incident's bug). Never set in production.
    renew_on_traffic: bool,
}

impl Owner {
    pub(crate) fn new(
        store: LeaseStore,
        node: &NodeId,
        ttl: Duration,
        renew_on_traffic: bool,
    ) -> Self {
        Self {
            store,
            owner_id: LeaseOwner::for_this_process(node),
            ttl,
            held: Mutex::new(HashMap::new()),
            floors: Mutex::new(HashMap::new()),
            base: Instant::now(),
            renew_on_traffic,
        }
    }

    /// The owner string written into leases.
    pub(crate) fn owner_id(&self) -> &str {
        self.owner_id.as_str()
    }

    fn ms_since_base(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.base).as_millis() as u64
    }

    /// Whether the lease behind `valid` is still proven held now.
    pub(crate) fn proven(&self, valid: &Validity) -> bool {
        self.ms_since_base(Instant::now()) < valid.load(Ordering::Relaxed)
    }

    fn margin(&self) -> Duration {
        self.ttl / LOCAL_DEADLINE_MARGIN_DIVISOR
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RoomId, Held>> {
        // A poisoned map only means a panic elsewhere; the data is still consistent.
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Claims `room`'s lease; a new token is above `floor` (the durable high-water mark) and
    /// above every fence this process held for the room or learnt from the ledger: a lease
    /// store that lost its counters (Redis restarted without its data) must not hand this
    /// process a fence it already ran with, or two runtimes would share one epoch. The
    /// room's runtime may start only on `Acquired`.
    pub(crate) async fn claim(
        &self,
        room: &RoomId,
        floor: FencingToken,
    ) -> Result<Claim, StorageError> {
        let floor = floor.max(self.floor_of(room));
        let sent = Instant::now();
        match self
            .store
            .claim_above(room, &self.owner_id, self.ttl, floor)
            .await?
        {
            ClaimOutcome::Acquired { fence } => {
                metrics::counter!(m::LEASES_ACQUIRED).increment(1);
                self.raise_floor(room, fence);
                let token = CancellationToken::new();
                let valid_until = sent + self.ttl - self.margin();
                let valid = Arc::new(AtomicU64::new(self.ms_since_base(valid_until)));
                self.lock().insert(
                    room.clone(),
                    Held {
                        fence,
                        token: token.clone(),
                        valid_until,
                        valid: valid.clone(),
                    },
                );
                Ok(Claim::Acquired {
                    fence,
                    token,
                    valid,
                })
            }
            ClaimOutcome::HeldBy { owner, .. } => Ok(Claim::HeldBy {
                owner: Some(NodeId::from(node_of(&owner))),
            }),
        }
    }

    /// Releases `room`'s lease (compare-and-delete on the fence).
    pub(crate) async fn release(&self, room: &RoomId, fence: FencingToken) {
        self.forget(room, fence);
        if let Err(e) = self.store.release(room, &self.owner_id, fence).await {
            warn!(%room, fence, error = %e, "Lease release failed; it will expire.");
        }
    }

    /// Stops tracking `room` without touching the store (the lease is already lost).
    pub(crate) fn forget(&self, room: &RoomId, fence: FencingToken) {
        let mut held = self.lock();
        if held.get(room).is_some_and(|h| h.fence == fence) {
            held.remove(room);
        }
    }

    /// The floor of `room`'s next claim on this process (0 when none is known).
    fn floor_of(&self, room: &RoomId) -> FencingToken {
        self.floors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(room)
            .copied()
            .unwrap_or_default()
    }

    /// Makes the next claim of `room` start above `floor` (a fence this process held, or a
    /// higher one the ledger saw). One entry per room this process ever claimed.
    pub(crate) fn raise_floor(&self, room: &RoomId, floor: FencingToken) {
        let mut floors = self
            .floors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let f = floors.entry(room.clone()).or_default();
        *f = (*f).max(floor);
    }

    /// How many leases this node holds.
    pub(crate) fn held_count(&self) -> usize {
        self.lock().len()
    }

    /// The fence this node holds for `room`.
    pub(crate) fn fence_of(&self, room: &RoomId) -> Option<FencingToken> {
        self.lock().get(room).map(|h| h.fence)
    }

    /// Whether the test-only renew-on-traffic switch is on.
    pub(crate) fn renews_on_traffic(&self) -> bool {
        self.renew_on_traffic
    }

    /// Renews one room's lease now (only used by the test-only renew-on-traffic mode).
    pub(crate) async fn renew_one(&self, room: &RoomId) {
        let Some(fence) = self.fence_of(room) else {
            return;
        };
        self.renew(&[(room.clone(), fence)]).await;
    }

    /// Renews every held lease in one round trip; cancels the runtimes whose lease is gone.
    async fn renew(&self, leases: &[(RoomId, FencingToken)]) {
        if leases.is_empty() {
            return;
        }
        let sent = Instant::now();
        metrics::counter!(m::LEASE_RENEW_ROUND_TRIPS).increment(1);
        match self.store.renew(&self.owner_id, leases, self.ttl).await {
            Ok(results) => {
                let mut renewed = 0;
                let mut held = self.lock();
                for ((room, fence), ok) in leases.iter().zip(results) {
                    let Some(h) = held.get_mut(room) else {
                        continue;
                    };
                    if h.fence != *fence {
                        continue;
                    }
                    if ok {
                        renewed += 1;
                        h.valid_until = sent + self.ttl - self.margin();
                        h.valid
                            .store(self.ms_since_base(h.valid_until), Ordering::Relaxed);
                    } else {
                        metrics::counter!(m::LEASES_LOST).increment(1);
                        info!(%room, fence, "Lease lost; stopping the room runtime.");
                        h.token.cancel();
                        held.remove(room);
                    }
                }
                // One registry lookup per round, not per lease.
                metrics::counter!(m::LEASES_RENEWED).increment(renewed);
            }
            Err(e) => warn!(error = %e, leases = leases.len(), "Lease renewal failed."),
        }
    }

    /// The earliest local deadline of a held lease (far away when none is held).
    fn next_deadline(&self) -> Instant {
        self.lock()
            .values()
            .map(|h| h.valid_until)
            .min()
            .unwrap_or_else(|| Instant::now() + self.ttl)
    }

    /// Cancels runtimes whose lease could not be proven before its local deadline.
    fn expire_unproven(&self, now: Instant) {
        let mut held = self.lock();
        held.retain(|room, h| {
            if now >= h.valid_until {
                metrics::counter!(m::LEASES_LOST).increment(1);
                warn!(%room, fence = h.fence, "Lease not proven before its deadline; stopping.");
                h.token.cancel();
                false
            } else {
                true
            }
        });
    }

    /// The renewal loop: every TTL/3, one batched renewal of all held leases, driven by a
    /// timer and never by room traffic; and at each lease's local deadline, the stop of a
    /// runtime whose lease was not proven again by then, whether or not a renewal is still
    /// waiting for its answer (one to an unreachable store waits for its time-out, which may
    /// end after the deadline, or after the lease expired in the store). Runs until `shutdown`.
    pub(crate) async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        if self.renew_on_traffic {
            warn!("TEST-ONLY renew-on-traffic mode: leases of quiet rooms will expire.");
        }
        let mut tick = tokio::time::interval(self.ttl / 3);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = sleep_until(self.next_deadline()) => {
                    self.expire_unproven(Instant::now());
                    continue;
                }
                _ = tick.tick() => {}
            }
            if !self.renew_on_traffic {
                let leases: Vec<(RoomId, FencingToken)> = self
                    .lock()
                    .iter()
                    .map(|(r, h)| (r.clone(), h.fence))
                    .collect();
                let renewal = self.renew(&leases);
                tokio::pin!(renewal);
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = &mut renewal => break,
                        () = sleep_until(self.next_deadline()) => {
                            self.expire_unproven(Instant::now());
                        }
                    }
                }
            }
            self.expire_unproven(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::panic,
        reason = "test code: a failed unwrap is a failed test"
    )]

    use super::*;
    use kit::redis::RedisServer;

    /// A lease whose renewals go unanswered (Redis frozen: each waits for the 2 s response
    /// time-out) stops its runtime at its local deadline, not when a renewal gives up, which
    /// here is only when the lease has already expired in Redis and another node may hold it.
    #[tokio::test]
    async fn a_lease_whose_renewals_hang_stops_its_runtime_at_its_deadline() {
        let server = RedisServer::start().await.unwrap();
        let redis = storage::redis::Redis::connect(&server.url()).await.unwrap();
        // Renewed every 2 s; proven until 5.4 s after a claim or renewal is sent.
        let ttl = Duration::from_secs(6);
        let owner = Arc::new(Owner::new(
            LeaseStore::redis(&redis),
            &NodeId::from("s1"),
            ttl,
            false,
        ));
        let shutdown = CancellationToken::new();
        tokio::spawn(owner.clone().run(shutdown.clone()));
        let room = RoomId::from("frozen-store");
        let Claim::Acquired { token, valid, .. } = owner.claim(&room, 0).await.unwrap() else {
            panic!("a free lease was not acquired");
        };
        server.pause().unwrap();
        let stopped = tokio::time::timeout(ttl * 2, token.cancelled()).await;
        let at = Instant::now();
        server.resume().unwrap();
        shutdown.cancel();
        assert!(stopped.is_ok(), "the runtime never stopped");
        // No renewal was answered after the freeze: this is the last proven instant.
        let deadline = owner.base + Duration::from_millis(valid.load(Ordering::Relaxed));
        let late = at.saturating_duration_since(deadline);
        assert!(
            late < owner.margin() / 2,
            "stopped {late:?} after the lease's deadline (TTL {ttl:?})"
        );
        assert_eq!(owner.held_count(), 0);
    }
}
