//! The money ledger: coins, gift sagas, earnings and leaderboards, on SQLite or Scylla.
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
//! voided (on Scylla a wallet entry; on SQLite, where the claim and the saga's move commit in one
//! transaction, the saga row itself: see [`sqlite`]). Every saga transition carries the room's fencing token: a token lower than the room's
//! installed high-water mark, or than the saga's own, fails with [`StorageError::Fenced`] and
//! leaves the saga as it was. Recovery ([`Ledger::recover`]) runs only on the room's owner; a
//! non-owner never moves a saga.
//!
//! # Layout
//! - [`decision`]: the pure decision tables (claim outcome, recovery action).
//! - [`saga`]: the engine-independent saga driver and owner-only recovery.
//! - [`sqlite`]: the embedded engine (one group-committing writer thread).
//! - [`scylla`]: the production engine (LWT on wallets and sagas, append-only facts elsewhere).

pub mod decision;
pub mod saga;
pub mod scylla;
pub mod sqlite;

use std::path::Path;

use protocol::{RoomId, UserId};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use self::scylla::ScyllaLedger;
pub use self::sqlite::SqliteLedger;
use crate::{Result, StorageError};

/// UUIDv5 namespace of gift ids: `v5(ns, sender ‖ 0x00 ‖ req_id)`, all of a gift id or (for a
/// UUIDv7 `req_id`) its last 80 bits ([`gift_id`]). Fixed forever: changing it would let a
/// client retry debit twice.
pub const GIFT_ID_NAMESPACE: Uuid = Uuid::from_u128(0x6c1e_0d55_8f0b_4c2e_9a57_3b7e_1f00_91a1);
/// UUIDv5 namespace of top-up entry ids: `v5(ns, key)`.
pub const GRANT_ID_NAMESPACE: Uuid = Uuid::from_u128(0x0b9a_52c4_77d1_4f86_b1e0_5d2a_c4f3_6e02);
/// UUIDv5 namespace of lucky-prize entry ids: `v5(ns, gift_id)` (one prize per gift).
pub const LUCKY_ID_NAMESPACE: Uuid = Uuid::from_u128(0x93f4_1d7e_2c68_4a0b_8e35_c7a9_0d1b_5f43);
/// Basis points in one whole: `share_bp = 10_000` gives the recipients everything.
pub const BASIS_POINTS_PER_WHOLE: u32 = 10_000;
/// Milliseconds per UTC day: leaderboard days are UTC days of the order's `created_ms`.
pub const MS_PER_DAY: i64 = 86_400_000;
/// Days from 1970-01-01 (a Thursday) back to the Monday that starts its week.
const EPOCH_WEEKDAY_OFFSET_DAYS: i64 = 3;
/// Days per leaderboard week (Monday to Sunday, UTC).
const DAYS_PER_WEEK: i64 = 7;

/// The gift id of a client request: the idempotency key of the whole saga.
///
/// `v5(ns, sender ‖ 0x00 ‖ req_id)`, except for a `req_id` that is a UUIDv7 (time-ordered):
/// then a UUIDv8 whose first 48 bits are the `req_id`'s millisecond timestamp and whose other
/// bits are the v5's. The ids of such requests sort by time, so the ledger appends them to its
/// saga index instead of writing one random page of it per gift (BENCHMARKS.md, Change 17).
/// Either form is a pure function of `(sender, req_id)`: a retry finds its first saga.
pub fn gift_id(sender: &UserId, req_id: &str) -> Uuid {
    gift_ids(sender, req_id).id
}

/// The id versions before the time-ordered form gave a request whose id is now time-ordered
/// (`None` when [`gift_id`] is the v5 form): a saga booked before the upgrade is kept under it,
/// and a retry across the upgrade must find that saga, not book a second one.
pub fn legacy_gift_id(sender: &UserId, req_id: &str) -> Option<Uuid> {
    gift_ids(sender, req_id).legacy
}

/// A request's [`gift_id`] and [`legacy_gift_id`], from one parse and one hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GiftIds {
    /// The id its saga is booked under.
    pub id: Uuid,
    /// The id a version before time-ordered ids gave it, when that differs.
    pub legacy: Option<Uuid>,
}

