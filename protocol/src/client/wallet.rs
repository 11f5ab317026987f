//! `wallet.balance`.

use serde::{Deserialize, Serialize};

/// `wallet.balance` arguments (none).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WalletBalance {}

/// The `ok` of `wallet.balance`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Balance {
    /// Coins the user can spend.
    pub balance: i64,
}
