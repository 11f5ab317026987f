//! App-wide leaderboards on SQLite: `app_rank`, one row per (board, bucket, user), added to in
//! the settling job's transaction, and read through `app_rank_top`, the same rows ordered by
//! total (a board's read walks `limit` entries of it).

use std::collections::BTreeMap;

use protocol::UserId;
use rusqlite::{OptionalExtension, Statement, params};

use super::super::app_rank::{SPAN_ALL, app_rank_users, spend_board};
use super::super::{GiftOrder, day_of, week_start};
use super::tx::Tx;
use super::{SqliteLedger, db};
use crate::{Result, StorageError};

/// The table, keyed by (board, bucket, user), and its index by total.
macro_rules! app_rank_tables {
    () => {
        "
CREATE TABLE IF NOT EXISTS app_rank (
  board INTEGER NOT NULL,
  span  INTEGER NOT NULL,
  start INTEGER NOT NULL,
  user  TEXT NOT NULL,
  total INTEGER NOT NULL,
  PRIMARY KEY (board, span, start, user)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS app_rank_top ON app_rank (board, span, start, total DESC, user);
"
    };
}

/// Schema change 3: the table, its index by total, and the totals of the gifts settled before
/// it (from the settled facts, as change 1 filled `gift_rank`; rows already there are
/// recounted, not added to). A sender's spend per gift is
/// the sum of its facts' amounts (one per recipient). Robots (ids starting `bot:`) go to
/// boards 2 and 3. Weeks start on Monday: day 0 (1970-01-01) was a Thursday.
pub(super) const MIGRATION: &str = concat!(
    app_rank_tables!(),
    "
DELETE FROM app_rank;
INSERT INTO app_rank (board, span, start, user, total)
  WITH g AS (
    SELECT CASE WHEN substr(sender, 1, 4) = 'bot:' THEN 2 ELSE 0 END AS board,
           sender AS user, day, amount FROM settled_gift
    UNION ALL
    SELECT CASE WHEN substr(receiver, 1, 4) = 'bot:' THEN 3 ELSE 1 END,
           receiver, day, amount FROM settled_gift)
  SELECT board, 0, day, user, SUM(amount) FROM g GROUP BY board, day, user
  UNION ALL
  SELECT board, 1, wk, user, SUM(amount)
    FROM (SELECT board, day - (((day + 3) % 7) + 7) % 7 AS wk, user, amount FROM g)
    GROUP BY board, wk, user
  UNION ALL
  SELECT board, 2, 0, user, SUM(amount) FROM g GROUP BY board, user;
"
);

/// The table and its index, for a database made without the migrations (unit tests).
#[cfg(test)]
pub(super) const TABLES: &str = app_rank_tables!();

/// Adds `?5` to user `?4`'s rows of board `?1`: day `?2`, week `?3` and all time.
pub(super) const SQL_APP_RANK: &str = "INSERT INTO app_rank (board, span, start, user, total)
 VALUES (?1, 0, ?2, ?4, ?5), (?1, 1, ?3, ?4, ?5), (?1, 2, 0, ?4, ?5)
 ON CONFLICT (board, span, start, user) DO UPDATE SET total = total + excluded.total";

/// The app-board totals a group's gifts add, by `(board, day, user)`: written once per group,
/// just before it commits ([`AppRankDeltas::write`]), as the house's takings are. A storm's
/// gifts to one host (or a sender's combo) then cost one statement per group, not one per gift
/// (each moves the row's entry in the index by total: two b-tree writes). Same transaction,
/// same totals.
#[derive(Default, Clone)]
pub(super) struct AppRankDeltas(BTreeMap<(i16, i64, String), i64>);

impl AppRankDeltas {
    /// Adds a settled gift's users (its sender's spend, each recipient's value).
    pub(super) fn add(&mut self, o: &GiftOrder) -> Result<()> {
        let day = day_of(o.created_ms);
        for (board, user, amount) in app_rank_users(o) {
            let slot = self.0.entry((board, day, user.to_owned())).or_default();
            *slot = slot
                .checked_add(amount)
                .ok_or_else(|| StorageError::backend_msg("app board total would overflow"))?;
        }
        Ok(())
    }

    /// Writes the totals into `app_rank` (key order: neighbouring rows share pages) and empties
    /// itself: one statement per user and day, its three buckets.
    pub(super) fn write(&mut self, stmt: &mut Statement<'_>) -> rusqlite::Result<()> {
        for ((board, day, user), amount) in std::mem::take(&mut self.0) {
            stmt.execute(params![board, day, week_start(day), user, amount])?;
        }
        Ok(())
    }
}

/// Adds a settled gift to the group's app-board totals ([`AppRankDeltas`]).
pub(super) fn add_app_ranks(c: &Tx<'_, '_>, o: &GiftOrder) -> Result<()> {
    c.app_ranks
        .try_borrow_mut()
        .map_err(|_| StorageError::backend_msg("app board totals already in use"))?
        .add(o)
}

impl SqliteLedger {
    pub(in crate::ledger) async fn app_board(
        &self,
        board: i16,
        span: i16,
        start: i64,
        limit: usize,
    ) -> Result<Vec<(UserId, i64)>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT user, total FROM app_rank WHERE board = ?1 AND span = ?2 AND start = ?3
                     ORDER BY total DESC, user ASC LIMIT ?4",
                )
                .map_err(db)?;
            stmt.query_map(params![board, span, start, limit], |r| {
                Ok((UserId::new(r.get::<_, String>(0)?), r.get::<_, i64>(1)?))
            })
            .map_err(db)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db)
        })
        .await
    }

    pub(in crate::ledger) async fn lifetime_spent(&self, user: &UserId) -> Result<i64> {
        let user = user.clone();
        self.read(move |c| spent_in(c, &user)).await
    }

    /// Deletes up to `limit` rows of `board`'s `span` buckets that start before `before`;
    /// returns how many went.
    pub(in crate::ledger) async fn prune_app_board(
        &self,
        board: i16,
        span: i16,
        before: i64,
        limit: i64,
    ) -> Result<u64> {
        self.write(move |c| {
            let n = c
                .prepare_cached(
                    "DELETE FROM app_rank WHERE (board, span, start, user) IN (
                       SELECT board, span, start, user FROM app_rank
                       WHERE board = ?1 AND span = ?2 AND start < ?3 LIMIT ?4)",
                )
                .map_err(db)?
                .execute(params![board, span, before, limit])
                .map_err(db)?;
            Ok(n as u64)
        })
        .await
    }
}

/// `user`'s all-time spend on the reader connection `c` (0 for none).
pub(super) fn spent_in(c: &rusqlite::Connection, user: &UserId) -> Result<i64> {
    let spent: Option<i64> = c
        .prepare_cached(
            "SELECT total FROM app_rank
             WHERE board = ?1 AND span = ?2 AND start = 0 AND user = ?3",
        )
        .map_err(db)?
        .query_row(params![spend_board(user), SPAN_ALL, user.as_str()], |r| {
            r.get(0)
        })
        .optional()
        .map_err(db)?;
    Ok(spent.unwrap_or(0))
}