/// Both ids of a request (see [`GiftIds`]).
pub fn gift_ids(sender: &UserId, req_id: &str) -> GiftIds {
    let v5 = v5_gift_id(sender, req_id);
    match time_prefix(req_id) {
        Some(prefix) => {
            let mut bytes = *v5.as_bytes();
            bytes[..TIME_PREFIX_BYTES].copy_from_slice(&prefix);
            GiftIds {
                id: Uuid::new_v8(bytes),
                legacy: Some(v5),
            }
        }
        None => GiftIds {
            id: v5,
            legacy: None,
        },
    }
}

/// Bytes of a UUIDv7's big-endian millisecond timestamp.
const TIME_PREFIX_BYTES: usize = 6;
/// The version number of a time-ordered UUID (RFC 9562).
const UUID_V7: usize = 7;

fn v5_gift_id(sender: &UserId, req_id: &str) -> Uuid {
    let mut name = Vec::with_capacity(sender.as_str().len() + 1 + req_id.len());
    name.extend_from_slice(sender.as_str().as_bytes());
    name.push(0);
    name.extend_from_slice(req_id.as_bytes());
    Uuid::new_v5(&GIFT_ID_NAMESPACE, &name)
}

/// The timestamp bytes of a `req_id` that is a UUIDv7 (in any of its text forms: a different
/// spelling is a different `req_id`, and the hashed rest of the id tells them apart).
fn time_prefix(req_id: &str) -> Option<[u8; TIME_PREFIX_BYTES]> {
    let id = Uuid::try_parse(req_id).ok()?;
    if id.get_version_num() != UUID_V7 {
        return None;
    }
    let mut prefix = [0; TIME_PREFIX_BYTES];
    prefix.copy_from_slice(&id.as_bytes()[..TIME_PREFIX_BYTES]);
    Some(prefix)
}

/// The wallet entry id of a top-up key.
pub fn grant_entry_id(key: &str) -> Uuid {
    Uuid::new_v5(&GRANT_ID_NAMESPACE, key.as_bytes())
}

/// The wallet entry id of a gift's lucky prize.
pub fn lucky_entry_id(gift_id: Uuid) -> Uuid {
    Uuid::new_v5(&LUCKY_ID_NAMESPACE, gift_id.as_bytes())
}

/// The UTC day number (days since 1970-01-01) of a millisecond timestamp.
pub fn day_of(ms: i64) -> i64 {
    ms.div_euclid(MS_PER_DAY)
}

/// The first day (a Monday, UTC) of the week that contains `day`.
pub fn week_start(day: i64) -> i64 {
    day - (day + EPOCH_WEEKDAY_OFFSET_DAYS).rem_euclid(DAYS_PER_WEEK)
}

/// Milliseconds since the Unix epoch, by the wall clock (0 if the clock is before 1970).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A lucky gift's prize, decided by the room (the ledger only pays it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LuckyPrize {
    /// The multiplier shown to the room (display only).
    pub multiplier: u32,
    /// Coins credited to the sender, paid by the house.
    pub coins: i64,
}

/// One gift request, as the room actor decided it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GiftOrder {
    /// The idempotency key: [`gift_id`]`(sender, req_id)`.
    pub gift_id: Uuid,
    /// The user who pays.
    pub sender: UserId,
    /// The room the gift was sent in (fences every saga transition).
    pub room: RoomId,
    /// The gift's catalogue id.
    pub gift: String,
    /// How many of the gift, per recipient.
    pub count: u32,
    /// Price of one gift in coins.
    pub unit_price: i64,
    /// Who receives it; distinct users, at least one.
    pub recipients: Vec<UserId>,
    /// Recipients' share in basis points (0..=10_000); the house keeps the rest.
    pub share_bp: u32,
    /// The prize, if this was a lucky gift that won.
    pub lucky: Option<LuckyPrize>,
    /// When the room accepted the order (ms since epoch); picks the leaderboard day.
    pub created_ms: i64,
}

