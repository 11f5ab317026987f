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
//! of the writer's cycle (BENCHMARKS.md, Change 23). Reads wait too: a read answers only
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

use std::cell::{Cell, RefCell, RefMut};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protocol::{RoomId, UserId};
use rusqlite::{Connection, OptionalExtension, Statement, params};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info};
use uuid::Uuid;

use super::{
    BeginOutcome, DebitOutcome, EntryKind, FenceInstall, GiftOrder, GiftOutcome, GiftResult,
    GrantOutcome, SagaRecord, SagaState, SettleOutcome, Totals, VoidOutcome, VoidReason, day_of,
    grant_entry_id, now_ms,
};
use crate::{Result, StorageError};

/// Most jobs folded into one transaction (one fsync). Large enough that a burst of concurrent
/// gifts shares a commit; small enough that one commit's latency stays a few milliseconds.
pub const MAX_JOBS_PER_COMMIT: usize = 1024;
/// Under load, the least time between the starts of two group commits. Each commit has a cost
/// of its own whatever it holds (the pages every group dirties, such as the house account and
/// each room's index tail, are written again; the page-cache walk after a b-tree split; the
/// fsync), so fewer, larger groups cost less CPU per gift: measured 13 % less at 8,000 gifts/s
/// with the same reply p99 (BENCHMARKS.md, Change 8). It is also the most a job waits for it.
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
/// Histogram: seconds from a group's first statement to its answers (its commit, any WAL
/// restart the writer ran after it, and the sync that made it durable): every job of the group
/// waited at least this long.
pub const METRIC_GROUP_COMMIT_SECONDS: &str = "chorus_ledger_group_commit_seconds";
/// Counter: syncs of the WAL by the syncer thread (each covers every group committed since the
/// one before).
pub const METRIC_WAL_SYNCS: &str = "chorus_ledger_wal_syncs_total";
/// Histogram: seconds per WAL sync.
pub const METRIC_WAL_SYNC_SECONDS: &str = "chorus_ledger_wal_sync_seconds";
/// How long a connection waits on a lock held by another process before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Page cache per connection, in KiB (SQLite's negative `cache_size` unit). Small on purpose:
/// when a b-tree split puts its new pages in page-number order (`balance_nonroot`; random gift
/// ids split pages often), it parks one page at the pending-byte page's number (262,145 with
/// 4 KiB pages) for a moment. The cache then remembers that number as its largest key, and
/// the transaction's end walks the whole page-cache hash table to drop pages past the end of
/// the file (`pcache1TruncateUnsafe`; a uprobe saw it on every commit of a gift storm: a fifth
/// of the writer's time with a 64 MiB cache and small groups, ~6 % with this one). A smaller
/// cache than this measured no better: pages that miss it and still sit in the WAL are read
/// back with `pread`.
const PAGE_CACHE_KIB: i64 = 8 * 1024;
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
/// (BENCHMARKS.md, Change 21).
pub const WAL_DRAIN_FROM_FRAMES: i32 = WAL_LIMIT_FRAMES - CHECKPOINT_AFTER_FRAMES;
/// Counter: WAL restarts (the WAL's next commit written at its beginning again), whoever ran
/// them: the writer's own RESTART, or a write that began on a WAL copied to its end.
pub const METRIC_WAL_RESTARTS: &str = "chorus_ledger_wal_restarts_total";

/// Counter: groups run a second time with a savepoint per job because a job failed.
pub const METRIC_SLOW_GROUPS: &str = "chorus_ledger_slow_groups_total";
/// Counter: WAL checkpoints, by who ran them (`checkpointer` or `writer`; `writer_busy`: the
/// writer's restart found the checkpointer mid-pass and was left to the next commit).
pub const METRIC_CHECKPOINTS: &str = "chorus_ledger_checkpoints_total";
/// Histogram: seconds per WAL checkpoint, by who ran it. The writer's own (`writer`) hold up
/// its next group.
pub const METRIC_CHECKPOINT_SECONDS: &str = "chorus_ledger_checkpoint_seconds";
/// Bytes of the database file mapped into memory: none. With a mapping, every page the writer
/// fetches read-only first asks the WAL index whether a newer copy sits in the WAL
/// (`getPageMMap` calls `walFindFrame`), even when the page is in the page cache; with the WAL
/// tens of thousands of frames long that search walks one hash block per 4,096 frames. It was
/// ~8 % of a gift storm's instructions in the ledger benchmark, while a page that misses the
/// cache is rare (the storm's `pread` count is the same without the mapping). Without it a
/// page in the cache costs no WAL lookup (BENCHMARKS.md, Change 22). Set explicitly, so a
/// SQLite built with another `SQLITE_DEFAULT_MMAP_SIZE` does not bring it back.
const MMAP_BYTES: i64 = 0;
/// Prepared statements kept per connection: every statement the ledger uses, with room to spare.
const STATEMENT_CACHE_CAPACITY: usize = 64;

