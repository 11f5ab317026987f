//! App-wide leaderboards on Scylla. A user's total per (board, bucket) is the static head of
//! an `app_rank_user` partition, moved by compare-and-set on its `version` in one conditional
//! batch with a marker row under the gift id (the wallet's protocol): the marker is read
//! before the head, every change bumps the version, so a gift adds to a total exactly once
//! however often its settlement is retried. Counters were not used: an increment is not
//! idempotent, and a retried settlement would count a gift twice.
//!
//! The board's order lives in `app_rank_top`, clustered by total descending in
//! [`TOP_SHARDS`] partitions per (board, bucket) (a user's shard is a hash of the id), so no
//! single partition takes every gift of the app. Each change moves the user's listing row
//! from the old total to the new one, both writes stamped with the head's new version as
//! their timestamp: listings written out of order still leave the newest one. A listing lost
//! to a crash after the compare-and-set is written again by the retry (it finds the marker);
//! a stale row left meanwhile is dropped at read (a user counts once, at their highest row).
//! A read asks every shard for its best rows: [`TOP_SHARDS`] × (`limit` + a margin) rows,
//! however many gifts the board holds.
//!
//! Cost per gift: per user and bucket (three buckets per user), one serial read of the marker
//! and one of the head, one conditional batch and two listing writes, the rows of one gift in
//! parallel. A popular host's partitions see one compare-and-set per gift to them: like a
//! sender's wallet, contended writers retry (at most [`MAX_CAS_ATTEMPTS`] rounds), and a
//! settlement that keeps losing answers `Conflict` and is retried by the saga.

use std::time::Duration;

use ::scylla::client::session::Session;
use ::scylla::policies::retry::FallthroughRetryPolicy;
use ::scylla::statement::batch::{Batch, BatchType};
use ::scylla::statement::prepared::PreparedStatement;
use ::scylla::statement::{Consistency, SerialConsistency};
use futures_util::future::try_join_all;
use protocol::UserId;
use rand::Rng;
use tracing::warn;
use uuid::Uuid;

use super::super::GiftOrder;
use super::super::app_rank::{AppRankRow, SPAN_ALL, app_rank_rows, spend_board};
use super::schema::{lwt, plain, serial};
use super::{CAS_JITTER_MAX_MS, MAX_CAS_ATTEMPTS, ScyllaLedger, backend, lwt_applied};
use crate::{Result, StorageError};

/// Partitions per (board, bucket) of the ordered listing.
pub(super) const TOP_SHARDS: u32 = 16;
/// Rows read per shard beyond `limit`: room for stale listing rows a crash left.
const TOP_MARGIN: usize = 8;

/// The tables (created at start-up with the others).
pub(super) fn schema(ks: &str) -> Vec<String> {
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.app_rank_user (
               board smallint, span smallint, start bigint, user_id text, gift_id uuid,
               total bigint STATIC, version bigint STATIC, amount bigint,
               PRIMARY KEY ((board, span, start, user_id), gift_id))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.app_rank_top (
               board smallint, span smallint, start bigint, shard smallint,
               total bigint, user_id text,
               PRIMARY KEY ((board, span, start, shard), total, user_id))
             WITH CLUSTERING ORDER BY (total DESC, user_id ASC)"
        ),
    ]
}

/// The app boards' statements.
pub(super) struct AppRankStatements {
    marker: PreparedStatement,
    head: PreparedStatement,
    head_plain: PreparedStatement,
    change: Batch,
    list: PreparedStatement,
    unlist: PreparedStatement,
    top: PreparedStatement,
}

