//! A real, throwaway PostgreSQL server for tests: `initdb` into a fresh directory in the temp
//! dir, `postgres` on a free 127.0.0.1 port with its unix socket in that directory, no system
//! service. The guard shuts it down (SIGQUIT, then SIGKILL) and removes the directory on drop.
//!
//! The binaries come from `PG_BIN_DIR`, else from `PATH`, else from Debian's
//! `/usr/lib/postgresql/<version>/bin` (the newest). PostgreSQL refuses to run as root, so a
//! root test process runs the server as the `postgres` user (Debian's package creates it).
//! A missing PostgreSQL is an error, never a skip: CI installs it (`.ci/test-all`).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::node::{
    POLL_INTERVAL, await_ready, free_port, kill_and_reap, log_file_path, send_signal,
};

/// How long a fresh server may take to accept connections (initdb not included).
pub const PG_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a shut-down server may take to exit before it is killed.
const PG_STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Tries at starting the server on a fresh free port (another process may take the port).
const PG_START_ATTEMPTS: u32 = 3;
/// The superuser `initdb` creates; local connections are trusted.
pub const PG_USER: &str = "chorus";
/// The system user a root test process runs the server as.
const PG_SYSTEM_USER: &str = "postgres";

/// The directory holding `initdb` and `postgres`.
///
/// # Errors
/// When no PostgreSQL installation is found.
pub fn pg_bin_dir() -> io::Result<PathBuf> {
    find_bin_dir(std::env::var_os("PG_BIN_DIR"))
}

/// [`pg_bin_dir`] given the value of `PG_BIN_DIR`.
fn find_bin_dir(named: Option<std::ffi::OsString>) -> io::Result<PathBuf> {
    let has_both = |d: &Path| d.join("initdb").is_file() && d.join("postgres").is_file();
    if let Some(dir) = named {
        let dir = PathBuf::from(dir);
        if !has_both(&dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("PG_BIN_DIR={} holds no initdb and postgres", dir.display()),
            ));
        }
        return Ok(dir);
    }
    if let Some(path) = std::env::var_os("PATH")
        && let Some(dir) = std::env::split_paths(&path).find(|d| has_both(d))
    {
        return Ok(dir);
    }
    // Debian: /usr/lib/postgresql/<major>/bin, the highest major first.
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            has_both(&bin).then_some((major, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "PostgreSQL not found (no initdb and postgres on PATH, in PG_BIN_DIR or in \
             /usr/lib/postgresql/*/bin): install Debian's postgresql package (.ci/test-all does)",
        )
    })
}

/// A real PostgreSQL server on a free 127.0.0.1 port, in its own temp directory; shut down
/// and removed on drop.
#[derive(Debug)]
pub struct PgServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    log: PathBuf,
    bin: PathBuf,
    settings: Vec<(String, String)>,
}

impl PgServer {
    /// Runs `initdb` and starts the server with PostgreSQL's default settings
    /// (`synchronous_commit = on`, `fsync = on`).
    ///
    /// # Errors
    /// When PostgreSQL is not installed, `initdb` fails, or the server does not accept
    /// connections within [`PG_READY_TIMEOUT`].
    pub async fn start() -> io::Result<Self> {
        Self::start_with(&[]).await
    }

    /// [`PgServer::start`] with extra `-c name=value` settings.
    ///
    /// # Errors
    /// As [`PgServer::start`].
    pub async fn start_with(settings: &[(&str, &str)]) -> io::Result<Self> {
        let bin = pg_bin_dir()?;
        let dir = fresh_dir()?;
        let log = log_file_path("postgres");
        let mut server = Self {
            child: None,
            port: 0,
            dir,
            log,
            bin,
            settings: settings
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
        };
        server.initdb()?;
        let mut last_err = io::Error::other("postgres was not started");
        for _ in 0..PG_START_ATTEMPTS {
            server.port = free_port()?;
            match server.spawn_and_wait().await {
                Ok(()) => return Ok(server),
                Err(e) => last_err = e,
            }
        }
        Err(last_err)
    }

    /// The URL of database `db` (`postgres` exists from the start).
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{PG_USER}:unused@127.0.0.1:{}/{db}", self.port)
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id of the postmaster, if running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Shuts the server down ([`PgServer::stop`]) and starts it again on the same port and
    /// data: what was committed survives, as after a crash of the primary.
    ///
    /// # Errors
    /// When the server does not accept connections again within [`PG_READY_TIMEOUT`].
    pub async fn restart(&mut self) -> io::Result<()> {
        self.stop();
        self.spawn_and_wait().await
    }

