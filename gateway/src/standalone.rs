//! Standalone mode: the cluster in one process. The gateway reaches its in-process shard
//! through the same link messages a cluster carries over the network, and storage sits
//! behind the same contracts (in-process leases, SQLite snapshots and ledger).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use protocol::NodeId;
use shard::gateway_link::{DirectGateway, GatewayLink};
use shard::node::bind;
use shard::{Shard, ShardConfig, Stores};
use storage::lease::{InProcessLeases, LeaseStore};
use storage::ledger::Ledger;
use storage::snapshot::SnapshotStore;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

pub use crate::node::{Running, StartError};

use crate::admin::{self, Readiness};
use crate::auth::Authenticator;
use crate::config::GatewayConfig;
use crate::money::Money;
use crate::router::Router;
use crate::shared::Core;

/// Messages buffered from the in-process shard to the gateway before rooms wait (Block
/// policy on an internal path: the gateway side never waits on rooms).
const LINK_QUEUE: usize = 8192;

/// How the in-process shard reaches the gateway: `CHORUS_STANDALONE_LINK=direct` (the
/// default: each room calls the gateway on its own task) or `queue` (a bounded queue and a
/// reader task, as a cluster link; kept to measure the one against the other).
fn direct_link() -> Result<bool, StartError> {
    match std::env::var("CHORUS_STANDALONE_LINK").as_deref() {
        Err(_) | Ok("" | "direct") => Ok(true),
        Ok("queue") => Ok(false),
        Ok(other) => Err(StartError::Config(format!(
            "CHORUS_STANDALONE_LINK must be direct or queue, not {other:?}"
        ))),
    }
}

/// Everything standalone mode needs.
#[derive(Debug, Clone)]
pub struct StandaloneConfig {
    /// WebSocket listen address.
    pub ws_addr: SocketAddr,
    /// Admin HTTP listen address.
    pub admin_addr: SocketAddr,
    /// Embedded storage directory.
    pub data_dir: PathBuf,
    /// HS256 secret for client tokens.
    pub jwt_secret: Vec<u8>,
    /// Bearer token of the `/admin/*` API (`None`: the admin API refuses every call).
    pub admin_token: Option<String>,
    /// Gateway limits.
    pub gateway: GatewayConfig,
    /// Shard settings (the gift catalog included).
    pub shard: ShardConfig,
    /// Ledger URL: empty for `<data_dir>/ledger.db`, `sqlite://<path>`,
    /// `postgres://user:pass@host:5432/db`, or `scylla://host:9042,...[/keyspace]`.
    pub ledger: String,
}

