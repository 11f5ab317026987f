//! The PostgreSQL ledger engine, for clusters whose nodes run on several machines.
//!
//! - **One transaction per saga step**, READ COMMITTED with explicit row locks. Each step
//!   first reads the room's fence `FOR SHARE` (a concurrent `install_fence` waits for the step
//!   to commit, and a step after the install sees it), then locks the saga row `FOR UPDATE`, and
//!   refuses with `Fenced` inside that same transaction when the token is below the room's or
//!   the saga's. A stale owner's step therefore commits nothing, whichever node sends it.
//!   New gifts are booked in batches (`batch`): the gifts queued meanwhile share one
//!   transaction of three round trips and one commit, each statement deciding its own gift so
//!   that one gift's refusal undoes nothing of another's; a retry goes step by step (`saga`).
//! - **Constraints make the money rules hold in the database itself** (see
//!   `schema::MIGRATIONS`): coins `CHECK (coins >= 0)`; the sender's entry under the gift id is
//!   the primary key both the debit and the void claim insert, so a gift is debited at most once
//!   and never both debited and voided; a gift's settlement row is keyed by its id.
//! - **Deadlock-free locking order**: room fence, saga row, the sender's account, then the
//!   recipients' earnings rows and the leaderboard rows in key order. Earnings and leaderboard
//!   totals are spread over `schema::SLOTS` rows per user, so gifts to one popular host do not
//!   queue on one row lock held until each commit.
//! - **Failures**: a serialization failure or a deadlock rolls the transaction back and runs
//!   it again (bounded, then `Conflict`); a lost connection, a time-out, a server shutting down
//!   or a read-only server (a replica after a failover) answers `Unavailable`, and the caller
//!   retries by the gift id, which finds whatever committed. Nothing is answered before its
//!   commit returned.
//! - **Schema**: created and migrated at start-up (`schema`).
//! - **Ties** on boards and guard lists are ordered by the user ids' bytes (`COLLATE "C"`), as
//!   on the other engines, whatever collation the database was made with.
//!
//! # Layout
//! This file holds the engine's handle, its pool, the transaction runner and the reads;
//! `saga` holds the steps (fences, grants, the saga's moves), `batch` the new gifts' batched
//! path and `schema` the tables.

mod app_rank;
mod batch;
mod guard;
mod movements;
mod payment;
mod saga;
mod schema;
mod settlement;
mod transfer;

pub use self::batch::{BATCH_LOCK_WAIT, METRIC_BATCH_GIFTS, METRIC_BATCH_LOCK_WAITS};

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use protocol::{RoomId, UserId};
use tokio_postgres::error::SqlState;
use tokio_postgres::{NoTls, Row};
use tracing::info;
use uuid::Uuid;

use self::saga::col;
use self::schema::{BOARD_RECEIVERS, BOARD_SENDERS, migrate};
use super::{Board, EntryKind, GiftOrder, SagaRecord, SagaState, Totals, VoidReason, now_ms};
use crate::{Result, StorageError};

/// Connections per node. Each in-flight step holds one for its transaction; PostgreSQL shares
/// one WAL flush between the commits that arrive together, so more connections mean more
/// gifts per flush.
pub const POOL_SIZE: usize = 16;
/// How long a step waits for a pooled connection, or for a new one to connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one transaction attempt may take, commit included, before it answers
/// `Unavailable` (its outcome is then unknown: the caller retries by id).
pub const TX_TIMEOUT: Duration = Duration::from_secs(10);
/// Runs of one transaction that hit a serialization failure or a deadlock before `Conflict`.
pub const MAX_TX_ATTEMPTS: u32 = 8;
/// Server-side bounds of every session, below [`TX_TIMEOUT`]: the server cancels a statement
/// (or a wait for a lock) before the node gives the transaction up, so a connection the node
/// hands back to its pool is never still waiting behind a lock; a session left idle inside a
/// transaction is ended. Options in the ledger URL come after these and win.
const SESSION_OPTIONS: &str =
    "-c lock_timeout=5000 -c statement_timeout=9000 -c idle_in_transaction_session_timeout=30000";
