//! What a run measures: a [`Target`] (URLs, server pids, admin access), either given on the
//! command line or spawned by the harness (standalone `chorus`, a cluster, or the baseline).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::cluster::{Cluster, ClusterOptions};
use crate::node::{self, NODE_READY_TIMEOUT, free_port};

/// A process the harness started; killed (and its data dir removed) on drop.
#[derive(Debug)]
pub struct Spawned {
    child: Child,
    data_dir: Option<PathBuf>,
    log: PathBuf,
}

impl Spawned {
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
    /// Admin address (gifts).
    pub admin: Option<SocketAddr>,
    /// Admin bearer token.
    pub admin_token: Option<String>,
    /// JWT secret (`None`: connect without a token).
    pub secret: Option<Vec<u8>>,
    /// Keeps spawned processes alive.
    pub guard: Guard,
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
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

/// A fresh data dir for a spawned server, removed with it.
fn data_dir(name: &str, port: u16) -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "chorus-loadtest-{name}{}-{port}",
        std::process::id()
    ));
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

/// Spawns `chorus standalone` on free ports with a temp data dir and high rate limits.
///
/// # Errors
/// The binary cannot start or does not listen in time.
pub async fn spawn_standalone(
    secret: &[u8],
    admin_token: &str,
    pin: bool,
) -> anyhow::Result<Target> {
    let ws = loopback(free_port()?);
    let admin = loopback(free_port()?);
    let data_dir = data_dir("", ws.port())?;
    let bin = node::chorus_bin();
    let spawned = spawn_logged(
        command(&bin, pin)
            .arg("standalone")
            .args(["--ws-addr", &ws.to_string()])
            .args(["--admin-addr", &admin.to_string()])
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--rate-per-sec", "100000", "--rate-burst", "100000"])
            // The benchmarks time every gift's own event: no storm merging.
            .env("CHORUS_GIFT_EVENTS_PER_SEC", "0")
            .env(
                "CHORUS_JWT_SECRET",
                String::from_utf8_lossy(secret).as_ref(),
            )
            .env("CHORUS_ADMIN_TOKEN", admin_token)
            .env("CHORUS_LOG", "warn"),
        &bin,
        &format!("chorus-{}", ws.port()),
        Some(data_dir),
    )?;
    node::wait_listening(ws, NODE_READY_TIMEOUT).await?;
    node::wait_listening(admin, NODE_READY_TIMEOUT).await?;
    Ok(Target {
        name: "chorus".into(),
        urls: vec![format!("ws://{ws}/ws")],
        pids: vec![spawned.pid()],
        admin: Some(admin),
        admin_token: Some(admin_token.to_owned()),
        secret: Some(secret.to_vec()),
        guard: Guard::Process(spawned),
    })
}

/// Spawns this executable's `baseline-server` on a free port. With `ledger_secret` it also
/// keeps a gift ledger in a temp dir, an admin port, and users from tokens signed with it
/// (the `gifts` scenario).
///
/// # Errors
/// It cannot start or does not listen in time.
pub async fn spawn_baseline(pin: bool, ledger_secret: Option<&[u8]>) -> anyhow::Result<Target> {
    let exe = std::env::current_exe()?;
    let addr = loopback(free_port()?);
    let mut cmd = command(&exe, pin);
    cmd.args(["baseline-server", "--addr", &addr.to_string()])
        .env_remove("CHORUS_JWT_SECRET");
    let mut ledger = None;
    if let Some(secret) = ledger_secret {
        let admin = loopback(free_port()?);
        let dir = data_dir("baseline-", addr.port())?;
        cmd.arg("--ledger")
            .arg(dir.join("ledger.db"))
            .args(["--admin-addr", &admin.to_string()])
            .env(
                "CHORUS_JWT_SECRET",
                String::from_utf8_lossy(secret).as_ref(),
            );
        ledger = Some((dir, admin, secret.to_vec()));
    }
    let spawned = spawn_logged(
        &mut cmd,
        &exe,
        &format!("baseline-{}", addr.port()),
        ledger.as_ref().map(|(d, _, _)| d.clone()),
    )?;
    node::wait_listening(addr, NODE_READY_TIMEOUT).await?;
    if let Some((_, admin, _)) = &ledger {
        node::wait_listening(*admin, NODE_READY_TIMEOUT).await?;
    }
    Ok(Target {
        name: "baseline".into(),
        urls: vec![format!("ws://{addr}/ws")],
        pids: vec![spawned.pid()],
        admin: ledger.as_ref().map(|(_, a, _)| *a),
        admin_token: None,
        secret: ledger.map(|(_, _, s)| s),
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
    let mut pids: Vec<u32> = c.gateways.iter().map(|g| g.node.pid()).collect();
    pids.extend(c.shards.iter().map(|s| s.node.pid()));
    pids.extend(c.redis.pid());
    if pin {
        for p in &pids {
            pin_pid(*p)?;
        }
    }
    Ok(Target {
        name: format!("chorus-cluster-{gateways}x{shards}"),
        urls: c.gateways.iter().map(|g| g.url.clone()).collect(),
        pids,
        admin: c.gateways.first().map(|g| g.admin),
        admin_token: Some(c.admin_token.clone()),
        secret: Some(c.secret.clone()),
        guard: Guard::Cluster(Box::new(c)),
    })
}
