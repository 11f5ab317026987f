//! Moderation rules: chat mutes, kicks and bans with their expiry, and the ban list. Each
//! action is a `moderation` event to the room and an entry in the room's audit list.

use std::ops::Bound;

use protocol::client::moderation::{MAX_BAN_PAGE, MAX_PENALTY_SECS};
use protocol::client::{BackendAction, BackendModeration, BanPage, BanView, RoleChange};
use protocol::{ErrorCode, UserId};

use super::durable::{MAX_BANS, MAX_MUTES, Penalty};
use super::manage::entry;
use super::seats::Cause;
use super::{
    Applied, Evicted, Moderation, Presence, Rejected, RoomState, Sequenced, TargetSpend, rejected,
};

/// Ban-list page size when none is asked for.
const DEFAULT_BAN_PAGE: u32 = 50;

/// The end of a penalty of `seconds` from `now`; `None` (until lifted) without a duration.
fn until(seconds: Option<u64>, now: u64) -> Result<Option<u64>, Rejected> {
    match seconds {
        None => Ok(None),
        Some(s) if (1..=MAX_PENALTY_SECS).contains(&s) => Ok(Some(now.saturating_add(s * 1000))),
        Some(_) => Err(rejected(
            ErrorCode::BadRequest,
            "seconds must be 1..=2592000 (30 days), or absent for no end",
        )),
    }
}

impl RoomState {
    /// Records a moderation action: a sequenced event and an audit entry.
    fn moderated(&mut self, applied: &mut Applied, m: Moderation) {
        applied.durable_changed = true;
        self.durable.audit(m.clone());
        self.push(applied, Sequenced::Moderation(m));
    }

    /// The owner or an admin stops `target` chatting, for `seconds` or until lifted. The
    /// target need not be present: the mute waits for them (`spend`: the lifetime spend the
    /// actor read for a target whose spend the room does not know, for the VIP protection).
    ///
    /// # Errors
    /// `FORBIDDEN` (an admin on the owner or an admin); `VIP_PROTECTED` (an admin on a
    /// protected VIP); `UNAVAILABLE` when the target's spend is unknown and could not be read;
    /// `BAD_REQUEST` for a bad duration, for oneself, or past the bound of mutes.
    pub fn chat_mute(
        &mut self,
        actor: &UserId,
        target: &UserId,
        seconds: Option<u64>,
        spend: &TargetSpend,
        now: u64,
    ) -> Result<Applied, Rejected> {
        self.require_over(actor, target)?;
        self.require_unprotected(actor, target, spend)?;
        self.mute(Some(actor), target, seconds, now)
    }

    /// Mutes `target` for `seconds` (or until lifted), by `by` (`None`: the app's backend).
    fn mute(
        &mut self,
        by: Option<&UserId>,
        target: &UserId,
        seconds: Option<u64>,
        now: u64,
    ) -> Result<Applied, Rejected> {
        let until = until(seconds, now)?;
        if !self.durable.mutes.contains_key(target) && self.durable.mutes.len() >= MAX_MUTES {
            return Err(rejected(
                ErrorCode::BadRequest,
                "too many chat mutes in this room",
            ));
        }
        let penalty = Penalty {
            until,
            by: by.cloned(),
        };
        self.durable.mutes.insert(target.clone(), penalty);
        let mut applied = Applied::default();
        self.moderated(
            &mut applied,
            entry("chat_mute", Some(target), by, until, now),
        );
        Ok(applied)
    }

    /// Lifts `target`'s chat mute, if any, by `by`.
    fn unmute(&mut self, by: Option<&UserId>, target: &UserId, now: u64) -> Applied {
        let mut applied = Applied::default();
        if self.durable.mutes.remove(target).is_some() {
            self.moderated(
                &mut applied,
                entry("chat_unmute", Some(target), by, None, now),
            );
        }
        applied
    }

    /// Lifts `target`'s ban, if any, by `by`.
    fn unban(&mut self, by: Option<&UserId>, target: &UserId, now: u64) -> Applied {
        let mut applied = Applied::default();
        if self.durable.bans.remove(target).is_some() {
            self.moderated(&mut applied, entry("unban", Some(target), by, None, now));
        }
        applied
    }