    /// Shuts the server down at once (SIGQUIT: an immediate shutdown, as a crash would leave
    /// it), waits for it to exit, and kills it if it does not. Blocking (it runs in `drop`):
    /// the postmaster needs milliseconds to end its backends, bounded by a deadline.
    #[allow(
        clippy::disallowed_methods,
        reason = "drop cannot await; the wait is bounded"
    )]
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if send_signal(child.id(), "QUIT").is_ok() {
            let deadline = Instant::now() + PG_STOP_TIMEOUT;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(POLL_INTERVAL);
            }
        }
        kill_and_reap(&mut child);
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn initdb(&self) -> io::Result<()> {
        let out = as_server_user(&self.bin.join("initdb"))
            .arg("-D")
            .arg(self.data())
            .args(["-U", PG_USER, "--auth=trust", "--no-sync", "-E", "UTF8"])
            .args(["--locale=C"])
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "initdb failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    async fn spawn_and_wait(&mut self) -> io::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut cmd = as_server_user(&self.bin.join("postgres"));
        cmd.arg("-D").arg(self.data());
        cmd.args(["-p", &self.port.to_string()]);
        cmd.args(["-c", "listen_addresses=127.0.0.1"]);
        cmd.arg("-c")
            .arg(format!("unix_socket_directories={}", self.dir.display()));
        for (name, value) in &self.settings {
            cmd.arg("-c").arg(format!("{name}={value}"));
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        let (data, what) = (self.data(), format!("postgres on port {}", self.port));
        let ready = |pid| std::future::ready(is_ready(&data, pid));
        let waited = await_ready(&mut self.child, &what, &self.log, PG_READY_TIMEOUT, ready).await;
        if waited
            .as_ref()
            .is_err_and(|e| e.kind() == io::ErrorKind::TimedOut)
        {
            self.stop();
        }
        waited
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// Whether the server with pid `pid` has finished starting in `data`: its `postmaster.pid`
/// names that pid on the first line and says `ready` on the 8th once startup (and any crash
/// recovery) is done. The pid check ignores a file left by a killed earlier run.
fn is_ready(data: &Path, pid: Option<u32>) -> bool {
    let Some(pid) = pid else {
        return false;
    };
    let Ok(file) = std::fs::read_to_string(data.join("postmaster.pid")) else {
        return false;
    };
    let lines: Vec<&str> = file.lines().map(str::trim).collect();
    lines.first() == Some(&pid.to_string().as_str()) && lines.get(7) == Some(&"ready")
}

/// A new, empty directory for one server, owned by the user the server runs as.
fn fresh_dir() -> io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("chorus-pg-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir)?;
    if is_root()? {
        let (uid, gid) = system_user_ids(PG_SYSTEM_USER)?;
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
    }
    Ok(dir)
}

/// Whether this process runs as root (the owner of `/proc/self` is the effective user).
fn is_root() -> io::Result<bool> {
    Ok(std::fs::metadata("/proc/self")?.uid() == 0)
}

/// The uid and gid of a system user, from `/etc/passwd`.
fn system_user_ids(name: &str) -> io::Result<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&name))
        .and_then(|f| Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?)))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("running as root, and there is no {name:?} user to run PostgreSQL as"),
            )
        })
}

/// A command for `program` that runs as [`PG_SYSTEM_USER`] when this process is root
/// (`setpriv` executes it in place, so the child's pid is the program's).
fn as_server_user(program: &Path) -> Command {
    if is_root().unwrap_or(false) {
        let mut cmd = Command::new("setpriv");
        cmd.args([
            &format!("--reuid={PG_SYSTEM_USER}"),
            &format!("--regid={PG_SYSTEM_USER}"),
            "--clear-groups",
            "--",
        ]);
        cmd.arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bin_dir_without_postgresql_is_an_error_that_says_so() {
        let dir = std::env::temp_dir().join("chorus-no-postgres-here");
        let err = find_bin_dir(Some(dir.into_os_string())).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("no initdb and postgres"), "{err}");
    }

    #[tokio::test]
    async fn a_server_starts_accepts_connections_and_is_gone_after_drop() {
        let server = PgServer::start().await.unwrap();
        let port = server.port();
        let dir = server.dir.clone();
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
            "postgres listens on its port"
        );
        drop(server);
        assert!(!dir.exists(), "the data directory is removed");
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "the server dies with its guard"
        );
    }
}
