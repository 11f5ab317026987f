//! Moderation: chat mutes, kicks and bans, the ban list, and the `moderation` event.

use serde::{Deserialize, Serialize};

use crate::ids::{RoomId, UserId};

/// Longest chat mute or ban, in seconds (30 days); absent means until lifted.
pub const MAX_PENALTY_SECS: u64 = 30 * 24 * 3600;
/// Most bans listed in one `room.bans` page.
pub const MAX_BAN_PAGE: u32 = 100;

/// `chat.mute` arguments: the owner or an admin stops a user from chatting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMute {
    /// The room.
    pub room: RoomId,
    /// The user.
    pub user: UserId,
    /// How long, 1..=2592000 seconds; until `chat.unmute` when absent.
    #[serde(default)]
    pub seconds: Option<u64>,
}

/// Arguments naming a room and a user (`chat.unmute`, `room.unban`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserInRoom {
    /// The room.
    pub room: RoomId,
    /// The user.
    pub user: UserId,
}

/// `room.kick` arguments: the owner or an admin removes a member, optionally banning them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoomKick {
    /// The room.
    pub room: RoomId,
    /// The member.
    pub user: UserId,
    /// Also ban them for this many seconds (1..=2592000).
    #[serde(default)]
    pub ban_seconds: Option<u64>,
}

/// `room.ban` arguments: the owner or an admin bans a user (removing them if present).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoomBan {
    /// The room.
    pub room: RoomId,
    /// The user.
    pub user: UserId,
    /// How long, 1..=2592000 seconds; until `room.unban` when absent.
    #[serde(default)]
    pub seconds: Option<u64>,
}

/// `room.bans` arguments: one page of the ban list, ordered by user id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BanList {
    /// The room.
    pub room: RoomId,
    /// Start after this user (the previous page's `next`).
    #[serde(default)]
    pub cursor: Option<UserId>,
    /// Page size, 1..=100 (default 50).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// One ban.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BanView {
    /// The banned user.
    pub user: UserId,
    /// Unix ms when it ends; absent until lifted.
    pub until: Option<u64>,
    /// Who banned them; `null` for the app's backend (the admin API).
    pub by: Option<UserId>,
}

/// The `ok` of `room.bans`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BanPage {
    /// The bans on this page.
    pub bans: Vec<BanView>,
    /// The cursor of the next page; absent on the last one.
    pub next: Option<UserId>,
}

/// The `moderation` event, and one entry of a room's audit list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moderation {
    /// `chat_mute`, `chat_unmute`, `kick`, `ban`, `unban`, `seat_kick`, `admin_set`,
    /// `admin_unset`, `transfer`, `close`, `reopen`.
    pub action: String,
    /// Whom it concerns.
    pub user: Option<UserId>,
    /// Who did it; absent for the server (an expiry).
    pub by: Option<UserId>,
    /// Until when it holds (unix ms), for timed penalties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    /// When it happened (unix ms).
    pub at: u64,
}
/// What the app's backend does to a user in a room (`POST /admin/rooms/{id}/moderation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendAction {
    /// Take the user out of the room (banned too when `seconds` is given).
    Kick,
    /// Ban the user, for `seconds` or until lifted, taking them out if present.
    Ban,
    /// Lift a ban.
    Unban,
    /// Stop the user chatting, for `seconds` or until lifted.
    Mute,
    /// Lift a chat mute.
    Unmute,
}

/// The app backend's moderation of one user in a room; the link carries it as
/// `RoomCmd::Moderate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendModeration {
    /// What to do.
    pub action: BackendAction,
    /// To whom.
    pub user: UserId,
    /// How long a ban or mute holds (`kick`: the ban that comes with it), 1..=2,592,000;
    /// absent: until lifted (`kick`: no ban).
    #[serde(default)]
    pub seconds: Option<u64>,
}