/// Starts gateway + shard in this process.
///
/// # Errors
/// [`StartError`] when a port cannot be bound or storage cannot be opened.
pub async fn start(cfg: StandaloneConfig) -> Result<Running, StartError> {
    crate::metrics::describe();
    let _ = admin::prometheus();
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| StartError::Storage(format!("create {}: {e}", cfg.data_dir.display())))?;
    let leases = InProcessLeases::new();
    let snapshots = SnapshotStore::sqlite(&cfg.data_dir, leases.clone())
        .await
        .map_err(|e| StartError::Storage(e.to_string()))?;
    let ledger = Ledger::open(&cfg.ledger, &cfg.data_dir)
        .await
        .map_err(|e| StartError::Storage(format!("ledger: {e}")))?;
    let robots = storage::robots::RobotStore::sqlite(&cfg.data_dir)
        .await
        .map_err(|e| StartError::Storage(format!("robot configs: {e}")))?;
    let reports = storage::reports::ReportStore::sqlite(&cfg.data_dir)
        .await
        .map_err(|e| StartError::Storage(format!("reports: {e}")))?;
    let im = storage::im::ImStore::sqlite(&cfg.data_dir)
        .await
        .map_err(|e| StartError::Storage(format!("direct messages: {e}")))?;
    let users = crate::users::Users::new(
        storage::profiles::ProfileStore::sqlite(&cfg.data_dir)
            .await
            .map_err(|e| StartError::Storage(format!("profiles: {e}")))?,
        storage::follows::FollowStore::sqlite(&cfg.data_dir)
            .await
            .map_err(|e| StartError::Storage(format!("follows: {e}")))?,
        storage::suspensions::SuspensionStore::sqlite(&cfg.data_dir)
            .await
            .map_err(|e| StartError::Storage(format!("suspensions: {e}")))?,
    );
    let directory = storage::directory::DirectoryStore::memory_with_pins_file(&cfg.data_dir)
        .await
        .map_err(|e| StartError::Storage(format!("room directory: {e}")))?;
    let (ws, ws_addr) = bind(cfg.ws_addr).await?;
    let (adm, admin_addr) = bind(cfg.admin_addr).await?;

    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let node = NodeId::from("standalone");
    let shard = Shard::start(
        node.clone(),
        cfg.shard.clone(),
        Stores {
            leases: LeaseStore::InProcess(leases.clone()),
            snapshots: snapshots.clone(),
            ledger: Some(ledger.clone()),
            robots: robots.clone(),
            directory: directory.clone(),
            reports: reports.clone(),
            pk_board: storage::pk_board::PkBoard::memory(),
        },
        shutdown.clone(),
        tracker.clone(),
    );
    // One process, one grace window: the registry keeps a closed connection's room entry as
    // long as the room keeps its member away.
    let gateway_cfg = crate::config::GatewayConfig {
        presence_grace: cfg.shard.presence_grace,
        ..cfg.gateway.clone()
    };
    let core = Core::new(
        node.clone(),
        gateway_cfg,
        Router::Local(shard.clone()),
        Authenticator::new(&cfg.jwt_secret)
            .map_err(|e| StartError::Config(e.to_string()))?
            .with_max_lifetime(cfg.gateway.max_token_lifetime)
            .with_audience(cfg.gateway.jwt_audience.clone()),
        shutdown.clone(),
        tracker.clone(),
        Money {
            ledger: Some(ledger),
            catalog: cfg.shard.catalog.clone(),
            ranks_without_robots: cfg.gateway.ranks_without_robots,
            transfer_daily_limit: cfg.gateway.transfer_daily_limit,
            signup_reward: cfg.gateway.signup_reward,
            signed_up: crate::wallet::SignedUp::default(),
            checkin_reward: cfg.gateway.checkin_reward,
            rooms: Some(snapshots.clone()),
        },
        crate::social::Social::standalone(node.clone(), im),
        users,
    );
    let dir = crate::directory::Directory::new(
        directory,
        cfg.shard.directory_stale,
        cfg.gateway.directory_cache,
    );
    let _ = core.directory.set(dir.clone());
    crate::suspension::start(&core, false)
        .await
        .map_err(|e| StartError::Storage(format!("suspensions: {e}")))?;
    if direct_link()? {
        // The rooms hand replies and events to the gateway on their own tasks: one task
        // hand-off less per delivery (see `shard::gateway_link`). Weak: the shard outlives
        // nothing through it.
        let gw = Arc::downgrade(&core);
        let from = node.clone();
        let direct: DirectGateway = Arc::new(move |msg| {
            if let Some(core) = gw.upgrade() {
                core.on_shard_message(&from, msg);
            }
        });
        shard.attach_gateway(node.clone(), GatewayLink::Direct(direct));
    } else {
        let (tx, rx) = mpsc::channel(LINK_QUEUE);
        shard.attach_gateway(node.clone(), tx);
        tracker.spawn(core.clone().link_reader(rx));
    }
    tracker.spawn(crate::server::serve(core.clone(), ws));
    let events = shard.events().cloned();
    if let Some(n) = &events {
        let _ = core.events.set(n.clone());
    }
    let admin = Arc::new(admin::Admin {
        node: core.node.clone(),
        core: Some(core),
        token: cfg.admin_token.clone(),
        metrics_token: cfg.gateway.metrics_token.clone(),
        shard: Some(shard),
        leases: LeaseStore::InProcess(leases),
        membership: None,
        ready: Readiness::Standalone,
        robots,
        reports,
        events,
        snapshots,
        directory: dir,
    });
    tracker.spawn(admin::serve(admin, adm, shutdown.clone(), tracker.clone()));
    if cfg.gateway.demo_tokens {
        warn!(
            "DEMO MODE: http://{ws_addr}/demo/token mints a client token for ANY user name, with {} demo coins. Anyone who reaches this port can act as anyone. Never run a public node with --demo.",
            crate::server::DEMO_COINS
        );
    }
    info!(%ws_addr, %admin_addr, data_dir = %cfg.data_dir.display(), "Chorus standalone is up.");
    Ok(Running::new(ws_addr, admin_addr, shutdown, tracker))
}
