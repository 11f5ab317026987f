//! Seat rules: take, leave and move; the owner's and admins' locks, mutes, kicks and seat
//! count; requests in apply mode; invitations; and the publish deadline with the reports
//! (client or RTC webhook) that meet it.

use protocol::client::SeatMode;
use protocol::link::RtcKind;
use protocol::{ErrorCode, UserId};

use super::durable::{RtcSeen, Seat};
use super::{
    Applied, Moderation, Rejected, Role, RoomState, SeatUpdate, Sequenced, TargetSpend, rejected,
};
use protocol::client::RoomInfo;

/// Who caused a seat change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cause {
    /// The seated user.
    Own,
    /// The owner or an admin.
    Admin,
    /// The server (a deadline, the room closing).
    Server,
}

impl Cause {
    fn as_str(self) -> &'static str {
        match self {
            Self::Own => "self",
            Self::Admin => "admin",
            Self::Server => "server",
        }
    }
}

/// Who seats someone and why (for [`RoomState::place`]'s events).
pub(super) struct Act<'a> {
    pub(super) by: Option<&'a UserId>,
    pub(super) cause: Cause,
    pub(super) reason: Option<&'static str>,
}

impl RoomState {
    /// Publishes seat `i` as it is now.
    pub(super) fn seat_event(
        &mut self,
        applied: &mut Applied,
        i: usize,
        by: Option<&UserId>,
        cause: Cause,
        reason: Option<&str>,
    ) {
        applied.durable_changed = true;
        let ev = SeatUpdate {
            seat: self.seat_view(i),
            by: by.cloned(),
            cause: cause.as_str().to_owned(),
            reason: reason.map(str::to_owned),
        };
        self.push(applied, Sequenced::SeatUpdate(ev));
    }

    /// Empties seat `i`; an admin's mute stays with the seat, its user's own mute goes.
    pub(super) fn free_seat(
        &mut self,
        applied: &mut Applied,
        i: usize,
        by: Option<&UserId>,
        cause: Cause,
        reason: Option<&str>,
    ) {
        let s = &mut self.durable.seats[i];
        s.user = None;
        s.muted = s.admin_muted;
        s.publishing = false;
        s.publish_by = None;
        self.seat_event(applied, i, by, cause, reason);
    }

    /// Seats `user` on `target` (moving them if seated): the publish deadline starts unless
    /// the RTC provider already reported them publishing; a user moved keeps the deadline
    /// they had, as with `seat.move`. Their pending request and invitation are done with.
    pub(super) fn place(
        &mut self,
        applied: &mut Applied,
        user: &UserId,
        target: u32,
        act: Act<'_>,
        now: u64,
    ) {
        let Act { by, cause, reason } = act;
        let mut publishing = self.durable.rtc.get(user).is_some_and(|r| r.publishing);
        let mut kept_by = None;
        if let Some(old) = self.seat_of(user) {
            let seat = &self.durable.seats[old as usize];
            publishing |= seat.publishing;
            kept_by = seat.publish_by;
            self.free_seat(applied, old as usize, by, cause, Some("moved"));
        }
        let deadline = self.rules.publish_deadline_ms;
        let s = &mut self.durable.seats[target as usize];
        s.user = Some(user.clone());
        s.publishing = publishing;
        s.publish_by = if publishing {
            None
        } else {
            kept_by.or((deadline > 0).then(|| now.saturating_add(deadline)))
        };
        self.durable.requests.retain(|r| r.user != *user);
        self.durable.invites.retain(|i| i.user != *user);
        self.seat_event(applied, target as usize, by, cause, reason);
    }

    /// The owner and admins present, and `user`: who hears how `user`'s request or invitation
    /// ended.
    pub(super) fn staff_and(&self, user: &UserId) -> Vec<UserId> {
        let mut to = self.staff_present();
        if !to.contains(user) {
            to.push(user.clone());
        }
        to
    }

