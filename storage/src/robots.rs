//! Robot room configurations as opaque JSON per room: what the admin API writes and every
//! shard's reconcile reads. Not fenced: a configuration is an operator's intent, not room
//! state; the room's owner reads it when it starts the room's robots.
//!
//! # Engines
//! - Redis (cluster mode): one hash, `robots:configs`, field = room id.
//! - SQLite (standalone mode): `<data_dir>/robots.db`, table `robot_configs`.

use std::path::Path;

use ::redis::aio::ConnectionManager;
use protocol::RoomId;
use rusqlite::{Connection, OptionalExtension};

use crate::error::{Result, StorageError};
use crate::redis::map_err;
use crate::sqlite_cell::SqliteCell;

/// The Redis hash holding every configuration.
const REDIS_KEY: &str = "robots:configs";

/// `replace` on Redis: `HSET` only if the field still holds `ARGV[2]`.
const REPLACE_LUA: &str = r"
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
";
/// The SQLite file in the data directory.
pub const ROBOTS_DB_FILE: &str = "robots.db";

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS robot_configs (
    room TEXT PRIMARY KEY,
    config BLOB NOT NULL
);";

/// The robot configuration store: one of the two engines, cheap to clone.
#[derive(Clone)]
pub enum RobotStore {
    /// Redis (cluster mode).
    Redis(ConnectionManager),
    /// SQLite (standalone mode).
    Sqlite(SqliteCell),
}

impl std::fmt::Debug for RobotStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Redis(_) => "RobotStore::Redis",
            Self::Sqlite(_) => "RobotStore::Sqlite",
        })
    }
}

fn backend<E: std::error::Error + Send + Sync + 'static>(e: E) -> StorageError {
    StorageError::backend("robot configs", e)
}

impl RobotStore {
    /// A store on `redis`'s shared connection.
    pub fn redis(redis: &crate::redis::Redis) -> Self {
        Self::Redis(redis.conn())
    }

    /// A store in `<data_dir>/robots.db`.
    ///
    /// # Errors
    /// `Backend` when the directory or the database cannot be opened.
    pub async fn sqlite(data_dir: &Path) -> Result<Self> {
        let dir = data_dir.to_owned();
        let conn = tokio::task::spawn_blocking(move || -> Result<Connection> {
            std::fs::create_dir_all(&dir).map_err(backend)?;
            let conn = Connection::open(dir.join(ROBOTS_DB_FILE)).map_err(backend)?;
            conn.busy_timeout(std::time::Duration::from_secs(5))
                .map_err(backend)?;
            conn.execute_batch(SCHEMA).map_err(backend)?;
            Ok(conn)
        })
        .await
        .map_err(backend)??;
        Ok(Self::Sqlite(SqliteCell::new(conn, "robot store")))
    }

    async fn with_sqlite<T, F>(conn: &SqliteCell, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        conn.call(move |c| f(c)).await
    }

