//! The cluster roles of the one binary: `shard` (owns rooms through Redis leases, serves
//! gateway links) and `gateway` (terminates sockets, routes by the ring over links).
//!
//! Both join the ring membership in Redis and heartbeat once a second; gateways re-read the
//! membership on every pub/sub message and at least once a second, and place rooms only on
//! shards whose heartbeat is fresh.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use protocol::NodeId;
use protocol::ring::{DEFAULT_VNODES_PER_WEIGHT, Placement, Ring};
use shard::gifts::Catalog;
use shard::{Shard, ShardConfig, Stores};
use storage::lease::LeaseStore;
use storage::ledger::Ledger;
use storage::membership::{Membership, NodeRole, NodeSpec, RingView};
use storage::redis::Redis;
use storage::snapshot::SnapshotStore;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::auth::Authenticator;
use crate::config::GatewayConfig;
use crate::money::Money;
use crate::router::{Router, Routes};
use crate::standalone::{Running, StartError};
use crate::{Core, admin};

/// How often a node stamps its heartbeat.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// A shard whose heartbeat is older than this gets no new rooms: three missed heartbeats.
pub const STALE_AFTER: Duration = Duration::from_secs(3);
/// How often a gateway re-reads the membership even without a pub/sub message.
pub const RING_REFRESH: Duration = Duration::from_secs(1);

/// Settings of a shard node.
#[derive(Debug, Clone)]
pub struct ShardNodeConfig {
    /// This node's id.
    pub node_id: NodeId,
    /// Redis URL.
    pub redis: String,
    /// Link listen address (gateways connect here).
    pub link_addr: SocketAddr,
    /// Admin listen address.
    pub admin_addr: SocketAddr,
    /// Admin bearer token.
    pub admin_token: Option<String>,
    /// Shard settings.
    pub shard: ShardConfig,
    /// Test-only: renew leases on room traffic instead of on the timer (the seed bug).
    pub renew_on_traffic: bool,
    /// Ledger URL (`sqlite://<path>` shared on one machine, or `scylla://…`); `None`: no gifts.
    pub ledger: Option<String>,
}

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
}

async fn open_ledger(url: Option<&String>) -> Result<Option<Ledger>, StartError> {
    match url {
        None => Ok(None),
        Some(u) => Ledger::open(u, Path::new("."))
            .await
            .map(Some)
            .map_err(|e| StartError::Storage(format!("ledger: {e}"))),
    }
}

async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let l = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let bound = l
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    Ok((l, bound))
}

fn storage_err(e: storage::StorageError) -> StartError {
    StartError::Storage(e.to_string())
}

/// Joins the ring and heartbeats until shutdown; leaves the ring on a clean stop.
async fn membership_loop(m: Membership, spec: NodeSpec, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(HEARTBEAT_INTERVAL);
    // The highest ring version seen: a membership that went backwards means Redis lost its
    // data (rejoin); one that moved on without us means an operator removed this node (stay
    // out until restarted).
    let mut seen_version = 0;
    let mut removed = false;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        match m.heartbeat(&spec.id).await {
            Ok(true) => {
                removed = false;
                if let Ok(view) = m.list().await {
                    seen_version = seen_version.max(view.version);
                }
            }
            Ok(false) => {
                let version = m.list().await.map(|v| v.version).unwrap_or(0);
                if version < seen_version || seen_version == 0 {
                    info!(node = %spec.id, "Not in the ring (membership lost); joining.");
                    match m.join(&spec, 1).await {
                        Ok(v) => seen_version = v,
                        Err(e) => warn!(error = %e, "Ring join failed."),
                    }
                } else if !removed {
                    removed = true;
                    warn!(node = %spec.id, "Removed from the ring by an operator; staying out until restarted.");
                }
            }
            Err(e) => warn!(error = %e, "Heartbeat failed."),
        }
    }
    if let Err(e) = m.remove(&spec.id).await {
        warn!(error = %e, "Could not leave the ring on shutdown.");
    }
}

/// Longest a stopping shard waits for its rooms to be handed off before it stops anyway
/// (the rest are saved and released, and their clients rejoin elsewhere).
pub const SHARD_DRAIN_DEADLINE: Duration = Duration::from_secs(20);

/// A shard's graceful stop (SIGTERM): take weight 0 so every room is handed off, wait until
/// none runs here (or the deadline), then stop.
async fn drain_shard(
    shard: Shard,
    m: Membership,
    node: NodeId,
    drain: CancellationToken,
    shutdown: CancellationToken,
) {
    tokio::select! {
        () = shutdown.cancelled() => return,
        () = drain.cancelled() => {}
    }
    info!(%node, rooms = shard.rooms_running(), "Draining: handing rooms off before stopping.");
    if let Err(e) = m.set_weight(&node, 0).await {
        warn!(error = %e, "Could not take weight 0; rooms will be released instead.");
    }
    let deadline = tokio::time::Instant::now() + SHARD_DRAIN_DEADLINE;
    while shard.rooms_running() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    info!(%node, left = shard.rooms_running(), "Drain done; stopping.");
    shutdown.cancel();
}

