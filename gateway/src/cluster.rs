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
use protocol::ring::{DEFAULT_VNODES_PER_WEIGHT, Ring};
use shard::gifts::Catalog;
use shard::{Shard, ShardConfig, Stores};
use storage::lease::LeaseStore;
use storage::ledger::Ledger;
use storage::membership::{Membership, NodeRole, NodeSpec};
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
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        match m.heartbeat(&spec.id).await {
            Ok(true) => {}
            Ok(false) => {
                info!(node = %spec.id, "Not in the ring; joining.");
                if let Err(e) = m.join(&spec, 1).await {
                    warn!(error = %e, "Ring join failed.");
                }
            }
            Err(e) => warn!(error = %e, "Heartbeat failed."),
        }
    }
    if let Err(e) = m.remove(&spec.id).await {
        warn!(error = %e, "Could not leave the ring on shutdown.");
    }
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
    membership.join(&spec, 1).await.map_err(storage_err)?;
    tracker.spawn(membership_loop(membership, spec, shutdown.clone()));
    let admin = Arc::new(admin::Admin {
        node: cfg.node_id.clone(),
        core: None,
        token: cfg.admin_token.clone(),
        shard: Some(shard),
        leases,
    });
    tracker.spawn(admin::serve(
        admin,
        admin_l,
        shutdown.clone(),
        tracker.clone(),
    ));
    info!(node = %cfg.node_id, %link_addr, %admin_addr, "Chorus shard is up.");
    Ok(Running::new(link_addr, admin_addr, shutdown, tracker))
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
    let ring = Ring::new(view.version, &live, DEFAULT_VNODES_PER_WEIGHT);
    let old = routes.ring();
    if old.nodes() != ring.nodes() {
        info!(version = view.version, shards = live.len(), "Ring changed.");
        // Route by the new ring first, then tell the moved sessions: their rejoin must not
        // go to the old owner.
        routes.set_ring(ring);
        let ring = routes.ring();
        let moved = core
            .hub
            .evict_where(|room, via| ring.owner(room) != Some(via));
        ::metrics::counter!(crate::metrics::SESSIONS_EVICTED).increment(moved as u64);
    }
}

async fn ring_loop(core: Arc<Core>, routes: Arc<Routes>, membership: Membership) {
    let mut watch = membership.watch().await.ok();
    let shutdown = core.shutdown.clone();
    loop {
        let changed = async {
            match watch.as_mut() {
                Some(w) => w.changed().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(RING_REFRESH) => {}
            c = changed => if c.is_none() { watch = membership.watch().await.ok(); },
        }
        refresh_ring(&core, &routes, &membership).await;
    }
}
