//! The embedded ledger engine: SQLite in WAL mode, one writer thread that group-commits, a
//! syncer thread that makes the commits durable, and a separate reader connection.
//!
//! The writer takes jobs from a bounded queue (callers wait when it is full: the `Block` policy,
//! this is an internal path). It drains up to [`MAX_JOBS_PER_COMMIT`] queued jobs into one
//! transaction and commits once. Its connection runs `synchronous=NORMAL`, so the commit
//! writes the group's WAL frames and returns without waiting for the disk; the group goes to
//! the syncer, which fsyncs the WAL once for every group committed since its last sync and only
//! then answers their jobs, while the writer already runs the next group. An answer therefore
//! always means "durable", as with `synchronous=FULL`, but the disk's wait is no longer part
//! of the writer's cycle (measured: docs/BENCHMARKS-LOG.md). Reads wait too: a read answers only
//! after a sync that began once its query had ended, which covers every commit it may have
//! seen, this process's or another's sharing the file, so nothing a crash could undo is ever
//! shown (what `synchronous=FULL` gave, where a commit became visible only once synced).
//! SQLite still syncs its own checkpoints (NORMAL does; the checkpointer's connection runs
//! FULL), and the WAL's chained checksums mean recovery keeps a prefix of the commits. A failed
//! sync stops the ledger: no job is answered as durable after it.
//!
//! A failing job must leave no trace, yet a SAVEPOINT per job costs two statements and a copy
//! of every page the job touches; so the writer first runs the whole group without savepoints
//! and, only if some job fails, rolls the group back and runs it again with one SAVEPOINT per
//! job (a job is a pure function of the database and its inputs, so running it twice is safe).
//! Under load the writer paces its groups, at most one start per [`COMMIT_PACE`], so that each
//! commit's fixed cost is shared by more jobs; a light load (the previous group held fewer
//! than [`PACE_FROM_JOBS`]) never waits.
//!
//! Jobs run on a `Tx`: the writer's connection with the gift path's statements prepared for
//! the writer's life, and the house's takings, which the group writes once before it commits.
//!
//! WAL checkpoints run on a third connection, on their own thread, so the writer never stops
//! to copy pages into the database file: once a commit leaves [`CHECKPOINT_AFTER_FRAMES`] frames
//! in the WAL beyond those already copied, the writer wakes the checkpointer, which runs a
//! PASSIVE checkpoint (it never blocks the writer). Under endless load a PASSIVE checkpoint may
//! never catch the WAL's end at the moment the writer could restart it, so from
//! [`WAL_DRAIN_FROM_FRAMES`] every commit that leaves frames uncopied wakes it: each pass then
//! copies one group, quicker than the writer's pause between groups, and once a pass has copied
//! the WAL to its end the next group restarts it from its beginning, which SQLite does itself
//! when a write begins on a fully copied WAL. Only if that never happens (a reader holding an
//! old snapshot, a checkpointer slower than the writer) does the writer, past
//! [`WAL_LIMIT_FRAMES`], run a RESTART checkpoint itself and stop for it.
//!
//! # Layout
//! This file holds the engine's handle and the contract's calls; beside it: `schema`
//! (connection settings, tables, migrations), `writer` (the writer thread and its group
//! commit), `tx` (a job's view of the group transaction), `wal` (the syncer and the
//! checkpoints), `saga` (the saga's steps in SQL), `rows` (row helpers) and `tests`.

mod app_rank;
mod guard;
mod movements;
mod payment;
mod rows;
mod saga;
mod schema;
mod settlement;
#[cfg(test)]
mod tests;
mod transfer;
mod tx;
mod wal;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use protocol::{RoomId, UserId};
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::{mpsc, oneshot};
use tracing::info;
use uuid::Uuid;

