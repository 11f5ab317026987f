//! App-wide leaderboards on PostgreSQL: `app_rank`, one row per (board, bucket, user), added to
//! in the settling transaction (the single saga's and the batch's), and read through
//! `app_rank_top`, the same rows ordered by total. Unlike `gift_rank` a row is not split into
//! slots (a board's order needs each user's whole total in one index entry): a popular
//! host's rows are locked from their update to the commit, so they are written last, in key
//! order, by every transaction (no lock cycle, and the shortest hold).

use deadpool_postgres::Transaction;
use protocol::UserId;

use super::super::GiftOrder;
use super::super::app_rank::{AppRankRow, SPAN_ALL, app_rank_rows, spend_board};
use super::saga::col;
use super::{PostgresLedger, TxResult};
use crate::Result;

/// Schema version 6: the table, its index by total, and the totals of the gifts settled before
/// it (the room boards' `gift_rank` rows hold every settled gift's totals per user and day; a
/// user's app total is their sum over rooms and slots). Robots (ids starting `bot:`) go to
/// boards 2 and 3. Weeks start on Monday: day 0 (1970-01-01) was a Thursday.
pub(super) const MIGRATION: &str = "
CREATE TABLE app_rank (
  board   SMALLINT NOT NULL,
  span    SMALLINT NOT NULL,
  start   BIGINT NOT NULL,
  user_id TEXT NOT NULL,
  total   BIGINT NOT NULL,
  PRIMARY KEY (board, span, start, user_id)
);
CREATE INDEX app_rank_top ON app_rank (board, span, start, total DESC, user_id);
INSERT INTO app_rank (board, span, start, user_id, total)
  WITH g AS (
    SELECT (board + CASE WHEN left(user_id, 4) = 'bot:' THEN 2 ELSE 0 END)::SMALLINT AS board,
           day, user_id, total FROM gift_rank)
  SELECT board, 0, day, user_id, SUM(total)::BIGINT FROM g GROUP BY board, day, user_id
  UNION ALL
  SELECT board, 1, wk, user_id, SUM(total)::BIGINT
    FROM (SELECT board, day - (((day + 3) % 7) + 7) % 7 AS wk, user_id, total FROM g) w
    GROUP BY board, wk, user_id
  UNION ALL
  SELECT board, 2, 0, user_id, SUM(total)::BIGINT FROM g GROUP BY board, user_id;
";

/// Adds totals `$5` to the rows `($1, $2, $3, $4)` (board, span, start, user), in that order.
pub(super) const SQL_APP_RANKS: &str = "INSERT INTO app_rank (board, span, start, user_id, total)
 SELECT b, s, t, u, a FROM unnest($1::SMALLINT[], $2::SMALLINT[], $3::BIGINT[], $4::TEXT[],
   $5::BIGINT[]) WITH ORDINALITY AS x(b, s, t, u, a, n) ORDER BY n
 ON CONFLICT (board, span, start, user_id) DO UPDATE SET total = app_rank.total + EXCLUDED.total";

/// The columns of [`SQL_APP_RANKS`] for `rows` (in key order).
pub(super) struct AppRankColumns<'a> {
    pub(super) boards: Vec<i16>,
    pub(super) spans: Vec<i16>,
    pub(super) starts: Vec<i64>,
    pub(super) users: Vec<&'a str>,
    pub(super) totals: Vec<i64>,
}

impl<'a> AppRankColumns<'a> {
    pub(super) fn of(rows: impl IntoIterator<Item = AppRankRow<'a>>) -> Self {
        let mut c = Self {
            boards: Vec::new(),
            spans: Vec::new(),
            starts: Vec::new(),
            users: Vec::new(),
            totals: Vec::new(),
        };
        for (board, span, start, user, total) in rows {
            c.boards.push(board);
            c.spans.push(span);
            c.starts.push(start);
            c.users.push(user);
            c.totals.push(total);
        }
        c
    }

    pub(super) fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// Adds a settled gift to the app boards (one statement, rows in key order).
pub(super) async fn add_app_ranks(tx: &Transaction<'_>, o: &GiftOrder) -> TxResult<()> {
    let c = AppRankColumns::of(app_rank_rows(o));
    let stmt = tx.prepare_cached(SQL_APP_RANKS).await?;
    tx.execute(
        &stmt,
        &[&c.boards, &c.spans, &c.starts, &c.users, &c.totals],
    )
    .await?;
    Ok(())
}

impl PostgresLedger {
    pub(in crate::ledger) async fn app_board(
        &self,
        board: i16,
        span: i16,
        start: i64,
        limit: usize,
    ) -> Result<Vec<(UserId, i64)>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .read(
                "SELECT user_id, total FROM app_rank WHERE board = $1 AND span = $2 AND start = $3
                 ORDER BY total DESC, user_id ASC LIMIT $4",
                &[&board, &span, &start, &limit],
            )
            .await?;
        rows.iter()
            .map(|r| Ok((UserId::new(col::<String>(r, 0)?), col(r, 1)?)))
            .collect()
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
        self.execute(
            "DELETE FROM app_rank WHERE (board, span, start, user_id) IN (
               SELECT board, span, start, user_id FROM app_rank
               WHERE board = $1 AND span = $2 AND start < $3 LIMIT $4)",
            &[&board, &span, &before, &limit],
        )
        .await
    }

    pub(in crate::ledger) async fn lifetime_spent(&self, user: &UserId) -> Result<i64> {
        let rows = self
            .read(
                "SELECT total FROM app_rank
                 WHERE board = $1 AND span = $2 AND start = 0 AND user_id = $3",
                &[&spend_board(user), &SPAN_ALL, &user.as_str()],
            )
            .await?;
        match rows.first() {
            Some(r) => col(r, 0),
            None => Ok(0),
        }
    }
}
