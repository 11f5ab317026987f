//! The production ledger engine on Scylla (LEDGER-AND-LEASES §1).
//!
//! - Wallets (`wallet`), sagas (`gift_saga`) and room fences (`room_owner`) are written only with
//!   LWT (R1, R2). A wallet change is one conditional batch in the account's partition: the head
//!   (`balance`, `version`, static) moves by compare-and-set on `version`, and the entry row under
//!   the idempotency key is written with it. The entry is always read (at `LOCAL_SERIAL`) before
//!   the head, and every change (the void claim included) bumps `version`, so the version-only
//!   CAS (the §1.4 fallback) can never write a second entry under a key.
//! - An LWT error is not a failure (R5): the entry is read back at `LOCAL_SERIAL`, then the
//!   same batch is resent; [`super::decision::decide`] holds the table.
//! - Facts (earnings, settled gifts, house shares, room days, the open-saga index) are plain
//!   idempotent inserts keyed by the gift id, in tables that never see an LWT. No counters (R6).
//! - Every statement is prepared at start-up, after `CREATE ... IF NOT EXISTS`, so a schema
//!   mistake fails the start.
//!
//! Recipients' earnings are append-only `earnings_entries` rows summed on read (the hot host is
//! never an LWT partition); the fold into a wallet (§1.4 "receiver credits") is not needed while
//! earnings are a separate, non-spendable balance.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ::scylla::client::session::Session;
use ::scylla::client::session_builder::SessionBuilder;
use ::scylla::deserialize::row::DeserializeRow;
use ::scylla::policies::retry::FallthroughRetryPolicy;
use ::scylla::response::PagingState;
use ::scylla::response::query_result::QueryResult;
use ::scylla::serialize::row::SerializeRow;
use ::scylla::statement::batch::{Batch, BatchType};
use ::scylla::statement::prepared::PreparedStatement;
use ::scylla::statement::{Consistency, SerialConsistency};
use ::scylla::value::{CqlTimestamp, CqlValue, Row};
use protocol::{RoomId, UserId};
use rand::Rng;
use tracing::{info, warn};
use uuid::Uuid;

use super::decision::{Decision, Observation, decide};
use super::{
    BeginOutcome, Board, DebitOutcome, EntryKind, FenceInstall, GiftOrder, GrantOutcome,
    SagaRecord, SagaState, SettleOutcome, Totals, VoidOutcome, VoidReason, day_of, grant_entry_id,
    lucky_entry_id, now_ms,
};
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

fn backend(e: impl std::fmt::Display) -> StorageError {
    StorageError::Backend(format!("scylla: {e}"))
}

fn unavailable(e: impl std::fmt::Display) -> StorageError {
    StorageError::Unavailable(format!("scylla: {e}"))
}

fn to_cql_fence(fence: u64) -> Result<i64> {
    i64::try_from(fence).map_err(|_| StorageError::Backend(format!("fence {fence} too large")))
}

fn from_cql_fence(fence: Option<i64>) -> Result<u64> {
    let f = fence.unwrap_or(0);
    u64::try_from(f).map_err(|_| StorageError::Corrupt(format!("negative fence {f}")))
}

fn cql_day(day: i64) -> i32 {
    i32::try_from(day).unwrap_or(if day < 0 { i32::MIN } else { i32::MAX })
}

fn now_ts() -> CqlTimestamp {
    CqlTimestamp(now_ms())
}

fn schema(ks: &str, rf: usize) -> Vec<String> {
    vec![
        format!(
            "CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = \
             {{'class': 'NetworkTopologyStrategy', 'replication_factor': {rf}}} \
             AND tablets = {{'enabled': false}}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.room_owner (
               room_id text PRIMARY KEY, fence bigint, owner text, since timestamp)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.wallet (
               account_id text, entry_id uuid,
               balance bigint STATIC, version bigint STATIC,
               kind text, amount bigint, balance_after bigint, seq bigint, ref text,
               created_at timestamp,
               PRIMARY KEY ((account_id), entry_id))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.gift_saga (
               gift_id uuid PRIMARY KEY, room_id text, order_json text, state text,
               fence bigint, reason text, balance_after bigint, updated_at timestamp)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.room_open_sagas (
               room_id text, gift_id uuid, PRIMARY KEY ((room_id), gift_id))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.room_unpublished_gifts (
               room_id text, gift_id uuid, marked_at timestamp,
               PRIMARY KEY ((room_id), gift_id))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.earnings_entries (
               receiver_id text, gift_id uuid, amount bigint, room_id text,
               PRIMARY KEY ((receiver_id), gift_id))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.settled_gifts (
               room_id text, day int, gift_id uuid, receiver_id text,
               sender_id text, amount bigint, earnings bigint,
               PRIMARY KEY ((room_id, day), gift_id, receiver_id))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.room_days (
               room_id text, day int, PRIMARY KEY ((room_id), day))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.settled_house (
               gift_id uuid PRIMARY KEY, platform bigint, lucky bigint)"
        ),
    ]
}

