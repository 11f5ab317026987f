//! What the gateway tells a room about a member's standing, beside the profile: the guards
//! the user holds (read from the ledger at connect, renewed on a purchase) and the user's
//! lifetime gift spend (for the VIP level). The room turns them into the compact badges of
//! its events (`guard`, `vip`).

use serde::{Deserialize, Serialize};

use crate::ids::UserId;

/// One guard the user holds: of `host`, until `until` (unix ms).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldGuard {
    /// The host guarded.
    pub host: UserId,
    /// When the guard ends (unix ms).
    pub until: u64,
}

/// A member's standing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standing {
    /// The guards the user holds (those in force when read; the room checks the time again).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guards: Vec<HeldGuard>,
    /// Coins the user has spent on gifts, lifetime.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spent: i64,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl Standing {
    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty() && self.spent == 0
    }

    /// Whether the user guards `host` at `now` (unix ms).
    pub fn guards_at(&self, host: &UserId, now: u64) -> bool {
        self.guards.iter().any(|g| g.host == *host && g.until > now)
    }
}
