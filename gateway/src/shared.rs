//! What a gateway's tasks share ([`Core`]): sessions and their rooms (the hub), the routes to
//! shards, commands waiting for their replies (with routing retries), and the node-wide tasks
//! (pending sweep, heartbeat, drain).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use protocol::client::{self, RoomOp};
use protocol::link::{Command, ReplyError, RoomCmd, ToGateway};
use protocol::{ErrorCode, NodeId, RoomId, SessionId, UserId};

/// First delay before a routing retry; doubles per attempt.
const RETRY_MIN_DELAY: Duration = Duration::from_millis(20);
/// Longest delay between routing retries.
const RETRY_MAX_DELAY: Duration = Duration::from_millis(500);
/// Commands in flight per gateway (awaiting a reply or a routing retry) before new ones are
/// refused with `UNAVAILABLE`: far above what the per-connection rate limits let a healthy
/// node accumulate, low enough to bound memory when every shard is unreachable.
const MAX_PENDING_COMMANDS: usize = 262_144;
/// After the drain window, how long closing sockets get before the hard stop.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// How often the drain checks whether every socket has closed.
const DRAIN_POLL: Duration = Duration::from_millis(20);
/// How often unanswered requests are checked against the retry budget.
const PENDING_SWEEP: Duration = Duration::from_millis(500);
/// The heartbeat task wakes this many times per heartbeat interval: each time it checks every
/// socket for silence and token expiry, and pings one slice of them, so each socket gets one
/// ping per interval and the pings of a big node are spread over the interval, not bunched.
const HEARTBEAT_SLICES: u32 = 8;
/// The client request id of a command whose reply the gateway itself waits for
/// ([`Core::command_reply`]) instead of a socket.
const WAITED: u64 = u64::MAX;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::GatewayConfig;
use crate::hub::{self, Hub, PendingLeave, text};
use crate::router::Route;
use crate::{auth, money, outbox, router};

/// Everything a gateway's tasks share.
pub(crate) struct Core {
    me: Weak<Core>,
    pub(crate) node: NodeId,
    pub(crate) config: GatewayConfig,
    pub(crate) hub: Hub,
    pub(crate) router: router::Router,
    pub(crate) auth: auth::Authenticator,
    pub(crate) shutdown: CancellationToken,
    /// Cancelled when the drain that `shutdown` starts is over (every socket closed, or the
    /// drain's deadline passed). What open sockets still need while they drain (the shard
    /// links, ring changes, routing retries, the heartbeat) runs until then, not until
    /// `shutdown`: a socket waiting for its 1001 is served its room as before.
    pub(crate) drained: CancellationToken,
    /// New-connection admission control.
    pub(crate) admission: crate::admission::Admission,
    pub(crate) tracker: TaskTracker,
    next_session: AtomicU64,
    next_req: AtomicU64,
    /// Commands sent and not yet answered, kept for routing retries.
    pending: Mutex<HashMap<u64, Pending>>,
    /// Replies the gateway waits for itself (the admin API's room messages), by the session
    /// id each such command was given.
    waiters: Mutex<HashMap<SessionId, tokio::sync::oneshot::Sender<Answer>>>,
    /// Ledger and catalog for the money ops the gateway answers itself.
    pub(crate) money: money::Money,
    /// The user registry, the gateway bus and direct messages.
    pub(crate) social: crate::social::Social,
    /// Profile and follow stores for the user ops the gateway answers itself.
    pub(crate) users: crate::users::Users,
    /// Sessions the gateway is moving to a room's new owner: their commands for that room
    /// wait (retried) until the move is done, instead of failing with `NOT_IN_ROOM`.
    rejoining: Mutex<std::collections::HashSet<(SessionId, RoomId)>>,
    /// Handles of the counters every frame touches, registered once: the `counter!` macro
    /// looks its key up in the recorder's registry at every call.
    pub(crate) hot: HotCounters,
    /// The room directory `room.list` reads (set once at start).
    pub(crate) directory: std::sync::OnceLock<Arc<crate::directory::Directory>>,
    /// The event webhook's sender, when configured (set once at start): `im.sent`.
    pub(crate) events: std::sync::OnceLock<shard::events::Notifier>,
    /// Users whose standing the next batched ledger read fetches.
    pub(crate) standing_queue: crate::standing::StandingQueue,
}

