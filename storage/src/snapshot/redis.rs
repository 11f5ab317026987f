//! Redis snapshot engine: fenced writes as atomic Lua scripts (docs/ARCHITECTURE.md, section 4).
//!
//! `room:{R}:state` is a hash: `hwm` (highest token that ever wrote for the room), `fence` (token
//! of the saved state) and `data` (the state). `room:{R}:history` is a list of encoded entries.
//! `room:{R}:open_gifts` is a set of 16-byte gift ids (see the parent module's "Open gifts").
//! `room:{R}:state` also keeps `owner`, the room's creator, for the creator's count
//! `owner:{U}:rooms` (set of room ids); `rooms:touched` is a sorted set of rooms by touched time
//! (see the parent module's "Quotas and retention"). The scripts that maintain these touch
//! keys of more than one hash slot: they need one Redis (not a Redis Cluster), as deployed.
//! Every write script first checks that the lease `room:{R}:lease` carries the write's token,
//! then that the token is not below `hwm`, and only then writes and raises `hwm`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ::redis::Script;
use ::redis::aio::ConnectionManager;
use bytes::Bytes;
use protocol::{FencingToken, RoomId, UserId};

use uuid::Uuid;

use super::{
    Change, Created, Expired, HistoryEntry, Stored, TOUCHED_KEY, decode_entry, decode_gift,
    encode_entry, history_key, open_gifts_key, owned_key, state_key,
};
use crate::error::{Result, StorageError};
use crate::lease::lease_key;
use crate::redis::{Redis, load_scripts, map_err};

mod changes;

use self::changes::{Batcher, CHANGES_LUA, Job};
pub use self::changes::{DEFAULT_INTERVAL, METRIC_HISTORY_BATCH_ROOMS};

/// Shared prologue of every fenced write: `KEYS[1]` = lease, `KEYS[2]` = state,
/// `ARGV[1]` = token. Returns -1 when the live lease does not carry the token, -2 when a higher
/// token already wrote.
macro_rules! fence_check {
    () => {
        r"
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[1] then return -1 end
local hwm = redis.call('HGET', KEYS[2], 'hwm')
if hwm and tonumber(ARGV[1]) < tonumber(hwm) then return -2 end
"
    };
}

/// SAVE: `KEYS = [lease, state]`, `ARGV = [fence, data]`.
const SAVE_LUA: &str = concat!(
    fence_check!(),
    r"
redis.call('HSET', KEYS[2], 'hwm', ARGV[1], 'fence', ARGV[1], 'data', ARGV[2])
return 1
"
);

/// OPEN: `KEYS = [lease, state, open_gifts]`, `ARGV = [fence, gift id…]`. Returns `{1, added…}`
/// with `added` 1 for a gift that was not open yet, 0 for one that was; `{-1}` or `{-2}` as
/// the fence check's statuses.
const OPEN_LUA: &str = r"
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[1] then return {-1} end
local hwm = redis.call('HGET', KEYS[2], 'hwm')
if hwm and tonumber(ARGV[1]) < tonumber(hwm) then return {-2} end
local added = {1}
for i = 2, #ARGV do
  added[i] = redis.call('SADD', KEYS[3], ARGV[i])
end
return added
";

/// DELETE: `KEYS = [lease, state, history, open_gifts]`, `ARGV = [fence]`. Keeps `hwm`.
const DELETE_LUA: &str = concat!(
    fence_check!(),
    r"
redis.call('HDEL', KEYS[2], 'fence', 'data')
redis.call('HSET', KEYS[2], 'hwm', ARGV[1])
redis.call('DEL', KEYS[3], KEYS[4])
return 1
"
);

/// CREATE: `KEYS = [lease, state, owned, touched]`, `ARGV = [fence, data, room, owner,
/// max_owned, now_ms]`. Returns 0 (writing nothing) when the owner is at the cap.
const CREATE_LUA: &str = concat!(
    fence_check!(),
    r"
local max = tonumber(ARGV[5])
if max > 0 and redis.call('SISMEMBER', KEYS[3], ARGV[3]) == 0
   and redis.call('SCARD', KEYS[3]) >= max then
  return 0
end
redis.call('HSET', KEYS[2], 'hwm', ARGV[1], 'fence', ARGV[1], 'data', ARGV[2], 'owner', ARGV[4])
redis.call('SADD', KEYS[3], ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[6], ARGV[3])
return 1
"
);

