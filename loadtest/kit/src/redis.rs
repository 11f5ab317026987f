//! A real `redis-server` for tests, on a free loopback port and without persistence.
//!
//! The guard kills the server on drop. Faults are made with signals (SIGSTOP/SIGCONT through
//! [`RedisServer::pause`]/[`RedisServer::resume`]) and restarts; readiness is the server's
//! own process id in `INFO server` (so another test's server on a reused port never passes
//! for it), polled against a bounded deadline.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::node::{
    await_ready, free_port, kill_and_reap, log_file_path, send_signal, stop_and_wait,
};

/// How long a fresh `redis-server` may take to answer PING: it starts in milliseconds, but CI
/// machines are shared and a debug build of the tests may compete for the two cores.
pub const REDIS_READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one PING probe may take before it counts as "not ready yet".
const PING_TIMEOUT: Duration = Duration::from_millis(500);

/// Tries at starting redis-server on a fresh free port: another process may grab the port
/// between [`free_port`] releasing it and redis-server binding it.
const REDIS_START_ATTEMPTS: u32 = 3;

/// The redis-server binary, found on `PATH` unless `REDIS_SERVER_BIN` names another.
fn redis_server_bin() -> PathBuf {
    std::env::var_os("REDIS_SERVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("redis-server"))
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
#[cfg(test)]
async fn answers_ping(port: u16) -> bool {
    matches!(ask(port, b"PING\r\n").await, Ok(answer) if &answer == b"+PONG\r\n")
}

/// The process id of the Redis server answering on `port` (its `INFO server`), if one
/// answers within [`PING_TIMEOUT`].
async fn server_pid(port: u16) -> Option<u32> {
    let info = in_time(async {
        let mut stream = BufReader::new(TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?);
        stream.get_mut().write_all(b"INFO server\r\n").await?;
        // A bulk string: `$<length>\r\n`, then that many bytes.
        let mut head = String::new();
        stream.read_line(&mut head).await?;
        let len: usize = head
            .strip_prefix('$')
            .and_then(|n| n.trim_end().parse().ok())
            .ok_or_else(|| io::Error::other(format!("INFO answered {}", head.trim_end())))?;
        let mut body = vec![0u8; len];
        stream.read_exact(&mut body).await?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    })
    .await
    .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// Whether the Redis server answering on `port` is the process `pid`: a server another test
/// started on the port (taken meanwhile) must not pass for ours.
async fn answers_as(port: u16, pid: Option<u32>) -> bool {
    pid.is_some() && server_pid(port).await == pid
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
    /// the ready time-out after a few ports.
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
    /// When another process took the port, or the new server does not answer within
    /// [`REDIS_READY_TIMEOUT`].
    pub async fn restart(&mut self) -> io::Result<()> {
        self.stop();
        self.respawn().await
    }

    /// Starts the server again on its port, which its clients reconnect to: when another
    /// process took the port meanwhile (free ports are handed to every test), this fails
    /// saying so rather than waiting on a server that cannot bind.
    async fn respawn(&mut self) -> io::Result<()> {
        if let Err(e) = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, self.port)) {
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "redis-server cannot restart on port {}, which its clients reconnect to: \
                     another process holds it ({e})",
                    self.port
                ),
            ));
        }
        self.spawn_and_wait().await.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "redis-server did not restart on port {} (another process may have taken \
                     it): {e}",
                    self.port
                ),
            )
        })
    }

    /// Restarts the server keeping its data: `SHUTDOWN SAVE` writes a snapshot of everything
    /// acknowledged and stops the server (a clean restart: nothing acknowledged is lost), then
    /// a new one on the same port loads it. Leases and fence counters survive, their expiry
    /// times elapsing while the server was down.
    ///
    /// # Errors
    /// When the server does not stop within [`REDIS_READY_TIMEOUT`], another process took the
    /// port, or the new server does not answer within [`REDIS_READY_TIMEOUT`].
    pub async fn restart_persisted(&mut self) -> io::Result<()> {
        // No answer comes: the server closes the connection as it exits.
        let _ = in_time(async {
            let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).await?;
            stream.write_all(b"SHUTDOWN SAVE\r\n").await?;
            let mut buf = [0u8; 64];
            let _ = stream.read(&mut buf).await;
            Ok(())
        })
        .await;
        let deadline = tokio::time::Instant::now() + REDIS_READY_TIMEOUT;
        while let Some(c) = self.child.as_mut() {
            if c.try_wait()?.is_some() {
                self.child = None;
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "redis-server did not shut down",
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let waited = self.respawn().await;
        let _ = std::fs::remove_file(self.dump_path());
        waited
    }

    /// Where [`RedisServer::restart_persisted`] keeps the snapshot between the two servers.
    fn dump_path(&self) -> PathBuf {
        std::env::temp_dir().join(self.dump_name())
    }

    fn dump_name(&self) -> String {
        format!("chorus-redis-{}-{}.rdb", std::process::id(), self.port)
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
    /// When the server cannot be reached within the ping time-out or does not answer `+OK`.
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
    /// When the server cannot be reached within the ping time-out or answers anything else.
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
            // A snapshot only when asked (`restart_persisted`), under a name of its own.
            .args(["--dbfilename", &self.dump_name()])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        let (port, what) = (self.port, format!("redis-server on port {}", self.port));
        let ready = move |pid| answers_as(port, pid);
        let waited = await_ready(
            &mut self.child,
            &what,
            &self.log,
            REDIS_READY_TIMEOUT,
            ready,
        )
        .await;
        if waited
            .as_ref()
            .is_err_and(|e| e.kind() == io::ErrorKind::TimedOut)
        {
            self.stop();
        }
        waited
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::all_threads_stopped;

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

        // Without persistence a restart loses the data; `restart_persisted` keeps it.
        assert_eq!(redis.integer(&["INCR", "k"]).await.unwrap(), 1);
        redis.restart_persisted().await.unwrap();
        assert_eq!(redis.integer(&["INCR", "k"]).await.unwrap(), 2);
        redis.restart().await.unwrap();
        assert_eq!(redis.integer(&["INCR", "k"]).await.unwrap(), 1);

        drop(redis);
        assert!(
            !answers_ping(port).await,
            "the server must die with its guard"
        );
    }

    #[tokio::test]
    async fn a_restart_on_a_port_taken_meanwhile_fails_saying_so() {
        let mut redis = RedisServer::start().await.unwrap();
        let port = redis.port();
        assert!(answers_as(port, redis.pid()).await);
        // Another server's process id is not ours.
        assert!(!answers_as(port, redis.pid().map(|p| p + 1)).await);
        redis.stop();
        let squatter = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
        let e = redis.restart().await.unwrap_err();
        assert!(e.to_string().contains("another process holds it"), "{e}");
        assert!(redis.pid().is_none());
        drop(squatter);
        redis.restart().await.unwrap();
        assert!(answers_as(port, redis.pid()).await);
    }
}
