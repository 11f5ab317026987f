//! The roles of the `chorus` binary, each started by one function: [`start_gateway`] (a
//! cluster gateway), [`start_shard`] (a cluster shard: [`shard::node`] plus the admin port) and
//! `standalone::start` (both in one process). Each returns a [`Running`] node.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use protocol::NodeId;
use shard::gifts::Catalog;
use shard::node::{ShardNodeConfig, bind, open_ledger};
use storage::lease::LeaseStore;
use storage::membership::{Membership, NodeRole, NodeSpec};
use storage::redis::Redis;
use storage::robots::RobotStore;
use storage::snapshot::SnapshotStore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

pub use shard::node::StartError;

use crate::admin::{self, Admin, Readiness};
use crate::auth::Authenticator;
use crate::config::GatewayConfig;
use crate::metrics;
use crate::money::Money;
use crate::router::{Router, Routes};
use crate::shared::Core;

/// Settings of a gateway node.
#[derive(Debug, Clone)]
pub struct GatewayNodeConfig {
    /// This node's id.
    pub node_id: NodeId,
    /// Redis URL.
    pub redis: String,
    /// WebSocket listen address.
    pub ws_addr: SocketAddr,
    /// Admin listen address.
    pub admin_addr: SocketAddr,
    /// Admin bearer token.
    pub admin_token: Option<String>,
    /// HS256 secret of client tokens.
    pub jwt_secret: Vec<u8>,
    /// Gateway limits.
    pub gateway: GatewayConfig,
    /// Ledger URL; `None`: wallet ops answer `UNAVAILABLE`.
    pub ledger: Option<String>,
    /// The gift catalog (for `gift.list`).
    pub catalog: Arc<Catalog>,
    /// The event webhook, for the moderation decisions this gateway's admin API takes (a
    /// report resolved, an account suspended or reinstated); rooms' events come from shards.
    pub events: Option<shard::events::EventsConfig>,
}

/// The settings of a shard node, with the admin port the binary adds to it.
#[derive(Debug, Clone)]
pub struct ShardRoleConfig {
    /// The shard node (its `admin_addr` is where the admin port listens).
    pub node: ShardNodeConfig,
    /// Admin bearer token.
    pub admin_token: Option<String>,
    /// Bearer token `GET /metrics` requires (`None`: open).
    pub metrics_token: Option<String>,
}

/// A running node (standalone, gateway or shard).
pub struct Running {
    /// The bound WebSocket address (a shard: its link address).
    pub ws_addr: SocketAddr,
    /// The bound admin address.
    pub admin_addr: SocketAddr,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    /// Cancelled by SIGTERM on nodes with a graceful drain phase (shards); stops the node
    /// when the drain is done. Defaults to the shutdown token.
    drain: Option<CancellationToken>,
}

impl Running {
    pub(crate) fn new(
        ws_addr: SocketAddr,
        admin_addr: SocketAddr,
        shutdown: CancellationToken,
        tracker: TaskTracker,
    ) -> Self {
        Self {
            ws_addr,
            admin_addr,
            shutdown,
            tracker,
            drain: None,
        }
    }

    /// The token a stop signal should cancel: the drain phase where there is one.
    pub fn stop_token(&self) -> CancellationToken {
        self.drain.clone().unwrap_or_else(|| self.shutdown.clone())
    }

    /// The token that stops the node when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Waits until the node was told to stop, then until its tasks finish (at most `grace`).
    pub async fn wait(self, grace: Duration) {
        self.shutdown.cancelled().await;
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            info!("Shutdown grace time over; exiting with tasks still running.");
        }
    }

    /// Stops the node and waits for it (at most `grace`).
    pub async fn stop(self, grace: Duration) {
        self.shutdown.cancel();
        self.wait(grace).await;
    }
}

