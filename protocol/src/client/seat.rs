//! Mic seats: taking, leaving and moving, the owner's and admins' seat controls, seat
//! requests (apply mode), invitations, the publish report, and the events they cause.

use serde::{Deserialize, Serialize};

use crate::client::room::SeatView;
use crate::ids::{RoomId, UserId};

/// `seat.take` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatTake {
    /// The room.
    pub room: RoomId,
    /// The seat index; the first free seat when absent.
    #[serde(default)]
    pub seat: Option<u32>,
}

/// The `ok` of `seat.take`, `seat.move`, `seat.approve` and `seat.invite.accept`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatTaken {
    /// The seat now held (by the user the operation seated).
    pub seat: u32,
}

/// `seat.leave` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatLeave {
    /// The room.
    pub room: RoomId,
}

/// `seat.move` arguments: move oneself, or (owner/admin) another seated user, to a seat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatMove {
    /// The room.
    pub room: RoomId,
    /// The seat to move to.
    pub seat: u32,
    /// Whom to move; the sender when absent.
    #[serde(default)]
    pub user: Option<UserId>,
    /// When the seat is held by someone else, the two users change seats (owner or admin
    /// only) in place of `SEAT_TAKEN`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub swap: bool,
}

/// `seat.lock` arguments: the owner or an admin locks or unlocks one seat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatLock {
    /// The room.
    pub room: RoomId,
    /// The seat index.
    pub seat: u32,
    /// `true` locks the seat, `false` unlocks it.
    pub locked: bool,
}

/// `seat.lock_all` arguments: the owner or an admin locks or unlocks every seat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatLockAll {
    /// The room.
    pub room: RoomId,
    /// `true` locks, `false` unlocks.
    pub locked: bool,
}

/// `seat.mute` arguments: the owner or an admin mutes a seat (its user cannot unmute it), or
/// the seated user mutes or unmutes their own seat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatMute {
    /// The room.
    pub room: RoomId,
    /// The seat index.
    pub seat: u32,
    /// `true` mutes, `false` unmutes.
    pub muted: bool,
}

/// `seat.kick` arguments: the owner or an admin takes a user off their seat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatKick {
    /// The room.
    pub room: RoomId,
    /// The seated user.
    pub user: UserId,
}

/// `seat.count` arguments: the owner or an admin changes how many seats the room has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatCount {
    /// The room.
    pub room: RoomId,
    /// The new seat count, 1..=20.
    pub seats: u32,
}

/// `seat.request` arguments: ask the owner and admins for a seat (apply mode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatRequest {
    /// The room.
    pub room: RoomId,
    /// The seat wanted; any free seat when absent.
    #[serde(default)]
    pub seat: Option<u32>,
}

/// The `ok` of `seat.request` and `seat.invite`: when the request or invitation expires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    /// Unix time in milliseconds.
    pub expires_at: u64,
}

/// `seat.approve` / `seat.reject` arguments: answer a user's pending request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatAnswer {
    /// The room.
    pub room: RoomId,
    /// The requester.
    pub user: UserId,
}

/// `seat.invite` arguments: the owner or an admin invites a member to a seat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatInvite {
    /// The room.
    pub room: RoomId,
    /// The member invited.
    pub user: UserId,
    /// The seat offered; any free seat when absent.
    #[serde(default)]
    pub seat: Option<u32>,
}

/// `mic.publishing` arguments: the seated client reports whether its audio is published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MicPublishing {
    /// The room.
    pub room: RoomId,
    /// Whether audio is being published now.
    pub on: bool,
}

/// One pending seat request, as `seat.requests` lists it and `seat.request` announces it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestView {
    /// The requester.
    pub user: UserId,
    /// The seat asked for, if any.
    pub seat: Option<u32>,
    /// Unix ms when it expires.
    pub expires_at: u64,
}

/// The `ok` of `seat.requests`: pending requests, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestList {
    /// The requests.
    pub requests: Vec<RequestView>,
}

/// `seat.invite` event to the invitee.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InviteView {
    /// The invitee.
    pub user: UserId,
    /// Who invited.
    pub by: UserId,
    /// The seat offered, if one was named.
    pub seat: Option<u32>,
    /// Unix ms when it expires.
    pub expires_at: u64,
}

/// How a seat request or invitation ended (`seat.request.update`, `seat.invite.update`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answered {
    /// The requester or invitee.
    pub user: UserId,
    /// `approved`, `rejected`, `cancelled`, `expired` (requests); `accepted`, `rejected`,
    /// `expired` (invitations).
    pub state: String,
    /// Who answered; absent when the requester cancelled or the server expired it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<UserId>,
    /// The seat taken, when it ended with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seat: Option<u32>,
}

/// The `seat.update` event: the changed seat in full, who acted and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeatUpdate {
    /// The seat as it is now.
    #[serde(flatten)]
    pub seat: SeatView,
    /// Who acted: the user themselves, an owner/admin, or absent for the server.
    pub by: Option<UserId>,
    /// `self`, `admin` or `server`.
    pub cause: String,
    /// Why, when the cause alone does not say: `kicked`, `moved`, `approved`, `invited`,
    /// `seat_removed`, `publish_timeout`, `left_room`, `closed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
