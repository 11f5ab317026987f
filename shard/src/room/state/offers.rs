//! Seat requests (apply mode) and invitations: asked, listed, answered once, cancelled,
//! expired with an event to whom they concern, and dropped when their user leaves.

use protocol::client::{RequestList, SeatMode};
use protocol::{ErrorCode, UserId};

use super::durable::{Invite, MAX_INVITES, MAX_REQUESTS, SeatReq};
use super::seats::{Act, Cause};
use super::{Applied, Rejected, Role, RoomState, answered, invite_view, rejected, request_view};

impl RoomState {
    /// A member asks for a seat (apply mode); a second request replaces the first. The owner
    /// and admins present get `seat.request`.
    ///
    /// # Errors
    /// `BAD_REQUEST` in free mode, from the owner or an admin, from a seated member, or past
    /// the pending bound; `NO_SUCH_SEAT`; `FORBIDDEN` for the host's seat.
    pub fn seat_request(
        &mut self,
        user: &UserId,
        seat: Option<u32>,
        now: u64,
    ) -> Result<(u64, Applied), Rejected> {
        if self.durable.seat_mode != SeatMode::Apply {
            return Err(rejected(
                ErrorCode::BadRequest,
                "seats in this room are free: seat.take",
            ));
        }
        if self.role(user) != Role::Member {
            return Err(rejected(
                ErrorCode::BadRequest,
                "the owner and admins take seats directly",
            ));
        }
        if self.seat_of(user).is_some() {
            return Err(rejected(ErrorCode::BadRequest, "already seated: seat.move"));
        }
        if let Some(i) = seat {
            self.seat(i)?;
            if self.durable.host_seat && i == 0 {
                return Err(rejected(ErrorCode::Forbidden, "seat 0 is the owner's"));
            }
        }
        let replacing = self.durable.requests.iter().any(|r| r.user == *user);
        if !replacing && self.durable.requests.len() >= MAX_REQUESTS {
            return Err(rejected(
                ErrorCode::BadRequest,
                "too many pending seat requests; try later",
            ));
        }
        self.durable.requests.retain(|r| r.user != *user);
        let req = SeatReq {
            user: user.clone(),
            seat,
            expires_at: now.saturating_add(self.rules.request_ttl_ms),
        };
        let mut applied = Applied::changed();
        let staff = self.staff_present();
        self.direct(&mut applied, staff, "seat.request", &request_view(&req));
        let expires_at = req.expires_at;
        self.durable.requests.push(req);
        Ok((expires_at, applied))
    }

    /// The requester withdraws their request.
    ///
    /// # Errors
    /// `NO_SUCH_REQUEST`.
    pub fn seat_request_cancel(&mut self, user: &UserId) -> Result<Applied, Rejected> {
        let Some(pos) = self.durable.requests.iter().position(|r| r.user == *user) else {
            return Err(rejected(
                ErrorCode::NoSuchRequest,
                "no pending seat request",
            ));
        };
        self.durable.requests.remove(pos);
        let mut applied = Applied::changed();
        let staff = self.staff_present();
        self.direct(
            &mut applied,
            staff,
            "seat.request.update",
            &answered(user, "cancelled", None, None),
        );
        Ok(applied)
    }

    /// The pending requests, oldest first (owner and admins).
    ///
    /// # Errors
    /// `FORBIDDEN`.
    pub fn seat_requests(&self, user: &UserId, now: u64) -> Result<RequestList, Rejected> {
        self.require_staff(user, "only the owner or an admin sees seat requests")?;
        Ok(RequestList {
            requests: self
                .durable
                .requests
                .iter()
                .filter(|r| r.expires_at > now)
                .map(request_view)
                .collect(),
        })
    }

    /// The pending, unexpired request of `target`.
    fn live_request(&self, target: &UserId, now: u64) -> Result<SeatReq, Rejected> {
        match self.durable.requests.iter().find(|r| r.user == *target) {
            None => Err(rejected(
                ErrorCode::NoSuchRequest,
                "no pending seat request from that user",
            )),
            Some(r) if r.expires_at <= now => Err(rejected(
                ErrorCode::RequestExpired,
                "the seat request expired",
            )),
            Some(r) => Ok(r.clone()),
        }
    }