/// Counter handles for the per-frame paths.
pub(crate) struct HotCounters {
    /// [`crate::metrics::REQUESTS`].
    pub(crate) requests: ::metrics::Counter,
    /// [`crate::metrics::FRAMES_OUT`].
    pub(crate) frames_out: ::metrics::Counter,
    /// [`crate::metrics::WRITE_BATCHES`].
    pub(crate) write_batches: ::metrics::Counter,
}

/// A room's answer to a command: the reply's `ok` JSON, or its error.
pub(crate) type Answer = Result<bytes::Bytes, ReplyError>;

/// A command waiting for its reply.
struct Pending {
    cmd: Command,
    started: Instant,
    attempt: u32,
    /// The shard whose link carried the last attempt: if that link goes down before the
    /// reply, the command's outcome is unknown (see `Core::lost_with_link`).
    via: Option<NodeId>,
}

impl Core {
    #[allow(
        clippy::too_many_arguments,
        reason = "one value per part of the gateway, each built by the node's start-up"
    )]
    pub(crate) fn new(
        node: NodeId,
        config: GatewayConfig,
        router: router::Router,
        auth: auth::Authenticator,
        shutdown: CancellationToken,
        tracker: TaskTracker,
        money: money::Money,
        social: crate::social::Social,
        users: crate::users::Users,
    ) -> Arc<Self> {
        let admission = crate::admission::Admission::new(config.admit_per_sec, config.admit_burst);
        let core = Arc::new_cyclic(|me| Self {
            me: me.clone(),
            node,
            config,
            hub: Hub::default(),
            router,
            auth,
            admission,
            shutdown,
            drained: CancellationToken::new(),
            tracker,
            next_session: AtomicU64::new(1),
            next_req: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            waiters: Mutex::new(HashMap::new()),
            money,
            social,
            users,
            rejoining: Mutex::new(std::collections::HashSet::new()),
            directory: std::sync::OnceLock::new(),
            events: std::sync::OnceLock::new(),
            standing_queue: crate::standing::StandingQueue::default(),
            hot: HotCounters {
                requests: ::metrics::counter!(crate::metrics::REQUESTS),
                frames_out: ::metrics::counter!(crate::metrics::FRAMES_OUT),
                write_batches: ::metrics::counter!(crate::metrics::WRITE_BATCHES),
            },
        });
        core.tracker.spawn(core.clone().sweep_pending());
        core.tracker.spawn(core.clone().drain());
        core.tracker.spawn(core.clone().heartbeat());
        core
    }

    fn self_ref(&self) -> Weak<Self> {
        self.me.clone()
    }

    /// Writes `frame` to `session`'s socket.
    pub(crate) fn send_frame(&self, session: SessionId, frame: bytes::Bytes) {
        if let Some(t) = text(frame) {
            self.hub.send_to(session, t);
        }
    }

    /// `wallet.balance`, `gift.list` and `rank.get`, answered by the gateway itself: at once
    /// when no ledger read is needed, otherwise on a task of its own.
    pub(crate) fn money_request(
        self: &Arc<Self>,
        session: SessionId,
        user: &UserId,
        id: u64,
        op: client::Op,
    ) {
        if let Some(frame) = self.money.answer_now(id, &op) {
            self.send_frame(session, frame);
            return;
        }
        let core = self.clone();
        let user = user.clone();
        self.tracker.spawn(async move {
            let frame = core.money.answer(&user, id, op).await;
            core.send_frame(session, frame);
        });
    }

    pub(crate) fn next_session(&self) -> SessionId {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends a room command on behalf of a session, to `hint` first when given (a handoff's
    /// new owner).
    pub(crate) fn send_command(
        &self,
        session: SessionId,
        user: &UserId,
        client_id: Option<u64>,
        room: RoomId,
        cmd: RoomCmd,
        hint: Option<NodeId>,
    ) {
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        if client_id.is_some() && matches!(cmd, RoomCmd::Op(RoomOp::Join(_))) {
            self.hub.note_join(session, req, &room);
        }
        let (profile, standing) = match &cmd {
            RoomCmd::Op(RoomOp::Join(_) | RoomOp::Create(_)) | RoomCmd::Rejoin(_) => (
                self.hub.profile(session).map(|p| (*p).clone()),
                self.hub.standing(session),
            ),
            _ => (None, None),
        };
        let cmd = Command {
            req,
            gateway: self.node.clone(),
            session,
            user: user.clone(),
            client_id,
            room,
            cmd,
            profile,
            standing,
        };
        // Routed before it is recorded, so the record names the link it takes (one lock).
        let route = self.router.route(&cmd.room, hint.as_ref());
        {
            let mut pending = self.pending();
            if pending.len() >= MAX_PENDING_COMMANDS {
                // Reject policy: the node is saturated; nothing queues without a bound.
                drop(pending);
                ::metrics::counter!(crate::metrics::ERRORS, "code" => "UNAVAILABLE").increment(1);
                if cmd.client_id == Some(WAITED) {
                    let busy = ReplyError::new(ErrorCode::Unavailable, "gateway busy; retry");
                    self.answer_waiter(cmd.session, Err(busy));
                } else if let Some(id) = cmd.client_id {
                    let frame =
                        client::encode_err(Some(id), ErrorCode::Unavailable, "gateway busy; retry");
                    if let Some(t) = text(frame) {
                        self.hub.send_to(cmd.session, t);
                    }
                }
                return;
            }
            pending.insert(
                req,
                Pending {
                    cmd: cmd.clone(),
                    started: Instant::now(),
                    attempt: 0,
                    via: route.as_ref().and_then(Route::shard).cloned(),
                },
            );
        }
        let sent = route.is_some_and(|r| r.send(cmd));
        tracing::trace!(req, sent, "Command routed.");
        if !sent {
            self.not_carried(req);
            self.retry_later(req, hint);
        }
    }

    /// Sends `cmd` to `room` as the gateway itself (a fresh session that is nobody's socket)
    /// and waits up to `wait` for the room's answer. Like a client's request it is never sent
    /// twice once a shard may have run it: a link lost meanwhile, or no answer in time, is
    /// `UNAVAILABLE` (with `outcome_unknown` when the room may have run it).
    pub(crate) async fn command_reply(
        &self,
        user: &UserId,
        room: RoomId,
        cmd: RoomCmd,
        wait: Duration,
    ) -> Answer {
        let session = self.next_session();
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.waiters().insert(session, tx);
        self.send_command(session, user, Some(WAITED), room, cmd, None);
        let answer = tokio::time::timeout(wait, rx).await;
        self.waiters().remove(&session);
        match answer {
            Ok(Ok(answer)) => answer,
            _ => Err(ReplyError {
                outcome_unknown: true,
                ..ReplyError::new(ErrorCode::Unavailable, "no answer from the room in time")
            }),
        }
    }

    fn waiters(&self) -> MutexGuard<'_, HashMap<SessionId, tokio::sync::oneshot::Sender<Answer>>> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands `answer` to whoever waits on `session` ([`Self::command_reply`]).
    fn answer_waiter(&self, session: SessionId, answer: Answer) {
        if let Some(tx) = self.waiters().remove(&session) {
            let _ = tx.send(answer);
        }
    }

    fn rejoining_set(&self) -> MutexGuard<'_, std::collections::HashSet<(SessionId, RoomId)>> {
        self.rejoining
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn pending(&self) -> MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends pending request `req` again, noting the link it takes first: a link that goes
    /// down after this takes the command with it. False when no shard can take it now.
    fn reroute(&self, req: u64, cmd: Command, hint: Option<&NodeId>) -> bool {
        let Some(route) = self.router.route(&cmd.room, hint) else {
            return false;
        };
        if let Some(p) = self.pending().get_mut(&req) {
            p.via = route.shard().cloned();
        }
        let sent = route.send(cmd);
        if !sent {
            self.not_carried(req);
        }
        sent
    }

    /// Pending request `req` could not be handed to the link it was routed to: no link carries
    /// it, so a link that goes down meanwhile does not give up on it (its retry is due).
    fn not_carried(&self, req: u64) {
        if let Some(p) = self.pending().get_mut(&req) {
            p.via = None;
        }
    }

    /// The link to `shard` went down with these commands unanswered: whether the shard ran
    /// them is unknown. A client's request is answered `UNAVAILABLE` at once (the client may
    /// retry; a gift's `req_id` makes that safe), a handoff rejoin becomes the client's own
    /// `room.left`, as for the members the shard's eviction reached, and the gateway's own
    /// commands (leaves, profile and standing updates), which are safe to repeat, are
    /// routed again.
    fn lost_with_link(&self, shard: &NodeId) {
        // One pass under the lock: the gateway's own commands stay pending, carried by none;
        // the others leave the map to be answered.
        let mut again = Vec::new();
        let mut lost = Vec::new();
        {
            let mut p = self.pending();
            let reqs: Vec<u64> = p
                .iter()
                .filter(|(_, v)| v.via.as_ref() == Some(shard))
                .map(|(k, _)| *k)
                .collect();
            for req in reqs {
                let Some(v) = p.get_mut(&req) else { continue };
                if v.cmd.client_id.is_none() && !matches!(v.cmd.cmd, RoomCmd::Rejoin(_)) {
                    v.via = None;
                    again.push(req);
                } else if let Some(v) = p.remove(&req) {
                    lost.push(v);
                }
            }
        }
        for p in lost {
            self.give_up(&p.cmd, "the room's shard went away before answering; retry");
        }
        for req in again {
            self.retry_later(req, None);
        }
    }

    /// Gives up on a command: a handoff rejoin becomes the client's `room.left`, a client's
    /// request is answered `UNAVAILABLE` with `msg`.
    fn give_up(&self, cmd: &Command, msg: &str) {
        if let RoomCmd::Rejoin(_) = &cmd.cmd {
            self.rejoining_set()
                .remove(&(cmd.session, cmd.room.clone()));
            self.rejoin_failed(cmd, None);
        }
        if cmd.client_id == Some(WAITED) {
            let gone = ReplyError {
                outcome_unknown: true,
                ..ReplyError::new(ErrorCode::Unavailable, msg)
            };
            self.answer_waiter(cmd.session, Err(gone));
        } else if let Some(id) = cmd.client_id
            && let Some(t) = text(client::encode_err(Some(id), ErrorCode::Unavailable, msg))
        {
            self.hub.send_to(cmd.session, t);
        }
    }

    /// Sends pending request `req` again after a backoff (to `hint` if given).
    fn retry_later(&self, req: u64, hint: Option<NodeId>) {
        let attempt = match self.pending().get_mut(&req) {
            Some(p) => {
                p.attempt += 1;
                p.attempt
            }
            None => return,
        };
        ::metrics::counter!(crate::metrics::ROUTING_RETRIES).increment(1);
        let delay = RETRY_MIN_DELAY
            .saturating_mul(1 << attempt.min(6))
            .min(RETRY_MAX_DELAY);
        let me = self.self_ref();
        self.tracker.spawn(async move {
            let Some(core) = me.upgrade() else { return };
            tokio::select! {
                () = core.drained.cancelled() => return,
                () = tokio::time::sleep(delay) => {}
            }
            let cmd = match core.pending().get(&req) {
                Some(p) => p.cmd.clone(),
                None => return,
            };
            if !core.reroute(req, cmd, hint.as_ref()) {
                core.retry_later(req, None);
            }
        });
    }

    /// Answers `UNAVAILABLE` to requests that found no owner within the retry budget.
    pub(crate) async fn sweep_pending(self: Arc<Self>) {
        let mut tick = tokio::time::interval(PENDING_SWEEP);
        loop {
            tokio::select! {
                () = self.drained.cancelled() => return,
                _ = tick.tick() => {}
            }
            let budget = self.config.route_retry_budget;
            let expired: Vec<Pending> = {
                let mut p = self.pending();
                let old: Vec<u64> = p
                    .iter()
                    .filter(|(_, v)| v.started.elapsed() > budget)
                    .map(|(k, _)| *k)
                    .collect();
                old.iter().filter_map(|k| p.remove(k)).collect()
            };
            for p in expired {
                self.give_up(&p.cmd, "room is moving or its shard is unreachable; retry");
            }
        }
    }

    /// The node-wide heartbeat: pings every socket once per interval and closes those silent
    /// for two intervals (1000) or whose token expired (1008). One task for all sockets keeps
    /// a timer out of every idle socket's state; a close is at most one slice
    /// (interval / [`HEARTBEAT_SLICES`]) late.
    async fn heartbeat(self: Arc<Self>) {
        let hb = self.config.heartbeat;
        let period = (hb / HEARTBEAT_SLICES).max(Duration::from_millis(1));
        let silence_ms = u64::try_from((2 * hb).as_millis()).unwrap_or(u64::MAX);
        let mut tick = tokio::time::interval_at(Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut slice = 0u64;
        loop {
            tokio::select! {
                () = self.drained.cancelled() => return,
                _ = tick.tick() => {}
            }
            let closed = self.hub.beat(
                slice,
                u64::from(HEARTBEAT_SLICES),
                silence_ms,
                self.config.expiry_warning.as_secs(),
            );
            if closed > 0 {
                tracing::debug!(closed, "Heartbeat closed silent or expired sockets.");
            }
            slice = (slice + 1) % u64::from(HEARTBEAT_SLICES);
        }
    }

    /// Graceful drain: once shutdown starts, tell every client to reconnect elsewhere (close
    /// 1001), spread evenly over the drain window; close what is left at the deadline. Until
    /// every socket has closed (bounded), `drained` stays uncancelled: the shard links stay
    /// up, so a socket that waits for its turn is still served its room, and its room keeps
    /// its member (a link that closed at the start would take every member of this gateway
    /// out of its room at once, starting their presence grace before their 1001).
    async fn drain(self: Arc<Self>) {
        self.shutdown.cancelled().await;
        let outboxes = self.hub.outboxes();
        let n = outboxes.len().max(1) as u32;
        let window = self.config.drain_window;
        let start = Instant::now();
        tracing::info!(
            sessions = outboxes.len(),
            ?window,
            "Draining: closing sockets with 1001."
        );
        for (i, o) in outboxes.iter().enumerate() {
            tokio::time::sleep_until(start + window * (i as u32) / n).await;
            o.kick(outbox::Kick::GoingAway);
        }
        let deadline = start + window + DRAIN_GRACE;
        self.wait_sessions_closed(deadline).await;
        // The deadline: every socket still open (including any whose handshake finished during
        // the drain) is told to close now, and given as long again to write its close.
        for o in self.hub.outboxes() {
            o.kick(outbox::Kick::GoingAway);
        }
        self.wait_sessions_closed(Instant::now() + DRAIN_GRACE)
            .await;
        self.drained.cancel();
    }

    /// Waits until no session is open, or `deadline`.
    async fn wait_sessions_closed(&self, deadline: Instant) {
        while self.hub.session_count() > 0 && Instant::now() < deadline {
            tokio::time::sleep(DRAIN_POLL).await;
        }
    }

    /// Applies one message from shard `from`: routing retries first, then the hub.
    pub(crate) fn on_shard_message(&self, from: &NodeId, msg: ToGateway) {
        tracing::trace!(%from, ?msg, "From shard.");
        // A reply whose request is no longer pending was answered already (the retry budget
        // ran out while the shard held it): see `Hub::late_reply`.
        let mut late = false;
        if let ToGateway::Reply(r) = &msg {
            let pending = self.pending().remove(&r.req);
            late = pending.is_none();
            if let Some(p) = &pending
                && let RoomCmd::Rejoin(_) = &p.cmd.cmd
            {
                self.rejoining_set()
                    .remove(&(p.cmd.session, p.cmd.room.clone()));
            }
            if let (Some(p), Err(e)) = (pending, &r.outcome) {
                let moving = e.code == ErrorCode::NotInRoom
                    && self
                        .rejoining_set()
                        .contains(&(p.cmd.session, p.cmd.room.clone()));
                // A command whose outcome the shard cannot tell is answered, not sent again.
                if ((e.code == ErrorCode::Unavailable && !e.outcome_unknown) || moving)
                    && p.started.elapsed() < self.config.route_retry_budget
                {
                    let hint = e.owner_hint.clone().filter(|h| h != from);
                    let req = r.req;
                    self.pending().insert(req, p);
                    self.retry_later(req, hint);
                    return;
                }
                if let RoomCmd::Rejoin(_) = &p.cmd.cmd {
                    self.rejoin_failed(&p.cmd, Some(e.code));
                }
            }
        }
        // A reply the gateway itself waits for goes to its waiter, not to a socket.
        let msg = match msg {
            ToGateway::Reply(r) if r.client_id == Some(WAITED) => {
                self.answer_waiter(r.session, r.outcome);
                return;
            }
            msg => msg,
        };
        // A client's join or leave that the hub applies is recorded in the user registry.
        let membership = match &msg {
            ToGateway::Reply(r) if r.outcome.is_ok() && r.client_id.is_some() => r
                .membership
                .filter(|m| !late || *m == protocol::link::Membership::Left)
                .map(|m| (r.session, r.user.clone(), r.room.clone(), m)),
            _ => None,
        };
        // So are members the room took out (kicked, closed, replaced).
        let evicted = match &msg {
            ToGateway::Event(e) => match &e.audience {
                protocol::link::Audience::Evict(list) => Some((e.room.clone(), list.clone())),
                _ => None,
            },
            ToGateway::Reply(_) => None,
        };
        let follow = match msg {
            ToGateway::Reply(r) if late => hub::FollowUps {
                leaves: self.hub.late_reply(from, r),
                rejoins: Vec::new(),
            },
            msg => self.hub.apply(from, msg),
        };
        if let Some((room, sessions)) = evicted
            && let Some(core) = self.self_ref().upgrade()
        {
            core.taken_out(&room, &sessions);
        }
        if let Some((session, user, room, m)) = membership
            && let Some(core) = self.self_ref().upgrade()
        {
            let joined = m == protocol::link::Membership::Joined;
            core.membership_changed(session, &user, &room, joined);
        }
        self.send_leaves(follow.leaves);
        for r in follow.rejoins {
            let join = protocol::client::RoomJoin {
                room: r.room.clone(),
                since: r
                    .since
                    .map(|(epoch, seq)| protocol::client::Since { epoch, seq }),
                password: None,
            };
            self.rejoining_set().insert((r.session, r.room.clone()));
            self.send_command(
                r.session,
                &r.user,
                None,
                r.room,
                RoomCmd::Rejoin(join),
                Some(r.to),
            );
        }
    }

    /// A handoff rejoin could not be completed (`refused`: the new owner's answer, if any):
    /// the client is told why it is out of the room.
    fn rejoin_failed(&self, cmd: &Command, refused: Option<ErrorCode>) {
        tracing::warn!(room = %cmd.room, session = cmd.session, ?refused, "Handoff rejoin failed; telling the client.");
        if let Some(t) = hub::room_left(&cmd.room, rejoin_left_reason(refused)) {
            self.hub.send_to(cmd.session, t);
        }
    }

    /// Sends the leaves the gateway makes on its own (switch, disconnect).
    pub(crate) fn send_leaves(&self, leaves: Vec<PendingLeave>) {
        for l in leaves {
            let leave = RoomCmd::Leave(l.reason);
            self.send_command(l.session, &l.user, None, l.room, leave, None);
        }
    }

    /// Applies messages from one shard link until it closes.
    pub(crate) async fn link_reader(self: Arc<Self>, mut rx: mpsc::Receiver<ToGateway>) {
        // Polled in place: a fresh `cancelled()` per message would register with (and leave)
        // the token's waiter list every time.
        let stopping = self.drained.cancelled();
        tokio::pin!(stopping);
        loop {
            let msg = tokio::select! {
                () = &mut stopping => return,
                m = rx.recv() => m,
            };
            let Some(msg) = msg else { return };
            let from = self.node.clone();
            self.on_shard_message(&from, msg);
        }
    }
}

impl crate::link::LinkOwner for Core {
    fn node(&self) -> &NodeId {
        &self.node
    }

    fn link_secret(&self) -> Option<&shard::link::LinkSecret> {
        self.config.link_secret.as_ref()
    }

    /// Links stay up through the drain (see `Core::drain`).
    fn link_stop(&self) -> &CancellationToken {
        &self.drained
    }

    fn on_shard_message(&self, from: &NodeId, msg: ToGateway) {
        Core::on_shard_message(self, from, msg);
    }

    fn on_link_down(&self, shard: &NodeId) {
        let evicted = self.hub.evict_where(|_, via| via == shard);
        self.lost_with_link(shard);
        tracing::warn!(%shard, evicted, "Shard link down.");
    }

    fn on_stranded(&self, shard: &NodeId) {
        self.lost_with_link(shard);
    }
}

/// The `room.left` reason for a handoff rejoin the gateway could not complete: a ban or a
/// `room.close` made during the move says so (the client must not rejoin by itself); anything
/// else is `unavailable` (rejoin with `since`).
fn rejoin_left_reason(refused: Option<ErrorCode>) -> &'static str {
    match refused {
        Some(ErrorCode::Banned) => "kicked",
        Some(ErrorCode::RoomClosed) => "closed",
        _ => "unavailable",
    }
}

#[cfg(test)]
mod rejoin_tests {
    use super::*;

    #[test]
    fn a_refused_rejoin_says_why() {
        assert_eq!(rejoin_left_reason(Some(ErrorCode::Banned)), "kicked");
        assert_eq!(rejoin_left_reason(Some(ErrorCode::RoomClosed)), "closed");
        assert_eq!(rejoin_left_reason(Some(ErrorCode::Internal)), "unavailable");
        assert_eq!(rejoin_left_reason(None), "unavailable");
    }
}
