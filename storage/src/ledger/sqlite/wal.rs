//! Durability and size of the WAL: the syncer thread that fsyncs it before any commit is
//! answered or read, and the checkpointer thread (and the writer's own RESTART) that bound it.

use std::sync::Arc;
#[cfg(test)]
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

use rusqlite::Connection;
use tokio::sync::oneshot;
use tracing::error;

use super::writer::{Job, SYNCER_STOPPED, answer};
use crate::ledger::METRIC_GROUP_COMMIT_SECONDS;

/// Counter: syncs of the WAL by the syncer thread (each covers every group committed since the
/// one before).
pub const METRIC_WAL_SYNCS: &str = "chorus_ledger_wal_syncs_total";
/// Histogram: seconds per WAL sync.
pub const METRIC_WAL_SYNC_SECONDS: &str = "chorus_ledger_wal_sync_seconds";
/// Uncopied WAL frames after a commit that wake the checkpointer thread: fewer, larger
/// checkpoints copy a page rewritten by many commits once.
pub const CHECKPOINT_AFTER_FRAMES: i32 = 10_000;
/// WAL frames after a commit at which the writer checkpoints (RESTART) itself, bounding the WAL
/// (about 256 MiB of 4 KiB pages) when the checkpointer never catches up with its end.
pub const WAL_LIMIT_FRAMES: i32 = 64_000;
/// WAL frames from which the checkpointer is woken after every commit that left frames
/// uncopied, not only every [`CHECKPOINT_AFTER_FRAMES`]. Each pass then copies one group's
/// pages, in less time than the writer's pause between groups, so the checkpointer catches
/// the WAL's end; the next group's first write then restarts the WAL from its beginning (SQLite
/// does, when a write begins on a WAL copied to its end), and the writer does not stop for
/// its own RESTART at [`WAL_LIMIT_FRAMES`]: that took ~47 ms at 20,000 gifts/s, every ~10 s
/// (measured: docs/BENCHMARKS-LOG.md).
pub const WAL_DRAIN_FROM_FRAMES: i32 = WAL_LIMIT_FRAMES - CHECKPOINT_AFTER_FRAMES;
/// Counter: WAL restarts (the WAL's next commit written at its beginning again), whoever ran
/// them: the writer's own RESTART, or a write that began on a WAL copied to its end.
pub const METRIC_WAL_RESTARTS: &str = "chorus_ledger_wal_restarts_total";
/// Counter: WAL checkpoints, by who ran them (`checkpointer` or `writer`; `writer_busy`: the
/// writer's restart found the checkpointer mid-pass and was left to the next commit).
pub const METRIC_CHECKPOINTS: &str = "chorus_ledger_checkpoints_total";
/// Histogram: seconds per WAL checkpoint, by who ran it. The writer's own (`writer`) hold up
/// its next group.
pub const METRIC_CHECKPOINT_SECONDS: &str = "chorus_ledger_checkpoint_seconds";

/// A group the writer has committed (or failed to), handed to the syncer to answer.
#[allow(
    clippy::disallowed_types,
    reason = "made and read on the writer's and the syncer's own threads, outside the runtime"
)]
pub(super) struct Committed {
    /// When the group's first statement ran.
    pub(super) started: std::time::Instant,
    /// The commit's error, if it failed: nothing of the group is in the WAL then.
    pub(super) failed: Option<String>,
    pub(super) jobs: Vec<Job>,
}

/// What the syncer makes durable.
pub(super) enum ToSync {
    /// A group the writer committed (or failed to): its jobs are answered after the sync.
    Group(Committed),
    /// A read whose query has ended: answered after the next sync, which covers every commit
    /// the query may have seen (a sync flushes the WAL file's pages whoever wrote them).
    Read(oneshot::Sender<()>),
}

/// The syncer thread: the WAL's file, and the flag it raises when a sync fails.
pub(super) struct WalSyncer {
    pub(super) wal: std::fs::File,
    pub(super) failed: Arc<AtomicBool>,
    #[cfg(test)]
    pub(super) hooks: Arc<SyncHooks>,
}

