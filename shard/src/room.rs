//! The room actor: one task, one bounded inbox, all room state inside it.
//!
//! The loop only receives, applies (through the pure rules in [`state`]), persists and
//! publishes. It starts only after its node claimed the room's lease (docs/ARCHITECTURE.md,
//! section 4) and stops the moment the lease keeper cancels its token.

mod backend;
mod directory;
mod gifts;
pub(crate) use gifts::sweep_orphans;
mod lifecycle;
mod notify;
mod pk_sync;
pub(crate) use lifecycle::sweep_retention;
pub(crate) mod log;
mod publish;
mod robots;
mod rocket;
pub(crate) mod snapshots;
pub mod state;
mod stop;
mod storm;
mod timers;
mod vip;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use protocol::client::{self, JoinOk, RoomCreated, RoomLeft, RoomOp};
use protocol::link::{Audience, Command, LeaveReason, Membership, ReplyError, RoomCmd};
use protocol::{ErrorCode, FencingToken, NodeId, RoomId, UserId};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::Inner;
use crate::metrics as m;
use crate::owner::Claim;
use log::{EventLog, Resume};
use snapshots::{Snapshots, Written};
use state::{Rejected, RoomState, SessionRef};
use timers::Timers;

/// A message in a room's inbox. The inbox carries each one boxed ([`Inbox`]): every room's
/// inbox holds a block of 32 slots from its start, and a slot of one pointer keeps that
/// block in the 320-byte class, where 16-byte slots made it a 640-byte one.
#[derive(Debug)]
pub(crate) enum RoomMsg {
    /// A command from a gateway (the largest message: boxing the message is one allocation
    /// of a command's size, as boxing the command was).
    Command(Command),
    /// A gateway's link closed: its sessions leave the room.
    GatewayGone(NodeId),
    /// The owner's recovery settled a saga a previous runtime left unfinished, or took a
    /// settled gift's event a runtime owed (see [`gifts::owe_event`]): publish it.
    GiftRecovered(storage::ledger::GiftOrder),
    /// The orphan sweep found work for the room's saga sweep (an unfinished saga, an owed
    /// event) while the room runs: sweep now.
    Sweep,
    /// The placement moved the room to this shard: hand it off.
    Handoff(NodeId),
    /// The admin API asks what the room looks like now.
    Inspect(tokio::sync::oneshot::Sender<serde_json::Value>),
    /// The robot reconcile's configuration for this room (`None`: stop its robots).
    Robots(Option<crate::robots::RobotConfig>),
    /// The retention sweep: remove the room from durable storage if nobody joined it since
    /// `cutoff_ms` and nothing holds it (see [`lifecycle`]); `done` gets whether it did.
    Expire(Expire),
    /// Every reward of the pending rocket launch with this number is booked: announce it.
    RocketPaid(u64),
    /// A PK between two rooms: time for the next exchange with the board.
    PkSync,
    /// A PK between two rooms: the board's answer to an exchange.
    PkBoard(Box<pk_sync::PkAnswer>),
}

/// The retention sweep's ask ([`RoomMsg::Expire`]).
#[derive(Debug)]
pub(crate) struct Expire {
    /// Remove the room if nobody joined it since (unix ms).
    pub(crate) cutoff_ms: u64,
    /// Gets whether it did.
    pub(crate) done: tokio::sync::oneshot::Sender<bool>,
}

/// What a room's inbox carries: one pointer per slot (see [`RoomMsg`]).
pub(crate) type Inbox = Box<RoomMsg>;

/// A cheap handle to a running room: the sending side of its inbox.
#[derive(Debug, Clone)]
pub(crate) struct RoomHandle {
    pub(crate) tx: mpsc::Sender<Inbox>,
    pub(crate) generation: u64,
}

/// What a starting runtime's first message may do to a room that does not exist yet.
#[derive(Debug, Clone)]
pub(crate) enum First {
    /// Anything: a load with no command (saga recovery, retention), or a robot room.
    Load,
    /// A command that creates the room if it is missing, from this user: past the user's
    /// creation rate the room is not claimed.
    Creates(UserId),
    /// A command that cannot create it: a missing room is answered `ROOM_NOT_FOUND`, unclaimed.
    CannotCreate,
}

/// Why a room stops.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stop {
    /// Planned move to another shard: finish in-flight gifts, hand the members over, save,
    /// release (the new owner claims at once, no lease expiry needed).
    Handoff(NodeId),
    /// No members for the idle time: save, release, exit; commands go to a fresh runtime.
    Idle,
    /// The room does not exist (the first command did not create it).
    Missing,
    /// The lease was lost or could not be proven: stop at once, write nothing more.
    LeaseLost,
    /// The node shuts down: save, release, exit.
    Shutdown,
}

