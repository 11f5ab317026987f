//! The moderation queue: every report a member files (`report.send`) kept until a moderator
//! resolves it, and after, bounded to the newest [`KEEP`] reports.
//!
//! A report is stored as the document the room filed ([`NewReport`], as JSON: who reported
//! whom, the chat line as members saw it, the reason and text) under an id that grows by one
//! per report, and an optional [`Resolution`] written once. Lists read newest first, by status
//! and optionally by room or by reported user.
//!
//! # Engines
//! - Redis (cluster mode): keys under the `{reports}` hash tag: `chorus:{reports}:seq` (the
//!   last id), `chorus:{reports}:doc` and `chorus:{reports}:res` (hashes id → document,
//!   id → resolution), and sorted sets of ids (score = id): `:all`, `:open`, `:resolved`,
//!   `:room:<room>`, `:user:<user>`; `:filing:<key>` holds a filing's id for an hour. Filing
//!   and resolving are one script each.
//! - SQLite (standalone mode): `<data_dir>/reports.db`, tables `reports` and `filings` (key →
//!   id, bounded with the reports).

mod redis;
mod sqlite;

use std::path::Path;

use protocol::{RoomId, UserId};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

pub use redis::RedisReports;
pub use sqlite::SqliteReports;

use crate::error::{Result, StorageError};

/// Reports kept: filing one more drops the oldest, resolved or not.
pub const KEEP: usize = 100_000;
/// The SQLite file in the data directory.
pub const REPORTS_DB_FILE: &str = "reports.db";
/// Longest page a list returns.
pub const MAX_PAGE: usize = 200;

/// A report as the room filed it (the stored document).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewReport {
    /// The room it was filed in.
    pub room: RoomId,
    /// Who filed it.
    pub reporter: UserId,
    /// The user reported; `None`: the room itself.
    pub user: Option<UserId>,
    /// The chat line reported (its seq in the room's epoch then).
    pub seq: Option<u64>,
    /// That line's event `d`, as members saw it, when the room still held it.
    pub line: Option<Box<RawValue>>,
    /// The app's reason code.
    pub reason: String,
    /// The reporter's words.
    pub text: Option<String>,
    /// When it was filed, unix ms.
    pub at: u64,
}

impl PartialEq for NewReport {
    fn eq(&self, o: &Self) -> bool {
        let line = |r: &Self| r.line.as_ref().map(|l| l.get().to_owned());
        (&self.room, &self.reporter, &self.user, self.seq) == (&o.room, &o.reporter, &o.user, o.seq)
            && (&self.reason, &self.text, self.at) == (&o.reason, &o.text, o.at)
            && line(self) == line(o)
    }
}

/// What a moderator decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolution {
    /// The app's action code (`dismissed`, `warned`, …).
    pub action: String,
    /// The moderator's note.
    pub note: Option<String>,
    /// Who decided (the app's moderator id).
    pub by: Option<String>,
    /// When, unix ms.
    pub at: u64,
}

/// A stored report. Serializes flat: `{"id", "room", …, "status", "resolution"}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Its id (grows by one per report).
    pub id: u64,
    /// What was filed.
    pub filed: NewReport,
    /// The decision, once made.
    pub resolution: Option<Resolution>,
}

impl Serialize for Report {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let f = &self.filed;
        let mut m = s.serialize_map(Some(11))?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("room", &f.room)?;
        m.serialize_entry("reporter", &f.reporter)?;
        m.serialize_entry("user", &f.user)?;
        m.serialize_entry("seq", &f.seq)?;
        m.serialize_entry("line", &f.line)?;
        m.serialize_entry("reason", &f.reason)?;
        m.serialize_entry("text", &f.text)?;
        m.serialize_entry("at", &f.at)?;
        let status = if self.resolution.is_some() {
            "resolved"
        } else {
            "open"
        };
        m.serialize_entry("status", status)?;
        m.serialize_entry("resolution", &self.resolution)?;
        m.end()
    }
}

/// Which reports a list reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Status {
    /// Not yet resolved.
    #[default]
    Open,
    /// Resolved.
    Resolved,
    /// Both.
    All,
}

impl Status {
    fn admits(self, r: &Report) -> bool {
        match self {
            Self::Open => r.resolution.is_none(),
            Self::Resolved => r.resolution.is_some(),
            Self::All => true,
        }
    }
}

/// A list's filter and page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Which status.
    pub status: Status,
    /// Only reports filed in this room.
    pub room: Option<RoomId>,
    /// Only reports about this user.
    pub user: Option<UserId>,
    /// Only ids below this (the previous page's `next`).
    pub before: Option<u64>,
    /// At most this many (1..=[`MAX_PAGE`]).
    pub limit: usize,
}

impl Default for Query {
    fn default() -> Self {
        Self {
            status: Status::Open,
            room: None,
            user: None,
            before: None,
            limit: 50,
        }
    }
}

