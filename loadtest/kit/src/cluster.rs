//! A real cluster for tests: one `redis-server` and `chorus` shard and gateway processes on
//! free loopback ports, each killed on drop (see [`crate::node`] and [`crate::redis`]).

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::node::POLL_INTERVAL;
// The process pieces cluster tests use next to a `Cluster`, importable from here too.
pub use crate::node::{NODE_EXIT_TIMEOUT, NODE_READY_TIMEOUT, Node, free_port, wait_listening};
pub use crate::redis::RedisServer;

/// The secret a test cluster's gateways prove on their links to its shards
/// (`CHORUS_CLUSTER_SECRET`), so a test can open a link as a gateway would.
pub const CLUSTER_SECRET: &str = "test-cluster-secret-0123";

/// Distinguishes the clusters one test process starts.
static CLUSTER_SEQ: AtomicU64 = AtomicU64::new(0);

/// Options of a test cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Shard nodes (`s1`, `s2`, …).
    pub shards: usize,
    /// Gateway nodes (`g1`, `g2`, …).
    pub gateways: usize,
    /// Lease TTL of the shards.
    pub lease_ttl: Duration,
    /// Test-only: shards renew leases on room traffic (the seed bug).
    pub renew_on_traffic: bool,
    /// Extra environment for every node.
    pub env: Vec<(String, String)>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            shards: 3,
            gateways: 2,
            lease_ttl: Duration::from_secs(2),
            renew_on_traffic: false,
            env: Vec::new(),
        }
    }
}

/// A shard process of a test cluster.
#[derive(Debug)]
pub struct ShardNode {
    /// Its node id.
    pub id: String,
    /// The process.
    pub node: Node,
    /// Its admin address.
    pub admin: SocketAddr,
    /// Its link address.
    pub link: SocketAddr,
}

/// A gateway process of a test cluster.
#[derive(Debug)]
pub struct GatewayNode {
    /// Its node id.
    pub id: String,
    /// The process.
    pub node: Node,
    /// Its admin address.
    pub admin: SocketAddr,
    /// Its WebSocket URL.
    pub url: String,
}

/// A real cluster: one `redis-server` and `chorus` shard and gateway processes on free
/// loopback ports. Everything is killed on drop.
#[derive(Debug)]
pub struct Cluster {
    /// The Redis server.
    pub redis: RedisServer,
    /// Shard nodes.
    pub shards: Vec<ShardNode>,
    /// Gateway nodes.
    pub gateways: Vec<GatewayNode>,
    /// The JWT secret the gateways check.
    pub secret: Vec<u8>,
    /// The admin bearer token of every node.
    pub admin_token: String,
    /// Where shared files (the ledger) live; removed on drop.
    pub data_dir: PathBuf,
    options: ClusterOptions,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Nodes are killed by their own guards (fields drop after this); the files go now.
        for s in &mut self.shards {
            let _ = s.node.kill9();
        }
        for g in &mut self.gateways {
            let _ = g.node.kill9();
        }
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

impl Cluster {
    /// Starts `shards` shards and `gateways` gateways with the default options.
    ///
    /// # Errors
    /// As [`Cluster::start`].
    pub async fn of(shards: usize, gateways: usize) -> io::Result<Self> {
        Self::start(ClusterOptions {
            shards,
            gateways,
            ..ClusterOptions::default()
        })
        .await
    }

