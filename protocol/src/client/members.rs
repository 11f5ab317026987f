//! Who is in a room: `member.list` pages, and `member.update` when a member's profile or badges
//! (guard, VIP level) change.
//! Profiles travel under the key `p` and are left out when empty.

use serde::{Deserialize, Serialize};

use super::Profile;
use crate::ids::{RoomId, UserId};

/// Page size of `member.list` when none is given.
pub const MEMBER_LIST_DEFAULT: u32 = 50;
/// Largest page of `member.list`.
pub const MEMBER_LIST_MAX: u32 = 200;

/// `member.list` arguments: one page of the room's members.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberList {
    /// The room.
    pub room: RoomId,
    /// Continue after the previous page (its `cursor`; opaque).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Page size, 1..=200 (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// One member in a `member.list` page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberEntry {
    /// The member.
    pub user: UserId,
    /// `owner`, `admin` or `member`.
    pub role: String,
    /// The seat held, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seat: Option<u32>,
    /// The member is a robot (present only then).
    #[serde(default, skip_serializing_if = "super::is_false")]
    pub robot: bool,
    /// When the member joined (unix ms; kept across a reconnect within the grace window and
    /// across a planned move).
    pub joined_at: u64,
    /// The member's connection dropped and the grace window runs (present only then).
    #[serde(default, skip_serializing_if = "super::is_false")]
    pub away: bool,
    /// The member's profile (absent when empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p: Option<Profile>,
    /// The member guards the room's owner (present only then).
    #[serde(default, skip_serializing_if = "crate::client::is_false")]
    pub guard: bool,
    /// The member's VIP level (absent at 0).
    #[serde(default, skip_serializing_if = "crate::client::guard::is_zero")]
    pub vip: u8,
}

/// The `member.list` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberPage {
    /// Members in order: owner, admins, seated, everyone else; each group by join time.
    pub members: Vec<MemberEntry>,
    /// How many members the room has now (away ones included).
    pub count: u64,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// `member.update` (volatile): a member's profile changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberUpdate {
    /// The member.
    pub user: UserId,
    /// The new profile (absent when it is now empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p: Option<Profile>,
    /// The member guards the room's owner (present only then).
    #[serde(default, skip_serializing_if = "crate::client::is_false")]
    pub guard: bool,
    /// The member's VIP level (absent at 0).
    #[serde(default, skip_serializing_if = "crate::client::guard::is_zero")]
    pub vip: u8,
}
