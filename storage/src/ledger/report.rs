//! What the ledger reads back in bulk: leaderboards ([`Board`] over a [`Period`]) and the
//! ledger-wide [`Totals`] of an audit.

use super::week_start;

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
    /// Coins of every payment a provider notified (refunded ones included).
    pub topped_up: i64,
    /// Coins of the refunded payments.
    pub refunded: i64,
    /// Debts users owe after refunds of coins they had spent.
    pub debt: i64,
    /// Earnings settled for payout (they left the earnings).
    pub settled: i64,
    /// Coins moved by sellers' transfers (they move between users: counted for the audit,
    /// not in the sum).
    pub transferred: i64,
}

impl Totals {
    /// Coins that entered from outside: grants, plus top-ups net of refunds, plus the debts
    /// that refunds left (coins spent that the refund could not take back).
    pub fn entered(&self) -> i64 {
        self.granted + self.topped_up - self.refunded + self.debt
    }

    /// Whether every coin is accounted for and no account is negative. Exact at quiescence: a
    /// saga between DEBITED and SETTLED holds coins that are in no balance yet.
    pub fn is_conserved(&self) -> bool {
        self.negative_accounts == 0
            && self.coins + self.earnings + self.settled + self.platform_revenue - self.lucky_paid
                == self.entered()
    }
}