    /// Whether `user` may sit on seat `i` (it exists, is free and unlocked, and is not the
    /// host's seat reserved for someone else).
    pub(super) fn check_seat_for(&self, user: &UserId, i: u32) -> Result<(), Rejected> {
        let seat = self.seat(i)?;
        if self.durable.host_seat && i == 0 && *user != self.durable.owner {
            return Err(rejected(ErrorCode::Forbidden, "seat 0 is the owner's"));
        }
        if seat.user.is_some() {
            return Err(rejected(ErrorCode::SeatTaken, "seat is taken"));
        }
        if seat.locked {
            return Err(rejected(ErrorCode::SeatLocked, "seat is locked"));
        }
        Ok(())
    }

    pub(super) fn seat(&self, i: u32) -> Result<&Seat, Rejected> {
        self.durable
            .seats
            .get(i as usize)
            .ok_or(rejected(ErrorCode::NoSuchSeat, "no such seat"))
    }

    /// The seat for `user`: `want`, or the first free one (the owner's host seat first).
    pub(super) fn choose_seat(&self, user: &UserId, want: Option<u32>) -> Result<u32, Rejected> {
        if let Some(i) = want {
            self.check_seat_for(user, i)?;
            return Ok(i);
        }
        if self.durable.host_seat
            && *user == self.durable.owner
            && self.check_seat_for(user, 0).is_ok()
        {
            return Ok(0);
        }
        (0..self.durable.seats.len() as u32)
            .find(|i| self.check_seat_for(user, *i).is_ok())
            .ok_or(rejected(ErrorCode::NoFreeSeat, "no free seat"))
    }

    /// A member takes seat `want`, or the first free one; taking another seat moves them. In
    /// apply mode only the owner and admins take seats directly.
    ///
    /// # Errors
    /// `FORBIDDEN` for a member in apply mode or on the host's seat; `NO_SUCH_SEAT`,
    /// `SEAT_TAKEN`, `SEAT_LOCKED`, `NO_FREE_SEAT`.
    pub fn seat_take(
        &mut self,
        user: &UserId,
        want: Option<u32>,
        now: u64,
    ) -> Result<(u32, Applied), Rejected> {
        if self.durable.seat_mode == SeatMode::Apply && self.role(user) == Role::Member {
            return Err(rejected(
                ErrorCode::Forbidden,
                "seats in this room are taken by request (seat.request)",
            ));
        }
        let current = self.seat_of(user);
        if current.is_some() && (want.is_none() || want == current) {
            return Ok((current.unwrap_or_default(), Applied::default()));
        }
        let target = self.choose_seat(user, want)?;
        let mut applied = Applied::default();
        self.place(
            &mut applied,
            user,
            target,
            Act {
                by: Some(user),
                cause: Cause::Own,
                reason: None,
            },
            now,
        );
        Ok((target, applied))
    }

    /// A member leaves the seat it holds (no event when it holds none).
    pub fn seat_leave(&mut self, user: &UserId) -> Applied {
        let mut applied = Applied::default();
        if let Some(i) = self.seat_of(user) {
            self.free_seat(&mut applied, i as usize, Some(user), Cause::Own, None);
        }
        applied
    }

