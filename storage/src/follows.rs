//! Who follows whom, durable, paged newest first.
//!
//! A follow is a pair (follower, followee) with the time it was made, in milliseconds. Following
//! twice is one follow (the first time stays); a user follows at most a bound of users (the
//! caller's, checked atomically with the write). Pages run newest first; a cursor is the
//! (time, user) of the last entry given, and the next page starts strictly after it in that
//! order, so follows made or removed while a client pages never make it skip or repeat an
//! entry that stayed.
//!
//! # Engines
//! - Redis (cluster mode): two sorted sets per user, `follows:out:{user}` (whom they follow)
//!   and `follows:in:{user}` (their followers), scored by time; adding is one script (the
//!   bound, the idempotence and both sets at once), removing one `MULTI`.
//! - SQLite (standalone mode): `<data_dir>/users.db`, table `follows`, indexed both ways, and
//!   `follow_counts`, kept in the same transactions, so counts cost one row read.

use std::path::Path;
use std::sync::Arc;

use ::redis::aio::ConnectionManager;
use protocol::UserId;
use rusqlite::{OptionalExtension, TransactionBehavior};

use crate::error::Result;
use crate::profiles::{open_users_db, with_sqlite};
use crate::redis::map_err;
use crate::sqlite_cell::SqliteCell;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS follows (
    follower TEXT NOT NULL,
    followee TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (follower, followee)
);
CREATE INDEX IF NOT EXISTS follows_out ON follows (follower, at, followee);
CREATE INDEX IF NOT EXISTS follows_in ON follows (followee, at, follower);
CREATE TABLE IF NOT EXISTS follow_counts (
    user TEXT PRIMARY KEY,
    following INTEGER NOT NULL DEFAULT 0,
    followers INTEGER NOT NULL DEFAULT 0
);";

/// Adds a follow unless it exists; refuses it when the follower is at the bound.
/// KEYS: out:{follower}, in:{followee}; ARGV: followee, follower, at_ms, max.
/// Returns 1 added, 0 already there, -1 at the bound.
const ADD_SCRIPT: &str = r"
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return -1 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
return 1
";

/// Members of a sorted set with their scores, as `WITHSCORES` answers.
type Scored = Vec<(String, f64)>;

/// One page from the sorted set `key`, newest first, after `cursor`: in one `MULTI`, the
/// entries that share the cursor's time and those strictly older. Ties are ordered here, by
/// bytes, as Redis orders them (not in a script: Lua compares strings by the server's locale).
async fn redis_page(
    mut conn: ConnectionManager,
    key: &str,
    cursor: Option<&Cursor>,
    limit: u32,
) -> Result<Vec<(UserId, u64)>> {
    let parse = |pairs: Scored| -> Vec<(UserId, u64)> {
        pairs
            .into_iter()
            .map(|(u, s)| (UserId::from(u), s as u64))
            .collect()
    };
    let Some(c) = cursor else {
        let all: Scored = ::redis::cmd("ZREVRANGEBYSCORE")
            .arg(key)
            .arg("+inf")
            .arg("-inf")
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        return Ok(parse(all));
    };
    let (ties, older): (Scored, Scored) = ::redis::pipe()
        .atomic()
        .cmd("ZREVRANGEBYSCORE")
        .arg(key)
        .arg(c.at)
        .arg(c.at)
        .arg("WITHSCORES")
        .cmd("ZREVRANGEBYSCORE")
        .arg(key)
        .arg(format!("({}", c.at))
        .arg("-inf")
        .arg("WITHSCORES")
        .arg("LIMIT")
        .arg(0)
        .arg(limit)
        .query_async(&mut conn)
        .await
        .map_err(map_err)?;
    let after = c.user.as_str();
    let mut page: Vec<(UserId, u64)> = parse(ties)
        .into_iter()
        .filter(|(u, _)| u.as_str() < after)
        .take(limit as usize)
        .collect();
    let left = (limit as usize).saturating_sub(page.len());
    page.extend(parse(older).into_iter().take(left));
    Ok(page)
}

fn out_key(u: &UserId) -> String {
    format!("follows:out:{u}")
}

fn in_key(u: &UserId) -> String {
    format!("follows:in:{u}")
}

/// What a follow request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Followed {
    /// A new follow.
    Added,
    /// It was there already (nothing changed).
    Already,
    /// The follower follows as many users as allowed (nothing changed).
    AtLimit,
}

/// Which side of a user's follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Users the user follows.
    Following,
    /// Users following the user.
    Followers,
}

/// Where a page starts: after the entry (time, user).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The last entry's time, ms.
    pub at: u64,
    /// The last entry's user.
    pub user: UserId,
}

impl Cursor {
    /// The cursor as a client carries it: `<at>:<user>`.
    pub fn encode(&self) -> String {
        format!("{}:{}", self.at, self.user)
    }

