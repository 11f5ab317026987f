//! Guards and VIP levels: `guard.buy`, `guard.list` and `guard.plans` (answered by the gateway
//! from the ledger), and the compact badges room events carry: `guard: true` when the member
//! guards the room's owner, `vip: <level>` when the member's lifetime gift spend reaches a
//! level. Both are computed by the server, never taken from a client, and left out when unset.

use serde::{Deserialize, Serialize};

use crate::ids::{RoomId, UserId};

/// Most guards one `guard.list` page returns.
pub const GUARD_LIST_MAX: u32 = 200;
/// Page size of `guard.list` when none is given.
pub const GUARD_LIST_DEFAULT: u32 = 50;

/// `guard.buy`: become a guard of `host` for one plan's duration, paid from the caller's
/// coins once per `req_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardBuy {
    /// The host (any other user).
    pub host: UserId,
    /// The plan's id (`guard.plans`).
    pub plan: String,
    /// The caller's request id: a retry with the same id is answered again, paid once.
    pub req_id: String,
}

/// The `guard.buy` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardBought {
    /// The host.
    pub host: UserId,
    /// The plan bought.
    pub plan: String,
    /// When the guard ends now (unix ms).
    pub expires_at: i64,
    /// The caller's coins now.
    pub balance: i64,
    /// False when this answers a retry (nothing was paid this time).
    pub applied: bool,
}

/// `guard.list`: the guards in force of a host, named directly or as a room's owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardList {
    /// The host (exactly one of `host` and `room`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<UserId>,
    /// A room: its owner is the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room: Option<RoomId>,
    /// Most guards to return, 1..=200 (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// One guard in a `guard.list` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardEntry {
    /// The guard (who bought it).
    pub user: UserId,
    /// When it ends (unix ms).
    pub expires_at: i64,
}

/// The `guard.list` reply: latest expiry first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardPage {
    /// The host.
    pub host: UserId,
    /// The guards in force.
    pub guards: Vec<GuardEntry>,
}

/// `guard.plans`: the plans on sale (no arguments).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardPlans {}

/// One plan in the `guard.plans` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuardPlanInfo {
    /// The plan's id.
    pub id: String,
    /// Its length in days (fractions allowed).
    pub days: f64,
    /// Its price in coins.
    pub price: i64,
}

/// The guard operations, answered by the gateway from the ledger.
#[derive(Debug, Clone, PartialEq)]
pub enum GuardOp {
    /// `guard.buy`.
    Buy(GuardBuy),
    /// `guard.list`.
    List(GuardList),
    /// `guard.plans`.
    Plans(GuardPlans),
}

impl GuardOp {
    /// The op's wire name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Buy(_) => "guard.buy",
            Self::List(_) => "guard.list",
            Self::Plans(_) => "guard.plans",
        }
    }
}

/// Whether a VIP level is 0 (left out of JSON).
pub(crate) fn is_zero(v: &u8) -> bool {
    *v == 0
}