impl WalSyncer {
    /// The syncer's half: takes every group committed since its last sync (and every read
    /// that ended since), makes them durable with one `fdatasync` of the WAL, and only then
    /// answers them. The writer meanwhile runs the next group: its statements and WAL writes
    /// no longer wait for the disk, and one sync covers every group it wrote meanwhile. The
    /// WAL's frames are checksummed in a chain, so recovery keeps a prefix of the commits: a
    /// later group is never durable without the earlier ones. A failed sync stops the syncer
    /// (like PostgreSQL after a failed fsync, since the kernel may have dropped the unwritten
    /// pages): its jobs and every later one fail, and so do reads.
    #[allow(
        clippy::disallowed_types,
        reason = "the syncer is a thread of its own, outside the runtime: it times wall-clock work"
    )]
    pub(super) fn run(&self, inbox: &std::sync::mpsc::Receiver<ToSync>) {
        let mut ready: Vec<ToSync> = Vec::new();
        while let Ok(first) = inbox.recv() {
            ready.push(first);
            ready.extend(inbox.try_iter());
            // A failed group left nothing in the WAL; anything else needs the sync.
            let needed = ready.iter().any(|m| match m {
                ToSync::Group(g) => g.failed.is_none(),
                ToSync::Read(_) => true,
            });
            if needed {
                let started = std::time::Instant::now();
                let outcome = self.sync();
                metrics::counter!(METRIC_WAL_SYNCS).increment(1);
                metrics::histogram!(METRIC_WAL_SYNC_SECONDS)
                    .record(started.elapsed().as_secs_f64());
                if let Err(e) = outcome {
                    error!(error = %e, "Ledger WAL sync failed: the ledger stops.");
                    self.failed.store(true, Ordering::SeqCst);
                    for m in ready.drain(..) {
                        // A read's dropped sender fails it.
                        if let ToSync::Group(group) = m {
                            answer(group.jobs, Some(SYNCER_STOPPED));
                        }
                    }
                    // Returning drops the inbox: the writer then fails later groups itself,
                    // and reads fail to ask.
                    return;
                }
            }
            for m in ready.drain(..) {
                match m {
                    ToSync::Group(group) => {
                        metrics::histogram!(METRIC_GROUP_COMMIT_SECONDS)
                            .record(group.started.elapsed().as_secs_f64());
                        answer(group.jobs, group.failed.as_deref());
                    }
                    ToSync::Read(done) => {
                        // The reader may have gone away.
                        let _ = done.send(());
                    }
                }
            }
        }
    }

    /// One `fdatasync` of the WAL (in tests, first through the hooks' gate and failure).
    pub(super) fn sync(&self) -> std::io::Result<()> {
        #[cfg(test)]
        self.hooks.before_sync()?;
        self.wal.sync_data()
    }
}

/// Test hooks on the syncer: hold it at a gate before it syncs, count its syncs, or fail the
/// next one.
#[cfg(test)]
#[derive(Debug, Default)]
pub(super) struct SyncHooks {
    /// (gate closed, groups waiting at it)
    pub(super) gate: Mutex<(bool, usize)>,
    pub(super) opened: std::sync::Condvar,
    pub(super) fail_next: AtomicBool,
    /// Syncs run so far.
    pub(super) syncs: AtomicU64,
}

#[cfg(test)]
impl SyncHooks {
    pub(super) fn close(&self) {
        self.gate.lock().unwrap().0 = true;
    }

    pub(super) fn open(&self) {
        self.gate.lock().unwrap().0 = false;
        self.opened.notify_all();
    }

    /// Whether the syncer is waiting at the closed gate.
    pub(super) fn waiting(&self) -> bool {
        self.gate.lock().unwrap().1 > 0
    }

    /// Waits while the gate is closed, counts the sync, and fails it if asked to.
    pub(super) fn before_sync(&self) -> std::io::Result<()> {
        let mut gate = self.gate.lock().unwrap();
        gate.1 += 1;
        while gate.0 {
            gate = self.opened.wait(gate).unwrap();
        }
        gate.1 -= 1;
        drop(gate);
        self.syncs.fetch_add(1, Ordering::SeqCst);
        if self.fail_next.swap(false, Ordering::SeqCst) {
            return Err(std::io::Error::other("injected sync failure"));
        }
        Ok(())
    }
}

/// When the writer wakes the checkpointer and when it restarts the WAL itself, in WAL frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WalBounds {
    /// Uncopied frames after a commit that wake the checkpointer.
    pub(super) checkpoint_after: i32,
    /// Frames from which any uncopied frame wakes it.
    pub(super) drain_from: i32,
    /// Frames at which the writer runs a RESTART checkpoint itself.
    pub(super) limit: i32,
}

/// The bounds every ledger runs with.
pub(super) const WAL_BOUNDS: WalBounds = WalBounds {
    checkpoint_after: CHECKPOINT_AFTER_FRAMES,
    drain_from: WAL_DRAIN_FROM_FRAMES,
    limit: WAL_LIMIT_FRAMES,
};

