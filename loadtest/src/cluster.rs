//! Real processes for tests: a `redis-server` and `chorus` nodes on free loopback ports.
//!
//! Every guard kills its process on drop, so a failing test leaves nothing running. Faults are
//! made with signals: SIGKILL ([`Node::kill9`]), SIGSTOP/SIGCONT (`pause`/`resume`) and SIGTERM
//! ([`Node::terminate`]), sent through the system `kill` command (no `unsafe`, no libc).
//! Readiness is polled against a bounded deadline; nothing here sleeps blindly.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long a fresh `redis-server` may take to answer PING: it starts in milliseconds, but CI
/// machines are shared and a debug build of the tests may compete for the two cores.
pub const REDIS_READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause between readiness probes: short enough to add little to each test, long enough not to
/// spin a core while the server starts.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// How long one PING probe may take before it counts as "not ready yet".
const PING_TIMEOUT: Duration = Duration::from_millis(500);

/// Tries at starting redis-server on a fresh free port: another process may grab the port
/// between [`free_port`] releasing it and redis-server binding it.
const REDIS_START_ATTEMPTS: u32 = 3;

/// How long [`Node::terminate`] callers typically allow for a graceful drain before SIGKILL.
pub const NODE_EXIT_TIMEOUT: Duration = Duration::from_secs(15);

/// The redis-server binary, found on `PATH` unless `REDIS_SERVER_BIN` names another.
fn redis_server_bin() -> PathBuf {
    std::env::var_os("REDIS_SERVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("redis-server"))
}

/// A free TCP port on 127.0.0.1: binds port 0, reads the port the kernel chose, releases it.
///
/// # Errors
/// When no loopback socket can be bound.
pub fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Sends `signal` (e.g. `"STOP"`) to `pid` with the system `kill` command.
fn send_signal(pid: u32, signal: &str) -> io::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "kill -{signal} {pid} failed: {status}"
        )))
    }
}

/// Sends SIGSTOP to `pid` and returns once every thread of it is stopped: kill(2) returns
/// as soon as the signal is queued, and until the kernel completes the group stop the
/// process's other threads keep running (on a busy machine for milliseconds), so a request
/// sent right after the `kill` could still be served.
fn stop_and_wait(pid: u32) -> io::Result<()> {
    send_signal(pid, "STOP")?;
    let deadline = Instant::now() + STOP_TIMEOUT;
    while !all_threads_stopped(pid)? {
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("process {pid} did not stop within {STOP_TIMEOUT:?}"),
            ));
        }
        // Usually a few microseconds to a few milliseconds: spin politely rather than block
        // a runtime thread in a sleep.
        std::thread::yield_now();
    }
    Ok(())
}

/// Longest [`stop_and_wait`] waits for the group stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether every thread of `pid` is in state `T` (stopped) in `/proc/<pid>/task/*/stat`.
fn all_threads_stopped(pid: u32) -> io::Result<bool> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        // A thread that exits meanwhile is not running either.
        let Ok(stat) = std::fs::read_to_string(task?.path().join("stat")) else {
            continue;
        };
        // `tid (comm) S ...`: the state follows the last ')' (comm may hold one).
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        if state != Some('T') {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A unique log file path in the system temp dir for process `name`.
fn log_file_path(name: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("chorus-{name}-{}-{n}.log", std::process::id()))
}

/// Kills and reaps `child`, ignoring a process that already exited.
fn kill_and_reap(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        // SIGKILL also ends a SIGSTOPped process.
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// Sends `request` to the Redis server on `port` over a fresh connection and reads the first
/// `N` bytes of its answer, all within [`PING_TIMEOUT`].
async fn ask<const N: usize>(port: u16, request: &[u8]) -> io::Result<[u8; N]> {
    in_time(async {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
        stream.write_all(request).await?;
        let mut buf = [0u8; N];
        stream.read_exact(&mut buf).await?;
        Ok(buf)
    })
    .await
}

/// `exchange` with a Redis server, given up after [`PING_TIMEOUT`].
async fn in_time<T>(exchange: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    tokio::time::timeout(PING_TIMEOUT, exchange)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "redis-server did not answer"))?
}

/// Whether a Redis server answers `PING` on `port` within [`PING_TIMEOUT`].
async fn answers_ping(port: u16) -> bool {
    matches!(ask(port, b"PING\r\n").await, Ok(answer) if &answer == b"+PONG\r\n")
}

