//! Users' stored profiles: what `user.update` and the admin API set, and the profile claims of
//! the user's latest token, kept apart so that a field the user set or cleared wins over the
//! claims of every later token, and a claim nobody overrode still shows.
//!
//! A stored field is unset (never written), set, or cleared (an empty string: the user cleared
//! it, so the token's claim does not show either). [`StoredProfile::effective`] is the profile
//! others see.
//!
//! # Engines
//! - Redis (cluster mode): one hash per user, `users:profile:{user}`, fields `name`, `avatar`,
//!   `region` (the user's own) and `c:name`, `c:avatar`, `c:region` (token claims). An update
//!   is one `HSET`, so two updates of different fields both stay.
//! - SQLite (standalone mode): `<data_dir>/users.db`, table `profiles`, one row per user.

use std::path::Path;

use ::redis::aio::ConnectionManager;
use protocol::UserId;
use protocol::client::Profile;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use crate::error::{Result, StorageError};
use crate::key_set::KeySet;
use crate::redis::map_err;
use crate::sqlite_cell::SqliteCell;

/// The SQLite file in the data directory that holds profiles and follows.
pub const USERS_DB_FILE: &str = "users.db";

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS profiles (
    user TEXT PRIMARY KEY,
    name TEXT, avatar TEXT, region TEXT,
    c_name TEXT, c_avatar TEXT, c_region TEXT
);";

/// The Redis hash of `user`'s profile.
fn redis_key(user: &UserId) -> String {
    format!("users:profile:{user}")
}

/// What is stored for one user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredProfile {
    /// What the user (or an operator) set; `Some("")` is a cleared field.
    pub own: Profile,
    /// The profile claims of the user's latest token.
    pub claims: Profile,
}

impl StoredProfile {
    /// The profile others see: the claims with the user's own fields over them.
    pub fn effective(&self) -> Profile {
        self.claims.merged(&self.own)
    }
}

/// The profile store: one of the two engines, cheap to clone.
#[derive(Clone)]
pub enum ProfileStore {
    /// Redis (cluster mode).
    Redis(ConnectionManager),
    /// SQLite (standalone mode), with the users that have a row ([`KeySet`]: a user
    /// without one is read without touching the file).
    Sqlite(SqliteCell, KeySet),
}

impl std::fmt::Debug for ProfileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Redis(_) => "ProfileStore::Redis",
            Self::Sqlite(..) => "ProfileStore::Sqlite",
        })
    }
}

fn backend<E: std::error::Error + Send + Sync + 'static>(e: E) -> StorageError {
    StorageError::backend("profiles", e)
}

/// Opens (creating it and `schema`) `<dir>/users.db`, shared by the user stores.
pub(crate) async fn open_users_db(dir: &Path, schema: &'static str) -> Result<Connection> {
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || -> Result<Connection> {
        std::fs::create_dir_all(&dir).map_err(backend)?;
        let conn = Connection::open(dir.join(USERS_DB_FILE)).map_err(backend)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(backend)?;
        // Two stores write the file through their own connections: WAL lets a reader run
        // beside a writer.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(backend)?;
        // No sync per commit: a write survives a crash of the process (the log is in the OS),
        // and a power cut may lose the last ones; profiles and follows are not money, and a
        // sync per follow caps a node at a few hundred follows a second.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(backend)?;
        conn.execute_batch(schema).map_err(backend)?;
        Ok(conn)
    })
    .await
    .map_err(backend)?
}