/// Why a gift order cannot be booked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    /// `count` is zero.
    #[error("count must be at least 1")]
    ZeroCount,
    /// `unit_price` is not positive.
    #[error("unit price must be positive")]
    NonPositivePrice,
    /// No recipients.
    #[error("at least one recipient is needed")]
    NoRecipients,
    /// A recipient appears twice.
    #[error("recipients must be distinct")]
    DuplicateRecipient,
    /// `share_bp` is above 10 000.
    #[error("share must be at most 10000 basis points")]
    ShareTooLarge,
    /// A lucky prize is negative.
    #[error("lucky prize must not be negative")]
    NegativePrize,
    /// The total does not fit in an i64.
    #[error("total overflows")]
    Overflow,
}

impl GiftOrder {
    /// Checks the order's numbers. The room actor should call this before booking and answer
    /// `BAD_REQUEST`; the ledger checks again and refuses an invalid order with `Backend`.
    ///
    /// # Errors
    /// The first rule the order breaks.
    pub fn validate(&self) -> Result<(), OrderError> {
        if self.count == 0 {
            return Err(OrderError::ZeroCount);
        }
        if self.unit_price <= 0 {
            return Err(OrderError::NonPositivePrice);
        }
        if self.recipients.is_empty() {
            return Err(OrderError::NoRecipients);
        }
        if self.share_bp > BASIS_POINTS_PER_WHOLE {
            return Err(OrderError::ShareTooLarge);
        }
        if self.lucky.is_some_and(|l| l.coins < 0) {
            return Err(OrderError::NegativePrize);
        }
        if has_duplicates(&self.recipients) {
            return Err(OrderError::DuplicateRecipient);
        }
        self.checked_total().map(|_| ())
    }

    fn checked_total(&self) -> Result<i64, OrderError> {
        let n = i64::try_from(self.recipients.len()).map_err(|_| OrderError::Overflow)?;
        self.per_recipient_checked()?
            .checked_mul(n)
            .ok_or(OrderError::Overflow)
    }

    fn per_recipient_checked(&self) -> Result<i64, OrderError> {
        self.unit_price
            .checked_mul(i64::from(self.count))
            .ok_or(OrderError::Overflow)
    }

    /// Coins debited from the sender: `unit_price × count × recipients` (0 if invalid).
    pub fn total(&self) -> i64 {
        self.checked_total().unwrap_or(0)
    }

    /// Coins each recipient's gift is worth: `unit_price × count` (their charm).
    pub fn per_recipient(&self) -> i64 {
        self.per_recipient_checked().unwrap_or(0)
    }

    /// Earnings credited to each recipient: `floor(per_recipient × share_bp / 10_000)`.
    pub fn earnings_per_recipient(&self) -> i64 {
        let wide = i128::from(self.per_recipient()) * i128::from(self.share_bp)
            / i128::from(BASIS_POINTS_PER_WHOLE);
        i64::try_from(wide).unwrap_or(0)
    }

    /// The house's revenue from this gift: total minus all recipients' earnings.
    pub fn platform_share(&self) -> i64 {
        let n = i64::try_from(self.recipients.len()).unwrap_or(0);
        self.total() - self.earnings_per_recipient() * n
    }

    /// The lucky prize in coins (0 when none).
    pub fn prize(&self) -> i64 {
        self.lucky.map_or(0, |l| l.coins)
    }

    /// The order as stored in a saga row (JSON; the gift id lives in its own column).
    fn to_json(&self) -> Result<String> {
        let stored = StoredOrderRef {
            sender: &self.sender,
            room: &self.room,
            gift: &self.gift,
            count: self.count,
            unit_price: self.unit_price,
            recipients: &self.recipients,
            share_bp: self.share_bp,
            lucky: self.lucky,
            created_ms: self.created_ms,
        };
        // Sized for a typical order: one allocation, no regrowth.
        let mut out = Vec::with_capacity(STORED_ORDER_CAPACITY);
        serde_json::to_writer(&mut out, &stored)
            .map_err(|e| StorageError::Corrupt(e.to_string()))?;
        String::from_utf8(out).map_err(|e| StorageError::Corrupt(e.to_string()))
    }

