//! The shard role of a cluster node: connects to Redis, serves gateway links, joins the ring,
//! keeps its placement current, and drains its rooms to the other shards before it stops.
//! The binary adds the admin port (crate `gateway`).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use protocol::NodeId;
use storage::lease::LeaseStore;
use storage::ledger::Ledger;
use storage::membership::{Membership, NodeRole, NodeSpec};
use storage::redis::Redis;
use storage::snapshot::SnapshotStore;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::{Shard, ShardConfig, Stores};

/// Longest a stopping shard waits for its rooms to be handed off before it stops anyway
/// (the rest are saved and released, and their clients rejoin elsewhere).
pub const SHARD_DRAIN_DEADLINE: Duration = Duration::from_secs(20);

/// Settings of a shard node.
#[derive(Debug, Clone)]
pub struct ShardNodeConfig {
    /// This node's id.
    pub node_id: NodeId,
    /// Redis URL.
    pub redis: String,
    /// Link listen address (gateways connect here).
    pub link_addr: SocketAddr,
    /// The link address announced in the ring when gateways reach this shard elsewhere than
    /// at the bound one (NAT, a proxy); `None`: the bound address.
    pub link_advertise: Option<SocketAddr>,
    /// The admin address this node advertises in the ring (bound by the caller).
    pub admin_addr: SocketAddr,
    /// Shard settings.
    pub shard: ShardConfig,
    /// Test-only: renew leases on room traffic instead of on the timer (the seed bug).
    pub renew_on_traffic: bool,
    /// Ledger URL (`sqlite://<path>` shared on one machine, `postgres://…` or `scylla://…`);
    /// `None`: no gifts.
    pub ledger: Option<String>,
    /// The secret gateways prove on their links (`None`: any hello is accepted).
    pub link_secret: Option<crate::link::LinkSecret>,
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The data directory or a store could not be opened.
    #[error("storage: {0}")]
    Storage(String),
    /// A setting is unusable (e.g. an empty secret).
    #[error("config: {0}")]
    Config(String),
}

impl From<storage::StorageError> for StartError {
    fn from(e: storage::StorageError) -> Self {
        Self::Storage(e.to_string())
    }
}

/// Binds `addr`; returns the listener and the address it got (port 0 picks a free one).
///
/// # Errors
/// [`StartError::Bind`].
pub async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let l = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let bound = l
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    Ok((l, bound))
}

/// Opens the ledger at `url`, if one is configured.
///
/// # Errors
/// [`StartError::Storage`] when it cannot be opened.
pub async fn open_ledger(url: Option<&String>) -> Result<Option<Ledger>, StartError> {
    match url {
        None => Ok(None),
        Some(u) => Ledger::open(u, Path::new("."))
            .await
            .map(Some)
            .map_err(|e| StartError::Storage(format!("ledger: {e}"))),
    }
}

/// A running shard node.
pub struct ShardNode {
    /// The shard.
    pub shard: Shard,
    /// The bound link address.
    pub link_addr: SocketAddr,
    /// The Redis connection the node's stores use.
    pub redis: Redis,
    /// The room leases.
    pub leases: LeaseStore,
    /// The ring membership.
    pub membership: Membership,
    /// Cancelling it starts the graceful drain (SIGTERM): rooms are handed off, then the node
    /// stops.
    pub drain: CancellationToken,
}