/// The WAL as the writer and the checkpointer see it, shared between their threads.
#[derive(Debug, Default)]
pub(super) struct WalState {
    /// Frames in the WAL after the writer's last commit.
    pub(super) frames: AtomicI32,
    /// Frames the checkpointer's last pass had copied into the database file.
    pub(super) copied: AtomicI32,
    /// Restarts seen by the writer (a commit left fewer frames than the one before it).
    pub(super) restarts: AtomicU64,
    /// RESTART checkpoints the writer ran (or tried: the checkpointer may hold the lock) itself.
    pub(super) writer_checkpoints: AtomicU64,
}

/// What the writer does about the WAL after a commit.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum WalAction {
    Nothing,
    WakeCheckpointer,
    RestartHere,
}

impl WalBounds {
    /// What to do with `frames` in the WAL after a commit, `copied` by the last checkpoint.
    pub(super) fn action(self, frames: i32, copied: i32) -> WalAction {
        // Fewer frames than were copied: the WAL restarted from its beginning since.
        let uncopied = if frames >= copied {
            frames - copied
        } else {
            frames
        };
        if frames >= self.limit {
            WalAction::RestartHere
        } else if uncopied >= self.checkpoint_after || (frames >= self.drain_from && uncopied > 0) {
            WalAction::WakeCheckpointer
        } else {
            WalAction::Nothing
        }
    }
}

/// The writer's WAL hook, run after every commit with the WAL's frame count.
#[allow(
    clippy::disallowed_types,
    reason = "runs on the writer's or the checkpointer's own thread, outside the runtime: it times wall-clock work"
)]
pub(super) fn after_commit(
    wal: &mut rusqlite::hooks::Wal,
    frames: i32,
    bounds: WalBounds,
    state: &WalState,
    wake: &std::sync::mpsc::SyncSender<()>,
) -> rusqlite::Result<()> {
    if frames < state.frames.swap(frames, Ordering::Relaxed) {
        state.restarts.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(METRIC_WAL_RESTARTS).increment(1);
    }
    match bounds.action(frames, state.copied.load(Ordering::Relaxed)) {
        WalAction::Nothing => {}
        // Full means a wake-up is already pending: one is enough.
        WalAction::WakeCheckpointer => {
            let _ = wake.try_send(());
        }
        WalAction::RestartHere => {
            // The checkpointer has not caught the WAL's end: copy the rest, restart the WAL.
            let started = std::time::Instant::now();
            state.writer_checkpoints.fetch_add(1, Ordering::Relaxed);
            // The commit is durable in the WAL whatever happens here.
            match wal.checkpoint_v2(rusqlite::wal::CheckpointMode::RESTART) {
                Ok(_) => metrics::counter!(METRIC_CHECKPOINTS, "by" => "writer").increment(1),
                // The checkpointer holds the checkpoint lock mid-pass (SQLite then answers BUSY
                // at once): it is copying the WAL already, and the next commit tries again.
                Err(rusqlite::Error::SqliteFailure(f, _))
                    if f.code == rusqlite::ErrorCode::DatabaseBusy =>
                {
                    metrics::counter!(METRIC_CHECKPOINTS, "by" => "writer_busy").increment(1);
                }
                Err(e) => {
                    metrics::counter!(METRIC_CHECKPOINTS, "by" => "writer").increment(1);
                    error!(error = %e, frames, "Ledger WAL restart checkpoint failed.");
                }
            }
            metrics::histogram!(METRIC_CHECKPOINT_SECONDS, "by" => "writer")
                .record(started.elapsed().as_secs_f64());
        }
    }
    Ok(())
}

/// Runs a PASSIVE checkpoint each time the writer asks, until the writer is gone.
#[allow(
    clippy::disallowed_types,
    reason = "runs on the writer's or the checkpointer's own thread, outside the runtime: it times wall-clock work"
)]
pub(super) fn checkpointer_loop(
    conn: &Connection,
    wal: &WalState,
    wakes: &std::sync::mpsc::Receiver<()>,
) {
    while wakes.recv().is_ok() {
        metrics::counter!(METRIC_CHECKPOINTS, "by" => "checkpointer").increment(1);
        let started = std::time::Instant::now();
        match conn.wal_checkpoint_v2(None::<&str>, rusqlite::wal::CheckpointMode::PASSIVE) {
            Ok((_, done)) => wal.copied.store(done, Ordering::Relaxed),
            Err(e) => {
                error!(error = %e, "Ledger WAL checkpoint failed; a later commit asks again.")
            }
        }
        metrics::histogram!(METRIC_CHECKPOINT_SECONDS, "by" => "checkpointer")
            .record(started.elapsed().as_secs_f64());
    }
}
