//! The room rocket's events: `rocket.progress` (volatile) and `rocket.launch` (sequenced).

use serde::{Deserialize, Serialize};

use crate::ids::UserId;

/// The `rocket.progress` event: the rocket's fuel, latest wins, at a bounded rate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RocketProgress {
    /// The level being filled (1-based).
    pub level: u32,
    /// Fuel in it (coins).
    pub fuel: i64,
    /// Fuel that launches it.
    pub target: i64,
    /// Launches in this room so far.
    pub launches: u64,
}

/// One reward of a launch, paid through the ledger before the launch is announced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RocketReward {
    /// Who got it.
    pub user: UserId,
    /// Coins credited.
    pub coins: i64,
    /// `top` (a top contributor of the level) or `present` (a member present at launch).
    pub why: String,
}

/// The `rocket.launch` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RocketLaunch {
    /// The launch's number in the room (1, 2, …).
    pub launch: u64,
    /// The level launched (1-based).
    pub level: u32,
    /// The fuel the level took.
    pub fuel: i64,
    /// The rewards paid.
    pub rewards: Vec<RocketReward>,
    /// The gift order whose coins filled the level (absent in launches decided before this
    /// field existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<uuid::Uuid>,
    /// Who sent that order: the user who launched the rocket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<UserId>,
}
