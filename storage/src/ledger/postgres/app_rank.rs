//! App-wide leaderboards on PostgreSQL: `app_rank`, one row per (board, bucket, user), added to
//! in the settling transaction (the single saga's and the batch's), and read through
//! `app_rank_top`, the same rows ordered by total. Unlike `gift_rank` a row is not split into
//! slots (a board's order needs each user's whole total in one index entry): a popular
//! host's rows are locked from their update to the commit, so they are written last, in key
//! order, by every transaction (no lock cycle, and the shortest hold). Ties are read in the
//! user ids' byte order (`COLLATE "C"`), as SQLite and Scylla give them, whatever collation
//! the database was made with.

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
/// boards 2 and 3. Weeks start on Monday: day 0 (1970-01-01) was a Thursday. Settlements are
/// locked first: a gift an older node settles during the migration is then either in the
/// backfill (committed before it) or settled after the migration's commit, where version 8's
/// trigger (same transaction) counts it.
pub(super) const MIGRATION: &str = "
LOCK TABLE gift_settlement IN ACCESS EXCLUSIVE MODE;
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

/// Schema version 8: gifts settled by nodes built before version 6 count on the app boards
/// too. During a rolling upgrade such nodes keep running against the migrated schema and
/// write no `app_rank` row; every version writes a `gift_settlement` row per settled gift, so
/// a trigger on it adds the gift's rows (from its saga's order) when the settling code did
/// not:
/// - this build marks its settlements `app_ranked` (it adds the rows itself), so the trigger
///   does not even fire for them;
/// - a settlement without the mark comes from an older build. The trigger runs at the commit
///   (deferred, after everything the transaction wrote) and asks once per transaction whether
///   the transaction wrote the first gift's sender's all-time row itself (`xmin`): a build of
///   version 6 or 7 did, and its gifts are counted already; one before 6 did not, and the
///   trigger adds every gift of the transaction.
///
/// The `xmin` test holds because builds of version 6 and 7 settle in top-level transactions
/// only: a row written inside a savepoint would carry the subtransaction's id, and its gifts
/// would be counted again. This build's rows are marked, so no savepoint of its own matters.
///
/// The rows are the ones `app_rank_rows` gives (robots apart, weeks from Monday), in key order
/// (user ids by their bytes, as this build sorts them).
pub(super) const MIGRATION_OLDER_NODES: &str = "
ALTER TABLE gift_settlement ADD COLUMN app_ranked BOOLEAN NOT NULL DEFAULT FALSE;
CREATE FUNCTION chorus_app_rank_older_node() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  v_mode TEXT := current_setting('chorus.app_rank_mode', true);
  v_order JSONB;
  v_sender TEXT;
  v_per BIGINT;
  v_day BIGINT;
BEGIN
  SELECT order_json::JSONB INTO v_order FROM gift_saga WHERE gift_id = NEW.gift_id;
  IF v_order IS NULL THEN
    RETURN NULL;
  END IF;
  v_sender := v_order->>'sender';
  IF v_mode IS NULL OR v_mode = '' THEN
    IF EXISTS (SELECT 1 FROM app_rank
               WHERE board = CASE WHEN left(v_sender, 4) = 'bot:' THEN 2 ELSE 0 END
                 AND span = 2 AND start = 0 AND user_id = v_sender
                 AND xmin = pg_current_xact_id()::XID) THEN
      v_mode := 'kept';
    ELSE
      v_mode := 'add';
    END IF;
    PERFORM set_config('chorus.app_rank_mode', v_mode, true);
  END IF;
  IF v_mode <> 'add' THEN
    RETURN NULL;
  END IF;
  v_per := (v_order->>'unit_price')::BIGINT * (v_order->>'count')::BIGINT;
  v_day := floor((v_order->>'created_ms')::NUMERIC / 86400000)::BIGINT;
  INSERT INTO app_rank (board, span, start, user_id, total)
    WITH u (b, who, amount) AS (
      SELECT CASE WHEN left(v_sender, 4) = 'bot:' THEN 2 ELSE 0 END, v_sender,
             v_per * jsonb_array_length(v_order->'recipients')
      UNION ALL
      SELECT CASE WHEN left(r, 4) = 'bot:' THEN 3 ELSE 1 END, r, v_per
        FROM jsonb_array_elements_text(v_order->'recipients') AS r),
    s (sp, st) AS (
      VALUES (0, v_day), (1, v_day - (((v_day + 3) % 7) + 7) % 7), (2, 0::BIGINT))
    SELECT u.b::SMALLINT, s.sp::SMALLINT, s.st, u.who, u.amount FROM u CROSS JOIN s
    ORDER BY 1, 2, 3, u.who COLLATE \"C\"
  ON CONFLICT (board, span, start, user_id)
  DO UPDATE SET total = app_rank.total + EXCLUDED.total;
  RETURN NULL;
END
$fn$;
CREATE CONSTRAINT TRIGGER gift_settlement_older_node AFTER INSERT ON gift_settlement
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NOT NEW.app_ranked)
  EXECUTE FUNCTION chorus_app_rank_older_node();
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
                 ORDER BY total DESC, user_id COLLATE \"C\" ASC LIMIT $4",
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