    /// The owner or an admin seats a requester: on the seat asked for, or the first free one.
    /// The first answer wins; a second finds no request.
    ///
    /// # Errors
    /// `FORBIDDEN`; `NO_SUCH_REQUEST`; `REQUEST_EXPIRED`; `USER_NOT_IN_ROOM` for a requester
    /// who is not in the room (a request saved before an unplanned stop outlives its
    /// membership until it expires); the seat checks (the request stays).
    pub fn seat_approve(
        &mut self,
        actor: &UserId,
        target: &UserId,
        now: u64,
    ) -> Result<(u32, Applied), Rejected> {
        self.require_staff(actor, "only the owner or an admin approves seat requests")?;
        let req = self.live_request(target, now)?;
        self.check_target_member(target)?;
        let seat = self.choose_seat(target, req.seat)?;
        let mut applied = Applied::default();
        self.place(
            &mut applied,
            target,
            seat,
            Act {
                by: Some(actor),
                cause: Cause::Admin,
                reason: Some("approved"),
            },
            now,
        );
        let to = self.staff_and(target);
        self.direct(
            &mut applied,
            to,
            "seat.request.update",
            &answered(target, "approved", Some(actor), Some(seat)),
        );
        Ok((seat, applied))
    }

    /// The owner or an admin turns a request down.
    ///
    /// # Errors
    /// `FORBIDDEN`; `NO_SUCH_REQUEST`.
    pub fn seat_reject(&mut self, actor: &UserId, target: &UserId) -> Result<Applied, Rejected> {
        self.require_staff(actor, "only the owner or an admin rejects seat requests")?;
        let Some(pos) = self.durable.requests.iter().position(|r| r.user == *target) else {
            return Err(rejected(
                ErrorCode::NoSuchRequest,
                "no pending seat request from that user",
            ));
        };
        self.durable.requests.remove(pos);
        let mut applied = Applied::changed();
        let to = self.staff_and(target);
        self.direct(
            &mut applied,
            to,
            "seat.request.update",
            &answered(target, "rejected", Some(actor), None),
        );
        Ok(applied)
    }

    /// The owner or an admin invites a member to a seat (a new invitation replaces the
    /// previous one); the invitee gets `seat.invite`.
    ///
    /// # Errors
    /// `FORBIDDEN`; `USER_NOT_IN_ROOM`; `BAD_REQUEST` for a seated invitee; the seat checks.
    pub fn seat_invite(
        &mut self,
        actor: &UserId,
        target: &UserId,
        seat: Option<u32>,
        now: u64,
    ) -> Result<(u64, Applied), Rejected> {
        self.require_staff(actor, "only the owner or an admin invites to a seat")?;
        self.check_target_member(target)?;
        if self.seat_of(target).is_some() {
            return Err(rejected(
                ErrorCode::BadRequest,
                "that user is seated already",
            ));
        }
        // The cap before the seat (the documented order), counted without changing anything:
        // the target's own invitation is replaced, and expired ones (kept only to answer
        // `REQUEST_EXPIRED`) make room first.
        let pending = self
            .durable
            .invites
            .iter()
            .filter(|i| i.user != *target && !i.expired)
            .count();
        if pending >= MAX_INVITES {
            return Err(rejected(
                ErrorCode::BadRequest,
                "too many pending seat invitations; try later",
            ));
        }
        if let Some(i) = seat {
            self.check_seat_for(target, i)?;
        }
        self.durable.invites.retain(|i| i.user != *target);
        if self.durable.invites.len() >= MAX_INVITES {
            self.durable.invites.retain(|i| !i.expired);
        }
        let invite = Invite {
            user: target.clone(),
            by: actor.clone(),
            seat,
            expires_at: now.saturating_add(self.rules.invite_ttl_ms),
            expired: false,
        };
        let mut applied = Applied::changed();
        self.direct(
            &mut applied,
            vec![target.clone()],
            "seat.invite",
            &invite_view(&invite),
        );
        let expires_at = invite.expires_at;
        self.durable.invites.push(invite);
        Ok((expires_at, applied))
    }

    /// The invitee's invitation, if it is still good.
    fn live_invite(&self, user: &UserId, now: u64) -> Result<Invite, Rejected> {
        match self.durable.invites.iter().find(|i| i.user == *user) {
            None => Err(rejected(
                ErrorCode::NoSuchRequest,
                "no invitation to a seat",
            )),
            Some(i) if i.expired || i.expires_at <= now => Err(rejected(
                ErrorCode::RequestExpired,
                "the invitation expired",
            )),
            Some(i) => Ok(i.clone()),
        }
    }

