//! Membership: who is in the room, through which connection, since when, with which profile;
//! the grace window that keeps a member whose connection dropped (away) until it returns or
//! the window passes; the roster a planned move hands to the next owner; and `member.list`.

use std::collections::BinaryHeap;
use std::sync::Arc;

use protocol::client::members::{MEMBER_LIST_DEFAULT, MEMBER_LIST_MAX};
use protocol::client::{MemberEntry, MemberPage, Profile};
use protocol::link::Standing;
use protocol::{ErrorCode, NodeId, UserId};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use super::{
    Applied, Joined, Presence, PresencePlan, Rejected, Role, RoomState, SessionRef, rejected, seats,
};

/// One member.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// The connection; `None` while away (dropped, within the grace window).
    pub(crate) at: Option<SessionRef>,
    /// When the member joined (unix ms): kept across a return within the window and a move;
    /// in the top bit, [`SPEND_UNKNOWN`] (there, a member stays 56 bytes).
    joined: u64,
    /// The profile, shared with the events that carry it; `None` when empty.
    pub(crate) profile: Option<Arc<Profile>>,
    /// While away: when the window passes (unix ms); 0 otherwise.
    pub(crate) away_until: u64,
    /// Guards held and lifetime gift spend, for the badges: `None` while it holds nothing.
    /// Boxed: most members hold no guard, and every place of the members table (the spare
    /// ones too) would otherwise carry the 32 bytes of an empty one.
    standing: Option<Box<Standing>>,
}

/// Set in [`Member::joined`] while the member's lifetime spend is no reading from the ledger
/// (none came with the join, nor in a standing change since): a member who joined before the
/// gateway's read finished (or whose read failed), a seat holder adopted after an unplanned
/// stop. Until then the room's figure counts the gifts sent here only, and the VIP protection
/// has the actor read the spend ([`RoomState::spend_reads`]). A unix time in ms never
/// reaches this bit.
const SPEND_UNKNOWN: u64 = 1 << 63;

/// [`Member::joined`] of a member who joined at `at` (unix ms), its spend read or not.
fn joined_stamp(at: u64, spend_known: bool) -> u64 {
    let flag = if spend_known { 0 } else { SPEND_UNKNOWN };
    (at & !SPEND_UNKNOWN) | flag
}

/// The standing of a member who holds nothing.
static NO_STANDING: Standing = Standing {
    guards: Vec::new(),
    spent: 0,
};

impl Member {
    /// The member's guards and lifetime spend.
    pub(crate) fn standing(&self) -> &Standing {
        self.standing.as_deref().unwrap_or(&NO_STANDING)
    }

    /// The member's standing, to change in place.
    pub(crate) fn standing_mut(&mut self) -> &mut Standing {
        self.standing.get_or_insert_with(Box::default)
    }

    /// Replaces the member's standing with a newer reading from the ledger, keeping the
    /// larger lifetime spend: the room's own figure counts the gifts sent here since that
    /// reading (a rejoin after a move carries the reading of the connection's start).
    pub(crate) fn set_standing(&mut self, mut s: Standing) {
        s.spent = s.spent.max(self.standing().spent);
        self.standing = boxed(s);
        self.joined &= !SPEND_UNKNOWN;
    }

    /// Whether the member's lifetime spend is a reading from the ledger.
    pub(crate) fn spend_known(&self) -> bool {
        self.joined & SPEND_UNKNOWN == 0
    }

    /// When the member joined (unix ms).
    pub(crate) fn joined_at(&self) -> u64 {
        self.joined & !SPEND_UNKNOWN
    }
}

/// `s` as a member keeps it (nothing for an empty one).
fn boxed(s: Standing) -> Option<Box<Standing>> {
    (!s.is_empty()).then(|| Box::new(s))
}

/// The members a planned move hands to the next owner, inside the last snapshot the old owner
/// writes (the next owner takes it out before its first write).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Roster {
    /// The members when the old owner stopped.
    pub members: Vec<RosterEntry>,
}

/// One member in a [`Roster`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RosterEntry {
    /// The member.
    pub user: UserId,
    /// When the member joined (unix ms).
    pub joined_at: u64,
    /// Away already: when its window passes (unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub away_until: Option<u64>,
    /// The profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p: Option<Profile>,
    /// The standing (guards held, lifetime gift spend).
    #[serde(default, skip_serializing_if = "Standing::is_empty")]
    pub s: Standing,
    /// The lifetime spend in `s` is not a reading from the ledger yet (the next owner's VIP
    /// protection reads it). Absent, from an older owner: taken as read, as it then was.
    #[serde(default, skip_serializing_if = "is_false")]
    pub spend_unknown: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A profile as the room keeps it: nothing for an empty one.
