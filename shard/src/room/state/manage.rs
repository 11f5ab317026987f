//! Room management rules: room info, the password, admins, ownership transfer, closing and
//! reopening.

use protocol::client::manage::{MAX_ADMINS, MAX_SLOW_MODE_S};
use protocol::client::{BackendManage, RoleChange, RoomInfo, RoomUpdate};
use protocol::{ErrorCode, UserId};

use super::durable::{check_cover, check_notice, check_password, check_title};
use super::seats::Cause;
use super::{
    Applied, Evicted, Moderation, PlatformClose, Rejected, Role, RoomState, Sequenced, TargetSpend,
    rejected,
};

impl RoomState {
    /// The owner or an admin changes the room's info; only the fields that differ are
    /// announced (`room.update`). Reserving seat 0 for the owner frees it from anyone else:
    /// that is taking its holder off it, so an admin may reserve it only from a user the admin
    /// could `seat.kick`.
    ///
    /// # Errors
    /// `FORBIDDEN`; `BAD_REQUEST` for a field that fails its check; for an admin reserving seat
    /// 0 held by another admin `FORBIDDEN`, by a protected VIP `VIP_PROTECTED` (nothing changes
    /// then).
    pub fn room_update(
        &mut self,
        user: &UserId,
        u: &RoomUpdate,
        spend: &TargetSpend,
    ) -> Result<Applied, Rejected> {
        self.require_staff(user, "only the owner or an admin changes the room")?;
        if u.host_seat == Some(true)
            && !self.durable.host_seat
            && let Some(holder) = self.durable.seats[0].user.as_ref()
            && *holder != self.durable.owner
            && holder != user
        {
            self.require_over(user, holder)?;
            self.require_unprotected(user, holder, spend)?;
        }
        check_update(u)?;
        Ok(self.apply_update(Some(user), u))
    }

    /// Applies a checked update made by `by` (`None`: the app's backend): the fields that
    /// differ change and are announced; reserving seat 0 frees it from anyone but the owner.
    fn apply_update(&mut self, by: Option<&UserId>, u: &RoomUpdate) -> Applied {
        let d = &mut self.durable;
        let unchanged = RoomInfo {
            by: by.cloned(),
            ..RoomInfo::default()
        };
        let mut info = unchanged.clone();
        if let Some(t) = u.title.as_ref().filter(|t| **t != d.title) {
            d.title.clone_from(t);
            info.title = Some(t.clone());
        }
        if let Some(n) = u.notice.as_ref().filter(|n| **n != d.notice) {
            d.notice.clone_from(n);
            info.notice = Some(n.clone());
        }
        if let Some(c) = u.cover.as_ref().filter(|c| **c != d.cover) {
            d.cover.clone_from(c);
            info.cover = Some(c.clone());
        }
        if let Some(m) = u.seat_mode.filter(|m| *m != d.seat_mode) {
            d.seat_mode = m;
            info.seat_mode = Some(m);
        }
        if let Some(h) = u.host_seat.filter(|h| *h != d.host_seat) {
            d.host_seat = h;
            info.host_seat = Some(h);
        }
        if let Some(m) = u.chat_muted.filter(|m| *m != d.chat_muted) {
            d.chat_muted = m;
            info.chat_muted = Some(m);
        }
        if let Some(s) = u.slow_mode.filter(|s| *s != d.slow_mode) {
            d.slow_mode = s;
            info.slow_mode = Some(s);
            // A new interval starts afresh: nobody waits for a line sent under the old one.
            self.last_chat = None;
        }
        let mut applied = Applied::default();
        if info == unchanged {
            return applied;
        }
        applied.durable_changed = true;
        let host_taken = self.durable.host_seat
            && self.durable.seats[0]
                .user
                .as_ref()
                .is_some_and(|u| *u != self.durable.owner);
        self.push(&mut applied, Sequenced::RoomUpdate(info));
        if host_taken {
            self.free_seat(&mut applied, 0, by, Cause::Admin, Some("host_seat"));
        }
        applied
    }

    /// The owner or an admin sets, changes or (with `None`) removes the password. Members
    /// present stay.
    ///
    /// # Errors
    /// `FORBIDDEN`; `BAD_REQUEST` for a bad password.
    pub fn room_lock(
        &mut self,
        user: &UserId,
        password: Option<&str>,
    ) -> Result<Applied, Rejected> {
        self.require_staff(user, "only the owner or an admin locks the room")?;
        if let Some(p) = password {
            check_password(p)?;
        }
        let mut applied = Applied::default();
        if self.durable.password.as_deref() == password {
            return Ok(applied);
        }
        self.durable.password = password.map(str::to_owned);
        applied.durable_changed = true;
        let info = RoomInfo {
            by: Some(user.clone()),
            locked: Some(password.is_some()),
            ..RoomInfo::default()
        };
        self.push(&mut applied, Sequenced::RoomUpdate(info));
        Ok(applied)
    }