    /// The app's backend (the admin API) kicks, bans or mutes `m.user`, or lifts a ban or a
    /// mute: as the owner could, over anyone but the owner, and regardless of VIP protection
    /// (a perk against the room's staff, not the platform). Recorded with no `by`.
    ///
    /// # Errors
    /// `FORBIDDEN` on the owner; `USER_NOT_IN_ROOM` for a kick of a non-member; `BAD_REQUEST`
    /// for a bad duration or past the bound of bans or mutes.
    pub fn backend_moderate(
        &mut self,
        m: &BackendModeration,
        now: u64,
    ) -> Result<Applied, Rejected> {
        let target = &m.user;
        if *target == self.durable.owner {
            return Err(rejected(
                ErrorCode::Forbidden,
                "not on the room's owner: close the room or transfer it",
            ));
        }
        match m.action {
            BackendAction::Mute => self.mute(None, target, m.seconds, now),
            BackendAction::Unmute => Ok(self.unmute(None, target, now)),
            BackendAction::Unban => Ok(self.unban(None, target, now)),
            BackendAction::Kick => {
                self.check_target_member(target)?;
                self.kick_or_ban(None, target, m.seconds.map(Some), "kick", now)
            }
            BackendAction::Ban => self.kick_or_ban(None, target, Some(m.seconds), "ban", now),
        }
    }

    /// Checks a ban's bound and duration (`ban`: `Some(seconds)` to ban), then removes and
    /// bans as [`Self::remove_and_ban`].
    fn kick_or_ban(
        &mut self,
        by: Option<&UserId>,
        target: &UserId,
        ban: Option<Option<u64>>,
        action: &str,
        now: u64,
    ) -> Result<Applied, Rejected> {
        let ban = match ban {
            Some(seconds) => {
                self.check_ban_room(target)?;
                Some(until(seconds, now)?)
            }
            None => None,
        };
        Ok(self.remove_and_ban(by, target, ban, action, now))
    }

    /// The owner or an admin lifts a chat mute (none: nothing happens).
    ///
    /// # Errors
    /// `FORBIDDEN`.
    pub fn chat_unmute(
        &mut self,
        actor: &UserId,
        target: &UserId,
        now: u64,
    ) -> Result<Applied, Rejected> {
        self.require_over(actor, target)?;
        Ok(self.unmute(Some(actor), target, now))
    }

    /// Takes `target` out of the room for `action`: seat freed, `member.leave` and
    /// `room.left` with reason `kicked`.
    fn remove_for(
        &mut self,
        applied: &mut Applied,
        by: Option<&UserId>,
        target: &UserId,
        now: u64,
    ) {
        if let Some(m) = self.take_out(applied, target, by, Cause::Admin, "kicked") {
            applied
                .presence
                .push(Presence::Leave(target.clone(), "kicked"));
            if let Some(at) = m.at {
                applied.evicted.push(Evicted {
                    user: target.clone(),
                    at,
                    reason: "kicked",
                });
            } else {
                // An away member has no connection to tell: remembered, so that a gateway's
                // rejoin for a move under way does not undo the kick.
                let kicked = self.kicked_away.get_or_insert_with(Box::default);
                kicked.retain(|_, t| now.saturating_sub(*t) <= super::KICK_MEMORY_MS);
                kicked.insert(target.clone(), now);
            }
        }
    }

    /// The owner or an admin removes a member, banning them for `ban_seconds` if given
    /// (`spend`: as for [`Self::chat_mute`]).
    ///
    /// # Errors
    /// `FORBIDDEN`; `VIP_PROTECTED` (an admin on a protected VIP); `UNAVAILABLE` when the
    /// target's spend is unknown and could not be read; `USER_NOT_IN_ROOM`; `BAD_REQUEST` for
    /// a bad duration.
    pub fn room_kick(
        &mut self,
        actor: &UserId,
        target: &UserId,
        ban_seconds: Option<u64>,
        spend: &TargetSpend,
        now: u64,
    ) -> Result<Applied, Rejected> {
        self.require_over(actor, target)?;
        self.require_unprotected(actor, target, spend)?;
        self.check_target_member(target)?;
        self.kick_or_ban(Some(actor), target, ban_seconds.map(Some), "kick", now)
    }