pub fn shared_profile(p: Option<Profile>) -> Option<Arc<Profile>> {
    p.filter(|p| !p.is_empty()).map(Arc::new)
}

/// The order of `member.list`: role rank (owner 0, admins 1, seated 2, others 3), join time,
/// then user id. Unique per member, and fixed while the member's role and seat do not change.
type Key<'a> = (u8, u64, &'a UserId);

impl RoomState {
    /// How many members the room has (away ones included).
    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// The connected members and their sessions (away ones have none).
    pub fn members(&self) -> impl Iterator<Item = (&UserId, &SessionRef)> {
        self.members
            .iter()
            .filter_map(|(u, m)| m.at.as_ref().map(|at| (u, at)))
    }

    /// The session of a connected member.
    pub fn member(&self, user: &UserId) -> Option<&SessionRef> {
        self.members.get(user).and_then(|m| m.at.as_ref())
    }

    /// Whether `user` is a member (connected or away).
    pub fn is_member(&self, user: &UserId) -> bool {
        self.members.contains_key(user)
    }

    /// The gateways that hold members of the room, each once.
    pub fn gateways(&self) -> impl Iterator<Item = &NodeId> {
        self.gateways.keys()
    }

    /// Who gets presence change `p`: everyone in a room of at most `full_max` members; in a
    /// bigger one only the owner, admins and the seated (never the subject), so that presence
    /// never costs members squared.
    pub fn presence_plan(&self, p: &Presence, full_max: usize) -> PresencePlan {
        if self.members.len() <= full_max {
            return PresencePlan::Everyone;
        }
        let subject = p.user();
        PresencePlan::Privileged(
            self.members()
                .filter(|(u, _)| *u != subject && self.is_privileged(u))
                .map(|(_, at)| at.clone())
                .collect(),
        )
    }

    fn gateway_lost_member(&mut self, gw: &NodeId) {
        if super::is_robot_gateway(gw) {
            return;
        }
        if let Some(n) = self.gateways.get_mut(gw) {
            *n -= 1;
            if *n == 0 {
                self.gateways.remove(gw);
            }
        }
    }

    /// Removes `user`; returns the member it was.
    pub(super) fn remove_member(&mut self, user: &UserId) -> Option<Member> {
        let m = self.members.remove(user)?;
        if let Some(at) = &m.at {
            self.gateway_lost_member(&at.gateway);
        }
        if m.away_until != 0 {
            self.away.remove(&(m.away_until, user.clone()));
        }
        self.robot_members -= usize::from(user.is_robot());
        Some(m)
    }

    /// Makes `at` the connection of `user`: a new member joining at `now` (`member.join`),
    /// a member back within its window (silent), or a second connection replacing the first
    /// (silent). A profile that differs from the kept one is shown with `member.update`.
    pub(super) fn add(
        &mut self,
        user: &UserId,
        at: SessionRef,
        profile: Option<Arc<Profile>>,
        now: u64,
    ) -> Joined {
        let mut joined = Joined::default();
        if !super::is_robot_gateway(&at.gateway) {
            *self.gateways.entry(at.gateway.clone()).or_default() += 1;
        }
        let Some(m) = self.members.get_mut(user) else {
            self.robot_members += usize::from(user.is_robot());
            let member = Member {
                at: Some(at),
                joined: joined_stamp(now, false),
                profile: profile.clone(),
                away_until: 0,
                standing: None,
            };
            self.members.insert(user.clone(), member);
            let join = Presence::Join(user.clone(), profile, super::Badges::default());
            joined.applied.presence.push(join);
            return joined;
        };
        let old = m.at.replace(at.clone());
        if m.away_until != 0 {
            // Back within the window: its expiry is gone.
            self.away.remove(&(m.away_until, user.clone()));
            m.away_until = 0;
            joined.returned = true;
            joined.applied.rearm = true;
        }
        if let Some(p) = profile
            && m.profile.as_deref() != Some(&*p)
        {
            m.profile = Some(p.clone());
            joined.applied.presence.push(Presence::Update(
                user.clone(),
                Some(p),
                super::Badges::default(),
            ));
        }
        if let Some(old) = old {
            self.gateway_lost_member(&old.gateway);
            if old != at {
                joined.replaced = Some(old);
            }
        }
        joined
    }

    /// A member's connection `at` dropped at `now`: within the grace window the member stays
    /// (away: no presence, seat and count kept); a window of 0 is a leave at once.
    ///
    /// # Errors
    /// `NOT_IN_ROOM` when `user` is not a member through `at`.
    pub fn disconnect(
        &mut self,
        user: &UserId,
        at: &SessionRef,
        now: u64,
    ) -> Result<Applied, Rejected> {
        if self.member(user) != Some(at) {
            return Err(rejected(ErrorCode::NotInRoom, "not in this room"));
        }
        let grace = self.rules.presence_grace_ms;
        if grace == 0 {
            return self.leave(user, at, "disconnected");
        }
        self.set_away(user, now.saturating_add(grace));
        Ok(Applied {
            rearm: true,
            ..Applied::default()
        })
    }

