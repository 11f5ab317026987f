//! The chaos run's cluster: one `redis-server`, 3 shards and 2 gateways as real `chorus`
//! processes, the SQLite ledger in the run's directory, and a fault proxy on every link a
//! fault can cut: each shard reaches Redis through its own proxy, and gateways reach each
//! shard through a proxy in front of its link port (the shard announces the proxy's address
//! in the ring, `--link-advertise`); clients reach each gateway through a proxy too. Every
//! process binds ports it picks itself (port 0) and its proxy is pointed at them, so a
//! restarted node comes back where the ring and clients expect it, and no other process can
//! take its port in between. Node logs are copied into `DIR/nodes/` when a node stops and at
//! the end.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kit::node::{NODE_READY_TIMEOUT, Node};
use kit::proxy::FaultProxy;
use kit::redis::RedisServer;

/// How long one admin call may take before the driver gives up on it (a paused node).
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);

/// One node slot: the running process, if any.
pub struct Slot {
    /// Node id (`s1`, `g2`, …).
    pub id: String,
    /// The running process.
    pub node: Option<Node>,
    /// Its admin address (once ready).
    pub admin: Option<SocketAddr>,
    /// Processes started in this slot so far (names the log files).
    pub incarnation: u32,
    /// Frozen by SIGSTOP now.
    pub paused: bool,
}

/// The whole cluster.
pub struct ChaosCluster {
    /// The run directory.
    pub dir: PathBuf,
    /// Redis.
    pub redis: RedisServer,
    /// Shards.
    pub shards: Vec<Slot>,
    /// Gateways.
    pub gateways: Vec<Slot>,
    /// Per shard: its proxy to Redis.
    pub redis_proxies: Vec<FaultProxy>,
    /// Per shard: the proxy gateways reach its link through.
    pub link_proxies: Vec<FaultProxy>,
    /// Per gateway: the proxy clients reach its WebSocket port through (never faulted).
    pub front_proxies: Vec<FaultProxy>,
    /// JWT secret of the gateways.
    pub secret: Vec<u8>,
    /// Admin bearer token of every node.
    pub admin_token: String,
    /// Lease TTL.
    pub ttl: Duration,
    /// Extra environment for shards (test switches).
    pub shard_env: Vec<(String, String)>,
    /// Extra environment for the first process of each shard only (e.g. a crash switch: a
    /// restarted shard runs without it).
    pub first_shard_env: Vec<(String, String)>,
    /// Test-only: shards renew leases on traffic (the seed bug).
    pub renew_on_traffic: bool,
}

