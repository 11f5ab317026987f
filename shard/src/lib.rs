//! Chorus shard: owns rooms through leases; each room is one actor.
//!
//! A gateway hands the shard [`protocol::link::Command`]s through [`Shard::dispatch`]
//! (in-process in standalone mode, from the link server in a cluster) and receives
//! [`protocol::link::ToGateway`] messages on the channel it attached with
//! [`Shard::attach_gateway`]. Rooms start only after their lease is claimed.
//!
//! # Layout
//! - [`config`]: TTL, inbox sizes, history and presence bounds.
//! - `owner`: the lease keeper (claim before start, batched renewal at TTL/3, stop on loss).
//! - `room`: the room actor; `room/state.rs` the pure rules; `room/log.rs` the resume history.
//! - `room/snapshots.rs`: durable room state through fenced writes.
//! - [`gifts`]: the gift catalog and lucky draws; `room/gifts.rs` drives gift sagas.
//! - The room economy: `room/state/streaks.rs` (gift combos, storm coalescing) and
//!   `room/storm.rs`; `room/state/rocket.rs` (the rocket's levels and launches) and
//!   `room/rocket.rs` (its payout through the ledger and `rocket.progress`).
//! - [`link`]: the link server for gateways in a cluster, and the framing both ends share.
//! - [`node`]: the shard role of a cluster node (Redis stores, link server, ring, drain).
//! - [`rebalance`]: planned, throttled handoffs when the placement moves rooms away.
//! - [`metrics`]: metric names.

mod audit;
mod boards;
pub mod config;
mod directory;
pub mod events;
pub mod gateway_link;
pub mod gifts;
pub mod link;
pub mod metrics;
pub mod node;
mod owner;
mod quota;
pub mod rebalance;
pub mod robots;
mod room;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use protocol::link::{Command, Membership, Reply, ReplyError, ToGateway};
use protocol::ring::Placement;
use protocol::{ErrorCode, NodeId, RoomId};
use storage::lease::LeaseStore;
use storage::ledger::Ledger;
use storage::snapshot::SnapshotStore;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::ShardConfig;
use gateway_link::GatewayLink;
pub use room::state;
use room::{RoomHandle, RoomMsg};

/// The stores a shard needs.
#[derive(Debug, Clone)]
pub struct Stores {
    /// Room leases.
    pub leases: LeaseStore,
    /// Room snapshots.
    pub snapshots: SnapshotStore,
    /// The money ledger (gifts are refused without one).
    pub ledger: Option<Ledger>,
    /// Robot room configurations.
    pub robots: storage::robots::RobotStore,
    /// The room directory the shard's rooms publish to.
    pub directory: storage::directory::DirectoryStore,
    /// The moderation queue members' reports go to.
    pub reports: storage::reports::ReportStore,
    /// The scoreboard of PKs between two rooms.
    pub pk_board: storage::pk_board::PkBoard,
}

/// A running shard. Cheap to clone.
#[derive(Clone)]
pub struct Shard {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    node: NodeId,
    config: ShardConfig,
    links: Mutex<HashMap<NodeId, GatewayLink>>,
    rooms: Mutex<HashMap<RoomId, RoomHandle>>,
    owner: Arc<owner::Owner>,
    snapshots: room::snapshots::Snapshots,
    ledger: Option<Ledger>,
    /// Robot room configurations.
    robots: storage::robots::RobotStore,
    /// The moderation queue.
    reports: storage::reports::ReportStore,
    /// The scoreboard of PKs between two rooms.
    pk_board: storage::pk_board::PkBoard,
    /// Rooms whose robots run here (kept by their actors, read by the robot reconcile).
    robot_rooms: Mutex<std::collections::HashSet<RoomId>>,
    /// Rooms whose robot configuration (which does not create its room) found no room when
    /// loaded: the reconcile does not load them again until the configuration changes.
    robot_roomless: Mutex<std::collections::HashSet<RoomId>>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    next_generation: AtomicU64,
    /// Where rooms belong (cluster mode); `None` in standalone: every room is ours.
    placement: std::sync::RwLock<Option<Arc<Placement>>>,
    rebalance: rebalance::Rebalance,
    /// Room creations per user and minute on this shard.
    create_rate: quota::CreateRate,
    /// Publishes the rooms' directory summaries.
    directory: Arc<directory::Publisher>,
    /// Sends the rooms' events to the app's backend, when configured.
    events: Option<events::Notifier>,
    hot: HotCounters,
}

