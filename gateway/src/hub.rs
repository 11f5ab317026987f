//! The gateway's local sessions and room fan-out: room -> local sessions, and the handling of
//! everything a shard sends back (replies, events, evictions).
//!
//! A shard sends one copy of each event per gateway; the hub turns its bytes into one
//! `Utf8Bytes` and pushes clones of it (a reference count, no copy) to each member's outbox.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockWriteGuard};

use bytes::Bytes;
use protocol::client::{self, Profile, RoomLeft};
use protocol::link::{Audience, LeaveReason, Membership, Reply, RoomEvent, Standing, ToGateway};
use protocol::{Epoch, NodeId, RoomId, Seq, SessionId, UserId};
use smallvec::SmallVec;
use tokio_tungstenite::tungstenite::Utf8Bytes;
use tracing::warn;

use crate::outbox::Outbox;

/// One local session as the hub knows it.
#[derive(Debug)]
struct Slot {
    user: UserId,
    out: Arc<Outbox>,
    /// The user's profile as this session knows it: sent with its joins.
    profile: Arc<Profile>,
    /// The user's standing (guards held, lifetime gift spend), sent with its joins; `None`
    /// until read, and when it holds nothing.
    standing: Option<Arc<Standing>>,
    /// Whether the standing was read (even as nothing held): until then joins carry none, and
    /// the room takes the member's spend for unknown (its VIP protection reads it).
    standing_read: bool,
    /// When the standing was last asked for (unix ms; 0: never).
    standing_asked: u64,
    /// The room the session is in, and the shard it joined through. Events and evictions for
    /// the room count only when they come from that shard: a deposed owner's late events never
    /// reach a session that rejoined through the new owner.
    room: Option<(RoomId, NodeId)>,
    /// The client's latest `room.join`: its request id and room. A join's reply that arrives
    /// after the client asked for another room does not move the session there (replies of
    /// different rooms come back in any order; the client's last ask wins).
    join: Option<(u64, RoomId)>,
}

#[derive(Debug, Default)]
struct HubState {
    /// Boxed: a hash table keeps spare places (up to half of it after it grows), and a spare
    /// place then costs 16 bytes instead of a whole slot's 112.
    sessions: HashMap<SessionId, Box<Slot>>,
    /// room -> shard it was joined through -> sessions, with their outboxes: a room's fan-out
    /// walks this map alone, with no lookup per member in `sessions`.
    rooms: HashMap<RoomId, ByShard>,
    /// Sessions in their room's fan-out only because the client asked to join it again right
    /// after leaving it (the leave's reply came first): if the room refuses that join, the
    /// session is out. Empty but for that moment, so it costs a connection nothing.
    kept: HashSet<SessionId>,
    /// A user's sessions on this gateway: almost always one, kept inline (no allocation).
    users: HashMap<UserId, SmallVec<[SessionId; 1]>>,
}

/// A room's local sessions by the shard they joined through: one shard but while a handoff
/// moves them, so a short list (one small allocation) rather than a hash table per room.
#[derive(Debug, Default)]
struct ByShard(Vec<Via>);

/// A room's sessions joined through one shard.
#[derive(Debug)]
struct Via {
    shard: NodeId,
    /// The sessions, with their outboxes.
    members: Members,
    /// The last sequenced event delivered from the shard: every member session got it, so a
    /// handoff rejoins them from there. Written on each event under the hub's read lock.
    last: Mutex<Option<(Epoch, Seq)>>,
}

type Members = HashMap<SessionId, Arc<Outbox>>;

impl ByShard {
    fn via(&self, shard: &NodeId) -> Option<&Via> {
        self.0.iter().find(|v| v.shard == *shard)
    }

    /// The sessions joined through `shard`, an empty set made for it if it had none.
    fn entry(&mut self, shard: &NodeId) -> &mut Members {
        let at = match self.0.iter().position(|v| v.shard == *shard) {
            Some(at) => at,
            None => {
                // Exactly one more: a first push would make room for four.
                self.0.reserve_exact(1);
                self.0.push(Via {
                    shard: shard.clone(),
                    members: Members::default(),
                    last: Mutex::new(None),
                });
                self.0.len() - 1
            }
        };
        &mut self.0[at].members
    }