/// Runs `f` on the store's SQLite connection (see [`SqliteCell`]).
pub(crate) async fn with_sqlite<T, F>(conn: &SqliteCell, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
{
    conn.call(f).await
}

/// Redis hash fields of the own profile and of the claims.
const OWN: [&str; 3] = ["name", "avatar", "region"];
const CLAIMS: [&str; 3] = ["c:name", "c:avatar", "c:region"];

fn fields(p: &Profile) -> [&Option<String>; 3] {
    [&p.name, &p.avatar, &p.region]
}

fn from_pairs(pairs: Vec<(String, String)>) -> StoredProfile {
    let mut s = StoredProfile::default();
    for (k, v) in pairs {
        let slot = match k.as_str() {
            "name" => &mut s.own.name,
            "avatar" => &mut s.own.avatar,
            "region" => &mut s.own.region,
            "c:name" => &mut s.claims.name,
            "c:avatar" => &mut s.claims.avatar,
            "c:region" => &mut s.claims.region,
            _ => continue,
        };
        *slot = Some(v);
    }
    s
}

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredProfile> {
    Ok(StoredProfile {
        own: Profile {
            name: r.get(0)?,
            avatar: r.get(1)?,
            region: r.get(2)?,
        },
        claims: Profile {
            name: r.get(3)?,
            avatar: r.get(4)?,
            region: r.get(5)?,
        },
    })
}

const SELECT: &str =
    "SELECT name, avatar, region, c_name, c_avatar, c_region FROM profiles WHERE user = ?1";

impl ProfileStore {
    /// A store on `redis`'s shared connection.
    pub fn redis(redis: &crate::redis::Redis) -> Self {
        Self::Redis(redis.conn())
    }

    /// A store in `<data_dir>/users.db`.
    ///
    /// # Errors
    /// `Backend` when the directory or the database cannot be opened.
    pub async fn sqlite(data_dir: &Path) -> Result<Self> {
        let conn = open_users_db(data_dir, SCHEMA).await?;
        let cell = SqliteCell::new(conn, "profiles");
        let users = with_sqlite(&cell, |conn| {
            let mut stmt = conn.prepare("SELECT user FROM profiles")?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect::<rusqlite::Result<Vec<String>>>()
        })
        .await?;
        Ok(Self::Sqlite(cell, KeySet::of(users)))
    }

    /// Whether `user` may have something stored: false only when certainly nothing is (a
    /// standalone store without a row for the user), so a connect can skip the read.
    pub fn may_have(&self, user: &UserId) -> bool {
        match self {
            Self::Redis(_) => true,
            Self::Sqlite(_, rows) => rows.may_contain(user.as_str()),
        }
    }

    /// What is stored for `user` (all unset when nothing is).
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn get(&self, user: &UserId) -> Result<StoredProfile> {
        let mut all = self.get_many(std::slice::from_ref(user)).await?;
        Ok(all.pop().unwrap_or_default())
    }

    /// What is stored for each of `users`, in their order (one round trip in Redis).
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn get_many(&self, users: &[UserId]) -> Result<Vec<StoredProfile>> {
        match self {
            Self::Redis(conn) => {
                let mut conn = conn.clone();
                let mut pipe = ::redis::pipe();
                for u in users {
                    pipe.cmd("HGETALL").arg(redis_key(u));
                }
                let all: Vec<Vec<(String, String)>> =
                    pipe.query_async(&mut conn).await.map_err(map_err)?;
                Ok(all.into_iter().map(from_pairs).collect())
            }
            Self::Sqlite(c, rows) => {
                // Only the users that may have a row are read; none: no turn on the file.
                let users: Vec<Option<String>> = users
                    .iter()
                    .map(|u| rows.may_contain(u.as_str()).then(|| u.as_str().to_owned()))
                    .collect();
                if users.iter().all(Option::is_none) {
                    return Ok(vec![StoredProfile::default(); users.len()]);
                }
                with_sqlite(c, move |conn| {
                    let mut stmt = conn.prepare_cached(SELECT)?;
                    users
                        .iter()
                        .map(|u| match u {
                            Some(u) => stmt
                                .query_row([u], from_row)
                                .optional()
                                .map(Option::unwrap_or_default),
                            None => Ok(StoredProfile::default()),
                        })
                        .collect()
                })
                .await
            }
        }
    }

    /// Applies `update` to `user`'s own profile (the fields it sets; an empty string clears a
    /// field, and stays stored as cleared) and answers what is stored after it. The caller
    /// validates `update` first.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn update(&self, user: &UserId, update: &Profile) -> Result<StoredProfile> {
        match self {
            Self::Redis(conn) => {
                let mut conn = conn.clone();
                let key = redis_key(user);
                let mut pipe = ::redis::pipe();
                pipe.atomic();
                let set: Vec<(&str, &String)> = OWN
                    .iter()
                    .zip(fields(update))
                    .filter_map(|(k, v)| v.as_ref().map(|v| (*k, v)))
                    .collect();
                if !set.is_empty() {
                    pipe.cmd("HSET").arg(&key).arg(set).ignore();
                }
                pipe.cmd("HGETALL").arg(&key);
                let (all,): (Vec<(String, String)>,) =
                    pipe.query_async(&mut conn).await.map_err(map_err)?;
                Ok(from_pairs(all))
            }
            Self::Sqlite(c, rows) => {
                // Noted before the write: a read meanwhile looks, and finds the row or not.
                rows.insert(user.as_str());
                let user = user.as_str().to_owned();
                let u = update.clone();
                with_sqlite(c, move |conn| {
                    // Immediate: see `follows` (two connections share users.db).
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    tx.execute(
                        "INSERT INTO profiles (user, name, avatar, region) VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT(user) DO UPDATE SET
                           name = COALESCE(excluded.name, name),
                           avatar = COALESCE(excluded.avatar, avatar),
                           region = COALESCE(excluded.region, region)",
                        (&user, &u.name, &u.avatar, &u.region),
                    )?;
                    let after = tx.query_row(SELECT, [&user], from_row)?;
                    tx.commit()?;
                    Ok(after)
                })
                .await
            }
        }
    }

    /// Replaces the token claims stored for `user` with `claims`.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn set_claims(&self, user: &UserId, claims: &Profile) -> Result<()> {
        match self {
            Self::Redis(conn) => {
                let mut conn = conn.clone();
                let key = redis_key(user);
                let mut pipe = ::redis::pipe();
                pipe.atomic();
                pipe.cmd("HDEL").arg(&key).arg(&CLAIMS[..]).ignore();
                let set: Vec<(&str, &String)> = CLAIMS
                    .iter()
                    .zip(fields(claims))
                    .filter_map(|(k, v)| v.as_ref().map(|v| (*k, v)))
                    .collect();
                if !set.is_empty() {
                    pipe.cmd("HSET").arg(&key).arg(set).ignore();
                }
                pipe.query_async::<()>(&mut conn).await.map_err(map_err)
            }
            Self::Sqlite(c, rows) => {
                rows.insert(user.as_str());
                let user = user.as_str().to_owned();
                let p = claims.clone();
                with_sqlite(c, move |conn| {
                    conn.execute(
                        "INSERT INTO profiles (user, c_name, c_avatar, c_region)
                         VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT(user) DO UPDATE SET c_name = excluded.c_name,
                           c_avatar = excluded.c_avatar, c_region = excluded.c_region",
                        (&user, &p.name, &p.avatar, &p.region),
                    )
                    .map(drop)
                })
                .await
            }
        }
    }
}
