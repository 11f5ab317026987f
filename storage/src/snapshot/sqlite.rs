//! SQLite snapshot engine for standalone mode: `<data_dir>/rooms.db`.
//!
//! Calls run on tokio's blocking pool (`spawn_blocking`) over one connection behind an async
//! mutex: callers wait as futures, and only the one holding the connection takes a pool thread
//! (a lock taken inside the pool would park one thread per waiting caller).
//!
//! # Fencing
//! Standalone mode keeps its leases in an [`InProcessLeases`] store; this engine holds a clone
//! of it. A write with token `F` first checks that `F` is the live lease's token there, then, in
//! one SQLite transaction, that `F` is not below the room's stored high-water token, raises the
//! high-water token and writes. The two checks are not one atomic step: a lease that expires
//! between them lets one last write of the old owner through, but only before the new owner's
//! first write (which raises the high-water token above it) — the same guarantee a Redis
//! `hwm` gives, and in standalone mode the only possible "other owner" is this same process.

use std::path::Path;
use std::sync::Arc;

use tokio::sync::Mutex;

use bytes::Bytes;
use protocol::{FencingToken, RoomId, UserId};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use uuid::Uuid;

use super::{Change, Created, Expired, HistoryEntry, Stored, decode_gift};
use crate::error::{Result, StorageError};
use crate::lease::InProcessLeases;

/// The database file inside the data directory.
pub const ROOMS_DB_FILE: &str = "rooms.db";

/// How long a statement waits for a lock held by another connection to the same file (e.g. an
/// operator's `sqlite3` shell) before failing; our own calls are serialized by the mutex.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Page cache of the rooms database, in KiB (SQLite's negative `cache_size` unit), against
/// SQLite's default of 2 MiB. A room's row is read once, when its runtime starts, and written
/// on its changes; a cache that kept every running room's pages held ~1.4 KiB per room, which
/// rooms of ten members pay per member while idle. Writes and the open gifts' small b-tree
/// stay in this cache; pages that miss it are read back from the WAL or the OS's file cache.
const PAGE_CACHE_KIB: i64 = 256;

/// Schema: one row of state per room, the bounded history, and the open gifts.
const SCHEMA: &str = "
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
CREATE TABLE IF NOT EXISTS room_state (
    room    TEXT PRIMARY KEY,
    hwm     INTEGER NOT NULL,
    fence   INTEGER,
    data    BLOB,
    owner   TEXT,
    touched INTEGER
);
CREATE TABLE IF NOT EXISTS room_history (
    id    INTEGER PRIMARY KEY AUTOINCREMENT,
    room  TEXT NOT NULL,
    fence INTEGER NOT NULL,
    seq   INTEGER NOT NULL,
    data  BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS room_history_by_room ON room_history (room, id);
CREATE TABLE IF NOT EXISTS open_gift (
    room    TEXT NOT NULL,
    gift_id BLOB NOT NULL,
    PRIMARY KEY (room, gift_id)
) WITHOUT ROWID;
";

/// Adds the creator and touched columns to a database made before they existed; its rooms
/// count as touched now (retention then removes those nobody joins) and for no creator.
fn migrate(conn: &Connection) -> Result<()> {
    let has_touched = conn
        .prepare("SELECT 1 FROM pragma_table_info('room_state') WHERE name = 'touched'")
        .and_then(|mut s| s.exists([]))
        .map_err(backend)?;
    if !has_touched {
        let now = to_sql(now_ms())?;
        conn.execute_batch("ALTER TABLE room_state ADD COLUMN owner TEXT;")
            .map_err(backend)?;
        conn.execute_batch("ALTER TABLE room_state ADD COLUMN touched INTEGER;")
            .map_err(backend)?;
        conn.execute(
            "UPDATE room_state SET touched = ?1 WHERE data IS NOT NULL",
            [now],
        )
        .map_err(backend)?;
    }
    conn.execute_batch(
        "CREATE INDEX IF NOT EXISTS room_state_by_touched ON room_state (touched);
         CREATE INDEX IF NOT EXISTS room_state_by_owner ON room_state (owner);",
    )
    .map_err(backend)
}

/// A time in unix milliseconds as SQLite's integer (times past 2^63 ms are all "never").
fn clamp_ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// Now as unix milliseconds.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// An opened database and every room's stored high-water token.
type Opened = (Connection, Vec<(RoomId, FencingToken)>);

/// SQLite-backed snapshots; clones share the connection.
#[derive(Clone)]
pub struct SqliteSnapshots {
    conn: Arc<Mutex<Connection>>,
    leases: InProcessLeases,
}

impl std::fmt::Debug for SqliteSnapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteSnapshots").finish_non_exhaustive()
    }
}

