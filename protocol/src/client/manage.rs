//! Room management: room info, the password lock, roles, ownership transfer, closing and
//! reopening, and the `room.update` / `room.role` events.

use serde::{Deserialize, Serialize};

use crate::client::room::SeatMode;
use crate::ids::{RoomId, UserId};

/// Longest room notice (announcement), in characters.
pub const MAX_NOTICE_CHARS: usize = 500;
/// Longest cover URL, in bytes.
pub const MAX_COVER_BYTES: usize = 512;
/// Most admins a room may have.
pub const MAX_ADMINS: usize = 20;

/// `room.update` arguments: the owner or an admin changes the fields given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoomUpdate {
    /// The room.
    pub room: RoomId,
    /// New title.
    #[serde(default)]
    pub title: Option<String>,
    /// New notice (announcement).
    #[serde(default)]
    pub notice: Option<String>,
    /// New cover image URL (`https://…`, or empty to clear).
    #[serde(default)]
    pub cover: Option<String>,
    /// New seat mode.
    #[serde(default)]
    pub seat_mode: Option<SeatMode>,
    /// Reserve seat 0 for the owner, or stop reserving it.
    #[serde(default)]
    pub host_seat: Option<bool>,
    /// Mute the room's chat for everyone but the owner and the admins, or lift that.
    #[serde(default)]
    pub chat_muted: Option<bool>,
    /// Slow mode: a member who is not staff sends at most one chat line this many seconds
    /// (0..=300; 0 turns it off).
    #[serde(default)]
    pub slow_mode: Option<u32>,
}

/// `room.lock` arguments: the owner or an admin sets, changes or (with `null`) removes the
/// room's password.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoomLock {
    /// The room.
    pub room: RoomId,
    /// The new password; `null` unlocks the room.
    #[serde(default)]
    pub password: Option<String>,
}

/// `room.admin` arguments: the owner makes a member an admin, or takes the role back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoomAdmin {
    /// The room.
    pub room: RoomId,
    /// The user.
    pub user: UserId,
    /// `true` makes them an admin, `false` a plain member.
    pub admin: bool,
}

/// `room.transfer` arguments: the owner hands the room to another member.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoomTransfer {
    /// The room.
    pub room: RoomId,
    /// The new owner.
    pub user: UserId,
}

/// The longest reason the app's backend gives for closing a room, in characters.
pub const MAX_CLOSE_REASON_CHARS: usize = 200;

/// What the app's backend does to a room as a whole (the admin API); the link carries it as
/// `RoomCmd::Manage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendManage {
    /// Close the room (`POST /admin/rooms/{id}/close`): every member is taken out, and the
    /// owner cannot reopen it; only the app's backend does.
    Close {
        /// Why, as the room's joiners are told (up to 200 characters; may be empty).
        reason: String,
    },
    /// Reopen the room, whoever closed it (`POST /admin/rooms/{id}/open`).
    Open,
    /// Change the room's info as `room.update` does, past the staff's rights
    /// (`PATCH /admin/rooms/{id}`); the `room.update` event's `by` is null.
    Update(RoomUpdate),
    /// Start a PK as `pk.start` does (`POST /admin/rooms/{id}/pk`); the `pk.start` event's
    /// `by` is null.
    PkStart(crate::client::PkStart),
    /// End the PK that is on (`DELETE /admin/rooms/{id}/pk`); the `pk.end` event has no `by`.
    PkStop,
    /// Start this room's side of a PK between two rooms (`POST /admin/pk` sends one to each).
    PkLink(crate::client::PkLink),
}

impl BackendManage {
    /// Checks what can be checked without the room: the close reason, shown to joiners, is
    /// one line of at most 200 characters.
    ///
    /// # Errors
    /// Why it is refused.
    pub fn check(&self) -> Result<(), &'static str> {
        match self {
            Self::Close { reason } if reason.chars().count() > MAX_CLOSE_REASON_CHARS => {
                Err("reason is longer than 200 characters")
            }
            Self::Close { reason } if !crate::text::is_clean(reason, false) => {
                Err("reason may not hold control or bidi characters")
            }
            Self::PkStart(p) => p.checked_seconds().map(|_| ()),
            Self::PkLink(p) => p.check(),
            _ => Ok(()),
        }
    }
}

/// The longest slow-mode interval, in seconds.
pub const MAX_SLOW_MODE_S: u32 = 300;

/// The `room.update` event: the fields that changed, and who changed them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomInfo {
    /// Who changed them; absent for the server.
    pub by: Option<UserId>,
    /// New title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// New notice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// New cover URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cover: Option<String>,
    /// New seat mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seat_mode: Option<SeatMode>,
    /// Whether seat 0 is the owner's alone now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_seat: Option<bool>,
    /// New seat count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seats: Option<u32>,
    /// Whether joiners need a password now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked: Option<bool>,
    /// Whether the chat is muted for everyone but the owner and the admins now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_muted: Option<bool>,
    /// The slow mode's interval now, in seconds (0: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_mode: Option<u32>,
}

/// The `room.role` event: a user's role changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleChange {
    /// The user.
    pub user: UserId,
    /// `owner`, `admin` or `member`.
    pub role: String,
    /// Who changed it; `null` for the app's backend (an admin it banned).
    pub by: Option<UserId>,
}
