//! The statement on PostgreSQL: movements inserted in the booking's transaction, and pages
//! read by the position `(xid, id)`.
//!
//! A sequence number alone is not a position here: numbers are taken when a row is inserted,
//! and transactions commit in another order, so a page could end at number 101 while 100
//! commits later, behind it. Each row therefore records its transaction's id (`xid8`) and a
//! page lists only rows whose transaction is older than every transaction still running
//! (`pg_snapshot_xmin`): those are all final, and every row committed later has a newer
//! transaction id, so it lands before the first page, never between two. A movement shows
//! once the transactions older than its own have ended (the ledger's are milliseconds long).

use deadpool_postgres::Transaction;
use protocol::UserId;

use super::super::movement::next_cursor;
use super::super::{HistoryPage, HistoryQuery, Movement, MovementKind, NewMovement};
use super::saga::col;
use super::{PostgresLedger, TxResult};
use crate::{Result, StorageError};

/// Inserts every row of one booking in one statement.
pub(super) const SQL_INSERT: &str = "INSERT INTO movement
   (user_id, kind, amount, balance_after, counterparty, key, at_ms)
 SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[], $5::TEXT[],
   $6::TEXT[], $7::BIGINT[])";

/// The columns of [`SQL_INSERT`], one array per column.
pub(super) struct Columns<'a> {
    pub(super) users: Vec<&'a str>,
    pub(super) kinds: Vec<&'static str>,
    pub(super) amounts: Vec<i64>,
    pub(super) after: Vec<Option<i64>>,
    pub(super) counterparties: Vec<Option<&'a str>>,
    pub(super) keys: Vec<&'a str>,
    pub(super) at: Vec<i64>,
}

impl<'a> Columns<'a> {
    pub(super) fn of(rows: &'a [NewMovement]) -> Self {
        Self {
            users: rows.iter().map(|r| r.user.as_str()).collect(),
            kinds: rows.iter().map(|r| r.movement.kind.as_str()).collect(),
            amounts: rows.iter().map(|r| r.movement.amount).collect(),
            after: rows.iter().map(|r| r.movement.balance_after).collect(),
            counterparties: rows
                .iter()
                .map(|r| r.movement.counterparty.as_deref())
                .collect(),
            keys: rows.iter().map(|r| r.movement.key.as_str()).collect(),
            at: rows.iter().map(|r| r.movement.at_ms).collect(),
        }
    }
}

/// Appends `rows` inside the booking's transaction.
pub(super) async fn insert_movements(tx: &Transaction<'_>, rows: &[NewMovement]) -> TxResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let c = Columns::of(rows);
    let stmt = tx.prepare_cached(SQL_INSERT).await?;
    tx.execute(
        &stmt,
        &[
            &c.users,
            &c.kinds,
            &c.amounts,
            &c.after,
            &c.counterparties,
            &c.keys,
            &c.at,
        ],
    )
    .await?;
    Ok(())
}

/// The position of the newest row a first page may start from.
const TOP: (&str, i64) = ("18446744073709551615", i64::MAX);

fn parse_cursor(cursor: Option<&str>) -> Result<(String, i64)> {
    let Some(c) = cursor else {
        return Ok((TOP.0.to_owned(), TOP.1));
    };
    let bad = || StorageError::invalid_msg("bad history cursor");
    let (xid, id) = c.split_once('.').ok_or_else(bad)?;
    let xid: u64 = xid.parse().map_err(|_| bad())?;
    let id: i64 = id.parse().map_err(|_| bad())?;
    Ok((xid.to_string(), id))
}

impl PostgresLedger {
    pub(in crate::ledger) async fn history(
        &self,
        user: &UserId,
        q: &HistoryQuery,
    ) -> Result<HistoryPage> {
        let (xid, id) = parse_cursor(q.cursor.as_deref())?;
        let limit = q.clamped_limit();
        let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
        let head = "SELECT xid::TEXT, id, kind, amount, balance_after, counterparty, key, at_ms
             FROM movement WHERE user_id = $1
               AND xid < pg_snapshot_xmin(pg_current_snapshot())
               AND (xid, id) < ($2::TEXT::xid8, $3)";
        // By the table's columns: a bare `xid` would name the output `xid::TEXT` and sort text,
        // with no index (a full scan per page: measured, docs/BENCHMARKS-LOG.md).
        let order = "ORDER BY movement.xid DESC, movement.id DESC LIMIT $4";
        let rows = match q.kind {
            None => {
                self.read(
                    &format!("{head} {order}"),
                    &[&user.as_str(), &xid, &id, &fetch],
                )
                .await?
            }
            Some(kind) => {
                self.read(
                    &format!("{head} AND kind = $5 {order}"),
                    &[&user.as_str(), &xid, &id, &fetch, &kind.as_str()],
                )
                .await?
            }
        };
        let mut rows = rows;
        let mut positions = Vec::with_capacity(rows.len());
        for r in &rows {
            positions.push(format!("{}.{}", col::<String>(r, 0)?, col::<i64>(r, 1)?));
        }
        let next = next_cursor(&mut positions, limit, Clone::clone);
        rows.truncate(limit);
        let movements = rows
            .iter()
            .map(|r| {
                Ok(Movement {
                    kind: MovementKind::parse(col(r, 2)?)?,
                    amount: col(r, 3)?,
                    balance_after: col(r, 4)?,
                    counterparty: col(r, 5)?,
                    key: col(r, 6)?,
                    at_ms: col(r, 7)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(HistoryPage { movements, next })
    }
}