/// The answer to a command whose change was not stored, so nobody saw it ([`RoomActor::publish`]).
const NOT_PUBLISHED: Rejected = state::rejected(ErrorCode::Unavailable, "room unavailable; retry");

/// The answer to a command whose change was not published because its write timed out or lost
/// its connection: it may be stored all the same, and a later owner would then replay it. The
/// gateway does not send such a command again (`ReplyError::outcome_unknown`).
const OUTCOME_UNKNOWN: Rejected = state::rejected(
    ErrorCode::Unavailable,
    "room unavailable; the request may have been applied",
);

/// Longest a handoff waits for the room's in-flight gift sagas.
const HANDOFF_GIFT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Starts one room: claims it, loads it and builds its actor, ready for its loop (`None`: the
/// room is not served here, and its queued commands were refused).
async fn start(
    inner: Arc<Inner>,
    room: RoomId,
    generation: u64,
    rx: mpsc::Receiver<Box<RoomMsg>>,
    self_tx: mpsc::WeakSender<Box<RoomMsg>>,
    first: First,
) -> Option<(
    Box<RoomActor>,
    mpsc::Receiver<Box<RoomMsg>>,
    CancellationToken,
)> {
    // The durable high-water mark: a new token must be above the last one that wrote.
    // The robot configuration is read beside the snapshot, not after it: a room's load costs
    // no extra round trip for it. Robots start only after the claim, below.
    let (pre, robot_config) = tokio::join!(
        inner.snapshots.load(&room),
        load_robot_config(&inner, &room)
    );
    // A room that does not exist (and that no robot configuration makes), for a command that
    // cannot create it or from a user past their creation rate: answered without a claim, so
    // made-up ids leave no lease, fence or ledger row behind.
    if matches!(pre, Ok(None)) && robot_config.is_none() {
        let (refuse, over_rate) = match &first {
            First::Load => (false, None),
            First::CannotCreate => (true, None),
            First::Creates(user) => {
                let over = !inner.create_rate.has_one(user);
                (over, over.then_some(user))
            }
        };
        if refuse {
            refuse_missing(&inner, &room, generation, rx, over_rate).await;
            return None;
        }
    }
    let floor = match pre {
        Ok(pre) => pre.map_or(0, |(f, _)| f),
        Err(e) => {
            warn!(%room, error = %e, "Could not read the room snapshot.");
            refuse_all(&inner, &room, generation, rx, None).await;
            return None;
        }
    };
    let (fence, lease_token, valid) = match inner.owner.claim(&room, floor).await {
        Ok(Claim::Acquired {
            fence,
            token,
            valid,
        }) => (fence, token, valid),
        Ok(Claim::HeldBy { owner }) => {
            debug!(%room, ?owner, "Room is owned elsewhere; refusing its commands.");
            refuse_all(&inner, &room, generation, rx, owner).await;
            return None;
        }
        Err(e) => {
            warn!(%room, error = %e, "Could not claim the room's lease.");
            refuse_all(&inner, &room, generation, rx, None).await;
            return None;
        }
    };
    // Install the fence in the ledger too, so the previous owner's saga moves are refused.
    let Ok(first_owner) = gifts::install_fence(&inner, &room, fence).await else {
        inner.owner.release(&room, fence).await;
        refuse_all(&inner, &room, generation, rx, None).await;
        return None;
    };
    // Read again under the lease, then install the new fence durably before serving
    // (docs/ARCHITECTURE.md, section 4): from now on the previous owner's writes are rejected.
    // A planned move's roster comes out before the first write: it is taken in once.
    let mut roster = None;
    let loaded = match inner.snapshots.load(&room).await {
        Ok(Some((_, mut d))) => {
            roster = d.roster.take();
            match inner.snapshots.save(&room, fence, &d).await {
                Ok(written) => Some((d, written)),
                Err(e) => {
                    warn!(%room, fence, error = %e, "Could not install the new fence.");
                    inner.owner.release(&room, fence).await;
                    refuse_all(&inner, &room, generation, rx, None).await;
                    return None;
                }
            }
        }
        Ok(None) => None,
        Err(e) => {
            warn!(%room, error = %e, "Could not load the room snapshot.");
            inner.owner.release(&room, fence).await;
            refuse_all(&inner, &room, generation, rx, None).await;
            return None;
        }
    };
    metrics::gauge!(m::ROOMS_RUNNING).increment(1.0);
    crate::audit::serve(&room, fence, inner.owner.owner_id());
    let now = Instant::now();
    let saved = loaded.as_ref().map(|(_, w)| *w);
    let mut actor = RoomActor {
        log: load_log(&inner, &room).await,
        state: loaded.map(|(d, _)| {
            let mut s = RoomState::new(room.clone(), d, fence, inner.config.room_rules());
            s.set_gift_rules(inner.config.gift_rules);
            s.set_rocket_rules(inner.config.rocket.clone());
            s.set_vip_rules(inner.config.vip.clone());
            s
        }),
        saved,
        room,
        fence,
        gateways: HashMap::new(),
        count_dirty: false,
        last_count: now,
        idle_since: now,
        lease: lease_token.clone(),
        valid,
        deferred: Vec::new(),
        self_tx,
        in_flight: Arc::default(),
        sweep: Arc::default(),
        sagas: gifts::Sagas::default(),
        closing: Vec::new(),
        opener: None,
        robots: None,
        touched: None,
        listing: directory::Listing::default(),
        joined: false,
        due: None,
        due_stale: true,
        more_waiting: false,
        rocket: rocket::RocketRun::default(),
        inner: inner.clone(),
    };
    if let Some(state) = actor.state.as_mut() {
        let now = now_ms();
        if let Some(roster) = roster {
            // The members of a planned move are away until they rejoin: no presence.
            state.restore(roster, now);
        }
        // Seat holders nobody handed over (an unplanned stop) are away too, until the window
        // passes.
        state.adopt_seated(now);
        debug!(room = %actor.room, fence, "Room runtime started.");
    }
    actor.publish_left_open().await;
    actor.start_recovery(first_owner);
    // Robots start only here, after the claim: a node that does not own the room never acts
    // for its robots.
    if actor.state.is_none()
        && let Some(durable) = robot_config.as_ref().and_then(RoomActor::robot_room)
        && actor.create(durable, false).await.is_ok()
    {
        debug!(room = %actor.room, "Robot room created.");
        if let Some(owner) = actor.state.as_ref().map(|s| s.durable().owner.clone()) {
            actor.notify_room("room.created", Some(&owner), None);
        }
    }
    if actor.state.is_some() {
        actor.set_robots(robot_config).await;
        actor.list_note(0, true);
    } else if robot_config
        .as_ref()
        .is_some_and(|c| c.enabled && !c.create)
    {
        // Robots set to visit a room that is gone (deleted after they were configured): the
        // reconcile stops loading it, a claim and a ledger read every pass, for nothing.
        actor.inner.set_robot_roomless(&actor.room, true);
    }
    // Boxed: the room's task then holds a pointer to it beside its loop, not a second copy.
    Some((Box::new(actor), rx, lease_token))
}

/// Runs one room until it stops. Spawned by the registry with the room's first command queued.
///
/// The start-up is boxed, and the loop boxes every handler it awaits: this future lives as
/// long as the room, so its size is what every idle room costs. Inlined, the largest handler
/// and the start-up's locals would size it (several KiB per room).
pub(crate) async fn run(
    inner: Arc<Inner>,
    room: RoomId,
    generation: u64,
    rx: mpsc::Receiver<Box<RoomMsg>>,
    self_tx: mpsc::WeakSender<Box<RoomMsg>>,
    first: First,
) {
    let start = start(inner.clone(), room, generation, rx, self_tx, first);
    let started = Box::pin(start).await;
    let Some((mut actor, rx, lease_token)) = started else {
        return;
    };
    let fence = actor.fence;
    let stop = actor.run_loop(rx, &lease_token, generation).await;
    metrics::gauge!(m::ROOMS_RUNNING).decrement(1.0);
    let why = match &stop {
        Stop::Handoff(_) => "handoff",
        Stop::Idle => "idle",
        Stop::Missing => "missing",
        Stop::LeaseLost => "lease_lost",
        Stop::Shutdown => "shutdown",
    };
    crate::audit::stop(&actor.room, fence, inner.owner.owner_id(), why);
    debug!(room = %actor.room, fence, ?stop, "Room runtime stopped.");
}

/// The room's robot configuration, if it has a valid one.
async fn load_robot_config(
    inner: &Arc<Inner>,
    room: &RoomId,
) -> Option<crate::robots::RobotConfig> {
    match inner.robots.get(room).await {
        Ok(Some(bytes)) => match crate::robots::RobotConfig::parse(&bytes) {
            Ok(c) if c.room == *room => Some(c),
            Ok(_) => None,
            Err(e) => {
                warn!(%room, error = %e, "Ignoring an invalid robot configuration.");
                None
            }
        },
        Ok(None) => None,
        Err(e) => {
            warn!(%room, error = %e, "Could not read the robot configuration; the reconcile retries.");
            None
        }
    }
}

/// The resume log, seeded with the fenced history previous owners wrote (cluster mode).
async fn load_log(inner: &Arc<Inner>, room: &RoomId) -> EventLog {
    let mut log = EventLog::new(inner.config.history_events, inner.config.history_age);
    if inner.config.durable_history {
        match inner.snapshots.store().load_history(room).await {
            Ok(entries) => {
                let now = Instant::now();
                for e in entries {
                    log.push(e.fence, e.seq, e.bytes, now);
                }
                log.set_whole();
            }
            Err(e) => {
                warn!(%room, error = %e, "Could not load the room history; resumes will resync.")
            }
        }
    }
    log
}

/// A runtime refused before it ran: out of the registry, no more commands queued, and a
/// handoff sent to it meanwhile ends with it. (A runtime that ran ends the handoff later, in
/// `stop`, once its members are told.)
fn refused(inner: &Inner, room: &RoomId, generation: u64, rx: &mut mpsc::Receiver<Box<RoomMsg>>) {
    inner.unregister(room, generation);
    rx.close();
    inner.rebalance.dropped(room, generation);
}

/// The room does not exist: answers the queued commands that cannot create it
/// `ROOM_NOT_FOUND`, those of `over_rate` (a user past their creation rate) that would create
/// it `QUOTA_EXCEEDED`, and removes the room from the registry. Another user's command that
/// can create the room starts a fresh runtime, as it would after a runtime that found the
/// room missing.
async fn refuse_missing(
    inner: &Arc<Inner>,
    room: &RoomId,
    generation: u64,
    mut rx: mpsc::Receiver<Box<RoomMsg>>,
    over_rate: Option<&UserId>,
) {
    refused(inner, room, generation, &mut rx);
    while let Some(msg) = rx.recv().await {
        let RoomMsg::Command(cmd) = *msg else {
            continue;
        };
        let err = if !state::may_create(&cmd.cmd, inner.config.auto_create) {
            ReplyError::new(ErrorCode::RoomNotFound, "no such room")
        } else if over_rate == Some(&cmd.user) {
            let r = lifecycle::create_rate_refused(inner);
            ReplyError::new(r.code, r.msg)
        } else {
            inner.dispatch_command(cmd);
            continue;
        };
        inner.reply_direct(&cmd, Err(err), None).await;
    }
}

/// Answers every queued command with `UNAVAILABLE` and removes the room from the registry.
async fn refuse_all(
    inner: &Arc<Inner>,
    room: &RoomId,
    generation: u64,
    mut rx: mpsc::Receiver<Box<RoomMsg>>,
    owner_hint: Option<NodeId>,
) {
    refused(inner, room, generation, &mut rx);
    while let Some(msg) = rx.recv().await {
        let RoomMsg::Command(cmd) = *msg else {
            continue;
        };
        let err = ReplyError {
            code: ErrorCode::Unavailable,
            msg: "room is not served here; retry".into(),
            owner_hint: owner_hint.clone(),
            outcome_unknown: false,
        };
        inner.reply_direct(&cmd, Err(err), None).await;
    }
}

struct RoomActor {
    inner: Arc<Inner>,
    room: RoomId,
    fence: FencingToken,
    state: Option<RoomState>,
    /// What this runtime last wrote to the snapshot store (`None` after a failed write): a
    /// room that stops with that state has nothing to save.
    saved: Option<Written>,
    log: EventLog,
    /// Senders to the gateways this room talks to, cached from the shard's link table.
    gateways: HashMap<NodeId, crate::gateway_link::GatewayLink>,
    count_dirty: bool,
    last_count: Instant,
    idle_since: Instant,
    /// Cancelled when the lease is lost (by the keeper, or by a fenced write).
    lease: CancellationToken,
    /// Until when the lease is proven held (shared with the lease keeper).
    valid: crate::owner::Validity,
    /// Commands received after the lease stopped being provable: re-dispatched on stop.
    deferred: Vec<Command>,
    /// This room's own inbox, for outcomes of work it spawned (weak: it never keeps the room
    /// alive).
    self_tx: mpsc::WeakSender<Box<RoomMsg>>,
    /// Gift ids whose saga this runtime is driving now (recovery leaves them alone).
    in_flight: gifts::InFlight,
    /// Whether the sweep of unfinished sagas runs, and the sagas that ended in an error.
    sweep: Arc<gifts::Sweep>,
    /// The gift sagas this runtime is driving, polled by the run loop.
    sagas: gifts::Sagas,
    /// Open gifts to close with the room's next write (cluster): a published gift's own, and
    /// refused ones this runtime opened.
    closing: Vec<uuid::Uuid>,
    /// Opens this runtime's gifts in the fenced store (cluster; started with the first gift).
    opener: Option<gifts::Opener>,
    /// The room's robots, when its configuration enables them.
    /// Boxed: most rooms run no robots, and the actor lives inside the room's task.
    robots: Option<Box<robots::Robots>>,
    /// When this runtime last recorded a join in the store's touched time (retention).
    touched: Option<Instant>,
    /// What the room last handed to the room directory.
    listing: directory::Listing,
    /// Whether anyone joined during this runtime (its stop records the time too).
    joined: bool,
    /// The next deadline of the room's rules (unix ms), as of the last durable change.
    due: Option<u64>,
    /// Whether durable state changed since `due` was computed.
    due_stale: bool,
    /// Whether more messages wait in the inbox behind the one being handled: the room's next
    /// write then goes to the store without waiting for other rooms' (`Change::more_waiting`).
    more_waiting: bool,
    /// The rocket's payout task and progress timer.
    rocket: rocket::RocketRun,
}

impl RoomActor {
    async fn run_loop(
        &mut self,
        mut rx: mpsc::Receiver<Box<RoomMsg>>,
        lease: &CancellationToken,
        generation: u64,
    ) -> Stop {
        let shutdown = self.inner.shutdown.clone();
        // Made once and polled in place: a fresh `cancelled()` per message would register
        // with (and leave) each token's waiter list every time.
        let lease_lost = lease.cancelled();
        let stopping = shutdown.cancelled();
        tokio::pin!(lease_lost, stopping);
        // A launch a previous runtime decided and did not announce: paid (again, idempotently)
        // and announced by this owner.
        self.pay_launch();
        // A PK between two rooms that is on goes on exchanging scores under this owner.
        self.pk_sync_start();
        let stop = loop {
            if self.state.is_none() {
                // Only the first command can create a room; anything after it finds none.
                // Matched through the box, never as a value: a message held across the awaits
                // below would put a command's size into every room's task.
                let Ok(msg) = rx.try_recv() else {
                    break Stop::Missing;
                };
                match *msg {
                    RoomMsg::GatewayGone(_)
                    | RoomMsg::GiftRecovered(_)
                    | RoomMsg::Sweep
                    | RoomMsg::Handoff(_)
                    | RoomMsg::Inspect(_)
                    | RoomMsg::Robots(_)
                    | RoomMsg::RocketPaid(_)
                    | RoomMsg::PkSync
                    | RoomMsg::PkBoard(_) => continue,
                    RoomMsg::Command(cmd) => {
                        Box::pin(self.handle(cmd)).await;
                        if self.state.is_none() {
                            break Stop::Missing;
                        }
                        continue;
                    }
                    RoomMsg::Expire(e) => {
                        let Expire { cutoff_ms, done } = e;
                        // No state: only index entries can be left to clean up.
                        let _ = done.send(Box::pin(self.expire(cutoff_ms)).await);
                        continue;
                    }
                }
            }
            // Deadlines are wall-clock times kept in the durable state (a new owner re-arms
            // them from it); the timer for the next one is made afresh each turn.
            if self.due_stale {
                // Recomputed only after a change of durable state (every deadline lives
                // there), not on every command.
                self.due = self.state.as_ref().and_then(RoomState::next_deadline);
                self.due_stale = false;
            }
            let timers = Timers {
                count: self
                    .count_dirty
                    .then(|| self.last_count + self.inner.config.member_count_interval),
                deadline: self.due.map(instant_at),
                storm: self
                    .state
                    .as_ref()
                    .and_then(RoomState::next_storm_flush)
                    .map(instant_at),
                rocket: self.progress_due(),
                likes: self.likes_due(),
                robot: self.robot_due(),
                listing: self.list_refresh_due(),
                // A room running robots stays while they are configured, even with nobody in
                // it (closed, or every robot banned): the reconcile would only load it again.
                idle: (self.member_count() == 0 && self.robots.is_none())
                    .then(|| self.idle_since + self.inner.config.idle_unload),
            };
            let next = timers.next();
            tokio::select! {
                biased;
                () = &mut lease_lost => break Stop::LeaseLost,
                () = &mut stopping => break Stop::Shutdown,
                // Outcomes before new commands: answers go out first, and the sagas in
                // flight stay bounded by the ledger's pace.
                Some(done) = self.sagas.next(), if !self.sagas.is_empty() => {
                    self.more_waiting = !rx.is_empty();
                    Box::pin(self.gift_done(done)).await;
                }
                msg = rx.recv() => {
                    // Through the box (see the start of the loop).
                    let Some(msg) = msg else {
                        break Stop::Shutdown;
                    };
                    self.more_waiting = !rx.is_empty();
                    match *msg {
                        RoomMsg::Command(cmd) => {
                            if !self.inner.owner.proven(&self.valid) {
                                // Not provably the owner any more: apply nothing
                                // (ARCHITECTURE.md, section 4).
                                self.deferred.push(cmd);
                                break Stop::LeaseLost;
                            }
                            Box::pin(self.handle(cmd)).await;
                        }
                        RoomMsg::GatewayGone(gw) => Box::pin(self.gateway_gone(&gw)).await,
                        RoomMsg::GiftRecovered(order) => {
                            Box::pin(self.gift_recovered(order)).await;
                        }
                        RoomMsg::Sweep => self.sweep_now(),
                        RoomMsg::Handoff(to) => break Stop::Handoff(to),
                        RoomMsg::Inspect(tx) => {
                            let _ = tx.send(self.inspect());
                        }
                        RoomMsg::Robots(config) => {
                            Box::pin(self.set_robots(config)).await;
                        }
                        RoomMsg::RocketPaid(number) => {
                            Box::pin(self.rocket_paid(number)).await;
                        }
                        RoomMsg::PkSync => self.pk_exchange(),
                        RoomMsg::PkBoard(answer) => Box::pin(self.pk_answer(*answer)).await,
                        RoomMsg::Expire(e) => {
                            let Expire { cutoff_ms, done } = e;
                            let expired = Box::pin(self.expire(cutoff_ms)).await;
                            let _ = done.send(expired);
                            if expired {
                                break Stop::Missing;
                            }
                        }
                    }
                }
                () = sleep_until(next.unwrap_or_else(now_far)), if next.is_some() => {
                    self.more_waiting = !rx.is_empty();
                    let due = timers.due(Instant::now());
                    if due.count.is_some() {
                        Box::pin(self.publish_count()).await;
                    }
                    if due.deadline.is_some() {
                        Box::pin(self.tick()).await;
                    }
                    if due.storm.is_some() {
                        Box::pin(self.flush_storm(false)).await;
                    }
                    if due.rocket.is_some() {
                        Box::pin(self.send_progress()).await;
                    }
                    if due.likes.is_some() {
                        Box::pin(self.publish_likes()).await;
                    }
                    if due.robot.is_some() {
                        Box::pin(self.robot_tick()).await;
                    }
                    if due.listing.is_some() {
                        self.list_refresh();
                    }
                    // Last, and only when the room is still empty after the others.
                    if due.idle.is_some() && self.member_count() == 0 {
                        break Stop::Idle;
                    }
                }
            }
        };
        Box::pin(self.stop(stop.clone(), rx, generation)).await;
        stop
    }

    /// Applies what is due now (publish deadlines, expiries) and publishes it.
    async fn tick(&mut self) {
        let Some(state) = self.state.as_mut() else {
            return;
        };
        let applied = state.tick(now_ms());
        self.due_stale = true;
        // Every `disconnected` leave a tick makes is a grace window that passed.
        let expired = applied
            .presence
            .iter()
            .filter(|p| matches!(p, state::Presence::Leave(_, "disconnected")))
            .count();
        if expired > 0 {
            metrics::counter!(m::PRESENCE_GRACE, "outcome" => "expired").increment(expired as u64);
        }
        // A change that could not be stored stops the runtime; the next owner ticks again.
        let _ = self.publish(applied, None).await;
    }

    fn member_count(&self) -> usize {
        self.state.as_ref().map_or(0, RoomState::member_count)
    }

    async fn handle(&mut self, cmd: Command) {
        self.inner.hot.room_commands.increment(1);
        if self.inner.owner.renews_on_traffic() {
            // The seed incident's bug, kept behind a test-only switch: quiet rooms lose their
            // lease because renewal depends on traffic.
            self.inner.owner.renew_one(&self.room).await;
        }
        let at = SessionRef {
            gateway: cmd.gateway.clone(),
            session: cmd.session,
        };
        if let RoomCmd::Op(RoomOp::Gift(_)) = &cmd.cmd {
            // The saga keeps the command for its reply: moved there, not copied.
            self.take_gift(Box::new(cmd), &at).await;
            return;
        }
        let result = self.apply(&cmd, &at).await;
        match result {
            Ok(Some((ok, membership))) => self.reply(&cmd, Ok(ok), membership).await,
            Ok(None) => {}
            Err(r) => {
                let outcome_unknown = r == OUTCOME_UNKNOWN;
                let err = ReplyError {
                    outcome_unknown,
                    ..ReplyError::new(r.code, r.msg)
                };
                self.reply(&cmd, Err(err), None).await;
            }
        }
    }

    /// Applies one command; returns the `ok` JSON and the membership change for the gateway,
    /// or `None` when the reply was sent already (a join sends it between the replay and the
    /// presence events). Every room operation without needs of its own goes through
    /// [`RoomState::apply`].
    async fn apply(
        &mut self,
        cmd: &Command,
        at: &SessionRef,
    ) -> Result<Option<(Bytes, Option<Membership>)>, Rejected> {
        let user = &cmd.user;
        let auto_create = self.inner.config.auto_create;
        if let Some(mut durable) =
            state::creation(&cmd.cmd, self.state.is_some(), user, auto_create)?
        {
            durable.owner_region = cmd
                .profile
                .as_ref()
                .and_then(|p| p.region.as_deref().map(Into::into));
            self.check_create_rate(user)?;
            self.create(durable, true).await?;
            self.notify_room("room.created", Some(user), None);
            self.list_note(0, true);
            if let RoomCmd::Op(RoomOp::Create(_)) = &cmd.cmd {
                let ok = client::to_json(&RoomCreated {
                    room: self.room.clone(),
                });
                return Ok(Some((Bytes::from(ok), None)));
            }
        }
        self.note_owner_region(cmd).await;
        let Some(state) = self.state.as_mut() else {
            return Err(state::rejected(ErrorCode::RoomNotFound, "no such room"));
        };
        match &cmd.cmd {
            RoomCmd::Op(RoomOp::Join(j)) => self.join(cmd, at, j, false).await.map(|()| None),
            RoomCmd::Rejoin(j) => self.join(cmd, at, j, true).await.map(|()| None),
            RoomCmd::Leave(reason) => {
                // A dropped connection keeps its member for the grace window.
                let applied = if *reason == LeaveReason::Disconnected {
                    state.disconnect(user, at, now_ms())?
                } else {
                    state.leave(user, at, reason.as_str())?
                };
                // Out of the room either way: a runtime that cannot publish stops.
                let _ = self.publish(applied, None).await;
                Ok(Some((Bytes::from_static(b"{}"), Some(Membership::Left))))
            }
            RoomCmd::Profile(_) | RoomCmd::Standing(_) => {
                // A profile or standing change that races with the user leaving changes
                // nothing: answered `{}` either way, so no stray error reaches the user.
                if let Ok(applied) = state.member_changed(user, &cmd.cmd, now_ms()) {
                    // Not to the member's own connection, as for `member.join`.
                    let own = state.member(user).cloned();
                    self.publish(applied, own.as_ref()).await?;
                }
                Ok(Some((Bytes::from_static(b"{}"), None)))
            }
            RoomCmd::Rtc(ev) => {
                let applied = state.rtc(user, ev, now_ms());
                self.publish(applied, None).await?;
                Ok(Some((Bytes::from_static(b"{}"), None)))
            }
            RoomCmd::Attrs(_) | RoomCmd::Custom(_) | RoomCmd::Moderate(_) | RoomCmd::Manage(_) => {
                self.backend(&cmd.cmd).await
            }
            RoomCmd::Pk(p) => {
                let (ok, applied) = state.pk_cmd(user, p, now_ms())?;
                self.publish(applied, None).await?;
                Ok(Some((ok, None)))
            }
            RoomCmd::Op(RoomOp::ChatPin(p)) => {
                // The line's text as members saw it, from the resume log.
                let text = p.seq.and_then(|seq| self.log.chat_text(state.epoch(), seq));
                let applied = state.chat_pin(user, at, p.seq, text, now_ms())?;
                self.publish(applied, None).await?;
                Ok(Some((Bytes::from_static(b"{}"), None)))
            }
            RoomCmd::Op(RoomOp::Report(r)) => {
                let filed = state.report(user, at, r, now_ms())?;
                if filed.duplicate {
                    let ok = client::ReportFiled {
                        duplicate: true,
                        id: None,
                    };
                    return Ok(Some((client::to_json(&ok).into(), None)));
                }
                // Answered once the moderation queue holds it.
                self.file_report(cmd, r, &filed);
                Ok(None)
            }
            RoomCmd::Op(op) => {
                // An admin's moderation of a user whose spend the room does not know (absent,
                // or their standing not read yet): the spend comes from the ledger.
                let spend = self.target_spend(user, op).await;
                let Some(state) = self.state.as_mut() else {
                    return Err(state::rejected(ErrorCode::RoomNotFound, "no such room"));
                };
                let out = state.apply_with(user, at, op, spend, now_ms())?;
                let published = self.publish(out.applied, None).await;
                // A member who left is out either way (a runtime that cannot publish stops);
                // any other change that was not stored did not happen.
                if out.membership != Some(Membership::Left) {
                    published?;
                }
                match op {
                    RoomOp::RoomClose(_) => self.notify_room("room.closed", Some(user), None),
                    RoomOp::RoomOpen(_) => self.notify_room("room.opened", Some(user), None),
                    _ => {}
                }
                Ok(Some((out.ok, out.membership)))
            }
        }
    }

    /// A join (`trusted`: a gateway's rejoin after a handoff, without the password check):
    /// the replay the joiner missed, the reply, then presence.
    async fn join(
        &mut self,
        cmd: &Command,
        at: &SessionRef,
        j: &client::RoomJoin,
        trusted: bool,
    ) -> Result<(), Rejected> {
        let Some(state) = self.state.as_mut() else {
            return Err(state::rejected(ErrorCode::RoomNotFound, "no such room"));
        };
        let profile = state::shared_profile(cmd.profile.clone());
        let now = now_ms();
        let replay = match j.since {
            Some(since) => self
                .log
                .resume(since, state.epoch(), state.seq(), Instant::now()),
            None => Resume::Resync,
        };
        if trusted && j.since.is_some() && replay == Resume::Resync {
            // A gateway's rejoin after a move is answered to the gateway alone: a resync
            // (a fresh snapshot) would never reach the client, which would go on from its old
            // position past what it missed. Refused, the client is told `room.left`
            // `unavailable` and rejoins by itself, and gets the resync.
            return Err(state::rejected(
                ErrorCode::Internal,
                "the move cannot be resumed from there; the client rejoins",
            ));
        }
        let mut joined = if trusted {
            state.rejoin(&cmd.user, at.clone(), profile, now)?
        } else {
            state.join_as(&cmd.user, at.clone(), j.password.as_deref(), profile, now)?
        };
        state.joined_with(&mut joined, &cmd.user, cmd.standing.clone(), now);
        if joined.returned {
            metrics::counter!(m::PRESENCE_GRACE, "outcome" => "returned").increment(1);
        }
        let (frames, resync) = match replay {
            Resume::Replay(frames) => (frames, false),
            Resume::Resync => (Vec::new(), j.since.is_some()),
        };
        let snapshot = state.snapshot();
        let ok = JoinOk {
            epoch: snapshot.epoch,
            seq: snapshot.seq,
            snapshot,
            resync,
        };
        if let Some(old) = &joined.replaced {
            let frame = room_left(&self.room, "replaced");
            let evict = Audience::Evict(vec![old.session]);
            self.send_event(&old.gateway, evict, frame, None).await;
        }
        for frame in frames {
            let only = Audience::Only(vec![at.session]);
            self.send_event(&at.gateway, only, frame, None).await;
        }
        // The reply must go out before any presence so the joiner's gateway has added the
        // session; presence excludes the joiner anyway.
        let ok = Bytes::from(client::to_json(&ok));
        self.reply(cmd, Ok(ok), Some(Membership::Joined)).await;
        // Answered already; should this fail, the runtime stops and the joiner rejoins.
        let _ = self.publish(joined.applied, Some(at)).await;
        self.touch_on_join();
        Ok(())
    }
}

/// Now as unix milliseconds: the room rules' clock (deadlines survive a change of owner, so
/// they are wall-clock times, not timers).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The instant at which the wall clock reads `ms` (now, for a time already past).
fn instant_at(ms: u64) -> Instant {
    Instant::now() + std::time::Duration::from_millis(ms.saturating_sub(now_ms()))
}

/// An instant that never comes, for a timer that is switched off.
fn now_far() -> Instant {
    Instant::now() + std::time::Duration::from_secs(86_400)
}

/// The `room.left` frame a member gets when the room drops it (`reason` as PROTOCOL.md lists).
fn room_left(room: &RoomId, reason: &str) -> Bytes {
    let left = RoomLeft {
        room: room.clone(),
        reason: reason.into(),
    };
    client::encode_event("room.left", None, None, &left)
}

#[cfg(test)]
mod tests {
    /// No message is larger than a command with its tag: boxing each message costs what
    /// boxing the command did, and every other message stays in a command's size class.
    #[test]
    fn no_inbox_message_is_larger_than_a_command() {
        let command = std::mem::size_of::<protocol::link::Command>();
        assert!(std::mem::size_of::<super::RoomMsg>() <= command + 8);
    }

    /// A room's actor is boxed and lives as long as the room: it stays in jemalloc's
    /// 1,280-byte class (1,376 bytes and the 1,536 class with the rocket inline).
    #[test]
    fn a_rooms_actor_stays_in_the_1280_byte_allocation() {
        let size = std::mem::size_of::<super::RoomActor>();
        assert!(size <= 1_280, "a room's actor is {size} bytes");
    }

    /// The size of what `f` returns, without calling it.
    fn returned_size<A, B, C, D, E, F, R>(_f: &impl FnOnce(A, B, C, D, E, F) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// A room's task lives as long as the room: its future is what every idle room costs
    /// (1,040 bytes unoptimized when this was written; inlining the start-up or a handler
    /// made it ~10 KiB, docs/BENCHMARKS-LOG.md, idle memory).
    #[test]
    fn a_rooms_task_stays_small() {
        let size = returned_size(&super::run);
        assert!(size <= 1_280, "a room's task future is {size} bytes");
    }
}