    /// A seated member moves to seat `to`, or the owner or an admin moves `target` there. The
    /// seat must be free (nobody is pushed off), unless `swap`: then its holder takes the
    /// moved user's seat (a swap, `seat_swap`).
    ///
    /// # Errors
    /// `NOT_SEATED`; `USER_NOT_IN_ROOM`; `FORBIDDEN` for moving someone else without the
    /// right; the seat checks of `seat.take`; those of a swap.
    pub fn seat_move(
        &mut self,
        actor: &UserId,
        target: Option<&UserId>,
        to: u32,
        swap: bool,
    ) -> Result<(u32, Applied), Rejected> {
        let (who, cause) = match target {
            Some(t) if t != actor => {
                self.require_over(actor, t)?;
                self.check_target_member(t)?;
                (t.clone(), Cause::Admin)
            }
            _ => (actor.clone(), Cause::Own),
        };
        let Some(from) = self.seat_of(&who) else {
            return Err(rejected(ErrorCode::NotSeated, "that user holds no seat"));
        };
        if from == to {
            return Ok((to, Applied::default()));
        }
        if swap && let Some(holder) = self.seat(to)?.user.clone() {
            let applied = self.seat_swap(actor, (&who, from), (&holder, to), cause)?;
            return Ok((to, applied));
        }
        self.check_seat_for(&who, to)?;
        let mut applied = Applied::default();
        // The deadline and publishing state move with the user.
        let old = self.durable.seats[from as usize].clone();
        self.free_seat(
            &mut applied,
            from as usize,
            Some(actor),
            cause,
            Some("moved"),
        );
        let s = &mut self.durable.seats[to as usize];
        s.user = Some(who);
        s.publishing = old.publishing;
        s.publish_by = old.publish_by;
        self.seat_event(&mut applied, to as usize, Some(actor), cause, Some("moved"));
        Ok((to, applied))
    }

    /// `a` on seat `from` and `b` on seat `to` change seats, for `actor` (the owner or an
    /// admin: the swap moves `b` too, so the actor needs the right over `b` unless it is
    /// `b`). Each user's publishing state and deadline go with them; mute flags stay with the
    /// seats, less the old holder's own mute, as when a seat is freed. Both seats must be
    /// unlocked, and seat 0 of a host-seat room stays the owner's.
    ///
    /// # Errors
    /// `FORBIDDEN` (no right over `b`, or seat 0 of a host-seat room for someone else);
    /// `SEAT_LOCKED`.
    fn seat_swap(
        &mut self,
        actor: &UserId,
        (a, from): (&UserId, u32),
        (b, to): (&UserId, u32),
        cause: Cause,
    ) -> Result<Applied, Rejected> {
        if b != actor {
            self.require_over(actor, b)?;
        }
        let owner = &self.durable.owner;
        if self.durable.host_seat && ((to == 0 && a != owner) || (from == 0 && b != owner)) {
            return Err(rejected(ErrorCode::Forbidden, "seat 0 is the owner's"));
        }
        if self.seat(from)?.locked || self.seat(to)?.locked {
            return Err(rejected(ErrorCode::SeatLocked, "seat is locked"));
        }
        let (f, t) = (from as usize, to as usize);
        let seats = &mut self.durable.seats;
        let (moved, held) = (seats[f].clone(), seats[t].clone());
        for (i, came) in [(f, held), (t, moved)] {
            let s = &mut seats[i];
            s.user = came.user;
            s.publishing = came.publishing;
            s.publish_by = came.publish_by;
            s.muted = s.admin_muted;
        }
        let mut applied = Applied::default();
        for i in [f, t] {
            self.seat_event(&mut applied, i, Some(actor), cause, Some("swapped"));
        }
        Ok(applied)
    }

    /// The owner or an admin locks or unlocks seat `seat`, or every seat (`None`). A locked
    /// seat cannot be taken; whoever sits on it stays. Seats already so change nothing.
    ///
    /// # Errors
    /// `FORBIDDEN`; `NO_SUCH_SEAT`.
    pub fn seat_lock(
        &mut self,
        user: &UserId,
        seat: Option<u32>,
        locked: bool,
    ) -> Result<Applied, Rejected> {
        self.require_staff(user, "only the owner or an admin locks seats")?;
        let seats: Vec<usize> = match seat {
            Some(i) => {
                self.seat(i)?;
                vec![i as usize]
            }
            None => (0..self.durable.seats.len()).collect(),
        };
        let mut applied = Applied::default();
        for i in seats {
            if self.durable.seats[i].locked != locked {
                self.durable.seats[i].locked = locked;
                self.seat_event(&mut applied, i, Some(user), Cause::Admin, None);
            }
        }
        Ok(applied)
    }

