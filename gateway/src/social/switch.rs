//! One room per user across gateways. When a client's join succeeds, the gateway records
//! user → (room, gateway, session) in the registry with one atomic swap that returns the entry
//! it replaced; if that was another session in another room, its gateway is told to take it
//! out (`room.left` `switched` to it, `member.leave` `switched` in its room).
//!
//! Swaps of one user are totally ordered by the registry, and each one tells the holder it
//! replaced, so every join but the last is taken out: the user ends in one room. A notice
//! names the version of the entry it replaces; a session whose own later swap is still in
//! flight keeps the notice until that swap answers, and drops it if its entry moved on (its
//! later swap tells the other session instead). Same room through another connection is the
//! room's own "replaced" rule, not this one.
//!
//! A closed connection's entry stays for the rooms' presence grace window (its member is
//! away there, and may come back): a join elsewhere meanwhile still tells its gateway, which
//! ends the away member at once with a `Leave(Switched)` in the closed session's name.

use std::sync::Arc;
use std::task::{Context, Waker};

use protocol::link::{LeaveReason, RoomCmd};
use protocol::{RoomId, SessionId, UserId};
use storage::registry::Registry;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use super::Notice;
use crate::shared::Core;

impl Core {
    /// A client's join or leave was applied: record it in the registry (called after the
    /// hub applied the reply; `joined` false for a leave).
    pub(crate) fn membership_changed(
        self: &Arc<Self>,
        session: SessionId,
        user: &UserId,
        room: &RoomId,
        joined: bool,
    ) {
        let here = self.hub.room_of(session);
        if joined {
            if here.as_ref() != Some(room) {
                return;
            }
            self.social
                .sessions()
                .entry(session)
                .or_default()
                .swap_started();
            let core = self.clone();
            let (user, room) = (user.clone(), room.clone());
            let swap = async move { swap(&core, session, &user, &room).await };
            if matches!(self.social.registry, Registry::InProcess(_)) {
                // Standalone's registry answers at once: no task per join (a burst of joins
                // would hold thousands of them).
                run_or_spawn(&self.tracker, swap);
            } else {
                self.tracker.spawn(swap);
            }
        } else if here.is_none() {
            let mut tracked = self.social.sessions();
            if let Some(t) = tracked.get_mut(&session) {
                t.entry = None;
            }
            super::forget_if_idle(&mut tracked, session);
            drop(tracked);
            let core = self.clone();
            let (user, room) = (user.clone(), room.clone());
            self.tracker.spawn(async move {
                let at = core.social.me(session);
                if let Err(e) = core.social.registry.clear_room(&user, &room, &at).await {
                    warn!(error = %e, "Could not clear a registry room entry.");
                }
            });
        }
    }
}

impl Core {
    /// The room took `sessions` out of `room` (kicked, closed, replaced): their registry
    /// entries there go (compare-and-delete, so a newer entry elsewhere stays).
    pub(crate) fn taken_out(self: &Arc<Self>, room: &RoomId, sessions: &[SessionId]) {
        for &session in sessions {
            let was_here = {
                let mut tracked = self.social.sessions();
                let hit = tracked
                    .get_mut(&session)
                    .filter(|t| t.entry.as_ref().is_some_and(|(r, _)| r == room))
                    .map(|t| t.entry = None)
                    .is_some();
                super::forget_if_idle(&mut tracked, session);
                hit
            };
            let Some(user) = was_here.then(|| self.hub.user_of(session)).flatten() else {
                continue;
            };
            let core = self.clone();
            let room = room.clone();
            self.tracker.spawn(async move {
                let at = core.social.me(session);
                if let Err(e) = core.social.registry.clear_room(&user, &room, &at).await {
                    warn!(error = %e, "Could not clear a registry room entry.");
                }
            });
        }
    }
}

/// Runs `fut` now as far as it goes without waiting, and spawns the rest, if any, as a task
/// (which polls it again at once, with a real waker).
fn run_or_spawn(tracker: &TaskTracker, fut: impl Future<Output = ()> + Send + 'static) {
    let mut fut = Box::pin(fut);
    let mut cx = Context::from_waker(Waker::noop());
    if fut.as_mut().poll(&mut cx).is_pending() {
        tracker.spawn(fut);
    }
}

async fn swap(core: &Arc<Core>, session: SessionId, user: &UserId, room: &RoomId) {
    let at = core.social.me(session);
    let swapped = core.social.registry.set_room(user, room, &at).await;
    let still_here = core.hub.room_of(session).as_ref() == Some(room);
    let closed = core.hub.user_of(session).is_none();
    if swapped.is_ok() && !still_here && !closed {
        // The session left while the swap was on its way: the entry is not true. (A session
        // that closed is away in the room for the grace window; its entry stays until the
        // disconnect's own clean-up at the window's end.)
        if let Err(e) = core.social.registry.clear_room(user, room, &at).await {
            warn!(error = %e, "Could not clear a registry room entry.");
        }
    }
    let evict = {
        let mut tracked = core.social.sessions();
        let Some(t) = tracked.get_mut(&session) else {
            return;
        };
        let ver = swapped.as_ref().ok().filter(|_| still_here).map(|s| s.ver);
        let evict = t.swap_answered(room, ver);
        super::forget_if_idle(&mut tracked, session);
        evict
    };
    if let Some(r) = evict {
        take_out(core, session, &r);
    }
    let swapped = match swapped {
        Ok(s) => s,
        Err(e) => {
            warn!(error = %e, %user, "Registry unreachable; one room per user holds on this gateway only.");
            return;
        }
    };
    let Some(prev) = swapped.previous.filter(|_| still_here) else {
        return;
    };
    if prev.at == at || prev.room == *room {
        return;
    }
    debug!(%user, from = %prev.room, to = %room, gateway = %prev.at.gateway, "User switched rooms across gateways.");
    let notice = Notice::Switched {
        incarnation: prev.at.incarnation,
        session: prev.at.session,
        room: prev.room,
        ver: prev.ver,
        user: Some(user.clone()),
    };
    core.notify(&prev.at.gateway, &notice).await;
}

/// A "take session out of room" notice for this gateway.
pub(super) fn on_switched(
    core: &Arc<Core>,
    session: SessionId,
    room: RoomId,
    ver: u64,
    user: Option<UserId>,
) {
    if core.hub.user_of(session).is_none() {
        // The session closed: its member may still be away in the room's grace window (its
        // entry is kept that long). Ending that at once keeps the user in one room; a room
        // where the member is no longer away answers `NOT_IN_ROOM`, which nobody waits for.
        if let Some(user) = user {
            let cmd = RoomCmd::Leave(LeaveReason::Switched);
            core.send_command(session, &user, None, room, cmd, None);
        }
        return;
    }
    let go = {
        let mut tracked = core.social.sessions();
        let Some(t) = tracked.get_mut(&session) else {
            return;
        };
        t.switched(room.clone(), ver)
    };
    if go {
        take_out(core, session, &room);
    }
}

fn take_out(core: &Arc<Core>, session: SessionId, room: &RoomId) {
    {
        let mut tracked = core.social.sessions();
        if let Some(t) = tracked.get_mut(&session) {
            t.entry = None;
        }
        super::forget_if_idle(&mut tracked, session);
    }
    if let Some(leave) = core.hub.take_out(session, room, LeaveReason::Switched) {
        core.send_leaves(vec![leave]);
    }
}
