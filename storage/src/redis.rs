//! Redis connection setup, error mapping and script helpers shared by the Redis engines.
//!
//! One [`Redis`] per process: a `redis::Client` (for pub/sub connections) plus one multiplexed,
//! auto-reconnecting [`ConnectionManager`] that every store clones (a clone shares the socket).
//! Timeouts are bounded so that a frozen or unreachable Redis turns into
//! [`StorageError::Unavailable`] well inside a lease TTL instead of hanging a renew loop.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::error::{Result, StorageError};

/// Time allowed to open a TCP connection to Redis: loopback or LAN connects take microseconds to
/// milliseconds; a second means the server is down or frozen.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Time allowed for one request (or one pipeline) to be answered. It must stay well below the
/// lease renew interval (TTL/3 ≈ 3.3 s for a 10 s TTL) so that a slow Redis is noticed and the
/// holder can still self-fence before its local deadline; a 1,000-lease renew takes ~1-5 ms.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Reconnect attempts per failure before an error is returned; the manager keeps trying again on
/// the next request, so this only bounds how long one call may spend reconnecting.
pub const RECONNECT_RETRIES: usize = 2;

/// Shortest pause between reconnect attempts: a restarted Redis accepts within milliseconds.
const RECONNECT_MIN_DELAY: Duration = Duration::from_millis(50);

/// Longest pause between reconnect attempts: keeps a lease holder's retries inside one renew tick.
const RECONNECT_MAX_DELAY: Duration = Duration::from_millis(500);

/// A handle to one Redis server: cheap to clone, shared by every Redis-backed store.
#[derive(Clone)]
pub struct Redis {
    client: redis::Client,
    conn: ConnectionManager,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("addr", &self.client.get_connection_info().addr())
            .finish_non_exhaustive()
    }
}

impl Redis {
    /// Connects to `url` (e.g. `redis://127.0.0.1:6379/`) with the timeouts above.
    ///
    /// # Errors
    /// [`StorageError::Unavailable`] when the server cannot be reached;
    /// [`StorageError::Backend`] for a malformed URL.
    pub async fn connect(url: &str) -> Result<Self> {
        let client = redis::Client::open(url).map_err(map_err)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(RECONNECT_RETRIES)
            .set_min_delay(RECONNECT_MIN_DELAY)
            .set_max_delay(RECONNECT_MAX_DELAY);
        let conn = client
            .get_connection_manager_with_config(config)
            .await
            .map_err(map_err)?;
        Ok(Self { client, conn })
    }

    /// A clone of the shared multiplexed connection.
    pub fn conn(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// The client, for dedicated connections such as pub/sub.
    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    /// One `PING` round trip on the shared connection: whether Redis answers now.
    ///
    /// # Errors
    /// [`StorageError::Unavailable`] when it does not answer (within the response time-out).
    pub async fn ping(&self) -> Result<()> {
        let mut conn = self.conn();
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .map(drop)
            .map_err(map_err)
    }
}

/// Maps a Redis error to a [`StorageError`]: connection trouble is `Unavailable` (retryable,
/// outcome of a write unknown), anything else is `Backend`.
pub(crate) fn map_err(e: RedisError) -> StorageError {
    let unreachable = e.is_timeout()
        || e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.kind() == ErrorKind::Server(ServerErrorKind::BusyLoading);
    if unreachable {
        StorageError::unavailable("redis", e)
    } else {
        StorageError::backend("redis", e)
    }
}

/// Whether `e` is Redis's `NOSCRIPT`: the script cache is volatile (lost on restart, failover or
/// `SCRIPT FLUSH`), so every `EVALSHA` path must reload and retry.
pub(crate) fn is_noscript(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) || e.code() == Some("NOSCRIPT")
}

/// Sends `pipe` (made of `EVALSHA`s of `script`) in one round trip; on `NOSCRIPT` loads the
/// script and sends it once more. Only for idempotent scripts: a pipeline that failed with
/// `NOSCRIPT` may have run none or some of its calls.
pub(crate) async fn query_scripted_pipeline<T: redis::FromRedisValue>(
    conn: &mut ConnectionManager,
    script: &redis::Script,
    pipe: &redis::Pipeline,
) -> Result<T> {
    match pipe.query_async(conn).await {
        Ok(v) => Ok(v),
        Err(e) if is_noscript(&e) => {
            tracing::debug!("Redis lost its script cache; reloading the script.");
            script.load_async(conn).await.map_err(map_err)?;
            pipe.query_async(conn).await.map_err(map_err)
        }
        Err(e) => Err(map_err(e)),
    }
}

/// Loads `scripts` into Redis' script cache, so that the first calls of a burst find them
/// there (each store's `preload`; a call that still meets `NOSCRIPT` loads its script then).
pub(crate) async fn load_scripts(
    conn: &ConnectionManager,
    scripts: &[&redis::Script],
) -> Result<()> {
    let mut conn = conn.clone();
    for script in scripts {
        script.load_async(&mut conn).await.map_err(map_err)?;
    }
    Ok(())
}

/// A TTL in whole milliseconds for `PEXPIRE`, at least 1 ms (0 would delete the key).
pub(crate) fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}