/// Starts a shard node.
///
/// # Errors
/// [`StartError`] when a port cannot be bound or Redis cannot be reached.
pub async fn start_shard(cfg: ShardNodeConfig) -> Result<Running, StartError> {
    crate::metrics::describe();
    let _ = admin::prometheus();
    let redis = Redis::connect(&cfg.redis).await.map_err(storage_err)?;
    let (link_l, link_addr) = bind(cfg.link_addr).await?;
    let (admin_l, admin_addr) = bind(cfg.admin_addr).await?;
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let leases = LeaseStore::redis(&redis);
    let ledger = open_ledger(cfg.ledger.as_ref()).await?;
    let shard = Shard::start_with(
        cfg.node_id.clone(),
        cfg.shard.clone(),
        Stores {
            leases: leases.clone(),
            snapshots: SnapshotStore::redis(&redis),
            ledger,
        },
        shutdown.clone(),
        tracker.clone(),
        cfg.renew_on_traffic,
    );
    tracker.spawn(shard::link::serve(shard.clone(), link_l, shutdown.clone()));
    let membership = Membership::new(&redis);
    let spec = NodeSpec {
        id: cfg.node_id.clone(),
        role: NodeRole::Shard,
        link_addr: link_addr.to_string(),
        admin_addr: admin_addr.to_string(),
    };
    // First start: weight 1. A restart keeps the weight an operator set (e.g. 0 = drained).
    let weight = match membership.list().await {
        Ok(view) => view.get(&spec.id).map_or(1, |n| n.weight),
        Err(_) => 1,
    };
    membership.join(&spec, weight).await.map_err(storage_err)?;
    tracker.spawn(shard_placement_loop(
        shard.clone(),
        membership.clone(),
        shutdown.clone(),
    ));
    let shard_for_drain = shard.clone();
    tracker.spawn(membership_loop(membership, spec, shutdown.clone()));
    let admin = Arc::new(admin::Admin {
        node: cfg.node_id.clone(),
        core: None,
        token: cfg.admin_token.clone(),
        shard: Some(shard),
        leases,
        membership: Some(Membership::new(&redis)),
    });
    tracker.spawn(admin::serve(
        admin,
        admin_l,
        shutdown.clone(),
        tracker.clone(),
    ));
    info!(node = %cfg.node_id, %link_addr, %admin_addr, "Chorus shard is up.");
    let drain = CancellationToken::new();
    tracker.spawn(drain_shard(
        shard_for_drain,
        Membership::new(&redis),
        cfg.node_id.clone(),
        drain.clone(),
        shutdown.clone(),
    ));
    Ok(Running::new(link_addr, admin_addr, shutdown, tracker).with_drain(drain))
}