    /// The order back from a saga row.
    fn from_json(gift_id: Uuid, json: &str) -> Result<Self> {
        let s: StoredOrder =
            serde_json::from_str(json).map_err(|e| StorageError::Corrupt(e.to_string()))?;
        Ok(Self {
            gift_id,
            sender: s.sender,
            room: s.room,
            gift: s.gift,
            count: s.count,
            unit_price: s.unit_price,
            recipients: s.recipients,
            share_bp: s.share_bp,
            lucky: s.lucky,
            created_ms: s.created_ms,
        })
    }

    fn checked(&self) -> Result<()> {
        self.validate()
            .map_err(|e| StorageError::Backend(format!("invalid gift order {}: {e}", self.gift_id)))
    }
}

/// Recipients compared pairwise up to this many (no allocation on the gift path; a room
/// allows at most 20), through a hash set above it.
const PAIRWISE_DUPLICATE_CHECK_MAX: usize = 32;

fn has_duplicates(users: &[UserId]) -> bool {
    if users.len() <= PAIRWISE_DUPLICATE_CHECK_MAX {
        return (1..users.len()).any(|i| users[..i].contains(&users[i]));
    }
    let mut seen = std::collections::HashSet::with_capacity(users.len());
    !users.iter().all(|u| seen.insert(u.as_str()))
}

/// Bytes reserved for an order's JSON: an order with a few recipients fits.
const STORED_ORDER_CAPACITY: usize = 256;

/// [`StoredOrder`] borrowed from a [`GiftOrder`], for writing: the same fields in the same
/// order, so the same JSON, without copying the ids first.
#[derive(Serialize)]
struct StoredOrderRef<'a> {
    sender: &'a UserId,
    room: &'a RoomId,
    gift: &'a str,
    count: u32,
    unit_price: i64,
    recipients: &'a [UserId],
    share_bp: u32,
    lucky: Option<LuckyPrize>,
    created_ms: i64,
}

#[derive(Serialize, Deserialize)]
struct StoredOrder {
    sender: UserId,
    room: RoomId,
    gift: String,
    count: u32,
    unit_price: i64,
    recipients: Vec<UserId>,
    share_bp: u32,
    lucky: Option<LuckyPrize>,
    created_ms: i64,
}

/// The result of a top-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrantOutcome {
    /// The user's coin balance after the call.
    pub balance: i64,
    /// False when the key had been used already (nothing was credited this time).
    pub applied: bool,
}

/// Where a gift saga stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SagaState {
    /// Recorded; the sender has not been debited (or the debit is not yet marked).
    Pending,
    /// The sender was debited; the recipients are not yet credited.
    Debited,
    /// Terminal: debited and credited.
    Settled,
    /// Terminal: never debited (insufficient funds, or voided by recovery).
    Voided,
}

impl SagaState {
    /// The state's stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Debited => "DEBITED",
            Self::Settled => "SETTLED",
            Self::Voided => "VOIDED",
        }
    }

    /// Parses a stored name.
    ///
    /// # Errors
    /// `Corrupt` for an unknown name.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "PENDING" => Ok(Self::Pending),
            "DEBITED" => Ok(Self::Debited),
            "SETTLED" => Ok(Self::Settled),
            "VOIDED" => Ok(Self::Voided),
            other => Err(StorageError::Corrupt(format!(
                "unknown saga state {other:?}"
            ))),
        }
    }

    /// Whether the saga can no longer move.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Settled | Self::Voided)
    }
}

/// Why a saga was voided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VoidReason {
    /// The sender's coins did not cover the gift.
    InsufficientFunds,
    /// The owner's recovery found no debit and claimed the key.
    Recovered,
    /// The room cancelled the gift before debiting it.
    Cancelled,
}

impl VoidReason {
    /// The reason's stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InsufficientFunds => "NSF",
            Self::Recovered => "RECOVERED",
            Self::Cancelled => "CANCELLED",
        }
    }

    /// Parses a stored name.
    ///
    /// # Errors
    /// `Corrupt` for an unknown name.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "NSF" => Ok(Self::InsufficientFunds),
            "RECOVERED" => Ok(Self::Recovered),
            "CANCELLED" => Ok(Self::Cancelled),
            other => Err(StorageError::Corrupt(format!(
                "unknown void reason {other:?}"
            ))),
        }
    }
}

