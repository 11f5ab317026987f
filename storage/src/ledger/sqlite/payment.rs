//! Top-ups, refunds and debts on SQLite (see the `payment` module of the ledger): each one
//! job, its payment row (keyed by the provider's payment id) written with the coins, the debt
//! and the statement line.

use protocol::UserId;
use rusqlite::{Connection, OptionalExtension, params};

use super::super::movement::single;
use super::super::{MovementKind, Payment, RefundOutcome, TopUpOutcome, now_ms};
use super::movements::insert_movements;
use super::rows::{add_coins, coins};
use super::{SqliteLedger, db};
use crate::Result;

/// The tables (created at open with the others).
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS payment (
  id        TEXT PRIMARY KEY,
  user      TEXT NOT NULL,
  product   TEXT NOT NULL,
  coins     INTEGER NOT NULL CHECK (coins > 0),
  debt_paid INTEGER NOT NULL,
  refunded  INTEGER NOT NULL DEFAULT 0,
  at_ms     INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS debt (
  user   TEXT PRIMARY KEY,
  amount INTEGER NOT NULL CHECK (amount > 0)
) WITHOUT ROWID;
";

/// The user's debt (0 for none).
pub(super) fn debt_of(c: &Connection, user: &str) -> Result<i64> {
    Ok(c.prepare_cached("SELECT amount FROM debt WHERE user = ?1")
        .map_err(db)?
        .query_row([user], |r| r.get(0))
        .optional()
        .map_err(db)?
        .unwrap_or(0))
}

/// Sets the user's debt (no row for none).
fn set_debt(c: &Connection, user: &str, amount: i64) -> Result<()> {
    if amount > 0 {
        c.prepare_cached(
            "INSERT INTO debt (user, amount) VALUES (?1, ?2)
             ON CONFLICT (user) DO UPDATE SET amount = ?2",
        )
        .map_err(db)?
        .execute(params![user, amount])
        .map_err(db)?;
    } else {
        c.prepare_cached("DELETE FROM debt WHERE user = ?1")
            .map_err(db)?
            .execute([user])
            .map_err(db)?;
    }
    Ok(())
}

fn tx_top_up(c: &Connection, p: &Payment) -> Result<TopUpOutcome> {
    let user = p.user.as_str();
    let first: Option<(String, i64, i64)> = c
        .prepare_cached("SELECT user, coins, debt_paid FROM payment WHERE id = ?1")
        .map_err(db)?
        .query_row([p.id.as_str()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()
        .map_err(db)?;
    if let Some((who, amount, debt_paid)) = first {
        if who != user || amount != p.coins {
            return Ok(TopUpOutcome::KeyReused);
        }
        return Ok(TopUpOutcome::Credited {
            balance: coins(c, user)?,
            applied: false,
            debt_paid,
        });
    }
    let debt = debt_of(c, user)?;
    let paid = debt.min(p.coins);
    if paid > 0 {
        set_debt(c, user, debt - paid)?;
    }
    let rest = p.coins - paid;
    let balance = if rest > 0 {
        add_coins(c, user, rest)?
    } else {
        coins(c, user)?
    };
    let now = now_ms();
    c.prepare_cached(
        "INSERT INTO payment (id, user, product, coins, debt_paid, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .map_err(db)?
    .execute(params![p.id, user, p.product, p.coins, paid, now])
    .map_err(db)?;
    let line = single(
        &p.user,
        MovementKind::TopUp,
        rest,
        Some(balance),
        None,
        &p.id,
        now,
    );
    insert_movements(c, &[line])?;
    Ok(TopUpOutcome::Credited {
        balance,
        applied: true,
        debt_paid: paid,
    })
}

fn tx_refund(c: &Connection, id: &str) -> Result<RefundOutcome> {
    let row: Option<(String, i64, bool)> = c
        .prepare_cached("SELECT user, coins, refunded FROM payment WHERE id = ?1")
        .map_err(db)?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()
        .map_err(db)?;
    let Some((user, amount, refunded)) = row else {
        return Ok(RefundOutcome::Unknown);
    };
    if refunded {
        return Ok(RefundOutcome::Refunded {
            balance: coins(c, &user)?,
            debt: debt_of(c, &user)?,
            applied: false,
        });
    }
    let have = coins(c, &user)?;
    let take = have.min(amount);
    let balance = if take > 0 {
        add_coins(c, &user, -take)?
    } else {
        have
    };
    let debt = debt_of(c, &user)? + (amount - take);
    set_debt(c, &user, debt)?;
    c.prepare_cached("UPDATE payment SET refunded = 1 WHERE id = ?1")
        .map_err(db)?
        .execute([id])
        .map_err(db)?;
    let now = now_ms();
    let line = single(
        &UserId::from(user.as_str()),
        MovementKind::Refund,
        -take,
        Some(balance),
        None,
        id,
        now,
    );
    insert_movements(c, &[line])?;
    Ok(RefundOutcome::Refunded {
        balance,
        debt,
        applied: true,
    })
}

/// `topped_up, refunded, debt, transferred` for the audit.
pub(super) fn payment_totals(c: &Connection) -> Result<(i64, i64, i64, i64)> {
    c.query_row(
        "SELECT (SELECT COALESCE(SUM(coins), 0) FROM payment),
                (SELECT COALESCE(SUM(coins), 0) FROM payment WHERE refunded = 1),
                (SELECT COALESCE(SUM(amount), 0) FROM debt),
                (SELECT COALESCE(SUM(amount), 0) FROM transfer)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )
    .map_err(db)
}

impl SqliteLedger {
    pub(in crate::ledger) async fn top_up(&self, p: &Payment) -> Result<TopUpOutcome> {
        let p = p.clone();
        self.write(move |c| tx_top_up(c, &p)).await
    }

    pub(in crate::ledger) async fn refund(&self, id: &str) -> Result<RefundOutcome> {
        let id = id.to_owned();
        self.write(move |c| tx_refund(c, &id)).await
    }

    pub(in crate::ledger) async fn debt(&self, user: &UserId) -> Result<i64> {
        let user = user.clone();
        self.read(move |c| debt_of(c, user.as_str())).await
    }
}