/// Starts a shard node: every task goes on `tracker` and stops with `shutdown`.
///
/// # Errors
/// [`StartError`] when the link port cannot be bound or Redis or the ledger cannot be reached.
pub async fn start(
    cfg: ShardNodeConfig,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) -> Result<ShardNode, StartError> {
    let redis = Redis::connect(&cfg.redis).await?;
    let (link_l, link_addr) = bind(cfg.link_addr).await?;
    let leases = LeaseStore::redis(&redis);
    let snapshots = SnapshotStore::redis_paced(&redis, cfg.shard.history_write_interval);
    let directory = storage::directory::DirectoryStore::redis(&redis);
    // Before any room is claimed: many rooms claimed at once would each load the scripts.
    let loaded = match (leases.preload().await, snapshots.preload().await) {
        (Ok(()), Ok(())) => directory.preload().await,
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    if let Err(e) = loaded {
        warn!(error = %e, "Could not load the shard's scripts into Redis; each loads on first use.");
    }
    let ledger = open_ledger(cfg.ledger.as_ref()).await?;
    let shard = Shard::start_with(
        cfg.node_id.clone(),
        cfg.shard.clone(),
        Stores {
            leases: leases.clone(),
            snapshots,
            ledger,
            robots: storage::robots::RobotStore::redis(&redis),
            directory,
            reports: storage::reports::ReportStore::redis(&redis),
            pk_board: storage::pk_board::PkBoard::redis(&redis),
        },
        shutdown.clone(),
        tracker.clone(),
        cfg.renew_on_traffic,
    );
    if cfg.link_secret.is_none() {
        warn!("No cluster secret: any process that reaches the link port can act as a gateway.");
    }
    let check = crate::link::HelloCheck::new(cfg.link_secret.clone());
    tracker.spawn(crate::link::serve(
        shard.clone(),
        link_l,
        check,
        shutdown.clone(),
    ));
    let membership = Membership::new(&redis);
    let spec = NodeSpec {
        id: cfg.node_id.clone(),
        role: NodeRole::Shard,
        link_addr: cfg.link_advertise.unwrap_or(link_addr).to_string(),
        admin_addr: cfg.admin_addr.to_string(),
    };
    // First start: weight 1. A restart keeps the weight an operator set (e.g. 0 = drained).
    let weight = match membership.list().await {
        Ok(view) => view.get(&spec.id).map_or(1, |n| n.weight),
        Err(_) => 1,
    };
    membership.join(&spec, weight).await?;
    tracker.spawn(follow_placement(
        shard.clone(),
        membership.clone(),
        shutdown.clone(),
    ));
    tracker.spawn(
        membership
            .clone()
            .keep_in_ring(spec, weight, shutdown.clone()),
    );
    let drain = CancellationToken::new();
    tracker.spawn(drain_on(
        shard.clone(),
        membership.clone(),
        drain.clone(),
        shutdown,
    ));
    info!(node = %cfg.node_id, %link_addr, "Chorus shard is up.");
    Ok(ShardNode {
        shard,
        link_addr,
        redis,
        leases,
        membership,
        drain,
    })
}

/// Keeps the shard's placement current with the ring.
async fn follow_placement(shard: Shard, membership: Membership, shutdown: CancellationToken) {
    let mut watch = membership.watch().await.ok();
    loop {
        match membership.list().await {
            Ok(view) => shard.set_placement(view.placement(&view.live_shards())),
            Err(e) => warn!(error = %e, "Could not read the ring membership."),
        }
        if !membership.next_change(&mut watch, &shutdown).await {
            return;
        }
    }
}

/// A shard's graceful stop, once `drain` is cancelled: take weight 0 so every room is handed
/// off, wait until none runs here and every handoff has queued its notice to the gateways (or
/// [`SHARD_DRAIN_DEADLINE`]), then stop the node. A room leaves the registry before it saves,
/// releases and tells the gateways: stopping then would close the links under its notice.
async fn drain_on(
    shard: Shard,
    m: Membership,
    drain: CancellationToken,
    shutdown: CancellationToken,
) {
    tokio::select! {
        () = shutdown.cancelled() => return,
        () = drain.cancelled() => {}
    }
    let node = shard.node().clone();
    info!(%node, rooms = shard.rooms_running(), "Draining: handing rooms off before stopping.");
    if let Err(e) = m.set_weight(&node, 0).await {
        warn!(error = %e, "Could not take weight 0; rooms will be released instead.");
    }
    let deadline = tokio::time::Instant::now() + SHARD_DRAIN_DEADLINE;
    while (shard.rooms_running() > 0 || shard.handoffs_in_flight() > 0)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    info!(%node, left = shard.rooms_running(), "Drain done; stopping.");
    shutdown.cancel();
}
