//! Account suspensions: the users the platform shut out, each until a time or until lifted.
//! Gateways keep every current suspension in memory (a connect is checked there, not here)
//! and read the store again when its version moves: every change bumps it in the same write.
//! A change also drops the suspensions whose time has passed.
//!
//! # Engines
//! - Redis (cluster mode): the hash `chorus:{users}:suspended` (user → the suspension's JSON)
//!   and the counter `chorus:{users}:suspended:ver`, changed together by one script.
//! - SQLite (standalone mode): `<data_dir>/users.db`, tables `suspensions` and
//!   `suspensions_version`.

use std::path::Path;
use std::sync::Arc;

use ::redis::Script;
use ::redis::aio::ConnectionManager;
use protocol::UserId;
use rusqlite::{OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StorageError};
use crate::redis::map_err;
use crate::sqlite_cell::SqliteCell;

const HASH: &str = "chorus:{users}:suspended";
const VERSION: &str = "chorus:{users}:suspended:ver";

/// A suspension.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suspension {
    /// Why (shown to operators; the client is told only that it is suspended).
    pub reason: Option<String>,
    /// Until when, unix ms; `None`: until lifted.
    pub until: Option<u64>,
    /// When it was made, unix ms.
    pub at: u64,
    /// Who made it (the app's moderator id).
    pub by: Option<String>,
}

impl Suspension {
    /// Whether it holds at `now` (unix ms).
    pub fn holds_at(&self, now: u64) -> bool {
        self.until.is_none_or(|u| now < u)
    }
}

/// PUT: `KEYS = [hash, version]`, `ARGV = [user, json, now ms]`. Stores the suspension, drops
/// the ones past their time, bumps the version; the new version.
const PUT_LUA: &str = r"
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local now = tonumber(ARGV[3])
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local ok, s = pcall(cjson.decode, all[i + 1])
  local t = ok and s['until']
  if type(t) == 'number' and t <= now then redis.call('HDEL', KEYS[1], all[i]) end
end
return redis.call('INCR', KEYS[2])
";

/// LIFT: `KEYS = [hash, version]`, `ARGV = [user]`. 1 when the user was suspended (the version
/// bumped), 0 otherwise.
const LIFT_LUA: &str = r"
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('INCR', KEYS[2])
return 1
";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS suspensions (
    user TEXT PRIMARY KEY,
    until INTEGER,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS suspensions_version (
    one INTEGER PRIMARY KEY CHECK (one = 0),
    version INTEGER NOT NULL
);
INSERT OR IGNORE INTO suspensions_version (one, version) VALUES (0, 0);
";

/// The suspension store: one of the two engines, cheap to clone.
#[derive(Clone)]
pub enum SuspensionStore {
    /// Redis (cluster mode).
    Redis {
        /// The connection.
        conn: ConnectionManager,
        /// PUT and LIFT.
        scripts: Arc<(Script, Script)>,
    },
    /// SQLite (standalone mode).
    Sqlite(SqliteCell),
}

impl std::fmt::Debug for SuspensionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Redis { .. } => "SuspensionStore::Redis",
            Self::Sqlite(_) => "SuspensionStore::Sqlite",
        })
    }
}

fn corrupt(user: &str, e: &serde_json::Error) -> StorageError {
    StorageError::corrupt_msg(format!("suspension of {user}: {e}"))
}

fn to_json(s: &Suspension) -> Result<String> {
    serde_json::to_string(s).map_err(|e| StorageError::backend("suspensions", e))
}

