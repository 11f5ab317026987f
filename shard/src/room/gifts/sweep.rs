//! The owner's sweep of its room's unfinished sagas and owed gift events, and the node's
//! orphan sweep that loads rooms nobody came back to.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use protocol::RoomId;
use storage::StorageError;
use storage::ledger::{RecoveryOutcome, now_ms};
use tracing::{info, warn};

use super::super::{RoomActor, RoomMsg};
use super::{lock, nonowner, owe_event};
use crate::Inner;
use crate::metrics as m;

/// How often the owner sweeps its room's unfinished sagas.
const RECOVERY_INTERVAL: Duration = Duration::from_secs(5);
/// A saga untouched this long is unfinished (in-flight ones are skipped anyway).
pub(super) const RECOVERY_MIN_AGE_MS: i64 = 3_000;

/// When the owner's sweep of its room's unfinished sagas runs. Only a saga that ended in an
/// error can leave one behind (every `Ok` outcome is final; a previous owner's are found by
/// the sweeps after load), so the sweep runs from the load and then only while such a saga
/// may still be open: it stops after a clean sweep that started at least
/// [`RECOVERY_MIN_AGE_MS`] after the last failure (the load counts as one), and the next
/// failure starts it again. A quiet room holds no sweep timer and sends the ledger no queries.
#[derive(Debug, Default)]
pub(crate) struct Sweep {
    running: AtomicBool,
    /// Sagas that ended in an error so far.
    failures: AtomicU64,
    /// [`now_ms`] of the last failure.
    failed_at_ms: AtomicI64,
}

impl Sweep {
    /// Takes the right to run the sweep: false when it runs already.
    pub(super) fn claim(&self) -> bool {
        self.running
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// A saga ended in an error at `now`: returns whether the caller must start the sweep.
    pub(super) fn failed(&self, now: i64) -> bool {
        self.failed_at_ms.store(now, Ordering::SeqCst);
        self.failures.fetch_add(1, Ordering::SeqCst);
        self.claim()
    }

    /// Failures so far, read before a sweep looks.
    pub(super) fn seen(&self) -> u64 {
        self.failures.load(Ordering::SeqCst)
    }

    /// After a sweep that began at `began` having `seen` failures and found nothing left to do:
    /// whether it must go on. It must while a failure is too young for the sweep's age filter
    /// to have listed it, or when one came in meanwhile (unless a new sweep took over).
    pub(super) fn go_on(&self, began: i64, seen: u64) -> bool {
        if began - self.failed_at_ms.load(Ordering::SeqCst) < RECOVERY_MIN_AGE_MS {
            return true;
        }
        self.running.store(false, Ordering::SeqCst);
        self.failures.load(Ordering::SeqCst) != seen && self.claim()
    }
}

impl RoomActor {
    /// Starts the saga sweep now unless it runs already: the orphan sweep found work for it.
    /// The nudge counts as a failure for [`Sweep`], so the sweep goes on until a clean pass.
    pub(in crate::room) fn sweep_now(&self) {
        if self.sweep.failed(now_ms()) {
            self.spawn_sweep(0, false);
        }
    }

    /// Starts the owner-only sweep of this room's unfinished sagas at load: a previous owner
    /// may have crashed mid-saga. It goes on every few seconds while [`Sweep`] says it must.
    /// The load counts as a failure: a previous owner's last write may land (or become
    /// visible) around the fence install, so one more sweep looks once it is old enough.
    /// A room's first owner (`first_owner`: the ledger had no fence for it) has no previous
    /// owner and no saga to find, and starts none; a later failed gift still starts it.
    pub(in crate::room) fn start_recovery(&self, first_owner: bool) {
        if first_owner {
            metrics::counter!(m::RECOVERY_SKIPPED).increment(1);
            return;
        }
        if self.sweep.failed(now_ms()) {
            self.spawn_sweep(0, false);
        }
    }

