//! The report store's SQLite engine: `<data_dir>/reports.db`, one row per report, with indexes
//! by room, by reported user and on the open ones.

use std::path::Path;

use rusqlite::OptionalExtension;
use rusqlite::types::Value;

use super::{Page, Query, REPORTS_DB_FILE, Report, Status, parse};
use crate::error::Result;
use crate::sqlite_cell::{SqliteCell, open_wal};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS reports (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    room TEXT NOT NULL,
    user TEXT,
    doc TEXT NOT NULL,
    resolution TEXT
);
CREATE INDEX IF NOT EXISTS reports_by_room ON reports (room, id);
CREATE INDEX IF NOT EXISTS reports_by_user ON reports (user, id);
CREATE INDEX IF NOT EXISTS reports_open ON reports (id) WHERE resolution IS NULL;
CREATE TABLE IF NOT EXISTS filings (
    key TEXT PRIMARY KEY,
    id INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS filings_by_id ON filings (id);
";

/// The SQLite engine; cheap to clone.
#[derive(Clone)]
pub struct SqliteReports {
    conn: SqliteCell,
    pub(super) keep: usize,
}

impl std::fmt::Debug for SqliteReports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SqliteReports")
    }
}

/// A row's id as the store answers it (ids start at 1).
fn id_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn sql_id(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

type Row = (i64, String, Option<String>);

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
}

impl SqliteReports {
    pub(super) async fn open(data_dir: &Path, keep: usize) -> Result<Self> {
        let conn = open_wal(data_dir, REPORTS_DB_FILE, SCHEMA, "report store").await?;
        Ok(Self {
            conn: SqliteCell::new(conn, "report store"),
            keep,
        })
    }

    pub(super) async fn file(&self, r: &super::NewReport, key: &str, doc: String) -> Result<u64> {
        let key = key.to_owned();
        let room = r.room.to_string();
        let user = r.user.as_ref().map(ToString::to_string);
        let keep = i64::try_from(self.keep).unwrap_or(i64::MAX);
        let id = self
            .conn
            .call(move |c| {
                let tx = c.transaction()?;
                let before: Option<i64> = tx
                    .query_row("SELECT id FROM filings WHERE key = ?1", [&key], |r| {
                        r.get(0)
                    })
                    .optional()?;
                if let Some(id) = before {
                    return Ok(id);
                }
                tx.execute(
                    "INSERT INTO reports (room, user, doc) VALUES (?1, ?2, ?3)",
                    rusqlite::params![room, user, doc],
                )?;
                let id = tx.last_insert_rowid();
                tx.execute(
                    "INSERT INTO filings (key, id) VALUES (?1, ?2)",
                    rusqlite::params![key, id],
                )?;
                let floor = id.saturating_sub(keep);
                tx.execute("DELETE FROM reports WHERE id <= ?1", [floor])?;
                tx.execute("DELETE FROM filings WHERE id <= ?1", [floor])?;
                tx.commit()?;
                Ok(id)
            })
            .await?;
        Ok(id_of(id))
    }

    pub(super) async fn get(&self, id: u64) -> Result<Option<Report>> {
        let found = self
            .conn
            .call(move |c| {
                c.query_row(
                    "SELECT id, doc, resolution FROM reports WHERE id = ?1",
                    [sql_id(id)],
                    row,
                )
                .optional()
            })
            .await?;
        found
            .map(|(id, doc, res)| parse(id_of(id), &doc, res.as_deref()))
            .transpose()
    }

    pub(super) async fn list(&self, q: &Query) -> Result<Page> {
        let mut sql = String::from("SELECT id, doc, resolution FROM reports WHERE id < ?1");
        let mut args = vec![Value::Integer(q.before.map_or(i64::MAX, sql_id))];
        match q.status {
            Status::Open => sql.push_str(" AND resolution IS NULL"),
            Status::Resolved => sql.push_str(" AND resolution IS NOT NULL"),
            Status::All => {}
        }
        if let Some(room) = &q.room {
            args.push(Value::Text(room.to_string()));
            sql.push_str(&format!(" AND room = ?{}", args.len()));
        }
        if let Some(user) = &q.user {
            args.push(Value::Text(user.to_string()));
            sql.push_str(&format!(" AND user = ?{}", args.len()));
        }
        // One more than asked, to know whether a next page exists.
        args.push(Value::Integer(
            i64::try_from(q.limit + 1).unwrap_or(i64::MAX),
        ));
        sql.push_str(&format!(" ORDER BY id DESC LIMIT ?{}", args.len()));
        let rows = self
            .conn
            .call(move |c| {
                let mut stmt = c.prepare(&sql)?;
                let rows = stmt.query_map(rusqlite::params_from_iter(args), row)?;
                rows.collect::<rusqlite::Result<Vec<Row>>>()
            })
            .await?;
        let more = rows.len() > q.limit;
        let reports = rows
            .into_iter()
            .take(q.limit)
            .map(|(id, doc, res)| parse(id_of(id), &doc, res.as_deref()))
            .collect::<Result<Vec<_>>>()?;
        let next = if more {
            reports.last().map(|r| r.id)
        } else {
            None
        };
        Ok(Page { reports, next })
    }

    pub(super) async fn open_count(&self) -> Result<u64> {
        let n = self
            .conn
            .call(|c| {
                c.query_row(
                    "SELECT COUNT(*) FROM reports WHERE resolution IS NULL",
                    [],
                    |r| r.get::<_, i64>(0),
                )
            })
            .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    pub(super) async fn resolve(&self, id: u64, res: String) -> Result<bool> {
        let n = self
            .conn
            .call(move |c| {
                c.execute(
                    "UPDATE reports SET resolution = ?1 WHERE id = ?2 AND resolution IS NULL",
                    rusqlite::params![res, sql_id(id)],
                )
            })
            .await?;
        Ok(n == 1)
    }
}
