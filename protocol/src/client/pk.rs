//! PK: a timed gift battle between two teams of a room's seats, red and blue. The staff starts
//! it (`pk.start`) and may stop it early (`pk.stop`, whose `d` is `{room}`); the value of the
//! gifts the users seated on a team's seats receive while it is on is that team's score. The
//! room announces the start and the end as sequenced events (`pk.start`, `pk.end`), and the
//! scores as a volatile `pk.score` at a bounded rate; a joiner's snapshot carries the PK that
//! is on.
//!
//! A PK may also be between two rooms (section 16.6 of PROTOCOL.md): the app's backend matches
//! them ([`PkLink`]), each room is one side, and its events name the other room (`vs`,
//! [`PkVs`]). In each room, `red` is that room's score and `blue` the other room's.

use serde::{Deserialize, Serialize};

use crate::ids::{RoomId, UserId};

/// A PK's length when `pk.start` names none (seconds).
pub const DEFAULT_PK_SECONDS: u32 = 300;
/// The shortest PK (seconds).
pub const MIN_PK_SECONDS: u32 = 30;
/// The longest PK (seconds).
pub const MAX_PK_SECONDS: u32 = 3600;

/// `pk.start` arguments: the teams (seat indexes) and the length. Without teams, the seats
/// other than the host seat are split in two halves: the first red, the second blue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PkStart {
    /// The room.
    pub room: RoomId,
    /// Seconds, 30..=3600 (300 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u32>,
    /// The red team's seats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub red: Option<Vec<u32>>,
    /// The blue team's seats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blue: Option<Vec<u32>>,
}

/// A PK's length in seconds, checked (`pk.start`, `pk.invite`, the backend's match): 300 when
/// absent, else 30..=3600.
///
/// # Errors
/// The rule broken, as a message for `BAD_REQUEST`.
pub fn checked_pk_seconds(seconds: Option<u32>) -> Result<u32, &'static str> {
    match seconds.unwrap_or(DEFAULT_PK_SECONDS) {
        s @ MIN_PK_SECONDS..=MAX_PK_SECONDS => Ok(s),
        _ => Err("seconds must be 30..=3600"),
    }
}

impl PkStart {
    /// The length in seconds, checked ([`checked_pk_seconds`]).
    ///
    /// # Errors
    /// The rule broken, as a message for `BAD_REQUEST`.
    pub fn checked_seconds(&self) -> Result<u32, &'static str> {
        checked_pk_seconds(self.seconds)
    }
}

/// The `ok` of `pk.start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PkStarted {
    /// The PK's number in the room (1, 2, …).
    pub pk: u64,
    /// When it ends (unix ms).
    pub ends_at: u64,
}

/// The sequenced `pk.start` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PkStartEvent {
    /// The PK's number in the room.
    pub pk: u64,
    /// The red team's seats.
    pub red_seats: Vec<u32>,
    /// The blue team's seats.
    pub blue_seats: Vec<u32>,
    /// When it ends (unix ms).
    pub ends_at: u64,
    /// Who started it (`null`: the app's backend).
    pub by: Option<UserId>,
    /// The other room, in a PK between two rooms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vs: Option<PkVs>,
}

/// The volatile `pk.score` event (latest wins), and the PK in a joiner's snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PkScore {
    /// The PK's number in the room.
    pub pk: u64,
    /// The red team's score (coins).
    pub red: i64,
    /// The blue team's score (coins).
    pub blue: i64,
    /// When it ends (unix ms).
    pub ends_at: u64,
    /// The red team's seats (in the snapshot only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub red_seats: Option<Vec<u32>>,
    /// The blue team's seats (in the snapshot only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blue_seats: Option<Vec<u32>>,
    /// The other room, in a PK between two rooms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vs: Option<PkVs>,
}

/// The sequenced `pk.end` event: the scores, the winner and each team's top sender.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PkEnd {
    /// The PK's number in the room.
    pub pk: u64,
    /// The red team's score (coins).
    pub red: i64,
    /// The blue team's score (coins).
    pub blue: i64,
    /// `red`, `blue` or `draw`.
    pub winner: String,
    /// Who sent the red team the most coins (absent: nobody, or robots only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub red_top: Option<UserId>,
    /// Who sent the blue team the most coins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blue_top: Option<UserId>,
    /// `time` (it ran its length) or `stopped` (the staff ended it early).
    pub reason: String,
    /// Who stopped it (absent when it ran its length or the app's backend stopped it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<UserId>,
    /// The other room, in a PK between two rooms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vs: Option<PkVs>,
}