pub(super) async fn prepare(session: &Session, ks: &str) -> Result<AppRankStatements> {
    let prep = |cql: String| async move { session.prepare(cql).await.map_err(backend) };
    let key = "board = ? AND span = ? AND start = ? AND user_id = ?";
    let marker = serial(
        prep(format!(
            "SELECT amount FROM {ks}.app_rank_user WHERE {key} AND gift_id = ?"
        ))
        .await?,
    );
    let head_cql = format!("SELECT total, version FROM {ks}.app_rank_user WHERE {key} LIMIT 1");
    let head = serial(prep(head_cql.clone()).await?);
    let head_plain = plain(prep(head_cql).await?);
    let cas = lwt(prep(format!(
        "UPDATE {ks}.app_rank_user SET total = ?, version = ? WHERE {key} IF version = ?"
    ))
    .await?);
    let mark = prep(format!(
        "INSERT INTO {ks}.app_rank_user (board, span, start, user_id, gift_id, amount)
         VALUES (?, ?, ?, ?, ?, ?)"
    ))
    .await?;
    let mut change = Batch::new(BatchType::Logged);
    change.append_statement(cas);
    change.append_statement(mark);
    change.set_consistency(Consistency::LocalQuorum);
    change.set_serial_consistency(Some(SerialConsistency::LocalSerial));
    change.set_retry_policy(Some(std::sync::Arc::new(FallthroughRetryPolicy::new())));
    let list = plain(
        prep(format!(
            "INSERT INTO {ks}.app_rank_top (board, span, start, shard, total, user_id)
             VALUES (?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        ))
        .await?,
    );
    let unlist = plain(
        prep(format!(
            "DELETE FROM {ks}.app_rank_top USING TIMESTAMP ?
             WHERE board = ? AND span = ? AND start = ? AND shard = ? AND total = ? AND user_id = ?"
        ))
        .await?,
    );
    let top = plain(
        prep(format!(
            "SELECT user_id, total FROM {ks}.app_rank_top
             WHERE board = ? AND span = ? AND start = ? AND shard = ? LIMIT ?"
        ))
        .await?,
    );
    Ok(AppRankStatements {
        marker,
        head,
        head_plain,
        change,
        list,
        unlist,
        top,
    })
}

/// A user's listing shard: FNV-1a of the id (stable across builds and machines).
fn shard_of(user: &str) -> i16 {
    let mut h: u32 = 0x811c_9dc5;
    for b in user.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    i16::try_from(h % TOP_SHARDS).unwrap_or(0)
}

/// Values of the change batch: the head's compare-and-set, then the marker row.
type Change<'a> = (
    (i64, i64, i16, i16, i64, &'a str, Option<i64>),
    (i16, i16, i64, &'a str, Uuid, i64),
);

impl ScyllaLedger {
    /// Adds a settled gift to the app boards, exactly once per row (see the module docs).
    pub(super) async fn add_app_ranks(&self, o: &GiftOrder) -> Result<()> {
        let rows = app_rank_rows(o);
        try_join_all(
            rows.into_iter()
                .map(|row| self.add_app_rank(row, o.gift_id)),
        )
        .await?;
        Ok(())
    }

    async fn add_app_rank(&self, row: AppRankRow<'_>, gift_id: Uuid) -> Result<()> {
        let st = &self.st.app_ranks;
        let (board, span, start, user, amount) = row;
        for _ in 0..MAX_CAS_ATTEMPTS {
            let marked: Vec<(Option<i64>,)> = self
                .rows(&st.marker, (board, span, start, user, gift_id))
                .await?;
            let head: Vec<(Option<i64>, Option<i64>)> =
                self.rows(&st.head, (board, span, start, user)).await?;
            let (total, version) = head
                .into_iter()
                .next()
                .map_or((0, None), |(t, v)| (t.unwrap_or(0), v));
            if !marked.is_empty() {
                // Added by an earlier attempt: list the current total again (its listing may
                // have been lost with that attempt).
                if let Some(v) = version {
                    self.list(row, None, total, v).await?;
                }
                return Ok(());
            }
            let (new_total, new_version) = (total + amount, version.unwrap_or(0) + 1);
            let values: Change<'_> = (
                (new_total, new_version, board, span, start, user, version),
                (board, span, start, user, gift_id, amount),
            );
            match self.session.batch(&st.change, &values).await {
                Ok(res) => {
                    if lwt_applied(res)? {
                        let old = version.map(|_| total);
                        return self.list(row, old, new_total, new_version).await;
                    }
                }
                Err(e) => warn!(error = %e, "App board LWT outcome unknown; reading back."),
            }
            let jitter = rand::rng().random_range(0..=CAS_JITTER_MAX_MS);
            tokio::time::sleep(Duration::from_millis(jitter)).await;
        }
        Err(StorageError::Conflict(format!(
            "app board row of {user}: compare-and-set kept losing"
        )))
    }

    /// Moves `row`'s user's listing from `old` (if any) to `total`, stamped `version`.
    async fn list(
        &self,
        row: AppRankRow<'_>,
        old: Option<i64>,
        total: i64,
        version: i64,
    ) -> Result<()> {
        let st = &self.st.app_ranks;
        let (board, span, start, user, _) = row;
        let shard = shard_of(user);
        if let Some(old) = old {
            let key = (version, board, span, start, shard, old, user);
            self.write(&st.unlist, key).await?;
        }
        let values = (board, span, start, shard, total, user, version);
        self.write(&st.list, values).await
    }

    pub(in crate::ledger) async fn app_board(
        &self,
        board: i16,
        span: i16,
        start: i64,
        limit: usize,
    ) -> Result<Vec<(UserId, i64)>> {
        let st = &self.st.app_ranks;
        let per_shard = i32::try_from(limit.saturating_add(TOP_MARGIN)).unwrap_or(i32::MAX);
        let shards = (0..TOP_SHARDS).filter_map(|s| i16::try_from(s).ok());
        let pages = try_join_all(shards.map(|shard| {
            self.rows::<(String, i64)>(&st.top, (board, span, start, shard, per_shard))
        }))
        .await?;
        let mut best: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
        for (user, total) in pages.into_iter().flatten() {
            let slot = best.entry(user).or_insert(total);
            *slot = (*slot).max(total);
        }
        let mut ranked: Vec<(String, i64)> = best.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ranked.truncate(limit);
        Ok(ranked
            .into_iter()
            .map(|(u, t)| (UserId::new(u), t))
            .collect())
    }

    pub(in crate::ledger) async fn lifetime_spent(&self, user: &UserId) -> Result<i64> {
        let st = &self.st.app_ranks;
        let key = (spend_board(user), SPAN_ALL, 0_i64, user.as_str());
        let head: Vec<(Option<i64>, Option<i64>)> = self.rows(&st.head_plain, key).await?;
        Ok(head.into_iter().next().and_then(|r| r.0).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_stable_and_in_range() {
        assert_eq!(shard_of("alice"), shard_of("alice"));
        assert!(
            (0..TOP_SHARDS).all(|_| u32::try_from(shard_of("bob")).is_ok_and(|s| s < TOP_SHARDS))
        );
    }
}
