//! The statement on Scylla: movements are plain idempotent rows (this table never sees an
//! LWT), in one partition per user clustered newest first by `(at_ms, mkey)`, and again per
//! `(user, kind)` for a page of one kind.
//!
//! A gift's movements are written when it settles, keyed by its id and stamped with its
//! order's time, so recovery rewrites identical rows. A grant's movement is written once its
//! wallet change landed. The position is a time: a movement written late (a gift recovered
//! after a crash) lands at its order's time, possibly behind a page already read; and a crash
//! between a grant's wallet change and its movement loses that line (the wallet entry keeps
//! the money exact). PostgreSQL and SQLite do not have these gaps: there the movement commits
//! with its booking.

use ::scylla::client::session::Session;
use ::scylla::statement::Consistency;
use ::scylla::statement::prepared::PreparedStatement;
use protocol::UserId;

use super::super::movement::next_cursor;
use super::super::{HistoryPage, HistoryQuery, Movement, MovementKind, NewMovement};
use super::{ScyllaLedger, backend};
use crate::{Result, StorageError};

/// The tables (created at start-up with the others).
pub(super) fn schema(ks: &str) -> Vec<String> {
    let cols = "user_id text, at_ms bigint, mkey text, kind text, amount bigint,
               balance_after bigint, counterparty text, key text";
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.movements ({cols},
               PRIMARY KEY ((user_id), at_ms, mkey))
             WITH CLUSTERING ORDER BY (at_ms DESC, mkey DESC)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.movements_by_kind ({cols},
               PRIMARY KEY ((user_id, kind), at_ms, mkey))
             WITH CLUSTERING ORDER BY (at_ms DESC, mkey DESC)"
        ),
    ]
}

/// The statements of the statement.
pub(super) struct MovementStatements {
    add: PreparedStatement,
    add_by_kind: PreparedStatement,
    page: PreparedStatement,
    page_by_kind: PreparedStatement,
}

pub(super) async fn prepare(session: &Session, ks: &str) -> Result<MovementStatements> {
    let prep = |cql: String| async move {
        let mut p = session.prepare(cql).await.map_err(backend)?;
        p.set_consistency(Consistency::LocalQuorum);
        p.set_is_idempotent(true);
        Ok::<_, StorageError>(p)
    };
    let insert = |table: &str| {
        format!(
            "INSERT INTO {ks}.{table}
               (user_id, at_ms, mkey, kind, amount, balance_after, counterparty, key)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        )
    };
    let cols = "at_ms, mkey, kind, amount, balance_after, counterparty, key";
    Ok(MovementStatements {
        add: prep(insert("movements")).await?,
        add_by_kind: prep(insert("movements_by_kind")).await?,
        page: prep(format!(
            "SELECT {cols} FROM {ks}.movements
             WHERE user_id = ? AND (at_ms, mkey) < (?, ?) LIMIT ?"
        ))
        .await?,
        page_by_kind: prep(format!(
            "SELECT {cols} FROM {ks}.movements_by_kind
             WHERE user_id = ? AND kind = ? AND (at_ms, mkey) < (?, ?) LIMIT ?"
        ))
        .await?,
    })
}

/// A row's clustering key after its time: unique per booking and kind.
fn mkey(m: &Movement) -> String {
    format!("{}:{}", m.kind.as_str(), m.key)
}

/// A page row: `at_ms, mkey, kind, amount, balance_after, counterparty, key`.
type PageRow = (
    i64,
    String,
    String,
    i64,
    Option<i64>,
    Option<String>,
    String,
);

impl ScyllaLedger {
    /// Writes `rows` (idempotent: the same booking writes the same rows).
    pub(super) async fn write_movements(&self, rows: &[NewMovement]) -> Result<()> {
        for r in rows {
            let m = &r.movement;
            let values = (
                r.user.as_str(),
                m.at_ms,
                mkey(m),
                m.kind.as_str(),
                m.amount,
                m.balance_after,
                m.counterparty.as_deref(),
                m.key.as_str(),
            );
            self.write(&self.st.movements.add, values.clone()).await?;
            self.write(&self.st.movements.add_by_kind, values).await?;
        }
        Ok(())
    }

    pub(in crate::ledger) async fn history(
        &self,
        user: &UserId,
        q: &HistoryQuery,
    ) -> Result<HistoryPage> {
        let (at, key) = match q.cursor.as_deref() {
            None => (i64::MAX, String::new()),
            Some(c) => {
                let bad = || StorageError::invalid_msg("bad history cursor");
                let (at, key) = c.split_once('.').ok_or_else(bad)?;
                (at.parse::<i64>().map_err(|_| bad())?, key.to_owned())
            }
        };
        let limit = q.clamped_limit();
        let fetch = i32::try_from(limit + 1).unwrap_or(i32::MAX);
        let mut rows: Vec<PageRow> = match q.kind {
            None => {
                self.rows(&self.st.movements.page, (user.as_str(), at, &key, fetch))
                    .await?
            }
            Some(kind) => {
                let values = (user.as_str(), kind.as_str(), at, &key, fetch);
                self.rows(&self.st.movements.page_by_kind, values).await?
            }
        };
        let next = next_cursor(&mut rows, limit, |r| format!("{}.{}", r.0, r.1));
        let movements = rows
            .into_iter()
            .map(
                |(at_ms, _, kind, amount, balance_after, counterparty, key)| {
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
}
