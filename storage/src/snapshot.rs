//! Durable room state as opaque bytes, plus a bounded history of recent events; every write is
//! fenced by the lease token.
//!
//! A write with token `F` succeeds only if `F` is the token of the room's **live** lease (a
//! paused ex-owner whose lease expired cannot write, even with no competitor) and `F` is not
//! lower than the highest token that ever wrote for the room (writes stay monotonic even if the
//! lease key is lost). Anything else fails with [`StorageError::Fenced`]: the caller must stop
//! the room (it lost ownership) — this is not a retryable error.
//!
//! # Engines
//! - [`RedisSnapshots`] (`snapshot/redis.rs`): Lua scripts that read `room:{R}:lease` and write
//!   `room:{R}:state` (hash `hwm`, `fence`, `data`), `room:{R}:history` (list) and
//!   `room:{R}:open_gifts` (set) atomically.
//!
//! # Open gifts
//! A room's open gifts are the gifts its runtime has handed to the ledger and whose event it
//! has not published yet. A runtime opens one ([`SnapshotStore::open_batch`]) before its ledger
//! call and closes it in the very write that puts its event in the history
//! ([`SnapshotStore::write_change`]), or after the ledger refused it. What a runtime killed in
//! between leaves open, the room's next owner finds ([`SnapshotStore::open_gifts`]): a gift the
//! ledger settled there is one whose event nobody published.
//! - [`SqliteSnapshots`] (`snapshot/sqlite.rs`): `<data_dir>/rooms.db` for standalone mode;
//!   the live-lease check asks the process's [`crate::lease::InProcessLeases`].
//!
//! # Quotas and retention
//! A room made by [`SnapshotStore::create`] records its creator and a "touched" time (the
//! last time someone joined it, at most hourly as the room reports it with
//! [`SnapshotStore::touch`]). The creator's count of stored rooms
//! ([`SnapshotStore::owned_count`]) is the rooms they created that are still stored: a
//! `room.transfer` does not move it, and only [`SnapshotStore::expire`] (retention) lowers it.
//! Rooms stored before this index existed count for nobody. [`SnapshotStore::untouched_since`]
//! lists rooms not touched since a time; [`SnapshotStore::expire`] removes one (state, history,
//! open gifts, index entries), fenced like every write, and only if it is still untouched and
//! has no open gift.

mod redis;
mod sqlite;

use bytes::Bytes;
use protocol::{FencingToken, RoomId, Seq, UserId};
use uuid::Uuid;

pub use self::redis::{
    DEFAULT_INTERVAL as DEFAULT_WRITE_INTERVAL, METRIC_HISTORY_BATCH_ROOMS, RedisSnapshots,
};
pub use self::sqlite::{ROOMS_DB_FILE, SqliteSnapshots};
use crate::error::{Result, StorageError};

/// A room's saved state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The token of the owner that wrote it.
    pub fence: FencingToken,
    /// The state, as the room serialized it.
    pub bytes: Bytes,
}

/// One entry of a room's bounded event history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryEntry {
    /// The token of the owner that appended it (the event's epoch).
    pub fence: FencingToken,
    /// The event's sequence number within its epoch.
    pub seq: Seq,
    /// The event, as the room serialized it.
    pub bytes: Bytes,
}

/// Snapshot store: one of the two engines, cheap to clone, no dyn dispatch.
#[derive(Clone, Debug)]
pub enum SnapshotStore {
    /// Redis (cluster mode), fenced by the Redis lease in the same script.
    Redis(RedisSnapshots),
    /// SQLite (standalone mode), fenced by the in-process lease store.
    Sqlite(SqliteSnapshots),
}

impl SnapshotStore {
    /// A Redis-backed store on `redis`'s shared connection, writing changes at most once per
    /// [`DEFAULT_WRITE_INTERVAL`].
    pub fn redis(redis: &crate::redis::Redis) -> Self {
        Self::redis_paced(redis, DEFAULT_WRITE_INTERVAL)
    }