    fn set_away(&mut self, user: &UserId, until: u64) {
        let Some(m) = self.members.get_mut(user) else {
            return;
        };
        let old = m.at.take();
        if m.away_until != 0 {
            self.away.remove(&(m.away_until, user.clone()));
        }
        m.away_until = until;
        self.away.insert((until, user.clone()));
        if let Some(old) = old {
            self.gateway_lost_member(&old.gateway);
        }
    }

    /// How many members are away (their grace window runs).
    pub fn away_count(&self) -> usize {
        self.away.len()
    }

    /// Whether `user` is a member whose connection dropped and whose window runs.
    pub fn is_away(&self, user: &UserId) -> bool {
        self.members.get(user).is_some_and(|m| m.at.is_none())
    }

    /// The earliest end of a grace window.
    pub(super) fn next_away_deadline(&self) -> Option<u64> {
        self.away.first().map(|(t, _)| *t)
    }

    /// Members whose window passed at `now` leave: `member.leave` reason `disconnected`, seat
    /// freed, pending request and invitation ended, as a disconnect without a window does.
    pub(super) fn expire_away(&mut self, applied: &mut Applied, now: u64) {
        while let Some((t, _)) = self.away.first()
            && *t <= now
        {
            let Some((_, user)) = self.away.pop_first() else {
                break;
            };
            if let Some(m) = self.members.get_mut(&user) {
                m.away_until = 0;
            }
            self.take_out(applied, &user, Some(&user), seats::Cause::Own, "left_room");
            applied.presence.push(Presence::Leave(user, "disconnected"));
        }
    }

    /// The profile the room keeps for `user`.
    pub fn profile_of(&self, user: &UserId) -> Option<&Arc<Profile>> {
        self.members.get(user).and_then(|m| m.profile.as_ref())
    }

    /// A member's profile changed: kept, and shown with `member.update` (nothing when it is
    /// the same).
    ///
    /// # Errors
    /// `NOT_IN_ROOM` when `user` is not a member.
    pub fn set_profile(
        &mut self,
        user: &UserId,
        p: Profile,
        now: u64,
    ) -> Result<Applied, Rejected> {
        let badges = self.badges(user, now);
        let Some(m) = self.members.get_mut(user) else {
            return Err(rejected(ErrorCode::NotInRoom, "not in this room"));
        };
        let p = shared_profile(Some(p));
        let mut applied = Applied::default();
        if m.profile != p {
            m.profile = p.clone();
            applied
                .presence
                .push(Presence::Update(user.clone(), p, badges));
        }
        Ok(applied)
    }

    /// The roster a planned move hands over: every member, with its join time, profile and
    /// (for an away one) the end of its window.
    pub fn roster(&self) -> Roster {
        Roster {
            members: self
                .members
                .iter()
                .map(|(u, m)| RosterEntry {
                    user: u.clone(),
                    joined_at: m.joined_at(),
                    away_until: (m.away_until != 0).then_some(m.away_until),
                    p: m.profile.as_deref().cloned(),
                    s: m.standing().clone(),
                    spend_unknown: !m.spend_known(),
                })
                .collect(),
        }
    }

    /// Puts `roster` in the durable state, for the last save before a planned move.
    pub fn set_roster(&mut self, roster: Roster) {
        self.durable.roster = Some(roster);
    }

    /// Takes in the roster the previous owner handed over at `now`: its members are away
    /// until they rejoin (silently) or their window passes (`member.leave`). Without a grace
    /// window there is nothing to keep them for.
    pub fn restore(&mut self, roster: Roster, now: u64) {
        let grace = self.rules.presence_grace_ms;
        if grace == 0 {
            return;
        }
        for e in roster.members {
            if self.members.contains_key(&e.user) {
                continue;
            }
            let until = e.away_until.unwrap_or(now.saturating_add(grace));
            self.robot_members += usize::from(e.user.is_robot());
            let member = Member {
                at: None,
                joined: joined_stamp(e.joined_at, !e.spend_unknown),
                profile: shared_profile(e.p),
                away_until: until,
                standing: boxed(e.s),
            };
            self.insert_away(e.user, member);
        }
    }

    /// Puts `user` in as `member`, away (no connection) until `member.away_until`.
    fn insert_away(&mut self, user: UserId, member: Member) {
        self.away.insert((member.away_until, user.clone()));
        self.members.insert(user, member);
    }