    /// Writes (creates or replaces) `room`'s configuration.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn put(&self, room: &RoomId, config: Vec<u8>) -> Result<()> {
        match self {
            Self::Redis(conn) => {
                let mut conn = conn.clone();
                ::redis::cmd("HSET")
                    .arg(REDIS_KEY)
                    .arg(room.as_str())
                    .arg(config)
                    .query_async::<()>(&mut conn)
                    .await
                    .map_err(map_err)
            }
            Self::Sqlite(c) => {
                let room = room.as_str().to_owned();
                Self::with_sqlite(c, move |conn| {
                    conn.execute(
                        "INSERT INTO robot_configs (room, config) VALUES (?1, ?2)
                         ON CONFLICT(room) DO UPDATE SET config = excluded.config",
                        (room, config),
                    )
                    .map(|_| ())
                })
                .await
            }
        }
    }

    /// Writes `room`'s configuration only if it has none; whether it did (two creates at once:
    /// exactly one wins).
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn put_new(&self, room: &RoomId, config: Vec<u8>) -> Result<bool> {
        match self {
            Self::Redis(conn) => {
                let mut conn = conn.clone();
                let n: i64 = ::redis::cmd("HSETNX")
                    .arg(REDIS_KEY)
                    .arg(room.as_str())
                    .arg(config)
                    .query_async(&mut conn)
                    .await
                    .map_err(map_err)?;
                Ok(n == 1)
            }
            Self::Sqlite(c) => {
                let room = room.as_str().to_owned();
                Self::with_sqlite(c, move |conn| {
                    conn.execute(
                        "INSERT INTO robot_configs (room, config) VALUES (?1, ?2)
                         ON CONFLICT(room) DO NOTHING",
                        (room, config),
                    )
                    .map(|n| n == 1)
                })
                .await
            }
        }
    }

    /// Replaces `room`'s configuration with `config` only if it still is `was` (the bytes
    /// read before the change); whether it did. A delete or another change made since wins,
    /// and the caller reads again: an edit never brings back a configuration deleted
    /// meanwhile, nor undoes another edit.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn replace(&self, room: &RoomId, was: Vec<u8>, config: Vec<u8>) -> Result<bool> {
        match self {
            Self::Redis(conn) => {
                let mut conn = conn.clone();
                let n: i64 = ::redis::Script::new(REPLACE_LUA)
                    .key(REDIS_KEY)
                    .arg(room.as_str())
                    .arg(was)
                    .arg(config)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(map_err)?;
                Ok(n == 1)
            }
            Self::Sqlite(c) => {
                let room = room.as_str().to_owned();
                Self::with_sqlite(c, move |conn| {
                    conn.execute(
                        "UPDATE robot_configs SET config = ?3 WHERE room = ?1 AND config = ?2",
                        (room, was, config),
                    )
                    .map(|n| n == 1)
                })
                .await
            }
        }
    }

    /// `room`'s configuration, if any.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn get(&self, room: &RoomId) -> Result<Option<Vec<u8>>> {
        match self {
            Self::Redis(conn) => {
                let mut conn = conn.clone();
                ::redis::cmd("HGET")
                    .arg(REDIS_KEY)
                    .arg(room.as_str())
                    .query_async(&mut conn)
                    .await
                    .map_err(map_err)
            }
            Self::Sqlite(c) => {
                let room = room.as_str().to_owned();
                Self::with_sqlite(c, move |conn| {
                    conn.query_row(
                        "SELECT config FROM robot_configs WHERE room = ?1",
                        [room],
                        |r| r.get(0),
                    )
                    .optional()
                })
                .await
            }
        }
    }

    /// Every configuration, by room id.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn list(&self) -> Result<Vec<(RoomId, Vec<u8>)>> {
        let mut all: Vec<(RoomId, Vec<u8>)> = match self {
            Self::Redis(conn) => {
                let mut conn = conn.clone();
                let pairs: Vec<(String, Vec<u8>)> = ::redis::cmd("HGETALL")
                    .arg(REDIS_KEY)
                    .query_async(&mut conn)
                    .await
                    .map_err(map_err)?;
                pairs
                    .into_iter()
                    .map(|(r, c)| (RoomId::from(r), c))
                    .collect()
            }
            Self::Sqlite(c) => {
                Self::with_sqlite(c, |conn| {
                    let mut stmt = conn.prepare("SELECT room, config FROM robot_configs")?;
                    let rows = stmt.query_map([], |r| {
                        Ok((
                            RoomId::from(r.get::<_, String>(0)?),
                            r.get::<_, Vec<u8>>(1)?,
                        ))
                    })?;
                    rows.collect()
                })
                .await?
            }
        };
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(all)
    }

    /// Deletes `room`'s configuration; whether there was one.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn delete(&self, room: &RoomId) -> Result<bool> {
        match self {
            Self::Redis(conn) => {
                let mut conn = conn.clone();
                let n: i64 = ::redis::cmd("HDEL")
                    .arg(REDIS_KEY)
                    .arg(room.as_str())
                    .query_async(&mut conn)
                    .await
                    .map_err(map_err)?;
                Ok(n > 0)
            }
            Self::Sqlite(c) => {
                let room = room.as_str().to_owned();
                Self::with_sqlite(c, move |conn| {
                    conn.execute("DELETE FROM robot_configs WHERE room = ?1", [room])
                        .map(|n| n > 0)
                })
                .await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]
    use super::*;

    #[tokio::test]
    async fn sqlite_configs_put_get_list_delete_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let s = RobotStore::sqlite(dir.path()).await.unwrap();
        let (a, b) = (RoomId::from("a"), RoomId::from("b"));
        assert_eq!(s.get(&a).await.unwrap(), None);
        s.put(&b, b"{\"v\":1}".to_vec()).await.unwrap();
        s.put(&a, b"{\"v\":2}".to_vec()).await.unwrap();
        s.put(&a, b"{\"v\":3}".to_vec()).await.unwrap();
        assert!(!s.put_new(&a, b"{}".to_vec()).await.unwrap(), "a has one");
        assert!(s.put_new(&RoomId::from("c"), b"{}".to_vec()).await.unwrap());
        assert!(s.delete(&RoomId::from("c")).await.unwrap());
        assert_eq!(s.get(&a).await.unwrap(), Some(b"{\"v\":3}".to_vec()));
        let again = RobotStore::sqlite(dir.path()).await.unwrap();
        let rooms: Vec<RoomId> = again
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|(r, _)| r)
            .collect();
        assert_eq!(rooms, [a.clone(), b.clone()]);
        assert!(again.delete(&a).await.unwrap());
        assert!(!again.delete(&a).await.unwrap());
        assert_eq!(again.list().await.unwrap().len(), 1);
    }
}
