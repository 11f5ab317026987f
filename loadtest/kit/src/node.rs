//! Real `chorus` node processes for tests, and the process plumbing they share with
//! `redis.rs`: free loopback ports, signals, log files, readiness polls.
//!
//! Every guard kills its process on drop, so a failing test leaves nothing running. Faults are
//! made with signals: SIGKILL ([`Node::kill9`]), SIGSTOP/SIGCONT (`pause`/`resume`) and SIGTERM
//! ([`Node::terminate`]), sent through the system `kill` command (no `unsafe`, no libc).
//! Readiness is polled against a bounded deadline; nothing here sleeps blindly.

use std::ffi::OsString;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

/// Pause between readiness probes: short enough to add little to each test, long enough not to
/// spin a core while the server starts.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Polls `ready` (given the server's pid) until it answers true for the server process
/// `child` just started (`what`, e.g. "redis-server on port 6400", logging to `log`), for at
/// most `within`.
///
/// # Errors
/// The server exited first (the error names its log; `child` is cleared), or time ran out
/// (`TimedOut`; the caller stops the server).
pub(crate) async fn await_ready<F, Fut>(
    child: &mut Option<Child>,
    what: &str,
    log: &Path,
    within: Duration,
    mut ready: F,
) -> io::Result<()>
where
    F: FnMut(Option<u32>) -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if ready(child.as_ref().map(Child::id)).await {
            return Ok(());
        }
        if let Some(c) = child.as_mut()
            && let Some(status) = c.try_wait()?
        {
            *child = None;
            return Err(io::Error::other(format!(
                "{what} exited with {status}; log: {}",
                log.display()
            )));
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{what} did not become ready"),
            ));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// How long [`Node::terminate`] callers typically allow for a graceful drain before SIGKILL.
pub const NODE_EXIT_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a node may take to open its admin port after spawning.
pub const NODE_READY_TIMEOUT: Duration = Duration::from_secs(20);

/// How many lines of a node's log a start-up error quotes.
const LOG_TAIL_LINES: usize = 12;

/// The last `n` lines of `log`, without backtrace frames (they bury the cause).
fn log_tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !(t.starts_with("at ")
                || t.split_once(": ")
                    .is_some_and(|(k, _)| k.parse::<u32>().is_ok()))
        })
        .collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

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

/// A free TCP port on 127.0.0.1: binds port 0, reads the port the kernel chose, releases it.
///
/// # Errors
/// When no loopback socket can be bound.
pub fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Sends `signal` (e.g. `"STOP"`) to `pid` with the system `kill` command.
pub(crate) fn send_signal(pid: u32, signal: &str) -> io::Result<()> {
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
pub(crate) fn stop_and_wait(pid: u32) -> io::Result<()> {
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
pub(crate) fn all_threads_stopped(pid: u32) -> io::Result<bool> {
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
pub(crate) fn log_file_path(name: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("chorus-{name}-{}-{n}.log", std::process::id()))
}

/// Kills and reaps `child`, ignoring a process that already exited.
pub(crate) fn kill_and_reap(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        // SIGKILL also ends a SIGSTOPped process.
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// The `chorus` binary: `CHORUS_BIN`, else `$CARGO_TARGET_DIR/debug/chorus`, else
/// `<workspace>/target/debug/chorus` (this crate lives in `<workspace>/loadtest/kit`).
pub fn chorus_bin() -> PathBuf {
    chorus_bin_from(
        std::env::var_os("CHORUS_BIN"),
        std::env::var_os("CARGO_TARGET_DIR"),
    )
}

/// [`chorus_bin`] given the values of `CHORUS_BIN` and `CARGO_TARGET_DIR`.
fn chorus_bin_from(chorus_bin: Option<OsString>, target_dir: Option<OsString>) -> PathBuf {
    if let Some(bin) = chorus_bin {
        return PathBuf::from(bin);
    }
    let target = target_dir.map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
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
        let mut node = Self::spawn_with_env(args, env)?;
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
    /// When the process exits first (e.g. its port was taken) or the line does not appear
    /// within `timeout`; the error carries the end of the node's log.
    pub async fn wait_ready(&mut self, timeout: Duration) -> io::Result<(SocketAddr, SocketAddr)> {
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
            let (kind, why) = if let Some(status) = self.child.try_wait()? {
                let why = format!("node exited with {status} before it was ready");
                (io::ErrorKind::Other, why)
            } else if Instant::now() >= deadline {
                let why = format!("node never became ready within {timeout:?}");
                (io::ErrorKind::TimedOut, why)
            } else {
                tokio::time::sleep(POLL_INTERVAL).await;
                continue;
            };
            return Err(io::Error::new(
                kind,
                format!(
                    "{why}; log: {}; its last lines:\n{}",
                    self.log_path().display(),
                    log_tail(&log, LOG_TAIL_LINES)
                ),
            ));
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

    #[test]
    fn free_port_is_bindable() {
        let port = free_port().unwrap();
        assert_ne!(port, 0);
        TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
    }

    #[test]
    fn chorus_bin_is_chorus_bin_else_the_target_dirs_debug_build() {
        let some = |s: &str| Some(OsString::from(s));
        // CHORUS_BIN wins, whatever the target dir.
        assert_eq!(
            chorus_bin_from(some("/opt/chorus"), some("/tmp/t")),
            PathBuf::from("/opt/chorus")
        );
        assert_eq!(
            chorus_bin_from(None, some("/tmp/t")),
            PathBuf::from("/tmp/t/debug/chorus")
        );
        // Neither set: the workspace's target dir (this crate is <workspace>/loadtest/kit).
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert_eq!(
            chorus_bin_from(None, None),
            workspace.join("target/debug/chorus")
        );
    }
}