    /// Reads a cursor from [`Cursor::encode`]'s form; `None` when it is not one.
    pub fn decode(s: &str) -> Option<Self> {
        let (at, user) = s.split_once(':')?;
        let at = at.parse().ok()?;
        protocol::ids::is_valid_user_id(user).then(|| Self {
            at,
            user: UserId::from(user),
        })
    }
}

/// One page, newest first, and the cursor of the next (absent on the last page).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// (user, time ms).
    pub entries: Vec<(UserId, u64)>,
    /// Where the next page starts.
    pub next: Option<Cursor>,
}

/// The follow store: one of the two engines, cheap to clone.
#[derive(Clone)]
pub enum FollowStore {
    /// Redis (cluster mode), with the add script.
    Redis(ConnectionManager, Arc<::redis::Script>),
    /// SQLite (standalone mode).
    Sqlite(SqliteCell),
}

impl std::fmt::Debug for FollowStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Redis(..) => "FollowStore::Redis",
            Self::Sqlite(_) => "FollowStore::Sqlite",
        })
    }
}

impl FollowStore {
    /// A store on `redis`'s shared connection.
    pub fn redis(redis: &crate::redis::Redis) -> Self {
        Self::Redis(redis.conn(), Arc::new(::redis::Script::new(ADD_SCRIPT)))
    }

    /// A store in `<data_dir>/users.db`.
    ///
    /// # Errors
    /// `Backend` when the directory or the database cannot be opened.
    pub async fn sqlite(data_dir: &Path) -> Result<Self> {
        let conn = open_users_db(data_dir, SCHEMA).await?;
        Ok(Self::Sqlite(SqliteCell::new(conn, "follows")))
    }

    /// `follower` follows `followee` from `at_ms` on, unless they already do or already
    /// follow `max` users. The caller checks the ids (no self-follow, no robots).
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn add(
        &self,
        follower: &UserId,
        followee: &UserId,
        at_ms: u64,
        max: u32,
    ) -> Result<Followed> {
        match self {
            Self::Redis(conn, add) => {
                let mut conn = conn.clone();
                let n: i64 = add
                    .key(out_key(follower))
                    .key(in_key(followee))
                    .arg(followee.as_str())
                    .arg(follower.as_str())
                    .arg(at_ms)
                    .arg(max)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(map_err)?;
                Ok(match n {
                    1 => Followed::Added,
                    0 => Followed::Already,
                    _ => Followed::AtLimit,
                })
            }
            Self::Sqlite(c) => {
                let (a, b) = (follower.as_str().to_owned(), followee.as_str().to_owned());
                with_sqlite(c, move |conn| {
                    // Immediate: the write lock from the start, so a read-then-write never
                    // meets another connection's commit in between (users.db has two).
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let there: bool = tx.query_row(
                        "SELECT EXISTS (SELECT 1 FROM follows WHERE follower = ?1 AND followee = ?2)",
                        (&a, &b),
                        |r| r.get(0),
                    )?;
                    if there {
                        return Ok(Followed::Already);
                    }
                    let n: i64 = tx
                        .query_row(
                            "SELECT following FROM follow_counts WHERE user = ?1",
                            [&a],
                            |r| r.get(0),
                        )
                        .optional()?
                        .unwrap_or(0);
                    if n >= i64::from(max) {
                        return Ok(Followed::AtLimit);
                    }
                    tx.execute(
                        "INSERT INTO follows (follower, followee, at) VALUES (?1, ?2, ?3)",
                        (&a, &b, i64::try_from(at_ms).unwrap_or(i64::MAX)),
                    )?;
                    tx.execute(
                        "INSERT INTO follow_counts (user, following) VALUES (?1, 1)
                         ON CONFLICT(user) DO UPDATE SET following = following + 1",
                        [&a],
                    )?;
                    tx.execute(
                        "INSERT INTO follow_counts (user, followers) VALUES (?1, 1)
                         ON CONFLICT(user) DO UPDATE SET followers = followers + 1",
                        [&b],
                    )?;
                    tx.commit()?;
                    Ok(Followed::Added)
                })
                .await
            }
        }
    }

