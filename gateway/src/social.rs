//! What a gateway does for users rather than rooms: the user registry (which gateways hold a
//! user's connections, which room the user is in), the gateway bus that carries notices
//! between gateways, direct messages ([`im`]) and one room per user across gateways
//! ([`switch`]).
//!
//! Standalone has one gateway: its registry is in-process and every notice is delivered
//! locally. A cluster gateway keeps its registry entries in Redis, alive while it is (see
//! `storage::registry`), and listens on its bus channel.

mod bus;
pub(crate) mod im;
mod switch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use protocol::client::Profile;
use protocol::{NodeId, RoomId, SessionId, UserId};
use storage::im::ImStore;
use storage::redis::Redis;
use storage::registry::{ALIVE_REFRESH, Registry, SessionRef};
use tracing::warn;

pub(crate) use bus::Notice;

use crate::shared::Core;

/// First pause before a connecting session's failed registration or backlog read is tried
/// again: a Redis blip often ends within a second.
const CONNECT_RETRY_MIN: Duration = Duration::from_millis(100);
/// Longest pause between those tries: a session waits at most this long after Redis is back.
const CONNECT_RETRY_MAX: Duration = Duration::from_secs(5);

/// What the gateway tracks per local session for the social features: only while the
/// session reads its backlog or is in a room (an idle connection holds nothing here). The two
/// lists are boxed: they are almost always absent, and every session in a room holds an entry.
#[derive(Debug, Default)]
#[allow(
    clippy::box_collection,
    reason = "a boxed list is one pointer in the entry every member holds; a Vec is three"
)]
struct Tracked {
    /// The session's direct-message catch-up; `None` once caught up and nothing is held.
    im: Option<Box<CatchUp>>,
    /// The room entry this session last wrote to the registry, with its version.
    entry: Option<(RoomId, u64)>,
    /// Registry writes of this session not answered yet.
    inflight: u32,
    /// "Take this session out" notices that arrived while a write was in flight.
    deferred: Option<Box<Vec<(RoomId, u64)>>>,
}

/// Where a session's direct-message catch-up stands (see `im::deliver_owed`).
#[derive(Debug)]
enum CatchUp {
    /// The backlog is being read: live messages that arrive meanwhile wait here, to follow it
    /// (those the backlog holds left out).
    Reading(Vec<(u64, String)>),
    /// The backlog was sent: the ids of its recent messages whose live delivery has not come
    /// yet. A message stored just before the read is in the backlog while its live delivery
    /// may still be on its way; it is dropped when it comes, so no message reaches the
    /// session twice.
    Sent(Vec<u64>),
}

impl Tracked {
    /// A registry swap of this session's room entry is on its way.
    fn swap_started(&mut self) {
        self.inflight += 1;
    }

    /// A swap for `room` answered, with the entry's version when it was written (and the
    /// session is still there). Returns the room to take the session out of, when a notice
    /// kept while swaps were in flight names the entry the session holds now.
    fn swap_answered(&mut self, room: &RoomId, ver: Option<u64>) -> Option<RoomId> {
        self.inflight = self.inflight.saturating_sub(1);
        if let Some(v) = ver
            && self.entry.as_ref().is_none_or(|(_, held)| *held < v)
        {
            self.entry = Some((room.clone(), v));
        }
        if self.inflight > 0 {
            return None;
        }
        let deferred = self.deferred.take().map(|d| *d).unwrap_or_default();
        deferred
            .into_iter()
            .find(|(r, v)| {
                self.entry
                    .as_ref()
                    .is_some_and(|(er, ev)| er == r && ev == v)
            })
            .map(|(r, _)| r)
    }

    /// A notice to take the session out of `room` if its entry there is still version
    /// `ver`: whether to do it now (a notice that arrives while a swap is in flight waits
    /// for its answer).
    fn switched(&mut self, room: RoomId, ver: u64) -> bool {
        if self.inflight > 0 {
            self.deferred.get_or_insert_default().push((room, ver));
            return false;
        }
        self.entry
            .as_ref()
            .is_some_and(|(r, v)| *r == room && *v == ver)
    }

    /// Whether nothing is tracked any more (the entry can go).
    fn is_idle(&self) -> bool {
        self.im.is_none() && self.entry.is_none() && self.inflight == 0 && self.deferred.is_none()
    }
}

