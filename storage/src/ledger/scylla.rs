//! The production ledger engine on Scylla.
//!
//! - Wallets (`wallet`), sagas (`gift_saga`) and room fences (`room_owner`) are written only with
//!   LWT: money and ownership never move by a blind write. A wallet change is one conditional batch in the account's partition: the head
//!   (`balance`, `version`, static) moves by compare-and-set on `version`, and the entry row under
//!   the idempotency key is written with it. The entry is always read (at `LOCAL_SERIAL`) before
//!   the head, and every change (the void claim included) bumps `version`, so the version-only
//!   CAS (used where the entry cannot be part of the condition) can never write a second entry under a key.
//! - An LWT error is not a failure (its outcome is unknown, not negative): the entry is read back at `LOCAL_SERIAL`, then the
//!   same batch is resent; [`super::decision::decide`] holds the table.
//! - Facts (earnings, settled gifts, house shares, room days, the open-saga index) are plain
//!   idempotent inserts keyed by the gift id, in tables that never see an LWT. No counters: a counter's
//!   increment is not idempotent.
//! - Every statement is prepared at start-up, after `CREATE ... IF NOT EXISTS`, so a schema
//!   mistake fails the start.
//!
//! Recipients' earnings are append-only `earnings_entries` rows summed on read (the hot host is
//! never an LWT partition); folding them into a wallet is not needed while
//! earnings are a separate, non-spendable balance.
//!
//! # Layout
//! This file holds the engine's handle, its connection and the low-level calls (rows, scans,
//! LWTs, read-backs); beside it: `schema` (tables and prepared statements), `wallet` (the
//! wallet compare-and-set and the calls on wallets), `saga` (fences and the saga's steps) and
//! `listings` (room indexes, leaderboards, audit totals).

mod app_rank;
mod guard;
mod listings;
mod movements;
mod payment;
mod saga;
mod schema;
mod settlement;
mod transfer;
mod wallet;

use std::sync::Arc;
use std::time::Duration;

use ::scylla::client::session::Session;
use ::scylla::client::session_builder::SessionBuilder;
use ::scylla::deserialize::row::DeserializeRow;
use ::scylla::response::PagingState;
use ::scylla::response::query_result::QueryResult;
use ::scylla::serialize::row::SerializeRow;
use ::scylla::statement::prepared::PreparedStatement;
use ::scylla::value::{CqlTimestamp, CqlValue, Row};
use tracing::{info, warn};

use self::schema::{Statements, prepare_all};
use super::now_ms;
use crate::{Result, StorageError};

/// The keyspace used when the URL names none.
pub const DEFAULT_KEYSPACE: &str = "chorus_ledger";
/// Replicas per row in production (one node may be down and LWT still has a quorum); a cluster
/// given fewer contact points (a dev node) gets that many.
pub const REPLICATION_FACTOR: usize = 3;
/// Compare-and-set attempts on one wallet before answering `Conflict` (the caller retries later):
/// each round at least one contender wins, so this covers ~64 concurrent writers to one wallet;
/// bounded so a hot wallet cannot pin a task forever (scylladb#16261).
pub const MAX_CAS_ATTEMPTS: u32 = 64;
/// Re-sends of one statement whose outcome stayed unknown before answering `Unavailable`.
pub const MAX_RESENDS: u32 = 8;
/// Serial read-backs of an unknown outcome before answering `Unavailable` (safe to retry later:
/// the key makes the whole operation idempotent).
pub const MAX_READ_BACKS: u32 = 8;
/// Upper bound of the random pause between CAS retries, so contending writers spread out.
const CAS_JITTER_MAX_MS: u64 = 20;
/// Pause between read-backs while a replica set is struggling.
const READ_BACK_PAUSE: Duration = Duration::from_millis(50);
/// Rows per page for the audit and leaderboard scans.
const SCAN_PAGE_ROWS: i32 = 1_000;

fn backend<E: std::error::Error + Send + Sync + 'static>(e: E) -> StorageError {
    StorageError::backend("scylla", e)
}

fn unavailable<E: std::error::Error + Send + Sync + 'static>(e: E) -> StorageError {
    StorageError::unavailable("scylla", e)
}

/// `Unavailable` with no driver error: an outcome that stayed unknown.
fn unknown(what: &str) -> StorageError {
    StorageError::unavailable_msg(format!("scylla: {what}"))
}

fn to_cql_fence(fence: u64) -> Result<i64> {
    i64::try_from(fence).map_err(|_| StorageError::invalid_msg(format!("fence {fence} too large")))
}

fn from_cql_fence(fence: Option<i64>) -> Result<u64> {
    let f = fence.unwrap_or(0);
    u64::try_from(f).map_err(|_| StorageError::corrupt_msg(format!("negative fence {f}")))
}

fn cql_day(day: i64) -> i32 {
    i32::try_from(day).unwrap_or(if day < 0 { i32::MIN } else { i32::MAX })
}

