//! Badges and VIP perks. A member's standing (the guards they hold and their lifetime gift
//! spend) comes from the gateway with the join and with each change; the room turns it into
//! the compact badges its events carry: `guard` when the member guards the room's owner now
//! (checked against the time on every use, so an ended guard shows nothing), `vip` the level
//! the spend reaches ([`VipRules::level`]), and `entrance` on `member.join` from a configured
//! level. A VIP at or above the protected level cannot be kicked, banned or muted by an admin:
//! only the owner may.

use std::borrow::Cow;

use protocol::client::RoomOp;
use protocol::link::{RoomCmd, Standing};
use protocol::{ErrorCode, UserId};
use serde::Deserialize;

use super::{Applied, Joined, Presence, Rejected, Role, RoomState};

/// Most VIP levels a configuration may define.
pub const MAX_VIP_LEVELS: usize = 100;

/// The VIP levels: level `n` (1-based) is reached at `thresholds[n - 1]` coins of lifetime
/// gift spend.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VipRules {
    /// Lifetime spend (coins) each level starts at, strictly ascending, all positive.
    pub thresholds: Vec<i64>,
    /// `member.join` carries `entrance: true` from this level (0: never).
    pub entrance_level: u8,
    /// From this level a member cannot be kicked, banned or muted by an admin, only by the
    /// owner (0: no protection).
    pub protected_level: u8,
}

impl Default for VipRules {
    /// Five levels, at 1,000 / 10,000 / 50,000 / 200,000 / 1,000,000 coins; the entrance from
    /// level 3, protection from admins at level 5.
    fn default() -> Self {
        Self {
            thresholds: vec![1_000, 10_000, 50_000, 200_000, 1_000_000],
            entrance_level: 3,
            protected_level: 5,
        }
    }
}

impl VipRules {
    /// The level `spent` coins reach (0: none).
    pub fn level(&self, spent: i64) -> u8 {
        let n = self.thresholds.partition_point(|t| *t <= spent);
        u8::try_from(n).unwrap_or(u8::MAX)
    }

    /// Checks the rules.
    ///
    /// # Errors
    /// A message naming the problem: too many levels, a threshold not positive or not above
    /// the one before, a perk level above the last level.
    pub fn validate(&self) -> Result<(), String> {
        if self.thresholds.len() > MAX_VIP_LEVELS {
            return Err(format!("at most {MAX_VIP_LEVELS} VIP levels"));
        }
        let mut last = 0;
        for (i, t) in self.thresholds.iter().enumerate() {
            if *t <= last {
                return Err(format!(
                    "VIP level {} starts at {t}: thresholds must be positive and ascending",
                    i + 1
                ));
            }
            last = *t;
        }
        let levels = self.thresholds.len();
        for (name, v) in [
            ("entrance_level", self.entrance_level),
            ("protected_level", self.protected_level),
        ] {
            if usize::from(v) > levels {
                return Err(format!("{name} {v} is above the last VIP level ({levels})"));
            }
        }
        Ok(())
    }
}

/// The lifetime spend the actor read from the ledger for the targets of an admin's
/// moderation whose spend the room does not know ([`RoomState::spend_reads`]): a user who is
/// not a member, a member who joined before the gateway's read of it arrived (or whose read
/// failed), a seat holder adopted after an unplanned stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpend {
    /// Nothing read: every target's spend is known, the operation needs no read, or the node
    /// has no ledger (then nobody has spent anything but what the room counted).
    NotRead,
    /// The spend the ledger holds for each target read.
    Read(Vec<(UserId, i64)>),
    /// The ledger could not be read: an admin's action on a target whose spend is unknown is
    /// refused with `UNAVAILABLE` (the protection fails closed; the owner needs no read).
    Unreadable,
}

/// A member's badges as events show them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Badges {
    /// Guards the room's owner now.
    pub guard: bool,
    /// VIP level (0: none).
    pub vip: u8,
    /// `member.join` only: the VIP entrance effect.
    pub entrance: bool,
}

impl RoomState {
    /// The VIP levels and perks this room applies (from the shard's configuration).
    pub fn set_vip_rules(&mut self, rules: std::sync::Arc<VipRules>) {
        self.vip_rules = rules;
    }

    /// `user`'s badges at `now` (none for a non-member).
    pub fn badges(&self, user: &UserId, now: u64) -> Badges {
        let Some(m) = self.members.get(user) else {
            return Badges::default();
        };
        let vip = self.vip_rules.level(m.standing().spent);
        let entrance = self.vip_rules.entrance_level > 0 && vip >= self.vip_rules.entrance_level;
        Badges {
            guard: m.standing().guards_at(&self.durable.owner, now),
            vip,
            entrance,
        }
    }