    /// The owner makes a member an admin (at most 20), or takes the role back.
    ///
    /// # Errors
    /// `FORBIDDEN` for anyone but the owner; `BAD_REQUEST` for the owner themselves or past
    /// the cap; `USER_NOT_IN_ROOM` when granting to a non-member.
    pub fn room_admin(
        &mut self,
        user: &UserId,
        target: &UserId,
        admin: bool,
        now: u64,
    ) -> Result<Applied, Rejected> {
        self.require_owner(user, "only the owner grants or revokes the admin role")?;
        if *target == self.durable.owner {
            return Err(rejected(ErrorCode::BadRequest, "the owner is not an admin"));
        }
        let mut applied = Applied::default();
        let is_admin = self.role(target) == Role::Admin;
        if is_admin == admin {
            return Ok(applied);
        }
        if admin {
            self.check_target_member(target)?;
            if self.durable.admins.len() >= MAX_ADMINS {
                return Err(rejected(
                    ErrorCode::BadRequest,
                    "a room has at most 20 admins",
                ));
            }
            // Staff are not muted in chat, and take seats directly: no request or invitation
            // of theirs waits (the staff see the request cancelled).
            self.drop_pending(&mut applied, target);
            self.durable.admins.push(target.clone());
            self.durable.mutes.remove(target);
        } else {
            self.durable.admins.retain(|a| a != target);
            self.withdraw_invites_by(&mut applied, target);
        }
        applied.durable_changed = true;
        let role = if admin { "admin" } else { "member" };
        self.push(
            &mut applied,
            Sequenced::Role(RoleChange {
                user: target.clone(),
                role: role.into(),
                by: Some(user.clone()),
            }),
        );
        let action = if admin { "admin_set" } else { "admin_unset" };
        self.durable
            .audit(entry(action, Some(target), Some(user), None, now));
        Ok(applied)
    }

    /// The owner hands the room to another member, who stops being an admin (and muted); the
    /// old owner becomes a plain member. With a host seat, the old owner leaves seat 0.
    ///
    /// # Errors
    /// `FORBIDDEN`; `BAD_REQUEST` for oneself; `USER_NOT_IN_ROOM`.
    pub fn room_transfer(
        &mut self,
        user: &UserId,
        target: &UserId,
        now: u64,
    ) -> Result<Applied, Rejected> {
        self.require_owner(user, "only the owner transfers the room")?;
        if target == user {
            return Err(rejected(ErrorCode::BadRequest, "you own the room already"));
        }
        self.check_target_member(target)?;
        let mut applied = Applied::changed();
        self.drop_pending(&mut applied, target);
        self.durable.admins.retain(|a| a != target);
        self.durable.mutes.remove(target);
        self.durable.bans.remove(target);
        self.durable.owner = target.clone();
        // The directory shows the owner's region: now the new owner's (unknown when their
        // profile has none), never the old owner's.
        self.durable.owner_region = self
            .profile_of(target)
            .and_then(|p| p.region.as_deref().map(Into::into));
        for (who, role) in [(target, "owner"), (user, "member")] {
            self.push(
                &mut applied,
                Sequenced::Role(RoleChange {
                    user: who.clone(),
                    role: role.into(),
                    by: Some(user.clone()),
                }),
            );
        }
        self.withdraw_invites_by(&mut applied, user);
        if self.durable.host_seat && self.durable.seats[0].user.as_ref() == Some(user) {
            self.free_seat(
                &mut applied,
                0,
                Some(user),
                Cause::Server,
                Some("host_changed"),
            );
        }
        self.durable
            .audit(entry("transfer", Some(target), Some(user), None, now));
        Ok(applied)
    }

    /// The owner closes the room: every member is taken out (`room.left` reason `closed`),
    /// seats are emptied, requests and invitations dropped; joins answer `ROOM_CLOSED` until
    /// the owner reopens it (`room.open`). The room and its settings, bans and audit stay.
    ///
    /// # Errors
    /// `FORBIDDEN`.
    pub fn room_close(&mut self, user: &UserId, now: u64) -> Result<Applied, Rejected> {
        self.require_owner(user, "only the owner closes the room")?;
        Ok(self.close(Some(user), now))
    }

