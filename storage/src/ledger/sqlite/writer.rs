//! The writer thread: takes queued jobs, runs each group in one transaction (with a savepoint
//! per job only when one fails), commits once, and hands the group to the WAL syncer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info};

use super::tx::{Hot, Tx};
use super::wal::{Committed, ToSync};
use crate::{Result, StorageError};

/// Most jobs folded into one transaction (one fsync). Large enough that a burst of concurrent
/// gifts shares a commit; small enough that one commit's latency stays a few milliseconds.
pub const MAX_JOBS_PER_COMMIT: usize = 1024;
/// Under load, the least time between the starts of two group commits. Each commit has a cost
/// of its own whatever it holds (the pages every group dirties, such as the house account and
/// each room's index tail, are written again; the page-cache walk after a b-tree split; the
/// fsync), so fewer, larger groups cost less CPU per gift: measured 13 % less at 8,000 gifts/s
/// with the same reply p99 (measured: docs/BENCHMARKS-LOG.md). It is also the most a job waits for it.
pub const COMMIT_PACE: Duration = Duration::from_millis(3);
/// Jobs in the previous group from which the writer paces: below this the load is light, and
/// a caller alone (a test, an operator's grant) is answered as soon as its fsync is done.
pub const PACE_FROM_JOBS: usize = 4;
/// Jobs that may wait for the writer before callers block (`Block` overflow policy).
pub const WRITE_QUEUE_CAPACITY: usize = 8192;
/// Counter: group commits (one fsync each).
pub const METRIC_GROUP_COMMITS: &str = "chorus_ledger_group_commits_total";
/// Histogram: jobs folded into one group commit (how well the fsync is shared).
pub const METRIC_GROUP_COMMIT_JOBS: &str = "chorus_ledger_group_commit_jobs";
/// Counter: groups run a second time with a savepoint per job because a job failed.
pub const METRIC_SLOW_GROUPS: &str = "chorus_ledger_slow_groups_total";

/// One queued write: run inside the group's transaction (perhaps twice, see the module docs),
/// then answered with the group's commit result.
pub(super) trait WriteJob: Send {
    /// Runs the job; `false` when it failed and its writes must be undone.
    fn run(&mut self, tx: &Tx<'_, '_>) -> bool;
    /// Answers the caller: the job's result if the group committed, else the commit's error.
    fn answer(self: Box<Self>, commit: Result<()>);
}

pub(super) type Job = Box<dyn WriteJob>;

pub(super) struct Pending<T, F> {
    pub(super) f: F,
    pub(super) out: Option<Result<T>>,
    pub(super) tx: oneshot::Sender<Result<T>>,
}