    /// A Redis-backed store whose room changes, from all its rooms, go to Redis in one script
    /// call at most once per `interval`: a change waits at most `interval` for its call, and
    /// none after a quiet spell (zero: a call goes as soon as the previous one is answered).
    pub fn redis_paced(redis: &crate::redis::Redis, interval: std::time::Duration) -> Self {
        Self::Redis(RedisSnapshots::new(redis, interval))
    }

    /// Loads the Redis scripts into Redis' script cache (nothing to do on SQLite). A node does
    /// it before its rooms write: otherwise every room that writes first at once finds the
    /// script missing and loads it itself.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn preload(&self) -> Result<()> {
        match self {
            Self::Redis(r) => r.preload().await,
            Self::Sqlite(_) => Ok(()),
        }
    }

    /// A SQLite-backed store in `<data_dir>/rooms.db`, fenced by the in-process `leases`.
    ///
    /// # Errors
    /// `Backend` when the database cannot be opened.
    pub async fn sqlite(
        data_dir: &std::path::Path,
        leases: crate::lease::InProcessLeases,
    ) -> Result<Self> {
        Ok(Self::Sqlite(SqliteSnapshots::open(data_dir, leases).await?))
    }

    /// The room's saved state, if any.
    ///
    /// # Errors
    /// `Unavailable` when the backend cannot be reached; `Corrupt` for unreadable data.
    pub async fn load(&self, room: &RoomId) -> Result<Option<Stored>> {
        match self {
            Self::Redis(s) => s.load(room).await,
            Self::Sqlite(s) => s.load(room).await,
        }
    }

    /// Whether the room has a saved state, without reading it (a busy room's state holds its
    /// penalties and lists: tens of kilobytes).
    ///
    /// # Errors
    /// `Unavailable` when the backend cannot be reached.
    pub async fn exists(&self, room: &RoomId) -> Result<bool> {
        match self {
            Self::Redis(s) => s.exists(room).await,
            Self::Sqlite(s) => s.exists(room).await,
        }
    }

    /// Replaces the room's state with `bytes`, if `fence` is the live lease's token.
    ///
    /// # Errors
    /// [`StorageError::Fenced`] when `fence` is not the live lease's token or is lower than a
    /// token that already wrote; `Unavailable` when the backend cannot be reached.
    pub async fn save(&self, room: &RoomId, fence: FencingToken, bytes: &[u8]) -> Result<()> {
        match self {
            Self::Redis(s) => s.save(room, fence, bytes).await,
            Self::Sqlite(s) => s.save(room, fence, bytes).await,
        }
    }

    /// Writes one change of the room: appends its events to the room's history and, with
    /// `state`, replaces the room's state, and closes the open gifts `closed` (those whose
    /// event this change publishes, and refused ones), in one write: all of it or none (a
    /// change half written would replay events the saved state does not hold, or the reverse;
    /// a gift event written with its gift still open would be published twice). Keeps the
    /// newest `max_len` history entries (at least one); Redis trims in steps and may keep up
    /// to `max_len / 8` older ones besides, which [`SnapshotStore::load_history`] returns too
    /// (a reader keeps what it needs). Fenced like [`SnapshotStore::save`].
    /// No events, no state and no gift is a no-op.
    ///
    /// # Errors
    /// As [`SnapshotStore::save`].
    pub async fn write_change(
        &self,
        room: &RoomId,
        fence: FencingToken,
        change: Change<'_>,
        max_len: usize,
    ) -> Result<()> {
        if change.is_empty() {
            return Ok(());
        }
        let max_len = max_len.max(1);
        match self {
            Self::Redis(s) => s.write_change(room, fence, change, max_len).await,
            Self::Sqlite(s) => s.write_change(room, fence, change, max_len).await,
        }
    }

    /// Records each of `gifts` as open in `room` (see the module docs), in one write fenced
    /// like [`SnapshotStore::save`]. For each gift, in order: true when it was not open yet;
    /// false means another call opened it (a retry of the same order), and that call's
    /// runtime, or the next owner, answers for its event.
    ///
    /// # Errors
    /// As [`SnapshotStore::save`].
    pub async fn open_batch(
        &self,
        room: &RoomId,
        fence: FencingToken,
        gifts: &[Uuid],
    ) -> Result<Vec<bool>> {
        if gifts.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            Self::Redis(s) => s.open_batch(room, fence, gifts).await,
            Self::Sqlite(s) => s.open_batch(room, fence, gifts).await,
        }
    }

    /// The room's open gifts, in no particular order.
    ///
    /// # Errors
    /// `Unavailable` when the backend cannot be reached; `Corrupt` for an unreadable id.
    pub async fn open_gifts(&self, room: &RoomId) -> Result<Vec<Uuid>> {
        match self {
            Self::Redis(s) => s.open_gifts(room).await,
            Self::Sqlite(s) => s.open_gifts(room).await,
        }
    }

    /// The room's history, oldest first: at least the newest `max_len` entries of the last
    /// [`SnapshotStore::write_change`] (see there).
    ///
    /// # Errors
    /// `Unavailable` when the backend cannot be reached; `Corrupt` for unreadable entries.
    pub async fn load_history(&self, room: &RoomId) -> Result<Vec<HistoryEntry>> {
        match self {
            Self::Redis(s) => s.load_history(room).await,
            Self::Sqlite(s) => s.load_history(room).await,
        }
    }

    /// Creates the room: saves `bytes` like [`SnapshotStore::save`], records `owner` as its
    /// creator and `now_ms` as its touched time, in one write, unless `owner` already created
    /// `max_owned` rooms that are still stored (0: no cap), which writes nothing and answers
    /// [`Created::AtQuota`].
    ///
    /// # Errors
    /// As [`SnapshotStore::save`].
    pub async fn create(
        &self,
        room: &RoomId,
        fence: FencingToken,
        bytes: &[u8],
        owner: &UserId,
        max_owned: u32,
        now_ms: u64,
    ) -> Result<Created> {
        match self {
            Self::Redis(s) => s.create(room, fence, bytes, owner, max_owned, now_ms).await,
            Self::Sqlite(s) => s.create(room, fence, bytes, owner, max_owned, now_ms).await,
        }
    }

    /// How many of the rooms `owner` created are still stored.
    ///
    /// # Errors
    /// `Unavailable` when the backend cannot be reached.
    pub async fn owned_count(&self, owner: &UserId) -> Result<u64> {
        match self {
            Self::Redis(s) => s.owned_count(owner).await,
            Self::Sqlite(s) => s.owned_count(owner).await,
        }
    }

    /// Records that someone joined the room at `now_ms` (the touched time never goes back).
    /// Not fenced: a late touch only keeps a room a little longer, and touches no room that is
    /// not stored.
    ///
    /// # Errors
    /// `Unavailable` when the backend cannot be reached.
    pub async fn touch(&self, room: &RoomId, now_ms: u64) -> Result<()> {
        match self {
            Self::Redis(s) => s.touch(room, now_ms).await,
            Self::Sqlite(s) => s.touch(room, now_ms).await,
        }
    }

    /// Up to `limit` rooms touched before `cutoff_ms`, oldest first, skipping the first
    /// `offset`.
    ///
    /// # Errors
    /// `Unavailable` when the backend cannot be reached.
    pub async fn untouched_since(
        &self,
        cutoff_ms: u64,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<RoomId>> {
        match self {
            Self::Redis(s) => s.untouched_since(cutoff_ms, offset, limit).await,
            Self::Sqlite(s) => s.untouched_since(cutoff_ms, offset, limit).await,
        }
    }

    /// Removes the room from durable storage (state, history, open gifts, its touched time
    /// and its place in its creator's count), fenced like [`SnapshotStore::save`] (the caller
    /// holds the room's lease), if it was not touched since `cutoff_ms` and has no open gift;
    /// otherwise writes nothing. The lease store's fence counter stays, so tokens never repeat.
    ///
    /// # Errors
    /// As [`SnapshotStore::save`].
    pub async fn expire(
        &self,
        room: &RoomId,
        fence: FencingToken,
        cutoff_ms: u64,
    ) -> Result<Expired> {
        match self {
            Self::Redis(s) => s.expire(room, fence, cutoff_ms).await,
            Self::Sqlite(s) => s.expire(room, fence, cutoff_ms).await,
        }
    }

    /// Deletes the room's state and history, fenced like [`SnapshotStore::save`]. The
    /// high-water token stays, so a stale owner still cannot write afterwards.
    ///
    /// # Errors
    /// As [`SnapshotStore::save`].
    pub async fn delete(&self, room: &RoomId, fence: FencingToken) -> Result<()> {
        match self {
            Self::Redis(s) => s.delete(room, fence).await,
            Self::Sqlite(s) => s.delete(room, fence).await,
        }
    }
}

