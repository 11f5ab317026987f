//! What a run measures: a [`Target`] (URLs, server pids, admin access), either given on the
//! command line or spawned by the harness (standalone `chorus`, a cluster, or the baseline).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::cluster::{Cluster, ClusterOptions};
use crate::node::{self, NODE_READY_TIMEOUT};

/// A process the harness started; killed (and its data dir removed) on drop.
#[derive(Debug)]
pub struct Spawned {
    child: Child,
    data_dir: Option<PathBuf>,
    log: PathBuf,
}

impl Spawned {
    /// Waits for the first log line starting with `prefix` and returns the rest of it: the
    /// servers print the addresses they bound on port 0.
    ///
    /// # Errors
    /// The process exits first, or no such line appears within `timeout`.
    async fn line_after(&mut self, prefix: &str, timeout: Duration) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let log = String::from_utf8_lossy(&std::fs::read(&self.log)?).into_owned();
            if let Some(rest) = log.lines().find_map(|l| l.strip_prefix(prefix)) {
                return Ok(rest.to_owned());
            }
            if let Some(status) = self.child.try_wait()? {
                anyhow::bail!("the server exited with {status} before it was ready:\n{log}");
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the server was not ready within {timeout:?}; log: {}",
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Its pid (under `taskset` too: taskset execs the command).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its log file.
    pub fn log(&self) -> &std::path::Path {
        &self.log
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(d) = &self.data_dir {
            let _ = std::fs::remove_dir_all(d);
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Keeps whatever a target needs alive.
#[derive(Debug)]
pub enum Guard {
    /// Nothing (an external server).
    None,
    /// A spawned process.
    Process(Spawned),
    /// A spawned cluster.
    Cluster(Box<Cluster>),
}

/// A server under test.
#[derive(Debug)]
pub struct Target {
    /// `chorus`, `chorus-cluster`, `baseline`.
    pub name: String,
    /// WebSocket URLs; connections are spread over them round-robin.
    pub urls: Vec<String>,
    /// Server process ids (CPU and RSS are summed over them).
    pub pids: Vec<u32>,
    /// A spawned cluster's process ids by part, for CPU per part (`None` for one process).
    pub parts: Option<ClusterPids>,
    /// Admin address (gifts).
    pub admin: Option<SocketAddr>,
    /// Admin bearer token.
    pub admin_token: Option<String>,
    /// JWT secret (`None`: connect without a token).
    pub secret: Option<Vec<u8>>,
    /// Keeps spawned processes alive.
    pub guard: Guard,
}

/// A spawned cluster's process ids by part.
#[derive(Clone, Debug, Default)]
pub struct ClusterPids {
    /// The gateways'.
    pub gateways: Vec<u32>,
    /// The shards'.
    pub shards: Vec<u32>,
    /// Redis'.
    pub redis: Vec<u32>,
}

fn command(bin: &std::path::Path, pin: bool) -> Command {
    if pin {
        let mut c = Command::new("taskset");
        c.args(["-c", "0"]).arg(bin);
        c
    } else {
        Command::new(bin)
    }
}

fn log_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("chorus-loadtest-{name}-{}.log", std::process::id()))
}

/// The rocket of `--economy` runs: a level every 1,000 coins (100 roses), paying its top three
/// contributors and four members present; `rocket.progress` at most twice a second per room.
pub const ECONOMY_CONFIG: &str = "rocket_progress_ms = 500

[[rocket_levels]]
fuel = 1000
top = [300, 200, 100]
present = 4
present_coins = 50
";

/// A number naming the files of one spawned server (unique in this process).
fn next_spawn() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The address in `field=<addr>` among the words of `line`.
fn addr_field(line: &str, field: &str) -> anyhow::Result<SocketAddr> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(field))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no {field}<address> in {line:?}"))
}