/// TOUCH: `KEYS = [state, touched]`, `ARGV = [room, now_ms]`: raises the touched time of a
/// stored room.
const TOUCH_LUA: &str = r"
if redis.call('HEXISTS', KEYS[1], 'data') == 0 then return 0 end
redis.call('ZADD', KEYS[2], 'GT', ARGV[2], ARGV[1])
return 1
";

/// EXPIRE: `KEYS = [lease, state, history, open_gifts, touched, owned]`, `ARGV = [fence, room,
/// cutoff_ms, owner ('' for none)]`. Returns 0 (writing nothing) when the room was touched
/// since the cutoff (or never: a room stored before touched times existed), has an open
/// gift, or its creator is not `owner` any more (read again).
const EXPIRE_LUA: &str = concat!(
    fence_check!(),
    r"
local t = redis.call('ZSCORE', KEYS[5], ARGV[2])
if not t or tonumber(t) >= tonumber(ARGV[3]) then return 0 end
if redis.call('SCARD', KEYS[4]) > 0 then return 0 end
if (redis.call('HGET', KEYS[2], 'owner') or '') ~= ARGV[4] then return 0 end
if ARGV[4] ~= '' then redis.call('SREM', KEYS[6], ARGV[2]) end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('ZREM', KEYS[5], ARGV[2])
return 1
"
);

/// Redis-backed snapshots; clones share the connection and scripts.
#[derive(Clone)]
pub struct RedisSnapshots {
    conn: ConnectionManager,
    scripts: Arc<Scripts>,
    /// The history writer, started by the first change (a runtime is running by then).
    changes: Arc<OnceLock<Batcher>>,
    /// Shortest time between two of its calls.
    interval: Duration,
}

struct Scripts {
    save: Script,
    changes: Script,
    open: Script,
    delete: Script,
    create: Script,
    touch: Script,
    expire: Script,
}

impl std::fmt::Debug for RedisSnapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSnapshots").finish_non_exhaustive()
    }
}

/// Turns a fenced script's status into a result.
pub(super) fn fenced_status(status: i64, fence: FencingToken) -> Result<()> {
    match status {
        1 => Ok(()),
        -1 | -2 => Err(StorageError::Fenced { token: fence }),
        other => Err(StorageError::corrupt_msg(format!(
            "unexpected fenced-write status {other}"
        ))),
    }
}

impl RedisSnapshots {
    /// Snapshots on `redis`'s shared connection, whose changes go to Redis at most once per
    /// `interval` (see the `changes` module).
    pub fn new(redis: &Redis, interval: Duration) -> Self {
        Self {
            conn: redis.conn(),
            scripts: Arc::new(Scripts {
                save: Script::new(SAVE_LUA),
                changes: Script::new(CHANGES_LUA),
                open: Script::new(OPEN_LUA),
                delete: Script::new(DELETE_LUA),
                create: Script::new(CREATE_LUA),
                touch: Script::new(TOUCH_LUA),
                expire: Script::new(EXPIRE_LUA),
            }),
            changes: Arc::new(OnceLock::new()),
            interval,
        }
    }

    /// See [`super::SnapshotStore::preload`].
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn preload(&self) -> Result<()> {
        let s = &self.scripts;
        let all = [
            &s.save, &s.changes, &s.open, &s.delete, &s.create, &s.touch, &s.expire,
        ];
        load_scripts(&self.conn, &all).await
    }

    /// See [`super::SnapshotStore::load`].
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached; `Corrupt` for a half-written state.
    pub async fn load(&self, room: &RoomId) -> Result<Option<Stored>> {
        let mut conn = self.conn.clone();
        let (fence, data): (Option<FencingToken>, Option<Vec<u8>>) = ::redis::cmd("HMGET")
            .arg(state_key(room))
            .arg("fence")
            .arg("data")
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        match (fence, data) {
            (Some(fence), Some(data)) => Ok(Some(Stored {
                fence,
                bytes: Bytes::from(data),
            })),
            (None, None) => Ok(None),
            _ => Err(StorageError::corrupt_msg(format!(
                "state of {room} has only one of fence and data"
            ))),
        }
    }