/// How long unacknowledged data may sit on a connection's socket before the kernel closes it:
/// a server gone silent (a partition) fails the connection in seconds, not after the
/// retransmission timeout (~15 minutes), and the pool replaces it.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);
/// Upper bound of the random pause before a retried transaction, so contenders spread out.
const RETRY_JITTER_MAX_MS: u64 = 10;

/// What a transaction's body can fail with.
pub(super) enum Fail {
    /// A driver error, classified by the runner.
    Pg(tokio_postgres::Error),
    /// The ledger's own answer (`Fenced`, `Corrupt`...).
    Store(StorageError),
    /// A race that only a fresh transaction resolves (e.g. two first fences at once).
    Retry,
}

impl From<tokio_postgres::Error> for Fail {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Pg(e)
    }
}

impl From<StorageError> for Fail {
    fn from(e: StorageError) -> Self {
        Self::Store(e)
    }
}

pub(super) type TxResult<T> = std::result::Result<T, Fail>;

/// A driver error as the contract's error: connection losses, shutdowns, read-only servers and
/// the session bounds' cancellations are `Unavailable` (retry by id), everything else
/// `Backend`.
pub(super) fn pg(e: tokio_postgres::Error) -> StorageError {
    let unavailable = match e.code() {
        // No SQLSTATE: the socket, the connection task or a time-out failed.
        None => true,
        Some(code) => {
            code.code().starts_with("08")
                || [
                    SqlState::ADMIN_SHUTDOWN,
                    SqlState::CRASH_SHUTDOWN,
                    SqlState::CANNOT_CONNECT_NOW,
                    SqlState::READ_ONLY_SQL_TRANSACTION,
                    SqlState::TOO_MANY_CONNECTIONS,
                    // The session bounds above: a statement or a lock wait took too long,
                    // nothing was done; retry by id.
                    SqlState::QUERY_CANCELED,
                    SqlState::LOCK_NOT_AVAILABLE,
                    SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
                ]
                .contains(code)
        }
    };
    if unavailable {
        StorageError::unavailable("postgres", e)
    } else {
        StorageError::backend("postgres", e)
    }
}

/// Whether a failed transaction may simply run again.
fn is_transient(f: &Fail) -> bool {
    match f {
        Fail::Retry => true,
        Fail::Pg(e) => {
            e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE)
                || e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED)
        }
        Fail::Store(_) => false,
    }
}

fn into_storage(f: Fail) -> StorageError {
    match f {
        Fail::Pg(e) => pg(e),
        Fail::Store(e) => e,
        Fail::Retry => StorageError::Conflict("postgres: transaction kept racing".into()),
    }
}

pub(super) fn to_sql_fence(fence: u64) -> Result<i64> {
    i64::try_from(fence).map_err(|_| StorageError::invalid_msg(format!("fence {fence} too large")))
}

pub(super) fn from_sql_fence(fence: i64) -> Result<u64> {
    u64::try_from(fence).map_err(|_| StorageError::corrupt_msg(format!("negative fence {fence}")))
}

/// Runs `$body` (an expression of type `TxResult<T>` using the transaction `$tx`) in a fresh
/// transaction and commits it; runs it again after a serialization failure or a deadlock. The
/// answer comes only after the commit returned.
macro_rules! transact {
    ($ledger:expr, |$tx:ident| $body:expr) => {
        $crate::ledger::postgres::transact!($ledger, |$tx| $body, commit_if | _ | true)
    };
    // `$keep` sees the body's value: `false` rolls the transaction back (the value is still
    // returned).
    ($ledger:expr, |$tx:ident| $body:expr, commit_if $keep:expr) => {{
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let run = async {
                let mut client = $ledger.client().await?;
                let $tx = client.transaction().await?;
                let out: $crate::ledger::postgres::TxResult<_> = $body;
                let value = out?;
                let keep: fn(&_) -> bool = $keep;
                if keep(&value) {
                    $tx.commit().await?;
                }
                Ok::<_, $crate::ledger::postgres::Fail>(value)
            };
            let failed = match tokio::time::timeout($crate::ledger::postgres::TX_TIMEOUT, run).await
            {
                Ok(Ok(value)) => break Ok(value),
                Ok(Err(f)) => f,
                Err(_) => $crate::ledger::postgres::Fail::Store(
                    $crate::StorageError::unavailable_msg("postgres: transaction timed out"),
                ),
            };
            if $crate::ledger::postgres::is_transient(&failed)
                && attempt < $crate::ledger::postgres::MAX_TX_ATTEMPTS
            {
                $crate::ledger::postgres::retry_pause().await;
                continue;
            }
            break Err($crate::ledger::postgres::into_storage(failed));
        }
    }};
}
pub(super) use transact;