/// Every statement, prepared at start-up.
struct Statements {
    owner_insert: PreparedStatement,
    owner_update: PreparedStatement,
    owner_read: PreparedStatement,
    wallet_head: PreparedStatement,
    wallet_entry: PreparedStatement,
    wallet_change: Batch,
    saga_insert: PreparedStatement,
    saga_read: PreparedStatement,
    saga_move: PreparedStatement,
    saga_touch: PreparedStatement,
    open_add: PreparedStatement,
    open_del: PreparedStatement,
    open_list: PreparedStatement,
    open_rooms: PreparedStatement,
    unpublished_add: PreparedStatement,
    unpublished_list: PreparedStatement,
    unpublished_take: PreparedStatement,
    unpublished_rooms: PreparedStatement,
    earn_add: PreparedStatement,
    earn_sum: PreparedStatement,
    fact_add: PreparedStatement,
    facts_of_day: PreparedStatement,
    day_add: PreparedStatement,
    days_since: PreparedStatement,
    house_add: PreparedStatement,
    scan_wallets: PreparedStatement,
    scan_earnings: PreparedStatement,
    scan_house: PreparedStatement,
}

/// The Scylla engine: one shared session and the prepared statements.
#[derive(Clone)]
pub struct ScyllaLedger {
    session: Arc<Session>,
    st: Arc<Statements>,
}

/// The result of one wallet change.
enum Applied {
    /// The key is held by `kind`; `ours` when this call's write is the one that landed (or may
    /// have: an unknown outcome read back as present).
    Held {
        kind: EntryKind,
        balance_after: Option<i64>,
        ours: bool,
    },
    /// The change would take the balance below zero; nothing was written.
    Insufficient { balance: i64 },
}

impl ScyllaLedger {
    /// Connects to `nodes` (`host:port`), creates the keyspace and tables if missing, and
    /// prepares every statement.
    ///
    /// # Errors
    /// `Unavailable` if no node answers; `Backend` if the schema or a statement is refused.
    pub async fn connect(nodes: &[String], keyspace: &str) -> Result<Self> {
        if nodes.is_empty() {
            return Err(StorageError::Backend("scylla: no contact points".into()));
        }
        if !keyspace
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(StorageError::Backend(format!(
                "bad keyspace name {keyspace:?}"
            )));
        }
        let session = SessionBuilder::new()
            .known_nodes(nodes)
            .build()
            .await
            .map_err(unavailable)?;
        let rf = REPLICATION_FACTOR.min(nodes.len());
        for ddl in schema(keyspace, rf) {
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
        Err(last.unwrap_or_else(|| unavailable("read-back gave up")))
    }

    async fn read_entry(
        &self,
        account: &str,
        entry_id: Uuid,
    ) -> Result<Option<(EntryKind, Option<i64>)>> {
        let rows: Vec<(Option<String>, Option<i64>)> = self
            .rows(&self.st.wallet_entry, (account, entry_id))
            .await?;
        match rows.into_iter().next() {
            Some((Some(kind), after)) => Ok(Some((EntryKind::parse(&kind)?, after))),
            _ => Ok(None),
        }
    }

    async fn read_head(&self, account: &str) -> Result<(i64, Option<i64>)> {
        let rows: Vec<(Option<i64>, Option<i64>)> =
            self.rows(&self.st.wallet_head, (account,)).await?;
        Ok(rows
            .into_iter()
            .next()
            .map_or((0, None), |(b, v)| (b.unwrap_or(0), v)))
    }

    async fn read_saga(&self, gift_id: Uuid) -> Result<Option<SagaRecord>> {
        let rows: Vec<SagaRow> = self.rows(&self.st.saga_read, (gift_id,)).await?;
        let Some((json, state, fence, reason, balance_after, updated)) = rows.into_iter().next()
        else {
            return Ok(None);
        };
        let (Some(json), Some(state)) = (json, state) else {
            return Err(StorageError::Corrupt(format!(
                "saga {gift_id} lacks order or state"
            )));
        };
        Ok(Some(SagaRecord {
            order: GiftOrder::from_json(gift_id, &json)?,
            state: SagaState::parse(&state)?,
            fence: from_cql_fence(fence)?,
            reason: reason.as_deref().map(VoidReason::parse).transpose()?,
            balance_after,
            updated_ms: updated.map_or(0, |t| t.0),
        }))
    }

    /// Fails with `Fenced` when the room's installed fence is above `fence`.
    async fn ensure_room_fence(&self, room: &RoomId, fence: u64) -> Result<()> {
        let rows: Vec<(Option<i64>, Option<String>)> =
            self.rows(&self.st.owner_read, (room.as_str(),)).await?;
        let installed = match rows.into_iter().next() {
            Some((installed, _)) => from_cql_fence(installed)?,
            None => 0,
        };
        if installed > fence {
            return Err(StorageError::Fenced { token: fence });
        }
        Ok(())
    }