    /// The invitee takes the seat offered (or the first free one), whatever the seat mode.
    ///
    /// # Errors
    /// `NO_SUCH_REQUEST`; `REQUEST_EXPIRED`; the seat checks (the invitation stays).
    pub fn invite_accept(&mut self, user: &UserId, now: u64) -> Result<(u32, Applied), Rejected> {
        let invite = self.live_invite(user, now)?;
        let seat = self.choose_seat(user, invite.seat)?;
        let mut applied = Applied::default();
        self.place(
            &mut applied,
            user,
            seat,
            Act {
                by: Some(&invite.by),
                cause: Cause::Admin,
                reason: Some("invited"),
            },
            now,
        );
        let staff = self.staff_present();
        self.direct(
            &mut applied,
            staff,
            "seat.invite.update",
            &answered(user, "accepted", Some(&invite.by), Some(seat)),
        );
        Ok((seat, applied))
    }

    /// The invitee declines.
    ///
    /// # Errors
    /// `NO_SUCH_REQUEST`; `REQUEST_EXPIRED`.
    pub fn invite_reject(&mut self, user: &UserId, now: u64) -> Result<Applied, Rejected> {
        let invite = self.live_invite(user, now)?;
        self.durable.invites.retain(|i| i.user != *user);
        let mut applied = Applied::changed();
        let staff = self.staff_present();
        self.direct(
            &mut applied,
            staff,
            "seat.invite.update",
            &answered(user, "rejected", Some(&invite.by), None),
        );
        Ok(applied)
    }

    /// Drops `user`'s pending request and invitation: they left, or became staff (who take
    /// seats directly). The staff are told of each that was still live, and of an invitation
    /// the invitee too (when still present), so that no client shows one pending.
    pub(super) fn drop_pending(&mut self, applied: &mut Applied, user: &UserId) {
        if let Some(pos) = self.durable.requests.iter().position(|r| r.user == *user) {
            self.durable.requests.remove(pos);
            applied.durable_changed = true;
            let staff = self.staff_present();
            self.direct(
                applied,
                staff,
                "seat.request.update",
                &answered(user, "cancelled", None, None),
            );
        }
        if let Some(pos) = self.durable.invites.iter().position(|i| i.user == *user) {
            let invite = self.durable.invites.remove(pos);
            applied.durable_changed = true;
            if !invite.expired {
                let to = self.staff_and(user);
                self.direct(
                    applied,
                    to,
                    "seat.invite.update",
                    &answered(user, "cancelled", Some(&invite.by), None),
                );
            }
        }
    }

    /// Withdraws the invitations `inviter` made: they are staff no more, and an invitation is
    /// a staff act. The invitee of each one still pending and the staff are told.
    pub(super) fn withdraw_invites_by(&mut self, applied: &mut Applied, inviter: &UserId) {
        let (gone, kept): (Vec<Invite>, Vec<Invite>) = std::mem::take(&mut self.durable.invites)
            .into_iter()
            .partition(|i| i.by == *inviter);
        self.durable.invites = kept;
        for i in gone {
            applied.durable_changed = true;
            if !i.expired {
                let to = self.staff_and(&i.user);
                self.direct(
                    applied,
                    to,
                    "seat.invite.update",
                    &answered(&i.user, "withdrawn", Some(inviter), None),
                );
            }
        }
    }

    /// Expires requests and invitations whose time is up, telling the requester or invitee
    /// and the staff; drops invitations expired long enough ago.
    pub(super) fn expire_pending(&mut self, applied: &mut Applied, now: u64) {
        let (gone, kept): (Vec<SeatReq>, Vec<SeatReq>) = std::mem::take(&mut self.durable.requests)
            .into_iter()
            .partition(|r| r.expires_at <= now);
        self.durable.requests = kept;
        for r in gone {
            applied.durable_changed = true;
            let to = self.staff_and(&r.user);
            self.direct(
                applied,
                to,
                "seat.request.update",
                &answered(&r.user, "expired", None, None),
            );
        }
        let mut expired_now = Vec::new();
        for i in &mut self.durable.invites {
            if !i.expired && i.expires_at <= now {
                i.expired = true;
                expired_now.push((i.user.clone(), i.by.clone()));
            }
        }
        for (user, by) in expired_now {
            applied.durable_changed = true;
            let to = self.staff_and(&user);
            self.direct(
                applied,
                to,
                "seat.invite.update",
                &answered(&user, "expired", Some(&by), None),
            );
        }
        let before = self.durable.invites.len();
        self.durable.invites.retain(|i| {
            !i.expired
                || i.expires_at
                    .saturating_add(super::durable::EXPIRED_INVITE_KEEP_MS)
                    > now
        });
        applied.durable_changed |= self.durable.invites.len() != before;
    }
}