    /// Runs the sweep (its caller claimed it): first after a pause when `wait_first`, listing
    /// sagas untouched for `min_age` ms, then every few seconds until a sweep finds nothing.
    pub(super) fn spawn_sweep(&self, min_age: i64, wait_first: bool) {
        let Some(ledger) = self.inner.ledger.clone() else {
            return;
        };
        let inner = self.inner.clone();
        let room = self.room.clone();
        let fence = self.fence;
        let lease = self.lease.clone();
        let valid = self.valid.clone();
        let in_flight = self.in_flight.clone();
        let weak = self.self_tx.clone();
        let sweep = self.sweep.clone();
        self.inner.tracker.spawn(async move {
            let mut min_age = min_age;
            let mut wait = wait_first;
            loop {
                if wait {
                    tokio::select! {
                        () = lease.cancelled() => return,
                        () = inner.shutdown.cancelled() => return,
                        () = tokio::time::sleep(RECOVERY_INTERVAL) => {}
                    }
                }
                wait = true;
                // Law 4: only a provable owner moves sagas; anything else writes nothing. A
                // later failure starts the sweep again.
                if lease.is_cancelled() || !inner.owner.proven(&valid) {
                    sweep.running.store(false, Ordering::SeqCst);
                    return;
                }
                let (began, seen) = (now_ms(), sweep.seen());
                let mut clean = true;
                match ledger.pending_sagas(&room, min_age).await {
                    Ok(list) => {
                        for rec in list {
                            if lock(&in_flight).contains(&rec.order.gift_id) {
                                continue;
                            }
                            let is_owner = inner.owner.proven(&valid) && !lease.is_cancelled();
                            match ledger.recover(&rec.order, fence, is_owner).await {
                                Ok(RecoveryOutcome::Settled) => {
                                    metrics::counter!(m::SAGAS_RECOVERED, "outcome" => "settled").increment(1);
                                    info!(%room, order = %rec.order.gift_id, "Recovered a debited gift: settled.");
                                    crate::audit::recover(&room, rec.order.gift_id, fence, inner.owner.owner_id(), "settled");
                                    let gift_id = rec.order.gift_id;
                                    let sent = match weak.upgrade() {
                                        Some(tx) => tx.send(Box::new(RoomMsg::GiftRecovered(rec.order))).await.is_ok(),
                                        None => false,
                                    };
                                    if !sent {
                                        owe_event(&inner, &room, gift_id).await;
                                    }
                                }
                                Ok(RecoveryOutcome::Voided) => {
                                    metrics::counter!(m::SAGAS_RECOVERED, "outcome" => "voided").increment(1);
                                    info!(%room, order = %rec.order.gift_id, "Recovered a never-debited gift: voided.");
                                    crate::audit::recover(&room, rec.order.gift_id, fence, inner.owner.owner_id(), "voided");
                                }
                                Ok(RecoveryOutcome::AlreadyTerminal(_) | RecoveryOutcome::Missing) => {}
                                Ok(RecoveryOutcome::Released) => clean = false,
                                // Law 5: a conflict is retried on the next sweep (or by the
                                // new owner), never turned into a terminal state.
                                Err(StorageError::Fenced { .. }) => return,
                                Err(e) => {
                                    clean = false;
                                    warn!(%room, error = %e, "Saga recovery failed; retrying later.");
                                }
                            }
                        }
                    }
                    Err(e) => {
                        clean = false;
                        warn!(%room, error = %e, "Could not list unfinished sagas.");
                    }
                }
                if !publish_owed(&inner, &ledger, &room, min_age, &weak).await {
                    clean = false;
                }
                min_age = RECOVERY_MIN_AGE_MS;
                if clean && !sweep.go_on(began, seen) {
                    return;
                }
            }
        });
    }
}

/// Takes the room's owed gift events (settled gifts a runtime could not publish) from the
/// ledger and hands them to the running room to publish. A taken event whose room has stopped
/// is recorded again. Returns whether the ledger answered.
async fn publish_owed(
    inner: &Arc<Inner>,
    ledger: &storage::ledger::Ledger,
    room: &RoomId,
    min_age: i64,
    room_tx: &tokio::sync::mpsc::WeakSender<Box<RoomMsg>>,
) -> bool {
    let owed = match ledger.unpublished_gifts(room, min_age).await {
        Ok(owed) => owed,
        Err(e) => {
            warn!(%room, error = %e, "Could not list owed gift events.");
            return false;
        }
    };
    for order in owed {
        match ledger.take_unpublished(room, order.gift_id).await {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                warn!(%room, order = %order.gift_id, error = %e, "Could not take an owed gift event.");
                // The take may have committed with its answer lost: the event is recorded as
                // owed again (a no-op if the take did not commit), so it is not lost with it.
                if e.is_retryable() {
                    owe_event(inner, room, order.gift_id).await;
                }
                return false;
            }
        }
        metrics::counter!(m::GIFT_EVENTS_TAKEN).increment(1);
        let gift_id = order.gift_id;
        let sent = match room_tx.upgrade() {
            Some(tx) => tx
                .send(Box::new(RoomMsg::GiftRecovered(order)))
                .await
                .is_ok(),
            None => false,
        };
        if !sent {
            owe_event(inner, room, gift_id).await;
        }
    }
    true
}

/// Every [`ShardConfig::orphan_sweep`](crate::ShardConfig::orphan_sweep), loads the rooms
/// placed here whose sagas have stayed open for [`RECOVERY_MIN_AGE_MS`] and that are not
/// running: a crashed owner's rooms that nobody has come back to. Their load runs the owner's
/// recovery (see `start_recovery`), which settles a debited saga and voids one never debited;
/// an empty room then unloads when idle. Rooms running here recover on their own.
pub(crate) async fn sweep_orphans(inner: Arc<Inner>) {
    let Some(ledger) = inner.ledger.clone() else {
        return;
    };
    loop {
        tokio::select! {
            () = inner.shutdown.cancelled() => return,
            () = tokio::time::sleep(inner.config.orphan_sweep) => {}
        }
        if inner.config.test_nonowner_void {
            nonowner::recovery(&inner, &ledger).await;
        }
        match ledger.rooms_with_open_sagas(RECOVERY_MIN_AGE_MS).await {
            Ok(rooms) => {
                for room in rooms {
                    if inner.load_room(&room) {
                        metrics::counter!(m::ORPHAN_ROOMS_LOADED).increment(1);
                        info!(%room, "Loaded a room with unfinished sagas to recover them.");
                    } else {
                        // Running here, its own sweep may have ended before the work came in
                        // (an event owed by a runtime that stopped late).
                        inner.nudge_sweep(&room);
                    }
                }
            }
            Err(e) => warn!(error = %e, "Could not list rooms with unfinished sagas."),
        }
    }
}