/// Drops `session`'s tracking once it holds nothing.
fn forget_if_idle(tracked: &mut HashMap<SessionId, Box<Tracked>>, session: SessionId) {
    if tracked.get(&session).is_some_and(|t| t.is_idle()) {
        tracked.remove(&session);
    }
}

/// The gateway's social state and stores.
pub(crate) struct Social {
    node: NodeId,
    incarnation: u64,
    pub(crate) registry: Registry,
    pub(crate) im: ImStore,
    /// Redis, for the bus subscription (cluster only).
    redis: Option<Redis>,
    /// Boxed, like the hub's slots: a hash table keeps spare places (up to half of it after
    /// it grows), and every joined session holds an entry.
    sessions: Mutex<HashMap<SessionId, Box<Tracked>>>,
    /// Per-user `im.send` token buckets on this gateway.
    buckets: Mutex<HashMap<UserId, im::Bucket>>,
}

impl std::fmt::Debug for Social {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Social")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Social {
    /// Standalone: the in-process registry and the SQLite message store.
    pub(crate) fn standalone(node: NodeId, im: ImStore) -> Self {
        Self::new(node, Registry::in_process(), im, None)
    }

    /// A cluster gateway: registry, messages and bus on `redis`.
    pub(crate) fn cluster(node: NodeId, redis: &Redis) -> Self {
        Self::new(
            node,
            Registry::redis(redis),
            ImStore::redis(redis),
            Some(redis.clone()),
        )
    }