/// The kind of a wallet entry (the row that holds an idempotency key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// Admin top-up.
    Grant,
    /// A gift's debit.
    Debit,
    /// A gift's void claim: the debit can no longer happen.
    Void,
    /// A lucky prize credit.
    Lucky,
}

impl EntryKind {
    /// The kind's stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Grant => "GRANT",
            Self::Debit => "DEBIT",
            Self::Void => "VOID",
            Self::Lucky => "LUCKY",
        }
    }

    /// Parses a stored name.
    ///
    /// # Errors
    /// `Corrupt` for an unknown name.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "GRANT" => Ok(Self::Grant),
            "DEBIT" => Ok(Self::Debit),
            "VOID" => Ok(Self::Void),
            "LUCKY" => Ok(Self::Lucky),
            other => Err(StorageError::Corrupt(format!(
                "unknown entry kind {other:?}"
            ))),
        }
    }
}

/// A saga row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SagaRecord {
    /// The order.
    pub order: GiftOrder,
    /// Where it stands.
    pub state: SagaState,
    /// The fence of the owner that last moved or touched it.
    pub fence: u64,
    /// Why it was voided (VOIDED only).
    pub reason: Option<VoidReason>,
    /// The sender's coins after the debit (or at the NSF check); after the prize once settled.
    pub balance_after: Option<i64>,
    /// When it last moved (ms since epoch, wall clock of the writer).
    pub updated_ms: i64,
}

impl SagaRecord {
    /// The client-visible result of a terminal saga (None while it is still moving).
    pub fn result(&self) -> Option<GiftResult> {
        match self.state {
            SagaState::Settled => Some(GiftResult::Settled {
                order_id: self.order.gift_id,
                balance: self.balance_after.unwrap_or(0),
            }),
            SagaState::Voided => Some(match self.reason {
                Some(VoidReason::InsufficientFunds) => GiftResult::InsufficientFunds {
                    balance: self.balance_after.unwrap_or(0),
                },
                _ => GiftResult::Voided,
            }),
            SagaState::Pending | SagaState::Debited => None,
        }
    }
}

/// The first, final result of a gift request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiftResult {
    /// Debited and credited; `balance` is the sender's coins afterwards (prize included).
    Settled {
        /// The gift id.
        order_id: Uuid,
        /// The sender's coins after the gift.
        balance: i64,
    },
    /// The sender's coins did not cover the gift; nothing was debited.
    InsufficientFunds {
        /// The sender's coins at the check.
        balance: i64,
    },
    /// Cancelled before any debit (by the room or by the owner's recovery).
    Voided,
}

/// What `send_gift` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiftOutcome {
    /// Debited and credited just now.
    Settled {
        /// The gift id.
        order_id: Uuid,
        /// The sender's coins after the gift (prize included).
        balance: i64,
    },
    /// The sender's coins did not cover the gift; nothing was debited.
    InsufficientFunds {
        /// The sender's coins at the check.
        balance: i64,
    },
    /// Cancelled before any debit (recovery claimed the key first).
    Voided,
    /// A retry of a request already booked: nothing new was debited.
    Duplicate {
        /// The first request's result.
        first: GiftResult,
    },
}

impl GiftOutcome {
    /// The result, whether first or repeated.
    pub fn result(&self) -> GiftResult {
        match *self {
            Self::Settled { order_id, balance } => GiftResult::Settled { order_id, balance },
            Self::InsufficientFunds { balance } => GiftResult::InsufficientFunds { balance },
            Self::Voided => GiftResult::Voided,
            Self::Duplicate { first } => first,
        }
    }

    fn first(result: GiftResult) -> Self {
        match result {
            GiftResult::Settled { order_id, balance } => Self::Settled { order_id, balance },
            GiftResult::InsufficientFunds { balance } => Self::InsufficientFunds { balance },
            GiftResult::Voided => Self::Voided,
        }
    }
}

/// What `begin` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BeginOutcome {
    /// A new PENDING saga was recorded.
    Started,
    /// The gift id was known: a retry. Continue from its state.
    Existing(SagaRecord),
}

