//! Host settlements on SQLite: one job moves the earnings into the settlement row (keyed by
//! the settlement id) and writes the statement line.

use rusqlite::{Connection, OptionalExtension, params};

use super::super::movement::single;
use super::super::{MovementKind, SettlementOrder, SettlementOutcome, now_ms};
use super::movements::insert_movements;
use super::{SqliteLedger, db};
use crate::Result;

/// The table (created at open with the others).
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS settlement (
  id       TEXT PRIMARY KEY,
  user     TEXT NOT NULL,
  amount   INTEGER NOT NULL CHECK (amount > 0),
  payout   INTEGER NOT NULL,
  period   TEXT NOT NULL,
  at_ms    INTEGER NOT NULL
) WITHOUT ROWID;
";

fn earnings(c: &Connection, user: &str) -> Result<i64> {
    Ok(
        c.prepare_cached("SELECT earnings FROM account WHERE user = ?1")
            .map_err(db)?
            .query_row([user], |r| r.get(0))
            .optional()
            .map_err(db)?
            .unwrap_or(0),
    )
}

fn tx_settle(c: &Connection, o: &SettlementOrder) -> Result<SettlementOutcome> {
    let user = o.user.as_str();
    let first: Option<(String, i64, i64)> = c
        .prepare_cached("SELECT user, amount, payout FROM settlement WHERE id = ?1")
        .map_err(db)?
        .query_row([o.id.as_str()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()
        .map_err(db)?;
    if let Some((who, amount, payout)) = first {
        if who != user || amount != o.amount {
            return Ok(SettlementOutcome::KeyReused);
        }
        return Ok(SettlementOutcome::Settled {
            earnings: earnings(c, user)?,
            payout,
            applied: false,
        });
    }
    let have = earnings(c, user)?;
    if have < o.amount {
        return Ok(SettlementOutcome::InsufficientEarnings { earnings: have });
    }
    let after = have - o.amount;
    c.prepare_cached("UPDATE account SET earnings = ?2 WHERE user = ?1")
        .map_err(db)?
        .execute(params![user, after])
        .map_err(db)?;
    let now = now_ms();
    c.prepare_cached(
        "INSERT INTO settlement (id, user, amount, payout, period, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .map_err(db)?
    .execute(params![o.id, user, o.amount, o.payout, o.period, now])
    .map_err(db)?;
    let line = single(
        &o.user,
        MovementKind::Settlement,
        -o.amount,
        None,
        None,
        &o.id,
        now,
    );
    insert_movements(c, &[line])?;
    Ok(SettlementOutcome::Settled {
        earnings: after,
        payout: o.payout,
        applied: true,
    })
}

/// Earnings settled so far, for the audit.
pub(super) fn settled_total(c: &Connection) -> Result<i64> {
    c.query_row("SELECT COALESCE(SUM(amount), 0) FROM settlement", [], |r| {
        r.get(0)
    })
    .map_err(db)
}

impl SqliteLedger {
    pub(in crate::ledger) async fn settle_earnings(
        &self,
        o: &SettlementOrder,
    ) -> Result<SettlementOutcome> {
        let o = o.clone();
        self.write(move |c| tx_settle(c, &o)).await
    }
}