/// A real `redis-server` on a free 127.0.0.1 port, with no persistence; killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    log: PathBuf,
}

impl RedisServer {
    /// Starts `redis-server` on a free port and waits until it answers PING.
    ///
    /// # Errors
    /// When the binary cannot be run, or the server does not answer within
    /// [`REDIS_READY_TIMEOUT`] after [`REDIS_START_ATTEMPTS`] ports.
    pub async fn start() -> io::Result<Self> {
        let mut last_err = io::Error::other("redis-server was not started");
        for _ in 0..REDIS_START_ATTEMPTS {
            let port = free_port()?;
            let mut server = Self {
                child: None,
                port,
                log: log_file_path(&format!("redis-{port}")),
            };
            match server.spawn_and_wait().await {
                Ok(()) => return Ok(server),
                Err(e) => last_err = e,
            }
        }
        Err(last_err)
    }

    /// The URL clients connect with, e.g. `redis://127.0.0.1:6390/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port the server listens on (kept across [`RedisServer::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The process id of the running server, if any.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server (all data is lost: no persistence) and starts a new one on the same port.
    ///
    /// # Errors
    /// When the new server does not answer PING within [`REDIS_READY_TIMEOUT`].
    pub async fn restart(&mut self) -> io::Result<()> {
        self.stop();
        self.spawn_and_wait().await
    }

    /// Kills the server without starting a new one; [`RedisServer::restart`] brings it back.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }

    /// Freezes the server with SIGSTOP: connections stay open but nothing is answered.
    ///
    /// # Errors
    /// When the server is not running or the signal cannot be sent.
    pub fn pause(&self) -> io::Result<()> {
        stop_and_wait(self.running_pid()?)
    }

    /// Thaws a server frozen by [`RedisServer::pause`] with SIGCONT.
    ///
    /// # Errors
    /// When the server is not running or the signal cannot be sent.
    pub fn resume(&self) -> io::Result<()> {
        send_signal(self.running_pid()?, "CONT")
    }

    /// `CONFIG SET name value` on the running server, e.g. `maxmemory 1` to make it refuse
    /// every write that needs memory (OOM) while reads and expiry changes go on.
    ///
    /// # Errors
    /// When the server cannot be reached within [`PING_TIMEOUT`] or does not answer `+OK`.
    pub async fn config_set(&self, name: &str, value: &str) -> io::Result<()> {
        let command = format!(
            "*4\r\n$6\r\nCONFIG\r\n$3\r\nSET\r\n${}\r\n{name}\r\n${}\r\n{value}\r\n",
            name.len(),
            value.len()
        );
        let answer: [u8; 5] = ask(self.port, command.as_bytes()).await?;
        if &answer == b"+OK\r\n" {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "CONFIG SET {name} {value}: {}",
                String::from_utf8_lossy(&answer)
            )))
        }
    }

    /// Runs a command whose answer is an integer (e.g. `SCARD key`) and returns it.
    ///
    /// # Errors
    /// When the server cannot be reached within [`PING_TIMEOUT`] or answers anything else.
    pub async fn integer(&self, args: &[&str]) -> io::Result<i64> {
        let mut request = format!("*{}\r\n", args.len());
        for a in args {
            request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        let line = in_time(async {
            let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).await?;
            stream.write_all(request.as_bytes()).await?;
            let mut line = String::new();
            BufReader::new(stream).read_line(&mut line).await?;
            Ok(line)
        })
        .await?;
        line.strip_prefix(':')
            .and_then(|n| n.trim_end().parse().ok())
            .ok_or_else(|| io::Error::other(format!("{args:?}: {}", line.trim_end())))
    }

    fn running_pid(&self) -> io::Result<u32> {
        self.pid()
            .ok_or_else(|| io::Error::other("redis-server is not running"))
    }

    async fn spawn_and_wait(&mut self) -> io::Result<()> {
        let log = std::fs::File::create(&self.log)?;
        let child = Command::new(redis_server_bin())
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--dir", &std::env::temp_dir().to_string_lossy()])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        let deadline = Instant::now() + REDIS_READY_TIMEOUT;
        loop {
            if answers_ping(self.port).await {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                self.child = None;
                return Err(io::Error::other(format!(
                    "redis-server on port {} exited with {status}; log: {}",
                    self.port,
                    self.log.display()
                )));
            }
            if Instant::now() >= deadline {
                self.stop();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("redis-server on port {} did not answer PING", self.port),
                ));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// The `chorus` binary: `CHORUS_BIN`, else `$CARGO_TARGET_DIR/debug/chorus`, else
/// `<workspace>/target/debug/chorus`.
pub fn chorus_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("CHORUS_BIN") {
        return PathBuf::from(bin);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
        });
    target.join("debug").join("chorus")
}