/// Starts a gateway node.
///
/// # Errors
/// [`StartError`] when a port cannot be bound or Redis cannot be reached.
pub async fn start_gateway(cfg: GatewayNodeConfig) -> Result<Running, StartError> {
    crate::metrics::describe();
    let _ = admin::prometheus();
    let redis = Redis::connect(&cfg.redis).await.map_err(storage_err)?;
    let (ws_l, ws_addr) = bind(cfg.ws_addr).await?;
    let (admin_l, admin_addr) = bind(cfg.admin_addr).await?;
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let routes = Arc::new(Routes::default());
    let core = Core::new(
        cfg.node_id.clone(),
        cfg.gateway.clone(),
        Router::Cluster(routes.clone()),
        Authenticator::new(&cfg.jwt_secret).map_err(|e| StartError::Config(e.to_string()))?,
        shutdown.clone(),
        tracker.clone(),
        Money {
            ledger: open_ledger(cfg.ledger.as_ref()).await?,
            catalog: cfg.catalog.clone(),
        },
    );
    let membership = Membership::new(&redis);
    refresh_ring(&core, &routes, &membership).await;
    tracker.spawn(ring_loop(core.clone(), routes, membership.clone()));
    let spec = NodeSpec {
        id: cfg.node_id.clone(),
        role: NodeRole::Gateway,
        link_addr: String::new(),
        admin_addr: admin_addr.to_string(),
    };
    membership.join(&spec, 1).await.map_err(storage_err)?;
    tracker.spawn(membership_loop(membership, spec, shutdown.clone()));
    tracker.spawn(crate::server::serve(core.clone(), ws_l));
    let admin = Arc::new(admin::Admin {
        node: cfg.node_id.clone(),
        core: Some(core),
        token: cfg.admin_token.clone(),
        shard: None,
        leases: LeaseStore::redis(&redis),
        membership: Some(Membership::new(&redis)),
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

/// Re-reads the membership: links to every shard, the ring over the live ones, and sessions
/// of rooms the ring moved are told to rejoin.
async fn refresh_ring(core: &Arc<Core>, routes: &Routes, membership: &Membership) {
    let view = match membership.list().await {
        Ok(v) => v,
        Err(e) => {
            warn!(error = %e, "Could not read the ring membership.");
            return;
        }
    };
    let stale: HashSet<NodeId> = view
        .stale(STALE_AFTER)
        .into_iter()
        .map(|n| n.id.clone())
        .collect();
    let mut live = Vec::new();
    for n in &view.nodes {
        if !n.role.owns_rooms() || n.link_addr.is_empty() {
            continue;
        }
        if !routes.has_link(&n.id) {
            routes.add_link(crate::link::start(core, n.id.clone(), n.link_addr.clone()));
        }
        if !stale.contains(&n.id) && n.weight > 0 {
            live.push((n.id.clone(), n.weight));
        }
    }
    let placement = placement_of(&view, &live);
    let old = routes.placement();
    if *old != placement {
        info!(version = view.version, shards = live.len(), "Ring changed.");
        // Only sessions served through a dead shard (stale heartbeat) or one removed from the
        // membership are told to rejoin; rooms that moved between live members (weights,
        // drains, pins) are handed off by their old owner and the sessions follow unnoticed.
        // Dead means no fresh heartbeat or no longer a member at all.
        let stale: HashSet<NodeId> = view
            .stale(STALE_AFTER)
            .into_iter()
            .map(|n| n.id.clone())
            .collect();
        let gone: HashSet<NodeId> = old
            .ring()
            .nodes()
            .iter()
            .map(|(n, _)| n.clone())
            .filter(|n| view.get(n).is_none() || stale.contains(n))
            .collect();
        routes.set_placement(placement);
        let moved = core.hub.evict_where(|_, via| gone.contains(via));
        ::metrics::counter!(crate::metrics::SESSIONS_EVICTED).increment(moved as u64);
    }
}

/// The placement from a membership view: the ring over the live, weighted shards, plus pins.
pub(crate) fn placement_of(view: &RingView, live: &[(NodeId, u32)]) -> Placement {
    let ring = Ring::new(view.version, live, DEFAULT_VNODES_PER_WEIGHT);
    Placement::new(
        ring,
        view.pins
            .iter()
            .map(|(r, n)| (protocol::RoomId::from(r.as_str()), n.clone())),
    )
}

/// The live, weighted room-owning members of a view (fresh heartbeat, weight above 0).
pub(crate) fn live_shards(view: &RingView) -> Vec<(NodeId, u32)> {
    let stale: HashSet<NodeId> = view
        .stale(STALE_AFTER)
        .into_iter()
        .map(|n| n.id.clone())
        .collect();
    view.nodes
        .iter()
        .filter(|n| n.role.owns_rooms() && !n.link_addr.is_empty())
        .filter(|n| !stale.contains(&n.id) && n.weight > 0)
        .map(|n| (n.id.clone(), n.weight))
        .collect()
}

/// Waits for the next membership change: a pub/sub message or the periodic re-read timer
/// (messages sent while disconnected are lost). Returns false on shutdown.
async fn next_change(
    watch: &mut Option<storage::membership::RingWatch>,
    membership: &Membership,
    shutdown: &CancellationToken,
) -> bool {
    let changed = async {
        match watch.as_mut() {
            Some(w) => w.changed().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = shutdown.cancelled() => return false,
        () = tokio::time::sleep(RING_REFRESH) => {}
        c = changed => if c.is_none() { *watch = membership.watch().await.ok(); },
    }
    true
}

/// Keeps a shard's placement current.
async fn shard_placement_loop(shard: Shard, membership: Membership, shutdown: CancellationToken) {
    let mut watch = membership.watch().await.ok();
    loop {
        match membership.list().await {
            Ok(view) => shard.set_placement(placement_of(&view, &live_shards(&view))),
            Err(e) => warn!(error = %e, "Could not read the ring membership."),
        }
        if !next_change(&mut watch, &membership, &shutdown).await {
            return;
        }
    }
}

/// Keeps a gateway's routes current.
async fn ring_loop(core: Arc<Core>, routes: Arc<Routes>, membership: Membership) {
    let mut watch = membership.watch().await.ok();
    let shutdown = core.shutdown.clone();
    while next_change(&mut watch, &membership, &shutdown).await {
        refresh_ring(&core, &routes, &membership).await;
    }
}
