//! The gateway's local sessions and room fan-out: room -> local sessions, and the handling of
//! everything a shard sends back (replies, events, evictions).
//!
//! A shard sends one copy of each event per gateway; the hub turns its bytes into one
//! `Utf8Bytes` and pushes clones of it (a reference count, no copy) to each member's outbox.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock, RwLockWriteGuard};

use bytes::Bytes;
use protocol::client::{self, RoomLeft};
use protocol::link::{Audience, LeaveReason, Membership, Reply, RoomEvent, ToGateway};
use protocol::{RoomId, SessionId, UserId};
use tokio_tungstenite::tungstenite::Utf8Bytes;
use tracing::warn;

use crate::outbox::Outbox;

/// One local session as the hub knows it.
#[derive(Debug)]
struct Slot {
    user: UserId,
    out: Arc<Outbox>,
    room: Option<RoomId>,
}

#[derive(Debug, Default)]
struct HubState {
    sessions: HashMap<SessionId, Slot>,
    rooms: HashMap<RoomId, HashSet<SessionId>>,
    users: HashMap<UserId, Vec<SessionId>>,
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

    /// Registers a new session.
    pub(crate) fn add(&self, session: SessionId, user: UserId, out: Arc<Outbox>) {
        let mut st = self.write();
        st.users.entry(user.clone()).or_default().push(session);
        st.sessions.insert(
            session,
            Slot {
                user,
                out,
                room: None,
            },
        );
    }

    /// Removes a closed session; returns the leave to send for the room it was in.
    pub(crate) fn remove(&self, session: SessionId) -> Option<PendingLeave> {
        let mut st = self.write();
        let slot = st.sessions.remove(&session)?;
        if let Some(list) = st.users.get_mut(&slot.user) {
            list.retain(|s| *s != session);
            if list.is_empty() {
                st.users.remove(&slot.user);
            }
        }
        let room = slot.room?;
        remove_member(&mut st, &room, session);
        Some(PendingLeave {
            session,
            user: slot.user,
            room,
            reason: LeaveReason::Disconnected,
        })
    }

    /// Queues a frame to one session.
    pub(crate) fn send_to(&self, session: SessionId, frame: Utf8Bytes) {
        let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = st.sessions.get(&session) {
            slot.out.push(frame);
        }
    }

    /// Applies one message from a shard. Returns the leaves the gateway must now send.
    pub(crate) fn apply(&self, msg: ToGateway) -> Vec<PendingLeave> {
        match msg {
            ToGateway::Reply(r) => self.reply(r),
            ToGateway::Event(e) => {
                self.event(e);
                Vec::new()
            }
        }
    }

    fn reply(&self, r: Reply) -> Vec<PendingLeave> {
        let mut leaves = Vec::new();
        let frame = r.client_id.map(|id| match &r.outcome {
            Ok(ok) => client::encode_ok_raw(id, ok),
            Err(e) => client::encode_err(Some(id), e.code, &e.msg),
        });
        if let Err(e) = &r.outcome {
            metrics::counter!(crate::metrics::ERRORS, "code" => e.code.as_str()).increment(1);
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
        match r.membership {
            Some(Membership::Joined) => {
                let old = st
                    .sessions
                    .get_mut(&r.session)
                    .and_then(|s| s.room.replace(r.room.clone()));
                st.rooms
                    .entry(r.room.clone())
                    .or_default()
                    .insert(r.session);
                if let Some(old) = old.filter(|o| *o != r.room) {
                    remove_member(&mut st, &old, r.session);
                    leaves.push(PendingLeave {
                        session: r.session,
                        user: user.clone(),
                        room: old,
                        reason: LeaveReason::Switched,
                    });
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
                    let Some(room) = o.room.take_if(|room| *room != r.room) else {
                        continue;
                    };
                    let notice = client::encode_event(
                        "room.left",
                        None,
                        None,
                        &RoomLeft {
                            room: room.clone(),
                            reason: "switched".into(),
                        },
                    );
                    if let Some(t) = text(notice) {
                        o.out.push(t);
                    }
                    remove_member(&mut st, &room, other);
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
                    && slot.room.as_ref() == Some(&r.room) {
                        slot.room = None;
                    }
                remove_member(&mut st, &r.room, r.session);
            }
            None => {}
        }
        if let Some(frame) = frame.and_then(text)
            && let Some(slot) = st.sessions.get(&r.session) {
                slot.out.push(frame);
            }
        leaves
    }

    fn event(&self, e: RoomEvent) {
        let Some(frame) = text(e.frame) else { return };
        if let Audience::Evict(list) = &e.audience {
            let mut st = self.write();
            for s in list {
                if let Some(slot) = st.sessions.get_mut(s) {
                    slot.out.push(frame.clone());
                    if slot.room.as_ref() == Some(&e.room) {
                        slot.room = None;
                    }
                }
                remove_member(&mut st, &e.room, *s);
            }
            return;
        }
        let st = self.state.read().unwrap_or_else(PoisonError::into_inner);
        let push = |s: &SessionId| {
            if let Some(slot) = st.sessions.get(s) {
                slot.out.push(frame.clone());
            }
        };
        match &e.audience {
            Audience::All => st.rooms.get(&e.room).into_iter().flatten().for_each(push),
            Audience::AllBut(x) => st
                .rooms
                .get(&e.room)
                .into_iter()
                .flatten()
                .filter(|s| *s != x)
                .for_each(push),
            Audience::Only(list) => list.iter().for_each(push),
            Audience::Evict(_) => {}
        }
    }
}

fn remove_member(st: &mut HubState, room: &RoomId, session: SessionId) {
    if let Some(set) = st.rooms.get_mut(room) {
        set.remove(&session);
        if set.is_empty() {
            st.rooms.remove(room);
        }
    }
}