async fn retry_pause() {
    let ms = rand::random_range(1..=RETRY_JITTER_MAX_MS);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// The PostgreSQL engine: a pool of connections to one primary, and the queue of new gifts
/// into their batches.
#[derive(Clone)]
pub struct PostgresLedger {
    db: Db,
    gifts: batch::Batcher,
}

/// The pool, which every transaction takes its connection from.
#[derive(Clone)]
pub(super) struct Db {
    pool: Pool,
}

impl Db {
    /// A pooled connection; failing to get one is `Unavailable`.
    async fn client(&self) -> TxResult<deadpool_postgres::Client> {
        self.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => Fail::Pg(e),
            other => Fail::Store(StorageError::unavailable("postgres pool", other)),
        })
    }
}

impl PostgresLedger {
    /// Connects to `url` (`postgres://user:pass@host:port/db`, any form `tokio-postgres`
    /// accepts), creates or migrates the schema, and keeps a pool of [`POOL_SIZE`] connections.
    ///
    /// # Errors
    /// `Invalid` for a URL that does not parse; `Unavailable` if the server cannot be reached;
    /// `Backend` if the schema cannot be created.
    pub async fn connect(url: &str) -> Result<Self> {
        let mut config = tokio_postgres::Config::from_str(url)
            .map_err(|e| StorageError::invalid("postgres ledger url", e))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.application_name("chorus-ledger");
        let options = match config.get_options() {
            Some(theirs) => format!("{SESSION_OPTIONS} {theirs}"),
            None => SESSION_OPTIONS.to_owned(),
        };
        config.options(options);
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(TCP_USER_TIMEOUT);
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| StorageError::backend("postgres pool", e))?;
        let db = Db { pool };
        let mut client = db.client().await.map_err(into_storage)?;
        migrate(&mut client).await?;
        let gifts = batch::Batcher::start(db.clone());
        info!("PostgreSQL ledger ready.");
        Ok(Self { db, gifts })
    }

    /// A pooled connection; failing to get one is `Unavailable`.
    async fn client(&self) -> TxResult<deadpool_postgres::Client> {
        self.db.client().await
    }

    /// Runs one read statement outside any explicit transaction.
    async fn read(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let run = async {
            let client = self.client().await.map_err(into_storage)?;
            let stmt = client.prepare_cached(sql).await.map_err(pg)?;
            client.query(&stmt, params).await.map_err(pg)
        };
        tokio::time::timeout(TX_TIMEOUT, run)
            .await
            .map_err(|_| StorageError::unavailable_msg("postgres: read timed out"))?
    }

    /// Runs one write statement outside any explicit transaction; returns the rows it changed.
    async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64> {
        let run = async {
            let client = self.client().await.map_err(into_storage)?;
            let stmt = client.prepare_cached(sql).await.map_err(pg)?;
            client.execute(&stmt, params).await.map_err(pg)
        };
        tokio::time::timeout(TX_TIMEOUT, run)
            .await
            .map_err(|_| StorageError::unavailable_msg("postgres: write timed out"))?
    }

    /// `(batches, gifts)`: the gift batches committed since this handle connected and the new
    /// gifts they booked (see `batch`).
    pub fn gift_batches(&self) -> (u64, u64) {
        self.gifts.stats()
    }

    /// Never: a ledger that lives in a database created after time-ordered gift ids.
    pub fn may_hold_legacy_gift_ids(&self) -> bool {
        false
    }

    pub(super) async fn balance(&self, user: &UserId) -> Result<i64> {
        let rows = self
            .read(
                "SELECT coins FROM account WHERE user_id = $1",
                &[&user.as_str()],
            )
            .await?;
        rows.first().map_or(Ok(0), |r| col(r, 0))
    }

    pub(super) async fn earnings(&self, user: &UserId) -> Result<i64> {
        let rows = self
            .read(
                "SELECT COALESCE(SUM(amount), 0)::BIGINT FROM earning WHERE user_id = $1",
                &[&user.as_str()],
            )
            .await?;
        rows.first().map_or(Ok(0), |r| col(r, 0))
    }

    pub(super) async fn saga(&self, gift_id: Uuid) -> Result<Option<SagaRecord>> {
        let rows = self.read(SQL_SAGA, &[&gift_id]).await?;
        rows.first().map(|r| saga_record(gift_id, r, 0)).transpose()
    }

    pub(super) async fn wallet_entry(
        &self,
        sender: &UserId,
        gift_id: Uuid,
    ) -> Result<Option<EntryKind>> {
        let rows = self
            .read(
                "SELECT kind FROM entry WHERE user_id = $1 AND entry_id = $2",
                &[&sender.as_str(), &gift_id],
            )
            .await?;
        rows.first()
            .map(|r| EntryKind::parse(col(r, 0)?))
            .transpose()
    }

    pub(super) async fn pending_sagas(
        &self,
        room: &RoomId,
        min_age_ms: i64,
    ) -> Result<Vec<SagaRecord>> {
        let before = now_ms().saturating_sub(min_age_ms);
        let rows = self
            .read(
                "SELECT gift_id, order_json, state, fence, reason, balance_after, updated_ms
                 FROM gift_saga
                 WHERE room = $1 AND state IN ('PENDING', 'DEBITED') AND updated_ms <= $2
                 ORDER BY updated_ms",
                &[&room.as_str(), &before],
            )
            .await?;
        rows.iter().map(|r| saga_record(col(r, 0)?, r, 1)).collect()
    }

    pub(super) async fn rooms_with_open_sagas(&self, min_age_ms: i64) -> Result<Vec<RoomId>> {
        let before = now_ms().saturating_sub(min_age_ms);
        let rows = self
            .read(
                "SELECT room FROM gift_saga
                 WHERE state IN ('PENDING', 'DEBITED') AND updated_ms <= $1
                 UNION SELECT room FROM unpublished_gift WHERE marked_ms <= $1",
                &[&before],
            )
            .await?;
        rows.iter()
            .map(|r| Ok(RoomId::new(col::<String>(r, 0)?)))
            .collect()
    }

    pub(super) async fn mark_unpublished(&self, gift_id: Uuid) -> Result<()> {
        transact!(self, |tx| {
            let stmt = tx
                .prepare_cached(
                    "INSERT INTO unpublished_gift (gift_id, room, marked_ms)
                     SELECT gift_id, room, $2 FROM gift_saga
                     WHERE gift_id = $1 AND state = 'SETTLED'
                     ON CONFLICT (gift_id) DO NOTHING",
                )
                .await?;
            tx.execute(&stmt, &[&gift_id, &now_ms()]).await?;
            Ok(())
        })
    }

    pub(super) async fn unpublished_gifts(
        &self,
        room: &RoomId,
        min_age_ms: i64,
    ) -> Result<Vec<GiftOrder>> {
        let before = now_ms().saturating_sub(min_age_ms);
        let rows = self
            .read(
                "SELECT s.gift_id, s.order_json FROM unpublished_gift u
                 JOIN gift_saga s ON s.gift_id = u.gift_id
                 WHERE u.room = $1 AND u.marked_ms <= $2 ORDER BY u.marked_ms",
                &[&room.as_str(), &before],
            )
            .await?;
        rows.iter()
            .map(|r| GiftOrder::from_json(col(r, 0)?, col(r, 1)?))
            .collect()
    }

    pub(super) async fn take_unpublished(&self, room: &RoomId, gift_id: Uuid) -> Result<bool> {
        transact!(self, |tx| {
            let stmt = tx
                .prepare_cached("DELETE FROM unpublished_gift WHERE gift_id = $1 AND room = $2")
                .await?;
            Ok(tx.execute(&stmt, &[&gift_id, &room.as_str()]).await? == 1)
        })
    }

    pub(super) async fn leaderboard(
        &self,
        room: &RoomId,
        board: Board,
        first_day: i64,
        limit: usize,
    ) -> Result<Vec<(UserId, i64)>> {
        let board = match board {
            Board::Senders => BOARD_SENDERS,
            Board::Receivers => BOARD_RECEIVERS,
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .read(
                "SELECT user_id, SUM(total)::BIGINT AS sum FROM gift_rank
                 WHERE room = $1 AND board = $2 AND day >= $3 GROUP BY user_id
                 ORDER BY sum DESC, user_id COLLATE \"C\" ASC LIMIT $4",
                &[&room.as_str(), &board, &first_day, &limit],
            )
            .await?;
        rows.iter()
            .map(|r| Ok((UserId::new(col::<String>(r, 0)?), col(r, 1)?)))
            .collect()
    }

    pub(super) async fn audit_totals(&self) -> Result<Totals> {
        // One snapshot for every sum, so that a gift is counted in all of them or in none.
        let run = async {
            let mut client = self.client().await.map_err(into_storage)?;
            let tx = client
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await
                .map_err(pg)?;
            let row = tx
                .query_one(
                    "SELECT
                       (SELECT COALESCE(SUM(amount), 0)::BIGINT FROM entry WHERE kind = 'GRANT'),
                       (SELECT COALESCE(SUM(coins), 0)::BIGINT FROM account),
                       (SELECT COALESCE(SUM(amount), 0)::BIGINT FROM earning),
                       (SELECT COUNT(*) FROM account WHERE coins < 0),
                       ((SELECT COALESCE(SUM(platform), 0) FROM gift_settlement)
                        + (SELECT COALESCE(SUM(price - host_share), 0) FROM guard_purchase))::BIGINT,
                       (SELECT COALESCE(SUM(lucky), 0)::BIGINT FROM gift_settlement),
                       (SELECT COALESCE(SUM(coins), 0)::BIGINT FROM payment),
                       (SELECT COALESCE(SUM(coins), 0)::BIGINT FROM payment WHERE refunded),
                       (SELECT COALESCE(SUM(amount), 0)::BIGINT FROM debt),
                       (SELECT COALESCE(SUM(amount), 0)::BIGINT FROM transfer),
                       (SELECT COALESCE(SUM(amount), 0)::BIGINT FROM settlement)",
                    &[],
                )
                .await
                .map_err(pg)?;
            tx.commit().await.map_err(pg)?;
            Ok(Totals {
                granted: col(&row, 0)?,
                coins: col(&row, 1)?,
                earnings: col(&row, 2)?,
                negative_accounts: col(&row, 3)?,
                platform_revenue: col(&row, 4)?,
                lucky_paid: col(&row, 5)?,
                topped_up: col(&row, 6)?,
                refunded: col(&row, 7)?,
                debt: col(&row, 8)?,
                transferred: col(&row, 9)?,
                settled: col(&row, 10)?,
            })
        };
        tokio::time::timeout(TX_TIMEOUT, run)
            .await
            .map_err(|_| StorageError::unavailable_msg("postgres: audit timed out"))?
    }

    /// The server answers and takes writes: a primary, not a replica in recovery.
    pub(super) async fn check_writable(&self) -> Result<()> {
        let rows = self.read("SELECT pg_is_in_recovery()", &[]).await?;
        if rows.first().map_or(Ok(false), |r| col::<bool>(r, 0))? {
            return Err(StorageError::unavailable_msg(
                "postgres: the server is a read-only replica",
            ));
        }
        Ok(())
    }
}

/// The saga columns [`saga_record`] reads, by gift id.
pub(super) const SQL_SAGA: &str =
    "SELECT order_json, state, fence, reason, balance_after, updated_ms
     FROM gift_saga WHERE gift_id = $1";

/// A saga record from `order_json, state, fence, reason, balance_after, updated_ms`, read from
/// column `at` of `row` on.
pub(super) fn saga_record(gift_id: Uuid, row: &Row, at: usize) -> Result<SagaRecord> {
    Ok(SagaRecord {
        order: GiftOrder::from_json(gift_id, col(row, at)?)?,
        state: SagaState::parse(col(row, at + 1)?)?,
        fence: from_sql_fence(col(row, at + 2)?)?,
        reason: col::<Option<&str>>(row, at + 3)?
            .map(VoidReason::parse)
            .transpose()?,
        balance_after: col(row, at + 4)?,
        updated_ms: col(row, at + 5)?,
    })
}