use self::movements::insert_movements;
use self::rows::{
    add_coins, claim_of, coins, ensure_fence, entry_amount, entry_kind, house, insert_entry,
    load_saga, sagas_listed,
};
use self::saga::{tx_begin, tx_debit, tx_send, tx_settle, tx_void};
use self::schema::{
    BOARD_RECEIVERS, BOARD_SENDERS, META_LEGACY_GIFT_IDS, SCHEMA, Syncing, migrate, open_connection,
};
use self::tx::{Hot, Tx};
#[cfg(test)]
use self::wal::SyncHooks;
pub use self::wal::{
    CHECKPOINT_AFTER_FRAMES, METRIC_CHECKPOINT_SECONDS, METRIC_CHECKPOINTS, METRIC_WAL_RESTARTS,
    METRIC_WAL_SYNC_SECONDS, METRIC_WAL_SYNCS, WAL_DRAIN_FROM_FRAMES, WAL_LIMIT_FRAMES,
};
use self::wal::{
    ToSync, WAL_BOUNDS, WalBounds, WalState, WalSyncer, after_commit, checkpointer_loop,
};
pub use self::writer::{
    COMMIT_PACE, MAX_JOBS_PER_COMMIT, METRIC_GROUP_COMMIT_JOBS, METRIC_GROUP_COMMITS,
    METRIC_SLOW_GROUPS, PACE_FROM_JOBS, WRITE_QUEUE_CAPACITY,
};
use self::writer::{Job, Pending, SYNCER_STOPPED, writer_loop};
use super::movement::single;
use super::{
    BeginOutcome, DebitOutcome, EntryKind, FenceInstall, GiftOrder, GiftOutcome, GrantOutcome,
    HistoryPage, HistoryQuery, MovementKind, SagaRecord, SettleOutcome, Totals, VoidOutcome,
    VoidReason, grant_entry_id, now_ms,
};
use crate::{Result, StorageError};

/// The SQLite engine: a handle on the writer thread's queue and a reader connection.
#[derive(Clone)]
pub struct SqliteLedger {
    jobs: mpsc::Sender<Job>,
    reader: Arc<tokio::sync::Mutex<Connection>>,
    /// The syncer's inbox, for reads to ask for a sync after them.
    syncer: std::sync::mpsc::Sender<ToSync>,
    /// Sagas booked before the time-ordered gift ids may be kept under their v5 ids.
    legacy_gift_ids: bool,
    #[cfg(test)]
    wal: Arc<WalState>,
    #[cfg(test)]
    sync_hooks: Arc<SyncHooks>,
}

fn db(e: rusqlite::Error) -> StorageError {
    StorageError::backend("sqlite", e)
}

fn to_sql_fence(fence: u64) -> Result<i64> {
    i64::try_from(fence).map_err(|_| StorageError::invalid_msg(format!("fence {fence} too large")))
}

fn from_sql_fence(fence: i64) -> Result<u64> {
    u64::try_from(fence).map_err(|_| StorageError::corrupt_msg(format!("negative fence {fence}")))
}