fn now_ts() -> CqlTimestamp {
    CqlTimestamp(now_ms())
}

/// The Scylla engine: one shared session and the prepared statements.
#[derive(Clone)]
pub struct ScyllaLedger {
    session: Arc<Session>,
    st: Arc<Statements>,
}

impl ScyllaLedger {
    /// Connects to `nodes` (`host:port`), creates the keyspace and tables if missing, and
    /// prepares every statement.
    ///
    /// # Errors
    /// `Invalid` for no contact points or a bad keyspace name; `Unavailable` if no node answers;
    /// `Backend` if the schema or a statement is refused.
    pub async fn connect(nodes: &[String], keyspace: &str) -> Result<Self> {
        if nodes.is_empty() {
            return Err(StorageError::invalid_msg("scylla: no contact points"));
        }
        if !keyspace
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(StorageError::invalid_msg(format!(
                "bad keyspace name {keyspace:?}"
            )));
        }
        let session = SessionBuilder::new()
            .known_nodes(nodes)
            .build()
            .await
            .map_err(unavailable)?;
        let rf = REPLICATION_FACTOR.min(nodes.len());
        for ddl in schema::schema(keyspace, rf)
            .into_iter()
            .chain(movements::schema(keyspace))
            .chain(transfer::schema(keyspace))
            .chain(payment::schema(keyspace))
            .chain(settlement::schema(keyspace))
            .chain(app_rank::schema(keyspace))
            .chain(guard::schema(keyspace))
        {
            session.query_unpaged(ddl, ()).await.map_err(backend)?;
        }
        session.await_schema_agreement().await.map_err(backend)?;
        let st = prepare_all(&session, keyspace).await?;
        info!(keyspace, "Scylla ledger ready.");
        Ok(Self {
            session: Arc::new(session),
            st: Arc::new(st),
        })
    }

    // ---- Low-level helpers. ---------------------------------------------------------------

    async fn rows<R>(&self, st: &PreparedStatement, values: impl SerializeRow) -> Result<Vec<R>>
    where
        R: for<'f, 'm> DeserializeRow<'f, 'm>,
    {
        let res = self
            .session
            .execute_unpaged(st, values)
            .await
            .map_err(unavailable)?;
        collect_rows(res)
    }

    /// Every row of a (possibly large) result, page by page.
    async fn scan<R>(
        &self,
        st: &PreparedStatement,
        values: impl SerializeRow + Clone,
    ) -> Result<Vec<R>>
    where
        R: for<'f, 'm> DeserializeRow<'f, 'm>,
    {
        let mut out = Vec::new();
        let mut paging = PagingState::start();
        loop {
            let (res, next) = self
                .session
                .execute_single_page(st, values.clone(), paging)
                .await
                .map_err(unavailable)?;
            out.extend(collect_rows::<R>(res)?);
            match next.into_paging_control_flow() {
                std::ops::ControlFlow::Break(()) => return Ok(out),
                std::ops::ControlFlow::Continue(p) => paging = p,
            }
        }
    }

    async fn write(&self, st: &PreparedStatement, values: impl SerializeRow) -> Result<()> {
        self.session
            .execute_unpaged(st, values)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Runs an LWT: `Ok(applied)` when the outcome is known, `Err(())` when it is not.
    async fn lwt(&self, st: &PreparedStatement, values: impl SerializeRow) -> Result<bool, ()> {
        match self.session.execute_unpaged(st, values).await {
            Ok(res) => lwt_applied(res).map_err(|e| warn!(error = %e, "Unreadable LWT result.")),
            Err(e) => {
                warn!(error = %e, "LWT outcome unknown; reading back.");
                Err(())
            }
        }
    }

    /// Retries a read a few times: used where an answer is needed to resolve an unknown write.
    async fn read_back<T, F, Fut>(&self, mut read: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut last = None;
        for _ in 0..MAX_READ_BACKS {
            match read().await {
                Ok(v) => return Ok(v),
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(READ_BACK_PAUSE).await;
        }
        Err(last.unwrap_or_else(|| unknown("read-back gave up")))
    }
}

fn collect_rows<R>(res: QueryResult) -> Result<Vec<R>>
where
    R: for<'f, 'm> DeserializeRow<'f, 'm>,
{
    let rows = res.into_rows_result().map_err(backend)?;
    let iter = rows.rows::<R>().map_err(backend)?;
    iter.collect::<Result<Vec<R>, _>>().map_err(backend)
}

/// The `[applied]` column of an LWT result.
fn lwt_applied(res: QueryResult) -> Result<bool> {
    let rows = res.into_rows_result().map_err(backend)?;
    let first: Option<Row> = rows.maybe_first_row::<Row>().map_err(backend)?;
    match first.and_then(|r| r.columns.into_iter().next().flatten()) {
        Some(CqlValue::Boolean(applied)) => Ok(applied),
        other => Err(StorageError::corrupt_msg(format!(
            "LWT result without [applied]: {other:?}"
        ))),
    }
}