    /// Mutes or unmutes seat `seat`. The owner or an admin mutes any seat (its user cannot
    /// unmute it; an admin not the owner's or another admin's, nor a protected VIP's); the
    /// seated user mutes and unmutes their own, unless an admin muted it (`spend`: as for
    /// [`Self::chat_mute`]).
    ///
    /// # Errors
    /// `NO_SUCH_SEAT`; `FORBIDDEN`; `VIP_PROTECTED`; `UNAVAILABLE` when the holder's spend is
    /// unknown and could not be read.
    pub fn seat_mute(
        &mut self,
        user: &UserId,
        seat: u32,
        muted: bool,
        spend: &TargetSpend,
    ) -> Result<Applied, Rejected> {
        let s = self.seat(seat)?.clone();
        let own = s.user.as_ref() == Some(user);
        let role = self.role(user);
        let as_admin = !own || (role == Role::Owner && s.admin_muted);
        if as_admin {
            self.require_staff(
                user,
                "only the seated user, the owner or an admin mutes a seat",
            )?;
            if let Some(holder) = &s.user
                && holder != user
            {
                self.require_over(user, holder)?;
                // Lifting a mute is not protected against; imposing one is.
                if muted {
                    self.require_unprotected(user, holder, spend)?;
                }
            }
        } else if !muted && s.admin_muted {
            return Err(rejected(
                ErrorCode::Forbidden,
                "muted by the owner or an admin: only they unmute this seat",
            ));
        }
        let (new_muted, new_admin) = if as_admin {
            (muted, muted)
        } else {
            (muted, s.admin_muted)
        };
        let mut applied = Applied::default();
        if (new_muted, new_admin) != (s.muted, s.admin_muted) {
            let slot = &mut self.durable.seats[seat as usize];
            slot.muted = new_muted;
            slot.admin_muted = new_admin;
            let cause = if as_admin { Cause::Admin } else { Cause::Own };
            self.seat_event(&mut applied, seat as usize, Some(user), cause, None);
        }
        Ok(applied)
    }

    /// The owner or an admin takes `target` off their seat (`spend`: as for
    /// [`Self::chat_mute`]).
    ///
    /// # Errors
    /// `FORBIDDEN`; `VIP_PROTECTED` (an admin on a protected VIP); `UNAVAILABLE` when the
    /// target's spend is unknown and could not be read; `USER_NOT_IN_ROOM`; `NOT_SEATED`.
    pub fn seat_kick(
        &mut self,
        actor: &UserId,
        target: &UserId,
        spend: &TargetSpend,
        now: u64,
    ) -> Result<Applied, Rejected> {
        self.require_over(actor, target)?;
        self.require_unprotected(actor, target, spend)?;
        self.check_target_member(target)?;
        let Some(i) = self.seat_of(target) else {
            return Err(rejected(ErrorCode::NotSeated, "that user holds no seat"));
        };
        let mut applied = Applied::default();
        self.free_seat(
            &mut applied,
            i as usize,
            Some(actor),
            Cause::Admin,
            Some("kicked"),
        );
        self.durable.audit(Moderation {
            action: "seat_kick".into(),
            user: Some(target.clone()),
            by: Some(actor.clone()),
            until: None,
            at: now,
        });
        Ok(applied)
    }