    /// Seat holders who are no members at `now`: after an unplanned stop (no roster handed
    /// over), or members the roster lacked, the saved seats name users this runtime has not
    /// seen. Each becomes an away member for the grace window, as a handed-over member would,
    /// so that one who never comes back leaves when the window passes and frees the seat (a
    /// seat must not stay held by nobody); one who rejoins within it keeps the seat.
    pub fn adopt_seated(&mut self, now: u64) {
        // Never 0, which stands for "not away" (with no window: due at once).
        let until = now.saturating_add(self.rules.presence_grace_ms).max(1);
        let strays: SmallVec<[UserId; 4]> = self
            .durable
            .seats
            .iter()
            .filter_map(|s| s.user.clone())
            // Robots are never away: the runtime runs them again, or frees their seats.
            .filter(|u| !u.is_robot() && !self.members.contains_key(u))
            .collect();
        for user in strays {
            let member = Member {
                at: None,
                // Unknown until the holder rejoins with it: the VIP protection reads it.
                joined: joined_stamp(now, false),
                profile: None,
                away_until: until,
                standing: None,
            };
            self.insert_away(user, member);
        }
    }

    /// One page of `member.list` for a member: owner, admins, seated, everyone else, each
    /// group by join time, after `cursor`.
    ///
    /// A cursor is the key of the last member sent, so a member present for the whole scan
    /// whose role and seat stay the same is listed exactly once however others come and go.
    /// A member whose group changes mid-scan moves to its new place in the order: it may be
    /// listed twice (moved to a group after the cursor) or not at all (moved to one before).
    ///
    /// The page is a bounded selection over one pass (no sort of the whole room): O(members ×
    /// log limit) per call.
    ///
    /// # Errors
    /// `BAD_REQUEST` for a limit outside 1..=200 or a cursor this room did not make.
    pub fn member_list(
        &self,
        cursor: Option<&str>,
        limit: Option<u32>,
        now: u64,
    ) -> Result<MemberPage, Rejected> {
        let limit = limit.unwrap_or(MEMBER_LIST_DEFAULT);
        if !(1..=MEMBER_LIST_MAX).contains(&limit) {
            return Err(rejected(ErrorCode::BadRequest, "limit must be 1..=200"));
        }
        let after = match cursor {
            Some(c) => Some(parse_cursor(c)?),
            None => None,
        };
        let seated: SmallVec<[&UserId; 20]> = self
            .durable
            .seats
            .iter()
            .filter_map(|s| s.user.as_ref())
            .collect();
        let mut heap: BinaryHeap<Key<'_>> = BinaryHeap::with_capacity(limit as usize + 1);
        let mut remaining = 0usize;
        for (u, m) in &self.members {
            let rank = match self.role(u) {
                Role::Owner => 0,
                Role::Admin => 1,
                Role::Member if seated.contains(&u) => 2,
                Role::Member => 3,
            };
            let key = (rank, m.joined_at(), u);
            if let Some((r, t, a)) = &after
                && key <= (*r, *t, a)
            {
                continue;
            }
            remaining += 1;
            if heap.len() < limit as usize {
                heap.push(key);
            } else if heap.peek().is_some_and(|top| key < *top) {
                heap.pop();
                heap.push(key);
            }
        }
        let page = heap.into_sorted_vec();
        let cursor = (remaining > page.len())
            .then(|| page.last().map(|(r, t, u)| format!("{r}.{t}.{u}")))
            .flatten();
        let members = page
            .into_iter()
            .filter_map(|(_, _, u)| {
                let m = self.members.get(u)?;
                let b = self.badges(u, now);
                Some(MemberEntry {
                    user: u.clone(),
                    role: match self.role(u) {
                        Role::Owner => "owner",
                        Role::Admin => "admin",
                        Role::Member => "member",
                    }
                    .to_owned(),
                    seat: self.seat_of(u),
                    robot: u.is_robot(),
                    joined_at: m.joined_at(),
                    away: m.at.is_none(),
                    p: m.profile.as_deref().cloned(),
                    guard: b.guard,
                    vip: b.vip,
                })
            })
            .collect();
        Ok(MemberPage {
            members,
            count: self.members.len() as u64,
            cursor,
        })
    }
}

/// A `member.list` cursor: `rank.joined_at.user`.
fn parse_cursor(c: &str) -> Result<(u8, u64, UserId), Rejected> {
    let bad = || rejected(ErrorCode::BadRequest, "bad cursor");
    let mut parts = c.splitn(3, '.');
    let rank = parts.next().and_then(|s| s.parse::<u8>().ok());
    let at = parts.next().and_then(|s| s.parse::<u64>().ok());
    let user = parts.next().filter(|s| !s.is_empty());
    match (rank, at, user) {
        (Some(r), Some(t), Some(u)) if r <= 3 => Ok((r, t, UserId::from(u))),
        _ => Err(bad()),
    }
}
