//! The PostgreSQL ledger's tables ([`MIGRATIONS`]) and the start-up migration that brings a
//! database to them: versioned, in one transaction, under an advisory lock so that several
//! nodes starting at once migrate it once.

use deadpool_postgres::Client;
use tracing::info;

use super::super::now_ms;
use super::pg;
use super::saga::col;
use crate::{Result, StorageError};

/// Key of the transaction-level advisory lock every migration holds (`"chorusLg"` in ASCII):
/// a second node starting at the same time waits for the first one's migration to commit,
/// then finds nothing left to do.
const MIGRATION_LOCK: i64 = 0x6368_6f72_7573_4c67;

/// Rows a user's earnings and leaderboard totals are spread over (see [`MIGRATIONS`]).
pub(super) const SLOTS: u8 = 16;

/// The slot a gift adds its earnings and leaderboard totals to.
pub(super) fn slot_of(gift_id: uuid::Uuid) -> i16 {
    i16::from(gift_id.as_bytes()[15] % SLOTS)
}

/// `gift_rank.board` of the senders' board (coins spent in the room).
pub(super) const BOARD_SENDERS: i16 = 0;
/// `gift_rank.board` of the receivers' board (gift value received in the room).
pub(super) const BOARD_RECEIVERS: i16 = 1;

/// The schema, one entry per version; `chorus_ledger_schema` lists the versions applied.
///
/// Version 1. The constraints are the ledger's rules, so that even a faulty caller cannot
/// break them:
/// - `account.coins >= 0` (CHECK): no overdraw, whatever the statements around it do.
/// - `entry` is keyed by `(user_id, entry_id)`: a gift's debit and its void claim both take
///   the sender's entry under the gift id, so a gift is never both debited and voided, nor
///   debited twice; a top-up's key (`grant_entry_id`) credits once.
/// - `gift_saga.gift_id` is the saga's key (one saga per request); its state is one of the
///   four, its fence never negative.
/// - `gift_settlement` (the house's share and the prize of each settled gift) is keyed by the
///   gift id and references its saga: a gift settles once. The house's totals are sums of it,
///   so no single row is written by every gift.
/// - A recipient's earnings (`earning`) and the leaderboards (`gift_rank`, each user's total
///   per room, board and UTC day) are split over [`SLOTS`] rows per user, a gift adding to the
///   slot its id picks (a batch of new gifts, to the slot the batch's turn picks); reads sum
///   the slots. A popular host's row would otherwise be locked by
///   every gift to them from its update to its commit, one gift after another.
/// - `unpublished_gift` lists settled gifts whose room event is owed, until one caller takes it.
///
/// Version 2: `movement`, every user's statement, written in each booking's transaction;
/// its position is `(xid, id)` (see `movements`).
///
/// Version 3: coin sellers, their transfers and day totals (see `transfer`).
///
/// Version 4: payments (top-ups and refunds) and debts (see `payment`).
///
/// Version 5: host settlements (see `settlement`).
///
/// Version 6: app-wide leaderboards (see `app_rank`).
///
/// Version 7: guards, their purchases and running expiries (see `guard`).
///
/// Version 8: gifts settled by nodes older than version 6 (a rolling upgrade) count on the app
/// boards too (see `app_rank`).
pub(super) const MIGRATIONS: &[&str] = &[
    "
CREATE TABLE account (
  user_id TEXT PRIMARY KEY,
  coins   BIGINT NOT NULL DEFAULT 0 CHECK (coins >= 0)
);
CREATE TABLE earning (
  user_id TEXT NOT NULL,
  slot    SMALLINT NOT NULL,
  amount  BIGINT NOT NULL CHECK (amount >= 0),
  PRIMARY KEY (user_id, slot)
);
CREATE TABLE entry (
  user_id       TEXT NOT NULL,
  entry_id      UUID NOT NULL,
  kind          TEXT NOT NULL CHECK (kind IN ('GRANT', 'DEBIT', 'VOID', 'LUCKY')),
  amount        BIGINT NOT NULL CHECK (amount >= 0),
  balance_after BIGINT,
  created_ms    BIGINT NOT NULL,
  PRIMARY KEY (user_id, entry_id)
);
CREATE TABLE room_owner (
  room     TEXT PRIMARY KEY,
  fence    BIGINT NOT NULL CHECK (fence >= 0),
  owner    TEXT NOT NULL,
  since_ms BIGINT NOT NULL
);
CREATE TABLE gift_saga (
  gift_id       UUID PRIMARY KEY,
  room          TEXT NOT NULL,
  sender        TEXT NOT NULL,
  order_json    TEXT NOT NULL,
  state         TEXT NOT NULL CHECK (state IN ('PENDING', 'DEBITED', 'SETTLED', 'VOIDED')),
  fence         BIGINT NOT NULL CHECK (fence >= 0),
  reason        TEXT,
  balance_after BIGINT,
  updated_ms    BIGINT NOT NULL
);
CREATE INDEX gift_saga_open ON gift_saga (room, updated_ms)
  WHERE state IN ('PENDING', 'DEBITED');
CREATE TABLE gift_settlement (
  gift_id  UUID PRIMARY KEY REFERENCES gift_saga (gift_id),
  room     TEXT NOT NULL,
  platform BIGINT NOT NULL,
  lucky    BIGINT NOT NULL CHECK (lucky >= 0)
);
CREATE TABLE gift_rank (
  room    TEXT NOT NULL,
  board   SMALLINT NOT NULL,
  day     BIGINT NOT NULL,
  user_id TEXT NOT NULL,
  slot    SMALLINT NOT NULL,
  total   BIGINT NOT NULL,
  PRIMARY KEY (room, board, day, user_id, slot)
);
CREATE TABLE unpublished_gift (
  gift_id   UUID PRIMARY KEY REFERENCES gift_saga (gift_id),
  room      TEXT NOT NULL,
  marked_ms BIGINT NOT NULL
);
CREATE INDEX unpublished_gift_room ON unpublished_gift (room, marked_ms);
",
    "
CREATE TABLE movement (
  id            BIGSERIAL PRIMARY KEY,
  xid           XID8 NOT NULL DEFAULT pg_current_xact_id(),
  user_id       TEXT NOT NULL,
  kind          TEXT NOT NULL,
  amount        BIGINT NOT NULL,
  balance_after BIGINT,
  counterparty  TEXT,
  key           TEXT NOT NULL,
  at_ms         BIGINT NOT NULL
);
CREATE INDEX movement_user ON movement (user_id, xid, id);
CREATE INDEX movement_user_kind ON movement (user_id, kind, xid, id);
",
    super::transfer::MIGRATION,
    super::payment::MIGRATION,
    super::settlement::MIGRATION,
    super::app_rank::MIGRATION,
    super::guard::MIGRATION,
    super::app_rank::MIGRATION_OLDER_NODES,
];