    /// `follower` no longer follows `followee`; whether they did.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn remove(&self, follower: &UserId, followee: &UserId) -> Result<bool> {
        match self {
            Self::Redis(conn, ..) => {
                let mut conn = conn.clone();
                let (n, _): (i64, i64) = ::redis::pipe()
                    .atomic()
                    .cmd("ZREM")
                    .arg(out_key(follower))
                    .arg(followee.as_str())
                    .cmd("ZREM")
                    .arg(in_key(followee))
                    .arg(follower.as_str())
                    .query_async(&mut conn)
                    .await
                    .map_err(map_err)?;
                Ok(n > 0)
            }
            Self::Sqlite(c) => {
                let (a, b) = (follower.as_str().to_owned(), followee.as_str().to_owned());
                with_sqlite(c, move |conn| {
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let n = tx.execute(
                        "DELETE FROM follows WHERE follower = ?1 AND followee = ?2",
                        (&a, &b),
                    )?;
                    if n > 0 {
                        tx.execute(
                            "UPDATE follow_counts SET following = following - 1 WHERE user = ?1",
                            [&a],
                        )?;
                        tx.execute(
                            "UPDATE follow_counts SET followers = followers - 1 WHERE user = ?1",
                            [&b],
                        )?;
                    }
                    tx.commit()?;
                    Ok(n > 0)
                })
                .await
            }
        }
    }

    /// How many users `user` follows, and how many follow them.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn counts(&self, user: &UserId) -> Result<(u64, u64)> {
        match self {
            Self::Redis(conn, ..) => {
                let mut conn = conn.clone();
                ::redis::pipe()
                    .cmd("ZCARD")
                    .arg(out_key(user))
                    .cmd("ZCARD")
                    .arg(in_key(user))
                    .query_async(&mut conn)
                    .await
                    .map_err(map_err)
            }
            Self::Sqlite(c) => {
                let u = user.as_str().to_owned();
                with_sqlite(c, move |conn| {
                    let (following, followers): (i64, i64) = conn
                        .query_row(
                            "SELECT following, followers FROM follow_counts WHERE user = ?1",
                            [&u],
                            |r| Ok((r.get(0)?, r.get(1)?)),
                        )
                        .optional()?
                        .unwrap_or((0, 0));
                    let n = |v: i64| u64::try_from(v).unwrap_or(0);
                    Ok((n(following), n(followers)))
                })
                .await
            }
        }
    }

    /// The newest `max` users `user` follows, newest first, in one read: for questions about
    /// all of them at once (where are the people I follow now?). With `max` at the following
    /// bound it is all of them.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn following(&self, user: &UserId, max: u32) -> Result<Vec<UserId>> {
        if max == 0 {
            // `ZREVRANGE 0 -1` would answer every entry.
            return Ok(Vec::new());
        }
        match self {
            Self::Redis(conn, _) => {
                let mut conn = conn.clone();
                let all: Vec<String> = ::redis::cmd("ZREVRANGE")
                    .arg(out_key(user))
                    .arg(0)
                    .arg(i64::from(max) - 1)
                    .query_async(&mut conn)
                    .await
                    .map_err(map_err)?;
                Ok(all.into_iter().map(UserId::from).collect())
            }
            Self::Sqlite(c) => {
                let u = user.as_str().to_owned();
                with_sqlite(c, move |conn| {
                    let mut stmt = conn.prepare_cached(
                        "SELECT followee FROM follows WHERE follower = ?1
                         ORDER BY at DESC, followee DESC LIMIT ?2",
                    )?;
                    let rows = stmt.query_map((&u, max), |r| r.get::<_, String>(0))?;
                    rows.map(|r| r.map(UserId::from)).collect()
                })
                .await
            }
        }
    }

    /// One page of `user`'s `side`, newest first, after `cursor`, at most `limit` entries.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn page(
        &self,
        user: &UserId,
        side: Side,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> Result<Page> {
        let limit = limit.max(1);
        let entries: Vec<(UserId, u64)> = match self {
            Self::Redis(conn, _) => {
                let key = match side {
                    Side::Following => out_key(user),
                    Side::Followers => in_key(user),
                };
                redis_page(conn.clone(), &key, cursor, limit).await?
            }
            Self::Sqlite(c) => {
                let u = user.as_str().to_owned();
                let (at, after) = cursor.map_or((i64::MAX, String::new()), |c| {
                    (
                        i64::try_from(c.at).unwrap_or(i64::MAX),
                        c.user.as_str().to_owned(),
                    )
                });
                let sql = match side {
                    Side::Following => {
                        "SELECT followee, at FROM follows WHERE follower = ?1
                         AND (at < ?2 OR (at = ?2 AND ?3 <> '' AND followee < ?3))
                         ORDER BY at DESC, followee DESC LIMIT ?4"
                    }
                    Side::Followers => {
                        "SELECT follower, at FROM follows WHERE followee = ?1
                         AND (at < ?2 OR (at = ?2 AND ?3 <> '' AND follower < ?3))
                         ORDER BY at DESC, follower DESC LIMIT ?4"
                    }
                };
                // Without a cursor every entry counts: `at < i64::MAX` holds for all.
                with_sqlite(c, move |conn| {
                    let mut stmt = conn.prepare_cached(sql)?;
                    let rows = stmt.query_map((&u, at, &after, limit), |r| {
                        Ok((
                            UserId::from(r.get::<_, String>(0)?),
                            u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                        ))
                    })?;
                    rows.collect()
                })
                .await?
            }
        };
        let next = (entries.len() == limit as usize)
            .then(|| entries.last())
            .flatten()
            .map(|(u, at)| Cursor {
                at: *at,
                user: u.clone(),
            });
        Ok(Page { entries, next })
    }
}