fn sql_ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl SuspensionStore {
    /// A store on `redis`.
    pub fn redis(redis: &crate::redis::Redis) -> Self {
        Self::Redis {
            conn: redis.conn(),
            scripts: Arc::new((Script::new(PUT_LUA), Script::new(LIFT_LUA))),
        }
    }

    /// A store in `<data_dir>/users.db`.
    ///
    /// # Errors
    /// `Backend` when the directory or the database cannot be opened.
    pub async fn sqlite(data_dir: &Path) -> Result<Self> {
        let conn = crate::profiles::open_users_db(data_dir, SCHEMA).await?;
        let cell = SqliteCell::new(conn, "suspensions");
        // The users' file syncs only at checkpoints; a suspension the API acknowledged is kept
        // through a power cut too.
        cell.call(|c| c.pragma_update(None, "synchronous", "FULL"))
            .await?;
        Ok(Self::Sqlite(cell))
    }

    /// Suspends `user` (replacing a suspension they had), at `now` (unix ms); the new version.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn put(&self, user: &UserId, s: &Suspension, now: u64) -> Result<u64> {
        let json = to_json(s)?;
        match self {
            Self::Redis { conn, scripts } => {
                let mut conn = conn.clone();
                scripts
                    .0
                    .key(HASH)
                    .key(VERSION)
                    .arg(user.as_str())
                    .arg(json)
                    .arg(now)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(map_err)
            }
            Self::Sqlite(cell) => {
                let (user, until) = (user.to_string(), s.until.map(sql_ms));
                let version = cell
                    .call(move |c| {
                        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
                        tx.execute(
                            "INSERT INTO suspensions (user, until, doc) VALUES (?1, ?2, ?3)
                             ON CONFLICT (user) DO UPDATE SET until = ?2, doc = ?3",
                            rusqlite::params![user, until, json],
                        )?;
                        tx.execute(
                            "DELETE FROM suspensions WHERE until IS NOT NULL AND until <= ?1",
                            [sql_ms(now)],
                        )?;
                        let v = bump(&tx)?;
                        tx.commit()?;
                        Ok(v)
                    })
                    .await?;
                Ok(version)
            }
        }
    }

    /// Lifts `user`'s suspension; whether there was one.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn lift(&self, user: &UserId) -> Result<bool> {
        match self {
            Self::Redis { conn, scripts } => {
                let mut conn = conn.clone();
                let n: i64 = scripts
                    .1
                    .key(HASH)
                    .key(VERSION)
                    .arg(user.as_str())
                    .invoke_async(&mut conn)
                    .await
                    .map_err(map_err)?;
                Ok(n == 1)
            }
            Self::Sqlite(cell) => {
                let user = user.to_string();
                cell.call(move |c| {
                    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let n = tx.execute("DELETE FROM suspensions WHERE user = ?1", [user])?;
                    if n > 0 {
                        bump(&tx)?;
                    }
                    tx.commit()?;
                    Ok(n > 0)
                })
                .await
            }
        }
    }

    /// The version: it moves with every change.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn version(&self) -> Result<u64> {
        match self {
            Self::Redis { conn, .. } => {
                let mut conn = conn.clone();
                let v: Option<u64> = ::redis::cmd("GET")
                    .arg(VERSION)
                    .query_async(&mut conn)
                    .await
                    .map_err(map_err)?;
                Ok(v.unwrap_or(0))
            }
            Self::Sqlite(cell) => {
                let v = cell
                    .call(|c| {
                        c.query_row(
                            "SELECT version FROM suspensions_version WHERE one = 0",
                            [],
                            |r| r.get::<_, i64>(0),
                        )
                        .optional()
                    })
                    .await?;
                Ok(v.and_then(|v| u64::try_from(v).ok()).unwrap_or(0))
            }
        }
    }

    /// Every stored suspension (some may be past their time) with the version they are of.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails; `Corrupt` for an entry that does not
    /// parse.
    pub async fn all(&self) -> Result<(u64, Vec<(UserId, Suspension)>)> {
        let (version, rows): (u64, Vec<(String, String)>) = match self {
            Self::Redis { conn, .. } => {
                let mut conn = conn.clone();
                let (v, rows): (Option<u64>, Vec<(String, String)>) = ::redis::pipe()
                    .atomic()
                    .cmd("GET")
                    .arg(VERSION)
                    .cmd("HGETALL")
                    .arg(HASH)
                    .query_async(&mut conn)
                    .await
                    .map_err(map_err)?;
                (v.unwrap_or(0), rows)
            }
            Self::Sqlite(cell) => {
                cell.call(|c| {
                    let tx = c.transaction()?;
                    let v: i64 = tx.query_row(
                        "SELECT version FROM suspensions_version WHERE one = 0",
                        [],
                        |r| r.get(0),
                    )?;
                    let rows = {
                        let mut stmt = tx.prepare("SELECT user, doc FROM suspensions")?;
                        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
                        rows.collect::<rusqlite::Result<Vec<(String, String)>>>()?
                    };
                    Ok((u64::try_from(v).unwrap_or(0), rows))
                })
                .await?
            }
        };
        let all = rows
            .into_iter()
            .map(|(user, doc)| {
                let s = serde_json::from_str(&doc).map_err(|e| corrupt(&user, &e))?;
                Ok((UserId::from(user), s))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((version, all))
    }
}

/// Bumps the SQLite version in `tx`; the new one.
fn bump(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<u64> {
    let v: i64 = tx.query_row(
        "UPDATE suspensions_version SET version = version + 1 WHERE one = 0 RETURNING version",
        [],
        |r| r.get(0),
    )?;
    Ok(u64::try_from(v).unwrap_or(0))
}
