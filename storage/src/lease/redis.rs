//! Redis lease engine: atomic Lua scripts (claim, batched renew, release; docs/ARCHITECTURE.md, section 4).
//!
//! Every script receives every key it touches as a `KEYS` argument. Fencing tokens are Lua
//! numbers (doubles) inside scripts, exact below 2^53: at one claim per millisecond per room that
//! is 285,000 years.

use std::time::Duration;

use ::redis::aio::ConnectionManager;
use ::redis::{Script, Value};
use protocol::{FencingToken, RoomId};

use super::{ClaimOutcome, fence_key, lease_key};
use crate::error::{Result, StorageError};
use crate::redis::{Redis, load_scripts, map_err, query_scripted_pipeline, ttl_ms};

/// Leases per renew script call. All chunks of one renew go out in one pipeline (one round
/// trip); chunking only bounds how long one script blocks Redis (~1 µs per lease, so ~1 ms).
pub const RENEW_CHUNK_MAX: usize = 1_000;

/// ACQUIRE: `KEYS = [lease, fence]`, `ARGV = [owner, ttl_ms, fence_floor]`.
/// Returns `{1, fence}` when the caller holds the lease, `{0, owner, fence}` when another does.
/// The caller's own live lease keeps its token only while that token is above the floor;
/// otherwise (a runtime of the caller already wrote with it) the caller gets a new token.
const ACQUIRE_LUA: &str = r"
local v = redis.call('HMGET', KEYS[1], 'owner', 'fence')
local floor = tonumber(ARGV[3])
if v[1] then
  if v[1] ~= ARGV[1] then
    return {0, v[1], tonumber(v[2])}
  end
  if tonumber(v[2]) > floor then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(v[2])}
  end
end
if tonumber(redis.call('GET', KEYS[2]) or '0') < floor then
  redis.call('SET', KEYS[2], ARGV[3])
end
local fence = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'fence', fence)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, fence}
";

/// RENEW (batch): `KEYS = [lease_1 .. lease_n]`, `ARGV = [owner, ttl_ms, fence_1 .. fence_n]`.
/// Extends each lease still held by `owner` with the same fence; returns one 0/1 per key.
const RENEW_LUA: &str = r"
local out = {}
for i = 1, #KEYS do
  local v = redis.call('HMGET', KEYS[i], 'owner', 'fence')
  if v[1] == ARGV[1] and v[2] == ARGV[i + 2] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
";

/// RELEASE: compare-and-delete. `KEYS = [lease]`, `ARGV = [owner, fence]`; returns 1 or 0.
const RELEASE_LUA: &str = r"
local v = redis.call('HMGET', KEYS[1], 'owner', 'fence')
if v[1] == ARGV[1] and v[2] == ARGV[2] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// Redis-backed leases; clones share the connection and the loaded scripts.
#[derive(Clone)]
pub struct RedisLeases {
    conn: ConnectionManager,
    scripts: std::sync::Arc<Scripts>,
}

struct Scripts {
    acquire: Script,
    renew: Script,
    release: Script,
}

impl std::fmt::Debug for RedisLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLeases").finish_non_exhaustive()
    }
}

impl RedisLeases {
    /// Leases on `redis`'s shared connection.
    pub fn new(redis: &Redis) -> Self {
        Self {
            conn: redis.conn(),
            scripts: std::sync::Arc::new(Scripts {
                acquire: Script::new(ACQUIRE_LUA),
                renew: Script::new(RENEW_LUA),
                release: Script::new(RELEASE_LUA),
            }),
        }
    }

    /// See [`super::LeaseStore::preload`].
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn preload(&self) -> Result<()> {
        let s = &self.scripts;
        load_scripts(&self.conn, &[&s.acquire, &s.renew, &s.release]).await
    }

    /// See [`super::LeaseStore::claim_above`].
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached; `Corrupt` for an unexpected reply.
    pub async fn claim(
        &self,
        room: &RoomId,
        owner: &str,
        ttl: Duration,
        floor: FencingToken,
    ) -> Result<ClaimOutcome> {
        let mut conn = self.conn.clone();
        let reply: Vec<Value> = self
            .scripts
            .acquire
            .key(lease_key(room))
            .key(fence_key(room))
            .arg(owner)
            .arg(ttl_ms(ttl))
            .arg(floor)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        match reply.as_slice() {
            [Value::Int(1), fence] => Ok(ClaimOutcome::Acquired {
                fence: fence_of(fence)?,
            }),
            [Value::Int(0), holder, fence] => Ok(ClaimOutcome::HeldBy {
                owner: ::redis::from_redis_value_ref(holder).map_err(corrupt)?,
                fence: fence_of(fence)?,
            }),
            other => Err(StorageError::corrupt_msg(format!(
                "unexpected ACQUIRE reply for {room}: {other:?}"
            ))),
        }
    }

    /// See [`super::LeaseStore::renew`]: one pipeline of [`RENEW_CHUNK_MAX`]-lease script calls.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached; `Corrupt` for an unexpected reply.
    pub async fn renew(
        &self,
        owner: &str,
        leases: &[(RoomId, FencingToken)],
        ttl: Duration,
    ) -> Result<Vec<bool>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let ttl = ttl_ms(ttl);
        let mut pipe = ::redis::pipe();
        for chunk in leases.chunks(RENEW_CHUNK_MAX) {
            let mut call = self.scripts.renew.prepare_invoke();
            call.arg(owner).arg(ttl);
            for (room, fence) in chunk {
                call.key(lease_key(room)).arg(*fence);
            }
            pipe.invoke_script(&call);
        }
        let mut conn = self.conn.clone();
        let replies: Vec<Vec<i64>> =
            query_scripted_pipeline(&mut conn, &self.scripts.renew, &pipe).await?;
        let renewed: Vec<bool> = replies.into_iter().flatten().map(|r| r == 1).collect();
        if renewed.len() != leases.len() {
            return Err(StorageError::corrupt_msg(format!(
                "RENEW answered {} of {} leases",
                renewed.len(),
                leases.len()
            )));
        }
        Ok(renewed)
    }

    /// See [`super::LeaseStore::release`].
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn release(&self, room: &RoomId, owner: &str, fence: FencingToken) -> Result<bool> {
        let mut conn = self.conn.clone();
        let deleted: i64 = self
            .scripts
            .release
            .key(lease_key(room))
            .arg(owner)
            .arg(fence)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        Ok(deleted == 1)
    }

    /// See [`super::LeaseStore::holder`].
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached; `Corrupt` for a half-written lease.
    pub async fn holder(&self, room: &RoomId) -> Result<Option<(String, FencingToken)>> {
        let mut conn = self.conn.clone();
        let (owner, fence): (Option<String>, Option<FencingToken>) = ::redis::cmd("HMGET")
            .arg(lease_key(room))
            .arg("owner")
            .arg("fence")
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        match (owner, fence) {
            (Some(owner), Some(fence)) => Ok(Some((owner, fence))),
            (None, None) => Ok(None),
            (owner, fence) => Err(StorageError::corrupt_msg(format!(
                "lease of {room} has owner {owner:?} and fence {fence:?}"
            ))),
        }
    }
}

fn fence_of(v: &Value) -> Result<FencingToken> {
    ::redis::from_redis_value_ref(v).map_err(corrupt)
}

fn corrupt<E: std::error::Error + Send + Sync + 'static>(e: E) -> StorageError {
    StorageError::corrupt("stored lease", e)
}
