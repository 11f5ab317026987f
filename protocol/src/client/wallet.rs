//! `wallet.balance` and the wallet operations (`wallet.history`).

use serde::{Deserialize, Serialize};

use crate::ids::UserId;

/// `wallet.balance` arguments (none).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WalletBalance {}

/// The `ok` of `wallet.balance`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Balance {
    /// Coins the user can spend.
    pub balance: i64,
    /// Earnings received as a recipient (gifts, guard income, settlements).
    pub earnings: i64,
}

/// The wallet operations beyond `wallet.balance`, answered by the gateway from the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalletOp {
    /// `wallet.history`: one page of the caller's statement, newest first.
    History(WalletHistory),
    /// `wallet.transfer`: a coin seller moves coins to a user.
    Transfer(WalletTransfer),
    /// `wallet.checkin`: the daily check-in reward.
    Checkin(WalletCheckin),
}

impl WalletOp {
    /// The op's wire name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::History(_) => "wallet.history",
            Self::Transfer(_) => "wallet.transfer",
            Self::Checkin(_) => "wallet.checkin",
        }
    }
}

/// `wallet.history` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WalletHistory {
    /// Start after this position (the `next` of the previous page); absent: the newest.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Movements per page, 1..=100 (default 20).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Only movements of this kind (`grant`, `gift_sent`, ...).
    #[serde(default)]
    pub kind: Option<String>,
}

/// `wallet.checkin` arguments (none).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WalletCheckin {}

/// The `ok` of `wallet.checkin`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckedIn {
    /// Coins today's check-in is worth.
    pub reward: i64,
    /// False when the user had already checked in today (nothing credited this time).
    pub applied: bool,
    /// The user's coins afterwards.
    pub balance: i64,
}

/// `wallet.transfer` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalletTransfer {
    /// The receiver.
    pub to: UserId,
    /// Coins to move (1..=10^12).
    pub amount: i64,
    /// The idempotency key: a retry with the same id moves nothing more and gets the first
    /// answer (1..=128 bytes of printable ASCII, like `gift.send`'s).
    pub req_id: String,
}

/// The `ok` of `wallet.transfer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transferred {
    /// The seller's coins after the transfer.
    pub balance: i64,
    /// False for a retry of a transfer already booked (nothing moved this time).
    pub applied: bool,
}

/// One line of a statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovementEntry {
    /// What moved the balance (`grant`, `top_up`, `refund`, `gift_sent`, `gift_received`,
    /// `lucky_win`, `rocket_reward`, `guard`, `guard_income`, `transfer`, `settlement`, `reward`).
    pub kind: String,
    /// Which balance moved: `coins` or `earnings`.
    pub account: String,
    /// The signed change.
    pub amount: i64,
    /// That balance after the movement (absent for earnings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balance_after: Option<i64>,
    /// The other side, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counterparty: Option<String>,
    /// The booking's key (gift id, grant key, payment id, request id).
    pub key: String,
    /// When it was booked (ms since the Unix epoch).
    pub at: i64,
}

/// The `ok` of `wallet.history`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalletHistoryPage {
    /// Newest first.
    pub movements: Vec<MovementEntry>,
    /// The cursor of the next (older) page; absent at the oldest movement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}