/// The ledger's tables. Write cost is mostly pages: every commit writes each page it dirtied to
/// the WAL, and a row keyed by a random gift id dirties a random page (about 8 µs of CPU per
/// gift each, measured: BENCHMARKS.md, Change 10). So each gift touches as few randomly keyed
/// b-trees as its lookups need, one: `gift_saga` keeps its large row in a rowid table
/// (appended, hot pages) with only the small `gift_id` index random.
///
/// A gift's money moves are recorded by its saga row, not by `entry` rows: the sender's debit
/// or void claim is the saga's state (DEBITED or SETTLED: debited; VOIDED: the void claim),
/// and a lucky prize is in the stored order. On SQLite every claim and its state change commit
/// in one transaction, so a separate claim row would only repeat the state, at the cost of a
/// second random page per gift; and the unique `gift_id` (a hash of sender and request id)
/// makes a second debit or a debit after a void impossible, as the entry's key did.
/// `entry` holds top-ups, whose key makes a grant idempotent. Ledgers written before this
/// layout also hold DEBIT, VOID and LUCKY entries for their gifts; they agree with the sagas
/// and are no longer read. `settled_gift` is an
/// append-only log of facts with no key of its own (its rows are written once, in the same
/// transaction that moves the saga to SETTLED, whose own key refuses a second settlement) and
/// no index: audits read it whole. The leaderboards read `gift_rank`, each user's total per
/// room, board and UTC day, added to in that same transaction: a room's board costs a read of
/// its users' rows (times the days in the period), however many gifts the room has seen.
/// `unpublished_gift` lists the settled gifts whose room event a runtime could not publish,
/// until the room's next owner takes one to publish it; it is empty but for such failures.
/// [`MIGRATIONS`] bring older ledgers to this layout. Measured: a `WITHOUT
/// ROWID` `gift_saga` (its large rows in the random b-tree) costs more CPU per gift, not less.
/// Databases created with the earlier layout (`settled_gift` keyed by `(gift_id, receiver)`)
/// keep working unchanged: every statement reads and writes the same columns.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS account (
  user     TEXT PRIMARY KEY,
  coins    INTEGER NOT NULL DEFAULT 0 CHECK (coins >= 0),
  earnings INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS entry (
  user          TEXT NOT NULL,
  entry_id      BLOB NOT NULL,
  kind          TEXT NOT NULL,
  amount        INTEGER NOT NULL,
  balance_after INTEGER,
  created_ms    INTEGER NOT NULL,
  PRIMARY KEY (user, entry_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS house (
  name   TEXT PRIMARY KEY,
  amount INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO house (name, amount) VALUES ('platform_revenue', 0), ('lucky_paid', 0);
CREATE TABLE IF NOT EXISTS room_owner (
  room     TEXT PRIMARY KEY,
  fence    INTEGER NOT NULL,
  owner    TEXT NOT NULL,
  since_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gift_saga (
  gift_id       BLOB PRIMARY KEY,
  room          TEXT NOT NULL,
  order_json    TEXT NOT NULL,
  state         TEXT NOT NULL,
  fence         INTEGER NOT NULL,
  reason        TEXT,
  balance_after INTEGER,
  updated_ms    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS gift_saga_open ON gift_saga (room, updated_ms)
  WHERE state IN ('PENDING', 'DEBITED');
CREATE TABLE IF NOT EXISTS settled_gift (
  gift_id  BLOB NOT NULL,
  receiver TEXT NOT NULL,
  room     TEXT NOT NULL,
  day      INTEGER NOT NULL,
  sender   TEXT NOT NULL,
  amount   INTEGER NOT NULL,
  earnings INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS unpublished_gift (
  gift_id   BLOB PRIMARY KEY,
  room      TEXT NOT NULL,
  marked_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS unpublished_gift_room ON unpublished_gift (room, marked_ms);
CREATE TABLE IF NOT EXISTS gift_rank (
  room  TEXT NOT NULL,
  board INTEGER NOT NULL,
  day   INTEGER NOT NULL,
  user  TEXT NOT NULL,
  total INTEGER NOT NULL,
  PRIMARY KEY (room, board, day, user)
) WITHOUT ROWID;
";

/// `gift_rank.board` of the senders' board (coins spent in the room).
const BOARD_SENDERS: i64 = 0;
/// `gift_rank.board` of the receivers' board (gift value received in the room).
const BOARD_RECEIVERS: i64 = 1;

/// Schema changes after [`SCHEMA`]'s tables exist, in order; a ledger's `user_version` counts
/// those applied. Each runs once, in one transaction with the version bump, so two processes
/// opening one file migrate it once.
///
/// 1. Leaderboards from `gift_rank`: fill it from the settled facts and drop the facts' index
///    by room and day, which only the leaderboards read. A ledger written by this version must
///    not be written by an older one afterwards: its gifts would be missing from the boards.
/// 2. Gift ids of UUIDv7 request ids became time-ordered ([`crate::ledger::gift_id`]): a ledger
///    that already holds sagas is marked, so that a retry of a request booked under its old
///    (v5) id finds that saga ([`SqliteLedger::may_hold_legacy_gift_ids`]). A fresh ledger has
///    none, and never looks.
const MIGRATIONS: &[&str] = &[
    "
INSERT INTO gift_rank (room, board, day, user, total)
  SELECT room, 0, day, sender, SUM(amount) FROM settled_gift GROUP BY room, day, sender
  UNION ALL
  SELECT room, 1, day, receiver, SUM(amount) FROM settled_gift GROUP BY room, day, receiver;
DROP INDEX IF EXISTS settled_gift_room_day;
",
    "
CREATE TABLE IF NOT EXISTS ledger_meta (
  key   TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO ledger_meta (key, value)
  SELECT 'legacy_gift_ids', 1 WHERE EXISTS (SELECT 1 FROM gift_saga);
",
];

/// `ledger_meta` key set (by migration 2) when the ledger holds sagas booked before gift ids of
/// time-ordered requests became time-ordered: their retries must look under the old id too.
const META_LEGACY_GIFT_IDS: &str = "legacy_gift_ids";

/// Applies the [`MIGRATIONS`] this ledger has not had yet.
fn migrate(conn: &mut Connection) -> Result<()> {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(db)?;
    let applied: i64 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(db)?;
    let applied = usize::try_from(applied)
        .map_err(|_| StorageError::Corrupt(format!("ledger user_version {applied}")))?;
    if applied > MIGRATIONS.len() {
        return Err(StorageError::Backend(format!(
            "the ledger has {applied} schema changes, this version knows {}: written by a newer version",
            MIGRATIONS.len()
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(applied) {
        tx.execute_batch(sql).map_err(db)?;
        let version = i64::try_from(i + 1).unwrap_or(i64::MAX);
        tx.pragma_update(None, "user_version", version)
            .map_err(db)?;
        info!(version = i + 1, "Ledger schema migrated.");
    }
    tx.commit().map_err(db)
}

/// One queued write: run inside the group's transaction (perhaps twice, see the module docs),
/// then answered with the group's commit result.
trait WriteJob: Send {
    /// Runs the job; `false` when it failed and its writes must be undone.
    fn run(&mut self, tx: &Tx<'_, '_>) -> bool;
    /// Answers the caller: the job's result if the group committed, else the commit's error.
    fn answer(self: Box<Self>, commit: Result<()>);
}

type Job = Box<dyn WriteJob>;

struct Pending<T, F> {
    f: F,
    out: Option<Result<T>>,
    tx: oneshot::Sender<Result<T>>,
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
            .unwrap_or_else(|| Err(StorageError::Backend("ledger job never ran".into())));
        // The caller may have gone away; its answer is then simply dropped.
        let _ = self.tx.send(commit.and(out));
    }
}

const SQL_FENCE: &str = "SELECT fence FROM room_owner WHERE room = ?1";
const SQL_COINS: &str = "SELECT coins FROM account WHERE user = ?1";
const SQL_SET_COINS: &str = "UPDATE account SET coins = ?2 WHERE user = ?1";
const SQL_NEW_SAGA: &str = "INSERT INTO gift_saga (gift_id, room, order_json, state, fence, reason,
   balance_after, updated_ms)
 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
 ON CONFLICT (gift_id) DO NOTHING";
// Credits and leaderboard totals add to rows that almost always exist already: a plain
// `UPDATE` finds the row with one b-tree search, where an upsert first searched for a place to
// insert, met the conflict, and then ran its update (1.5 % of the ledger benchmark's
// instructions, BENCHMARKS.md Change 16). The rare first row is inserted after it.
const SQL_CREDIT: &str = "UPDATE account SET earnings = earnings + ?2 WHERE user = ?1";
const SQL_CREDIT_NEW: &str = "INSERT INTO account (user, earnings) VALUES (?1, ?2)";
const SQL_FACT: &str = "INSERT INTO settled_gift (gift_id, receiver, room, day, sender, amount,
   earnings)
 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
const SQL_RANK: &str = "UPDATE gift_rank SET total = total + ?5
 WHERE room = ?1 AND board = ?2 AND day = ?3 AND user = ?4";
const SQL_RANK_NEW: &str = "INSERT INTO gift_rank (room, board, day, user, total)
 VALUES (?1, ?2, ?3, ?4, ?5)";

/// The gift path's statements, prepared once on the writer's connection and held for its life.
/// Through the connection's statement cache, every execution also hashed its SQL text twice and
/// moved the statement out of the cache's LRU list and back: ~1,100 instructions per statement,
/// about a tenth of a gift's instructions on the writer (BENCHMARKS.md, Change 16). The cache
/// still serves the colder statements.
struct Hot<'c> {
    fence: RefCell<Statement<'c>>,
    coins: RefCell<Statement<'c>>,
    set_coins: RefCell<Statement<'c>>,
    new_saga: RefCell<Statement<'c>>,
    credit: RefCell<Statement<'c>>,
    fact: RefCell<Statement<'c>>,
    rank: RefCell<Statement<'c>>,
}

impl<'c> Hot<'c> {
    fn prepare(conn: &'c Connection) -> rusqlite::Result<Self> {
        let p = |sql| conn.prepare(sql).map(RefCell::new);
        Ok(Self {
            fence: p(SQL_FENCE)?,
            coins: p(SQL_COINS)?,
            set_coins: p(SQL_SET_COINS)?,
            new_saga: p(SQL_NEW_SAGA)?,
            credit: p(SQL_CREDIT)?,
            fact: p(SQL_FACT)?,
            rank: p(SQL_RANK)?,
        })
    }
}

/// One of [`Hot`]'s statements, for one execution (a job never holds two at once).
fn hot<'a, 'c>(stmt: &'a RefCell<Statement<'c>>) -> Result<RefMut<'a, Statement<'c>>> {
    stmt.try_borrow_mut()
        .map_err(|_| StorageError::Backend("a held statement is already in use".into()))
}

/// [`HOUSE_ACCOUNTS`] index of the platform's revenue.
const PLATFORM_REVENUE: usize = 0;
/// [`HOUSE_ACCOUNTS`] index of the lucky prizes paid.
const LUCKY_PAID: usize = 1;

/// The house accounts' takings of one group so far, by [`HOUSE_ACCOUNTS`] index.
type HouseTakings = [i64; 2];

/// The `house` rows a gift adds to: the platform's revenue and the lucky prizes paid.
const HOUSE_ACCOUNTS: [&str; 2] = ["platform_revenue", "lucky_paid"];

/// A job's view of the group transaction: the writer's connection (through `Deref`), its
/// [`Hot`] statements, and the house's takings of the group's jobs so far. Every gift adds to
/// the same `house` rows, so they are written once per group, just before it commits
/// ([`Tx::write_house`]), not once per gift: one statement per gift fewer, the same totals in
/// the same transaction.
struct Tx<'t, 'c> {
    conn: &'c Connection,
    hot: &'t Hot<'c>,
    house: Cell<HouseTakings>,
}

impl std::ops::Deref for Tx<'_, '_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl<'t, 'c> Tx<'t, 'c> {
    fn new(conn: &'c Connection, hot: &'t Hot<'c>) -> Self {
        Self {
            conn,
            hot,
            house: Cell::new([0; 2]),
        }
    }

    /// Adds `delta` to house account `account` ([`HOUSE_ACCOUNTS`]) when the group commits.
    fn add_house(&self, account: usize, delta: i64) -> Result<()> {
        let mut takings = self.house.get();
        let slot = takings
            .get_mut(account)
            .ok_or_else(|| StorageError::Backend(format!("no house account {account}")))?;
        *slot = slot
            .checked_add(delta)
            .ok_or_else(|| StorageError::Backend("house takings would overflow".into()))?;
        self.house.set(takings);
        Ok(())
    }

    /// Writes the group's takings into the `house` rows and zeroes them.
    fn write_house(&self) -> rusqlite::Result<()> {
        for (name, delta) in HOUSE_ACCOUNTS.iter().zip(self.house.take()) {
            if delta != 0 {
                self.conn
                    .prepare_cached("UPDATE house SET amount = amount + ?1 WHERE name = ?2")?
                    .execute(params![delta, name])?;
            }
        }
        Ok(())
    }
}

/// The SQLite engine: a handle on the writer thread's queue and a reader connection.
#[derive(Clone)]
pub struct SqliteLedger {
    jobs: mpsc::Sender<Job>,
    reader: Arc<Mutex<Connection>>,
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
    StorageError::Backend(format!("sqlite: {e}"))
}

fn to_sql_fence(fence: u64) -> Result<i64> {
    i64::try_from(fence).map_err(|_| StorageError::Backend(format!("fence {fence} too large")))
}

fn from_sql_fence(fence: i64) -> Result<u64> {
    u64::try_from(fence).map_err(|_| StorageError::Corrupt(format!("negative fence {fence}")))
}

/// How a connection makes its writes durable (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Syncing {
    /// `synchronous=FULL`: every commit and every checkpoint is fsynced by SQLite.
    Full,
    /// `synchronous=NORMAL` (the writer's): SQLite syncs its checkpoints but not its commits;
    /// the syncer thread fsyncs the WAL before any commit is answered or read.
    CommitsBySyncer,
}

fn open_connection(path: &Path, sync: Syncing) -> Result<Connection> {
    let conn = Connection::open(path).map_err(db)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(db)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(db)?;
    let synchronous = match sync {
        Syncing::Full => "FULL",
        Syncing::CommitsBySyncer => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", synchronous)
        .map_err(db)?;
    conn.pragma_update(None, "cache_size", -PAGE_CACHE_KIB)
        .map_err(db)?;
    // No automatic checkpoints inside commits: the checkpointer thread runs them.
    conn.pragma_update(None, "wal_autocheckpoint", 0)
        .map_err(db)?;
    conn.pragma_update(None, "mmap_size", MMAP_BYTES)
        .map_err(db)?;
    // Each job's SAVEPOINT keeps a sub-journal of the pages it touches: in memory, not in a
    // temp file (it only lives until the group commits; the WAL makes the commit durable).
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(db)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    Ok(conn)
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
                        .map_err(|e| StorageError::Backend(format!("create {dir:?}: {e}")))?;
                }
                let mut writer = open_connection(&path, Syncing::CommitsBySyncer)?;
                writer.execute_batch(SCHEMA).map_err(db)?;
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
                    .map_err(|e| {
                        StorageError::Backend(format!("spawn ledger checkpointer: {e}"))
                    })?;
                // The WAL's file, for the syncer: SQLite created it when the writer first opened
                // the database in WAL mode, and keeps it (this inode) while a connection is open.
                let mut wal_path = path.into_os_string();
                wal_path.push("-wal");
                let wal_file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&wal_path)
                    .map_err(|e| StorageError::Backend(format!("open {wal_path:?}: {e}")))?;
                Ok((writer, reader, legacy_gift_ids, wal_file))
            })
            .await
            .map_err(|e| StorageError::Backend(format!("ledger open task: {e}")))??;
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
            .map_err(|e| StorageError::Backend(format!("spawn ledger syncer: {e}")))?;
        let (jobs, rx) = mpsc::channel(WRITE_QUEUE_CAPACITY);
        let to_syncer = syncer.clone();
        std::thread::Builder::new()
            .name("ledger-writer".into())
            .spawn(move || writer_loop(writer, rx, &sync_failed, &to_syncer))
            .map_err(|e| StorageError::Backend(format!("spawn ledger writer: {e}")))?;
        info!("SQLite ledger open.");
        Ok(Self {
            jobs,
            reader: Arc::new(Mutex::new(reader)),
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
            .map_err(|_| StorageError::Unavailable("ledger writer stopped".into()))?;
        rx.await
            .map_err(|_| StorageError::Unavailable("ledger writer dropped the request".into()))?
    }

    /// Runs a read on the reader connection, off the async threads, and answers after a sync
    /// of the WAL that began once the query had ended: whatever commit it saw is durable.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let reader = Arc::clone(&self.reader);
        let out = tokio::task::spawn_blocking(move || {
            let conn = reader
                .lock()
                .map_err(|_| StorageError::Backend("ledger reader lock poisoned".into()))?;
            f(&conn)
        })
        .await
        .map_err(|e| StorageError::Backend(format!("ledger read task: {e}")))??;
        let (done, synced) = oneshot::channel();
        let stopped = || StorageError::Unavailable(SYNCER_STOPPED.into());
        self.syncer
            .send(ToSync::Read(done))
            .map_err(|_| stopped())?;
        synced.await.map_err(|_| stopped())?;
        Ok(out)
    }

    pub(super) async fn grant(
        &self,
        user: &UserId,
        amount: i64,
        key: &str,
    ) -> Result<GrantOutcome> {
        let user = user.clone();
        let entry_id = grant_entry_id(key);
        self.write(move |c| {
            if let Some(kind) = entry_kind(c, user.as_str(), entry_id)? {
                if kind != EntryKind::Grant {
                    return Err(StorageError::Corrupt(format!("grant key holds a {kind:?}")));
                }
                return Ok(GrantOutcome {
                    balance: coins(c, user.as_str())?,
                    applied: false,
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
            Ok(GrantOutcome {
                balance,
                applied: true,
            })
        })
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
            Ok(Totals {
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

/// A group the writer has committed (or failed to), handed to the syncer to answer.
#[allow(
    clippy::disallowed_types,
    reason = "made and read on the writer's and the syncer's own threads, outside the runtime"
)]
struct Committed {
    /// When the group's first statement ran.
    started: std::time::Instant,
    /// The commit's error, if it failed: nothing of the group is in the WAL then.
    failed: Option<String>,
    jobs: Vec<Job>,
}

/// What the syncer makes durable.
enum ToSync {
    /// A group the writer committed (or failed to): its jobs are answered after the sync.
    Group(Committed),
    /// A read whose query has ended: answered after the next sync, which covers every commit
    /// the query may have seen (a sync flushes the WAL file's pages whoever wrote them).
    Read(oneshot::Sender<()>),
}

/// The writer's half: runs each group and hands it, committed but not yet synced, to the
/// syncer.
#[allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the writer is a thread of its own, outside the runtime: it may block, and its pace is wall-clock time"
)]
fn writer_loop(
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
const SYNCER_STOPPED: &str = "the ledger stopped after a failed WAL sync";

/// Answers `jobs` with their results, or all with `failed`.
fn answer(jobs: Vec<Job>, failed: Option<&str>) {
    for job in jobs {
        let outcome = match failed {
            None => Ok(()),
            Some(e) => Err(StorageError::Unavailable(e.to_owned())),
        };
        job.answer(outcome);
    }
}

/// The syncer thread: the WAL's file, and the flag it raises when a sync fails.
struct WalSyncer {
    wal: std::fs::File,
    failed: Arc<AtomicBool>,
    #[cfg(test)]
    hooks: Arc<SyncHooks>,
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
    fn run(&self, inbox: &std::sync::mpsc::Receiver<ToSync>) {
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
    fn sync(&self) -> std::io::Result<()> {
        #[cfg(test)]
        self.hooks.before_sync()?;
        self.wal.sync_data()
    }
}

/// Test hooks on the syncer: hold it at a gate before it syncs, count its syncs, or fail the
/// next one.
#[cfg(test)]
#[derive(Debug, Default)]
struct SyncHooks {
    /// (gate closed, groups waiting at it)
    gate: Mutex<(bool, usize)>,
    opened: std::sync::Condvar,
    fail_next: AtomicBool,
    /// Syncs run so far.
    syncs: AtomicU64,
}

#[cfg(test)]
impl SyncHooks {
    fn close(&self) {
        self.gate.lock().unwrap().0 = true;
    }

    fn open(&self) {
        self.gate.lock().unwrap().0 = false;
        self.opened.notify_all();
    }

    /// Whether the syncer is waiting at the closed gate.
    fn waiting(&self) -> bool {
        self.gate.lock().unwrap().1 > 0
    }

    /// Waits while the gate is closed, counts the sync, and fails it if asked to.
    fn before_sync(&self) -> std::io::Result<()> {
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

/// How long the writer waits before starting a group, `since` the previous group started with
/// `jobs` jobs: up to [`COMMIT_PACE`] between starts when that group was a crowd, else not at
/// all (a lone caller never waits for company).
fn pace_wait(since: Duration, jobs: usize) -> Option<Duration> {
    (jobs >= PACE_FROM_JOBS)
        .then(|| COMMIT_PACE.checked_sub(since))
        .flatten()
        .filter(|w| !w.is_zero())
}

/// Runs one group in one transaction: fast (no savepoints) when every job succeeds, else again
/// with a savepoint per job. Returns the commit's result.
fn run_group<'c>(conn: &'c Connection, hot: &Hot<'c>, batch: &mut [Job]) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let tx = Tx::new(conn, hot);
    if !batch.iter_mut().all(|job| job.run(&tx)) {
        metrics::counter!(METRIC_SLOW_GROUPS).increment(1);
        conn.execute_batch("ROLLBACK")?;
        tx.house.take();
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

fn exec_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Runs one job in its own savepoint; a failed job leaves no trace, in the database or in the
/// group's house takings.
fn run_in_savepoint(tx: &Tx<'_, '_>, job: &mut dyn WriteJob) -> rusqlite::Result<()> {
    exec_cached(tx, "SAVEPOINT job")?;
    let takings = tx.house.get();
    if !job.run(tx) {
        exec_cached(tx, "ROLLBACK TO job")?;
        tx.house.set(takings);
    }
    exec_cached(tx, "RELEASE job")
}

/// When the writer wakes the checkpointer and when it restarts the WAL itself, in WAL frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WalBounds {
    /// Uncopied frames after a commit that wake the checkpointer.
    checkpoint_after: i32,
    /// Frames from which any uncopied frame wakes it.
    drain_from: i32,
    /// Frames at which the writer runs a RESTART checkpoint itself.
    limit: i32,
}

/// The bounds every ledger runs with.
const WAL_BOUNDS: WalBounds = WalBounds {
    checkpoint_after: CHECKPOINT_AFTER_FRAMES,
    drain_from: WAL_DRAIN_FROM_FRAMES,
    limit: WAL_LIMIT_FRAMES,
};

/// The WAL as the writer and the checkpointer see it, shared between their threads.
#[derive(Debug, Default)]
struct WalState {
    /// Frames in the WAL after the writer's last commit.
    frames: AtomicI32,
    /// Frames the checkpointer's last pass had copied into the database file.
    copied: AtomicI32,
    /// Restarts seen by the writer (a commit left fewer frames than the one before it).
    restarts: AtomicU64,
    /// RESTART checkpoints the writer ran (or tried: the checkpointer may hold the lock) itself.
    writer_checkpoints: AtomicU64,
}

/// What the writer does about the WAL after a commit.
#[derive(Debug, PartialEq, Eq)]
enum WalAction {
    Nothing,
    WakeCheckpointer,
    RestartHere,
}

impl WalBounds {
    /// What to do with `frames` in the WAL after a commit, `copied` by the last checkpoint.
    fn action(self, frames: i32, copied: i32) -> WalAction {
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
fn after_commit(
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
fn checkpointer_loop(conn: &Connection, wal: &WalState, wakes: &std::sync::mpsc::Receiver<()>) {
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

// ---- Steps, run inside the writer's transaction. --------------------------------------------

fn tx_send(c: &Tx<'_, '_>, order: &GiftOrder, fence: u64) -> Result<GiftOutcome> {
    ensure_fence(c, &order.room, fence, 0)?;
    if let Some(outcome) = tx_send_new(c, order, fence)? {
        return Ok(outcome);
    }
    // A retry: continue from the stored saga, answer with the first result.
    let Some(rec) = load_saga(c, order.gift_id)? else {
        return Err(StorageError::Corrupt(
            "a saga refused as a duplicate is missing".into(),
        ));
    };
    ensure_fence(c, &order.room, fence, rec.fence)?;
    if let Some(first) = rec.result() {
        return Ok(GiftOutcome::Duplicate { first });
    }
    let first = match tx_debit(c, order, fence)? {
        DebitOutcome::Debited { .. } => match tx_settle(c, order, fence)? {
            SettleOutcome::Settled { balance } => GiftResult::Settled {
                order_id: order.gift_id,
                balance,
            },
            other => {
                return Err(StorageError::Corrupt(format!(
                    "settle after debit gave {other:?}"
                )));
            }
        },
        DebitOutcome::InsufficientFunds { balance } => GiftResult::InsufficientFunds { balance },
        DebitOutcome::Voided => GiftResult::Voided,
        DebitOutcome::Missing => {
            return Err(StorageError::Corrupt(
                "saga vanished inside a transaction".into(),
            ));
        }
    };
    Ok(GiftOutcome::Duplicate { first })
}

/// The hot path, for a gift id not booked yet: PENDING → DEBITED → SETTLED (or → VOIDED) inside
/// this one job, so the saga row is written once, in its final state. The row goes in first,
/// its unique gift id being the existence check (no lookup before it): `None` when the id is
/// booked already, before anything was written, and the caller continues that saga instead.
fn tx_send_new(c: &Tx<'_, '_>, order: &GiftOrder, fence: u64) -> Result<Option<GiftOutcome>> {
    let sender = order.sender.as_str();
    let total = order.total();
    let balance = tx_coins(c, sender)?;
    // The saga row is the claim: its unique gift id makes a second debit or void impossible.
    if balance < total {
        let reason = Some(VoidReason::InsufficientFunds);
        if !insert_saga(c, order, SagaState::Voided, fence, reason, Some(balance))? {
            return Ok(None);
        }
        return Ok(Some(GiftOutcome::InsufficientFunds { balance }));
    }
    let debited = balance - total;
    let settled = debited
        .checked_add(order.prize())
        .ok_or_else(|| StorageError::Backend(format!("coins of {sender} would overflow")))?;
    if !insert_saga(c, order, SagaState::Settled, fence, None, Some(settled))? {
        return Ok(None);
    }
    tx_set_coins(c, sender, debited)?;
    let after = apply_effects(c, order, Some(debited))?;
    if after != settled {
        // The row above says `settled`: fail the job, so that none of it is kept.
        return Err(StorageError::Corrupt(format!(
            "gift settled at balance {after}, booked as {settled}"
        )));
    }
    Ok(Some(GiftOutcome::Settled {
        order_id: order.gift_id,
        balance: settled,
    }))
}

fn insert_saga(
    c: &Tx<'_, '_>,
    order: &GiftOrder,
    state: SagaState,
    fence: u64,
    reason: Option<VoidReason>,
    balance_after: Option<i64>,
) -> Result<bool> {
    let inserted = hot(&c.hot.new_saga)?
        .execute(params![
            order.gift_id.as_bytes().as_slice(),
            order.room.as_str(),
            order.to_json()?,
            state.as_str(),
            to_sql_fence(fence)?,
            reason.map(VoidReason::as_str),
            balance_after,
            now_ms()
        ])
        .map_err(db)?;
    Ok(inserted == 1)
}

fn tx_begin(c: &Tx<'_, '_>, order: &GiftOrder, fence: u64) -> Result<BeginOutcome> {
    if let Some(rec) = load_saga(c, order.gift_id)? {
        ensure_fence(c, &order.room, fence, rec.fence)?;
        return Ok(BeginOutcome::Existing(rec));
    }
    ensure_fence(c, &order.room, fence, 0)?;
    if !insert_saga(c, order, SagaState::Pending, fence, None, None)? {
        return Err(StorageError::Corrupt(
            "a saga appeared inside a transaction".into(),
        ));
    }
    Ok(BeginOutcome::Started)
}

fn tx_debit(c: &Tx<'_, '_>, order: &GiftOrder, fence: u64) -> Result<DebitOutcome> {
    let Some(rec) = load_saga(c, order.gift_id)? else {
        return Ok(DebitOutcome::Missing);
    };
    // The amounts come from the stored order, never from the caller's copy.
    let order = &rec.order.clone();
    ensure_fence(c, &order.room, fence, rec.fence)?;
    match rec.state {
        SagaState::Debited | SagaState::Settled => {
            return Ok(DebitOutcome::Debited {
                balance: rec.balance_after.unwrap_or(0),
            });
        }
        SagaState::Voided => {
            return Ok(match rec.result() {
                Some(GiftResult::InsufficientFunds { balance }) => {
                    DebitOutcome::InsufficientFunds { balance }
                }
                _ => DebitOutcome::Voided,
            });
        }
        // PENDING: no claim yet (a claim and its state change commit together).
        SagaState::Pending => {}
    }
    let sender = order.sender.as_str();
    let balance = tx_coins(c, sender)?;
    let total = order.total();
    if balance < total {
        mark(
            c,
            order.gift_id,
            SagaState::Voided,
            fence,
            Some(VoidReason::InsufficientFunds),
            Some(balance),
        )?;
        return Ok(DebitOutcome::InsufficientFunds { balance });
    }
    let after = tx_set_coins(c, sender, balance - total)?;
    mark(
        c,
        order.gift_id,
        SagaState::Debited,
        fence,
        None,
        Some(after),
    )?;
    Ok(DebitOutcome::Debited { balance: after })
}

fn tx_settle(c: &Tx<'_, '_>, order: &GiftOrder, fence: u64) -> Result<SettleOutcome> {
    let Some(rec) = load_saga(c, order.gift_id)? else {
        return Ok(SettleOutcome::Missing);
    };
    ensure_fence(c, &order.room, fence, rec.fence)?;
    match rec.state {
        SagaState::Settled => {
            return Ok(SettleOutcome::Settled {
                balance: rec.balance_after.unwrap_or(0),
            });
        }
        SagaState::Pending | SagaState::Voided => return Ok(SettleOutcome::NotDebited(rec.state)),
        SagaState::Debited => {}
    }
    // Effects come from the stored order, never from the caller's copy.
    let o = &rec.order;
    let balance = apply_effects(c, o, None)?;
    mark(c, o.gift_id, SagaState::Settled, fence, None, Some(balance))?;
    Ok(SettleOutcome::Settled { balance })
}

/// Credits recipients' earnings, the house and the prize, and records the settled facts the
/// leaderboards read. Returns the sender's coins afterwards (`known_balance` saves a read).
fn apply_effects(c: &Tx<'_, '_>, o: &GiftOrder, known_balance: Option<i64>) -> Result<i64> {
    let earned = o.earnings_per_recipient();
    let day = day_of(o.created_ms);
    let mut credit = hot(&c.hot.credit)?;
    let mut fact = hot(&c.hot.fact)?;
    let mut rank = hot(&c.hot.rank)?;
    let mut add_rank = |board: i64, user: &str, amount: i64| -> Result<()> {
        let row = params![o.room.as_str(), board, day, user, amount];
        if rank.execute(row).map_err(db)? == 0 {
            c.prepare_cached(SQL_RANK_NEW)
                .map_err(db)?
                .execute(row)
                .map_err(db)?;
        }
        Ok(())
    };
    add_rank(BOARD_SENDERS, o.sender.as_str(), o.total())?;
    for r in &o.recipients {
        let row = params![r.as_str(), earned];
        if credit.execute(row).map_err(db)? == 0 {
            c.prepare_cached(SQL_CREDIT_NEW)
                .map_err(db)?
                .execute(row)
                .map_err(db)?;
        }
        add_rank(BOARD_RECEIVERS, r.as_str(), o.per_recipient())?;
        fact.execute(params![
            o.gift_id.as_bytes().as_slice(),
            r.as_str(),
            o.room.as_str(),
            day,
            o.sender.as_str(),
            o.per_recipient(),
            earned
        ])
        .map_err(db)?;
    }
    c.add_house(PLATFORM_REVENUE, o.platform_share())?;
    let prize = o.prize();
    if prize > 0 {
        // Credited once: the saga moves to SETTLED in this same transaction.
        let after = add_coins(c, o.sender.as_str(), prize)?;
        c.add_house(LUCKY_PAID, prize)?;
        return Ok(after);
    }
    match known_balance {
        Some(b) => Ok(b),
        None => tx_coins(c, o.sender.as_str()),
    }
}

fn tx_void(
    c: &Tx<'_, '_>,
    order: &GiftOrder,
    fence: u64,
    reason: VoidReason,
) -> Result<VoidOutcome> {
    let Some(rec) = load_saga(c, order.gift_id)? else {
        return Ok(VoidOutcome::Missing);
    };
    let order = &rec.order.clone();
    ensure_fence(c, &order.room, fence, rec.fence)?;
    match rec.state {
        SagaState::Debited | SagaState::Settled => return Ok(VoidOutcome::Debited),
        SagaState::Voided => return Ok(VoidOutcome::Voided),
        SagaState::Pending => {}
    }
    // PENDING: nothing claimed the gift yet; the VOIDED state is the void claim.
    mark(
        c,
        order.gift_id,
        SagaState::Voided,
        fence,
        Some(reason),
        None,
    )?;
    Ok(VoidOutcome::Voided)
}

// ---- Row helpers. ----------------------------------------------------------------------------

/// The sender's wallet claim that a saga in `state` holds: none while PENDING, the debit once
/// DEBITED or SETTLED, the void claim once VOIDED.
fn claim_of(state: SagaState) -> Option<EntryKind> {
    match state {
        SagaState::Pending => None,
        SagaState::Debited | SagaState::Settled => Some(EntryKind::Debit),
        SagaState::Voided => Some(EntryKind::Void),
    }
}

/// Fails with `Fenced` if `fence` is below the room's installed fence or the saga's own.
fn ensure_fence(c: &Tx<'_, '_>, room: &RoomId, fence: u64, saga_fence: u64) -> Result<()> {
    let installed: Option<i64> = hot(&c.hot.fence)?
        .query_row([room.as_str()], |r| r.get(0))
        .optional()
        .map_err(db)?;
    let floor = match installed {
        Some(f) => from_sql_fence(f)?.max(saga_fence),
        None => saga_fence,
    };
    if fence < floor {
        return Err(StorageError::Fenced { token: fence });
    }
    Ok(())
}

/// `order_json, state, fence, reason, balance_after, updated_ms` of one saga row.
type SagaRow = (String, String, i64, Option<String>, Option<i64>, i64);

/// The sagas whose gift ids `sql` lists for `(room, before)` (parameters ?1 and ?2), in its
/// order; an id without a saga is skipped.
fn sagas_listed(c: &Connection, sql: &str, room: &RoomId, before: i64) -> Result<Vec<SagaRecord>> {
    let ids = c
        .prepare_cached(sql)
        .map_err(db)?
        .query_map(params![room.as_str(), before], |r| r.get::<_, Vec<u8>>(0))
        .map_err(db)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(db)?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let id = Uuid::from_slice(&id).map_err(|e| StorageError::Corrupt(e.to_string()))?;
        if let Some(rec) = load_saga(c, id)? {
            out.push(rec);
        }
    }
    Ok(out)
}

fn load_saga(c: &Connection, gift_id: Uuid) -> Result<Option<SagaRecord>> {
    let row: Option<SagaRow> = c
        .prepare_cached(
            "SELECT order_json, state, fence, reason, balance_after, updated_ms
             FROM gift_saga WHERE gift_id = ?1",
        )
        .map_err(db)?
        .query_row([gift_id.as_bytes().as_slice()], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .optional()
        .map_err(db)?;
    let Some((json, state, fence, reason, balance_after, updated_ms)) = row else {
        return Ok(None);
    };
    Ok(Some(SagaRecord {
        order: GiftOrder::from_json(gift_id, &json)?,
        state: SagaState::parse(&state)?,
        fence: from_sql_fence(fence)?,
        reason: reason.as_deref().map(VoidReason::parse).transpose()?,
        balance_after,
        updated_ms,
    }))
}

fn mark(
    c: &Connection,
    gift_id: Uuid,
    state: SagaState,
    fence: u64,
    reason: Option<VoidReason>,
    balance_after: Option<i64>,
) -> Result<()> {
    c.prepare_cached(
        "UPDATE gift_saga SET state = ?1, fence = MAX(fence, ?2), reason = ?3,
           balance_after = COALESCE(?4, balance_after), updated_ms = ?5
         WHERE gift_id = ?6",
    )
    .map_err(db)?
    .execute(params![
        state.as_str(),
        to_sql_fence(fence)?,
        reason.map(VoidReason::as_str),
        balance_after,
        now_ms(),
        gift_id.as_bytes().as_slice()
    ])
    .map_err(db)?;
    Ok(())
}

fn entry_kind(c: &Connection, user: &str, entry_id: Uuid) -> Result<Option<EntryKind>> {
    let kind: Option<String> = c
        .prepare_cached("SELECT kind FROM entry WHERE user = ?1 AND entry_id = ?2")
        .map_err(db)?
        .query_row(params![user, entry_id.as_bytes().as_slice()], |r| r.get(0))
        .optional()
        .map_err(db)?;
    kind.as_deref().map(EntryKind::parse).transpose()
}

fn insert_entry(
    c: &Connection,
    user: &str,
    entry_id: Uuid,
    kind: EntryKind,
    amount: i64,
    balance_after: Option<i64>,
) -> Result<()> {
    c.prepare_cached(
        "INSERT INTO entry (user, entry_id, kind, amount, balance_after, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .map_err(db)?
    .execute(params![
        user,
        entry_id.as_bytes().as_slice(),
        kind.as_str(),
        amount,
        balance_after,
        now_ms()
    ])
    .map_err(db)?;
    Ok(())
}

fn coins(c: &Connection, user: &str) -> Result<i64> {
    read_coins(&mut *c.prepare_cached(SQL_COINS).map_err(db)?, user)
}

/// [`coins`] on the writer's held statement.
fn tx_coins(c: &Tx<'_, '_>, user: &str) -> Result<i64> {
    read_coins(&mut *hot(&c.hot.coins)?, user)
}

fn read_coins(stmt: &mut Statement<'_>, user: &str) -> Result<i64> {
    stmt.query_row([user], |r| r.get(0))
        .optional()
        .map_err(db)
        .map(|v| v.unwrap_or(0))
}

/// Adds `delta` to the user's coins and returns the new balance (the CHECK keeps it >= 0).
fn add_coins(c: &Connection, user: &str, delta: i64) -> Result<i64> {
    let now = coins(c, user)?;
    let after = now
        .checked_add(delta)
        .ok_or_else(|| StorageError::Backend(format!("coins of {user} would overflow")))?;
    set_coins(c, user, after)
}

/// Sets the user's coins to `value` (creating the account) and returns it.
///
/// A read and a plain write rather than one `UPDATE … RETURNING`: SQLite runs `RETURNING`
/// through a trigger and a temporary table, so the statement also copies the account's page
/// into a statement journal; together about a fifth of the writer's allocations per gift.
fn set_coins(c: &Connection, user: &str, value: i64) -> Result<i64> {
    let updated = c
        .prepare_cached(SQL_SET_COINS)
        .map_err(db)?
        .execute(params![user, value])
        .map_err(db)?;
    create_account(c, updated, user, value)
}

/// [`set_coins`] on the writer's held statement.
fn tx_set_coins(c: &Tx<'_, '_>, user: &str, value: i64) -> Result<i64> {
    let updated = hot(&c.hot.set_coins)?
        .execute(params![user, value])
        .map_err(db)?;
    create_account(c, updated, user, value)
}

/// After an update of `user`'s coins to `value` that changed `updated` rows: creates the
/// account when there was none.
fn create_account(c: &Connection, updated: usize, user: &str, value: i64) -> Result<i64> {
    if updated == 0 {
        c.prepare_cached("INSERT INTO account (user, coins) VALUES (?1, ?2)")
            .map_err(db)?
            .execute(params![user, value])
            .map_err(db)?;
    }
    Ok(value)
}

fn house(c: &Connection, name: &str) -> Result<i64> {
    c.prepare_cached("SELECT amount FROM house WHERE name = ?1")
        .map_err(db)?
        .query_row([name], |r| r.get(0))
        .optional()
        .map_err(db)
        .map(|v| v.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_durable_wal() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_connection(&dir.path().join("l.db"), Syncing::Full).unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        let sync: i64 = conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        let temp: i64 = conn
            .query_row("PRAGMA temp_store", [], |r| r.get(0))
            .unwrap();
        let mmap: i64 = conn
            .query_row("PRAGMA mmap_size", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        assert_eq!(sync, 2, "synchronous=FULL");
        // The writer's commits are synced by the syncer thread; SQLite syncs its checkpoints.
        let writer = open_connection(&dir.path().join("l.db"), Syncing::CommitsBySyncer).unwrap();
        let sync: i64 = writer
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 1, "synchronous=NORMAL");
        assert_eq!(temp, 2, "temp_store=MEMORY");
        assert_eq!(
            mmap, 0,
            "no memory map: it costs a WAL lookup per cached page"
        );
    }

    #[test]
    fn the_wal_is_checkpointed_off_the_writer_and_bounded() {
        assert_eq!(WAL_BOUNDS.action(10, 0), WalAction::Nothing);
        assert_eq!(
            WAL_BOUNDS.action(CHECKPOINT_AFTER_FRAMES, 0),
            WalAction::WakeCheckpointer
        );
        // Copied frames do not count again.
        assert_eq!(
            WAL_BOUNDS.action(CHECKPOINT_AFTER_FRAMES + 5, 10),
            WalAction::Nothing
        );
        // The WAL restarted (fewer frames than were copied): count from its beginning.
        assert_eq!(
            WAL_BOUNDS.action(CHECKPOINT_AFTER_FRAMES, 50_000),
            WalAction::WakeCheckpointer
        );
        assert_eq!(
            WAL_BOUNDS.action(WAL_LIMIT_FRAMES, WAL_LIMIT_FRAMES - 1),
            WalAction::RestartHere
        );
        // Near the limit every commit with frames left to copy wakes it, so that it catches
        // the WAL's end before the writer would have to stop for it.
        assert_eq!(
            WAL_BOUNDS.action(WAL_DRAIN_FROM_FRAMES - 1, WAL_DRAIN_FROM_FRAMES - 2),
            WalAction::Nothing
        );
        assert_eq!(
            WAL_BOUNDS.action(WAL_DRAIN_FROM_FRAMES, WAL_DRAIN_FROM_FRAMES - 1),
            WalAction::WakeCheckpointer
        );
        assert_eq!(
            WAL_BOUNDS.action(WAL_DRAIN_FROM_FRAMES + 5, WAL_DRAIN_FROM_FRAMES + 5),
            WalAction::Nothing
        );
    }

    #[test]
    fn only_a_crowded_writer_paces_its_commits() {
        let ms = Duration::from_millis;
        // A lone caller, or a light load, starts its group at once.
        assert_eq!(pace_wait(ms(0), 1), None);
        assert_eq!(pace_wait(ms(0), PACE_FROM_JOBS - 1), None);
        // After a crowded group: wait out the rest of the pace, and no more.
        assert_eq!(pace_wait(ms(1), PACE_FROM_JOBS), Some(COMMIT_PACE - ms(1)));
        assert_eq!(pace_wait(ms(0), MAX_JOBS_PER_COMMIT), Some(COMMIT_PACE));
        assert_eq!(pace_wait(COMMIT_PACE, PACE_FROM_JOBS), None);
        assert_eq!(pace_wait(COMMIT_PACE + ms(5), 100), None);
    }

    fn job(name: &'static str, fail: bool) -> (Job, oneshot::Receiver<Result<()>>) {
        let (tx, rx) = oneshot::channel();
        let f = move |c: &Tx<'_, '_>| -> Result<()> {
            c.execute("INSERT INTO house (name, amount) VALUES (?1, 1)", [name])
                .map_err(db)?;
            if fail {
                return Err(StorageError::Conflict("this job fails".into()));
            }
            Ok(())
        };
        (Box::new(Pending { f, out: None, tx }), rx)
    }

    /// A job that adds `delta` to the platform's revenue, then fails if `fail`.
    fn takes(delta: i64, fail: bool) -> Job {
        let (tx, _rx) = oneshot::channel();
        let f = move |c: &Tx<'_, '_>| -> Result<()> {
            c.add_house(PLATFORM_REVENUE, delta)?;
            if fail {
                return Err(StorageError::Conflict("this job fails".into()));
            }
            Ok(())
        };
        Box::new(Pending { f, out: None, tx })
    }

    #[test]
    fn house_takings_are_written_with_the_group_and_a_failed_job_adds_none() {
        let (_dir, conn) = fresh_db();
        run_and_answer(&conn, vec![takes(1, false), takes(2, false)]);
        assert_eq!(house(&conn, "platform_revenue").unwrap(), 3);
        // A failure reruns the group with savepoints: the failed job's takings are dropped,
        // and the first run's takings are not counted twice.
        run_and_answer(
            &conn,
            vec![takes(5, false), takes(7, true), takes(11, false)],
        );
        assert_eq!(house(&conn, "platform_revenue").unwrap(), 19);
        assert_eq!(house(&conn, "lucky_paid").unwrap(), 0);
        // Nothing is left over for the next group.
        run_and_answer(&conn, vec![takes(0, false)]);
        assert_eq!(house(&conn, "platform_revenue").unwrap(), 19);
    }

    /// A fresh ledger database (kept alive by the returned directory).
    fn fresh_db() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_connection(&dir.path().join("l.db"), Syncing::Full).unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        (dir, conn)
    }

    #[test]
    fn coins_move_by_plain_writes_and_refuse_to_overflow() {
        let (_dir, c) = fresh_db();
        assert_eq!(add_coins(&c, "u", 5).unwrap(), 5, "creates the account");
        assert_eq!(set_coins(&c, "u", 2).unwrap(), 2);
        assert_eq!(add_coins(&c, "u", i64::MAX - 2).unwrap(), i64::MAX);
        assert!(matches!(
            add_coins(&c, "u", 1),
            Err(StorageError::Backend(_))
        ));
        assert_eq!(coins(&c, "u").unwrap(), i64::MAX, "nothing written");
        // The CHECK still refuses a negative balance.
        assert!(set_coins(&c, "u", -1).is_err());
        assert_eq!(coins(&c, "u").unwrap(), i64::MAX);
    }

    /// Runs `group` as the writer does and answers every job with the commit's success.
    fn run_and_answer(conn: &Connection, mut group: Vec<Job>) {
        run_group(conn, &Hot::prepare(conn).unwrap(), &mut group).unwrap();
        for j in group {
            j.answer(Ok(()));
        }
    }

    #[test]
    fn a_failing_job_leaves_no_trace_and_the_rest_of_its_group_commits() {
        let (_dir, conn) = fresh_db();
        let (a, mut ra) = job("a", false);
        let (b, mut rb) = job("b", true);
        let (c, mut rc) = job("c", false);
        run_and_answer(&conn, vec![a, b, c]);
        assert!(ra.try_recv().unwrap().is_ok());
        assert!(matches!(
            rb.try_recv().unwrap(),
            Err(StorageError::Conflict(_))
        ));
        assert!(rc.try_recv().unwrap().is_ok());
        let names = strings(
            &conn,
            "SELECT name FROM house WHERE name IN ('a', 'b', 'c') ORDER BY name",
        );
        assert_eq!(names, ["a", "c"], "b failed: none of its writes stay");
    }

    #[test]
    fn a_group_without_failures_commits_every_job() {
        let (_dir, conn) = fresh_db();
        let (a, mut ra) = job("a", false);
        let (b, mut rb) = job("b", false);
        run_and_answer(&conn, vec![a, b]);
        assert!(ra.try_recv().unwrap().is_ok() && rb.try_recv().unwrap().is_ok());
        let n: i64 = conn
            .query_row(
                "SELECT count(*) FROM house WHERE name IN ('a', 'b')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 2);
    }

    /// The first column of every row `sql` returns, as text.
    fn strings(conn: &Connection, sql: &str) -> Vec<String> {
        conn.prepare(sql)
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    fn gift(sender: &str, req: &str, unit_price: i64, lucky: Option<i64>) -> GiftOrder {
        let sender = UserId::from(sender.to_owned());
        GiftOrder {
            gift_id: super::super::gift_id(&sender, req),
            sender,
            room: RoomId::from("r".to_owned()),
            gift: "rose".into(),
            count: 1,
            unit_price,
            recipients: vec![UserId::from("host".to_owned())],
            share_bp: 5_000,
            lucky: lucky.map(|coins| super::super::LuckyPrize {
                multiplier: 2,
                coins,
            }),
            created_ms: now_ms(),
        }
    }

    /// Grants one coin each (a commit each) until the WAL holds at least `frames` frames.
    async fn grow_wal(ledger: &SqliteLedger, user: &UserId, frames: i32) {
        for i in 0..10_000 {
            if ledger.wal.frames.load(Ordering::Relaxed) >= frames {
                return;
            }
            ledger.grant(user, 1, &format!("k{i}")).await.unwrap();
        }
        panic!("10,000 commits left fewer than {frames} frames in the WAL");
    }

    /// Near the limit the checkpointer is woken after every commit; once it has copied the WAL
    /// to its end, the next commit restarts the WAL from its beginning, and the writer never
    /// runs a RESTART checkpoint of its own (a stop of ~47 ms in a gift storm).
    #[tokio::test]
    async fn near_its_limit_the_wal_restarts_without_stopping_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let bounds = WalBounds {
            checkpoint_after: i32::MAX,
            drain_from: 40,
            limit: i32::MAX,
        };
        let ledger = SqliteLedger::open_with(&dir.path().join("ledger.db"), bounds)
            .await
            .unwrap();
        let user = UserId::from("u".to_owned());
        grow_wal(&ledger, &user, bounds.drain_from).await;
        let before = ledger.balance(&user).await.unwrap();
        let wal = Arc::clone(&ledger.wal);
        let frames = wal.frames.load(Ordering::Relaxed);
        // The writer is idle now: the checkpointer, woken by the last commit, catches up.
        let mut polls = 0;
        while wal.copied.load(Ordering::Relaxed) < frames {
            polls += 1;
            assert!(
                polls < 5_000,
                "the checkpointer never copied the WAL's {frames} frames"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(wal.restarts.load(Ordering::Relaxed), 0);
        ledger.grant(&user, 1, "after").await.unwrap();
        assert_eq!(wal.restarts.load(Ordering::Relaxed), 1);
        assert!(wal.frames.load(Ordering::Relaxed) < frames);
        assert_eq!(wal.writer_checkpoints.load(Ordering::Relaxed), 0);
        assert_eq!(ledger.balance(&user).await.unwrap(), before + 1);
        assert!(ledger.audit_totals().await.unwrap().is_conserved());
    }

    /// Polls `f` until it holds (at most ~5 s).
    async fn eventually(what: &str, f: impl Fn() -> bool) {
        for _ in 0..5_000 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("never happened: {what}");
    }

    /// A grant on a task of its own, committed and then held by the syncer (its gate closed)
    /// before the sync that would answer it.
    async fn held_grant(
        ledger: &SqliteLedger,
        user: &UserId,
        amount: i64,
    ) -> tokio::task::JoinHandle<Result<GrantOutcome>> {
        ledger.sync_hooks.close();
        let grant = tokio::spawn({
            let (ledger, user) = (ledger.clone(), user.clone());
            async move { ledger.grant(&user, amount, "held").await }
        });
        eventually("the grant committed and held before its sync", || {
            ledger.sync_hooks.waiting()
        })
        .await;
        grant
    }

    /// A ledger in a fresh directory (kept alive by the returned one), and a user granted 5.
    async fn granted_ledger() -> (tempfile::TempDir, SqliteLedger, UserId) {
        let dir = tempfile::tempdir().unwrap();
        let ledger = SqliteLedger::open(&dir.path().join("ledger.db"))
            .await
            .unwrap();
        let user = UserId::from("u".to_owned());
        ledger.grant(&user, 5, "first").await.unwrap();
        (dir, ledger, user)
    }

    /// A balance read on a task of its own.
    fn spawn_balance(ledger: &SqliteLedger, user: &UserId) -> tokio::task::JoinHandle<Result<i64>> {
        let (ledger, user) = (ledger.clone(), user.clone());
        tokio::spawn(async move { ledger.balance(&user).await })
    }

    /// A commit is answered, and shown to readers, only once the syncer has synced the WAL:
    /// held before its sync, a committed grant is neither answered nor shown by a read.
    #[tokio::test]
    async fn answers_and_reads_wait_for_the_wal_sync() {
        let (_dir, ledger, user) = granted_ledger().await;
        let grant = held_grant(&ledger, &user, 7).await;
        let read = spawn_balance(&ledger, &user);
        // Not answered while the WAL is unsynced: a crash now would undo the grant.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!grant.is_finished(), "a grant was answered before its sync");
        assert!(!read.is_finished(), "a read showed an unsynced commit");
        ledger.sync_hooks.open();
        assert_eq!(
            grant.await.unwrap().unwrap(),
            GrantOutcome {
                balance: 12,
                applied: true
            }
        );
        assert_eq!(read.await.unwrap().unwrap(), 12);
    }

    /// Two processes may share one ledger file. A read of a commit another writer has not
    /// synced yet is answered after a sync of the reader's own, which makes that commit durable
    /// too: the sync flushes the WAL file's pages, whoever wrote them.
    #[tokio::test]
    async fn a_read_of_another_writers_commit_waits_for_a_sync_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let one = SqliteLedger::open(&path).await.unwrap();
        let other = SqliteLedger::open(&path).await.unwrap();
        let user = UserId::from("u".to_owned());
        let grant = held_grant(&one, &user, 7).await;
        other.sync_hooks.close();
        let read = spawn_balance(&other, &user);
        eventually("the read waiting for the other ledger's sync", || {
            other.sync_hooks.waiting()
        })
        .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !read.is_finished(),
            "a read showed another writer's unsynced commit"
        );
        let syncs = other.sync_hooks.syncs.load(Ordering::SeqCst);
        other.sync_hooks.open();
        assert_eq!(read.await.unwrap().unwrap(), 7);
        assert_eq!(other.sync_hooks.syncs.load(Ordering::SeqCst), syncs + 1);
        assert!(!grant.is_finished());
        one.sync_hooks.open();
        assert!(grant.await.unwrap().unwrap().applied);
    }

    /// A failed sync stops the ledger: the group it covered fails, and so does every later
    /// write and every read that may have seen an unsynced commit.
    #[tokio::test]
    async fn a_failed_sync_stops_the_ledger() {
        let (_dir, ledger, user) = granted_ledger().await;
        ledger.sync_hooks.fail_next.store(true, Ordering::SeqCst);
        let unavailable = |r: Result<()>| matches!(r, Err(StorageError::Unavailable(_)));
        assert!(unavailable(
            ledger.grant(&user, 7, "second").await.map(drop)
        ));
        // Reads may have seen the unsynced commit; writes would build on it.
        assert!(unavailable(ledger.balance(&user).await.map(drop)));
        assert!(unavailable(ledger.grant(&user, 1, "third").await.map(drop)));
        assert!(unavailable(
            ledger.grant(&user, 1, "fourth").await.map(drop)
        ));
    }

    /// With no checkpointer woken, the writer bounds the WAL itself at the limit.
    #[tokio::test]
    async fn at_its_limit_the_writer_restarts_the_wal_itself() {
        let dir = tempfile::tempdir().unwrap();
        let bounds = WalBounds {
            checkpoint_after: i32::MAX,
            drain_from: i32::MAX,
            limit: 40,
        };
        let ledger = SqliteLedger::open_with(&dir.path().join("ledger.db"), bounds)
            .await
            .unwrap();
        let user = UserId::from("u".to_owned());
        grow_wal(&ledger, &user, bounds.limit).await;
        assert_eq!(ledger.wal.writer_checkpoints.load(Ordering::Relaxed), 1);
        assert_eq!(ledger.wal.restarts.load(Ordering::Relaxed), 0);
        let before = ledger.balance(&user).await.unwrap();
        ledger.grant(&user, 1, "after").await.unwrap();
        assert_eq!(ledger.wal.restarts.load(Ordering::Relaxed), 1);
        assert_eq!(ledger.balance(&user).await.unwrap(), before + 1);
    }

    /// The cost model of [`SCHEMA`]: a gift adds to one randomly keyed b-tree, the saga's
    /// `gift_id` index, and to no `entry` row (a second random page per gift) whether it
    /// settles, wins a prize or is refused; only the grant is an entry. The claims are still
    /// there, as the sagas' states.
    #[tokio::test]
    async fn gifts_write_their_claims_in_the_saga_row_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let ledger = SqliteLedger::open(&path).await.unwrap();
        let sender = UserId::from("s".to_owned());
        ledger.grant(&sender, 100, "seed").await.unwrap();
        let plain = gift("s", "1", 30, None);
        let lucky = gift("s", "2", 10, Some(20));
        let refused = gift("s", "3", 1_000, None);
        assert!(matches!(
            ledger.send_gift(&plain, 1).await.unwrap(),
            GiftOutcome::Settled { balance: 70, .. }
        ));
        assert!(matches!(
            ledger.send_gift(&lucky, 1).await.unwrap(),
            GiftOutcome::Settled { balance: 80, .. }
        ));
        assert_eq!(
            ledger.send_gift(&refused, 1).await.unwrap(),
            GiftOutcome::InsufficientFunds { balance: 80 }
        );
        let conn = open_connection(&path, Syncing::Full).unwrap();
        let kinds = strings(&conn, "SELECT kind FROM entry");
        assert_eq!(kinds, ["GRANT"]);
        for (order, claim) in [
            (&plain, EntryKind::Debit),
            (&lucky, EntryKind::Debit),
            (&refused, EntryKind::Void),
        ] {
            let found = ledger.wallet_entry(&sender, order.gift_id).await.unwrap();
            assert_eq!(found, Some(claim));
        }
        assert!(ledger.audit_totals().await.unwrap().is_conserved());
    }

    /// A ledger from before `gift_rank` (leaderboards summed the facts through an index by
    /// room and day) opens with its boards intact, migrated once, its index gone; gifts after
    /// the migration add to the same totals.
    #[tokio::test]
    async fn an_older_ledger_keeps_its_leaderboards_through_the_migration() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        {
            let old = open_connection(&path, Syncing::Full).unwrap();
            old.execute_batch(
                "CREATE TABLE settled_gift (
                   gift_id BLOB NOT NULL, receiver TEXT NOT NULL, room TEXT NOT NULL,
                   day INTEGER NOT NULL, sender TEXT NOT NULL, amount INTEGER NOT NULL,
                   earnings INTEGER NOT NULL);
                 CREATE INDEX settled_gift_room_day ON settled_gift (room, day);",
            )
            .unwrap();
            let today = day_of(now_ms());
            for (receiver, room, day, sender, amount) in [
                ("host", "r", today, "s", 30),
                ("host", "r", today, "t", 10),
                ("h2", "r", today, "s", 5),
                ("host", "r", today - 8, "t", 100),
                ("host", "elsewhere", today, "s", 1_000),
            ] {
                old.execute(
                    "INSERT INTO settled_gift VALUES (x'00', ?1, ?2, ?3, ?4, ?5, 0)",
                    params![receiver, room, day, sender, amount],
                )
                .unwrap();
            }
        }
        let boards = |ledger: SqliteLedger| async move {
            let room = RoomId::from("r".to_owned());
            let today = day_of(now_ms());
            let mut out = Vec::new();
            for board in [super::super::Board::Senders, super::super::Board::Receivers] {
                for first_day in [today, i64::MIN] {
                    let b = ledger
                        .leaderboard(&room, board, first_day, 10)
                        .await
                        .unwrap();
                    out.push(
                        b.into_iter()
                            .map(|(u, t)| (u.to_string(), t))
                            .collect::<Vec<_>>(),
                    );
                }
            }
            out
        };
        let pairs = |v: &[(&str, i64)]| -> Vec<(String, i64)> {
            v.iter().map(|(u, t)| ((*u).to_owned(), *t)).collect()
        };
        let expected = vec![
            pairs(&[("s", 35), ("t", 10)]),
            pairs(&[("t", 110), ("s", 35)]),
            pairs(&[("host", 40), ("h2", 5)]),
            pairs(&[("host", 140), ("h2", 5)]),
        ];
        let ledger = SqliteLedger::open(&path).await.unwrap();
        assert_eq!(boards(ledger).await, expected);
        // Opened again: nothing is counted twice.
        let ledger = SqliteLedger::open(&path).await.unwrap();
        assert_eq!(boards(ledger.clone()).await, expected);
        let conn = open_connection(&path, Syncing::Full).unwrap();
        let (version, index): (i64, i64) = conn
            .query_row(
                "SELECT (SELECT user_version FROM pragma_user_version),
                        (SELECT count(*) FROM sqlite_master WHERE name = 'settled_gift_room_day')",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((version, index), (MIGRATIONS.len() as i64, 0));
        assert!(
            !ledger.may_hold_legacy_gift_ids(),
            "no saga before migration 2: none kept under an old id (the shard's upgrade test has one)"
        );
        // A gift now joins the migrated totals.
        let t = UserId::from("t".to_owned());
        ledger.grant(&t, 100, "seed").await.unwrap();
        let mut g = gift("t", "after", 30, None);
        g.recipients = vec![UserId::from("h2".to_owned())];
        assert!(matches!(
            ledger.send_gift(&g, 1).await.unwrap(),
            GiftOutcome::Settled { .. }
        ));
        let room = RoomId::from("r".to_owned());
        let senders = ledger
            .leaderboard(&room, super::super::Board::Senders, i64::MIN, 10)
            .await
            .unwrap();
        assert_eq!(senders[0], (t, 140));
    }
}