/// A fresh data dir for a spawned server, removed with it.
fn data_dir(name: &str, n: u64) -> std::io::Result<PathBuf> {
    let dir =
        std::env::temp_dir().join(format!("chorus-loadtest-{name}{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Spawns `cmd` (running `bin`) with its output in the log `log_name` and no input; the
/// process and `data_dir` go when the returned [`Spawned`] is dropped.
fn spawn_logged(
    cmd: &mut Command,
    bin: &std::path::Path,
    log_name: &str,
    data_dir: Option<PathBuf>,
) -> anyhow::Result<Spawned> {
    let log = log_path(log_name);
    let file = std::fs::File::create(&log)?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .map_err(|e| anyhow::anyhow!("{}: {e}", bin.display()))?;
    Ok(Spawned {
        child,
        data_dir,
        log,
    })
}

/// Pins every thread of `pid` to CPU 0 (`taskset -a -pc 0 <pid>`).
///
/// # Errors
/// taskset failed.
pub fn pin_pid(pid: u32) -> anyhow::Result<()> {
    let st = Command::new("taskset")
        .args(["-a", "-pc", "0", &pid.to_string()])
        .stdout(Stdio::null())
        .status()?;
    anyhow::ensure!(st.success(), "taskset -a -pc 0 {pid} failed");
    Ok(())
}

/// Spawns `chorus standalone` on free ports with a temp data dir and high rate limits. Without
/// `economy` every gift gets its own event (no storm merging: the benchmarks time each gift's
/// event); with it the node runs the room economy as configured for production: storm
/// coalescing at its default budget and the rocket of [`ECONOMY_CONFIG`].
///
/// # Errors
/// The binary cannot start or does not listen in time.
pub async fn spawn_standalone(
    secret: &[u8],
    admin_token: &str,
    pin: bool,
    economy: bool,
) -> anyhow::Result<Target> {
    let n = next_spawn();
    let data_dir = data_dir("", n)?;
    let bin = node::chorus_bin();
    let mut cmd = command(&bin, pin);
    cmd.arg("standalone")
        .args(["--ws-addr", "127.0.0.1:0"])
        .args(["--admin-addr", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(&data_dir)
        .args(["--rate-per-sec", "100000", "--rate-burst", "100000"])
        .env(
            "CHORUS_JWT_SECRET",
            String::from_utf8_lossy(secret).as_ref(),
        )
        .env("CHORUS_ADMIN_TOKEN", admin_token)
        .env("CHORUS_LOG", "warn");
    if economy {
        let config = data_dir.join("economy.toml");
        std::fs::write(&config, ECONOMY_CONFIG)?;
        cmd.arg("--config").arg(config);
    } else {
        cmd.env("CHORUS_GIFT_EVENTS_PER_SEC", "0");
    }
    let mut spawned = spawn_logged(&mut cmd, &bin, &format!("chorus-{n}"), Some(data_dir))?;
    // Ports picked by the node itself: none can be taken between a pick and the bind.
    let ready = spawned
        .line_after("CHORUS_READY ", NODE_READY_TIMEOUT)
        .await?;
    let (ws, admin) = (addr_field(&ready, "ws=")?, addr_field(&ready, "admin=")?);
    Ok(Target {
        name: "chorus".into(),
        urls: vec![format!("ws://{ws}/ws")],
        pids: vec![spawned.pid()],
        parts: None,
        admin: Some(admin),
        admin_token: Some(admin_token.to_owned()),
        secret: Some(secret.to_vec()),
        guard: Guard::Process(spawned),
    })
}

/// The baseline server's start-up lines (see `baseline::run`).
const WS_LINE: &str = "baseline-server listening on ws://";
const ADMIN_LINE: &str = "baseline-server admin on http://";

/// Spawns this executable's `baseline-server` on a free port. With `ledger_secret` it also
/// keeps a gift ledger in a temp dir, an admin port, and users from tokens signed with it
/// (the `gifts` scenario).
///
/// # Errors
/// It cannot start or does not listen in time.
pub async fn spawn_baseline(pin: bool, ledger_secret: Option<&[u8]>) -> anyhow::Result<Target> {
    spawn_baseline_server(pin, ledger_secret, false).await
}

/// Spawns this executable's `baseline-server --bare` (see `baseline::bare`) on a free port:
/// the plain broadcast server `rooms` and `fanout` compare against.
///
/// # Errors
/// It cannot start or does not listen in time.
pub async fn spawn_bare_baseline(pin: bool) -> anyhow::Result<Target> {
    spawn_baseline_server(pin, None, true).await
}

async fn spawn_baseline_server(
    pin: bool,
    ledger_secret: Option<&[u8]>,
    bare: bool,
) -> anyhow::Result<Target> {
    let exe = std::env::current_exe()?;
    let n = next_spawn();
    let mut cmd = command(&exe, pin);
    cmd.args(["baseline-server", "--addr", "127.0.0.1:0"])
        .env_remove("CHORUS_JWT_SECRET");
    if bare {
        cmd.arg("--bare");
    }
    let mut ledger = None;
    if let Some(secret) = ledger_secret {
        let dir = data_dir("baseline-", n)?;
        cmd.arg("--ledger")
            .arg(dir.join("ledger.db"))
            .args(["--admin-addr", "127.0.0.1:0"])
            .env(
                "CHORUS_JWT_SECRET",
                String::from_utf8_lossy(secret).as_ref(),
            );
        ledger = Some((dir, secret.to_vec()));
    }
    let mut spawned = spawn_logged(
        &mut cmd,
        &exe,
        &format!("baseline-{n}"),
        ledger.as_ref().map(|(d, _)| d.clone()),
    )?;
    // The server prints what it bound on port 0 (the admin line, when any, comes first).
    let admin = match &ledger {
        Some(_) => {
            let a = spawned.line_after(ADMIN_LINE, NODE_READY_TIMEOUT).await?;
            Some(a.trim().parse::<SocketAddr>()?)
        }
        None => None,
    };
    let ws = spawned.line_after(WS_LINE, NODE_READY_TIMEOUT).await?;
    let addr: SocketAddr = ws.trim().trim_end_matches("/ws").parse()?;
    Ok(Target {
        name: "baseline".into(),
        urls: vec![format!("ws://{addr}/ws")],
        pids: vec![spawned.pid()],
        parts: None,
        admin,
        admin_token: None,
        secret: ledger.map(|(_, s)| s),
        guard: Guard::Process(spawned),
    })
}

/// Spawns `gateways` × `shards` (plus one redis-server) through [`Cluster::start`].
///
/// # Errors
/// The cluster does not start.
pub async fn spawn_cluster(gateways: usize, shards: usize, pin: bool) -> anyhow::Result<Target> {
    let c = Cluster::start(ClusterOptions {
        gateways,
        shards,
        lease_ttl: Duration::from_secs(10),
        renew_on_traffic: false,
        env: vec![
            ("CHORUS_LOG".into(), "warn".into()),
            // The benchmarks time every gift's own event: no storm merging.
            ("CHORUS_GIFT_EVENTS_PER_SEC".into(), "0".into()),
        ],
    })
    .await?;
    let parts = ClusterPids {
        gateways: c.gateways.iter().map(|g| g.node.pid()).collect(),
        shards: c.shards.iter().map(|s| s.node.pid()).collect(),
        redis: c.redis.pid().into_iter().collect(),
    };
    let pids = [&parts.gateways, &parts.shards, &parts.redis]
        .into_iter()
        .flatten()
        .copied()
        .collect::<Vec<u32>>();
    if pin {
        for p in &pids {
            pin_pid(*p)?;
        }
    }
    Ok(Target {
        name: format!("chorus-cluster-{gateways}x{shards}"),
        urls: c.gateways.iter().map(|g| g.url.clone()).collect(),
        pids,
        parts: Some(parts),
        admin: c.gateways.first().map(|g| g.admin),
        admin_token: Some(c.admin_token.clone()),
        secret: Some(c.secret.clone()),
        guard: Guard::Cluster(Box::new(c)),
    })
}