    /// Gives the member who just joined (`joined`) the standing the gateway sent with the
    /// join: kept, shown on its `member.join`, or, for a member already in the room whose
    /// badges change, with `member.update`.
    ///
    /// `None`: the gateway has not read it (yet, or its read failed): the member keeps what the
    /// room holds, and a new member's spend stays unknown until a standing change brings it.
    pub fn joined_with(
        &mut self,
        joined: &mut Joined,
        user: &UserId,
        s: Option<Standing>,
        now: u64,
    ) {
        let before = self.badges(user, now);
        if let Some(s) = s {
            joined.applied.rearm |= self.index_guards(user, &s, now);
            if let Some(m) = self.members.get_mut(user) {
                m.set_standing(s);
            }
        }
        let after = self.badges(user, now);
        let mut shown = false;
        for p in &mut joined.applied.presence {
            if let Presence::Join(u, _, b) | Presence::Update(u, _, b) = p
                && u == user
            {
                *b = after;
                shown = true;
            }
        }
        if !shown && !same(before, after) {
            let p = self.profile_of(user).cloned();
            joined
                .applied
                .presence
                .push(Presence::Update(user.clone(), p, after));
        }
    }

    /// A member's profile or standing changed (`RoomCmd::Profile` or `RoomCmd::Standing`):
    /// kept, and shown with `member.update` when what events show changes.
    ///
    /// # Errors
    /// `NOT_IN_ROOM` when `user` is not a member; `BAD_REQUEST` for another command.
    pub fn member_changed(
        &mut self,
        user: &UserId,
        cmd: &RoomCmd,
        now: u64,
    ) -> Result<Applied, Rejected> {
        match cmd {
            RoomCmd::Profile(p) => self.set_profile(user, p.clone(), now),
            RoomCmd::Standing(s) => self.set_standing(user, s.clone(), now),
            _ => Err(super::rejected(
                ErrorCode::BadRequest,
                "not a member change",
            )),
        }
    }

    /// A member's standing changed (a guard bought): kept, and shown with `member.update`
    /// when its badges change.
    ///
    /// # Errors
    /// `NOT_IN_ROOM` when `user` is not a member.
    pub fn set_standing(
        &mut self,
        user: &UserId,
        s: Standing,
        now: u64,
    ) -> Result<Applied, Rejected> {
        let before = self.badges(user, now);
        if !self.members.contains_key(user) {
            return Err(super::rejected(ErrorCode::NotInRoom, "not in this room"));
        }
        let rearm = self.index_guards(user, &s, now);
        if let Some(m) = self.members.get_mut(user) {
            m.set_standing(s);
        }
        let mut applied = self.badges_changed(user, before, now);
        applied.rearm |= rearm;
        Ok(applied)
    }

    /// Notes when the guards in `s` (of `user`, a member) end, for [`Self::expire_guards`];
    /// whether one ends before every end noted so far (the actor's next deadline moves).
    fn index_guards(&mut self, user: &UserId, s: &Standing, now: u64) -> bool {
        if !self.members.contains_key(user) {
            return false;
        }
        let first = self.guard_ends.first().map(|(t, _)| *t);
        let mut sooner = false;
        for g in s.guards.iter().filter(|g| g.until > now) {
            self.guard_ends.insert((g.until, user.clone()));
            sooner |= first.is_none_or(|f| g.until < f);
        }
        sooner
    }

    /// Guards that ended at `now` leave their holders' standing; a member whose `guard` badge
    /// (a guard of the owner) ended with them gets `member.update` without it, so rooms do not
    /// keep showing it until the member's next event.
    pub(super) fn expire_guards(&mut self, applied: &mut Applied, now: u64) {
        while let Some((t, _)) = self.guard_ends.first()
            && *t <= now
        {
            let Some((_, user)) = self.guard_ends.pop_first() else {
                break;
            };
            let owner = &self.durable.owner;
            let Some(m) = self.members.get_mut(&user) else {
                continue;
            };
            let ended = m
                .standing()
                .guards
                .iter()
                .any(|g| g.host == *owner && g.until <= now);
            let mut left = std::mem::take(m.standing_mut());
            left.guards.retain(|g| g.until > now);
            let still = left.guards_at(owner, now);
            m.set_standing(left);
            if ended && !still {
                let p = self.profile_of(&user).cloned();
                let after = self.badges(&user, now);
                applied.presence.push(Presence::Update(user, p, after));
            }
        }
    }

    /// `user` spent `coins` on a gift settled here: their VIP level is recomputed (one
    /// binary search over the levels), and shown with `member.update` when it changes.
    /// Robots have no VIP level: their gifts change nothing here, nor does a gift of no coins.
    pub fn add_spent(&mut self, user: &UserId, coins: i64, now: u64) -> Applied {
        if user.is_robot() || coins <= 0 {
            return Applied::default();
        }
        let before = self.badges(user, now);
        let Some(m) = self.members.get_mut(user) else {
            return Applied::default();
        };
        let s = m.standing_mut();
        s.spent = s.spent.saturating_add(coins);
        self.badges_changed(user, before, now)
    }