/// A running `chorus` node process; its stdout and stderr go to a log file; killed on drop.
///
/// The log file is removed on drop unless the thread is panicking (a failing test keeps it).
#[derive(Debug)]
pub struct Node {
    child: Child,
    log: PathBuf,
}

impl Node {
    /// Spawns [`chorus_bin`] with `args`, logging to a fresh temp file.
    ///
    /// Readiness (a port answering) is the caller's to wait for: it depends on the role.
    ///
    /// # Errors
    /// When the binary cannot be started.
    pub fn spawn<I, S>(args: I) -> io::Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        Self::spawn_with_env(args, std::iter::empty::<(&str, &str)>())
    }

    /// Like [`Node::spawn`], with extra environment variables.
    ///
    /// # Errors
    /// When the binary cannot be started.
    pub fn spawn_with_env<I, S, E, K, V>(args: I, env: E) -> io::Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
        E: IntoIterator<Item = (K, V)>,
        K: AsRef<std::ffi::OsStr>,
        V: AsRef<std::ffi::OsStr>,
    {
        let bin = chorus_bin();
        let log = log_file_path("node");
        let file = std::fs::File::create(&log)?;
        let child = Command::new(&bin)
            .args(args)
            .envs(env)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", bin.display())))?;
        Ok(Self { child, log })
    }

    /// Spawns `chorus standalone` on ports the OS picks, with its data in `data_dir`, `extra`
    /// arguments and `env`, and waits until it serves ([`NODE_READY_TIMEOUT`]); returns the
    /// node and its WebSocket and admin addresses.
    ///
    /// # Errors
    /// When the binary cannot be started or does not get ready in time.
    pub async fn spawn_standalone<E, K, V>(
        data_dir: &Path,
        extra: &[&str],
        env: E,
    ) -> io::Result<(Self, SocketAddr, SocketAddr)>
    where
        E: IntoIterator<Item = (K, V)>,
        K: AsRef<std::ffi::OsStr>,
        V: AsRef<std::ffi::OsStr>,
    {
        let mut args: Vec<std::ffi::OsString> = [
            "standalone",
            "--ws-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
            "--data-dir",
        ]
        .iter()
        .map(Into::into)
        .collect();
        args.push(data_dir.into());
        args.extend(extra.iter().map(Into::into));
        let node = Self::spawn_with_env(args, env)?;
        let (ws, admin) = node.wait_ready(NODE_READY_TIMEOUT).await?;
        Ok((node, ws, admin))
    }

    /// The node's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where the node's stdout and stderr go.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The node's output so far (lossy UTF-8).
    ///
    /// # Errors
    /// When the log file cannot be read.
    pub fn log(&self) -> io::Result<String> {
        Ok(String::from_utf8_lossy(&std::fs::read(&self.log)?).into_owned())
    }

    /// Waits for the node's `CHORUS_READY ws=<addr> admin=<addr>` line (nodes started on port
    /// 0 print the addresses they bound) and returns `(ws or link address, admin address)`.
    ///
    /// # Errors
    /// When the line does not appear within `timeout` (the node failed to start: see its log).
    pub async fn wait_ready(&self, timeout: Duration) -> io::Result<(SocketAddr, SocketAddr)> {
        let deadline = Instant::now() + timeout;
        loop {
            let log = self.log()?;
            if let Some(line) = log.lines().find(|l| l.starts_with("CHORUS_READY ")) {
                let field = |k: &str| {
                    line.split_whitespace()
                        .find_map(|f| f.strip_prefix(k))
                        .and_then(|v| v.parse::<SocketAddr>().ok())
                };
                if let (Some(ws), Some(admin)) = (field("ws="), field("admin=")) {
                    return Ok((ws, admin));
                }
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "node never became ready; log: {}",
                        self.log_path().display()
                    ),
                ));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// SIGKILL: the node dies at once, without draining; then reaps it.
    ///
    /// # Errors
    /// When the signal cannot be sent.
    pub fn kill9(&mut self) -> io::Result<()> {
        if self.child.try_wait()?.is_none() {
            self.child.kill()?;
        }
        self.child.wait().map(|_| ())
    }

    /// SIGSTOP: freezes the node (a "long GC pause"); its sockets stay open. Returns once
    /// every thread of the node is stopped.
    ///
    /// # Errors
    /// When the signal cannot be sent or the node does not stop.
    pub fn pause(&self) -> io::Result<()> {
        stop_and_wait(self.pid())
    }

    /// SIGCONT: thaws a node frozen by [`Node::pause`].
    ///
    /// # Errors
    /// When the signal cannot be sent.
    pub fn resume(&self) -> io::Result<()> {
        send_signal(self.pid(), "CONT")
    }

    /// SIGTERM: asks the node to drain and exit; see [`Node::wait_exit`].
    ///
    /// # Errors
    /// When the signal cannot be sent.
    pub fn terminate(&self) -> io::Result<()> {
        send_signal(self.pid(), "TERM")
    }

    /// Whether the process has exited, and how (non-blocking).
    ///
    /// # Errors
    /// When the process status cannot be read.
    pub fn try_status(&mut self) -> io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// Waits up to `timeout` for the node to exit; `None` if it is still running.
    ///
    /// # Errors
    /// When the process status cannot be read.
    pub async fn wait_exit(&mut self, timeout: Duration) -> io::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child);
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn redis_server_starts_pauses_restarts_and_dies_on_drop() {
        let mut redis = RedisServer::start().await.unwrap();
        let port = redis.port();
        assert!(answers_ping(port).await);
        assert_eq!(redis.url(), format!("redis://127.0.0.1:{port}/"));

        redis.pause().unwrap();
        // `pause` returns once every thread has stopped, not once the signal is queued.
        let pid = redis.pid().unwrap();
        assert!(all_threads_stopped(pid).unwrap());
        assert!(
            !answers_ping(port).await,
            "a stopped server must not answer"
        );
        redis.resume().unwrap();
        assert!(answers_ping(port).await);
        assert!(!all_threads_stopped(pid).unwrap());

        let old_pid = redis.pid().unwrap();
        redis.restart().await.unwrap();
        assert_eq!(redis.port(), port);
        assert_ne!(redis.pid().unwrap(), old_pid);
        assert!(answers_ping(port).await);

        drop(redis);
        assert!(
            !answers_ping(port).await,
            "the server must die with its guard"
        );
    }

    #[test]
    fn free_port_is_bindable() {
        let port = free_port().unwrap();
        assert_ne!(port, 0);
        TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
    }

    #[test]
    fn chorus_bin_honours_the_env_override_shape() {
        // Without CHORUS_BIN the default ends in debug/chorus.
        if std::env::var_os("CHORUS_BIN").is_none() {
            assert!(chorus_bin().ends_with("debug/chorus"));
        }
    }
}

/// Distinguishes the clusters one test process starts.
static CLUSTER_SEQ: AtomicU64 = AtomicU64::new(0);

/// How long a node may take to open its admin port after spawning.
pub const NODE_READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Waits until something accepts TCP connections on `addr`.
///
/// # Errors
/// When nothing listens there before `timeout`.
pub async fn wait_listening(addr: SocketAddr, timeout: Duration) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("nothing listening on {addr}"),
            ));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

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
        let node = Node::spawn_with_env(args, self.env())?;
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
        let node = Node::spawn_with_env(args, self.env())?;
        let (ws, admin) = node.wait_ready(NODE_READY_TIMEOUT).await?;
        Ok(GatewayNode {
            id: id.to_owned(),
            node,
            admin,
            url: format!("ws://{ws}/ws"),
        })
    }

    /// The ledger every node shares: one SQLite file (WAL, multi-process) in a temp dir.
    pub fn ledger_url(&self) -> String {
        format!("sqlite://{}", self.data_dir.join("ledger.db").display())
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
        let token = self.token(user)?;
        let url = &self
            .gateways
            .get(g)
            .ok_or_else(|| anyhow::anyhow!("no gateway {g}"))?
            .url;
        Ok(crate::client::connect(url, Some(&token)).await?)
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
