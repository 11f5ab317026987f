//! The shard's side of the room directory: its rooms hand their changed summaries to one
//! [`Publisher`], which writes every change of an interval in one round trip (one Redis
//! pipeline), at most one write per room per interval, and refreshes the node's liveness
//! with it. Entries of nodes that stopped publishing are swept (docs/ARCHITECTURE.md, the
//! room directory).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use protocol::client::RoomEntry;
use protocol::{NodeId, RoomId};
use storage::directory::{DirectoryStore, Update};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Counter: directory updates (summaries and removals) written.
const UPDATES: &str = "chorus_directory_updates_total";
/// Counter: directory publishes that failed (their updates are retried next tick).
const PUBLISH_FAILURES: &str = "chorus_directory_publish_failures_total";
/// Counter: entries of dead nodes (or of this node's previous run) removed.
const SWEPT: &str = "chorus_directory_swept_total";

/// Publish ticks between two sweeps for dead nodes' entries.
const SWEEP_EVERY_TICKS: u32 = 10;
/// Most updates written per round trip (a pipeline of this many script calls).
const MAX_BATCH: usize = 2000;

/// Collects the rooms' directory changes and publishes them.
#[derive(Debug)]
pub(crate) struct Publisher {
    store: DirectoryStore,
    node: NodeId,
    /// The latest change per room since the last publish (a newer one replaces it).
    pending: Mutex<HashMap<RoomId, Update>>,
}

impl Publisher {
    pub(crate) fn new(store: DirectoryStore, node: NodeId) -> Self {
        metrics::describe_counter!(UPDATES, "Room directory updates written.");
        metrics::describe_counter!(PUBLISH_FAILURES, "Room directory publishes that failed.");
        metrics::describe_counter!(SWEPT, "Room directory entries of dead nodes removed.");
        Self {
            store,
            node,
            pending: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<RoomId, Update>> {
        // A poisoned map only means a panic elsewhere; its data is still consistent.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The room's summary changed.
    pub(crate) fn put(&self, entry: RoomEntry) {
        self.lock().insert(entry.room.clone(), Update::Put(entry));
    }

    /// The room left the directory (closed, stopped here).
    pub(crate) fn remove(&self, room: &RoomId) {
        self.lock()
            .insert(room.clone(), Update::Remove(room.clone()));
    }

    /// Publishes until `shutdown`, then removes what this node still owns. At start, removes
    /// what a previous run of this node left.
    pub(crate) async fn run(
        self: Arc<Self>,
        every: Duration,
        stale: Duration,
        shutdown: CancellationToken,
    ) {
        match self.store.purge_node(&self.node).await {
            Ok(n) if n > 0 => {
                metrics::counter!(SWEPT).increment(n as u64);
                debug!(removed = n, "Directory entries of a previous run removed.");
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "Could not purge old directory entries."),
        }
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ticks: u32 = 0;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            self.flush().await;
            ticks = ticks.wrapping_add(1);
            if ticks.is_multiple_of(SWEEP_EVERY_TICKS) {
                let stale_ms = stale.as_millis() as u64;
                match self.store.sweep_dead(crate::room::now_ms(), stale_ms).await {
                    Ok(n) if n > 0 => {
                        metrics::counter!(SWEPT).increment(n as u64);
                        debug!(removed = n, "Directory entries of dead nodes swept.");
                    }
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "Directory sweep failed."),
                }
            }
        }
        // Rooms handed off are the new owner's now; the purge only removes this node's.
        if let Err(e) = self.store.purge_node(&self.node).await {
            warn!(error = %e, "Could not remove this node's directory entries at stop.");
        }
    }

    /// Writes the pending changes (they stay pending when the store fails, unless a newer
    /// change replaced them meanwhile).
    async fn flush(&self) {
        let updates: Vec<Update> = {
            let mut p = self.lock();
            if p.len() <= MAX_BATCH {
                // Taken whole, not drained: a burst of changes (every room's joins) would
                // otherwise leave its table's size behind for good.
                std::mem::take(&mut *p).into_values().collect()
            } else {
                let keys: Vec<RoomId> = p.keys().take(MAX_BATCH).cloned().collect();
                keys.iter().filter_map(|k| p.remove(k)).collect()
            }
        };
        let written = self
            .store
            .publish(&self.node, crate::room::now_ms(), &updates)
            .await;
        if written.is_ok() {
            metrics::counter!(UPDATES).increment(updates.len() as u64);
        }
        if let Err(e) = written {
            metrics::counter!(PUBLISH_FAILURES).increment(1);
            warn!(error = %e, rooms = updates.len(), "Directory publish failed; retrying next tick.");
            let mut p = self.lock();
            for u in updates {
                let room = match &u {
                    Update::Put(e) => e.room.clone(),
                    Update::Remove(r) => r.clone(),
                };
                p.entry(room).or_insert(u);
            }
        }
    }
}
