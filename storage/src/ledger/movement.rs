//! A user's statement: one [`Movement`] per booking that changed one of their balances,
//! written in the same transaction (or batch) as the booking, read newest first in pages.
//!
//! A page starts after a cursor, an opaque position in the user's movements, never an offset: a
//! page costs one index seek and `limit` rows, however many movements the user has, and a
//! movement booked while a client pages lands before its first page, never between two pages.

use protocol::UserId;

use super::GiftOrder;
use crate::{Result, StorageError};

/// Most movements one page returns.
pub const MAX_HISTORY_LIMIT: usize = 100;
/// Movements a page returns when the caller names no limit.
pub const DEFAULT_HISTORY_LIMIT: usize = 20;

/// What moved a balance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MovementKind {
    /// An operator's grant (`POST /admin/wallets/{user}/grant`).
    Grant,
    /// A payment provider's top-up.
    TopUp,
    /// A payment refunded by the provider (negative: coins taken back, or owed as a debt).
    Refund,
    /// A gift sent (negative, coins).
    GiftSent,
    /// A gift received (positive, earnings).
    GiftReceived,
    /// A lucky gift's prize (positive, coins).
    LuckyWin,
    /// A room rocket's reward (positive, coins).
    RocketReward,
    /// A guard of a host bought (negative, coins).
    Guard,
    /// A host's share of a guard bought of them (positive, earnings).
    GuardIncome,
    /// Coins moved between a seller and a user (negative for the sender, positive for the
    /// receiver).
    Transfer,
    /// Earnings settled for payout (negative, earnings).
    Settlement,
    /// A sign-up or daily reward from the platform (positive, coins).
    Reward,
}

/// Which of the user's balances a movement changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Account {
    /// Spendable coins.
    Coins,
    /// Earnings as a gift recipient.
    Earnings,
}

impl Account {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Coins => "coins",
            Self::Earnings => "earnings",
        }
    }
}

const KINDS: [MovementKind; 12] = [
    MovementKind::Grant,
    MovementKind::TopUp,
    MovementKind::Refund,
    MovementKind::GiftSent,
    MovementKind::GiftReceived,
    MovementKind::LuckyWin,
    MovementKind::RocketReward,
    MovementKind::Guard,
    MovementKind::GuardIncome,
    MovementKind::Transfer,
    MovementKind::Settlement,
    MovementKind::Reward,
];

impl MovementKind {
    /// The stored and wire name (`snake_case`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Grant => "grant",
            Self::TopUp => "top_up",
            Self::Refund => "refund",
            Self::GiftSent => "gift_sent",
            Self::GiftReceived => "gift_received",
            Self::LuckyWin => "lucky_win",
            Self::RocketReward => "rocket_reward",
            Self::Guard => "guard",
            Self::GuardIncome => "guard_income",
            Self::Transfer => "transfer",
            Self::Settlement => "settlement",
            Self::Reward => "reward",
        }
    }

    /// Parses a stored or wire name; `None` for an unknown one.
    pub fn from_name(s: &str) -> Option<Self> {
        KINDS.into_iter().find(|k| k.as_str() == s)
    }

    /// Parses a stored name.
    ///
    /// # Errors
    /// `Corrupt` for an unknown name.
    pub fn parse(s: &str) -> Result<Self> {
        Self::from_name(s)
            .ok_or_else(|| StorageError::corrupt_msg(format!("unknown movement kind {s:?}")))
    }

    /// The balance this kind moves.
    pub fn account(self) -> Account {
        match self {
            Self::GiftReceived | Self::GuardIncome | Self::Settlement => Account::Earnings,
            _ => Account::Coins,
        }
    }
}

/// One line of a statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Movement {
    /// What moved the balance.
    pub kind: MovementKind,
    /// The signed change of the balance [`MovementKind::account`] names.
    pub amount: i64,
    /// That balance right after the movement, where the booking knows it: always for coins;
    /// `None` for earnings (a popular host's earnings are spread over rows that no single
    /// booking locks, so no booking knows their total).
    pub balance_after: Option<i64>,
    /// The other side: the gift's sender or first recipient, the transfer's other user.
    pub counterparty: Option<String>,
    /// The booking's key: a gift id, a grant or payment key, a transfer's request id.
    pub key: String,
    /// When it was booked (ms since the Unix epoch).
    pub at_ms: i64,
}

/// A movement about to be written, with its user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewMovement {
    /// Whose statement it goes in.
    pub user: String,
    /// The line itself.
    pub movement: Movement,
}

