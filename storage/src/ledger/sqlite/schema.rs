//! The database's shape: connection settings, the tables ([`SCHEMA`]) and the [`MIGRATIONS`]
//! that bring older ledgers to them.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;
use tracing::info;

use super::db;
use crate::{Result, StorageError};

/// How long a connection waits on a lock held by another process before failing.
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Page cache per connection, in KiB (SQLite's negative `cache_size` unit). Small on purpose:
/// when a b-tree split puts its new pages in page-number order (`balance_nonroot`; random gift
/// ids split pages often), it parks one page at the pending-byte page's number (262,145 with
/// 4 KiB pages) for a moment. The cache then remembers that number as its largest key, and
/// the transaction's end walks the whole page-cache hash table to drop pages past the end of
/// the file (`pcache1TruncateUnsafe`; a uprobe saw it on every commit of a gift storm: a fifth
/// of the writer's time with a 64 MiB cache and small groups, ~6 % with this one). A smaller
/// cache than this measured no better: pages that miss it and still sit in the WAL are read
/// back with `pread`.
pub(super) const PAGE_CACHE_KIB: i64 = 8 * 1024;
/// Bytes of the database file mapped into memory: none. With a mapping, every page the writer
/// fetches read-only first asks the WAL index whether a newer copy sits in the WAL
/// (`getPageMMap` calls `walFindFrame`), even when the page is in the page cache; with the WAL
/// tens of thousands of frames long that search walks one hash block per 4,096 frames. It was
/// ~8 % of a gift storm's instructions in the ledger benchmark, while a page that misses the
/// cache is rare (the storm's `pread` count is the same without the mapping). Without it a
/// page in the cache costs no WAL lookup (measured: docs/BENCHMARKS-LOG.md). Set explicitly, so a
/// SQLite built with another `SQLITE_DEFAULT_MMAP_SIZE` does not bring it back.
pub(super) const MMAP_BYTES: i64 = 0;
/// Prepared statements kept per connection: every statement the ledger uses, with room to spare.
pub(super) const STATEMENT_CACHE_CAPACITY: usize = 64;

/// The ledger's tables. Write cost is mostly pages: every commit writes each page it dirtied to
/// the WAL, and a row keyed by a random gift id dirties a random page (about 8 µs of CPU per
/// gift each, measured: docs/BENCHMARKS-LOG.md). So each gift touches as few randomly keyed
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
/// `movement` is every user's statement, appended in the booking's transaction; the one
/// writer commits in `id` order, so `(user, id)` is a position no later commit lands behind.
pub(super) const SCHEMA: &str = "
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
CREATE TABLE IF NOT EXISTS movement (
  id            INTEGER PRIMARY KEY,
  user          TEXT NOT NULL,
  kind          TEXT NOT NULL,
  amount        INTEGER NOT NULL,
  balance_after INTEGER,
  counterparty  TEXT,
  key           TEXT NOT NULL,
  at_ms         INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS movement_user ON movement (user, id);
CREATE INDEX IF NOT EXISTS movement_user_kind ON movement (user, kind, id);
";

/// `gift_rank.board` of the senders' board (coins spent in the room).
pub(super) const BOARD_SENDERS: i64 = 0;
/// `gift_rank.board` of the receivers' board (gift value received in the room).
pub(super) const BOARD_RECEIVERS: i64 = 1;

/// Schema changes after [`SCHEMA`]'s tables exist, in order; a ledger's `user_version` counts
/// those applied. Each runs once, in one transaction with the version bump, so two processes
/// opening one file migrate it once.
///
/// 1. Leaderboards from `gift_rank`: fill it from the settled facts and drop the facts' index
///    by room and day, which only the leaderboards read. A ledger written by this version must
///    not be written by an older one afterwards: its gifts would be missing from the boards.
/// 2. Gift ids of UUIDv7 request ids became time-ordered ([`crate::ledger::gift_id`]): a ledger
///    that already holds sagas is marked, so that a retry of a request booked under its old
///    (v5) id finds that saga ([`super::SqliteLedger::may_hold_legacy_gift_ids`]). A fresh ledger has
///    none, and never looks.
/// 3. App-wide leaderboards: `app_rank`, filled from the settled facts
///    ([`super::app_rank::MIGRATION`]).
pub(super) const MIGRATIONS: &[&str] = &[
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
    super::app_rank::MIGRATION,
];

/// `ledger_meta` key set (by migration 2) when the ledger holds sagas booked before gift ids of
/// time-ordered requests became time-ordered: their retries must look under the old id too.
pub(super) const META_LEGACY_GIFT_IDS: &str = "legacy_gift_ids";

/// Applies the [`MIGRATIONS`] this ledger has not had yet.
pub(super) fn migrate(conn: &mut Connection) -> Result<()> {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(db)?;
    let applied: i64 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(db)?;
    let applied = usize::try_from(applied)
        .map_err(|_| StorageError::corrupt_msg(format!("ledger user_version {applied}")))?;
    if applied > MIGRATIONS.len() {
        return Err(StorageError::backend_msg(format!(
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

/// How a connection makes its writes durable (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Syncing {
    /// `synchronous=FULL`: every commit and every checkpoint is fsynced by SQLite.
    Full,
    /// `synchronous=NORMAL` (the writer's): SQLite syncs its checkpoints but not its commits;
    /// the syncer thread fsyncs the WAL before any commit is answered or read.
    CommitsBySyncer,
}

pub(super) fn open_connection(path: &Path, sync: Syncing) -> Result<Connection> {
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
