//! Top-ups, refunds and debts on PostgreSQL (see the `payment` module of the ledger): each one
//! transaction. The payment row goes in first, keyed by the provider's payment id, so a
//! concurrent repeat waits on that key and then finds the first result; the user's account is
//! locked before the coins and the debt change.

use deadpool_postgres::Transaction;
use protocol::UserId;

use super::super::movement::single;
use super::super::{MovementKind, Payment, RefundOutcome, TopUpOutcome, now_ms};
use super::movements::insert_movements;
use super::saga::col;
use super::{PostgresLedger, TxResult, transact};
use crate::Result;

/// Schema version 4 (appended to the migrations).
pub(super) const MIGRATION: &str = "
CREATE TABLE payment (
  id        TEXT PRIMARY KEY,
  user_id   TEXT NOT NULL,
  product   TEXT NOT NULL,
  coins     BIGINT NOT NULL CHECK (coins > 0),
  debt_paid BIGINT NOT NULL DEFAULT 0,
  refunded  BOOLEAN NOT NULL DEFAULT FALSE,
  at_ms     BIGINT NOT NULL
);
CREATE TABLE debt (
  user_id TEXT PRIMARY KEY,
  amount  BIGINT NOT NULL CHECK (amount > 0)
);
";

/// Creates the account if missing and locks it; returns its coins.
async fn lock_account(tx: &Transaction<'_>, user: &str) -> TxResult<i64> {
    tx.execute(
        "INSERT INTO account (user_id) VALUES ($1) ON CONFLICT (user_id) DO NOTHING",
        &[&user],
    )
    .await?;
    let row = tx
        .query_one(
            "SELECT coins FROM account WHERE user_id = $1 FOR UPDATE",
            &[&user],
        )
        .await?;
    Ok(col(&row, 0)?)
}

pub(super) async fn debt_of(tx: &Transaction<'_>, user: &str) -> TxResult<i64> {
    Ok(
        match tx
            .query_opt("SELECT amount FROM debt WHERE user_id = $1", &[&user])
            .await?
        {
            Some(row) => col(&row, 0)?,
            None => 0,
        },
    )
}

async fn set_debt(tx: &Transaction<'_>, user: &str, amount: i64) -> TxResult<()> {
    if amount > 0 {
        tx.execute(
            "INSERT INTO debt (user_id, amount) VALUES ($1, $2)
             ON CONFLICT (user_id) DO UPDATE SET amount = EXCLUDED.amount",
            &[&user, &amount],
        )
        .await?;
    } else {
        tx.execute("DELETE FROM debt WHERE user_id = $1", &[&user])
            .await?;
    }
    Ok(())
}

async fn top_up_tx(tx: &Transaction<'_>, p: &Payment) -> TxResult<TopUpOutcome> {
    let user = p.user.as_str();
    let now = now_ms();
    let inserted = tx
        .execute(
            "INSERT INTO payment (id, user_id, product, coins, at_ms) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (id) DO NOTHING",
            &[&p.id, &user, &p.product, &p.coins, &now],
        )
        .await?;
    if inserted == 0 {
        let row = tx
            .query_one(
                "SELECT user_id, coins, debt_paid FROM payment WHERE id = $1",
                &[&p.id],
            )
            .await?;
        let (who, amount, debt_paid): (String, i64, i64) =
            (col(&row, 0)?, col(&row, 1)?, col(&row, 2)?);
        if who != user || amount != p.coins {
            return Ok(TopUpOutcome::KeyReused);
        }
        let balance = lock_account(tx, user).await?;
        return Ok(TopUpOutcome::Credited {
            balance,
            applied: false,
            debt_paid,
        });
    }
    let have = lock_account(tx, user).await?;
    let debt = debt_of(tx, user).await?;
    let paid = debt.min(p.coins);
    if paid > 0 {
        set_debt(tx, user, debt - paid).await?;
        tx.execute(
            "UPDATE payment SET debt_paid = $2 WHERE id = $1",
            &[&p.id, &paid],
        )
        .await?;
    }
    let rest = p.coins - paid;
    let balance: i64 = if rest > 0 {
        col(
            &tx.query_one(
                "UPDATE account SET coins = coins + $2 WHERE user_id = $1 RETURNING coins",
                &[&user, &rest],
            )
            .await?,
            0,
        )?
    } else {
        have
    };
    let line = single(
        &p.user,
        MovementKind::TopUp,
        rest,
        Some(balance),
        None,
        &p.id,
        now,
    );
    insert_movements(tx, &[line]).await?;
    Ok(TopUpOutcome::Credited {
        balance,
        applied: true,
        debt_paid: paid,
    })
}

async fn refund_tx(tx: &Transaction<'_>, id: &str) -> TxResult<RefundOutcome> {
    let Some(row) = tx
        .query_opt(
            "SELECT user_id, coins, refunded FROM payment WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .await?
    else {
        return Ok(RefundOutcome::Unknown);
    };
    let (user, amount, refunded): (String, i64, bool) =
        (col(&row, 0)?, col(&row, 1)?, col(&row, 2)?);
    let have = lock_account(tx, &user).await?;
    if refunded {
        return Ok(RefundOutcome::Refunded {
            balance: have,
            debt: debt_of(tx, &user).await?,
            applied: false,
        });
    }
    let take = have.min(amount);
    let balance = have - take;
    tx.execute(
        "UPDATE account SET coins = $2 WHERE user_id = $1",
        &[&user, &balance],
    )
    .await?;
    let debt = debt_of(tx, &user).await? + (amount - take);
    set_debt(tx, &user, debt).await?;
    tx.execute("UPDATE payment SET refunded = TRUE WHERE id = $1", &[&id])
        .await?;
    let line = single(
        &UserId::from(user.as_str()),
        MovementKind::Refund,
        -take,
        Some(balance),
        None,
        id,
        now_ms(),
    );
    insert_movements(tx, &[line]).await?;
    Ok(RefundOutcome::Refunded {
        balance,
        debt,
        applied: true,
    })
}

impl PostgresLedger {
    pub(in crate::ledger) async fn top_up(&self, p: &Payment) -> Result<TopUpOutcome> {
        transact!(self, |tx| top_up_tx(&tx, p).await)
    }

    pub(in crate::ledger) async fn refund(&self, id: &str) -> Result<RefundOutcome> {
        transact!(self, |tx| refund_tx(&tx, id).await)
    }

    pub(in crate::ledger) async fn debt(&self, user: &UserId) -> Result<i64> {
        let rows = self
            .read(
                "SELECT amount FROM debt WHERE user_id = $1",
                &[&user.as_str()],
            )
            .await?;
        rows.first().map_or(Ok(0), |r| col(r, 0))
    }
}