    /// The owner or an admin sets the number of seats; shrinking frees the removed seats
    /// (cause `admin`, reason `seat_removed`) before they go. Freeing a seat is taking its
    /// holder off it, so an admin's shrink may only remove seats of users the admin could
    /// `seat.kick`.
    ///
    /// # Errors
    /// `FORBIDDEN`; `BAD_REQUEST` outside 1..=20; for an admin removing the seat of the owner
    /// or another admin `FORBIDDEN`, of a protected VIP `VIP_PROTECTED`.
    pub fn seat_count(
        &mut self,
        user: &UserId,
        seats: u32,
        spend: &TargetSpend,
    ) -> Result<Applied, Rejected> {
        self.require_staff(user, "only the owner or an admin changes the seat count")?;
        super::durable::check_seat_count(seats)?;
        let n = seats as usize;
        let mut applied = Applied::default();
        if n == self.durable.seats.len() {
            return Ok(applied);
        }
        let removed = self.durable.seats.get(n..).unwrap_or_default();
        for holder in removed.iter().filter_map(|s| s.user.as_ref()) {
            if holder != user {
                self.require_over(user, holder)?;
                self.require_unprotected(user, holder, spend)?;
            }
        }
        for i in n..self.durable.seats.len() {
            if self.durable.seats[i].user.is_some() {
                self.free_seat(
                    &mut applied,
                    i,
                    Some(user),
                    Cause::Admin,
                    Some("seat_removed"),
                );
            }
        }
        self.durable.seats.resize(n, Seat::default());
        for r in &mut self.durable.requests {
            r.seat = r.seat.filter(|s| *s < seats);
        }
        for i in &mut self.durable.invites {
            i.seat = i.seat.filter(|s| *s < seats);
        }
        applied.durable_changed = true;
        let info = RoomInfo {
            by: Some(user.clone()),
            seats: Some(seats),
            ..RoomInfo::default()
        };
        self.push(&mut applied, Sequenced::RoomUpdate(info));
        Ok(applied)
    }

    /// The seated client reports its audio on or off.
    ///
    /// # Errors
    /// `NOT_SEATED`.
    pub fn mic_publishing(
        &mut self,
        user: &UserId,
        on: bool,
        now: u64,
    ) -> Result<Applied, Rejected> {
        if self.seat_of(user).is_none() {
            return Err(rejected(ErrorCode::NotSeated, "take a seat first"));
        }
        let kind = if on {
            RtcKind::Published
        } else {
            RtcKind::Unpublished
        };
        Ok(self.rtc_report(user, kind, now, Cause::Own))
    }

    /// Records that `user` published or stopped at `at` (a report older than the last one
    /// changes nothing); a seated user's deadline follows: none while publishing, `at` + T
    /// once stopped or gone. `cause` is `Own` for the client's report, `Server` for the RTC
    /// provider's.
    pub(super) fn rtc_report(
        &mut self,
        user: &UserId,
        kind: RtcKind,
        at: u64,
        cause: Cause,
    ) -> Applied {
        let mut applied = Applied::default();
        if self.durable.rtc.get(user).is_some_and(|r| r.at > at) {
            return applied;
        }
        let publishing = kind == RtcKind::Published;
        let seen = RtcSeen { publishing, at };
        if self.durable.rtc.insert(user.clone(), seen) != Some(seen) {
            applied.durable_changed = true;
        }
        if self.seat_of(user).is_none() && self.durable.rtc.len() > super::durable::MAX_RTC {
            // Bounded: the oldest report of someone without a seat goes.
            let oldest = self
                .durable
                .rtc
                .iter()
                .filter(|(u, _)| self.seat_of(u).is_none())
                .min_by_key(|(_, r)| r.at)
                .map(|(u, _)| u.clone());
            if let Some(u) = oldest {
                self.durable.rtc.remove(&u);
            }
        }
        if let Some(i) = self.seat_of(user) {
            let deadline = self.rules.publish_deadline_ms;
            let s = &mut self.durable.seats[i as usize];
            let by = (!publishing && deadline > 0).then(|| at.saturating_add(deadline));
            if s.publishing != publishing || s.publish_by != by {
                s.publishing = publishing;
                s.publish_by = by;
                let who = (cause == Cause::Own).then_some(user);
                self.seat_event(&mut applied, i as usize, who, cause, None);
            }
        }
        applied
    }

    /// Frees the seats whose user did not publish by their deadline.
    pub(super) fn expire_seats(&mut self, applied: &mut Applied, now: u64) {
        for i in 0..self.durable.seats.len() {
            if self.durable.seats[i].publish_by.is_some_and(|t| t <= now) {
                self.free_seat(applied, i, None, Cause::Server, Some("publish_timeout"));
            }
        }
    }
}
