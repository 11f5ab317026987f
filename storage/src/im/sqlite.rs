//! The direct-message store's SQLite engine: `<data_dir>/im.db`. Each message has a row in its
//! sender's and its recipient's log (the recipient's marked pending until delivered), so each
//! user's log is bounded on its own, as in Redis.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use protocol::UserId;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::{
    Blocked, IDS_PER_MS, IM_DB_FILE, KEEP_PER_USER, Outgoing, REQ_ID_TTL, Sent, Stored, now_ms,
};
use crate::error::Result;
use crate::key_set::KeySet;
use crate::sqlite_cell::{SqliteCell, open_wal};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS im_log (
    user TEXT NOT NULL,
    id INTEGER NOT NULL,
    msg TEXT NOT NULL,
    pending INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (user, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS im_reqs (
    user TEXT NOT NULL,
    req_id TEXT NOT NULL,
    id INTEGER NOT NULL,
    at INTEGER NOT NULL,
    record TEXT NOT NULL,
    expires INTEGER NOT NULL,
    PRIMARY KEY (user, req_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS im_blocks (
    user TEXT NOT NULL,
    blocked TEXT NOT NULL,
    PRIMARY KEY (user, blocked)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS im_seq (
    one INTEGER PRIMARY KEY CHECK (one = 0),
    last INTEGER NOT NULL
);
";

/// The SQLite engine; cheap to clone.
#[derive(Clone)]
pub struct SqliteIm {
    conn: SqliteCell,
    /// The users that may have pending messages: a user without any is answered without a
    /// turn on the file. Changed only under the connection's lock (in the closures), so that a
    /// message stored and the last pending one delivered cannot cross.
    pending: KeySet,
    /// When a send last swept every user's old messages (unix ms; 0: not yet).
    last_sweep: Arc<AtomicI64>,
}

impl std::fmt::Debug for SqliteIm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SqliteIm")
    }
}

/// [`super::oldest_kept_id`] at `now` (unix ms), as SQLite stores ids.
fn kept_floor(now: i64) -> i64 {
    let now = u64::try_from(now).unwrap_or(0);
    i64::try_from(super::oldest_kept_id(now)).unwrap_or(i64::MAX)
}

/// [`kept_floor`] now.
fn kept_floor_now() -> i64 {
    kept_floor(i64::try_from(now_ms()).unwrap_or(i64::MAX))
}

/// How often a send also deletes every user's messages past [`super::KEEP_FOR`] (a user who neither
/// sends nor receives is otherwise never trimmed).
const SWEEP_EVERY_MS: i64 = 3_600_000;

fn ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Drops `user`'s log rows beyond the newest [`KEEP_PER_USER`] and older than [`super::KEEP_FOR`].
fn trim(tx: &Connection, user: &str, now: i64) -> rusqlite::Result<()> {
    tx.execute(
        "DELETE FROM im_log WHERE user = ?1 AND id < COALESCE(
            (SELECT id FROM im_log WHERE user = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2), 0)",
        (user, i64::try_from(KEEP_PER_USER - 1).unwrap_or(i64::MAX)),
    )?;
    tx.execute(
        "DELETE FROM im_log WHERE user = ?1 AND id < ?2",
        (user, kept_floor(now)),
    )?;
    Ok(())
}

impl SqliteIm {
    pub(super) async fn open(data_dir: &Path) -> Result<Self> {
        let conn = open_wal(data_dir, IM_DB_FILE, SCHEMA, "im store").await?;
        let conn = SqliteCell::new(conn, "im store");
        let owed = conn
            .call(|c| {
                let mut stmt = c.prepare("SELECT DISTINCT user FROM im_log WHERE pending = 1")?;
                let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
                rows.collect::<rusqlite::Result<Vec<String>>>()
            })
            .await?;
        Ok(Self {
            conn,
            pending: KeySet::of(owed),
            last_sweep: Arc::new(AtomicI64::new(0)),
        })
    }

    pub(super) fn may_owe(&self, user: &UserId) -> bool {
        self.pending.may_contain(user.as_str())
    }

    async fn with<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.conn.call(f).await
    }

    pub(super) async fn send(&self, m: &Outgoing<'_>) -> Result<Sent> {
        let from = m.from.as_str().to_owned();
        let to = m.to.as_str().to_owned();
        let req_id = m.req_id.to_owned();
        let record = super::req_record(m);
        let body = super::body_fragment(m);
        let pending = self.pending.clone();
        let last_sweep = self.last_sweep.clone();
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let now = i64::try_from(now_ms()).unwrap_or(i64::MAX);
            tx.execute(
                "DELETE FROM im_reqs WHERE user = ?1 AND expires < ?2",
                (&from, now),
            )?;
            let first: Option<(i64, i64, String)> = tx
                .query_row(
                    "SELECT id, at, record FROM im_reqs WHERE user = ?1 AND req_id = ?2",
                    (&from, &req_id),
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            if let Some((id, at, rec)) = first {
                return Ok(if rec == record {
                    Sent::Repeated {
                        id: id as u64,
                        at: at as u64,
                    }
                } else {
                    Sent::Conflict
                });
            }
            let blocked = |user: &str, other: &str| -> rusqlite::Result<bool> {
                tx.query_row(
                    "SELECT 1 FROM im_blocks WHERE user = ?1 AND blocked = ?2",
                    (user, other),
                    |_| Ok(()),
                )
                .optional()
                .map(|o| o.is_some())
            };
            if blocked(&to, &from)? {
                return Ok(Sent::BlockedByRecipient);
            }
            if blocked(&from, &to)? {
                return Ok(Sent::BlockedBySender);
            }
            let per = IDS_PER_MS as i64;
            let last: i64 = tx
                .query_row("SELECT last FROM im_seq WHERE one = 0", [], |r| r.get(0))
                .optional()?
                .unwrap_or(0);
            let id = (now.saturating_mul(per)).max(last + 1);
            let at = id / per;
            tx.execute(
                "INSERT INTO im_seq (one, last) VALUES (0, ?1)
                 ON CONFLICT(one) DO UPDATE SET last = excluded.last",
                [id],
            )?;
            let json = format!("{{\"id\":{id},\"at\":{at},{body}}}");
            tx.execute(
                "INSERT INTO im_log (user, id, msg, pending) VALUES (?1, ?2, ?3, 0)",
                (&from, id, &json),
            )?;
            tx.execute(
                "INSERT INTO im_log (user, id, msg, pending) VALUES (?1, ?2, ?3, 1)",
                (&to, id, &json),
            )?;
            pending.insert(&to);
            trim(&tx, &from, now)?;
            trim(&tx, &to, now)?;
            if now.saturating_sub(last_sweep.load(Ordering::Relaxed)) >= SWEEP_EVERY_MS {
                last_sweep.store(now, Ordering::Relaxed);
                tx.execute("DELETE FROM im_log WHERE id < ?1", [kept_floor(now)])?;
                tx.execute("DELETE FROM im_reqs WHERE expires < ?1", [now])?;
            }
            tx.execute(
                "INSERT INTO im_reqs (user, req_id, id, at, record, expires)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                (&from, &req_id, id, at, &record, now + ms(REQ_ID_TTL)),
            )?;
            tx.commit()?;
            Ok(Sent::New(Stored {
                id: id as u64,
                at: at as u64,
                json,
            }))
        })
        .await
    }

    pub(super) async fn repeat(&self, m: &Outgoing<'_>) -> Result<Option<Sent>> {
        let from = m.from.as_str().to_owned();
        let req_id = m.req_id.to_owned();
        let record = super::req_record(m);
        let now = i64::try_from(now_ms()).unwrap_or(i64::MAX);
        self.with(move |conn| {
            // Unexpired only, as `send` counts them (it deletes the expired first).
            let first: Option<(i64, i64, String)> = conn
                .query_row(
                    "SELECT id, at, record FROM im_reqs
                     WHERE user = ?1 AND req_id = ?2 AND expires >= ?3",
                    (&from, &req_id, now),
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            Ok(first.map(|(id, at, rec)| {
                if rec == record {
                    Sent::Repeated {
                        id: id as u64,
                        at: at as u64,
                    }
                } else {
                    Sent::Conflict
                }
            }))
        })
        .await
    }

    pub(super) async fn undelivered(&self, user: &UserId) -> Result<Vec<(u64, String)>> {
        if !self.may_owe(user) {
            return Ok(Vec::new());
        }
        let user = user.as_str().to_owned();
        let floor = kept_floor_now();
        self.with(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, msg FROM im_log WHERE user = ?1 AND pending = 1 AND id >= ?2
                 ORDER BY id",
            )?;
            let rows = stmt.query_map((user, floor), |r| {
                Ok((r.get::<_, i64>(0)? as u64, r.get(1)?))
            })?;
            rows.collect()
        })
        .await
    }

    pub(super) async fn delivered(&self, user: &UserId, ids: &[u64]) -> Result<()> {
        let user = user.as_str().to_owned();
        let ids = ids.to_vec();
        let pending = self.pending.clone();
        self.with(move |conn| {
            let tx = conn.transaction()?;
            for id in ids {
                tx.execute(
                    "UPDATE im_log SET pending = 0 WHERE user = ?1 AND id = ?2",
                    (&user, id as i64),
                )?;
            }
            let more = tx
                .query_row(
                    "SELECT 1 FROM im_log WHERE user = ?1 AND pending = 1 LIMIT 1",
                    [&user],
                    |_| Ok(()),
                )
                .optional()?
                .is_some();
            tx.commit()?;
            if !more {
                pending.remove(&user);
            }
            Ok(())
        })
        .await
    }

    pub(super) async fn history(&self, user: &UserId, before: Option<u64>) -> Result<Vec<String>> {
        let user = user.as_str().to_owned();
        let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let floor = kept_floor_now();
        self.with(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT msg FROM im_log WHERE user = ?1 AND id < ?2 AND id >= ?3
                 ORDER BY id DESC",
            )?;
            let rows = stmt.query_map((user, before, floor), |r| r.get(0))?;
            rows.collect()
        })
        .await
    }

    pub(super) async fn block(&self, user: &UserId, other: &UserId, max: usize) -> Result<Blocked> {
        let user = user.as_str().to_owned();
        let other = other.as_str().to_owned();
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let there = tx
                .query_row(
                    "SELECT 1 FROM im_blocks WHERE user = ?1 AND blocked = ?2",
                    (&user, &other),
                    |_| Ok(()),
                )
                .optional()?
                .is_some();
            if there {
                return Ok(Blocked::Done);
            }
            let n: i64 = tx.query_row(
                "SELECT COUNT(*) FROM im_blocks WHERE user = ?1",
                [&user],
                |r| r.get(0),
            )?;
            if usize::try_from(n).unwrap_or(usize::MAX) >= max {
                return Ok(Blocked::ListFull);
            }
            tx.execute(
                "INSERT INTO im_blocks (user, blocked) VALUES (?1, ?2)",
                (&user, &other),
            )?;
            tx.commit()?;
            Ok(Blocked::Done)
        })
        .await
    }

    pub(super) async fn unblock(&self, user: &UserId, other: &UserId) -> Result<bool> {
        let user = user.as_str().to_owned();
        let other = other.as_str().to_owned();
        self.with(move |conn| {
            conn.execute(
                "DELETE FROM im_blocks WHERE user = ?1 AND blocked = ?2",
                (user, other),
            )
            .map(|n| n > 0)
        })
        .await
    }

    pub(super) async fn blocks(&self, user: &UserId) -> Result<Vec<UserId>> {
        let user = user.as_str().to_owned();
        self.with(move |conn| {
            let mut stmt = conn.prepare_cached("SELECT blocked FROM im_blocks WHERE user = ?1")?;
            let rows = stmt.query_map([user], |r| Ok(UserId::from(r.get::<_, String>(0)?)))?;
            rows.collect()
        })
        .await
    }
}