/// The outcome of [`SnapshotStore::create`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Created {
    /// The room is stored.
    Created,
    /// The creator is at the cap of stored rooms; nothing was written.
    AtQuota,
}

/// The outcome of [`SnapshotStore::expire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expired {
    /// The room was removed.
    Deleted,
    /// The room was touched since the cutoff, or has an open gift: kept.
    Kept,
}

/// One change of a room for [`SnapshotStore::write_change`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Change<'a> {
    /// The change's events, with their sequence numbers, in order.
    pub entries: &'a [(Seq, &'a [u8])],
    /// The room's state after the change, when the change moved it.
    pub state: Option<&'a [u8]>,
    /// Open gifts to close: those whose events are among `entries`, and refused ones.
    pub closed: &'a [Uuid],
    /// The room making this change has more work waiting behind it (a busy room): a paced
    /// store sends it without waiting for other rooms' changes to join its call, so that a
    /// busy room writes as fast as Redis answers.
    pub more_waiting: bool,
}

impl Change<'_> {
    fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.state.is_none() && self.closed.is_empty()
    }
}

/// Bytes of the history entry header: fence (u64 BE) then seq (u64 BE).
const HISTORY_HEADER_BYTES: usize = 16;

/// Encodes a history entry as `fence (u64 BE) ++ seq (u64 BE) ++ bytes`.
fn encode_entry(fence: FencingToken, seq: Seq, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HISTORY_HEADER_BYTES + bytes.len());
    out.extend_from_slice(&fence.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(bytes);
    out
}