impl ChaosCluster {
    /// Starts Redis, the proxies, the shards, then the gateways, in `dir`.
    ///
    /// # Errors
    /// When a process or proxy cannot start.
    pub async fn start(
        dir: &Path,
        shards: usize,
        gateways: usize,
        ttl: Duration,
        shard_env: Vec<(String, String)>,
        first_shard_env: Vec<(String, String)>,
        renew_on_traffic: bool,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir.join("nodes"))?;
        let redis = RedisServer::start().await?;
        let mut c = Self {
            dir: dir.to_owned(),
            redis,
            shards: Vec::new(),
            gateways: Vec::new(),
            redis_proxies: Vec::new(),
            link_proxies: Vec::new(),
            front_proxies: Vec::new(),
            secret: b"chaos-secret".to_vec(),
            admin_token: "chaos-admin".to_owned(),
            ttl,
            shard_env,
            first_shard_env,
            renew_on_traffic,
        };
        for i in 1..=shards {
            c.redis_proxies
                .push(FaultProxy::start(c.redis.addr()).await?);
            c.link_proxies.push(FaultProxy::start(NOWHERE).await?);
            c.shards.push(slot(format!("s{i}")));
        }
        for i in 1..=gateways {
            c.front_proxies.push(FaultProxy::start(NOWHERE).await?);
            c.gateways.push(slot(format!("g{i}")));
        }
        for i in 0..shards {
            c.start_shard(i).await?;
        }
        for i in 0..gateways {
            c.start_gateway(i).await?;
        }
        Ok(c)
    }

    fn ledger_url(&self) -> String {
        format!("sqlite://{}", self.ledger_path().display())
    }

    /// The SQLite ledger file.
    pub fn ledger_path(&self) -> PathBuf {
        self.dir.join("ledger.db")
    }

    fn env(&self) -> Vec<(String, String)> {
        vec![
            ("CHORUS_ADMIN_TOKEN".into(), self.admin_token.clone()),
            (
                "CHORUS_JWT_SECRET".into(),
                String::from_utf8_lossy(&self.secret).into_owned(),
            ),
            (
                "CHORUS_CLUSTER_SECRET".into(),
                "chaos-cluster-secret".into(),
            ),
            ("CHORUS_LOG".into(), "info".into()),
            ("NO_COLOR".into(), "1".into()),
            ("CHORUS_LUCKY_SECRET".into(), "chaos-lucky".into()),
            ("CHORUS_LEDGER".into(), self.ledger_url()),
            // Orphaned sagas are looked for every second, not every minute.
            ("CHORUS_ORPHAN_SWEEP_MS".into(), "1000".into()),
            // Every gift gets its own event (no storm merging), so checker 3 finds each
            // acknowledged order id in the events.
            ("CHORUS_GIFT_EVENTS_PER_SEC".into(), "0".into()),
        ]
    }

    /// (Re)starts shard `i` behind its proxies.
    ///
    /// # Errors
    /// When it does not become ready.
    pub async fn start_shard(&mut self, i: usize) -> anyhow::Result<()> {
        let s = &self.shards[i];
        let mut args = vec![
            "shard".to_owned(),
            "--node-id".into(),
            s.id.clone(),
            "--redis".into(),
            self.redis_proxies[i].redis_url(),
            "--link-addr".into(),
            "127.0.0.1:0".into(),
            "--link-advertise".into(),
            self.link_proxies[i].addr().to_string(),
            "--admin-addr".into(),
            "127.0.0.1:0".into(),
            "--lease-ttl-ms".into(),
            self.ttl.as_millis().to_string(),
        ];
        if self.renew_on_traffic {
            args.push("--test-renew-on-traffic".into());
        }
        let mut env = self.env();
        env.extend(self.shard_env.iter().cloned());
        if s.incarnation == 0 {
            env.extend(self.first_shard_env.iter().cloned());
        }
        let mut node = Node::spawn_with_env(args, env)?;
        let (link, admin) = node.wait_ready(NODE_READY_TIMEOUT).await?;
        self.link_proxies[i].retarget(link);
        let s = &mut self.shards[i];
        s.node = Some(node);
        s.admin = Some(admin);
        s.incarnation += 1;
        s.paused = false;
        Ok(())
    }

    /// (Re)starts gateway `i` behind its front proxy.
    ///
    /// # Errors
    /// When it does not become ready.
    pub async fn start_gateway(&mut self, i: usize) -> anyhow::Result<()> {
        let g = &self.gateways[i];
        let args = vec![
            "gateway".to_owned(),
            "--node-id".into(),
            g.id.clone(),
            "--redis".into(),
            self.redis.url(),
            "--ws-addr".into(),
            "127.0.0.1:0".into(),
            "--admin-addr".into(),
            "127.0.0.1:0".into(),
            "--rate-per-sec".into(),
            "1000".into(),
            "--rate-burst".into(),
            "2000".into(),
        ];
        let mut node = Node::spawn_with_env(args, self.env())?;
        let (ws, admin) = node.wait_ready(NODE_READY_TIMEOUT).await?;
        self.front_proxies[i].retarget(ws);
        let g = &mut self.gateways[i];
        g.node = Some(node);
        g.admin = Some(admin);
        g.incarnation += 1;
        g.paused = false;
        Ok(())
    }

    /// The gateways' WebSocket URLs.
    pub fn urls(&self) -> Vec<String> {
        self.front_proxies
            .iter()
            .map(|p| format!("ws://{}/ws", p.addr()))
            .collect()
    }

    /// SIGKILLs a node (shard when `shard`, else gateway) and keeps its log.
    pub fn kill(&mut self, shard: bool, i: usize) {
        let dir = self.dir.join("nodes");
        // Its port is free now: another process may take it before the restart.
        let s = if shard {
            self.link_proxies[i].retarget(NOWHERE);
            &mut self.shards[i]
        } else {
            self.front_proxies[i].retarget(NOWHERE);
            &mut self.gateways[i]
        };
        if let Some(mut n) = s.node.take() {
            let _ = n.kill9();
            keep_log(&dir, s, &n);
        }
        s.admin = None;
        s.paused = false;
    }

    /// Whether the node's process exited by itself (a test crash switch).
    pub fn exited(&mut self, shard: bool, i: usize) -> bool {
        let s = if shard {
            &mut self.shards[i]
        } else {
            &mut self.gateways[i]
        };
        s.node
            .as_mut()
            .is_some_and(|n| matches!(n.try_status(), Ok(Some(_))))
    }

    /// SIGSTOPs a node.
    pub fn pause(&mut self, shard: bool, i: usize) {
        let s = if shard {
            &mut self.shards[i]
        } else {
            &mut self.gateways[i]
        };
        if let Some(n) = &s.node
            && n.pause().is_ok()
        {
            s.paused = true;
        }
    }

    /// SIGCONTs a node.
    pub fn resume(&mut self, shard: bool, i: usize) {
        let s = if shard {
            &mut self.shards[i]
        } else {
            &mut self.gateways[i]
        };
        if let Some(n) = &s.node {
            let _ = n.resume();
        }
        s.paused = false;
    }

    /// An admin call through the first gateway that answers, bounded by [`ADMIN_TIMEOUT`].
    ///
    /// # Errors
    /// When no gateway answers.
    pub async fn admin(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<kit::admin::AdminResponse> {
        let mut last = anyhow::anyhow!("no gateway up");
        for g in &self.gateways {
            let (Some(addr), false) = (g.admin, g.paused) else {
                continue;
            };
            let call = kit::admin::call(addr, method, path, Some(&self.admin_token), body.clone());
            match tokio::time::timeout(ADMIN_TIMEOUT, call).await {
                Ok(Ok(r)) => return Ok(r),
                Ok(Err(e)) => last = e,
                Err(_) => last = anyhow::anyhow!("{method} {path}: timed out"),
            }
        }
        Err(last)
    }

    /// Heals everything: every proxy, every paused node resumed, every node running.
    ///
    /// # Errors
    /// When a node cannot be restarted.
    pub async fn heal_all(&mut self) -> anyhow::Result<()> {
        for p in self.redis_proxies.iter().chain(&self.link_proxies) {
            p.heal();
        }
        for i in 0..self.shards.len() {
            if self.shards[i].paused {
                self.resume(true, i);
            }
            if self.exited(true, i) {
                self.kill(true, i);
            }
            if self.shards[i].node.is_none() {
                self.start_shard(i).await?;
            }
        }
        for i in 0..self.gateways.len() {
            if self.gateways[i].paused {
                self.resume(false, i);
            }
            if self.exited(false, i) {
                self.kill(false, i);
            }
            if self.gateways[i].node.is_none() {
                self.start_gateway(i).await?;
            }
        }
        Ok(())
    }

    /// Stops every node and copies every log into `DIR/nodes/`.
    pub fn stop_all(&mut self) {
        for i in 0..self.shards.len() {
            self.kill(true, i);
        }
        for i in 0..self.gateways.len() {
            self.kill(false, i);
        }
    }

    /// Copies the logs of running nodes into `DIR/nodes/` (the files keep growing after).
    pub fn snapshot_logs(&self) {
        let dir = self.dir.join("nodes");
        for s in self.shards.iter().chain(&self.gateways) {
            if let Some(n) = &s.node {
                keep_log(&dir, s, n);
            }
        }
    }
}

/// Where a proxy points before its node first starts: nothing listens on port 1 of loopback,
/// so a client connecting that early is refused.
const NOWHERE: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    1,
));

fn slot(id: String) -> Slot {
    Slot {
        id,
        node: None,
        admin: None,
        incarnation: 0,
        paused: false,
    }
}

fn keep_log(dir: &Path, s: &Slot, n: &Node) {
    let to = dir.join(format!("{}-{}.log", s.id, s.incarnation));
    let _ = std::fs::copy(n.log_path(), to);
}

impl Drop for ChaosCluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}
