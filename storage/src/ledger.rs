//! The money ledger: coins, gift sagas, earnings and leaderboards, on SQLite, PostgreSQL or
//! Scylla.
//!
//! # Accounts
//! Every user has two balances:
//! - **coins**: what the user can spend. Credited by [`Ledger::grant`] (admin top-up) and by lucky
//!   prizes; debited by gifts. Never negative.
//! - **earnings**: what the user received as a gift recipient (their share, `share_bp` basis
//!   points of the gift's per-recipient amount, rounded down). Kept apart from coins: earnings are
//!   withdrawn or converted elsewhere, they are never spent on gifts.
//!
//! The platform is one house account with two totals: `platform_revenue` (for every settled gift,
//! the debit minus what its recipients earned) and `lucky_paid` (lucky prizes credited to senders'
//! coins). Prizes are paid by the house, so its net (`revenue - lucky_paid`) may go negative for a
//! while: that is the house's risk, and it keeps the books closed. Conservation, checked by
//! [`Totals::is_conserved`]: `coins + earnings + platform_revenue - lucky_paid == granted`.
//!
//! # Gift saga
//! `PENDING → DEBITED → SETTLED`, or `PENDING → VOIDED`. The debit and the void claim write the
//! same idempotency key (the gift id) in the sender's wallet, so a gift is never both debited and
//! voided (on PostgreSQL and Scylla a wallet entry; on SQLite, where the claim and the saga's move commit in one
//! transaction, the saga row itself: see [`sqlite`]). Every saga transition carries the room's fencing token: a token lower than the room's
//! installed high-water mark, or than the saga's own, fails with [`StorageError::Fenced`] and
//! leaves the saga as it was. Recovery ([`Ledger::recover`]) runs only on the room's owner; a
//! non-owner never moves a saga.
//!
//! # Layout
//! - `app_rank`: app-wide leaderboards and each user's lifetime spend (buckets per day, week
//!   and all time, added to with every settlement).
//! - `ids`, `calendar`, `order`, `outcome`, `report`: the contract's types and pure functions
//!   (gift ids, UTC days and weeks, the gift order and its arithmetic, what each call answers,
//!   leaderboards and totals), all re-exported here.
//! - `movement`: a user's statement (the movement written with every booking).
//! - `transfer`: coin sellers' transfers.
//! - `payment`: top-ups from a payment provider, refunds and debts.
//! - `settlement`: host settlements of gift earnings.
//! - `guard`: guards bought of hosts, for a plan's duration.
//! - [`decision`]: the pure decision tables (claim outcome, recovery action).
//! - [`saga`]: the engine-independent saga driver and owner-only recovery.
//! - [`sqlite`]: the embedded engine (one group-committing writer thread).
//! - [`postgres`]: the engine for clusters over several machines (one transaction per step,
//!   constraints and row locks in the database).
//! - [`scylla`]: the production engine (LWT on wallets and sagas, append-only facts elsewhere).

mod app_rank;
mod calendar;
pub mod decision;
mod guard;
mod ids;
mod movement;
mod order;
mod outcome;
mod payment;
pub mod postgres;
mod report;
pub mod saga;
pub mod scylla;
mod settlement;
pub mod sqlite;
mod transfer;

use std::path::Path;

use protocol::{RoomId, UserId};
use uuid::Uuid;

pub use self::app_rank::PRUNE_BATCH;

/// Histogram: seconds from a write group's first statement to its answers, which every write
/// of the group waited at least. SQLite: a group commit, any WAL restart after it and the sync
/// that made it durable; PostgreSQL: a gift batch's transaction. (The dashboard's "ledger commit
/// p99".)
pub const METRIC_GROUP_COMMIT_SECONDS: &str = "chorus_ledger_group_commit_seconds";
pub use self::calendar::{MS_PER_DAY, day_of, now_ms, week_start};
pub use self::guard::{
    GUARD_ID_NAMESPACE, Guard, GuardOrder, GuardOutcome, MAX_GUARD_REQ_ID_BYTES, MAX_GUARDS_LISTED,
    guard_id,
};
pub use self::ids::{
    GIFT_ID_NAMESPACE, GRANT_ID_NAMESPACE, GiftIds, LUCKY_ID_NAMESPACE, gift_id, gift_ids,
    grant_entry_id, legacy_gift_id, lucky_entry_id,
};
pub use self::movement::{
    Account, DEFAULT_HISTORY_LIMIT, HistoryPage, HistoryQuery, MAX_HISTORY_LIMIT, Movement,
    MovementKind, NewMovement,
};
pub use self::order::{BASIS_POINTS_PER_WHOLE, GiftOrder, LuckyPrize, OrderError};
pub use self::outcome::{
    BeginOutcome, DebitOutcome, EntryKind, FenceInstall, GiftOutcome, GiftResult, GrantOutcome,
    RecoveryOutcome, SagaRecord, SagaState, SettleOutcome, VoidOutcome, VoidReason,
};
pub use self::payment::{
    PAYMENT_ID_NAMESPACE, Payment, RefundOutcome, TopUpOutcome, payment_entry_id,
};
pub use self::postgres::PostgresLedger;
pub use self::report::{Board, Period, Totals};
pub use self::scylla::ScyllaLedger;
pub use self::settlement::{
    SETTLEMENT_ID_NAMESPACE, SettlementOrder, SettlementOutcome, settlement_key,
};
pub use self::sqlite::SqliteLedger;
pub use self::transfer::{TRANSFER_ID_NAMESPACE, TransferOrder, TransferOutcome, transfer_id};
use crate::{Result, StorageError};