impl Query {
    /// Whether `r` passes the filter (the engines read by one index and check the rest).
    fn admits(&self, r: &Report) -> bool {
        self.status.admits(r)
            && self.room.as_ref().is_none_or(|room| *room == r.filed.room)
            && self
                .user
                .as_ref()
                .is_none_or(|u| r.filed.user.as_ref() == Some(u))
    }
}

/// A page of reports, newest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Page {
    /// The reports.
    pub reports: Vec<Report>,
    /// Pass as `before` for the next page; `None`: this is the last.
    pub next: Option<u64>,
}

/// What [`ReportStore::resolve`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    /// Resolved now.
    Now(Report),
    /// It was resolved before: unchanged.
    Already(Report),
    /// No such report (never filed, or dropped as one of the oldest).
    Missing,
}

/// The report store: one of the two engines, cheap to clone.
#[derive(Clone, Debug)]
pub enum ReportStore {
    /// Redis (cluster mode).
    Redis(RedisReports),
    /// SQLite (standalone mode).
    Sqlite(SqliteReports),
}

impl ReportStore {
    /// A store on `redis`, keeping [`KEEP`] reports.
    pub fn redis(redis: &crate::redis::Redis) -> Self {
        Self::Redis(RedisReports::new(redis, KEEP))
    }

    /// A store in `<data_dir>/reports.db`, keeping [`KEEP`] reports.
    ///
    /// # Errors
    /// `Backend` when the directory or the database cannot be opened.
    pub async fn sqlite(data_dir: &Path) -> Result<Self> {
        SqliteReports::open(data_dir, KEEP).await.map(Self::Sqlite)
    }

    /// The same store keeping `keep` reports (tests use a small bound).
    #[must_use]
    pub fn with_keep(self, keep: usize) -> Self {
        let keep = keep.max(1);
        match self {
            Self::Redis(mut r) => {
                r.keep = keep;
                Self::Redis(r)
            }
            Self::Sqlite(mut s) => {
                s.keep = keep;
                Self::Sqlite(s)
            }
        }
    }

    /// Stores a report; its id. `key` names the filing (the filer makes one, e.g. a UUID, and
    /// keeps it through its retries): the same key again stores nothing and answers the first
    /// id, so a retry of a write whose answer was lost does not queue the report twice.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn file(&self, r: &NewReport, key: &str) -> Result<u64> {
        let doc = serde_json::to_string(r).map_err(|e| StorageError::backend("reports", e))?;
        match self {
            Self::Redis(s) => s.file(r, key, &doc).await,
            Self::Sqlite(s) => s.file(r, key, doc).await,
        }
    }

    /// One report.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails; `Corrupt` for a stored document that
    /// does not parse.
    pub async fn get(&self, id: u64) -> Result<Option<Report>> {
        match self {
            Self::Redis(s) => s.get(id).await,
            Self::Sqlite(s) => s.get(id).await,
        }
    }

    /// A page of reports, newest first.
    ///
    /// # Errors
    /// As [`Self::get`].
    pub async fn list(&self, q: &Query) -> Result<Page> {
        let q = Query {
            limit: q.limit.clamp(1, MAX_PAGE),
            ..q.clone()
        };
        match self {
            Self::Redis(s) => s.list(&q).await,
            Self::Sqlite(s) => s.list(&q).await,
        }
    }

    /// How many reports wait for a moderator (the queue's backlog).
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn open_count(&self) -> Result<u64> {
        match self {
            Self::Redis(s) => s.open_count().await,
            Self::Sqlite(s) => s.open_count().await,
        }
    }

    /// Resolves a report once: a second resolution leaves the first.
    ///
    /// # Errors
    /// As [`Self::get`].
    pub async fn resolve(&self, id: u64, res: &Resolution) -> Result<Resolved> {
        let json = serde_json::to_string(res).map_err(|e| StorageError::backend("reports", e))?;
        let now = match self {
            Self::Redis(s) => s.resolve(id, &json).await?,
            Self::Sqlite(s) => s.resolve(id, json).await?,
        };
        Ok(match (now, self.get(id).await?) {
            (_, None) => Resolved::Missing,
            (true, Some(r)) => Resolved::Now(r),
            (false, Some(r)) => Resolved::Already(r),
        })
    }
}

/// A stored report from its parts.
fn parse(id: u64, doc: &str, res: Option<&str>) -> Result<Report> {
    let corrupt = |what: &str, e: serde_json::Error| {
        StorageError::corrupt_msg(format!("report {id}: {what}: {e}"))
    };
    Ok(Report {
        id,
        filed: serde_json::from_str(doc).map_err(|e| corrupt("document", e))?,
        resolution: res
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| corrupt("resolution", e))?,
    })
}