impl<T, F> WriteJob for Pending<T, F>
where
    T: Send,
    F: FnMut(&Tx<'_, '_>) -> Result<T> + Send,
{
    fn run(&mut self, tx: &Tx<'_, '_>) -> bool {
        let out = (self.f)(tx);
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn answer(self: Box<Self>, commit: Result<()>) {
        let out = self
            .out
            .unwrap_or_else(|| Err(StorageError::backend_msg("ledger job never ran")));
        // The caller may have gone away; its answer is then simply dropped.
        let _ = self.tx.send(commit.and(out));
    }
}

/// The writer's half: runs each group and hands it, committed but not yet synced, to the
/// syncer.
#[allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the writer is a thread of its own, outside the runtime: it may block, and its pace is wall-clock time"
)]
pub(super) fn writer_loop(
    conn: Connection,
    mut rx: mpsc::Receiver<Job>,
    sync_failed: &AtomicBool,
    syncer: &std::sync::mpsc::Sender<ToSync>,
) {
    use std::time::Instant;
    let hot = match Hot::prepare(&conn) {
        Ok(hot) => hot,
        Err(e) => {
            // `open` prepared them once already; callers now get "writer stopped".
            error!(error = %e, "Ledger writer could not prepare its statements.");
            return;
        }
    };
    // When the previous group started and how many jobs it held.
    let mut last: Option<(Instant, usize)> = None;
    while let Some(first) = rx.blocking_recv() {
        if sync_failed.load(Ordering::SeqCst) {
            // Nothing may be written after a failed sync; later callers get "writer stopped".
            answer(vec![first], Some(SYNCER_STOPPED));
            break;
        }
        if let Some(wait) = last.and_then(|(at, jobs)| pace_wait(at.elapsed(), jobs)) {
            // Jobs keep queueing meanwhile: the next group is larger, not later in total.
            std::thread::sleep(wait);
        }
        let started = Instant::now();
        let mut batch: Vec<Job> = Vec::with_capacity(MAX_JOBS_PER_COMMIT.min(rx.len() + 1));
        batch.push(first);
        while batch.len() < MAX_JOBS_PER_COMMIT {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        last = Some((started, batch.len()));
        let commit = run_group(&conn, &hot, &mut batch);
        if let Err(e) = &commit {
            error!(error = %e, "Ledger group commit failed.");
        }
        metrics::counter!(METRIC_GROUP_COMMITS).increment(1);
        metrics::histogram!(METRIC_GROUP_COMMIT_JOBS).record(batch.len() as f64);
        let group = Committed {
            started,
            failed: commit.err().map(|e| format!("commit failed: {e}")),
            jobs: batch,
        };
        if let Err(std::sync::mpsc::SendError(ToSync::Group(group))) =
            syncer.send(ToSync::Group(group))
        {
            // The syncer stopped after a failed sync: nothing is known to be durable any more.
            answer(group.jobs, Some(SYNCER_STOPPED));
        }
    }
    info!("Ledger writer stopped: every handle was dropped.");
}

/// Why jobs fail once the syncer has stopped.
pub(super) const SYNCER_STOPPED: &str = "the ledger stopped after a failed WAL sync";

/// Answers `jobs` with their results, or all with `failed`.
pub(super) fn answer(jobs: Vec<Job>, failed: Option<&str>) {
    for job in jobs {
        let outcome = match failed {
            None => Ok(()),
            Some(e) => Err(StorageError::unavailable_msg(e.to_owned())),
        };
        job.answer(outcome);
    }
}

/// How long the writer waits before starting a group, `since` the previous group started with
/// `jobs` jobs: up to [`COMMIT_PACE`] between starts when that group was a crowd, else not at
/// all (a lone caller never waits for company).
pub(super) fn pace_wait(since: Duration, jobs: usize) -> Option<Duration> {
    (jobs >= PACE_FROM_JOBS)
        .then(|| COMMIT_PACE.checked_sub(since))
        .flatten()
        .filter(|w| !w.is_zero())
}

/// Runs one group in one transaction: fast (no savepoints) when every job succeeds, else again
/// with a savepoint per job. Returns the commit's result.
pub(super) fn run_group<'c>(
    conn: &'c Connection,
    hot: &Hot<'c>,
    batch: &mut [Job],
) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let tx = Tx::new(conn, hot);
    if !batch.iter_mut().all(|job| job.run(&tx)) {
        metrics::counter!(METRIC_SLOW_GROUPS).increment(1);
        conn.execute_batch("ROLLBACK")?;
        tx.house.take();
        tx.app_ranks.take();
        conn.execute_batch("BEGIN IMMEDIATE")?;
        for job in batch.iter_mut() {
            if let Err(e) = run_in_savepoint(&tx, job.as_mut()) {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        }
    }
    tx.write_house()
        .and_then(|()| conn.execute_batch("COMMIT"))
        .inspect_err(|_| {
            let _ = conn.execute_batch("ROLLBACK");
        })
}

pub(super) fn exec_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Runs one job in its own savepoint; a failed job leaves no trace, in the database or in the
/// group's house takings and app-board totals.
pub(super) fn run_in_savepoint(tx: &Tx<'_, '_>, job: &mut dyn WriteJob) -> rusqlite::Result<()> {
    exec_cached(tx, "SAVEPOINT job")?;
    let takings = tx.house.get();
    let ranks = tx.app_ranks.borrow().clone();
    if !job.run(tx) {
        exec_cached(tx, "ROLLBACK TO job")?;
        tx.house.set(takings);
        tx.app_ranks.replace(ranks);
    }
    exec_cached(tx, "RELEASE job")
}