/// What every [`Ledger::rocket_reward`] and [`Ledger::reward`] key starts with in the ledger;
/// admin grant keys are printable ASCII without spaces, so none starts with it.
pub const REWARD_KEY_PREFIX: &str = "reward ";

/// Users whose standing [`Ledger::standings`] reads at once on an engine without a batched
/// read (PostgreSQL, Scylla): a burst of connects takes that many of the pool's connections.
pub const STANDING_READS_IN_FLIGHT: usize = 8;

/// The ledger: a cheap-to-clone handle on one engine.
#[derive(Clone)]
pub enum Ledger {
    /// Embedded engine.
    Sqlite(SqliteLedger),
    /// PostgreSQL, for clusters over several machines.
    Postgres(PostgresLedger),
    /// Production engine.
    Scylla(ScyllaLedger),
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sqlite(_) => f.write_str("Ledger::Sqlite"),
            Self::Postgres(_) => f.write_str("Ledger::Postgres"),
            Self::Scylla(_) => f.write_str("Ledger::Scylla"),
        }
    }
}

/// Calls the engine's method. PostgreSQL's and Scylla's futures are boxed: a driver query's state is kilobytes,
/// and inline it would size every `Ledger` future, SQLite's included (`send_gift`, which holds
/// the Scylla saga's steps, was 5,136 B, and the room actor boxes one per gift: a large malloc
/// on glibc's slow path). A Scylla call pays one small allocation next to a network round trip.
macro_rules! dispatch {
    ($self:ident . $method:ident ( $($arg:expr),* )) => {
        match $self {
            Ledger::Sqlite(l) => l.$method($($arg),*).await,
            Ledger::Postgres(l) => Box::pin(l.$method($($arg),*)).await,
            Ledger::Scylla(l) => Box::pin(l.$method($($arg),*)).await,
        }
    };
}

