//! A room's birth and end in durable storage: creation under the per-user quotas, the touched
//! time that records joins, and retention, which removes rooms nobody has joined for
//! `room_retention`.
//!
//! # Retention
//! Each shard sweeps every `retention_sweep`: it lists the rooms whose touched time is older
//! than the retention ([`storage::snapshot::SnapshotStore::untouched_since`]) and, for each one
//! placed on it and not running here, starts the room's runtime with an
//! [`RoomMsg::Expire`] instead of a command. The runtime claims the room's lease like any owner
//! (so nobody serves the room meanwhile, and commands that come in wait in its inbox), then
//! removes the room only if it has no members, no gift saga running or unfinished in the
//! ledger, no owed gift event, no open gift and no robot configuration, and the store still
//! finds it untouched since the cutoff (all in the fenced delete). The commands that waited
//! then find no room: `ROOM_NOT_FOUND`, or a fresh room under auto-create.
//!
//! A join touches the room at most every `min(1 h, retention / 4)` per runtime, and a runtime
//! in which someone joined touches it again when it stops, so a long stay counts to its end.

use std::sync::Arc;
use std::time::Duration;

use protocol::{ErrorCode, RoomId, UserId};
use storage::snapshot::Expired;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::state::{self, Durable, RoomState};
use super::{RoomActor, RoomMsg, now_ms};
use crate::Inner;
use crate::metrics as m;

/// Longest between two touches of a room while people keep joining it.
const TOUCH_EVERY_MAX: Duration = Duration::from_secs(3600);
/// Rooms listed per page of a sweep.
const SWEEP_PAGE: usize = 256;
/// Longest a sweep waits for one room's runtime to answer.
const EXPIRE_WAIT: Duration = Duration::from_secs(30);

impl RoomActor {
    /// Refuses a creation beyond `user`'s per-minute allowance on this shard.
    pub(super) fn check_create_rate(&self, user: &UserId) -> Result<(), state::Rejected> {
        if self.inner.create_rate.try_take(user) {
            return Ok(());
        }
        Err(create_rate_refused(&self.inner))
    }

    /// Stores the new room and starts serving it. With `quota`, the owner's cap of stored
    /// rooms applies (robot rooms, made from an operator's configuration, are exempt).
    pub(super) async fn create(
        &mut self,
        durable: Durable,
        quota: bool,
    ) -> Result<(), state::Rejected> {
        let max = if quota {
            self.inner.config.max_rooms_per_user
        } else {
            0
        };
        match self
            .inner
            .snapshots
            .create(&self.room, self.fence, &durable, max, now_ms())
            .await
        {
            Ok(Some(written)) => self.saved = Some(written),
            Ok(None) => {
                metrics::counter!(m::ROOM_QUOTA_REFUSED, "reason" => "owned").increment(1);
                return Err(state::Rejected {
                    code: ErrorCode::QuotaExceeded,
                    msg: format!("you own {max} rooms, the most allowed").into(),
                });
            }
            Err(e) => {
                warn!(room = %self.room, error = %e, "Could not save the new room.");
                return Err(state::rejected(
                    ErrorCode::Unavailable,
                    "could not create the room; retry",
                ));
            }
        }
        debug!(room = %self.room, fence = self.fence, "Room created.");
        let rules = self.inner.config.room_rules();
        let mut state = RoomState::new(self.room.clone(), durable, self.fence, rules);
        state.set_gift_rules(self.inner.config.gift_rules);
        state.set_rocket_rules(self.inner.config.rocket.clone());
        state.set_vip_rules(self.inner.config.vip.clone());
        self.state = Some(state);
        self.touched = Some(Instant::now());
        Ok(())
    }

    /// Records a join in the room's touched time, at most every `min(1 h, retention / 4)`.
    pub(super) fn touch_on_join(&mut self) {
        self.joined = true;
        let retention = self.inner.config.room_retention;
        let every = if retention.is_zero() {
            TOUCH_EVERY_MAX
        } else {
            TOUCH_EVERY_MAX.min(retention / 4)
        };
        if self.touched.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        self.touched = Some(Instant::now());
        let store = self.inner.snapshots.store().clone();
        let room = self.room.clone();
        self.inner.tracker.spawn(async move {
            if let Err(e) = store.touch(&room, now_ms()).await {
                debug!(%room, error = %e, "Could not record the join time.");
            }
        });
    }