    fn badges_changed(&self, user: &UserId, before: Badges, now: u64) -> Applied {
        let mut applied = Applied::default();
        let after = self.badges(user, now);
        if !same(before, after) {
            let p = self.profile_of(user).cloned();
            applied
                .presence
                .push(Presence::Update(user.clone(), p, after));
        }
        applied
    }

    /// The users whose lifetime spend the actor must read from the ledger before applying
    /// `op` from `actor` (empty, without allocating, for nearly every command): the targets
    /// the VIP protection rules on whose spend the room does not know (not a member, or a
    /// member whose spend is not a reading yet), when the actor is an admin (the owner is not
    /// held by the protection), while protection is on. Robots, the owner and admins are never
    /// protected, so never read.
    pub fn spend_reads(&self, actor: &UserId, op: &RoomOp) -> Vec<UserId> {
        // The operation first: a match is all that every other command costs here.
        let covered = matches!(
            op,
            RoomOp::RoomBan(_)
                | RoomOp::ChatMute(_)
                | RoomOp::RoomKick(_)
                | RoomOp::SeatKick(_)
                | RoomOp::SeatMute(_)
                | RoomOp::RoomUpdate(_)
                | RoomOp::SeatCount(_)
        );
        if !covered || self.vip_rules.protected_level == 0 || self.role(actor) != Role::Admin {
            return Vec::new();
        }
        let seat_holder = |i: usize| self.durable.seats.get(i).and_then(|s| s.user.as_ref());
        let mut reads = Vec::new();
        let mut read = |t: &UserId| {
            let unknown = self.members.get(t).is_none_or(|m| !m.spend_known());
            if unknown
                && t != actor
                && !t.is_robot()
                && self.role(t) == Role::Member
                && !reads.contains(t)
            {
                reads.push(t.clone());
            }
        };
        match op {
            RoomOp::RoomBan(b) => read(&b.user),
            RoomOp::ChatMute(m) => read(&m.user),
            // Kicks need a member: a user who is not one is refused without a read.
            RoomOp::RoomKick(k) if self.members.contains_key(&k.user) => read(&k.user),
            RoomOp::SeatKick(k) if self.members.contains_key(&k.user) => read(&k.user),
            RoomOp::SeatMute(m) if m.muted => {
                if let Some(h) = usize::try_from(m.seat).ok().and_then(seat_holder) {
                    read(h);
                }
            }
            RoomOp::RoomUpdate(u) if u.host_seat == Some(true) && !self.durable.host_seat => {
                if let Some(h) = seat_holder(0) {
                    read(h);
                }
            }
            RoomOp::SeatCount(c) => {
                let from = usize::try_from(c.seats).unwrap_or(usize::MAX);
                for s in self.durable.seats.iter().skip(from) {
                    if let Some(h) = &s.user {
                        read(h);
                    }
                }
            }
            _ => {}
        }
        reads
    }

    /// An admin may not kick, ban or mute a member whose VIP level is at or above the
    /// protected level (nor free their seat, nor mute it); the owner may. The target's spend
    /// is the room's reading of it, or else the one the actor read (`spend`,
    /// [`Self::spend_reads`]; the larger of it and what the room counted).
    ///
    /// # Errors
    /// `VIP_PROTECTED`; `UNAVAILABLE` when the target's spend is unknown and could not be read.
    pub(super) fn require_unprotected(
        &self,
        actor: &UserId,
        target: &UserId,
        spend: &TargetSpend,
    ) -> Result<(), Rejected> {
        let protected = self.vip_rules.protected_level;
        if protected == 0 || self.role(actor) == Role::Owner {
            return Ok(());
        }
        let member = self.members.get(target);
        let counted = member.map_or(0, |m| m.standing().spent);
        let spent = match spend {
            _ if member.is_some_and(|m| m.spend_known()) || target.is_robot() => counted,
            TargetSpend::Read(read) => read
                .iter()
                .find(|(u, _)| u == target)
                .map_or(counted, |(_, s)| counted.max(*s)),
            TargetSpend::NotRead => counted,
            TargetSpend::Unreadable => {
                return Err(super::rejected(
                    ErrorCode::Unavailable,
                    "cannot check the user's VIP level now; retry",
                ));
            }
        };
        let level = self.vip_rules.level(spent);
        if level >= protected {
            return Err(Rejected {
                code: ErrorCode::VipProtected,
                msg: Cow::Owned(format!(
                    "a VIP of level {level} can only be kicked, banned or muted by the owner"
                )),
            });
        }
        Ok(())
    }
}

/// Whether two badge sets show the same (the entrance flag only rides on joins).
fn same(a: Badges, b: Badges) -> bool {
    (a.guard, a.vip) == (b.guard, b.vip)
}

#[cfg(test)]
#[path = "tests_vip.rs"]
mod tests;