/// Starts a shard node with its admin port.
///
/// # Errors
/// [`StartError`] when a port cannot be bound or Redis cannot be reached.
pub async fn start_shard(cfg: ShardRoleConfig) -> Result<Running, StartError> {
    metrics::describe();
    let _ = admin::prometheus();
    let (admin_l, admin_addr) = bind(cfg.node.admin_addr).await?;
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let node_id = cfg.node.node_id.clone();
    let node_stale = cfg.node.shard.directory_stale;
    let node = shard::node::start(
        ShardNodeConfig {
            admin_addr,
            ..cfg.node
        },
        shutdown.clone(),
        tracker.clone(),
    )
    .await?;
    let directory = crate::directory::Directory::new(
        storage::directory::DirectoryStore::redis(&node.redis),
        node_stale,
        crate::config::DEFAULT_DIRECTORY_CACHE,
    );
    let admin = Arc::new(Admin {
        directory,
        node: node_id.clone(),
        core: None,
        token: cfg.admin_token,
        metrics_token: cfg.metrics_token,
        robots: node.shard.robot_store().clone(),
        reports: node.shard.report_store().clone(),
        events: node.shard.events().cloned(),
        snapshots: SnapshotStore::redis(&node.redis),
        shard: Some(node.shard),
        leases: node.leases,
        membership: Some(node.membership),
        ready: Readiness::Cluster(node.redis),
    });
    tracker.spawn(admin::serve(
        admin,
        admin_l,
        shutdown.clone(),
        tracker.clone(),
    ));
    info!(node = %node_id, %admin_addr, "Admin port is up.");
    let mut running = Running::new(node.link_addr, admin_addr, shutdown, tracker);
    running.drain = Some(node.drain);
    Ok(running)
}

/// Starts a gateway node.
///
/// # Errors
/// [`StartError`] when a port cannot be bound or Redis cannot be reached.
pub async fn start_gateway(cfg: GatewayNodeConfig) -> Result<Running, StartError> {
    metrics::describe();
    let _ = admin::prometheus();
    let redis = Redis::connect(&cfg.redis).await?;
    let (ws_l, ws_addr) = bind(cfg.ws_addr).await?;
    let (admin_l, admin_addr) = bind(cfg.admin_addr).await?;
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let routes = Arc::new(Routes::default());
    let core = Core::new(
        cfg.node_id.clone(),
        cfg.gateway.clone(),
        Router::Cluster(routes.clone()),
        Authenticator::new(&cfg.jwt_secret)
            .map_err(|e| StartError::Config(e.to_string()))?
            .with_max_lifetime(cfg.gateway.max_token_lifetime)
            .with_audience(cfg.gateway.jwt_audience.clone()),
        shutdown.clone(),
        tracker.clone(),
        Money {
            ledger: open_ledger(cfg.ledger.as_ref()).await?,
            catalog: cfg.catalog.clone(),
            ranks_without_robots: cfg.gateway.ranks_without_robots,
            transfer_daily_limit: cfg.gateway.transfer_daily_limit,
            signup_reward: cfg.gateway.signup_reward,
            signed_up: crate::wallet::SignedUp::default(),
            checkin_reward: cfg.gateway.checkin_reward,
            rooms: Some(SnapshotStore::redis(&redis)),
        },
        crate::social::Social::cluster(cfg.node_id.clone(), &redis),
        crate::users::Users::new(
            storage::profiles::ProfileStore::redis(&redis),
            storage::follows::FollowStore::redis(&redis),
            storage::suspensions::SuspensionStore::redis(&redis),
        ),
    );
    crate::social::start(&core).await?;
    crate::suspension::start(&core, true).await?;
    let directory = crate::directory::Directory::new(
        storage::directory::DirectoryStore::redis(&redis),
        cfg.gateway.directory_stale,
        cfg.gateway.directory_cache,
    );
    let _ = core.directory.set(directory.clone());
    let membership = Membership::new(&redis);
    refresh_ring(&core, &routes, &membership).await;
    tracker.spawn(follow_ring(core.clone(), routes, membership.clone()));
    let spec = NodeSpec {
        id: cfg.node_id.clone(),
        role: NodeRole::Gateway,
        link_addr: String::new(),
        admin_addr: admin_addr.to_string(),
    };
    membership.join(&spec, 1).await?;
    tracker.spawn(membership.clone().keep_in_ring(spec, 1, shutdown.clone()));
    tracker.spawn(crate::server::serve(core.clone(), ws_l));
    let events = cfg.events.clone().map(|c| {
        shard::events::Notifier::start(c, cfg.node_id.clone(), &tracker, shutdown.clone())
    });
    if let Some(n) = &events {
        let _ = core.events.set(n.clone());
    }
    let admin = Arc::new(Admin {
        node: cfg.node_id.clone(),
        core: Some(core),
        token: cfg.admin_token.clone(),
        metrics_token: cfg.gateway.metrics_token.clone(),
        shard: None,
        leases: LeaseStore::redis(&redis),
        membership: Some(membership),
        robots: RobotStore::redis(&redis),
        reports: storage::reports::ReportStore::redis(&redis),
        events,
        snapshots: SnapshotStore::redis(&redis),
        directory,
        ready: Readiness::Cluster(redis),
    });
    tracker.spawn(admin::serve(
        admin,
        admin_l,
        shutdown.clone(),
        tracker.clone(),
    ));
    info!(node = %cfg.node_id, %ws_addr, %admin_addr, "Chorus gateway is up.");
    Ok(Running::new(ws_addr, admin_addr, shutdown, tracker))
}