    /// Takes `session` out of the sessions joined through `shard` (and the shard's entry with
    /// its last position when it was the last one).
    fn remove(&mut self, shard: &NodeId, session: SessionId) {
        if let Some(at) = self.0.iter().position(|v| v.shard == *shard) {
            self.0[at].members.remove(&session);
            if self.0[at].members.is_empty() {
                self.0.swap_remove(at);
            }
        }
    }
}

/// A session the gateway moves to a room's new owner after a handoff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingRejoin {
    pub(crate) session: SessionId,
    pub(crate) user: UserId,
    pub(crate) room: RoomId,
    pub(crate) since: Option<(Epoch, Seq)>,
    pub(crate) to: NodeId,
}

/// What the gateway must send after applying a shard's message.
#[derive(Debug, Default)]
pub(crate) struct FollowUps {
    pub(crate) leaves: Vec<PendingLeave>,
    pub(crate) rejoins: Vec<PendingRejoin>,
}

/// A leave the gateway must send on its own (room switch, disconnect, late join).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingLeave {
    pub(crate) session: SessionId,
    pub(crate) user: UserId,
    pub(crate) room: RoomId,
    pub(crate) reason: LeaveReason,
}

/// Sessions and room membership of this gateway.
#[derive(Debug, Default)]
pub(crate) struct Hub {
    state: RwLock<HubState>,
}

/// The `room.left` notice for a session the gateway takes out of `room`.
pub(crate) fn room_left(room: &RoomId, reason: &str) -> Option<Utf8Bytes> {
    text(client::encode_event(
        "room.left",
        None,
        None,
        &RoomLeft {
            room: room.clone(),
            reason: reason.to_owned(),
        },
    ))
}

/// Turns frame bytes into a text payload; the protocol only ever produces UTF-8.
pub(crate) fn text(frame: Bytes) -> Option<Utf8Bytes> {
    match Utf8Bytes::try_from(frame) {
        Ok(t) => Some(t),
        Err(e) => {
            warn!(error = %e, "Dropping a non-UTF-8 frame from a shard.");
            None
        }
    }
}

impl Hub {
    fn write(&self) -> RwLockWriteGuard<'_, HubState> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a new session; returns the outboxes of the user's oldest sessions beyond
    /// `max_per_user` (the new one counted), for the caller to close.
    pub(crate) fn add(
        &self,
        session: SessionId,
        user: UserId,
        out: Arc<Outbox>,
        profile: Arc<Profile>,
        max_per_user: usize,
    ) -> Vec<Arc<Outbox>> {
        let mut guard = self.write();
        let st = &mut *guard;
        let mine = st.users.entry(user.clone()).or_default();
        // The user's sessions that hold a place, oldest first (session ids only grow). One
        // already told to close (its token expired, a slow consumer, evicted before) is on
        // its way out and holds none: counting it would close one connection too many.
        let mut holding: Vec<Arc<Outbox>> = mine
            .iter()
            .filter_map(|s| st.sessions.get(s))
            .filter(|slot| slot.out.kicked().is_none())
            .map(|slot| slot.out.clone())
            .collect();
        mine.push(session);
        // The new session holds one place too.
        holding.truncate((holding.len() + 1).saturating_sub(max_per_user));
        let evicted = holding;
        st.sessions.insert(
            session,
            Box::new(Slot {
                user,
                out,
                profile,
                standing: None,
                standing_read: false,
                standing_asked: 0,
                room: None,
                join: None,
            }),
        );
        evicted
    }

    /// Removes a closed session; returns the leave to send for the room it was in.
    pub(crate) fn remove(&self, session: SessionId) -> Option<PendingLeave> {
        let mut st = self.write();
        let slot = st.sessions.remove(&session)?;
        st.kept.remove(&session);
        if let Some(list) = st.users.get_mut(&slot.user) {
            list.retain(|s| *s != session);
            if list.is_empty() {
                st.users.remove(&slot.user);
            }
        }
        let (room, via) = slot.room?;
        remove_member(&mut st, &room, &via, session);
        Some(PendingLeave {
            session,
            user: slot.user,
            room,
            reason: LeaveReason::Disconnected,
        })
    }

    /// The profile `session` sends with its joins.
    pub(crate) fn profile(&self, session: SessionId) -> Option<Arc<Profile>> {
        let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
        st.sessions.get(&session).map(|s| s.profile.clone())
    }