fn backend<E: std::error::Error + Send + Sync + 'static>(e: E) -> StorageError {
    StorageError::backend("sqlite snapshots", e)
}

/// A token as SQLite's signed integer (tokens stay far below 2^63).
fn to_sql(n: u64) -> Result<i64> {
    i64::try_from(n).map_err(|_| StorageError::backend_msg(format!("{n} does not fit SQLite")))
}

fn from_sql(n: i64) -> Result<u64> {
    u64::try_from(n).map_err(|_| StorageError::corrupt_msg(format!("negative stored token {n}")))
}

impl SqliteSnapshots {
    /// Opens (creating if needed) `<data_dir>/rooms.db`; writes are fenced by `leases`.
    ///
    /// Seeds `leases` with every room's stored high-water token
    /// ([`InProcessLeases::raise_fence_floor`]), so tokens granted after a restart stay above
    /// the ones that already wrote and the new owner's writes are not fenced out.
    ///
    /// # Errors
    /// `Backend` when the directory or the database cannot be opened.
    pub async fn open(data_dir: &Path, leases: InProcessLeases) -> Result<Self> {
        let path = data_dir.join(ROOMS_DB_FILE);
        let dir = data_dir.to_owned();
        let conn = tokio::task::spawn_blocking(move || -> Result<Opened> {
            std::fs::create_dir_all(&dir).map_err(backend)?;
            let conn = Connection::open(&path).map_err(backend)?;
            conn.busy_timeout(BUSY_TIMEOUT).map_err(backend)?;
            conn.pragma_update(None, "cache_size", -PAGE_CACHE_KIB)
                .map_err(backend)?;
            conn.execute_batch(SCHEMA).map_err(backend)?;
            migrate(&conn)?;
            let floors = {
                let mut stmt = conn
                    .prepare("SELECT room, hwm FROM room_state")
                    .map_err(backend)?;
                let rows = stmt
                    .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                    .map_err(backend)?;
                let mut floors = Vec::new();
                for row in rows {
                    let (room, hwm) = row.map_err(backend)?;
                    floors.push((RoomId::from(room), from_sql(hwm)?));
                }
                floors
            };
            Ok((conn, floors))
        })
        .await
        .map_err(backend)??;
        let (conn, floors) = conn;
        for (room, floor) in &floors {
            leases.raise_fence_floor(room, *floor);
        }
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            leases,
        })
    }

    /// Runs `f` on the connection on the blocking pool.
    async fn with_conn<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let mut guard = Arc::clone(&self.conn).lock_owned().await;
        tokio::task::spawn_blocking(move || f(&mut guard))
            .await
            .map_err(backend)?
    }

    /// Checks the live lease, then runs `write` in a transaction that first checks and raises
    /// the high-water token.
    async fn fenced<T, F>(&self, room: &RoomId, fence: FencingToken, write: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>, &str, i64) -> rusqlite::Result<T> + Send + 'static,
    {
        if !self.leases.is_live(room, fence) {
            return Err(StorageError::Fenced { token: fence });
        }
        let room = room.as_str().to_owned();
        let f = to_sql(fence)?;
        self.with_conn(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend)?;
            let hwm: Option<i64> = tx
                .query_row("SELECT hwm FROM room_state WHERE room = ?1", [&room], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(backend)?;
            if hwm.is_some_and(|h| f < h) {
                return Err(StorageError::Fenced { token: fence });
            }
            tx.execute(
                "INSERT INTO room_state (room, hwm) VALUES (?1, ?2)
                 ON CONFLICT (room) DO UPDATE SET hwm = excluded.hwm",
                params![room, f],
            )
            .map_err(backend)?;
            let written = write(&tx, &room, f).map_err(backend)?;
            tx.commit().map_err(backend)?;
            Ok(written)
        })
        .await
    }

    /// See [`super::SnapshotStore::exists`].
    ///
    /// # Errors
    /// `Backend`.
    pub async fn exists(&self, room: &RoomId) -> Result<bool> {
        let room = room.as_str().to_owned();
        self.with_conn(move |conn| {
            conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM room_state WHERE room = ?1 AND data IS NOT NULL)",
                [&room],
                |r| r.get(0),
            )
            .map_err(backend)
        })
        .await
    }

    /// See [`super::SnapshotStore::load`].
    ///
    /// # Errors
    /// `Backend`, `Corrupt`.
    pub async fn load(&self, room: &RoomId) -> Result<Option<Stored>> {
        let room = room.as_str().to_owned();
        self.with_conn(move |conn| {
            let row: Option<(Option<i64>, Option<Vec<u8>>)> = conn
                .query_row(
                    "SELECT fence, data FROM room_state WHERE room = ?1",
                    [&room],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(backend)?;
            match row {
                Some((Some(fence), Some(data))) => Ok(Some(Stored {
                    fence: from_sql(fence)?,
                    bytes: Bytes::from(data),
                })),
                Some((None, None)) | None => Ok(None),
                Some(_) => Err(StorageError::corrupt_msg(format!(
                    "state of {room} has only one of fence and data"
                ))),
            }
        })
        .await
    }

    /// See [`super::SnapshotStore::save`].
    ///
    /// # Errors
    /// `Fenced`, `Backend`.
    pub async fn save(&self, room: &RoomId, fence: FencingToken, bytes: &[u8]) -> Result<()> {
        let data = bytes.to_vec();
        self.fenced(room, fence, move |tx, room, f| {
            tx.execute(
                "UPDATE room_state SET fence = ?2, data = ?3 WHERE room = ?1",
                params![room, f, data],
            )
            .map(|_| ())
        })
        .await
    }

    /// See [`super::SnapshotStore::write_change`].
    ///
    /// # Errors
    /// `Fenced`, `Backend`.
    pub async fn write_change(
        &self,
        room: &RoomId,
        fence: FencingToken,
        change: Change<'_>,
        max_len: usize,
    ) -> Result<()> {
        let state = change.state.map(<[u8]>::to_vec);
        let entries = change
            .entries
            .iter()
            .map(|&(seq, bytes)| Ok((to_sql(seq)?, bytes.to_vec())))
            .collect::<Result<Vec<_>>>()?;
        let closed = change.closed.to_vec();
        let keep = i64::try_from(max_len).unwrap_or(i64::MAX);
        self.fenced(room, fence, move |tx, room, f| {
            for gift in &closed {
                tx.execute(
                    "DELETE FROM open_gift WHERE room = ?1 AND gift_id = ?2",
                    params![room, gift.as_bytes().as_slice()],
                )?;
            }
            for (seq, data) in &entries {
                tx.execute(
                    "INSERT INTO room_history (room, fence, seq, data) VALUES (?1, ?2, ?3, ?4)",
                    params![room, f, seq, data],
                )?;
            }
            if !entries.is_empty() {
                tx.execute(
                    "DELETE FROM room_history WHERE room = ?1 AND id <= (
                         SELECT id FROM room_history WHERE room = ?1
                         ORDER BY id DESC LIMIT 1 OFFSET ?2)",
                    params![room, keep],
                )?;
            }
            if let Some(data) = &state {
                tx.execute(
                    "UPDATE room_state SET fence = ?2, data = ?3 WHERE room = ?1",
                    params![room, f, data],
                )?;
            }
            Ok(())
        })
        .await
    }

    /// See [`super::SnapshotStore::open_batch`].
    ///
    /// # Errors
    /// `Fenced`, `Backend`.
    pub async fn open_batch(
        &self,
        room: &RoomId,
        fence: FencingToken,
        gifts: &[Uuid],
    ) -> Result<Vec<bool>> {
        let gifts = gifts.to_vec();
        self.fenced(room, fence, move |tx, room, _| {
            let mut insert = tx.prepare_cached(
                "INSERT OR IGNORE INTO open_gift (room, gift_id) VALUES (?1, ?2)",
            )?;
            gifts
                .iter()
                .map(|g| {
                    insert
                        .execute(params![room, g.as_bytes().as_slice()])
                        .map(|added| added == 1)
                })
                .collect()
        })
        .await
    }

    /// See [`super::SnapshotStore::open_gifts`].
    ///
    /// # Errors
    /// `Backend`, `Corrupt`.
    pub async fn open_gifts(&self, room: &RoomId) -> Result<Vec<Uuid>> {
        let id = room.clone();
        self.with_conn(move |conn| {
            let mut stmt = conn
                .prepare_cached("SELECT gift_id FROM open_gift WHERE room = ?1")
                .map_err(backend)?;
            let rows = stmt
                .query_map([id.as_str()], |r| r.get::<_, Vec<u8>>(0))
                .map_err(backend)?;
            let mut out = Vec::new();
            for row in rows {
                out.push(decode_gift(&id, &row.map_err(backend)?)?);
            }
            Ok(out)
        })
        .await
    }

    /// See [`super::SnapshotStore::load_history`].
    ///
    /// # Errors
    /// `Backend`, `Corrupt`.
    pub async fn load_history(&self, room: &RoomId) -> Result<Vec<HistoryEntry>> {
        let room = room.as_str().to_owned();
        self.with_conn(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT fence, seq, data FROM room_history WHERE room = ?1 ORDER BY id",
                )
                .map_err(backend)?;
            let rows = stmt
                .query_map([&room], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, Vec<u8>>(2)?,
                    ))
                })
                .map_err(backend)?;
            let mut out = Vec::new();
            for row in rows {
                let (fence, seq, data) = row.map_err(backend)?;
                out.push(HistoryEntry {
                    fence: from_sql(fence)?,
                    seq: from_sql(seq)?,
                    bytes: Bytes::from(data),
                });
            }
            Ok(out)
        })
        .await
    }

    /// See [`super::SnapshotStore::delete`].
    ///
    /// # Errors
    /// `Fenced`, `Backend`.
    pub async fn delete(&self, room: &RoomId, fence: FencingToken) -> Result<()> {
        self.fenced(room, fence, |tx, room, _| {
            tx.execute(
                "UPDATE room_state SET fence = NULL, data = NULL WHERE room = ?1",
                [room],
            )?;
            tx.execute("DELETE FROM room_history WHERE room = ?1", [room])?;
            tx.execute("DELETE FROM open_gift WHERE room = ?1", [room])
                .map(|_| ())
        })
        .await
    }

    /// See [`super::SnapshotStore::create`].
    ///
    /// # Errors
    /// `Fenced`, `Backend`.
    pub async fn create(
        &self,
        room: &RoomId,
        fence: FencingToken,
        bytes: &[u8],
        owner: &UserId,
        max_owned: u32,
        now_ms: u64,
    ) -> Result<Created> {
        let data = bytes.to_vec();
        let owner = owner.as_str().to_owned();
        let now = clamp_ms(now_ms);
        self.fenced(room, fence, move |tx, room, f| {
            if max_owned > 0 {
                let owned: i64 = tx.query_row(
                    "SELECT COUNT(*) FROM room_state
                     WHERE owner = ?1 AND data IS NOT NULL AND room <> ?2",
                    params![owner, room],
                    |r| r.get(0),
                )?;
                if owned >= i64::from(max_owned) {
                    // The fence check made a row for the room: leave none behind.
                    tx.execute(
                        "DELETE FROM room_state WHERE room = ?1 AND data IS NULL",
                        [room],
                    )?;
                    return Ok(Created::AtQuota);
                }
            }
            tx.execute(
                "UPDATE room_state SET fence = ?2, data = ?3, owner = ?4, touched = ?5
                 WHERE room = ?1",
                params![room, f, data, owner, now],
            )?;
            Ok(Created::Created)
        })
        .await
    }

    /// See [`super::SnapshotStore::owned_count`].
    ///
    /// # Errors
    /// `Backend`.
    pub async fn owned_count(&self, owner: &UserId) -> Result<u64> {
        let owner = owner.as_str().to_owned();
        let n: i64 = self
            .with_conn(move |conn| {
                conn.query_row(
                    "SELECT COUNT(*) FROM room_state WHERE owner = ?1 AND data IS NOT NULL",
                    [&owner],
                    |r| r.get(0),
                )
                .map_err(backend)
            })
            .await?;
        from_sql(n)
    }

    /// See [`super::SnapshotStore::touch`].
    ///
    /// # Errors
    /// `Backend`.
    pub async fn touch(&self, room: &RoomId, now_ms: u64) -> Result<()> {
        let room = room.as_str().to_owned();
        let now = clamp_ms(now_ms);
        self.with_conn(move |conn| {
            conn.execute(
                "UPDATE room_state SET touched = MAX(COALESCE(touched, 0), ?2)
                 WHERE room = ?1 AND data IS NOT NULL",
                params![room, now],
            )
            .map(|_| ())
            .map_err(backend)
        })
        .await
    }

    /// See [`super::SnapshotStore::untouched_since`].
    ///
    /// # Errors
    /// `Backend`.
    pub async fn untouched_since(
        &self,
        cutoff_ms: u64,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<RoomId>> {
        let cutoff = clamp_ms(cutoff_ms);
        let offset = i64::try_from(offset).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with_conn(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT room FROM room_state WHERE touched < ?1
                     ORDER BY touched, room LIMIT ?2 OFFSET ?3",
                )
                .map_err(backend)?;
            let rows = stmt
                .query_map(params![cutoff, limit, offset], |r| r.get::<_, String>(0))
                .map_err(backend)?;
            let mut out = Vec::new();
            for row in rows {
                out.push(RoomId::from(row.map_err(backend)?));
            }
            Ok(out)
        })
        .await
    }

    /// See [`super::SnapshotStore::expire`]. The room's row goes entirely (its high-water
    /// token too: the in-process lease store keeps the room's tokens rising while the process
    /// runs, and after a restart no earlier owner is left to fence out).
    ///
    /// # Errors
    /// `Fenced`, `Backend`.
    pub async fn expire(
        &self,
        room: &RoomId,
        fence: FencingToken,
        cutoff_ms: u64,
    ) -> Result<Expired> {
        let cutoff = clamp_ms(cutoff_ms);
        self.fenced(room, fence, move |tx, room, _| {
            let (touched, stored): (Option<i64>, bool) = tx.query_row(
                "SELECT touched, data IS NOT NULL FROM room_state WHERE room = ?1",
                [room],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let open: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM open_gift WHERE room = ?1)",
                [room],
                |r| r.get(0),
            )?;
            if open || (stored && touched.is_none_or(|t| t >= cutoff)) {
                return Ok(Expired::Kept);
            }
            tx.execute("DELETE FROM room_history WHERE room = ?1", [room])?;
            tx.execute("DELETE FROM open_gift WHERE room = ?1", [room])?;
            tx.execute("DELETE FROM room_state WHERE room = ?1", [room])?;
            Ok(Expired::Deleted)
        })
        .await
    }
}