    /// See [`super::SnapshotStore::exists`].
    ///
    /// # Errors
    /// `Unavailable`.
    pub async fn exists(&self, room: &RoomId) -> Result<bool> {
        let mut conn = self.conn.clone();
        ::redis::cmd("HEXISTS")
            .arg(state_key(room))
            .arg("data")
            .query_async(&mut conn)
            .await
            .map_err(map_err)
    }

    /// See [`super::SnapshotStore::save`].
    ///
    /// # Errors
    /// `Fenced`, `Unavailable`.
    pub async fn save(&self, room: &RoomId, fence: FencingToken, bytes: &[u8]) -> Result<()> {
        let mut conn = self.conn.clone();
        let status: i64 = self
            .scripts
            .save
            .key(lease_key(room))
            .key(state_key(room))
            .arg(fence)
            .arg(bytes)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        fenced_status(status, fence)
    }

    /// See [`super::SnapshotStore::write_change`].
    ///
    /// # Errors
    /// `Fenced`, `Unavailable`.
    pub async fn write_change(
        &self,
        room: &RoomId,
        fence: FencingToken,
        change: Change<'_>,
        max_len: usize,
    ) -> Result<()> {
        let job = Job {
            room: room.clone(),
            fence,
            max_len,
            more_waiting: change.more_waiting,
            state: change.state.map(<[u8]>::to_vec),
            closed: change.closed.to_vec(),
            entries: change
                .entries
                .iter()
                .map(|&(seq, bytes)| encode_entry(fence, seq, bytes))
                .collect(),
        };
        self.writer().write(job).await
    }

    /// The history writer, started on first use.
    fn writer(&self) -> &Batcher {
        self.changes.get_or_init(|| {
            Batcher::start(
                self.conn.clone(),
                self.scripts.changes.clone(),
                self.interval,
            )
        })
    }

    /// `(script calls, changes)` the history writer has answered: how well changes share calls.
    pub fn change_batches(&self) -> (u64, u64) {
        self.changes.get().map_or((0, 0), Batcher::stats)
    }

    /// See [`super::SnapshotStore::open_batch`].
    ///
    /// # Errors
    /// `Fenced`, `Unavailable`.
    pub async fn open_batch(
        &self,
        room: &RoomId,
        fence: FencingToken,
        gifts: &[Uuid],
    ) -> Result<Vec<bool>> {
        let mut conn = self.conn.clone();
        let mut call = self.scripts.open.prepare_invoke();
        call.key(lease_key(room))
            .key(state_key(room))
            .key(open_gifts_key(room))
            .arg(fence);
        for gift in gifts {
            call.arg(gift.as_bytes().as_slice());
        }
        let reply: Vec<i64> = call.invoke_async(&mut conn).await.map_err(map_err)?;
        match reply.split_first() {
            Some((1, added)) if added.len() == gifts.len() => {
                Ok(added.iter().map(|&a| a == 1).collect())
            }
            Some((&status, [])) => fenced_status(status, fence).map(|()| Vec::new()),
            _ => Err(StorageError::corrupt_msg(format!(
                "unexpected answer to opening gifts: {reply:?}"
            ))),
        }
    }

    /// See [`super::SnapshotStore::open_gifts`].
    ///
    /// # Errors
    /// `Unavailable`, `Corrupt`.
    pub async fn open_gifts(&self, room: &RoomId) -> Result<Vec<Uuid>> {
        let mut conn = self.conn.clone();
        let raw: Vec<Vec<u8>> = ::redis::cmd("SMEMBERS")
            .arg(open_gifts_key(room))
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        raw.iter().map(|g| decode_gift(room, g)).collect()
    }

