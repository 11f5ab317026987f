//! Host settlements on PostgreSQL: one transaction claims the settlement id, locks the host's
//! earnings rows (the slots a popular host's gifts are spread over) and takes the amount from
//! them, then writes the statement line.

use deadpool_postgres::Transaction;

use super::super::movement::single;
use super::super::{MovementKind, SettlementOrder, SettlementOutcome, now_ms};
use super::movements::insert_movements;
use super::saga::col;
use super::{PostgresLedger, TxResult, transact};
use crate::Result;

/// Schema version 5 (appended to the migrations).
pub(super) const MIGRATION: &str = "
CREATE TABLE settlement (
  id      TEXT PRIMARY KEY,
  user_id TEXT NOT NULL,
  amount  BIGINT NOT NULL CHECK (amount > 0),
  payout  BIGINT NOT NULL,
  period  TEXT NOT NULL,
  at_ms   BIGINT NOT NULL
);
";

/// A refusal: roll back (the settlement row inserted first must not stay).
struct Refused(SettlementOutcome);

async fn settle_tx(
    tx: &Transaction<'_>,
    o: &SettlementOrder,
) -> TxResult<std::result::Result<SettlementOutcome, Refused>> {
    let user = o.user.as_str();
    let now = now_ms();
    let inserted = tx
        .execute(
            "INSERT INTO settlement (id, user_id, amount, payout, period, at_ms)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
            &[&o.id, &user, &o.amount, &o.payout, &o.period, &now],
        )
        .await?;
    // The host's slots, locked in key order (the order gifts' credits take them).
    let slots = tx
        .query(
            "SELECT slot, amount FROM earning WHERE user_id = $1 ORDER BY slot FOR UPDATE",
            &[&user],
        )
        .await?;
    let mut have: i64 = 0;
    for r in &slots {
        have += col::<i64>(r, 1)?;
    }
    if inserted == 0 {
        let row = tx
            .query_one(
                "SELECT user_id, amount, payout FROM settlement WHERE id = $1",
                &[&o.id],
            )
            .await?;
        let (who, amount, payout): (String, i64, i64) =
            (col(&row, 0)?, col(&row, 1)?, col(&row, 2)?);
        if who != user || amount != o.amount {
            return Ok(Ok(SettlementOutcome::KeyReused));
        }
        return Ok(Ok(SettlementOutcome::Settled {
            earnings: have,
            payout,
            applied: false,
        }));
    }
    if have < o.amount {
        return Ok(Err(Refused(SettlementOutcome::InsufficientEarnings {
            earnings: have,
        })));
    }
    let mut left = o.amount;
    for r in &slots {
        if left == 0 {
            break;
        }
        let (slot, amount): (i16, i64) = (col(r, 0)?, col(r, 1)?);
        let take = amount.min(left);
        if take > 0 {
            tx.execute(
                "UPDATE earning SET amount = amount - $3 WHERE user_id = $1 AND slot = $2",
                &[&user, &slot, &take],
            )
            .await?;
            left -= take;
        }
    }
    let line = single(
        &o.user,
        MovementKind::Settlement,
        -o.amount,
        None,
        None,
        &o.id,
        now,
    );
    insert_movements(tx, &[line]).await?;
    Ok(Ok(SettlementOutcome::Settled {
        earnings: have - o.amount,
        payout: o.payout,
        applied: true,
    }))
}

impl PostgresLedger {
    pub(in crate::ledger) async fn settle_earnings(
        &self,
        o: &SettlementOrder,
    ) -> Result<SettlementOutcome> {
        let out = transact!(
            self,
            |tx| settle_tx(&tx, o).await,
            commit_if | r: &std::result::Result<SettlementOutcome, Refused> | r.is_ok()
        )?;
        Ok(out.unwrap_or_else(|Refused(r)| r))
    }
}