    /// Closes the room for `by` (`None`: the app's backend): seats freed, requests and
    /// invitations dropped, every member taken out (`room.left` `closed`).
    fn close(&mut self, by: Option<&UserId>, now: u64) -> Applied {
        let mut applied = Applied::changed();
        self.durable.closed = true;
        for i in 0..self.durable.seats.len() {
            if self.durable.seats[i].user.is_some() {
                self.free_seat(&mut applied, i, by, Cause::Admin, Some("closed"));
            }
        }
        self.durable.requests.clear();
        self.durable.invites.clear();
        let members: Vec<UserId> = self.members.keys().cloned().collect();
        for m in members {
            if let Some(at) = self.remove_member(&m).and_then(|m| m.at) {
                applied.evicted.push(Evicted {
                    user: m,
                    at,
                    reason: "closed",
                });
            }
        }
        self.durable.audit(entry("close", None, by, None, now));
        applied
    }

    /// The owner reopens a closed room (no membership needed; an open room is left as is).
    ///
    /// # Errors
    /// `FORBIDDEN`.
    pub fn room_open(&mut self, user: &UserId, now: u64) -> Result<Applied, Rejected> {
        self.require_owner(user, "only the owner reopens the room")?;
        if self.durable.platform_closed.is_some() {
            return Err(rejected(
                ErrorCode::Forbidden,
                "the platform closed this room; only the platform reopens it",
            ));
        }
        Ok(self.reopen(Some(user), now))
    }

    /// Reopens a closed room for `by` (`None`: the app's backend); an open room is left as
    /// is.
    fn reopen(&mut self, by: Option<&UserId>, now: u64) -> Applied {
        let mut applied = Applied::default();
        if self.durable.closed || self.durable.platform_closed.is_some() {
            self.durable.closed = false;
            self.durable.platform_closed = None;
            applied.durable_changed = true;
            self.durable.audit(entry("reopen", None, by, None, now));
        }
        applied
    }

    /// The app's backend closes the room (the owner cannot reopen it), reopens it, changes its
    /// info past the staff's rights (seat 0 reserved from anyone, VIP protection aside), or
    /// starts or stops a PK.
    /// Recorded and announced with no `by`. Closing a room the backend closed already only
    /// replaces the reason.
    ///
    /// # Errors
    /// `BAD_REQUEST` for an update field that fails its check or a reason that is too long.
    pub fn backend_manage(&mut self, m: &BackendManage, now: u64) -> Result<Applied, Rejected> {
        m.check()
            .map_err(|why| rejected(ErrorCode::BadRequest, why))?;
        match m {
            BackendManage::Close { reason } => {
                let again = self.durable.platform_closed.is_some();
                self.durable.platform_closed = Some(Box::new(PlatformClose {
                    reason: reason.clone(),
                    at: now,
                }));
                if again {
                    return Ok(Applied::changed());
                }
                Ok(self.close(None, now))
            }
            BackendManage::Open => Ok(self.reopen(None, now)),
            BackendManage::Update(u) => {
                check_update(u)?;
                Ok(self.apply_update(None, u))
            }
            BackendManage::PkStart(p) => self.pk_start(None, p, now).map(|(_, applied)| applied),
            BackendManage::PkStop => self.pk_stop(None, now),
            BackendManage::PkLink(p) => self.pk_link_start(p, now).map(|(_, applied)| applied),
        }
    }
}

/// Checks an update's fields (title, notice, cover, slow-mode interval).
fn check_update(u: &RoomUpdate) -> Result<(), Rejected> {
    if let Some(t) = &u.title {
        check_title(t)?;
    }
    if let Some(n) = &u.notice {
        check_notice(n)?;
    }
    if let Some(c) = &u.cover {
        check_cover(c)?;
    }
    if u.slow_mode.is_some_and(|s| s > MAX_SLOW_MODE_S) {
        return Err(rejected(
            ErrorCode::BadRequest,
            "slow_mode must be 0..=300 seconds",
        ));
    }
    Ok(())
}

/// An audit entry (and `moderation` event body).
pub(super) fn entry(
    action: &str,
    user: Option<&UserId>,
    by: Option<&UserId>,
    until: Option<u64>,
    at: u64,
) -> Moderation {
    Moderation {
        action: action.to_owned(),
        user: user.cloned(),
        by: by.cloned(),
        until,
        at,
    }
}
