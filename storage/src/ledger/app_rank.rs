//! App-wide leaderboards: every settled gift adds its sender's spend and each recipient's
//! received value to one row per (board, bucket, user), where a bucket is the gift's UTC day,
//! its week (from Monday) and all time. The three buckets are added to together, in the same
//! booking as the gift's settlement, so a board of any period is one bucket: a read is a range
//! of `limit` rows of an index ordered by total, whatever the number of gifts behind it.
//!
//! Robots are booked on boards of their own ([`app_board`]): a board without robots is one
//! range, a board with them is two merged ([`merge_top`]). Room boards keep robots in and drop
//! them at read; at app scope robots may crowd the top, so they are kept apart at write.

use protocol::UserId;

use super::{Board, GiftOrder, Ledger, Period, day_of, now_ms, week_start};
use crate::Result;

impl Ledger {
    /// An app-wide leaderboard of `period` (today's day, this week from Monday, all time;
    /// UTC), best first (ties by user id), at most `limit` entries: people only, or people
    /// and robots (`robots`). Each read is a range of at most `limit` rows per board.
    ///
    /// # Errors
    /// Engine errors.
    pub async fn app_leaderboard(
        &self,
        board: Board,
        period: Period,
        limit: usize,
        robots: bool,
    ) -> Result<Vec<(UserId, i64)>> {
        let (span, start) = bucket(period, day_of(now_ms()));
        let people = self
            .app_board(app_board(board, false), span, start, limit)
            .await?;
        if !robots {
            return Ok(people);
        }
        let bots = self
            .app_board(app_board(board, true), span, start, limit)
            .await?;
        Ok(merge_top(people, bots, limit))
    }

    /// Coins `user` has spent on settled gifts, all time (0 for none): their all-time bucket
    /// of the senders' app board, one row.
    ///
    /// # Errors
    /// Engine errors.
    pub async fn lifetime_spent(&self, user: &UserId) -> Result<i64> {
        match self {
            Self::Sqlite(l) => l.lifetime_spent(user).await,
            Self::Postgres(l) => Box::pin(l.lifetime_spent(user)).await,
            Self::Scylla(l) => Box::pin(l.lifetime_spent(user)).await,
        }
    }

    /// Deletes the app boards' day rows of days before `before_day` and week rows of weeks
    /// that began before that day's week (unix days, UTC); all-time rows stay. A board is only
    /// ever read in today's and this week's bucket, so older buckets are history no read
    /// uses. At most [`PRUNE_BATCH`] rows go per statement, each statement a short write of its
    /// own between gift settlements; returns how many rows went. Scylla keeps its rows (its
    /// listing and per-gift rows would need a time-to-live at write; not done yet).
    ///
    /// # Errors
    /// Engine errors (rows already deleted stay deleted).
    pub async fn prune_app_boards(&self, before_day: i64) -> Result<u64> {
        let mut gone = 0;
        let limit = i64::try_from(PRUNE_BATCH).unwrap_or(i64::MAX);
        for (span, before) in [(SPAN_DAY, before_day), (SPAN_WEEK, week_start(before_day))] {
            for board in APP_BOARDS {
                loop {
                    let n = match self {
                        Self::Sqlite(l) => l.prune_app_board(board, span, before, limit).await?,
                        Self::Postgres(l) => {
                            Box::pin(l.prune_app_board(board, span, before, limit)).await?
                        }
                        Self::Scylla(_) => 0,
                    };
                    gone += n;
                    if n < PRUNE_BATCH {
                        break;
                    }
                }
            }
        }
        Ok(gone)
    }

    async fn app_board(
        &self,
        board: i16,
        span: i16,
        start: i64,
        limit: usize,
    ) -> Result<Vec<(UserId, i64)>> {
        match self {
            Self::Sqlite(l) => l.app_board(board, span, start, limit).await,
            Self::Postgres(l) => Box::pin(l.app_board(board, span, start, limit)).await,
            Self::Scylla(l) => Box::pin(l.app_board(board, span, start, limit)).await,
        }
    }
}

/// `app_rank.span` of a day bucket (`start`: the day).
pub(crate) const SPAN_DAY: i16 = 0;
/// `app_rank.span` of a week bucket (`start`: its Monday).
pub(crate) const SPAN_WEEK: i16 = 1;
/// `app_rank.span` of the all-time bucket (`start`: 0).
pub(crate) const SPAN_ALL: i16 = 2;