impl Ledger {
    /// Opens the engine a URL names: `sqlite://<path>`, `sqlite` or empty (file
    /// `<data_dir>/ledger.db`), `postgres://user:pass@host:5432/db` (or `postgresql://`), or
    /// `scylla://host:9042,host2:9042[/keyspace]`.
    ///
    /// # Errors
    /// `Invalid` for an unknown scheme; the engine's error if it cannot open or prepare.
    pub async fn open(url: &str, data_dir: &Path) -> Result<Self> {
        if url.is_empty() || url == "sqlite" || url == "sqlite://" {
            let path = data_dir.join("ledger.db");
            return Ok(Self::Sqlite(SqliteLedger::open(&path).await?));
        }
        if let Some(path) = url.strip_prefix("sqlite://") {
            return Ok(Self::Sqlite(SqliteLedger::open(Path::new(path)).await?));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(PostgresLedger::connect(url).await?));
        }
        if let Some(rest) = url.strip_prefix("scylla://") {
            let (hosts, keyspace) = match rest.split_once('/') {
                Some((h, ks)) if !ks.is_empty() => (h, ks),
                Some((h, _)) => (h, scylla::DEFAULT_KEYSPACE),
                None => (rest, scylla::DEFAULT_KEYSPACE),
            };
            let nodes: Vec<String> = hosts
                .split(',')
                .filter(|h| !h.is_empty())
                .map(str::to_owned)
                .collect();
            return Ok(Self::Scylla(ScyllaLedger::connect(&nodes, keyspace).await?));
        }
        Err(StorageError::invalid_msg(format!(
            "unknown ledger url {url:?}"
        )))
    }

    /// Admin top-up, idempotent by `key` (per user): the same key credits once.
    ///
    /// # Errors
    /// Engine errors; `Invalid` for a non-positive amount.
    pub async fn grant(&self, user: &UserId, amount: i64, key: &str) -> Result<GrantOutcome> {
        if amount <= 0 {
            return Err(StorageError::invalid_msg("grant amount must be positive"));
        }
        dispatch!(self.grant_as(user, amount, key, MovementKind::Grant))
    }

    /// A platform reward (sign-up, daily check-in), credited once per user and `period` key:
    /// a grant under a key no admin grant can take (it holds a space), counted in `granted`,
    /// with a `reward` line in the statement.
    ///
    /// # Errors
    /// Engine errors; `Invalid` for a non-positive amount.
    pub async fn reward(&self, user: &UserId, amount: i64, period: &str) -> Result<GrantOutcome> {
        if amount <= 0 {
            return Err(StorageError::invalid_msg("reward amount must be positive"));
        }
        let key = format!("reward {period}");
        dispatch!(self.grant_as(user, amount, &key, MovementKind::Reward))
    }

    /// A room rocket's reward from the platform, idempotent by `key` (`rocket:<room>:<launch>:
    /// <user>`): the same key credits once, on every engine, with a `rocket_reward` line in the
    /// statement. Reward keys live apart from admin grant keys (an admin key can never take a
    /// reward's place).
    ///
    /// # Errors
    /// As [`Ledger::grant`].
    pub async fn rocket_reward(
        &self,
        user: &UserId,
        amount: i64,
        key: &str,
    ) -> Result<GrantOutcome> {
        if amount <= 0 {
            return Err(StorageError::invalid_msg("reward amount must be positive"));
        }
        let key = format!("{REWARD_KEY_PREFIX}{key}");
        dispatch!(self.grant_as(user, amount, &key, MovementKind::RocketReward))
    }

    /// The user's coins (0 for an unknown user).
    ///
    /// # Errors
    /// Engine errors.
    pub async fn balance(&self, user: &UserId) -> Result<i64> {
        dispatch!(self.balance(user))
    }

    /// The user's earnings as a gift recipient (0 for an unknown user).
    ///
    /// # Errors
    /// Engine errors.
    pub async fn earnings(&self, user: &UserId) -> Result<i64> {
        dispatch!(self.earnings(user))
    }

    /// Makes `fence` the room's durable high-water mark, unless one at least as high is
    /// installed (the same fence by the same owner is accepted again).
    ///
    /// # Errors
    /// Engine errors.
    pub async fn install_fence(
        &self,
        room: &RoomId,
        fence: u64,
        owner: &str,
    ) -> Result<FenceInstall> {
        dispatch!(self.install_fence(room, fence, owner))
    }

    /// Books a gift end to end: debit the sender, credit the recipients and the house.
    /// A retry with the same gift id debits nothing and returns `Duplicate` with the first result.
    ///
    /// # Errors
    /// `Fenced` if `fence` is below the room's or the saga's; `Invalid` for an invalid order;
    /// retryable engine errors (`Unavailable`, `Conflict`): retry with the same order.
    pub async fn send_gift(&self, order: &GiftOrder, fence: u64) -> Result<GiftOutcome> {
        order.checked()?;
        match self {
            Self::Sqlite(l) => l.send_gift(order, fence).await,
            Self::Postgres(l) => Box::pin(l.send_gift(order, fence)).await,
            Self::Scylla(_) => saga::drive(self, order, fence).await,
        }
    }

    /// Saga step 0: records the order as PENDING (or finds the existing saga).
    ///
    /// # Errors
    /// `Fenced`; engine errors.
    pub async fn begin(&self, order: &GiftOrder, fence: u64) -> Result<BeginOutcome> {
        order.checked()?;
        dispatch!(self.begin(order, fence))
    }

    /// Saga step 1: debits the sender (or writes the void claim on insufficient funds) and marks
    /// the saga. Idempotent: a saga already debited is not debited again.
    ///
    /// # Errors
    /// `Fenced`; engine errors.
    pub async fn debit(&self, order: &GiftOrder, fence: u64) -> Result<DebitOutcome> {
        dispatch!(self.debit(order, fence))
    }

    /// Saga step 2: credits recipients, the house and the prize; marks SETTLED. Idempotent.
    ///
    /// # Errors
    /// `Fenced`; engine errors.
    pub async fn settle(&self, order: &GiftOrder, fence: u64) -> Result<SettleOutcome> {
        dispatch!(self.settle(order, fence))
    }

    /// The void path: writes the void claim under the debit's key, then marks VOIDED. If the
    /// debit holds the key, returns `Debited` and changes nothing: the caller rolls forward.
    ///
    /// # Errors
    /// `Fenced`; engine errors.
    pub async fn void(
        &self,
        order: &GiftOrder,
        fence: u64,
        reason: VoidReason,
    ) -> Result<VoidOutcome> {
        dispatch!(self.void(order, fence, reason))
    }

    /// Raises the saga's fence to `fence` (fencing out earlier owners) and returns it.
    ///
    /// # Errors
    /// `Fenced`; engine errors.
    pub async fn touch(&self, order: &GiftOrder, fence: u64) -> Result<Option<SagaRecord>> {
        dispatch!(self.touch(order, fence))
    }

    /// Whether sagas booked before gift ids of UUIDv7 requests became time-ordered may be kept
    /// here under their old ids: if so, a gift whose [`legacy_gift_id`] is `Some` is looked up
    /// under it before it is booked ([`legacy_saga`](Self::legacy_saga)).
    pub fn may_hold_legacy_gift_ids(&self) -> bool {
        match self {
            Ledger::Sqlite(l) => l.may_hold_legacy_gift_ids(),
            Ledger::Postgres(l) => l.may_hold_legacy_gift_ids(),
            Ledger::Scylla(l) => l.may_hold_legacy_gift_ids(),
        }
    }

    /// The saga a request booked before gift ids of UUIDv7 requests became time-ordered, kept
    /// under its `legacy` id ([`legacy_gift_id`]), if this ledger may hold one and does. A
    /// retry across that upgrade goes on with this saga's order (the one booked), not a new one.
    ///
    /// # Errors
    /// Engine errors.
    pub async fn legacy_saga(&self, legacy: Option<Uuid>) -> Result<Option<SagaRecord>> {
        match legacy {
            Some(id) if self.may_hold_legacy_gift_ids() => self.saga(id).await,
            _ => Ok(None),
        }
    }

    /// The saga of a gift id, if any.
    ///
    /// # Errors
    /// Engine errors.
    pub async fn saga(&self, gift_id: Uuid) -> Result<Option<SagaRecord>> {
        dispatch!(self.saga(gift_id))
    }

    /// The kind of the sender's wallet entry under the gift id: `Debit`, `Void` or none
    /// (a linearizable read on Scylla; a committed row on PostgreSQL; on SQLite the claim is the saga row's state, written in
    /// the same transaction as the debit or the void).
    ///
    /// # Errors
    /// Engine errors.
    pub async fn wallet_entry(&self, sender: &UserId, gift_id: Uuid) -> Result<Option<EntryKind>> {
        dispatch!(self.wallet_entry(sender, gift_id))
    }

    /// The room's sagas still PENDING or DEBITED whose last move is at least `min_age_ms` old.
    ///
    /// # Errors
    /// Engine errors.
    pub async fn pending_sagas(&self, room: &RoomId, min_age_ms: i64) -> Result<Vec<SagaRecord>> {
        dispatch!(self.pending_sagas(room, min_age_ms))
    }

    /// Rooms with a saga still PENDING or DEBITED whose last move is at least `min_age_ms` old
    /// (where a crashed owner left money half-moved), or with a settled gift whose event is owed
    /// and was recorded at least that long ago. A background sweep loads those rooms, so their
    /// owner's recovery runs even if nobody comes back to them.
    ///
    /// # Errors
    /// Engine errors.
    pub async fn rooms_with_open_sagas(&self, min_age_ms: i64) -> Result<Vec<RoomId>> {
        dispatch!(self.rooms_with_open_sagas(min_age_ms))
    }

    /// Records that the room owes the `gift` event of a settled gift: its runtime settled it
    /// but could not publish it (the lease could not be proven, the history write failed, or
    /// the runtime stopped first). The room's next owner publishes it
    /// ([`unpublished_gifts`](Self::unpublished_gifts)). A gift that is not settled, or not
    /// known, is not recorded; recording one twice is one record.
    ///
    /// # Errors
    /// Engine errors.
    pub async fn mark_unpublished(&self, gift_id: Uuid) -> Result<()> {
        dispatch!(self.mark_unpublished(gift_id))
    }

    /// The room's settled gifts whose event is owed ([`mark_unpublished`](Self::mark_unpublished)),
    /// recorded at least `min_age_ms` ago, oldest first.
    ///
    /// # Errors
    /// Engine errors.
    pub async fn unpublished_gifts(
        &self,
        room: &RoomId,
        min_age_ms: i64,
    ) -> Result<Vec<GiftOrder>> {
        dispatch!(self.unpublished_gifts(room, min_age_ms))
    }

    /// Takes the debt of a gift's event: `true` for exactly one caller, who then publishes it
    /// (and records it again if it cannot).
    ///
    /// # Errors
    /// Engine errors (whether it was taken is then unknown: it may stay recorded).
    pub async fn take_unpublished(&self, room: &RoomId, gift_id: Uuid) -> Result<bool> {
        dispatch!(self.take_unpublished(room, gift_id))
    }

    /// Resolves one saga. On the owner: a debited saga is settled, a pending one with no debit
    /// is voided through the void claim. A non-owner writes nothing and returns `Released`.
    ///
    /// # Errors
    /// `Fenced` (the caller is no longer the owner: stop); retryable engine errors.
    pub async fn recover(
        &self,
        order: &GiftOrder,
        fence: u64,
        is_owner: bool,
    ) -> Result<RecoveryOutcome> {
        saga::recover(self, order, fence, is_owner).await
    }

    /// A room's leaderboard from settled gifts, best first (ties by user id), at most `limit`.
    ///
    /// # Errors
    /// Engine errors.
    pub async fn leaderboard(
        &self,
        room: &RoomId,
        board: Board,
        period: Period,
        limit: usize,
    ) -> Result<Vec<(UserId, i64)>> {
        let today = day_of(now_ms());
        dispatch!(self.leaderboard(room, board, period.first_day(today), limit))
    }

    /// One page of the user's statement, newest first, from just after
    /// `query.cursor` (an opaque position, not an offset: a page costs the same however many
    /// movements the user has, and movements booked meanwhile never shift it).
    ///
    /// # Errors
    /// `Invalid` for a cursor this engine did not make; engine errors.
    pub async fn history(&self, user: &UserId, query: &HistoryQuery) -> Result<HistoryPage> {
        dispatch!(self.history(user, query))
    }

    /// Marks (`true`) or unmarks a user as a coin seller.
    ///
    /// # Errors
    /// Engine errors.
    pub async fn set_seller(&self, user: &UserId, seller: bool) -> Result<()> {
        dispatch!(self.set_seller(user, seller))
    }

    /// Whether the user is a coin seller.
    ///
    /// # Errors
    /// Engine errors.
    pub async fn is_seller(&self, user: &UserId) -> Result<bool> {
        dispatch!(self.is_seller(user))
    }

    /// Moves coins from a seller to a user: both sides and both statement lines in one
    /// booking, idempotent by `(from, req_id)`, never overdrawing the seller.
    ///
    /// # Errors
    /// `Invalid` for a bad order; engine errors (retry with the same order).
    pub async fn transfer(&self, order: &TransferOrder) -> Result<TransferOutcome> {
        order.checked()?;
        dispatch!(self.transfer(order))
    }

    /// Credits a paid product's coins once per payment id (a debt is covered first).
    ///
    /// # Errors
    /// `Invalid` for a non-positive amount; engine errors (retry with the same payment).
    pub async fn top_up(&self, payment: &Payment) -> Result<TopUpOutcome> {
        if payment.coins <= 0 {
            return Err(StorageError::invalid_msg("top-up coins must be positive"));
        }
        dispatch!(self.top_up(payment))
    }

    /// Refunds a booked top-up once: its coins leave the user's coins, and what they no longer
    /// cover becomes the user's debt.
    ///
    /// # Errors
    /// Engine errors (retry with the same payment id).
    pub async fn refund(&self, payment_id: &str) -> Result<RefundOutcome> {
        dispatch!(self.refund(payment_id))
    }

    /// Settles part of a host's earnings for payout, once per settlement id, only if the
    /// earnings cover it.
    ///
    /// # Errors
    /// `Invalid` for a non-positive amount or a negative payout; engine errors (retry with the
    /// same id).
    pub async fn settle_earnings(&self, order: &SettlementOrder) -> Result<SettlementOutcome> {
        if order.amount <= 0 || order.payout < 0 {
            return Err(StorageError::invalid_msg(
                "a settlement needs a positive amount and a payout of at least 0",
            ));
        }
        dispatch!(self.settle_earnings(order))
    }

    /// Buys a guard of `order.host` for `order.buyer`: the price leaves the buyer's coins, the
    /// host's share goes to their earnings and the rest to the platform, and the guard's
    /// expiry moves to the later of now and its current end plus the plan's duration, all
    /// once per `(buyer, req_id)`. Refused with no change when the buyer owes a debt or their
    /// coins do not cover the price.
    ///
    /// # Errors
    /// `Invalid` for a bad order ([`GuardOrder::checked`]); engine errors (retry with the same
    /// order).
    pub async fn buy_guard(&self, order: &GuardOrder) -> Result<GuardOutcome> {
        order.checked()?;
        dispatch!(self.buy_guard(order))
    }

    /// The host's guards in force at `now_ms` (latest expiry first), at most
    /// [`MAX_GUARDS_LISTED`].
    ///
    /// # Errors
    /// Engine errors.
    pub async fn guards_of_host(&self, host: &UserId, now_ms: i64) -> Result<Vec<Guard>> {
        dispatch!(self.guards_of_host(host, now_ms))
    }

    /// The guards `buyer` holds in force at `now_ms` (latest expiry first), at most
    /// [`MAX_GUARDS_LISTED`].
    ///
    /// # Errors
    /// Engine errors.
    pub async fn guards_of_buyer(&self, buyer: &UserId, now_ms: i64) -> Result<Vec<Guard>> {
        dispatch!(self.guards_of_buyer(buyer, now_ms))
    }

    /// A user's standing: [`Self::guards_of_buyer`] and [`Self::lifetime_spent`] together
    /// (on SQLite one read).
    ///
    /// # Errors
    /// Engine errors.
    pub async fn standing(&self, user: &UserId, now_ms: i64) -> Result<(Vec<Guard>, i64)> {
        let mut one = self.standings(std::slice::from_ref(user), now_ms).await?;
        Ok(one.pop().unwrap_or_default())
    }

    /// The standing ([`Self::standing`]) of each of `users`, in their order: on SQLite one
    /// read for all of them, elsewhere [`STANDING_READS_IN_FLIGHT`] users' reads at a time.
    ///
    /// # Errors
    /// Engine errors (the first one: no partial answer).
    pub async fn standings(&self, users: &[UserId], now_ms: i64) -> Result<Vec<(Vec<Guard>, i64)>> {
        if let Self::Sqlite(l) = self {
            return l.standings(users, now_ms).await;
        }
        let mut read = Vec::with_capacity(users.len());
        for chunk in users.chunks(STANDING_READS_IN_FLIGHT) {
            // Collected first: the future then holds no closure over a borrowed id.
            let reads: Vec<_> = chunk
                .iter()
                .map(|u| self.standing_apart(u, now_ms))
                .collect();
            read.extend(futures_util::future::try_join_all(reads).await?);
        }
        Ok(read)
    }

    /// One user's standing on an engine without a batched read: its two reads at once.
    async fn standing_apart(&self, user: &UserId, now_ms: i64) -> Result<(Vec<Guard>, i64)> {
        tokio::try_join!(
            self.guards_of_buyer(user, now_ms),
            self.lifetime_spent(user)
        )
    }

    /// The user's debt (0 for none).
    ///
    /// # Errors
    /// Engine errors.
    pub async fn debt(&self, user: &UserId) -> Result<i64> {
        dispatch!(self.debt(user))
    }

    /// Ledger-wide sums (a full scan on Scylla: for tests and audits, not the hot path).
    ///
    /// # Errors
    /// Engine errors.
    pub async fn audit_totals(&self) -> Result<Totals> {
        dispatch!(self.audit_totals())
    }

    /// Whether the ledger takes writes now (`/readyz`).
    ///
    /// # Errors
    /// The engine's error when it does not.
    pub async fn check_writable(&self) -> Result<()> {
        dispatch!(self.check_writable())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a gift's ledger call holds while it waits stays small whatever engines are compiled
    /// in: the room actor boxes it per gift, and glibc serves blocks above 1 KiB from its slow
    /// path. Scylla's kilobytes of driver state are boxed inside the dispatch.
    #[tokio::test]
    async fn a_gift_call_waits_in_less_than_a_kibibyte() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open("sqlite", dir.path()).await.unwrap();
        let o = order::sample(10, 1, 1, 1000);
        let call = ledger.send_gift(&o, 1);
        let size = std::mem::size_of_val(&call);
        drop(call);
        assert!(size <= 1024, "Ledger::send_gift's future is {size} bytes");
    }
}