/// Re-reads the membership: links to every shard, the placement over the live ones, and
/// sessions served through a shard that died or left are told to rejoin.
async fn refresh_ring(core: &Arc<Core>, routes: &Routes, membership: &Membership) {
    let view = match membership.list().await {
        Ok(v) => v,
        Err(e) => {
            warn!(error = %e, "Could not read the ring membership.");
            return;
        }
    };
    for n in &view.nodes {
        if n.role.owns_rooms() && !n.link_addr.is_empty() && !routes.has_link(&n.id) {
            let owner: Arc<dyn crate::link::LinkOwner> = core.clone();
            let link = crate::link::start(owner, &core.tracker, n.id.clone(), n.link_addr.clone());
            routes.add_link(link);
        }
    }
    let live = view.live_shards();
    let stale = view.stale_ids();
    routes.set_live(
        view.nodes
            .iter()
            .filter(|n| n.role.owns_rooms() && !n.link_addr.is_empty() && !stale.contains(&n.id))
            .map(|n| n.id.clone())
            .collect(),
    );
    let placement = view.placement(&live);
    let old = routes.placement();
    if *old != placement {
        info!(version = view.version, shards = live.len(), "Ring changed.");
        // Only sessions served through a dead shard (stale heartbeat) or one removed from the
        // membership are told to rejoin; rooms that moved between live members (weights,
        // drains, pins) are handed off by their old owner and the sessions follow unnoticed.
        let gone: HashSet<NodeId> = old
            .ring()
            .nodes()
            .iter()
            .map(|(n, _)| n.clone())
            .filter(|n| view.get(n).is_none() || stale.contains(n))
            .collect();
        routes.set_placement(placement);
        let moved = core.hub.evict_where(|_, via| gone.contains(via));
        ::metrics::counter!(metrics::SESSIONS_EVICTED).increment(moved as u64);
    }
}

/// Keeps a gateway's routes current with the ring.
async fn follow_ring(core: Arc<Core>, routes: Arc<Routes>, membership: Membership) {
    let mut watch = membership.watch().await.ok();
    // Until the drain is over: the sockets still open are routed by the current ring.
    let shutdown = core.drained.clone();
    while membership.next_change(&mut watch, &shutdown).await {
        refresh_ring(&core, &routes, &membership).await;
    }
}