/// `app_rank.board` of people's senders' board; receivers are `+1`, robots' boards `+2`.
pub(crate) const APP_SENDERS: i16 = 0;
/// `app_rank.board` of people's receivers' board.
pub(crate) const APP_RECEIVERS: i16 = 1;
/// Added to a board's number for robots' rows.
const ROBOT_BOARDS: i16 = 2;
/// Every `app_rank.board` number: people's and robots' senders and receivers.
const APP_BOARDS: [i16; 4] = [
    APP_SENDERS,
    APP_RECEIVERS,
    APP_SENDERS + ROBOT_BOARDS,
    APP_RECEIVERS + ROBOT_BOARDS,
];
/// Rows one prune statement deletes at most ([`Ledger::prune_app_boards`]).
pub const PRUNE_BATCH: u64 = 1_000;

/// The `app_rank.board` number of `board` for people (`robot == false`) or robots.
pub(crate) fn app_board(board: Board, robot: bool) -> i16 {
    let base = match board {
        Board::Senders => APP_SENDERS,
        Board::Receivers => APP_RECEIVERS,
    };
    if robot { base + ROBOT_BOARDS } else { base }
}

/// The `(span, start)` of the bucket a read of `period` covers on `today`.
pub(crate) fn bucket(period: Period, today: i64) -> (i16, i64) {
    match period {
        Period::Day => (SPAN_DAY, today),
        Period::Week => (SPAN_WEEK, week_start(today)),
        Period::All => (SPAN_ALL, 0),
    }
}

/// The three buckets a gift made on `day` adds to: its day, its week and all time.
pub(crate) fn buckets_of(day: i64) -> [(i16, i64); 3] {
    [(SPAN_DAY, day), (SPAN_WEEK, week_start(day)), (SPAN_ALL, 0)]
}

/// One row a settled gift adds to: `(board, span, start, user, amount)`.
pub(crate) type AppRankRow<'a> = (i16, i16, i64, &'a str, i64);

/// The users a settled gift adds to: `(board, user, amount)`, its sender's spend and each
/// recipient's value.
pub(crate) fn app_rank_users(o: &GiftOrder) -> Vec<(i16, &str, i64)> {
    let mut users = Vec::with_capacity(o.recipients.len() + 1);
    let sender = &o.sender;
    let board = app_board(Board::Senders, sender.is_robot());
    users.push((board, sender.as_str(), o.total()));
    for r in &o.recipients {
        let board = app_board(Board::Receivers, r.is_robot());
        users.push((board, r.as_str(), o.per_recipient()));
    }
    users
}

/// The app-board rows a settled gift adds to, one per key, in key order (the order row locks are taken on
/// PostgreSQL): its users' amounts ([`app_rank_users`]) in each of the three buckets.
pub(crate) fn app_rank_rows(o: &GiftOrder) -> Vec<AppRankRow<'_>> {
    let buckets = buckets_of(day_of(o.created_ms));
    let mut rows = Vec::with_capacity(3 * (o.recipients.len() + 1));
    for (board, user, amount) in app_rank_users(o) {
        for (span, start) in buckets {
            rows.push((board, span, start, user, amount));
        }
    }
    rows.sort_unstable();
    // One row per key (a statement may not add to one row twice on PostgreSQL).
    rows.dedup_by(|later, kept| {
        let same = later.0 == kept.0 && later.1 == kept.1 && later.2 == kept.2 && later.3 == kept.3;
        if same {
            kept.4 += later.4;
        }
        same
    });
    rows
}

/// The best `limit` of two boards each sorted best first (total descending, ties by user id).
pub(crate) fn merge_top<U: Ord>(a: Vec<(U, i64)>, b: Vec<(U, i64)>, limit: usize) -> Vec<(U, i64)> {
    let mut all: Vec<(U, i64)> = a.into_iter().chain(b).collect();
    all.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    all.truncate(limit);
    all
}

/// The `app_rank.board` whose all-time bucket holds `user`'s lifetime spend.
pub(crate) fn spend_board(user: &UserId) -> i16 {
    app_board(Board::Senders, user.is_robot())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gift_adds_three_buckets_per_user_and_robots_apart() {
        let mut o = super::super::order::sample(10, 2, 1, 0);
        o.sender = UserId::from("bot:x");
        let rows = app_rank_rows(&o);
        assert_eq!(rows.len(), 3 * (o.recipients.len() + 1));
        assert!(rows.windows(2).all(|w| w[0] <= w[1]));
        let spent: i64 = rows
            .iter()
            .filter(|r| r.0 == app_board(Board::Senders, true) && r.1 == SPAN_ALL)
            .map(|r| r.4)
            .sum();
        assert_eq!(spent, o.total());
        assert!(rows.iter().all(|r| r.0 != APP_SENDERS));
    }

    #[test]
    fn merged_boards_keep_order_and_limit() {
        let a = vec![("a", 50), ("c", 10)];
        let b = vec![("b", 50), ("d", 5)];
        assert_eq!(merge_top(a, b, 3), vec![("a", 50), ("b", 50), ("c", 10)]);
    }
}