    /// Gives every local session of `user` the profile `p`; returns the rooms they are in
    /// (session, room), for the caller to tell those rooms.
    pub(crate) fn set_profile(&self, user: &UserId, p: &Arc<Profile>) -> Vec<(SessionId, RoomId)> {
        let mut st = self.write();
        let sessions: SmallVec<[SessionId; 1]> = st.users.get(user).cloned().unwrap_or_default();
        let mut rooms = Vec::new();
        for s in sessions {
            if let Some(slot) = st.sessions.get_mut(&s) {
                slot.profile = p.clone();
                if let Some((room, _)) = &slot.room {
                    rooms.push((s, room.clone()));
                }
            }
        }
        rooms
    }

    /// The standing `session` sends with its joins: `None` while none was read (not yet, or
    /// the read failed), an empty one when the user holds nothing.
    pub(crate) fn standing(&self, session: SessionId) -> Option<Standing> {
        let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
        let slot = st.sessions.get(&session)?;
        slot.standing_read
            .then(|| slot.standing.as_deref().cloned().unwrap_or_default())
    }

    /// Whether `session`'s standing was last asked for more than `max_age_ms` before `now`
    /// (then it counts as asked for now).
    pub(crate) fn standing_stale(&self, session: SessionId, now: u64, max_age_ms: u64) -> bool {
        let mut st = self.write();
        let Some(slot) = st.sessions.get_mut(&session) else {
            return false;
        };
        if slot.standing_asked != 0 && now.saturating_sub(slot.standing_asked) < max_age_ms {
            return false;
        }
        slot.standing_asked = now;
        true
    }

    /// Gives every local session of `user` the standing `s` (an empty one is kept as none:
    /// most users hold nothing, and their sessions then hold no allocation for it); returns
    /// the rooms of those whose standing changed (session, room), for the caller to tell them.
    pub(crate) fn set_standing(&self, user: &UserId, s: &Standing) -> Vec<(SessionId, RoomId)> {
        let held = (!s.is_empty()).then(|| Arc::new(s.clone()));
        let mut st = self.write();
        let sessions: SmallVec<[SessionId; 1]> = st.users.get(user).cloned().unwrap_or_default();
        let mut rooms = Vec::new();
        for id in sessions {
            if let Some(slot) = st.sessions.get_mut(&id) {
                let same = slot
                    .standing
                    .as_deref()
                    .map_or(s.is_empty(), |had| had == s);
                slot.standing.clone_from(&held);
                // A first reading of nothing is not sent on: the room keeps that member's
                // spend unknown, and reads it only if an admin's moderation needs it.
                slot.standing_read = true;
                if same {
                    continue;
                }
                // The room it is in, and the one a join in flight goes to (the change
                // follows the join on the same route, so that room applies it after).
                if let Some((room, _)) = &slot.room {
                    rooms.push((id, room.clone()));
                }
                if let Some((_, room)) = &slot.join
                    && slot.room.as_ref().is_none_or(|(r, _)| r != room)
                {
                    rooms.push((id, room.clone()));
                }
            }
        }
        rooms
    }

    /// `user`'s local sessions and their outboxes (for direct messages).
    pub(crate) fn sessions_of(&self, user: &UserId) -> SmallVec<[(SessionId, Arc<Outbox>); 1]> {
        let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
        st.users
            .get(user)
            .into_iter()
            .flatten()
            .filter_map(|s| st.sessions.get(s).map(|slot| (*s, slot.out.clone())))
            .collect()
    }

    /// Every local session with its user.
    pub(crate) fn session_users(&self) -> Vec<(SessionId, UserId)> {
        let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
        st.sessions
            .iter()
            .map(|(s, slot)| (*s, slot.user.clone()))
            .collect()
    }

    /// The user of `session`.
    pub(crate) fn user_of(&self, session: SessionId) -> Option<UserId> {
        let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
        st.sessions.get(&session).map(|s| s.user.clone())
    }

    /// The room `session` is in now.
    pub(crate) fn room_of(&self, session: SessionId) -> Option<RoomId> {
        let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
        st.sessions
            .get(&session)
            .and_then(|s| s.room.as_ref().map(|(room, _)| room.clone()))
    }