/// The other room of a PK between two rooms, as its events name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PkVs {
    /// The other room.
    pub room: RoomId,
    /// The match's id, the same in both rooms.
    pub link: String,
}

/// The longest match id of a PK between two rooms, in bytes.
pub const MAX_PK_LINK_BYTES: usize = 64;

/// A PK between two rooms as the app's backend starts it in one of them (`POST /admin/pk`
/// starts it in both): this room is red, `vs` is blue, and both end at `ends_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PkLink {
    /// The match's id, the same in both rooms (1..=64 bytes of `[A-Za-z0-9_.:-]`).
    pub link: String,
    /// The other room.
    pub vs: RoomId,
    /// When it ends (unix ms), the same in both rooms.
    pub ends_at: u64,
}

impl PkLink {
    /// Checks the match id.
    ///
    /// # Errors
    /// The rule broken, as a message for `BAD_REQUEST`.
    pub fn check(&self) -> Result<(), &'static str> {
        let ok = |c: char| c.is_ascii_alphanumeric() || "_.:-".contains(c);
        if self.link.is_empty() || self.link.len() > MAX_PK_LINK_BYTES || !self.link.chars().all(ok)
        {
            return Err("link must be 1..=64 characters of A-Z a-z 0-9 _ . : -");
        }
        Ok(())
    }
}

/// How long a PK invitation between two rooms waits for its answer (ms).
pub const PK_INVITE_TTL_MS: u64 = 30_000;

/// `pk.invite` arguments: the staff of `room` invite `vs` to a PK between the two rooms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PkInvite {
    /// The inviting room.
    pub room: RoomId,
    /// The invited room.
    pub vs: RoomId,
    /// Seconds, 30..=3600 (300 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u32>,
}

impl PkInvite {
    /// The length in seconds, checked as `pk.start`'s.
    ///
    /// # Errors
    /// The rule broken, as a message for `BAD_REQUEST`.
    pub fn checked_seconds(&self) -> Result<u32, &'static str> {
        checked_pk_seconds(self.seconds)
    }
}

/// `pk.accept` and `pk.decline` arguments: the invited room's staff answer an invitation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PkReply {
    /// The invited room.
    pub room: RoomId,
    /// The invitation (its match id).
    pub link: String,
}

/// The `ok` of `pk.invite`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PkInviteSent {
    /// The invitation's match id: the PK's `vs.link` once accepted.
    pub link: String,
    /// When it lapses unanswered (unix ms).
    pub expires_at: u64,
}

/// An invitation as the invited room keeps it and its staff get it (the volatile, targeted
/// `pk.invite` event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PkInvited {
    /// The match id.
    pub link: String,
    /// The inviting room.
    pub from: RoomId,
    /// Who invited (its owner or an admin).
    pub by: UserId,
    /// The PK's length (seconds).
    pub seconds: u32,
    /// When it lapses unanswered (unix ms).
    pub expires_at: u64,
}

/// An invitation declined, as the inviting room's staff are told (the volatile, targeted
/// `pk.declined` event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PkDeclined {
    /// The match id.
    pub link: String,
    /// The room that declined (the event's `room` is the inviting room).
    pub vs: RoomId,
    /// Who declined.
    pub by: UserId,
}

/// The gateway's steps of an invitation between two rooms (the link's `RoomCmd::Pk`): the
/// gateway that took the client's op sends each to the room it concerns, as the caller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PkCmd {
    /// May the caller invite from this room? (A member of it, its owner or an admin; no PK on.)
    Invite(PkInvite),
    /// Keep this invitation and tell the staff (the invited room).
    Invited(PkInvited),
    /// The caller accepts the invitation: answered with it (the invited room).
    Accept(PkReply),
    /// The caller declines the invitation: answered with it (the invited room).
    Decline(PkReply),
    /// Tell the staff their invitation was declined (the inviting room).
    Declined(PkDeclined),
}
