//! Invitations to a PK between two rooms: the staff of one room invite another room, whose
//! staff accept or decline. The gateway that took the client's op carries each step to the
//! room it concerns (`RoomCmd::Pk`, see `gateway/src/pk.rs`); the rooms only check and keep.
//! The invited room keeps its pending invitations (at most [`MAX_PK_INVITES`], each until it
//! lapses) in its durable PK state, and tells its staff with the volatile, targeted
//! `pk.invite`; an accepted one starts the PK in both rooms as the app's backend's match does.

use bytes::Bytes;
use protocol::client::{PK_INVITE_TTL_MS, PkCmd, PkDeclined, PkInvite, PkInvited, PkReply};
use protocol::{ErrorCode, UserId};

use super::{Applied, RoomState, json, rejected};

/// Most invitations a room keeps pending at once.
pub const MAX_PK_INVITES: usize = 8;

/// How soon a room may invite the same room again while its invitation is pending (ms): a new
/// one replaces it, but each tells the staff, so they come at most this often.
pub const PK_REINVITE_MS: u64 = 3_000;

impl RoomState {
    /// One step of an invitation, by `by` at `now`: the `ok` JSON and the change.
    ///
    /// # Errors
    /// - `Invite`: `NOT_IN_ROOM` (the caller is not a member), `FORBIDDEN` (not the owner or
    ///   an admin), `PK_ON`, `ROOM_CLOSED`, `BAD_REQUEST` (the room itself, a bad length).
    /// - `Invited`: `ROOM_CLOSED`, `PK_ON`, `BAD_REQUEST` (from itself, too many pending),
    ///   `RATE_LIMITED` (the same room invited it less than [`PK_REINVITE_MS`] ago).
    /// - `Accept`, `Decline`: `NOT_IN_ROOM`, `FORBIDDEN`, `NO_SUCH_REQUEST` (never made,
    ///   answered, or gone), `REQUEST_EXPIRED`; `Accept` also `PK_ON`.
    pub fn pk_cmd(
        &mut self,
        by: &UserId,
        cmd: &PkCmd,
        now: u64,
    ) -> Result<(Bytes, Applied), super::Rejected> {
        let empty = || Bytes::from_static(b"{}");
        match cmd {
            PkCmd::Invite(args) => {
                self.pk_invite(by, args)?;
                Ok((empty(), Applied::default()))
            }
            PkCmd::Invited(inv) => Ok((empty(), self.pk_invited(inv, now)?)),
            PkCmd::Accept(reply) => {
                self.pk_staff_member(by, "only the owner or an admin accepts a PK")?;
                self.require_no_pk(super::pk_link::PK_ON)?;
                let (inv, applied) = self.take_invite(reply, now)?;
                Ok((json(&inv), applied))
            }
            PkCmd::Decline(reply) => {
                self.pk_staff_member(by, "only the owner or an admin declines a PK")?;
                let (inv, applied) = self.take_invite(reply, now)?;
                Ok((json(&inv), applied))
            }
            PkCmd::Declined(d) => Ok((empty(), self.pk_declined(d))),
        }
    }

    /// `NOT_IN_ROOM` unless `user` is a member (through any connection), `FORBIDDEN` unless
    /// the owner or an admin.
    fn pk_staff_member(&self, user: &UserId, what: &'static str) -> Result<(), super::Rejected> {
        if self.member(user).is_none() {
            return Err(rejected(ErrorCode::NotInRoom, "join the room first"));
        }
        self.require_staff(user, what)
    }

    /// May `by` invite `args.vs` from this room?
    fn pk_invite(&self, by: &UserId, args: &PkInvite) -> Result<(), super::Rejected> {
        self.pk_staff_member(by, "only the owner or an admin invites to a PK")?;
        if self.durable.closed {
            return Err(rejected(ErrorCode::RoomClosed, "the room is closed"));
        }
        self.require_no_pk(super::pk_link::PK_ON)?;
        self.require_other_room(&args.vs)?;
        args.checked_seconds()
            .map(|_| ())
            .map_err(|m| rejected(ErrorCode::BadRequest, m))
    }

    /// Keeps `inv` (replacing an earlier one from the same room) and tells the staff present.
    fn pk_invited(&mut self, inv: &PkInvited, now: u64) -> Result<Applied, super::Rejected> {
        if self.durable.closed {
            return Err(rejected(
                ErrorCode::RoomClosed,
                "the invited room is closed",
            ));
        }
        self.require_no_pk("a PK is on in the invited room")?;
        self.require_other_room(&inv.from)?;
        let pks = self.durable.pk.get_or_insert_with(Box::default);
        pks.invites.retain(|i| i.expires_at > now);
        let sent_at = |i: &PkInvited| i.expires_at.saturating_sub(PK_INVITE_TTL_MS);
        if pks
            .invites
            .iter()
            .any(|i| i.from == inv.from && now < sent_at(i).saturating_add(PK_REINVITE_MS))
        {
            return Err(rejected(
                ErrorCode::RateLimited,
                "this room was invited from there moments ago",
            ));
        }
        pks.invites.retain(|i| i.from != inv.from);
        if pks.invites.len() >= MAX_PK_INVITES {
            return Err(rejected(
                ErrorCode::BadRequest,
                "the invited room has too many pending PK invitations; try later",
            ));
        }
        pks.invites.push(inv.clone());
        let mut applied = Applied::changed();
        let staff = self.staff_present();
        self.direct(&mut applied, staff, "pk.invite", inv);
        Ok(applied)
    }

    /// Takes the invitation `reply` answers out of the pending ones.
    fn take_invite(
        &mut self,
        reply: &PkReply,
        now: u64,
    ) -> Result<(PkInvited, Applied), super::Rejected> {
        let none = || rejected(ErrorCode::NoSuchRequest, "no such PK invitation");
        let pks = self.durable.pk.as_mut().ok_or_else(none)?;
        let at = pks
            .invites
            .iter()
            .position(|i| i.link == reply.link)
            .ok_or_else(none)?;
        let inv = pks.invites.remove(at);
        if inv.expires_at <= now {
            return Err(rejected(
                ErrorCode::RequestExpired,
                "the PK invitation lapsed",
            ));
        }
        Ok((inv, Applied::changed()))
    }

    /// Tells the staff present that the room their invitation went to declined it.
    fn pk_declined(&self, d: &PkDeclined) -> Applied {
        let mut applied = Applied::default();
        self.direct(&mut applied, self.staff_present(), "pk.declined", d);
        applied
    }

    /// The pending invitations (for the admin API's view).
    pub fn pk_invites(&self) -> &[PkInvited] {
        self.durable.pk.as_ref().map_or(&[], |p| &p.invites)
    }
}