    /// Takes `session` out of `room` if it is in it (the user joined another room through
    /// another gateway): `room.left` with `reason` to it; returns the leave to send.
    pub(crate) fn take_out(
        &self,
        session: SessionId,
        room: &RoomId,
        reason: LeaveReason,
    ) -> Option<PendingLeave> {
        let mut st = self.write();
        let slot = st.sessions.get_mut(&session)?;
        let (_, via) = slot.room.take_if(|(r, _)| r == room)?;
        if let Some(t) = room_left(room, reason.as_str()) {
            slot.out.push(t);
        }
        let user = slot.user.clone();
        st.kept.remove(&session);
        remove_member(&mut st, room, &via, session);
        Some(PendingLeave {
            session,
            user,
            room: room.clone(),
            reason,
        })
    }

    /// Sessions open now.
    pub(crate) fn session_count(&self) -> usize {
        let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
        st.sessions.len()
    }

    /// Every session's outbox (for drain).
    pub(crate) fn outboxes(&self) -> Vec<Arc<Outbox>> {
        let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
        st.sessions.values().map(|s| s.out.clone()).collect()
    }

    /// One heartbeat tick over every session ([`Outbox::beat`]): sessions whose id falls in
    /// `slice` (of `slices`) are asked for a ping. Returns how many sessions it closed.
    /// Sockets within `warn_secs` of their token's expiry get `session.expiring` once.
    pub(crate) fn beat(&self, slice: u64, slices: u64, silence_ms: u64, warn_secs: u64) -> usize {
        let now = crate::outbox::clock_ms();
        let unix = crate::outbox::unix_ms() / 1000;
        let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
        st.sessions
            .iter()
            .filter_map(|(id, s)| {
                s.out
                    .beat(now, unix, silence_ms, id % slices == slice, warn_secs)
            })
            .count()
    }

    /// Notes that `session`'s client asked to join `room` with request `req`.
    pub(crate) fn note_join(&self, session: SessionId, req: u64, room: &RoomId) {
        if let Some(slot) = self.write().sessions.get_mut(&session) {
            slot.join = Some((req, room.clone()));
        }
    }

    /// Queues a frame to one session.
    pub(crate) fn send_to(&self, session: SessionId, frame: Utf8Bytes) {
        let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = st.sessions.get(&session) {
            slot.out.push(frame);
        }
    }

    /// Applies one message from shard `from`. Returns what the gateway must now send.
    pub(crate) fn apply(&self, from: &NodeId, msg: ToGateway) -> FollowUps {
        match msg {
            ToGateway::Reply(r) => FollowUps {
                leaves: self.reply(from, r),
                rejoins: Vec::new(),
            },
            ToGateway::Event(e) => FollowUps {
                leaves: Vec::new(),
                rejoins: self.event(from, e),
            },
        }
    }

    /// Takes every session whose room is served through shard `via` (or, with `moved`, whose
    /// room the ring now places elsewhere) out of its room, telling each with `room.left`
    /// (reason `unavailable`): the client rejoins with `since` and reaches the new owner.
    pub(crate) fn evict_where(&self, cond: impl Fn(&RoomId, &NodeId) -> bool) -> usize {
        let mut st = self.write();
        let hit: Vec<(SessionId, RoomId, NodeId)> = st
            .sessions
            .iter()
            .filter_map(|(s, slot)| {
                let (room, via) = slot.room.as_ref()?;
                cond(room, via).then(|| (*s, room.clone(), via.clone()))
            })
            .collect();
        for (s, room, via) in &hit {
            if let Some(slot) = st.sessions.get_mut(s) {
                slot.room = None;
                if let Some(t) = room_left(room, "unavailable") {
                    slot.out.push(t);
                }
            }
            remove_member(&mut st, room, via, *s);
        }
        hit.len()
    }

    /// A reply to a request the gateway has already answered itself (`UNAVAILABLE` when the
    /// retry budget ran out while the shard held it): the client gets no second answer. A
    /// join the shard made anyway is undone, since the client was told it failed, unless the
    /// client has since asked to join that room again (that join's reply decides). Any other
    /// change of membership is applied, silently, so the gateway agrees with the room.
    pub(crate) fn late_reply(&self, from: &NodeId, r: Reply) -> Vec<PendingLeave> {
        if r.membership == Some(Membership::Joined) && r.outcome.is_ok() {
            let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
            let joining_again = st
                .sessions
                .get(&r.session)
                .and_then(|s| s.join.as_ref())
                .is_some_and(|(req, room)| *req > r.req && *room == r.room);
            if !joining_again {
                return vec![PendingLeave {
                    session: r.session,
                    user: r.user,
                    room: r.room,
                    reason: LeaveReason::Left,
                }];
            }
        }
        self.reply(
            from,
            Reply {
                client_id: None,
                ..r
            },
        )
    }