/// What `debit` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebitOutcome {
    /// The sender is debited (now or earlier) and the saga is DEBITED or SETTLED.
    Debited {
        /// The sender's coins right after the debit.
        balance: i64,
    },
    /// Not enough coins: the void claim was written and the saga is VOIDED.
    InsufficientFunds {
        /// The sender's coins at the check.
        balance: i64,
    },
    /// The void claim had won the key: the saga is VOIDED and nothing was debited.
    Voided,
    /// No saga with this gift id (call `begin` first).
    Missing,
}

/// What `settle` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleOutcome {
    /// The saga is SETTLED (now or earlier).
    Settled {
        /// The sender's coins after the gift (prize included).
        balance: i64,
    },
    /// The saga is not DEBITED; nothing was credited.
    NotDebited(SagaState),
    /// No saga with this gift id.
    Missing,
}

/// What `void` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VoidOutcome {
    /// The void claim holds the key and the saga is VOIDED.
    Voided,
    /// The debit holds the key: the saga is DEBITED or SETTLED and must be rolled forward.
    Debited,
    /// No saga with this gift id.
    Missing,
}

/// What `install_fence` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FenceInstall {
    /// The room had no owner in the ledger: this is its first fence. No saga can exist for it
    /// (every saga step checks the room's fence), so its owner has nothing to recover.
    First,
    /// The fence is now the room's durable high-water mark (or already was, for this owner).
    /// Also the answer when an engine cannot tell whether the room had an owner before.
    Installed,
    /// A fence at least as high is installed: the caller's lease store regressed.
    Stale {
        /// The installed fence.
        current: u64,
    },
}

/// What recovery did to one saga.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryOutcome {
    /// Not the owner: nothing was written; the owner will resolve it.
    Released,
    /// The debit was found and the gift settled.
    Settled,
    /// No debit was found; the void claim won and the saga is VOIDED.
    Voided,
    /// The saga was already terminal.
    AlreadyTerminal(SagaState),
    /// No saga with this gift id.
    Missing,
}

/// Which leaderboard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Board {
    /// Senders ranked by coins spent in the room (contribution).
    Senders,
    /// Recipients ranked by gift value received in the room (charm).
    Receivers,
}

/// Over which period, in UTC days of the gifts' `created_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Period {
    /// Today.
    Day,
    /// This week, from Monday.
    Week,
    /// Since the room's first gift.
    All,
}

impl Period {
    /// The first day (inclusive) of the period that contains `today`.
    pub fn first_day(self, today: i64) -> i64 {
        match self {
            Self::Day => today,
            Self::Week => week_start(today),
            Self::All => i64::MIN,
        }
    }
}

/// Ledger-wide sums, for conservation checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// All coins ever granted.
    pub granted: i64,
    /// Coins held by users now.
    pub coins: i64,
    /// Earnings held by recipients now.
    pub earnings: i64,
    /// House revenue from settled gifts.
    pub platform_revenue: i64,
    /// Lucky prizes the house paid.
    pub lucky_paid: i64,
    /// Accounts with negative coins (must be 0).
    pub negative_accounts: i64,
}

impl Totals {
    /// Whether every coin is accounted for and no account is negative. Exact at quiescence: a
    /// saga between DEBITED and SETTLED holds coins that are in no balance yet.
    pub fn is_conserved(&self) -> bool {
        self.negative_accounts == 0
            && self.coins + self.earnings + self.platform_revenue - self.lucky_paid == self.granted
    }
}

/// The ledger: a cheap-to-clone handle on one engine.
#[derive(Clone)]
pub enum Ledger {
    /// Embedded engine.
    Sqlite(SqliteLedger),
    /// Production engine.
    Scylla(ScyllaLedger),
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sqlite(_) => f.write_str("Ledger::Sqlite"),
            Self::Scylla(_) => f.write_str("Ledger::Scylla"),
        }
    }
}