    /// See [`super::SnapshotStore::load_history`].
    ///
    /// # Errors
    /// `Unavailable`, `Corrupt`.
    pub async fn load_history(&self, room: &RoomId) -> Result<Vec<HistoryEntry>> {
        let mut conn = self.conn.clone();
        let raw: Vec<Vec<u8>> = ::redis::cmd("LRANGE")
            .arg(history_key(room))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        raw.into_iter().map(|e| decode_entry(room, e)).collect()
    }

    /// See [`super::SnapshotStore::delete`].
    ///
    /// # Errors
    /// `Fenced`, `Unavailable`.
    pub async fn delete(&self, room: &RoomId, fence: FencingToken) -> Result<()> {
        let mut conn = self.conn.clone();
        let status: i64 = self
            .scripts
            .delete
            .key(lease_key(room))
            .key(state_key(room))
            .key(history_key(room))
            .key(open_gifts_key(room))
            .arg(fence)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        fenced_status(status, fence)
    }

    /// See [`super::SnapshotStore::create`].
    ///
    /// # Errors
    /// `Fenced`, `Unavailable`.
    pub async fn create(
        &self,
        room: &RoomId,
        fence: FencingToken,
        bytes: &[u8],
        owner: &UserId,
        max_owned: u32,
        now_ms: u64,
    ) -> Result<Created> {
        let mut conn = self.conn.clone();
        let status: i64 = self
            .scripts
            .create
            .key(lease_key(room))
            .key(state_key(room))
            .key(owned_key(owner))
            .key(TOUCHED_KEY)
            .arg(fence)
            .arg(bytes)
            .arg(room.as_str())
            .arg(owner.as_str())
            .arg(max_owned)
            .arg(now_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        if status == 0 {
            return Ok(Created::AtQuota);
        }
        fenced_status(status, fence).map(|()| Created::Created)
    }

    /// See [`super::SnapshotStore::owned_count`].
    ///
    /// # Errors
    /// `Unavailable`.
    pub async fn owned_count(&self, owner: &UserId) -> Result<u64> {
        let mut conn = self.conn.clone();
        ::redis::cmd("SCARD")
            .arg(owned_key(owner))
            .query_async(&mut conn)
            .await
            .map_err(map_err)
    }

    /// See [`super::SnapshotStore::touch`].
    ///
    /// # Errors
    /// `Unavailable`.
    pub async fn touch(&self, room: &RoomId, now_ms: u64) -> Result<()> {
        let mut conn = self.conn.clone();
        let _: i64 = self
            .scripts
            .touch
            .key(state_key(room))
            .key(TOUCHED_KEY)
            .arg(room.as_str())
            .arg(now_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    /// See [`super::SnapshotStore::untouched_since`].
    ///
    /// # Errors
    /// `Unavailable`.
    pub async fn untouched_since(
        &self,
        cutoff_ms: u64,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<RoomId>> {
        let mut conn = self.conn.clone();
        let rooms: Vec<String> = ::redis::cmd("ZRANGEBYSCORE")
            .arg(TOUCHED_KEY)
            .arg("-inf")
            .arg(format!("({cutoff_ms}"))
            .arg("LIMIT")
            .arg(offset)
            .arg(limit)
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        Ok(rooms.into_iter().map(RoomId::from).collect())
    }

    /// See [`super::SnapshotStore::expire`].
    ///
    /// # Errors
    /// `Fenced`, `Unavailable`.
    pub async fn expire(
        &self,
        room: &RoomId,
        fence: FencingToken,
        cutoff_ms: u64,
    ) -> Result<Expired> {
        let mut conn = self.conn.clone();
        let owner: Option<String> = ::redis::cmd("HGET")
            .arg(state_key(room))
            .arg("owner")
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        let owner = owner.unwrap_or_default();
        let status: i64 = self
            .scripts
            .expire
            .key(lease_key(room))
            .key(state_key(room))
            .key(history_key(room))
            .key(open_gifts_key(room))
            .key(TOUCHED_KEY)
            .key(owned_key(&UserId::from(owner.as_str())))
            .arg(fence)
            .arg(room.as_str())
            .arg(cutoff_ms)
            .arg(owner.as_str())
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        if status == 0 {
            return Ok(Expired::Kept);
        }
        fenced_status(status, fence).map(|()| Expired::Deleted)
    }
}