    fn reply(&self, from: &NodeId, r: Reply) -> Vec<PendingLeave> {
        let mut leaves = Vec::new();
        let frame = r.client_id.map(|id| match &r.outcome {
            Ok(ok) => client::encode_ok_raw(id, ok),
            Err(e) => client::encode_err(Some(id), e.code, &e.msg),
        });
        if let Err(e) = &r.outcome {
            metrics::counter!(crate::metrics::ERRORS, "code" => e.code.as_str()).increment(1);
        }
        let refused = |st: &HubState, slot: &Slot| {
            r.outcome.is_err()
                && st.kept.contains(&r.session)
                && slot.join.as_ref() == Some(&(r.req, r.room.clone()))
                && slot.room.as_ref().is_some_and(|(room, _)| *room == r.room)
        };
        if r.membership.is_none() {
            // The common case (chat, seats, gifts): no membership change, a read lock will do.
            let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
            match st.sessions.get(&r.session) {
                Some(slot) if refused(&st, slot) => {}
                Some(slot) => {
                    if let Some(frame) = frame.and_then(text) {
                        slot.out.push(frame);
                    }
                    return leaves;
                }
                None => return leaves,
            }
        }
        let mut st = self.write();
        let Some(slot) = st.sessions.get(&r.session) else {
            // The session closed while its join was in flight: leave again.
            if r.membership == Some(Membership::Joined) {
                leaves.push(PendingLeave {
                    session: r.session,
                    user: r.user,
                    room: r.room,
                    reason: LeaveReason::Disconnected,
                });
            }
            return leaves;
        };
        let user = slot.user.clone();
        let out = slot.out.clone();
        // The client asked for another room (or this one again) after this command.
        let later_join = slot.join.as_ref().filter(|(req, _)| *req > r.req);
        let superseded = later_join.is_some_and(|(_, room)| *room != r.room);
        // Already there (a repeated join): the later join's reply moves it, or, if that join
        // fails, the session stays, as after any failed join.
        let already_in = slot
            .room
            .as_ref()
            .is_some_and(|(room, via)| *room == r.room && via == from);
        let rejoined = later_join.is_some_and(|(_, room)| *room == r.room);
        let refused = refused(&st, slot);
        match r.membership {
            Some(Membership::Joined) if superseded && already_in => {}
            Some(Membership::Joined) if superseded => {
                // A quick hop (A → B → A): the session stays where the client went last, and
                // the room it passed through lets it go.
                leaves.push(PendingLeave {
                    session: r.session,
                    user: user.clone(),
                    room: r.room.clone(),
                    reason: LeaveReason::Switched,
                });
            }
            // Left, then joined again: the later join's reply keeps the session in (or, if the
            // room refuses that join, takes it out).
            Some(Membership::Left) if rejoined => {
                if let Some(slot) = st.sessions.get(&r.session)
                    && slot
                        .room
                        .as_ref()
                        .is_some_and(|(room, via)| *room == r.room && via == from)
                {
                    st.kept.insert(r.session);
                }
            }
            Some(Membership::Joined) => {
                st.kept.remove(&r.session);
                let old = st
                    .sessions
                    .get_mut(&r.session)
                    .and_then(|s| s.room.replace((r.room.clone(), from.clone())));
                st.rooms
                    .entry(r.room.clone())
                    .or_default()
                    .entry(from)
                    .insert(r.session, out);
                if let Some((old, old_via)) = old {
                    if old != r.room || old_via != *from {
                        remove_member(&mut st, &old, &old_via, r.session);
                    }
                    if old != r.room {
                        leaves.push(PendingLeave {
                            session: r.session,
                            user: user.clone(),
                            room: old,
                            reason: LeaveReason::Switched,
                        });
                    }
                }
                // A user is in at most one room: the user's other sessions on this gateway
                // leave their rooms.
                let others: Vec<SessionId> = st
                    .users
                    .get(&user)
                    .map(|v| v.iter().copied().filter(|s| *s != r.session).collect())
                    .unwrap_or_default();
                for other in others {
                    let Some(o) = st.sessions.get_mut(&other) else {
                        continue;
                    };
                    let Some((room, via)) = o.room.take_if(|(room, _)| *room != r.room) else {
                        continue;
                    };
                    if let Some(t) = room_left(&room, "switched") {
                        o.out.push(t);
                    }
                    remove_member(&mut st, &room, &via, other);
                    leaves.push(PendingLeave {
                        session: other,
                        user: user.clone(),
                        room,
                        reason: LeaveReason::Switched,
                    });
                }
            }
            Some(Membership::Left) => {
                if let Some(slot) = st.sessions.get_mut(&r.session)
                    && slot
                        .room
                        .as_ref()
                        .is_some_and(|(room, via)| *room == r.room && via == from)
                {
                    slot.room = None;
                }
                remove_member(&mut st, &r.room, from, r.session);
            }
            // The room refused the join that kept the session in: it left already.
            None if refused => {
                st.kept.remove(&r.session);
                if let Some((room, via)) =
                    st.sessions.get_mut(&r.session).and_then(|s| s.room.take())
                {
                    remove_member(&mut st, &room, &via, r.session);
                }
            }
            None => {}
        }
        if let Some(frame) = frame.and_then(text)
            && let Some(slot) = st.sessions.get(&r.session)
        {
            slot.out.push(frame);
        }
        leaves
    }