/// One page of a statement, newest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryPage {
    /// The movements, newest first.
    pub movements: Vec<Movement>,
    /// The cursor of the next (older) page; `None` when this page reaches the oldest movement.
    pub next: Option<String>,
}

/// What a statement page asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryQuery {
    /// Start after this position (`None`: the newest movement).
    pub cursor: Option<String>,
    /// At most this many movements (1..=[`MAX_HISTORY_LIMIT`]).
    pub limit: usize,
    /// Only movements of this kind.
    pub kind: Option<MovementKind>,
}

impl HistoryQuery {
    /// The limit clamped to `1..=MAX_HISTORY_LIMIT` (0 means the default).
    pub fn clamped_limit(&self) -> usize {
        if self.limit == 0 {
            DEFAULT_HISTORY_LIMIT
        } else {
            self.limit.min(MAX_HISTORY_LIMIT)
        }
    }
}

/// The cursor of a page that ends at `last` when the page was full (`rows == limit + 1`
/// fetched), else none.
pub(super) fn next_cursor<T>(
    rows: &mut Vec<T>,
    limit: usize,
    pos: impl Fn(&T) -> String,
) -> Option<String> {
    if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(pos)
    } else {
        None
    }
}

/// A gift's debit in the sender's statement (coins after the debit; counterparty: the first
/// recipient).
pub(super) fn gift_sent(o: &GiftOrder, after_debit: i64) -> NewMovement {
    NewMovement {
        user: o.sender.as_str().to_owned(),
        movement: Movement {
            kind: MovementKind::GiftSent,
            amount: -o.total(),
            balance_after: Some(after_debit),
            counterparty: o.recipients.first().map(|r| r.as_str().to_owned()),
            key: o.gift_id.to_string(),
            at_ms: o.created_ms,
        },
    }
}

/// A settled gift's other movements: each recipient's earnings (counterparty: the sender) and
/// the sender's lucky prize, if any (`after_prize`: the sender's coins after it).
pub(super) fn gift_effects(o: &GiftOrder, after_prize: i64) -> Vec<NewMovement> {
    let key = o.gift_id.to_string();
    let mut out = Vec::with_capacity(o.recipients.len() + 1);
    let earned = o.earnings_per_recipient();
    for r in &o.recipients {
        out.push(NewMovement {
            user: r.as_str().to_owned(),
            movement: Movement {
                kind: MovementKind::GiftReceived,
                amount: earned,
                balance_after: None,
                counterparty: Some(o.sender.as_str().to_owned()),
                key: key.clone(),
                at_ms: o.created_ms,
            },
        });
    }
    let prize = o.prize();
    if prize > 0 {
        out.push(NewMovement {
            user: o.sender.as_str().to_owned(),
            movement: Movement {
                kind: MovementKind::LuckyWin,
                amount: prize,
                balance_after: Some(after_prize),
                counterparty: None,
                key,
                at_ms: o.created_ms,
            },
        });
    }
    out
}

/// A single movement of `user`.
pub(super) fn single(
    user: &UserId,
    kind: MovementKind,
    amount: i64,
    balance_after: Option<i64>,
    counterparty: Option<&str>,
    key: &str,
    at_ms: i64,
) -> NewMovement {
    NewMovement {
        user: user.as_str().to_owned(),
        movement: Movement {
            kind,
            amount,
            balance_after,
            counterparty: counterparty.map(str::to_owned),
            key: key.to_owned(),
            at_ms,
        },
    }
}

/// A transfer's two lines, under its request id: the seller's (`after`: the seller's coins
/// after it) and the receiver's (`to_after`: theirs, when known), each naming the other.
pub(super) fn transfer_lines(
    o: &super::TransferOrder,
    after: i64,
    to_after: Option<i64>,
    at_ms: i64,
) -> [NewMovement; 2] {
    let key = o.req_id.as_str();
    let (from, to) = (o.from.as_str(), o.to.as_str());
    [
        single(
            &o.from,
            MovementKind::Transfer,
            -o.amount,
            Some(after),
            Some(to),
            key,
            at_ms,
        ),
        single(
            &o.to,
            MovementKind::Transfer,
            o.amount,
            to_after,
            Some(from),
            key,
            at_ms,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_by_name() {
        for k in KINDS {
            assert_eq!(MovementKind::from_name(k.as_str()), Some(k));
        }
        assert_eq!(MovementKind::from_name("bogus"), None);
    }
}