    /// Writes `claim` under `entry_id` in `account`'s wallet, moving the balance by `delta`,
    /// exactly once; or finds who holds the key. The §1.4 protocol, driven by `decide`.
    async fn wallet_apply(
        &self,
        account: &str,
        entry_id: Uuid,
        claim: EntryKind,
        delta: i64,
        reference: &str,
    ) -> Result<Applied> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            if attempts > MAX_CAS_ATTEMPTS {
                return Err(StorageError::Conflict(format!(
                    "wallet {account}: compare-and-set kept losing"
                )));
            }
            // The entry first, then the head: see the module doc for why that order matters.
            if let Some((kind, after)) = self.read_entry(account, entry_id).await? {
                return held(
                    claim,
                    Observation::NotApplied { entry: Some(kind) },
                    after,
                    false,
                );
            }
            let (balance, version) = self.read_head(account).await?;
            let new = balance
                .checked_add(delta)
                .ok_or_else(|| StorageError::Backend("balance overflow".into()))?;
            if new < 0 {
                return Ok(Applied::Insufficient { balance });
            }
            let v1 = version.unwrap_or(0) + 1;
            let values = (
                (new, v1, account, version),
                (
                    account,
                    entry_id,
                    claim.as_str(),
                    delta.abs(),
                    new,
                    v1,
                    reference,
                    now_ts(),
                ),
            );
            let mut observed = self.change(&values).await;
            let mut resends = 0;
            loop {
                match decide(claim, observed) {
                    Decision::Holds(kind) => {
                        // Ours when this call's write landed, or may have (an unknown outcome
                        // read back as our kind); for a grant this decides `applied`.
                        let ours =
                            kind == claim && !matches!(observed, Observation::NotApplied { .. });
                        let balance_after = if observed == Observation::Applied {
                            Some(new)
                        } else {
                            self.read_entry(account, entry_id)
                                .await?
                                .and_then(|(_, a)| a)
                        };
                        return Ok(Applied::Held {
                            kind,
                            balance_after,
                            ours,
                        });
                    }
                    Decision::RetryFresh => break,
                    Decision::ReadBack => {
                        let entry = self
                            .read_back(|| self.read_entry(account, entry_id))
                            .await?
                            .map(|(k, _)| k);
                        observed = Observation::ReadBack { entry };
                    }
                    Decision::ResendSame => {
                        resends += 1;
                        if resends > MAX_RESENDS {
                            return Err(unavailable("wallet change outcome stays unknown"));
                        }
                        observed = self.change(&values).await;
                    }
                    Decision::Corrupt(kind) => {
                        return Err(StorageError::Corrupt(format!(
                            "wallet {account} key {entry_id} holds a {kind:?}, wanted {claim:?}"
                        )));
                    }
                }
            }
            let jitter = rand::rng().random_range(0..=CAS_JITTER_MAX_MS);
            tokio::time::sleep(Duration::from_millis(jitter)).await;
        }
    }

    /// Sends the wallet batch once. A not-applied answer is completed with a serial read of
    /// the key, so `decide` sees who holds it.
    async fn change(&self, values: &WalletChange<'_>) -> Observation {
        match self.session.batch(&self.st.wallet_change, values).await {
            Ok(res) => match lwt_applied(res) {
                Ok(true) => Observation::Applied,
                Ok(false) => {
                    let (account, entry_id) = (values.1.0, values.1.1);
                    match self.read_entry(account, entry_id).await {
                        Ok(entry) => Observation::NotApplied {
                            entry: entry.map(|(k, _)| k),
                        },
                        Err(_) => Observation::Unknown,
                    }
                }
                Err(_) => Observation::Unknown,
            },
            Err(e) => {
                warn!(error = %e, "Wallet LWT outcome unknown; reading back.");
                Observation::Unknown
            }
        }
    }

    /// Moves a saga `from → to` if its fence allows. `Ok(None)`: it is now in `to`;
    /// `Ok(Some(state))`: it is in another state, unchanged.
    async fn saga_move(
        &self,
        gift_id: Uuid,
        from: SagaState,
        to: SagaState,
        fence: u64,
        reason: Option<VoidReason>,
        balance_after: Option<i64>,
    ) -> Result<Option<SagaState>> {
        let f = to_cql_fence(fence)?;
        let values = (
            to.as_str(),
            f,
            reason.map(VoidReason::as_str),
            balance_after,
            now_ts(),
            gift_id,
            from.as_str(),
            f,
        );
        for _ in 0..MAX_RESENDS {
            let out = self.lwt(&self.st.saga_move, &values).await;
            if out == Ok(true) {
                return Ok(None);
            }
            let Some(rec) = self.read_back(|| self.read_saga(gift_id)).await? else {
                return Err(StorageError::Corrupt(format!("saga {gift_id} vanished")));
            };
            if rec.fence > fence {
                // R7: a newer owner holds it. Stop; never make it terminal from here.
                return Err(StorageError::Fenced { token: fence });
            }
            if rec.state == to {
                return Ok(None);
            }
            if rec.state != from {
                return Ok(Some(rec.state));
            }
            // Still `from` with a fence we may move: the write did not land. Send it again.
        }
        Err(unavailable("saga move outcome stays unknown"))
    }

    // ---- The contract. --------------------------------------------------------------------

    pub(super) async fn grant(
        &self,
        user: &UserId,
        amount: i64,
        key: &str,
    ) -> Result<GrantOutcome> {
        let reference = format!("grant:{key}");
        match self
            .wallet_apply(
                user.as_str(),
                grant_entry_id(key),
                EntryKind::Grant,
                amount,
                &reference,
            )
            .await?
        {
            Applied::Held { ours, .. } => Ok(GrantOutcome {
                balance: self.read_head(user.as_str()).await?.0,
                applied: ours,
            }),
            Applied::Insufficient { .. } => {
                Err(StorageError::Corrupt("a credit cannot overdraw".into()))
            }
        }
    }

    pub(super) async fn balance(&self, user: &UserId) -> Result<i64> {
        Ok(self.read_head(user.as_str()).await?.0)
    }

    pub(super) async fn earnings(&self, user: &UserId) -> Result<i64> {
        let rows: Vec<(Option<i64>,)> = self.rows(&self.st.earn_sum, (user.as_str(),)).await?;
        Ok(rows.into_iter().next().and_then(|r| r.0).unwrap_or(0))
    }

    pub(super) async fn install_fence(
        &self,
        room: &RoomId,
        fence: u64,
        owner: &str,
    ) -> Result<FenceInstall> {
        let f = to_cql_fence(fence)?;
        for _ in 0..MAX_RESENDS {
            let insert = (room.as_str(), f, owner, now_ts());
            // `IF NOT EXISTS` applied: the room had no owner row (none is ever deleted). An
            // earlier attempt whose outcome was unknown and did apply makes this one fail, and
            // the read-back below answers `Installed`: only a known first counts as first.
            if self.lwt(&self.st.owner_insert, insert).await == Ok(true) {
                return Ok(FenceInstall::First);
            }
            let update = (f, owner, now_ts(), room.as_str(), f);
            if self.lwt(&self.st.owner_update, update).await == Ok(true) {
                return Ok(FenceInstall::Installed);
            }
            let rows: Vec<(Option<i64>, Option<String>)> = self
                .read_back(|| self.rows(&self.st.owner_read, (room.as_str(),)))
                .await?;
            if let Some((cur, who)) = rows.into_iter().next() {
                let cur = from_cql_fence(cur)?;
                if cur == fence && who.as_deref() == Some(owner) {
                    return Ok(FenceInstall::Installed);
                }
                if cur >= fence {
                    return Ok(FenceInstall::Stale { current: cur });
                }
            }
        }
        Err(unavailable("fence install outcome stays unknown"))
    }

    pub(super) async fn begin(&self, order: &GiftOrder, fence: u64) -> Result<BeginOutcome> {
        self.ensure_room_fence(&order.room, fence).await?;
        let json = order.to_json()?;
        let values = (
            order.gift_id,
            order.room.as_str(),
            json.as_str(),
            to_cql_fence(fence)?,
            now_ts(),
        );
        for _ in 0..MAX_RESENDS {
            let out = self.lwt(&self.st.saga_insert, &values).await;
            if out == Ok(true) {
                self.write(&self.st.open_add, (order.room.as_str(), order.gift_id))
                    .await?;
                return Ok(BeginOutcome::Started);
            }
            if let Some(rec) = self.read_back(|| self.read_saga(order.gift_id)).await? {
                if rec.fence > fence {
                    return Err(StorageError::Fenced { token: fence });
                }
                if !rec.state.is_terminal() {
                    self.write(&self.st.open_add, (order.room.as_str(), order.gift_id))
                        .await?;
                }
                return Ok(BeginOutcome::Existing(rec));
            }
        }
        Err(unavailable("saga insert outcome stays unknown"))
    }

    pub(super) async fn debit(&self, order: &GiftOrder, fence: u64) -> Result<DebitOutcome> {
        self.ensure_room_fence(&order.room, fence).await?;
        let Some(rec) = self.read_saga(order.gift_id).await? else {
            return Ok(DebitOutcome::Missing);
        };
        if rec.fence > fence {
            return Err(StorageError::Fenced { token: fence });
        }
        match rec.state {
            SagaState::Debited | SagaState::Settled => {
                return Ok(DebitOutcome::Debited {
                    balance: rec.balance_after.unwrap_or(0),
                });
            }
            SagaState::Voided => {
                return Ok(match rec.reason {
                    Some(VoidReason::InsufficientFunds) => DebitOutcome::InsufficientFunds {
                        balance: rec.balance_after.unwrap_or(0),
                    },
                    _ => DebitOutcome::Voided,
                });
            }
            SagaState::Pending => {}
        }
        let o = &rec.order;
        let sender = o.sender.as_str();
        let reference = format!("gift:{}:{}", o.room, o.gift_id);
        let applied = self
            .wallet_apply(sender, o.gift_id, EntryKind::Debit, -o.total(), &reference)
            .await?;
        let (kind, after, nsf) = match applied {
            Applied::Held {
                kind,
                balance_after,
                ..
            } => (kind, balance_after, None),
            Applied::Insufficient { balance } => {
                // The void claim under the same key: a racing debit attempt can no longer land.
                match self
                    .wallet_apply(sender, o.gift_id, EntryKind::Void, 0, &reference)
                    .await?
                {
                    Applied::Held {
                        kind,
                        balance_after,
                        ..
                    } => (kind, balance_after, Some(balance)),
                    Applied::Insufficient { .. } => {
                        return Err(StorageError::Corrupt("a void claim cannot overdraw".into()));
                    }
                }
            }
        };
        match kind {
            EntryKind::Debit => {
                let moved = self
                    .saga_move(
                        o.gift_id,
                        SagaState::Pending,
                        SagaState::Debited,
                        fence,
                        None,
                        after,
                    )
                    .await?;
                match moved {
                    None | Some(SagaState::Settled | SagaState::Debited) => {
                        Ok(DebitOutcome::Debited {
                            balance: after.unwrap_or(0),
                        })
                    }
                    Some(state) => Err(StorageError::Corrupt(format!(
                        "gift {} debited but saga is {}",
                        o.gift_id,
                        state.as_str()
                    ))),
                }
            }
            _ => {
                let reason = if nsf.is_some() {
                    VoidReason::InsufficientFunds
                } else {
                    VoidReason::Recovered
                };
                self.saga_move(
                    o.gift_id,
                    SagaState::Pending,
                    SagaState::Voided,
                    fence,
                    Some(reason),
                    nsf,
                )
                .await?;
                self.write(&self.st.open_del, (o.room.as_str(), o.gift_id))
                    .await?;
                Ok(match nsf {
                    Some(balance) => DebitOutcome::InsufficientFunds { balance },
                    None => DebitOutcome::Voided,
                })
            }
        }
    }

    pub(super) async fn settle(&self, order: &GiftOrder, fence: u64) -> Result<SettleOutcome> {
        self.ensure_room_fence(&order.room, fence).await?;
        let Some(rec) = self.read_saga(order.gift_id).await? else {
            return Ok(SettleOutcome::Missing);
        };
        if rec.fence > fence {
            return Err(StorageError::Fenced { token: fence });
        }
        match rec.state {
            SagaState::Settled => {
                return Ok(SettleOutcome::Settled {
                    balance: rec.balance_after.unwrap_or(0),
                });
            }
            SagaState::Pending | SagaState::Voided => {
                return Ok(SettleOutcome::NotDebited(rec.state));
            }
            SagaState::Debited => {}
        }
        // Step 3: idempotent facts keyed by the gift id; rewriting them yields identical rows.
        let o = &rec.order;
        let earned = o.earnings_per_recipient();
        let day = cql_day(day_of(o.created_ms));
        for r in &o.recipients {
            self.write(
                &self.st.earn_add,
                (r.as_str(), o.gift_id, earned, o.room.as_str()),
            )
            .await?;
            let fact = (
                o.room.as_str(),
                day,
                o.gift_id,
                r.as_str(),
                o.sender.as_str(),
                o.per_recipient(),
                earned,
            );
            self.write(&self.st.fact_add, fact).await?;
        }
        self.write(&self.st.day_add, (o.room.as_str(), day)).await?;
        let prize = o.prize();
        self.write(&self.st.house_add, (o.gift_id, o.platform_share(), prize))
            .await?;
        let mut balance = rec.balance_after.unwrap_or(0);
        if prize > 0 {
            let reference = format!("lucky:{}:{}", o.room, o.gift_id);
            let sender = o.sender.as_str();
            match self
                .wallet_apply(
                    sender,
                    lucky_entry_id(o.gift_id),
                    EntryKind::Lucky,
                    prize,
                    &reference,
                )
                .await?
            {
                Applied::Held { balance_after, .. } => {
                    balance = balance_after.unwrap_or(balance);
                }
                Applied::Insufficient { .. } => {
                    return Err(StorageError::Corrupt("a prize cannot overdraw".into()));
                }
            }
        }
        // Step 4.
        let moved = self
            .saga_move(
                o.gift_id,
                SagaState::Debited,
                SagaState::Settled,
                fence,
                None,
                Some(balance),
            )
            .await?;
        self.write(&self.st.open_del, (o.room.as_str(), o.gift_id))
            .await?;
        Ok(match moved {
            None | Some(SagaState::Settled) => SettleOutcome::Settled { balance },
            Some(state) => SettleOutcome::NotDebited(state),
        })
    }

    pub(super) async fn void(
        &self,
        order: &GiftOrder,
        fence: u64,
        reason: VoidReason,
    ) -> Result<VoidOutcome> {
        self.ensure_room_fence(&order.room, fence).await?;
        let Some(rec) = self.read_saga(order.gift_id).await? else {
            return Ok(VoidOutcome::Missing);
        };
        if rec.fence > fence {
            return Err(StorageError::Fenced { token: fence });
        }
        match rec.state {
            SagaState::Debited | SagaState::Settled => return Ok(VoidOutcome::Debited),
            SagaState::Voided => return Ok(VoidOutcome::Voided),
            SagaState::Pending => {}
        }
        let o = &rec.order;
        let reference = format!("gift:{}:{}", o.room, o.gift_id);
        let kind = match self
            .wallet_apply(o.sender.as_str(), o.gift_id, EntryKind::Void, 0, &reference)
            .await?
        {
            Applied::Held { kind, .. } => kind,
            Applied::Insufficient { .. } => {
                return Err(StorageError::Corrupt("a void claim cannot overdraw".into()));
            }
        };
        if kind == EntryKind::Debit {
            // The debit holds the key: mark it so the owner rolls forward; never refund.
            let after = self
                .read_entry(o.sender.as_str(), o.gift_id)
                .await?
                .and_then(|(_, a)| a);
            self.saga_move(
                o.gift_id,
                SagaState::Pending,
                SagaState::Debited,
                fence,
                None,
                after,
            )
            .await?;
            return Ok(VoidOutcome::Debited);
        }
        match self
            .saga_move(
                o.gift_id,
                SagaState::Pending,
                SagaState::Voided,
                fence,
                Some(reason),
                None,
            )
            .await?
        {
            None | Some(SagaState::Voided) => {
                self.write(&self.st.open_del, (o.room.as_str(), o.gift_id))
                    .await?;
                Ok(VoidOutcome::Voided)
            }
            Some(_) => Ok(VoidOutcome::Debited),
        }
    }

    pub(super) async fn touch(&self, order: &GiftOrder, fence: u64) -> Result<Option<SagaRecord>> {
        self.ensure_room_fence(&order.room, fence).await?;
        let f = to_cql_fence(fence)?;
        for _ in 0..MAX_RESENDS {
            let out = self.lwt(&self.st.saga_touch, (f, order.gift_id, f)).await;
            let rec = self.read_back(|| self.read_saga(order.gift_id)).await?;
            let Some(rec) = rec else {
                return Ok(None);
            };
            if rec.fence > fence {
                return Err(StorageError::Fenced { token: fence });
            }
            if rec.fence == fence || out == Ok(true) {
                return Ok(Some(rec));
            }
        }
        Err(unavailable("saga touch outcome stays unknown"))
    }

    /// Whether sagas may be kept under their ids from before time-ordered gift ids
    /// ([`crate::ledger::legacy_gift_id`]). This keyspace keeps no schema version to tell a
    /// keyspace written before from one created since, so it always may: each gift with a
    /// UUIDv7 request id reads the old id once before booking.
    pub(super) fn may_hold_legacy_gift_ids(&self) -> bool {
        true
    }

    pub(super) async fn saga(&self, gift_id: Uuid) -> Result<Option<SagaRecord>> {
        self.read_saga(gift_id).await
    }

    pub(super) async fn wallet_entry(
        &self,
        sender: &UserId,
        gift_id: Uuid,
    ) -> Result<Option<EntryKind>> {
        Ok(self
            .read_entry(sender.as_str(), gift_id)
            .await?
            .map(|(k, _)| k))
    }

    pub(super) async fn pending_sagas(
        &self,
        room: &RoomId,
        min_age_ms: i64,
    ) -> Result<Vec<SagaRecord>> {
        let before = now_ms().saturating_sub(min_age_ms);
        let ids: Vec<(Uuid,)> = self.scan(&self.st.open_list, (room.as_str(),)).await?;
        let mut out = Vec::new();
        for (id,) in ids {
            match self.read_saga(id).await? {
                Some(rec) if rec.state.is_terminal() => {
                    self.write(&self.st.open_del, (room.as_str(), id)).await?;
                }
                Some(rec) if rec.updated_ms <= before => out.push(rec),
                _ => {}
            }
        }
        Ok(out)
    }

    pub(super) async fn rooms_with_open_sagas(&self, min_age_ms: i64) -> Result<Vec<RoomId>> {
        // A full scan of the open-saga index's partition keys: a background sweep's query,
        // never on a request path. `pending_sagas` prunes finished entries as it reads.
        let rooms: Vec<(String,)> = self.scan(&self.st.open_rooms, ()).await?;
        let mut out = Vec::new();
        for (room,) in rooms {
            let room = RoomId::new(room);
            if !self.pending_sagas(&room, min_age_ms).await?.is_empty() {
                out.push(room);
            }
        }
        let owing: Vec<(String,)> = self.scan(&self.st.unpublished_rooms, ()).await?;
        for (room,) in owing {
            let room = RoomId::new(room);
            if !out.contains(&room) && !self.unpublished_gifts(&room, min_age_ms).await?.is_empty()
            {
                out.push(room);
            }
        }
        Ok(out)
    }

    pub(super) async fn mark_unpublished(&self, gift_id: Uuid) -> Result<()> {
        match self.read_saga(gift_id).await? {
            Some(rec) if rec.state == SagaState::Settled => {
                self.write(
                    &self.st.unpublished_add,
                    (rec.order.room.as_str(), gift_id, now_ts()),
                )
                .await
            }
            _ => Ok(()),
        }
    }

    pub(super) async fn unpublished_gifts(
        &self,
        room: &RoomId,
        min_age_ms: i64,
    ) -> Result<Vec<GiftOrder>> {
        let before = now_ms().saturating_sub(min_age_ms);
        let mut marks: Vec<(Uuid, Option<CqlTimestamp>)> = self
            .scan(&self.st.unpublished_list, (room.as_str(),))
            .await?;
        marks.retain(|(_, at)| at.map_or(0, |t| t.0) <= before);
        marks.sort_by_key(|(_, at)| at.map_or(0, |t| t.0));
        let mut out = Vec::with_capacity(marks.len());
        for (id, _) in marks {
            if let Some(rec) = self.read_saga(id).await? {
                out.push(rec.order);
            }
        }
        Ok(out)
    }

    pub(super) async fn take_unpublished(&self, room: &RoomId, gift_id: Uuid) -> Result<bool> {
        // An unknown outcome is an error, and the caller leaves the record for a later sweep. If
        // the delete did land, nobody publishes that event: lost, never shown twice.
        self.lwt(&self.st.unpublished_take, (room.as_str(), gift_id))
            .await
            .map_err(|()| unavailable("take of an unpublished gift: outcome unknown"))
    }

    pub(super) async fn leaderboard(
        &self,
        room: &RoomId,
        board: Board,
        first_day: i64,
        limit: usize,
    ) -> Result<Vec<(UserId, i64)>> {
        let days: Vec<(i32,)> = self
            .scan(&self.st.days_since, (room.as_str(), cql_day(first_day)))
            .await?;
        let mut totals: HashMap<String, i64> = HashMap::new();
        for (day,) in days {
            let facts: Vec<(String, String, i64)> = self
                .scan(&self.st.facts_of_day, (room.as_str(), day))
                .await?;
            for (sender, receiver, amount) in facts {
                let who = match board {
                    Board::Senders => sender,
                    Board::Receivers => receiver,
                };
                *totals.entry(who).or_default() += amount;
            }
        }
        let mut ranked: Vec<(String, i64)> = totals.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ranked.truncate(limit);
        Ok(ranked
            .into_iter()
            .map(|(u, v)| (UserId::new(u), v))
            .collect())
    }

    /// A quorum read of one wallet head: the cluster answers at the consistency writes need.
    pub(super) async fn check_writable(&self) -> Result<()> {
        self.read_head("-readyz-").await.map(drop)
    }

    pub(super) async fn audit_totals(&self) -> Result<Totals> {
        let mut totals = Totals::default();
        let wallets: Vec<WalletScanRow> = self.scan(&self.st.scan_wallets, ()).await?;
        let mut heads: HashMap<String, i64> = HashMap::new();
        for (account, balance, kind, amount) in wallets {
            heads.insert(account, balance.unwrap_or(0));
            if kind.as_deref() == Some(EntryKind::Grant.as_str()) {
                totals.granted += amount.unwrap_or(0);
            }
        }
        for balance in heads.values() {
            totals.coins += balance;
            if *balance < 0 {
                totals.negative_accounts += 1;
            }
        }
        let earnings: Vec<(Option<i64>,)> = self.scan(&self.st.scan_earnings, ()).await?;
        totals.earnings = earnings.iter().filter_map(|r| r.0).sum();
        let house: Vec<(Option<i64>, Option<i64>)> = self.scan(&self.st.scan_house, ()).await?;
        for (platform, lucky) in house {
            totals.platform_revenue += platform.unwrap_or(0);
            totals.lucky_paid += lucky.unwrap_or(0);
        }
        Ok(totals)
    }
}