/// Counters bumped per command or event, registered once: `counter!` looks its name up in
/// the registry on every call.
#[derive(Debug)]
pub(crate) struct HotCounters {
    /// [`metrics::ROOM_COMMANDS`].
    pub(crate) room_commands: ::metrics::Counter,
    /// [`metrics::EVENTS_SEQUENCED`].
    pub(crate) events_sequenced: ::metrics::Counter,
    /// [`metrics::GIFTS_SETTLED`].
    pub(crate) gifts_settled: ::metrics::Counter,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned map only means a panic elsewhere; its data is still consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shard {
    /// Starts a shard: its lease keeper runs until `shutdown`; every task goes on `tracker`.
    pub fn start(
        node: NodeId,
        config: ShardConfig,
        stores: Stores,
        shutdown: CancellationToken,
        tracker: TaskTracker,
    ) -> Self {
        Self::start_with(node, config, stores, shutdown, tracker, false)
    }

    /// Like [`Shard::start`], with the test-only switch that renews leases on room traffic
    /// instead of on the timer (reproduces the seed incident; never use in production).
    pub fn start_with(
        node: NodeId,
        config: ShardConfig,
        stores: Stores,
        shutdown: CancellationToken,
        tracker: TaskTracker,
        renew_on_traffic: bool,
    ) -> Self {
        crate::metrics::describe();
        let owner = Arc::new(owner::Owner::new(
            stores.leases,
            &node,
            config.lease_ttl,
            renew_on_traffic,
        ));
        tracker.spawn(owner.clone().run(shutdown.clone()));
        let create_rate = quota::CreateRate::new(config.room_creates_per_min);
        let publisher = Arc::new(directory::Publisher::new(stores.directory, node.clone()));
        tracker.spawn(publisher.clone().run(
            config.directory_publish,
            config.directory_stale,
            shutdown.clone(),
        ));
        let events = config
            .events
            .clone()
            .map(|c| events::Notifier::start(c, node.clone(), &tracker, shutdown.clone()));
        let me = Self {
            inner: Arc::new(Inner {
                node,
                config,
                links: Mutex::new(HashMap::new()),
                rooms: Mutex::new(HashMap::new()),
                owner,
                snapshots: room::snapshots::Snapshots::new(stores.snapshots),
                ledger: stores.ledger,
                robots: stores.robots,
                reports: stores.reports,
                pk_board: stores.pk_board,
                robot_rooms: Mutex::new(std::collections::HashSet::new()),
                robot_roomless: Mutex::new(std::collections::HashSet::new()),
                tracker,
                shutdown,
                next_generation: AtomicU64::new(1),
                placement: std::sync::RwLock::new(None),
                rebalance: rebalance::Rebalance::default(),
                create_rate,
                directory: publisher,
                events,
                hot: HotCounters {
                    room_commands: ::metrics::counter!(crate::metrics::ROOM_COMMANDS),
                    events_sequenced: ::metrics::counter!(crate::metrics::EVENTS_SEQUENCED),
                    gifts_settled: ::metrics::counter!(crate::metrics::GIFTS_SETTLED),
                },
            }),
        };
        me.inner.tracker.spawn(rebalance::run(me.inner.clone()));
        me.inner
            .tracker
            .spawn(room::sweep_orphans(me.inner.clone()));
        me.inner
            .tracker
            .spawn(robots::reconcile::run(me.inner.clone()));
        me.inner
            .tracker
            .spawn(room::sweep_retention(me.inner.clone()));
        me.inner.tracker.spawn(boards::prune(me.inner.clone()));
        me
    }

    /// Sets where rooms belong (cluster mode). Rooms placed elsewhere are handed off, and
    /// commands for rooms this shard does not run and does not own are refused with a hint.
    pub fn set_placement(&self, placement: Placement) {
        let changed = {
            let mut p = self
                .inner
                .placement
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            let changed = p.as_deref() != Some(&placement);
            *p = Some(Arc::new(placement));
            changed
        };
        if changed {
            self.inner.rebalance.changed.notify_one();
        }
    }

    /// What a running room looks like now (snapshot, members, fence); `None` when the room
    /// does not run here.
    pub async fn inspect(&self, room: &RoomId) -> Option<serde_json::Value> {
        let handle = self.inner.room_handle(room)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        handle.tx.send(Box::new(RoomMsg::Inspect(tx))).await.ok()?;
        rx.await.ok().filter(|v| !v.is_null())
    }

    /// A room's moderation record, read from its durable state (always current: every change
    /// is stored before it is published): owner, admins, whether it is closed, the bans and
    /// chat mutes in force, and the audit list. `None` when the room does not exist.
    ///
    /// # Errors
    /// The snapshot store could not be read.
    pub async fn moderation(
        &self,
        room: &RoomId,
    ) -> Result<Option<serde_json::Value>, storage::StorageError> {
        let Some((_, d)) = self.inner.snapshots.load(room).await? else {
            return Ok(None);
        };
        let now = room::now_ms();
        let penalties = |m: &std::collections::BTreeMap<protocol::UserId, room::state::Penalty>| {
            m.iter()
                .filter(|(_, p)| p.holds(now))
                .map(|(u, p)| serde_json::json!({"user": u, "until": p.until, "by": p.by}))
                .collect::<Vec<_>>()
        };
        Ok(Some(serde_json::json!({
            "room": room,
            "owner": d.owner,
            "admins": d.admins,
            "closed": d.closed,
            "platform_closed": d.platform_closed,
            "bans": penalties(&d.bans),
            "chat_mutes": penalties(&d.mutes),
            "audit": d.audit,
        })))
    }

    /// The robot room configurations this shard reads.
    pub fn robot_store(&self) -> &storage::robots::RobotStore {
        &self.inner.robots
    }

    /// The event webhook's sender, when one is configured (the admin API's moderation
    /// decisions go out through it too).
    pub fn events(&self) -> Option<&events::Notifier> {
        self.inner.events.as_ref()
    }

    /// The moderation queue this shard's rooms file reports to.
    pub fn report_store(&self) -> &storage::reports::ReportStore {
        &self.inner.reports
    }

    /// The money ledger this shard books gifts in (`None`: gifts are refused).
    pub fn ledger(&self) -> Option<&Ledger> {
        self.inner.ledger.as_ref()
    }

    /// The membership version of the placement this shard routes by (`None` in standalone).
    pub fn placement_version(&self) -> Option<u64> {
        self.inner.placement().map(|p| p.ring().version())
    }

    /// Planned, in-flight and completed handoffs of this shard.
    pub fn rebalance_status(&self) -> rebalance::RebalanceStatus {
        self.inner.rebalance.status()
    }

    /// Handoffs started whose runtime has not yet queued its notice to the gateways.
    pub fn handoffs_in_flight(&self) -> usize {
        self.inner.rebalance.in_flight()
    }

    /// This shard's node id.
    pub fn node(&self) -> &NodeId {
        &self.inner.node
    }

    /// Where replies and events for gateway `gw` go from now on.
    /// A queue (`mpsc::Sender<ToGateway>`) or an in-process gateway called directly.
    pub fn attach_gateway(&self, gw: NodeId, link: impl Into<GatewayLink>) {
        lock(&self.inner.links).insert(gw, link.into());
    }

    /// Forgets gateway `gw` (its link closed).
    pub fn detach_gateway(&self, gw: &NodeId) {
        lock(&self.inner.links).remove(gw);
    }

    /// Gateway `gw`'s link (the one sending into `tx`) closed: forget it, unless it already
    /// reconnected, and take its sessions out of every room (they rejoin through the new link).
    pub fn gateway_gone(&self, gw: &NodeId, tx: &mpsc::Sender<ToGateway>) {
        {
            let mut links = lock(&self.inner.links);
            if links.get(gw).is_some_and(|t| t.is_queue(tx)) {
                links.remove(gw);
            }
        }
        let rooms: Vec<RoomHandle> = lock(&self.inner.rooms).values().cloned().collect();
        for h in rooms {
            let gw = gw.clone();
            self.inner.tracker.spawn(async move {
                let _ = h.tx.send(Box::new(RoomMsg::GatewayGone(gw))).await;
            });
        }
    }

    /// Hands a gateway's command to the room it addresses. Never waits: a full room inbox is
    /// answered `UNAVAILABLE` (Reject policy).
    pub fn dispatch(&self, cmd: Command) {
        tracing::trace!(?cmd, "Dispatch.");
        self.inner.dispatch_command(cmd);
    }

    /// Rooms running on this node now.
    pub fn rooms_running(&self) -> usize {
        lock(&self.inner.rooms).len()
    }

    /// Leases this node holds now.
    pub fn leases_held(&self) -> usize {
        self.inner.owner.held_count()
    }

    /// The fencing token this node holds for `room`, if it runs it.
    pub fn fence_of(&self, room: &RoomId) -> Option<u64> {
        self.inner.owner.fence_of(room)
    }

    /// Up to `limit` of the rooms this node runs, by id, each with the fence it holds for it
    /// (for the operator dashboard).
    pub fn rooms_with_fences(&self, limit: usize) -> Vec<(RoomId, Option<u64>)> {
        let mut ids: Vec<RoomId> = lock(&self.inner.rooms).keys().cloned().collect();
        ids.sort_unstable();
        ids.truncate(limit);
        ids.into_iter()
            .map(|r| {
                let fence = self.inner.owner.fence_of(&r);
                (r, fence)
            })
            .collect()
    }

    /// The owner string this node writes into leases (`<node>/<boot id>`).
    pub fn owner_id(&self) -> &str {
        self.inner.owner.owner_id()
    }
}

impl Inner {
    pub(crate) fn placement(&self) -> Option<Arc<Placement>> {
        self.placement
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn running_rooms(&self) -> Vec<RoomId> {
        lock(&self.rooms).keys().cloned().collect()
    }

    pub(crate) fn robot_rooms_add(&self, room: &RoomId) {
        lock(&self.robot_roomless).remove(room);
        lock(&self.robot_rooms).insert(room.clone());
    }

    /// Notes (`true`) or forgets that `room`'s robots found no room to visit.
    pub(crate) fn set_robot_roomless(&self, room: &RoomId, roomless: bool) {
        let mut set = lock(&self.robot_roomless);
        if roomless {
            set.insert(room.clone());
        } else {
            set.remove(room);
        }
    }

    pub(crate) fn robot_roomless(&self, room: &RoomId) -> bool {
        lock(&self.robot_roomless).contains(room)
    }

    /// Forgets the roomless rooms whose robots are no longer wanted here.
    pub(crate) fn robot_roomless_retain(&self, wanted: &std::collections::HashSet<RoomId>) {
        lock(&self.robot_roomless).retain(|r| wanted.contains(r));
    }

    pub(crate) fn robot_rooms_remove(&self, room: &RoomId) {
        lock(&self.robot_rooms).remove(room);
    }

    pub(crate) fn robot_rooms_has(&self, room: &RoomId) -> bool {
        lock(&self.robot_rooms).contains(room)
    }

    pub(crate) fn robot_rooms(&self) -> Vec<RoomId> {
        lock(&self.robot_rooms).iter().cloned().collect()
    }

    pub(crate) fn room_handle(&self, room: &RoomId) -> Option<RoomHandle> {
        lock(&self.rooms).get(room).cloned()
    }

    pub(crate) fn link_to(&self, gw: &NodeId) -> Option<GatewayLink> {
        lock(&self.links).get(gw).cloned()
    }

    pub(crate) fn dispatch_command(self: &Arc<Self>, mut cmd: Command) {
        let mut rooms = lock(&self.rooms);
        loop {
            if let Some(h) = rooms.get(&cmd.room) {
                let refused = match h.tx.try_send(Box::new(RoomMsg::Command(cmd))) {
                    Ok(()) => return,
                    Err(e) => e,
                };
                let full = matches!(refused, TrySendError::Full(_));
                // Only commands are sent here.
                let RoomMsg::Command(c) = *refused.into_inner() else {
                    return;
                };
                if full {
                    drop(rooms);
                    ::metrics::counter!(crate::metrics::ROOM_INBOX_FULL).increment(1);
                    let err = ReplyError::new(ErrorCode::Unavailable, "room is busy; retry");
                    let inner = self.clone();
                    self.tracker
                        .spawn(async move { inner.reply_direct(&c, Err(err), None).await });
                    return;
                }
                // Closed: the runtime stopped; start a fresh one.
                rooms.remove(&c.room);
                cmd = c;
                continue;
            }
            // Not running here: start it only if this shard owns the room.
            if let Some(owner) = self.placed_elsewhere(&cmd.room) {
                drop(rooms);
                let err = ReplyError {
                    code: ErrorCode::Unavailable,
                    msg: "room is placed on another shard; retry".into(),
                    owner_hint: Some(owner),
                    outcome_unknown: false,
                };
                let inner = self.clone();
                self.tracker
                    .spawn(async move { inner.reply_direct(&cmd, Err(err), None).await });
                return;
            }
            let room = cmd.room.clone();
            let first = if room::state::may_create(&cmd.cmd, self.config.auto_create) {
                room::First::Creates(cmd.user.clone())
            } else {
                room::First::CannotCreate
            };
            let msg = Box::new(RoomMsg::Command(cmd));
            self.start_runtime(&mut rooms, room, Some(msg), first);
            return;
        }
    }

    /// The shard the placement puts `room` on, when that is another one.
    pub(crate) fn placed_elsewhere(&self, room: &RoomId) -> Option<NodeId> {
        let placement = self.placement()?;
        let owner = placement.owner(room)?;
        (*owner != self.node).then(|| owner.clone())
    }

    /// Registers and starts a room runtime, with `msg` in its inbox. `first` says what that
    /// message may do to a room with no snapshot ([`room::First`]): one that cannot create it,
    /// or a user past their creation rate, is answered without a claim.
    fn start_runtime(
        self: &Arc<Self>,
        rooms: &mut HashMap<RoomId, RoomHandle>,
        room: RoomId,
        msg: Option<room::Inbox>,
        first: room::First,
    ) {
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(self.config.room_inbox);
        if let Some(msg) = msg {
            // A fresh channel has room for one message.
            let _ = tx.try_send(msg);
        }
        let weak = tx.downgrade();
        rooms.insert(room.clone(), RoomHandle { tx, generation });
        self.tracker
            .spawn(room::run(self.clone(), room, generation, rx, weak, first));
    }

    /// Loads `room` with no command, if it is placed here and not running: its load runs the
    /// owner's saga recovery (the orphan sweep, see `room::sweep_orphans`). A room
    /// with no snapshot stops at once. A cluster shard (durable history) loads nothing until
    /// it knows the placement. Returns whether it started a runtime.
    pub(crate) fn load_room(self: &Arc<Self>, room: &RoomId) -> bool {
        self.start_with(room, None)
    }

    /// Starts `room`'s runtime with `first` as its first message, under the conditions of
    /// [`Inner::load_room`] (retention's check of a room: `room::lifecycle`).
    pub(crate) fn start_for(self: &Arc<Self>, room: &RoomId, first: room::Inbox) -> bool {
        self.start_with(room, Some(first))
    }

    fn start_with(self: &Arc<Self>, room: &RoomId, first: Option<room::Inbox>) -> bool {
        let mut rooms = lock(&self.rooms);
        if rooms.get(room).is_some_and(|h| !h.tx.is_closed()) {
            return false;
        }
        // A cluster shard that has no placement yet cannot tell which rooms are its own.
        let unplaced = self.config.durable_history && self.placement().is_none();
        if unplaced || self.placed_elsewhere(room).is_some() {
            return false;
        }
        self.start_runtime(&mut rooms, room.clone(), first, room::First::Load);
        true
    }

    /// Asks the room's runtime on this node, if one runs, to sweep its sagas now.
    pub(crate) fn nudge_sweep(&self, room: &RoomId) {
        let tx = lock(&self.rooms).get(room).map(|h| h.tx.clone());
        if let Some(tx) = tx {
            let _ = tx.try_send(Box::new(RoomMsg::Sweep));
        }
    }

    /// Removes a room from the registry if `generation` is still the registered runtime.
    pub(crate) fn unregister(&self, room: &RoomId, generation: u64) {
        let mut rooms = lock(&self.rooms);
        if rooms.get(room).is_some_and(|h| h.generation == generation) {
            rooms.remove(room);
        }
    }

    /// Replies to a command without a room runtime.
    pub(crate) async fn reply_direct(
        &self,
        cmd: &Command,
        outcome: Result<Bytes, ReplyError>,
        membership: Option<Membership>,
    ) {
        let Some(tx) = self.link_to(&cmd.gateway) else {
            return;
        };
        let _ = tx
            .send(ToGateway::Reply(Reply {
                req: cmd.req,
                session: cmd.session,
                user: cmd.user.clone(),
                client_id: cmd.client_id,
                room: cmd.room.clone(),
                membership,
                outcome,
            }))
            .await;
    }
}