/// Longest a start-up waits for another node's migration (its advisory lock), in ms.
const MIGRATION_LOCK_WAIT_MS: u64 = 60_000;

/// Creates or migrates the schema: one transaction holding [`MIGRATION_LOCK`], which applies
/// the versions this database lacks and records them.
///
/// # Errors
/// `Backend` if a statement fails or the database was migrated by a newer version.
pub(super) async fn migrate(client: &mut Client) -> Result<()> {
    let tx = client.transaction().await.map_err(pg)?;
    // Not the sessions' bounds: a backfill may run long, and another node's migration may
    // hold the lock a while; but a lock held by a node that vanished mid-migration is given
    // up on after a minute (the node then fails to start, and says why).
    tx.batch_execute(&format!(
        "SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = {}",
        MIGRATION_LOCK_WAIT_MS
    ))
    .await
    .map_err(pg)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(pg)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS chorus_ledger_schema (
           version    INTEGER PRIMARY KEY,
           applied_ms BIGINT NOT NULL
         )",
    )
    .await
    .map_err(pg)?;
    let row = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM chorus_ledger_schema",
            &[],
        )
        .await
        .map_err(pg)?;
    let applied: i32 = col(&row, 0)?;
    let applied = usize::try_from(applied)
        .map_err(|_| StorageError::corrupt_msg(format!("ledger schema version {applied}")))?;
    if applied > MIGRATIONS.len() {
        return Err(StorageError::backend_msg(format!(
            "the ledger has schema version {applied}, this version knows {}: written by a newer version",
            MIGRATIONS.len()
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(applied) {
        tx.batch_execute(sql).await.map_err(pg)?;
        let version = i32::try_from(i + 1).unwrap_or(i32::MAX);
        tx.execute(
            "INSERT INTO chorus_ledger_schema (version, applied_ms) VALUES ($1, $2)",
            &[&version, &now_ms()],
        )
        .await
        .map_err(pg)?;
        info!(version, "PostgreSQL ledger schema migrated.");
    }
    tx.commit().await.map_err(pg)
}
