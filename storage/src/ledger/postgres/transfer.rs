//! Coin sellers and their transfers on PostgreSQL: one transaction inserts the transfer row
//! first (its id the idempotency key: a concurrent retry waits on it, then finds it), locks
//! both accounts in user-id order (the order every step uses), and books both sides, the
//! seller's day total and both statement lines. The seller's debit is conditional
//! (`coins >= amount`) and the account's CHECK forbids a negative balance, so a transfer
//! racing the seller's own gifts never overdraws.

use deadpool_postgres::Transaction;
use protocol::UserId;

use super::super::movement::transfer_lines;
use super::super::{TransferOrder, TransferOutcome, now_ms};
use super::movements::insert_movements;
use super::saga::{coins, col};
use super::{PostgresLedger, TxResult, transact};
use crate::Result;

/// Schema version 3 (appended to the migrations).
pub(super) const MIGRATION: &str = "
CREATE TABLE seller (
  user_id  TEXT PRIMARY KEY,
  since_ms BIGINT NOT NULL
);
CREATE TABLE transfer (
  id           UUID PRIMARY KEY,
  sender       TEXT NOT NULL,
  receiver     TEXT NOT NULL,
  amount       BIGINT NOT NULL CHECK (amount > 0),
  sender_after BIGINT,
  at_ms        BIGINT NOT NULL
);
CREATE TABLE transfer_day (
  user_id TEXT NOT NULL,
  day     BIGINT NOT NULL,
  total   BIGINT NOT NULL,
  PRIMARY KEY (user_id, day)
);
";

/// A refusal: roll back (the transfer row inserted first must not stay).
struct Refused(TransferOutcome);

async fn transfer_tx(
    tx: &Transaction<'_>,
    o: &TransferOrder,
) -> TxResult<std::result::Result<TransferOutcome, Refused>> {
    let id = o.id();
    let (from, to) = (o.from.as_str(), o.to.as_str());
    let now = now_ms();
    let claim = tx
        .prepare_cached(
            "INSERT INTO transfer (id, sender, receiver, amount, at_ms)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
        )
        .await?;
    if tx
        .execute(&claim, &[&id, &from, &to, &o.amount, &now])
        .await?
        == 0
    {
        let row = tx
            .query_one(
                "SELECT receiver, amount, sender_after FROM transfer WHERE id = $1",
                &[&id],
            )
            .await?;
        let (receiver, amount): (String, i64) = (col(&row, 0)?, col(&row, 1)?);
        let after: Option<i64> = col(&row, 2)?;
        return Ok(Ok(if receiver == to && amount == o.amount {
            TransferOutcome::Done {
                balance: after.unwrap_or(0),
                applied: false,
            }
        } else {
            TransferOutcome::KeyReused
        }));
    }
    let seller = tx
        .query_opt("SELECT 1 FROM seller WHERE user_id = $1", &[&from])
        .await?;
    if seller.is_none() {
        return Ok(Err(Refused(TransferOutcome::NotSeller)));
    }
    let mut users = [from, to];
    users.sort_unstable();
    tx.execute(
        "INSERT INTO account (user_id) SELECT u FROM unnest($1::TEXT[]) AS u ORDER BY u
         ON CONFLICT (user_id) DO NOTHING",
        &[&users.to_vec()],
    )
    .await?;
    tx.query(
        "SELECT user_id FROM account WHERE user_id = ANY($1) ORDER BY user_id FOR UPDATE",
        &[&users.to_vec()],
    )
    .await?;
    let today: i64 = match tx
        .query_opt(
            "SELECT total FROM transfer_day WHERE user_id = $1 AND day = $2 FOR UPDATE",
            &[&from, &o.day],
        )
        .await?
    {
        Some(row) => col(&row, 0)?,
        None => 0,
    };
    if today.saturating_add(o.amount) > o.daily_limit {
        let remaining = (o.daily_limit - today).max(0);
        return Ok(Err(Refused(TransferOutcome::DailyLimit { remaining })));
    }
    let Some(row) = tx
        .query_opt(
            "UPDATE account SET coins = coins - $2 WHERE user_id = $1 AND coins >= $2
             RETURNING coins",
            &[&from, &o.amount],
        )
        .await?
    else {
        let balance = coins(tx, from).await?;
        return Ok(Err(Refused(TransferOutcome::InsufficientFunds { balance })));
    };
    let after: i64 = col(&row, 0)?;
    let to_after: i64 = col(
        &tx.query_one(
            "UPDATE account SET coins = coins + $2 WHERE user_id = $1 RETURNING coins",
            &[&to, &o.amount],
        )
        .await?,
        0,
    )?;
    tx.execute(
        "UPDATE transfer SET sender_after = $2 WHERE id = $1",
        &[&id, &after],
    )
    .await?;
    tx.execute(
        "INSERT INTO transfer_day (user_id, day, total) VALUES ($1, $2, $3)
         ON CONFLICT (user_id, day) DO UPDATE SET total = transfer_day.total + EXCLUDED.total",
        &[&from, &o.day, &o.amount],
    )
    .await?;
    let lines = transfer_lines(o, after, Some(to_after), now);
    insert_movements(tx, &lines).await?;
    Ok(Ok(TransferOutcome::Done {
        balance: after,
        applied: true,
    }))
}

impl PostgresLedger {
    pub(in crate::ledger) async fn set_seller(&self, user: &UserId, seller: bool) -> Result<()> {
        transact!(self, |tx| {
            if seller {
                tx.execute(
                    "INSERT INTO seller (user_id, since_ms) VALUES ($1, $2)
                     ON CONFLICT (user_id) DO NOTHING",
                    &[&user.as_str(), &now_ms()],
                )
                .await?;
            } else {
                tx.execute("DELETE FROM seller WHERE user_id = $1", &[&user.as_str()])
                    .await?;
            }
            Ok(())
        })
    }

    pub(in crate::ledger) async fn is_seller(&self, user: &UserId) -> Result<bool> {
        let rows = self
            .read("SELECT 1 FROM seller WHERE user_id = $1", &[&user.as_str()])
            .await?;
        Ok(!rows.is_empty())
    }

    pub(in crate::ledger) async fn transfer(&self, o: &TransferOrder) -> Result<TransferOutcome> {
        let out = transact!(
            self,
            |tx| transfer_tx(&tx, o).await,
            commit_if | r: &std::result::Result<TransferOutcome, Refused> | r.is_ok()
        )?;
        Ok(out.unwrap_or_else(|Refused(r)| r))
    }
}
