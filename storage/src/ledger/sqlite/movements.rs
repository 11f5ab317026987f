//! The statement on SQLite: movements appended in the booking's job, and pages read by
//! `(user, id)`, the rowid the one writer hands out in commit order.

use rusqlite::{Connection, params};

use super::super::movement::next_cursor;
use super::super::{HistoryPage, HistoryQuery, Movement, MovementKind, NewMovement};
use super::db;
use crate::{Result, StorageError};

const SQL_INSERT: &str = "INSERT INTO movement
   (user, kind, amount, balance_after, counterparty, key, at_ms)
 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// Appends `rows` (inside the caller's job: they commit with its booking or not at all).
pub(super) fn insert_movements(c: &Connection, rows: &[NewMovement]) -> Result<()> {
    let mut stmt = c.prepare_cached(SQL_INSERT).map_err(db)?;
    for r in rows {
        let m = &r.movement;
        stmt.execute(params![
            r.user,
            m.kind.as_str(),
            m.amount,
            m.balance_after,
            m.counterparty,
            m.key,
            m.at_ms
        ])
        .map_err(db)?;
    }
    Ok(())
}

fn parse_cursor(cursor: Option<&str>) -> Result<i64> {
    match cursor {
        None => Ok(i64::MAX),
        Some(c) => c
            .parse::<i64>()
            .map_err(|_| StorageError::invalid_msg("bad history cursor")),
    }
}

/// One page of `user`'s statement (see [`HistoryQuery`]).
pub(super) fn history(c: &Connection, user: &str, q: &HistoryQuery) -> Result<HistoryPage> {
    let before = parse_cursor(q.cursor.as_deref())?;
    let limit = q.clamped_limit();
    let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
    let cols = "id, kind, amount, balance_after, counterparty, key, at_ms";
    let map = |r: &rusqlite::Row<'_>| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, Option<i64>>(3)?,
            r.get::<_, Option<String>>(4)?,
            r.get::<_, String>(5)?,
            r.get::<_, i64>(6)?,
        ))
    };
    let raw = match q.kind {
        None => c
            .prepare_cached(&format!(
                "SELECT {cols} FROM movement WHERE user = ?1 AND id < ?2
                 ORDER BY id DESC LIMIT ?3"
            ))
            .map_err(db)?
            .query_map(params![user, before, fetch], map)
            .map_err(db)?
            .collect::<Result<Vec<_>, _>>(),
        Some(kind) => c
            .prepare_cached(&format!(
                "SELECT {cols} FROM movement WHERE user = ?1 AND kind = ?4 AND id < ?2
                 ORDER BY id DESC LIMIT ?3"
            ))
            .map_err(db)?
            .query_map(params![user, before, fetch, kind.as_str()], map)
            .map_err(db)?
            .collect::<Result<Vec<_>, _>>(),
    };
    let mut rows = raw.map_err(db)?;
    let next = next_cursor(&mut rows, limit, |r| r.0.to_string());
    let movements = rows
        .into_iter()
        .map(
            |(_, kind, amount, balance_after, counterparty, key, at_ms)| {
                Ok(Movement {
                    kind: MovementKind::parse(&kind)?,
                    amount,
                    balance_after,
                    counterparty,
                    key,
                    at_ms,
                })
            },
        )
        .collect::<Result<Vec<_>>>()?;
    Ok(HistoryPage { movements, next })
}