    fn new(node: NodeId, registry: Registry, im: ImStore, redis: Option<Redis>) -> Self {
        Self {
            node,
            incarnation: storage::registry::new_incarnation(),
            registry,
            im,
            redis,
            sessions: Mutex::new(HashMap::new()),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<SessionId, Box<Tracked>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This gateway's reference to its `session`.
    fn me(&self, session: SessionId) -> SessionRef {
        SessionRef {
            gateway: self.node.clone(),
            incarnation: self.incarnation,
            session,
        }
    }

    /// Records connection `at` of `user` in the registry. Standalone records nothing: its
    /// one gateway answers "where is this user" from its own sessions, so an idle connection
    /// costs no second entry.
    async fn register(&self, user: &UserId, at: &SessionRef) -> storage::Result<()> {
        match self.registry {
            Registry::InProcess(_) => Ok(()),
            Registry::Redis(_) => self.registry.add_connection(user, at).await,
        }
    }

    /// Whether `at` is a session of this gateway's current life.
    fn is_mine(&self, gateway: &NodeId, incarnation: u64) -> bool {
        *gateway == self.node && incarnation == self.incarnation
    }
}

/// Starts a cluster gateway's social tasks: the liveness key and the bus listener.
///
/// # Errors
/// `Unavailable` when Redis cannot be reached for the first liveness write.
pub(crate) async fn start(core: &Arc<Core>) -> storage::Result<()> {
    let social = &core.social;
    // Before connections come: a burst of connects and joins would each load them.
    let loaded = match social.registry.preload().await {
        Ok(()) => social.im.preload().await,
        Err(e) => Err(e),
    };
    if let Err(e) = loaded {
        warn!(error = %e, "Could not load the social scripts into Redis; each loads on first use.");
    }
    social
        .registry
        .keep_alive(&social.node, social.incarnation)
        .await?;
    core.tracker.spawn(keep_alive(core.clone()));
    if let Some(redis) = social.redis.clone() {
        let feed = storage::registry::BusFeed::open(&redis, &social.node).await?;
        core.tracker.spawn(bus::listen(core.clone(), redis, feed));
    }
    Ok(())
}

/// Refreshes the gateway's liveness key until shutdown, then marks it gone.
async fn keep_alive(core: Arc<Core>) {
    let social = &core.social;
    let mut tick = tokio::time::interval(ALIVE_REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = core.shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        if let Err(e) = social
            .registry
            .keep_alive(&social.node, social.incarnation)
            .await
        {
            warn!(error = %e, "Could not refresh the gateway's registry liveness.");
        }
    }
    if let Err(e) = social.registry.gone(&social.node, social.incarnation).await {
        warn!(error = %e, "Could not mark the gateway gone in the registry.");
    }
}

impl Core {
    /// A session is opening, before the hub knows it: its catch-up starts (live direct
    /// messages wait for the backlog, so none can reach it before `hello`).
    pub(crate) fn social_opening(&self, session: SessionId) {
        self.social.sessions().insert(
            session,
            Box::new(Tracked {
                im: Some(Box::new(CatchUp::Reading(Vec::new()))),
                ..Tracked::default()
            }),
        );
    }

    /// A session opened (after `social_opening` and its `hello`): with nothing to register or
    /// read its catch-up ends at once and this returns false; else it returns true and the
    /// caller must run `social_catch_up` (see `Core::connected`). The answer is decided here,
    /// once: asked twice, a delivery marked meanwhile could clear the user's pending mark
    /// between the asks, and the session would wait for a catch-up nobody runs.
    pub(crate) fn social_connected(self: &Arc<Self>, session: SessionId, user: &UserId) -> bool {
        let reads = self.social_reads_at_connect(user);
        if !reads {
            // Nothing to register or read: caught up at once, with no task.
            im::deliver_owed(self, session, user, Vec::new());
        }
        reads
    }

    /// Whether a new session of `user` must wait on a store (see `social_connected`): a
    /// cluster registers every connection in Redis and reads its backlog there; standalone
    /// reads only for a user its store may owe messages.
    fn social_reads_at_connect(&self, user: &UserId) -> bool {
        matches!(self.social.registry, Registry::Redis(_)) || self.social.im.may_owe(user)
    }

    /// A new session's registration and catch-up, after `social_connected` returned true.
    /// A store that fails (a Redis blip) is tried again with backoff while the session lives:
    /// until registered, other gateways cannot reach it, and its live messages wait for the
    /// backlog.
    pub(crate) async fn social_catch_up(self: &Arc<Self>, session: SessionId, user: &UserId) {
        let at = self.social.me(session);
        let mut pause = CONNECT_RETRY_MIN;
        while let Err(e) = self.social.register(user, &at).await {
            warn!(error = %e, %user, "Could not register a connection; retrying.");
            if !self.retry_after(session, &mut pause).await {
                return;
            }
        }
        im::catch_up(self, session, user, pause).await;
    }

    /// Waits `pause` before a connecting session's store call is tried again, then doubles it
    /// (up to `CONNECT_RETRY_MAX`). False when the session closed or the node stops meanwhile.
    async fn retry_after(&self, session: SessionId, pause: &mut Duration) -> bool {
        tokio::select! {
            () = self.shutdown.cancelled() => return false,
            () = tokio::time::sleep(*pause) => {}
        }
        *pause = (*pause * 2).min(CONNECT_RETRY_MAX);
        self.social.sessions().contains_key(&session)
    }

    /// A session closed: forget it here and in the registry.
    pub(crate) fn social_disconnected(self: &Arc<Self>, session: SessionId, user: &UserId) {
        self.social.sessions().remove(&session);
        // The user's direct-message bucket stays (a reconnect must not refill it) until it is
        // full again; sends sweep full ones (`im::check`).
        let core = self.clone();
        let user = user.clone();
        let grace = self.config.presence_grace;
        self.tracker.spawn(async move {
            let at = core.social.me(session);
            if let Err(e) = core.social.registry.remove_connection(&user, &at).await {
                warn!(error = %e, %user, "Could not unregister a connection.");
            }
            // The room keeps the member, away, for the grace window: so does the registry, so
            // that a join elsewhere meanwhile ends it (`switch.rs`). A stop needs no clean-up:
            // the gateway's entries die with its liveness key.
            tokio::select! {
                () = tokio::time::sleep(grace) => {}
                () = core.shutdown.cancelled() => return,
            }
            if let Err(e) = core.social.registry.clear_room_of(&user, &at).await {
                warn!(error = %e, %user, "Could not clear a closed connection's room entry.");
            }
        });
    }

    /// User `user`'s profile changed to `profile` (e.g. `user.update`): tell every gateway
    /// holding the user's connections, which updates its sessions and tells their rooms.
    pub(crate) fn profile_changed(self: &Arc<Self>, user: &UserId, profile: &Profile) {
        let core = self.clone();
        let notice = Notice::Profile {
            user: user.clone(),
            profile: profile.clone(),
        };
        let user = user.clone();
        self.tracker.spawn(async move {
            match core.gateways_of(&user).await {
                Ok(gateways) => {
                    for gw in gateways {
                        core.notify(&gw, &notice).await;
                    }
                }
                Err(e) => {
                    warn!(error = %e, %user, "Registry unreachable; profile change applied locally only.");
                    core.apply_notice(notice);
                }
            }
        });
    }

    /// The gateways holding connections of `user` (standalone: this one, if it holds any).
    pub(crate) async fn gateways_of(&self, user: &UserId) -> storage::Result<Vec<NodeId>> {
        match self.social.registry {
            Registry::InProcess(_) => Ok(if self.hub.sessions_of(user).is_empty() {
                Vec::new()
            } else {
                vec![self.social.node.clone()]
            }),
            Registry::Redis(_) => self.social.registry.gateways_of(user).await,
        }
    }

    /// Sends `notice` to gateway `gw` (applied here at once when `gw` is this one).
    pub(crate) async fn notify(self: &Arc<Self>, gw: &NodeId, notice: &Notice) {
        if *gw == self.social.node {
            self.apply_notice(notice.clone());
            return;
        }
        let payload = protocol::client::to_json(notice);
        if let Err(e) = self.social.registry.publish(gw, &payload).await {
            warn!(error = %e, %gw, "Could not publish a bus notice.");
        }
    }

    /// Applies a notice from the bus (or from this gateway).
    pub(crate) fn apply_notice(self: &Arc<Self>, notice: Notice) {
        match notice {
            Notice::Im {
                user,
                id,
                inbox,
                msg,
            } => im::deliver_local(self, &user, id, &msg, inbox, None),
            Notice::Switched {
                incarnation,
                session,
                room,
                ver,
                user,
            } => {
                if self.social.is_mine(&self.social.node, incarnation) {
                    switch::on_switched(self, session, room, ver, user);
                }
            }
            Notice::Profile { user, profile } => {
                self.profile_applied(&user, crate::auth::shared_profile(profile));
            }
            Notice::Standing { user } => self.refresh_standing(&user),
            Notice::Suspended { user, suspension } => {
                self.apply_suspension(&user, Some(suspension));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(t: &mut Tracked, room: &str, ver: u64) -> Option<RoomId> {
        t.swap_started();
        t.swap_answered(&RoomId::from(room), Some(ver))
    }

    #[test]
    fn a_notice_for_the_entry_held_takes_the_session_out_and_an_older_one_does_not() {
        let mut t = Tracked::default();
        assert_eq!(joined(&mut t, "a", 5), None);
        assert!(!t.switched(RoomId::from("a"), 4), "an older entry");
        assert!(!t.switched(RoomId::from("b"), 5), "another room");
        assert!(t.switched(RoomId::from("a"), 5));
        // The session moved on: the notice about its earlier entry is stale.
        assert_eq!(joined(&mut t, "c", 9), None);
        assert!(!t.switched(RoomId::from("a"), 5));
    }

    #[test]
    fn a_notice_that_arrives_before_its_swap_answers_waits_for_it() {
        // The registry wrote ver 5 for this session, then another session's swap replaced it
        // and its notice arrived before this gateway heard back from the registry.
        let mut t = Tracked::default();
        t.swap_started();
        assert!(!t.switched(RoomId::from("a"), 5));
        assert_eq!(
            t.swap_answered(&RoomId::from("a"), Some(5)),
            Some(RoomId::from("a"))
        );
    }

    /// Every session in a room holds one: its size is paid per member.
    #[test]
    fn a_tracked_session_stays_small() {
        assert!(std::mem::size_of::<Tracked>() <= 48);
    }

    #[test]
    fn a_notice_kept_during_a_later_swap_of_the_session_is_dropped() {
        // In a (ver 5); replaced elsewhere (notice for 5); meanwhile the client joined a
        // again and that swap (ver 7) is in flight: it tells the other session instead.
        let mut t = Tracked::default();
        joined(&mut t, "a", 5);
        t.swap_started();
        assert!(!t.switched(RoomId::from("a"), 5));
        assert_eq!(t.swap_answered(&RoomId::from("a"), Some(7)), None);
        assert!(t.deferred.is_none());
    }

    #[test]
    fn swaps_answered_out_of_order_keep_the_newest_entry() {
        let mut t = Tracked::default();
        t.swap_started();
        t.swap_started();
        assert_eq!(t.swap_answered(&RoomId::from("b"), Some(8)), None);
        assert_eq!(t.swap_answered(&RoomId::from("a"), Some(6)), None);
        assert_eq!(t.entry, Some((RoomId::from("b"), 8)));
        // A failed swap changes no entry.
        t.swap_started();
        assert_eq!(t.swap_answered(&RoomId::from("c"), None), None);
        assert_eq!(t.entry, Some((RoomId::from("b"), 8)));
    }
}