    fn event(&self, from: &NodeId, e: RoomEvent) -> Vec<PendingRejoin> {
        if let Audience::Moved { sessions, to } = &e.audience {
            let mut st = self.write();
            // The old owner says where its stream ended (every member was sent everything up
            // to there); the gateway's own record is the fallback.
            let since = e.position.or_else(|| {
                let via = st.rooms.get(&e.room)?.via(from)?;
                *via.last.lock().unwrap_or_else(PoisonError::into_inner)
            });
            let mut out = Vec::new();
            for s in sessions {
                if let Some(slot) = st.sessions.get_mut(s)
                    && slot
                        .room
                        .as_ref()
                        .is_some_and(|(room, via)| *room == e.room && via == from)
                {
                    slot.room = None;
                    out.push(PendingRejoin {
                        session: *s,
                        user: slot.user.clone(),
                        room: e.room.clone(),
                        since,
                        to: to.clone(),
                    });
                    remove_member(&mut st, &e.room, from, *s);
                }
            }
            return out;
        }
        let Some(frame) = text(e.frame) else {
            return Vec::new();
        };
        if let Audience::Evict(list) = &e.audience {
            let mut st = self.write();
            for s in list {
                if let Some(slot) = st.sessions.get_mut(s)
                    && slot
                        .room
                        .as_ref()
                        .is_some_and(|(room, via)| *room == e.room && via == from)
                {
                    slot.out.push(frame.clone());
                    slot.room = None;
                    remove_member(&mut st, &e.room, from, *s);
                }
            }
            return Vec::new();
        }
        let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
        let via = st.rooms.get(&e.room).and_then(|m| m.via(from));
        if let (Some(pos), Some(via)) = (e.position, via) {
            *via.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(pos);
        }
        let members = via.map(|v| &v.members);
        let push = |out: &Arc<Outbox>| {
            out.push(frame.clone());
        };
        match &e.audience {
            Audience::All => members.into_iter().flat_map(HashMap::values).for_each(push),
            Audience::AllBut(x) => members
                .into_iter()
                .flatten()
                .filter(|(s, _)| *s != x)
                .for_each(|(_, out)| push(out)),
            Audience::Only(list) => list
                .iter()
                .filter_map(|s| st.sessions.get(s))
                .for_each(|slot| push(&slot.out)),
            Audience::Evict(_) | Audience::Moved { .. } => {}
        }
        Vec::new()
    }
}

fn remove_member(st: &mut HubState, room: &RoomId, via: &NodeId, session: SessionId) {
    if let Some(by_shard) = st.rooms.get_mut(room) {
        by_shard.remove(via, session);
        if by_shard.0.is_empty() {
            st.rooms.remove(room);
        }
    }
}

#[cfg(test)]
mod tests;