impl SqliteLedger {
    /// Opens (creating if needed) the ledger database at `path` and starts its writer thread.
    ///
    /// # Errors
    /// `Backend` if the file cannot be opened or the schema cannot be created.
    pub async fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, WAL_BOUNDS).await
    }

    async fn open_with(path: &Path, bounds: WalBounds) -> Result<Self> {
        let path: PathBuf = path.to_owned();
        let wal = Arc::new(WalState::default());
        let wal_of_writer = Arc::clone(&wal);
        let (writer, reader, legacy_gift_ids, wal_file) =
            tokio::task::spawn_blocking(move || -> Result<_> {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .map_err(|e| StorageError::backend(format!("create {dir:?}"), e))?;
                }
                let mut writer = open_connection(&path, Syncing::CommitsBySyncer)?;
                writer.execute_batch(SCHEMA).map_err(db)?;
                writer.execute_batch(transfer::SCHEMA).map_err(db)?;
                writer.execute_batch(payment::SCHEMA).map_err(db)?;
                writer.execute_batch(settlement::SCHEMA).map_err(db)?;
                writer.execute_batch(guard::SCHEMA).map_err(db)?;
                migrate(&mut writer)?;
                let legacy_gift_ids = writer
                    .query_row(
                        "SELECT EXISTS (SELECT 1 FROM ledger_meta WHERE key = ?1)",
                        [META_LEGACY_GIFT_IDS],
                        |r| r.get(0),
                    )
                    .map_err(db)?;
                // The writer thread prepares its own; a failure is reported here, at open.
                drop(Hot::prepare(&writer).map_err(db)?);
                let reader = open_connection(&path, Syncing::Full)?;
                let checkpointer = open_connection(&path, Syncing::Full)?;
                // The writer's only handle on the wake-up channel lives in its WAL hook: when the
                // writer thread ends, the checkpointer's `recv` fails and it ends too.
                let (wake, wakes) = std::sync::mpsc::sync_channel::<()>(1);
                let wal_of_checkpointer = Arc::clone(&wal_of_writer);
                writer
                    .wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, frames| {
                        after_commit(wal, frames, bounds, &wal_of_writer, &wake)
                    }))
                    .map_err(db)?;
                std::thread::Builder::new()
                    .name("ledger-checkpoint".into())
                    .spawn(move || checkpointer_loop(&checkpointer, &wal_of_checkpointer, &wakes))
                    .map_err(|e| StorageError::backend("spawn ledger checkpointer", e))?;
                // The WAL's file, for the syncer: SQLite created it when the writer first opened
                // the database in WAL mode, and keeps it (this inode) while a connection is open.
                let mut wal_path = path.into_os_string();
                wal_path.push("-wal");
                let wal_file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&wal_path)
                    .map_err(|e| StorageError::backend(format!("open {wal_path:?}"), e))?;
                Ok((writer, reader, legacy_gift_ids, wal_file))
            })
            .await
            .map_err(|e| StorageError::backend("ledger open task", e))??;
        let sync_failed = Arc::new(AtomicBool::new(false));
        let (syncer, inbox) = std::sync::mpsc::channel::<ToSync>();
        #[cfg(test)]
        let sync_hooks = Arc::new(SyncHooks::default());
        let wal_syncer = WalSyncer {
            wal: wal_file,
            failed: Arc::clone(&sync_failed),
            #[cfg(test)]
            hooks: Arc::clone(&sync_hooks),
        };
        std::thread::Builder::new()
            .name("ledger-sync".into())
            .spawn(move || wal_syncer.run(&inbox))
            .map_err(|e| StorageError::backend("spawn ledger syncer", e))?;
        let (jobs, rx) = mpsc::channel(WRITE_QUEUE_CAPACITY);
        let to_syncer = syncer.clone();
        std::thread::Builder::new()
            .name("ledger-writer".into())
            .spawn(move || writer_loop(writer, rx, &sync_failed, &to_syncer))
            .map_err(|e| StorageError::backend("spawn ledger writer", e))?;
        info!("SQLite ledger open.");
        Ok(Self {
            jobs,
            reader: Arc::new(tokio::sync::Mutex::new(reader)),
            syncer,
            legacy_gift_ids,
            #[cfg(test)]
            wal,
            #[cfg(test)]
            sync_hooks,
        })
    }

    /// Whether sagas booked before gift ids of UUIDv7 requests became time-ordered may be kept
    /// here under their old ids ([`crate::ledger::legacy_gift_id`]): set for a ledger that
    /// held sagas when it was migrated, never for one created since.
    pub fn may_hold_legacy_gift_ids(&self) -> bool {
        self.legacy_gift_ids
    }

    /// Runs `f` inside the next group commit and answers once the commit is durable.
    async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&Tx<'_, '_>) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(Pending { f, out: None, tx });
        self.jobs
            .send(job)
            .await
            .map_err(|_| StorageError::unavailable_msg("ledger writer stopped"))?;
        rx.await
            .map_err(|_| StorageError::unavailable_msg("ledger writer dropped the request"))?
    }

    /// Runs a read on the reader connection, off the async threads, and answers after a sync
    /// of the WAL that began once the query had ended: whatever commit it saw is durable.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        // The lock is taken as a future: waiting readers hold no pool thread.
        let conn = Arc::clone(&self.reader).lock_owned().await;
        let out = tokio::task::spawn_blocking(move || f(&conn))
            .await
            .map_err(|e| StorageError::backend("ledger read task", e))??;
        let (done, synced) = oneshot::channel();
        let stopped = || StorageError::unavailable_msg(SYNCER_STOPPED);
        self.syncer
            .send(ToSync::Read(done))
            .map_err(|_| stopped())?;
        synced.await.map_err(|_| stopped())?;
        Ok(out)
    }

    /// Runs a read on the reader connection, off the async threads, and answers at once: for
    /// reads only shown to users (badges), where waiting for the WAL's sync buys nothing.
    async fn read_unsynced<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let conn = Arc::clone(&self.reader).lock_owned().await;
        tokio::task::spawn_blocking(move || f(&conn))
            .await
            .map_err(|e| StorageError::backend("ledger read task", e))?
    }

    /// A grant with its statement line a `Grant` (the engine's own tests).
    #[cfg(test)]
    pub(super) async fn grant(
        &self,
        user: &UserId,
        amount: i64,
        key: &str,
    ) -> Result<GrantOutcome> {
        self.grant_as(user, amount, key, MovementKind::Grant).await
    }

    pub(super) async fn grant_as(
        &self,
        user: &UserId,
        amount: i64,
        key: &str,
        line: MovementKind,
    ) -> Result<GrantOutcome> {
        let user = user.clone();
        let entry_id = grant_entry_id(key);
        let key = key.to_owned();
        self.write(move |c| {
            if let Some(kind) = entry_kind(c, user.as_str(), entry_id)? {
                if kind != EntryKind::Grant {
                    return Err(StorageError::corrupt_msg(format!(
                        "grant key holds a {kind:?}"
                    )));
                }
                return Ok(GrantOutcome {
                    balance: coins(c, user.as_str())?,
                    applied: false,
                    amount: entry_amount(c, user.as_str(), entry_id)?,
                });
            }
            let balance = add_coins(c, user.as_str(), amount)?;
            insert_entry(
                c,
                user.as_str(),
                entry_id,
                EntryKind::Grant,
                amount,
                Some(balance),
            )?;
            let line = single(&user, line, amount, Some(balance), None, &key, now_ms());
            insert_movements(c, &[line])?;
            Ok(GrantOutcome {
                balance,
                applied: true,
                amount,
            })
        })
        .await
    }

    pub(super) async fn history(&self, user: &UserId, q: &HistoryQuery) -> Result<HistoryPage> {
        let (user, q) = (user.clone(), q.clone());
        self.read(move |c| movements::history(c, user.as_str(), &q))
            .await
    }

    pub(super) async fn balance(&self, user: &UserId) -> Result<i64> {
        let user = user.clone();
        self.read(move |c| coins(c, user.as_str())).await
    }

    pub(super) async fn earnings(&self, user: &UserId) -> Result<i64> {
        let user = user.clone();
        self.read(move |c| {
            c.prepare_cached("SELECT earnings FROM account WHERE user = ?1")
                .map_err(db)?
                .query_row([user.as_str()], |r| r.get(0))
                .optional()
                .map_err(db)
                .map(|v| v.unwrap_or(0))
        })
        .await
    }

    pub(super) async fn install_fence(
        &self,
        room: &RoomId,
        fence: u64,
        owner: &str,
    ) -> Result<FenceInstall> {
        let room = room.clone();
        let owner = owner.to_owned();
        let f = to_sql_fence(fence)?;
        self.write(move |c| {
            let current: Option<(i64, String)> = c
                .prepare_cached("SELECT fence, owner FROM room_owner WHERE room = ?1")
                .map_err(db)?
                .query_row([room.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
                .map_err(db)?;
            match current {
                Some((cur, ref who)) if cur > f || (cur == f && *who != owner) => {
                    return Ok(FenceInstall::Stale {
                        current: from_sql_fence(cur)?,
                    });
                }
                _ => {}
            }
            let first = current.is_none();
            c.prepare_cached(
                "INSERT INTO room_owner (room, fence, owner, since_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (room) DO UPDATE SET fence = ?2, owner = ?3, since_ms = ?4",
            )
            .map_err(db)?
            .execute(params![room.as_str(), f, owner, now_ms()])
            .map_err(db)?;
            Ok(if first {
                FenceInstall::First
            } else {
                FenceInstall::Installed
            })
        })
        .await
    }

    pub(super) async fn send_gift(&self, order: &GiftOrder, fence: u64) -> Result<GiftOutcome> {
        let order = order.clone();
        self.write(move |c| tx_send(c, &order, fence)).await
    }

    pub(super) async fn begin(&self, order: &GiftOrder, fence: u64) -> Result<BeginOutcome> {
        let order = order.clone();
        self.write(move |c| tx_begin(c, &order, fence)).await
    }

    pub(super) async fn debit(&self, order: &GiftOrder, fence: u64) -> Result<DebitOutcome> {
        let order = order.clone();
        self.write(move |c| tx_debit(c, &order, fence)).await
    }

    pub(super) async fn settle(&self, order: &GiftOrder, fence: u64) -> Result<SettleOutcome> {
        let order = order.clone();
        self.write(move |c| tx_settle(c, &order, fence)).await
    }

    pub(super) async fn void(
        &self,
        order: &GiftOrder,
        fence: u64,
        reason: VoidReason,
    ) -> Result<VoidOutcome> {
        let order = order.clone();
        self.write(move |c| tx_void(c, &order, fence, reason)).await
    }

    pub(super) async fn touch(&self, order: &GiftOrder, fence: u64) -> Result<Option<SagaRecord>> {
        let order = order.clone();
        self.write(move |c| {
            let Some(mut rec) = load_saga(c, order.gift_id)? else {
                return Ok(None);
            };
            ensure_fence(c, &order.room, fence, rec.fence)?;
            if fence > rec.fence {
                c.prepare_cached("UPDATE gift_saga SET fence = ?1 WHERE gift_id = ?2")
                    .map_err(db)?
                    .execute(params![
                        to_sql_fence(fence)?,
                        order.gift_id.as_bytes().as_slice()
                    ])
                    .map_err(db)?;
                rec.fence = fence;
            }
            Ok(Some(rec))
        })
        .await
    }

    pub(super) async fn saga(&self, gift_id: Uuid) -> Result<Option<SagaRecord>> {
        self.read(move |c| load_saga(c, gift_id)).await
    }

    /// The sender's claim under the gift id: its saga's state records it (see [`SCHEMA`]).
    pub(super) async fn wallet_entry(
        &self,
        sender: &UserId,
        gift_id: Uuid,
    ) -> Result<Option<EntryKind>> {
        let sender = sender.clone();
        self.read(move |c| {
            Ok(load_saga(c, gift_id)?
                .filter(|rec| rec.order.sender == sender)
                .and_then(|rec| claim_of(rec.state)))
        })
        .await
    }

    pub(super) async fn pending_sagas(
        &self,
        room: &RoomId,
        min_age_ms: i64,
    ) -> Result<Vec<SagaRecord>> {
        let room = room.clone();
        let before = now_ms().saturating_sub(min_age_ms);
        self.read(move |c| {
            sagas_listed(
                c,
                "SELECT gift_id FROM gift_saga
                 WHERE room = ?1 AND state IN ('PENDING', 'DEBITED') AND updated_ms <= ?2",
                &room,
                before,
            )
        })
        .await
    }

    pub(super) async fn rooms_with_open_sagas(&self, min_age_ms: i64) -> Result<Vec<RoomId>> {
        let before = now_ms().saturating_sub(min_age_ms);
        self.read(move |c| {
            // The partial index `gift_saga_open` holds exactly the open sagas.
            let mut stmt = c
                .prepare_cached(
                    "SELECT room FROM gift_saga
                     WHERE state IN ('PENDING', 'DEBITED') AND updated_ms <= ?1
                     UNION SELECT room FROM unpublished_gift WHERE marked_ms <= ?1",
                )
                .map_err(db)?;
            stmt.query_map([before], |r| r.get::<_, String>(0).map(RoomId::new))
                .map_err(db)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(db)
        })
        .await
    }

    pub(super) async fn mark_unpublished(&self, gift_id: Uuid) -> Result<()> {
        self.write(move |c| {
            c.prepare_cached(
                "INSERT OR IGNORE INTO unpublished_gift (gift_id, room, marked_ms)
                 SELECT gift_id, room, ?2 FROM gift_saga WHERE gift_id = ?1 AND state = 'SETTLED'",
            )
            .map_err(db)?
            .execute(params![gift_id.as_bytes().as_slice(), now_ms()])
            .map_err(db)?;
            Ok(())
        })
        .await
    }

    pub(super) async fn unpublished_gifts(
        &self,
        room: &RoomId,
        min_age_ms: i64,
    ) -> Result<Vec<GiftOrder>> {
        let room = room.clone();
        let before = now_ms().saturating_sub(min_age_ms);
        self.read(move |c| {
            let listed = sagas_listed(
                c,
                "SELECT gift_id FROM unpublished_gift
                 WHERE room = ?1 AND marked_ms <= ?2 ORDER BY marked_ms",
                &room,
                before,
            )?;
            Ok(listed.into_iter().map(|rec| rec.order).collect())
        })
        .await
    }

    pub(super) async fn take_unpublished(&self, room: &RoomId, gift_id: Uuid) -> Result<bool> {
        let room = room.clone();
        self.write(move |c| {
            let taken = c
                .prepare_cached("DELETE FROM unpublished_gift WHERE gift_id = ?1 AND room = ?2")
                .map_err(db)?
                .execute(params![gift_id.as_bytes().as_slice(), room.as_str()])
                .map_err(db)?;
            Ok(taken == 1)
        })
        .await
    }

    pub(super) async fn leaderboard(
        &self,
        room: &RoomId,
        board: super::Board,
        first_day: i64,
        limit: usize,
    ) -> Result<Vec<(UserId, i64)>> {
        let room = room.clone();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |c| {
            let board = match board {
                super::Board::Senders => BOARD_SENDERS,
                super::Board::Receivers => BOARD_RECEIVERS,
            };
            let mut stmt = c
                .prepare_cached(
                    "SELECT user, SUM(total) AS sum FROM gift_rank
                     WHERE room = ?1 AND board = ?2 AND day >= ?3 GROUP BY user
                     ORDER BY sum DESC, user ASC LIMIT ?4",
                )
                .map_err(db)?;
            stmt.query_map(params![room.as_str(), board, first_day, limit], |r| {
                Ok((UserId::new(r.get::<_, String>(0)?), r.get::<_, i64>(1)?))
            })
            .map_err(db)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db)
        })
        .await
    }

    /// A group commit with nothing in it: the writer runs and the disk takes a sync.
    pub(super) async fn check_writable(&self) -> Result<()> {
        self.write(|_| Ok(())).await
    }

    pub(super) async fn audit_totals(&self) -> Result<Totals> {
        self.read(|c| {
            let granted: i64 = c
                .query_row(
                    "SELECT COALESCE(SUM(amount), 0) FROM entry WHERE kind = 'GRANT'",
                    [],
                    |r| r.get(0),
                )
                .map_err(db)?;
            let (coins, earnings, negative): (i64, i64, i64) = c
                .query_row(
                    "SELECT COALESCE(SUM(coins), 0), COALESCE(SUM(earnings), 0),
                            COALESCE(SUM(coins < 0), 0) FROM account",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .map_err(db)?;
            let (topped_up, refunded, debt, transferred) = payment::payment_totals(c)?;
            Ok(Totals {
                settled: settlement::settled_total(c)?,
                topped_up,
                refunded,
                debt,
                transferred,
                granted,
                coins,
                earnings,
                platform_revenue: house(c, "platform_revenue")?,
                lucky_paid: house(c, "lucky_paid")?,
                negative_accounts: negative,
            })
        })
        .await
    }
}