    /// A runtime in which someone joined records the time it stops.
    pub(super) async fn touch_on_stop(&mut self) {
        if !self.joined || self.state.is_none() {
            return;
        }
        let store = self.inner.snapshots.store().clone();
        if let Err(e) = store.touch(&self.room, now_ms()).await {
            debug!(room = %self.room, error = %e, "Could not record the join time.");
        }
    }

    /// Removes the room from durable storage if nobody joined it since `cutoff_ms` and
    /// nothing holds it (see the module docs). Returns whether it did; the runtime then stops.
    pub(super) async fn expire(&mut self, cutoff_ms: u64) -> bool {
        if self.member_count() > 0
            || !self.sagas.is_empty()
            || !self.closing.is_empty()
            || self.robots.is_some()
        {
            return false;
        }
        if !matches!(self.inner.robots.get(&self.room).await, Ok(None)) {
            return false;
        }
        if let Some(ledger) = &self.inner.ledger {
            let pending = ledger.pending_sagas(&self.room, 0).await;
            let owed = ledger.unpublished_gifts(&self.room, 0).await;
            if !matches!((pending, owed), (Ok(p), Ok(o)) if p.is_empty() && o.is_empty()) {
                return false;
            }
        }
        match self
            .inner
            .snapshots
            .store()
            .expire(&self.room, self.fence, cutoff_ms)
            .await
        {
            Ok(Expired::Deleted) => {
                if self.state.take().is_some() {
                    metrics::counter!(m::ROOMS_EXPIRED).increment(1);
                    debug!(room = %self.room, "Room removed by retention.");
                }
                self.saved = None;
                true
            }
            Ok(Expired::Kept) => false,
            Err(e) => {
                warn!(room = %self.room, error = %e, "Could not remove a room past its retention.");
                false
            }
        }
    }
}

/// The retention sweep of a shard: every `retention_sweep`, removes the rooms placed here
/// that nobody has joined for `room_retention` (off when the retention is zero).
pub(crate) async fn sweep_retention(inner: Arc<Inner>) {
    let retention = inner.config.room_retention;
    if retention.is_zero() {
        return;
    }
    loop {
        tokio::select! {
            () = inner.shutdown.cancelled() => return,
            () = tokio::time::sleep(inner.config.retention_sweep) => {}
        }
        let cutoff = now_ms().saturating_sub(retention.as_millis() as u64);
        let removed = sweep_once(&inner, cutoff).await;
        if removed > 0 {
            // One line per sweep, however many rooms it removed.
            info!(removed, "Removed rooms nobody joined within the retention.");
        }
    }
}

/// One pass over the rooms untouched since `cutoff_ms`; returns how many it removed.
async fn sweep_once(inner: &Arc<Inner>, cutoff_ms: u64) -> usize {
    let store = inner.snapshots.store().clone();
    let mut offset = 0;
    let mut removed = 0;
    loop {
        let page = match store.untouched_since(cutoff_ms, offset, SWEEP_PAGE).await {
            Ok(page) => page,
            Err(e) => {
                warn!(error = %e, "Could not list rooms past their retention.");
                return removed;
            }
        };
        let listed = page.len();
        let mut gone = 0;
        for room in page {
            if inner.shutdown.is_cancelled() {
                return removed + gone;
            }
            if expire_room(inner, &room, cutoff_ms).await {
                gone += 1;
            }
        }
        removed += gone;
        // Removed rooms leave the listing: the next page starts after the ones kept.
        offset += listed - gone;
        if listed < SWEEP_PAGE {
            return removed;
        }
    }
}

/// Runs `room`'s retention check in a runtime of its own, if the room is placed here and not
/// running; returns whether the room was removed.
async fn expire_room(inner: &Arc<Inner>, room: &RoomId, cutoff_ms: u64) -> bool {
    let (done, answer) = tokio::sync::oneshot::channel();
    if !inner.start_for(
        room,
        Box::new(RoomMsg::Expire(super::Expire { cutoff_ms, done })),
    ) {
        return false;
    }
    matches!(
        tokio::time::timeout(EXPIRE_WAIT, answer).await,
        Ok(Ok(true))
    )
}

/// The refusal of a creation past its user's rate (counted).
pub(super) fn create_rate_refused(inner: &Inner) -> state::Rejected {
    metrics::counter!(m::ROOM_QUOTA_REFUSED, "reason" => "rate").increment(1);
    state::Rejected {
        code: ErrorCode::QuotaExceeded,
        msg: format!(
            "room creation rate: at most {} per minute; retry later",
            inner.config.room_creates_per_min
        )
        .into(),
    }
}