/// Calls the engine's method. Scylla's futures are boxed: a driver query's state is kilobytes,
/// and inline it would size every `Ledger` future, SQLite's included (`send_gift`, which holds
/// the Scylla saga's steps, was 5,136 B, and the room actor boxes one per gift: a large malloc
/// on glibc's slow path). A Scylla call pays one small allocation next to a network round trip.
macro_rules! dispatch {
    ($self:ident . $method:ident ( $($arg:expr),* )) => {
        match $self {
            Ledger::Sqlite(l) => l.$method($($arg),*).await,
            Ledger::Scylla(l) => Box::pin(l.$method($($arg),*)).await,
        }
    };
}

impl Ledger {
    /// Opens the engine a URL names: `sqlite://<path>`, `sqlite` or empty (file
    /// `<data_dir>/ledger.db`), or `scylla://host:9042,host2:9042[/keyspace]`.
    ///
    /// # Errors
    /// `Backend` for an unknown scheme; the engine's error if it cannot open or prepare.
    pub async fn open(url: &str, data_dir: &Path) -> Result<Self> {
        if url.is_empty() || url == "sqlite" || url == "sqlite://" {
            let path = data_dir.join("ledger.db");
            return Ok(Self::Sqlite(SqliteLedger::open(&path).await?));
        }
        if let Some(path) = url.strip_prefix("sqlite://") {
            return Ok(Self::Sqlite(SqliteLedger::open(Path::new(path)).await?));
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
        Err(StorageError::Backend(format!("unknown ledger url {url:?}")))
    }

    /// Admin top-up, idempotent by `key` (per user): the same key credits once.
    ///
    /// # Errors
    /// Engine errors; `Backend` for a non-positive amount.
    pub async fn grant(&self, user: &UserId, amount: i64, key: &str) -> Result<GrantOutcome> {
        if amount <= 0 {
            return Err(StorageError::Backend(
                "grant amount must be positive".into(),
            ));
        }
        dispatch!(self.grant(user, amount, key))
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
    /// `Fenced` if `fence` is below the room's or the saga's; `Backend` for an invalid order;
    /// retryable engine errors (`Unavailable`, `Conflict`): retry with the same order.
    pub async fn send_gift(&self, order: &GiftOrder, fence: u64) -> Result<GiftOutcome> {
        order.checked()?;
        match self {
            Self::Sqlite(l) => l.send_gift(order, fence).await,
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
    /// (a linearizable read on Scylla; on SQLite the claim is the saga row's state, written in
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

    fn order(unit: i64, count: u32, n: usize, share_bp: u32) -> GiftOrder {
        GiftOrder {
            gift_id: gift_id(&UserId::from("s"), "r1"),
            sender: "s".into(),
            room: "room".into(),
            gift: "rose".into(),
            count,
            unit_price: unit,
            recipients: (0..n).map(|i| UserId::from(format!("r{i}"))).collect(),
            share_bp,
            lucky: None,
            created_ms: 0,
        }
    }

    /// What a gift's ledger call holds while it waits stays small whatever engines are compiled
    /// in: the room actor boxes it per gift, and glibc serves blocks above 1 KiB from its slow
    /// path. Scylla's kilobytes of driver state are boxed inside the dispatch.
    #[tokio::test]
    async fn a_gift_call_waits_in_less_than_a_kibibyte() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open("sqlite", dir.path()).await.unwrap();
        let o = order(10, 1, 1, 1000);
        let call = ledger.send_gift(&o, 1);
        let size = std::mem::size_of_val(&call);
        drop(call);
        assert!(size <= 1024, "Ledger::send_gift's future is {size} bytes");
    }

    #[test]
    fn time_ordered_requests_get_time_ordered_ids_and_others_keep_theirs() {
        let alice = UserId::from("alice");
        // Two UUIDv7 request ids a millisecond apart, the later one with smaller random bits.
        let early = "0190f1a2-b3c4-7d5e-8f60-ffffffffffff";
        let late = "0190f1a2-b3c5-7000-8000-000000000000";
        let (a, b) = (gift_id(&alice, early), gift_id(&alice, late));
        assert_eq!(a.get_version_num(), 8);
        assert_eq!(
            a.as_bytes()[..6],
            Uuid::parse_str(early).unwrap().as_bytes()[..6]
        );
        assert!(a < b, "ids sort by the request's time");
        assert_ne!(
            gift_id(&"bob".into(), early),
            a,
            "the sender is in the hashed part"
        );
        assert_eq!(
            legacy_gift_id(&alice, early),
            Some(v5_gift_id(&alice, early))
        );
        // Any other request id (a UUIDv4, a free string) keeps the v5 id, and has no legacy id.
        for other in [
            "9b2f6c1e-4d3a-4b5c-8d7e-0f1a2b3c4d5e",
            "q1",
            "0190f1a2-b3c4",
        ] {
            assert_eq!(gift_id(&alice, other), v5_gift_id(&alice, other));
            assert_eq!(gift_id(&alice, other).get_version_num(), 5);
            assert_eq!(legacy_gift_id(&alice, other), None);
        }
        // The v5 form is the one documented (PROTOCOL.md, "Order id"), fixed forever.
        assert_eq!(
            gift_id(&alice, "q1"),
            Uuid::new_v5(&GIFT_ID_NAMESPACE, b"alice\0q1")
        );
    }

    #[test]
    fn gift_id_separates_sender_and_request() {
        let a = gift_id(&"ab".into(), "c");
        let b = gift_id(&"a".into(), "bc");
        assert_ne!(a, b);
        assert_eq!(a, gift_id(&"ab".into(), "c"));
    }

    #[test]
    fn amounts_split_every_coin() {
        let o = order(7, 3, 3, 3_333);
        assert_eq!(o.total(), 63);
        assert_eq!(o.per_recipient(), 21);
        assert_eq!(o.earnings_per_recipient(), 6); // floor(21 * 0.3333)
        assert_eq!(o.platform_share(), 63 - 18);
        assert!(o.validate().is_ok());
    }

    #[test]
    fn validation_rejects_bad_orders() {
        assert_eq!(order(1, 0, 1, 0).validate(), Err(OrderError::ZeroCount));
        assert_eq!(
            order(0, 1, 1, 0).validate(),
            Err(OrderError::NonPositivePrice)
        );
        assert_eq!(order(1, 1, 0, 0).validate(), Err(OrderError::NoRecipients));
        assert_eq!(
            order(1, 1, 1, 10_001).validate(),
            Err(OrderError::ShareTooLarge)
        );
        assert_eq!(
            order(i64::MAX, 2, 1, 0).validate(),
            Err(OrderError::Overflow)
        );
        let mut o = order(1, 1, 2, 0);
        o.recipients[1] = o.recipients[0].clone();
        assert_eq!(o.validate(), Err(OrderError::DuplicateRecipient));
        // Both ways of looking: pairwise for few recipients, a set for many.
        for n in [3, PAIRWISE_DUPLICATE_CHECK_MAX + 5] {
            let mut o = order(1, 1, n, 0);
            assert!(o.validate().is_ok());
            o.recipients[n - 1] = o.recipients[1].clone();
            assert_eq!(o.validate(), Err(OrderError::DuplicateRecipient));
        }
    }

    #[test]
    fn weeks_start_on_monday() {
        // 1970-01-05 (day 4) was a Monday.
        assert_eq!(week_start(4), 4);
        assert_eq!(week_start(10), 4);
        assert_eq!(week_start(11), 11);
        assert_eq!(week_start(0), -3);
    }

    #[test]
    fn order_json_round_trips() {
        let mut o = order(5, 2, 2, 5_000);
        o.lucky = Some(LuckyPrize {
            multiplier: 10,
            coins: 100,
        });
        let json = o.to_json().unwrap();
        assert_eq!(GiftOrder::from_json(o.gift_id, &json).unwrap(), o);
        // The borrowed writer's bytes are the owned form's: rows written before read the same.
        let owned = StoredOrder {
            sender: o.sender.clone(),
            room: o.room.clone(),
            gift: o.gift.clone(),
            count: o.count,
            unit_price: o.unit_price,
            recipients: o.recipients.clone(),
            share_bp: o.share_bp,
            lucky: o.lucky,
            created_ms: o.created_ms,
        };
        assert_eq!(json, serde_json::to_string(&owned).unwrap());
    }
}