    /// Takes `target` out (if present), bans them when `ban` is given (until its time, or
    /// until lifted), and records `action`.
    fn remove_and_ban(
        &mut self,
        by: Option<&UserId>,
        target: &UserId,
        ban: Option<Option<u64>>,
        action: &str,
        now: u64,
    ) -> Applied {
        let mut applied = Applied::default();
        self.remove_for(&mut applied, by, target, now);
        if let Some(until) = ban {
            let penalty = Penalty {
                until,
                by: by.cloned(),
            };
            self.durable.bans.insert(target.clone(), penalty);
            // A banned admin (only the owner can ban one) is staff no more: the role goes with
            // the ban, announced, and does not come back with an unban.
            if self.durable.admins.contains(target) {
                self.durable.admins.retain(|a| a != target);
                self.push(
                    &mut applied,
                    Sequenced::Role(RoleChange {
                        user: target.clone(),
                        role: "member".into(),
                        by: by.cloned(),
                    }),
                );
                self.withdraw_invites_by(&mut applied, target);
            }
        }
        let until = ban.flatten();
        self.moderated(&mut applied, entry(action, Some(target), by, until, now));
        applied
    }

    fn check_ban_room(&self, target: &UserId) -> Result<(), Rejected> {
        if !self.durable.bans.contains_key(target) && self.durable.bans.len() >= MAX_BANS {
            return Err(rejected(
                ErrorCode::BadRequest,
                "too many bans in this room",
            ));
        }
        Ok(())
    }

    /// The owner or an admin bans a user, for `seconds` or until lifted, removing them if
    /// present (`spend`: as for [`Self::chat_mute`]). A banned user's join answers `BANNED`,
    /// from any gateway.
    ///
    /// # Errors
    /// `FORBIDDEN`; `VIP_PROTECTED` (an admin on a protected VIP); `UNAVAILABLE` when the
    /// target's spend is unknown and could not be read; `BAD_REQUEST` for a bad duration or
    /// past the bound of bans.
    pub fn room_ban(
        &mut self,
        actor: &UserId,
        target: &UserId,
        seconds: Option<u64>,
        spend: &TargetSpend,
        now: u64,
    ) -> Result<Applied, Rejected> {
        self.require_over(actor, target)?;
        self.require_unprotected(actor, target, spend)?;
        self.kick_or_ban(Some(actor), target, Some(seconds), "ban", now)
    }

    /// The owner or an admin lifts a ban (none: nothing happens).
    ///
    /// # Errors
    /// `FORBIDDEN`.
    pub fn room_unban(
        &mut self,
        actor: &UserId,
        target: &UserId,
        now: u64,
    ) -> Result<Applied, Rejected> {
        self.require_staff(actor, "only the owner or an admin lifts bans")?;
        Ok(self.unban(Some(actor), target, now))
    }

    /// One page of the bans in force, by user id after `cursor`.
    ///
    /// # Errors
    /// `FORBIDDEN`; `BAD_REQUEST` for a limit outside 1..=100.
    pub fn room_bans(
        &self,
        actor: &UserId,
        cursor: Option<&UserId>,
        limit: Option<u32>,
        now: u64,
    ) -> Result<BanPage, Rejected> {
        self.require_staff(actor, "only the owner or an admin sees the ban list")?;
        let limit = limit.unwrap_or(DEFAULT_BAN_PAGE);
        if !(1..=MAX_BAN_PAGE).contains(&limit) {
            return Err(rejected(ErrorCode::BadRequest, "limit must be 1..=100"));
        }
        let start = cursor.map_or(Bound::Unbounded, Bound::Excluded);
        let mut bans: Vec<BanView> = self
            .durable
            .bans
            .range::<UserId, _>((start, Bound::Unbounded))
            .filter(|(_, p)| p.holds(now))
            .take(limit as usize + 1)
            .map(|(u, p)| BanView {
                user: u.clone(),
                until: p.until,
                by: p.by.clone(),
            })
            .collect();
        let next = if bans.len() > limit as usize {
            bans.truncate(limit as usize);
            bans.last().map(|b| b.user.clone())
        } else {
            None
        };
        Ok(BanPage { bans, next })
    }

    /// Ends the chat mutes (announced, by the server) and bans (quietly) whose time is up.
    pub(super) fn expire_penalties(&mut self, applied: &mut Applied, now: u64) {
        let ended: Vec<UserId> = self
            .durable
            .mutes
            .iter()
            .filter(|(_, p)| !p.holds(now))
            .map(|(u, _)| u.clone())
            .collect();
        for u in ended {
            self.durable.mutes.remove(&u);
            let m = Moderation {
                action: "chat_unmute".into(),
                user: Some(u),
                by: None,
                until: None,
                at: now,
            };
            applied.durable_changed = true;
            self.push(applied, Sequenced::Moderation(m));
        }
        let before = self.durable.bans.len();
        self.durable.bans.retain(|_, p| p.holds(now));
        applied.durable_changed |= self.durable.bans.len() != before;
    }
}