    /// Starts Redis, the shards, then the gateways, and waits until every node listens.
    ///
    /// # Errors
    /// When a process cannot start or does not become ready in time.
    pub async fn start(options: ClusterOptions) -> io::Result<Self> {
        let redis = RedisServer::start().await?;
        let data_dir = std::env::temp_dir().join(format!(
            "chorus-cluster-{}-{}",
            std::process::id(),
            CLUSTER_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&data_dir)?;
        let mut c = Self {
            data_dir,
            redis,
            shards: Vec::new(),
            gateways: Vec::new(),
            secret: format!("cluster-secret-{}", std::process::id()).into_bytes(),
            admin_token: "cluster-admin-token".to_owned(),
            options,
        };
        for i in 1..=c.options.shards {
            let s = c.spawn_shard(&format!("s{i}")).await?;
            c.shards.push(s);
        }
        for i in 1..=c.options.gateways {
            let g = c.spawn_gateway(&format!("g{i}")).await?;
            c.gateways.push(g);
        }
        for s in &c.shards {
            wait_listening(s.admin, NODE_READY_TIMEOUT).await?;
        }
        for g in &c.gateways {
            wait_listening(g.admin, NODE_READY_TIMEOUT).await?;
        }
        c.wait_converged().await?;
        Ok(c)
    }

    /// Waits until every node routes by the current ring membership (each node's
    /// `/admin/local` `ring_version` equals the membership version), so tests start from a
    /// placement every node agrees on.
    ///
    /// # Errors
    /// When the nodes do not converge within [`NODE_READY_TIMEOUT`].
    pub async fn wait_converged(&self) -> io::Result<()> {
        let deadline = Instant::now() + NODE_READY_TIMEOUT;
        let Some(g) = self.gateways.first() else {
            return Ok(());
        };
        let admins: Vec<SocketAddr> = self
            .shards
            .iter()
            .map(|s| s.admin)
            .chain(self.gateways.iter().map(|g| g.admin))
            .collect();
        loop {
            let ring = crate::admin::get(g.admin, "/admin/ring", Some(&self.admin_token)).await;
            let version = ring.ok().and_then(|r| r.json()["version"].as_u64());
            let mut agreed = version.is_some();
            for a in &admins {
                let local = crate::admin::get(*a, "/admin/local", Some(&self.admin_token)).await;
                let v = local.ok().and_then(|r| r.json()["ring_version"].as_u64());
                if v.is_none() || v != version {
                    agreed = false;
                }
            }
            if agreed {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "cluster nodes never agreed on the ring version",
                ));
            }
            tokio::time::sleep(POLL_INTERVAL * 5).await;
        }
    }

    fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("CHORUS_ADMIN_TOKEN".to_owned(), self.admin_token.clone()),
            (
                "CHORUS_JWT_SECRET".to_owned(),
                String::from_utf8_lossy(&self.secret).into_owned(),
            ),
            (
                "CHORUS_CLUSTER_SECRET".to_owned(),
                CLUSTER_SECRET.to_owned(),
            ),
            ("CHORUS_LOG".to_owned(), "info".to_owned()),
            (
                "CHORUS_LUCKY_SECRET".to_owned(),
                "cluster-lucky-secret".to_owned(),
            ),
            ("CHORUS_LEDGER".to_owned(), self.ledger_url()),
        ];
        env.extend(self.options.env.iter().cloned());
        env
    }

    /// Spawns a shard process with id `id` on ports it picks itself, and waits until it is
    /// ready (not added to [`Cluster::shards`]).
    ///
    /// # Errors
    /// When the process cannot start.
    pub async fn spawn_shard(&self, id: &str) -> io::Result<ShardNode> {
        let link = loopback(0);
        let admin = loopback(0);
        let mut args = vec![
            "shard".to_owned(),
            "--node-id".to_owned(),
            id.to_owned(),
            "--redis".to_owned(),
            self.redis.url(),
            "--link-addr".to_owned(),
            link.to_string(),
            "--admin-addr".to_owned(),
            admin.to_string(),
            "--lease-ttl-ms".to_owned(),
            self.options.lease_ttl.as_millis().to_string(),
        ];
        if self.options.renew_on_traffic {
            args.push("--test-renew-on-traffic".to_owned());
        }
        let mut node = Node::spawn_with_env(args, self.env())?;
        let (link, admin) = node.wait_ready(NODE_READY_TIMEOUT).await?;
        Ok(ShardNode {
            id: id.to_owned(),
            node,
            admin,
            link,
        })
    }

    /// Spawns a gateway process with id `id` on ports it picks itself, and waits until it is
    /// ready (not added to [`Cluster::gateways`]).
    ///
    /// # Errors
    /// When the process cannot start.
    pub async fn spawn_gateway(&self, id: &str) -> io::Result<GatewayNode> {
        let ws = loopback(0);
        let admin = loopback(0);
        let args = vec![
            "gateway".to_owned(),
            "--node-id".to_owned(),
            id.to_owned(),
            "--redis".to_owned(),
            self.redis.url(),
            "--ws-addr".to_owned(),
            ws.to_string(),
            "--admin-addr".to_owned(),
            admin.to_string(),
            "--rate-per-sec".to_owned(),
            "1000".to_owned(),
            "--rate-burst".to_owned(),
            "2000".to_owned(),
        ];
        let mut node = Node::spawn_with_env(args, self.env())?;
        let (ws, admin) = node.wait_ready(NODE_READY_TIMEOUT).await?;
        Ok(GatewayNode {
            id: id.to_owned(),
            node,
            admin,
            url: format!("ws://{ws}/ws"),
        })
    }

    /// The ledger every node shares: `CHORUS_LEDGER` in [`ClusterOptions::env`] if set (e.g.
    /// a [`crate::postgres::PgServer`]'s URL), else one SQLite file (WAL, multi-process) in a
    /// temp dir.
    pub fn ledger_url(&self) -> String {
        self.options
            .env
            .iter()
            .rev()
            .find(|(name, _)| name == "CHORUS_LEDGER")
            .map(|(_, url)| url.clone())
            .unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("ledger.db").display()))
    }

    /// The shard with id `id`.
    pub fn shard(&self, id: &str) -> Option<&ShardNode> {
        self.shards.iter().find(|s| s.id == id)
    }

    /// The shard with id `id`, mutably.
    pub fn shard_mut(&mut self, id: &str) -> Option<&mut ShardNode> {
        self.shards.iter_mut().find(|s| s.id == id)
    }

    /// A client token for `user`, valid for an hour.
    ///
    /// # Errors
    /// Token encoding failed.
    pub fn token(&self, user: &str) -> Result<String, jsonwebtoken::errors::Error> {
        crate::client::mint_token(&self.secret, user, Duration::from_secs(3600))
    }

    /// Connects `user` to gateway number `g` (0-based).
    ///
    /// # Errors
    /// Token or connection failures.
    pub async fn connect(&self, g: usize, user: &str) -> anyhow::Result<crate::client::Client> {
        self.connect_with(g, user, "").await
    }

    /// Connects `user` to gateway number `g` with `query` after the URL's path (`""`: none).
    async fn connect_with(
        &self,
        g: usize,
        user: &str,
        query: &str,
    ) -> anyhow::Result<crate::client::Client> {
        let token = self.token(user)?;
        let url = &self
            .gateways
            .get(g)
            .ok_or_else(|| anyhow::anyhow!("no gateway {g}"))?
            .url;
        Ok(crate::client::connect(&format!("{url}{query}"), Some(&token)).await?)
    }

    /// Connects `user` to gateway number `g` (0-based) with acknowledged direct messages
    /// (`?im_ack=1`: the client answers `im.ack`, PROTOCOL.md section 13.7).
    ///
    /// # Errors
    /// Token or connection failures.
    pub async fn connect_acking(
        &self,
        g: usize,
        user: &str,
    ) -> anyhow::Result<crate::client::Client> {
        self.connect_with(g, user, "?im_ack=1").await
    }

    /// An admin call to the first gateway, with the cluster's admin token.
    ///
    /// # Errors
    /// No gateway, or connection and protocol failures.
    pub async fn admin(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<crate::admin::AdminResponse> {
        let g = self
            .gateways
            .first()
            .ok_or_else(|| anyhow::anyhow!("no gateway"))?;
        crate::admin::call(g.admin, method, path, Some(&self.admin_token), body).await
    }

    /// A shard other than `not` (the first in start order), e.g. a target for a planned move.
    pub fn other_shard(&self, not: &str) -> Option<String> {
        self.shards.iter().map(|s| s.id.clone()).find(|s| s != not)
    }

    /// Asks for a planned move of `room` to shard `to` (`POST /admin/rooms/{room}/move`).
    ///
    /// # Errors
    /// Transport errors.
    pub async fn move_room(
        &self,
        room: &str,
        to: &str,
    ) -> anyhow::Result<crate::admin::AdminResponse> {
        let path = format!("/admin/rooms/{room}/move");
        self.admin("POST", &path, Some(serde_json::json!({ "to": to })))
            .await
    }

    /// `(owner node id, fence)` of `room`'s live lease, asked through gateway `g`'s admin API.
    ///
    /// # Errors
    /// Admin call failures.
    pub async fn room_owner(&self, room: &str) -> anyhow::Result<Option<(String, u64)>> {
        let g = self
            .gateways
            .first()
            .ok_or_else(|| anyhow::anyhow!("no gateway"))?;
        let r = crate::admin::get(
            g.admin,
            &format!("/admin/rooms/{room}"),
            Some(&self.admin_token),
        )
        .await?;
        if r.status == 404 {
            return Ok(None);
        }
        let j = r.json();
        match (j["owner"].as_str(), j["fence"].as_u64()) {
            (Some(o), Some(f)) => Ok(Some((o.to_owned(), f))),
            _ => Err(anyhow::anyhow!(
                "unexpected admin answer {}: {}",
                r.status,
                r.body
            )),
        }
    }
}