/// `order_json, state, fence, reason, balance_after, updated_at` of one saga row.
type SagaRow = (
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<i64>,
    Option<CqlTimestamp>,
);

/// `account_id, balance, kind, amount` of one wallet row (statics repeated on every row).
type WalletScanRow = (String, Option<i64>, Option<String>, Option<i64>);

/// Values of the wallet batch: the head CAS, then the entry row.
type WalletChange<'a> = (
    (i64, i64, &'a str, Option<i64>),
    (&'a str, Uuid, &'a str, i64, i64, i64, &'a str, CqlTimestamp),
);

fn held(
    claim: EntryKind,
    observed: Observation,
    balance_after: Option<i64>,
    ours: bool,
) -> Result<Applied> {
    match decide(claim, observed) {
        Decision::Holds(kind) => Ok(Applied::Held {
            kind,
            balance_after,
            ours,
        }),
        Decision::Corrupt(kind) => Err(StorageError::Corrupt(format!(
            "key holds a {kind:?}, wanted {claim:?}"
        ))),
        other => Err(StorageError::Corrupt(format!(
            "unexpected decision {other:?} for a found entry"
        ))),
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
        other => Err(StorageError::Corrupt(format!(
            "LWT result without [applied]: {other:?}"
        ))),
    }
}

async fn prepare_all(session: &Session, ks: &str) -> Result<Statements> {
    let lwt_policy = Arc::new(FallthroughRetryPolicy::new());
    // Conditional writes: quorum for the commit, LOCAL_SERIAL for Paxos; no driver retries (the
    // read-back loop above decides), so an unknown outcome is never blindly repeated.
    let lwt = |mut p: PreparedStatement| {
        p.set_consistency(Consistency::LocalQuorum);
        p.set_serial_consistency(Some(SerialConsistency::LocalSerial));
        p.set_retry_policy(Some(lwt_policy.clone()));
        p
    };
    // Linearizable reads: they see in-flight Paxos rounds.
    let serial = |mut p: PreparedStatement| {
        p.set_consistency(Consistency::LocalSerial);
        p
    };
    // Plain idempotent writes and reads of append-only facts.
    let plain = |mut p: PreparedStatement| {
        p.set_consistency(Consistency::LocalQuorum);
        p.set_is_idempotent(true);
        p
    };
    let scan = |mut p: PreparedStatement| {
        p.set_consistency(Consistency::LocalQuorum);
        p.set_is_idempotent(true);
        p.set_page_size(SCAN_PAGE_ROWS);
        p
    };
    let prep = |cql: String| async move { session.prepare(cql).await.map_err(backend) };

    let head_cas = lwt(prep(format!(
        "UPDATE {ks}.wallet SET balance = ?, version = ? WHERE account_id = ? IF version = ?"
    ))
    .await?);
    let entry_insert = prep(format!(
        "INSERT INTO {ks}.wallet (account_id, entry_id, kind, amount, balance_after, seq, ref, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    ))
    .await?;
    let mut wallet_change = Batch::new(BatchType::Logged);
    wallet_change.append_statement(head_cas);
    wallet_change.append_statement(entry_insert);
    wallet_change.set_consistency(Consistency::LocalQuorum);
    wallet_change.set_serial_consistency(Some(SerialConsistency::LocalSerial));
    wallet_change.set_retry_policy(Some(lwt_policy.clone()));

    Ok(Statements {
        owner_insert: lwt(prep(format!(
            "INSERT INTO {ks}.room_owner (room_id, fence, owner, since) VALUES (?, ?, ?, ?) IF NOT EXISTS"
        ))
        .await?),
        owner_update: lwt(prep(format!(
            "UPDATE {ks}.room_owner SET fence = ?, owner = ?, since = ? WHERE room_id = ? IF fence < ?"
        ))
        .await?),
        owner_read: serial(
            prep(format!("SELECT fence, owner FROM {ks}.room_owner WHERE room_id = ?")).await?,
        ),
        wallet_head: serial(
            prep(format!(
                "SELECT balance, version FROM {ks}.wallet WHERE account_id = ? LIMIT 1"
            ))
            .await?,
        ),
        wallet_entry: serial(
            prep(format!(
                "SELECT kind, balance_after FROM {ks}.wallet WHERE account_id = ? AND entry_id = ?"
            ))
            .await?,
        ),
        wallet_change,
        saga_insert: lwt(prep(format!(
            "INSERT INTO {ks}.gift_saga (gift_id, room_id, order_json, state, fence, updated_at)
             VALUES (?, ?, ?, 'PENDING', ?, ?) IF NOT EXISTS"
        ))
        .await?),
        saga_read: serial(
            prep(format!(
                "SELECT order_json, state, fence, reason, balance_after, updated_at
                 FROM {ks}.gift_saga WHERE gift_id = ?"
            ))
            .await?,
        ),
        saga_move: lwt(prep(format!(
            "UPDATE {ks}.gift_saga SET state = ?, fence = ?, reason = ?, balance_after = ?, updated_at = ?
             WHERE gift_id = ? IF state = ? AND fence <= ?"
        ))
        .await?),
        saga_touch: lwt(prep(format!(
            "UPDATE {ks}.gift_saga SET fence = ? WHERE gift_id = ? IF fence <= ?"
        ))
        .await?),
        open_add: plain(
            prep(format!(
                "INSERT INTO {ks}.room_open_sagas (room_id, gift_id) VALUES (?, ?)"
            ))
            .await?,
        ),
        open_del: plain(
            prep(format!(
                "DELETE FROM {ks}.room_open_sagas WHERE room_id = ? AND gift_id = ?"
            ))
            .await?,
        ),
        open_list: scan(
            prep(format!(
                "SELECT gift_id FROM {ks}.room_open_sagas WHERE room_id = ?"
            ))
            .await?,
        ),
        open_rooms: scan(prep(format!("SELECT DISTINCT room_id FROM {ks}.room_open_sagas")).await?),
        unpublished_add: plain(
            prep(format!(
                "INSERT INTO {ks}.room_unpublished_gifts (room_id, gift_id, marked_at) VALUES (?, ?, ?)"
            ))
            .await?,
        ),
        unpublished_list: scan(
            prep(format!(
                "SELECT gift_id, marked_at FROM {ks}.room_unpublished_gifts WHERE room_id = ?"
            ))
            .await?,
        ),
        unpublished_take: lwt(prep(format!(
            "DELETE FROM {ks}.room_unpublished_gifts WHERE room_id = ? AND gift_id = ? IF EXISTS"
        ))
        .await?),
        unpublished_rooms: scan(
            prep(format!(
                "SELECT DISTINCT room_id FROM {ks}.room_unpublished_gifts"
            ))
            .await?,
        ),
        earn_add: plain(
            prep(format!(
                "INSERT INTO {ks}.earnings_entries (receiver_id, gift_id, amount, room_id)
                 VALUES (?, ?, ?, ?)"
            ))
            .await?,
        ),
        earn_sum: plain(
            prep(format!(
                "SELECT SUM(amount) FROM {ks}.earnings_entries WHERE receiver_id = ?"
            ))
            .await?,
        ),
        fact_add: plain(
            prep(format!(
                "INSERT INTO {ks}.settled_gifts
                   (room_id, day, gift_id, receiver_id, sender_id, amount, earnings)
                 VALUES (?, ?, ?, ?, ?, ?, ?)"
            ))
            .await?,
        ),
        facts_of_day: scan(
            prep(format!(
                "SELECT sender_id, receiver_id, amount FROM {ks}.settled_gifts
                 WHERE room_id = ? AND day = ?"
            ))
            .await?,
        ),
        day_add: plain(
            prep(format!(
                "INSERT INTO {ks}.room_days (room_id, day) VALUES (?, ?)"
            ))
            .await?,
        ),
        days_since: scan(
            prep(format!(
                "SELECT day FROM {ks}.room_days WHERE room_id = ? AND day >= ?"
            ))
            .await?,
        ),
        house_add: plain(
            prep(format!(
                "INSERT INTO {ks}.settled_house (gift_id, platform, lucky) VALUES (?, ?, ?)"
            ))
            .await?,
        ),
        scan_wallets: scan(
            prep(format!(
                "SELECT account_id, balance, kind, amount FROM {ks}.wallet"
            ))
            .await?,
        ),
        scan_earnings: scan(prep(format!("SELECT amount FROM {ks}.earnings_entries")).await?),
        scan_house: scan(prep(format!("SELECT platform, lucky FROM {ks}.settled_house")).await?),
    })
}