/// Decodes an entry written by [`encode_entry`].
fn decode_entry(room: &RoomId, raw: Vec<u8>) -> Result<HistoryEntry> {
    let corrupt = || StorageError::corrupt_msg(format!("history entry of {room} is too short"));
    let fence = raw
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .ok_or_else(corrupt)?;
    let seq = raw
        .get(8..HISTORY_HEADER_BYTES)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .ok_or_else(corrupt)?;
    let mut bytes = Bytes::from(raw);
    Ok(HistoryEntry {
        fence: u64::from_be_bytes(fence),
        seq: u64::from_be_bytes(seq),
        bytes: bytes.split_off(HISTORY_HEADER_BYTES),
    })
}

/// Redis key of a room's state hash.
fn state_key(room: &RoomId) -> String {
    format!("room:{{{room}}}:state")
}

/// Redis key of a room's history list.
fn history_key(room: &RoomId) -> String {
    format!("room:{{{room}}}:history")
}

/// Redis key of a room's set of open gifts (16-byte ids).
fn open_gifts_key(room: &RoomId) -> String {
    format!("room:{{{room}}}:open_gifts")
}

/// Redis sorted set of every created room by touched time (unix ms).
const TOUCHED_KEY: &str = "rooms:touched";

/// Redis set of the stored rooms `owner` created.
fn owned_key(owner: &UserId) -> String {
    format!("owner:{{{owner}}}:rooms")
}

/// A gift id stored as its 16 bytes.
fn decode_gift(room: &RoomId, raw: &[u8]) -> Result<Uuid> {
    Uuid::from_slice(raw)
        .map_err(|_| StorageError::corrupt_msg(format!("open gift of {room} is not a 16-byte id")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let room = RoomId::from("r");
        let e = decode_entry(&room, encode_entry(7, 42, b"hello")).unwrap();
        assert_eq!(
            e,
            HistoryEntry {
                fence: 7,
                seq: 42,
                bytes: Bytes::from_static(b"hello")
            }
        );
        assert!(decode_entry(&room, vec![0; 15]).is_err());
        assert_eq!(decode_entry(&room, vec![0; 16]).unwrap().bytes.len(), 0);
    }
}
