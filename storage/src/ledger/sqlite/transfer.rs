//! Coin sellers and their transfers on SQLite: one job books both sides, the transfer row (its
//! id the idempotency key), the seller's day total and both statement lines.

use rusqlite::{Connection, OptionalExtension, params};

use super::super::movement::transfer_lines;
use super::super::{TransferOrder, TransferOutcome, now_ms};
use super::movements::insert_movements;
use super::rows::{add_coins, coins};
use super::{SqliteLedger, db};
use crate::Result;
use protocol::UserId;

/// The tables (created at open with the others).
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS seller (
  user     TEXT PRIMARY KEY,
  since_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS transfer (
  id           BLOB PRIMARY KEY,
  sender       TEXT NOT NULL,
  receiver     TEXT NOT NULL,
  amount       INTEGER NOT NULL CHECK (amount > 0),
  sender_after INTEGER NOT NULL,
  at_ms        INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS transfer_day (
  user  TEXT NOT NULL,
  day   INTEGER NOT NULL,
  total INTEGER NOT NULL,
  PRIMARY KEY (user, day)
) WITHOUT ROWID;
";

fn is_seller(c: &Connection, user: &str) -> Result<bool> {
    c.prepare_cached("SELECT EXISTS (SELECT 1 FROM seller WHERE user = ?1)")
        .map_err(db)?
        .query_row([user], |r| r.get(0))
        .map_err(db)
}

/// Books `o` inside the writer's job (see the module docs).
fn tx_transfer(c: &Connection, o: &TransferOrder) -> Result<TransferOutcome> {
    let id = o.id();
    let (from, to) = (o.from.as_str(), o.to.as_str());
    let first: Option<(String, i64, i64)> = c
        .prepare_cached("SELECT receiver, amount, sender_after FROM transfer WHERE id = ?1")
        .map_err(db)?
        .query_row([id.as_bytes().as_slice()], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()
        .map_err(db)?;
    if let Some((receiver, amount, after)) = first {
        return Ok(if receiver == to && amount == o.amount {
            TransferOutcome::Done {
                balance: after,
                applied: false,
            }
        } else {
            TransferOutcome::KeyReused
        });
    }
    if !is_seller(c, from)? {
        return Ok(TransferOutcome::NotSeller);
    }
    // The daily limit before the balance, as every engine checks them: a transfer over both
    // is refused for the limit.
    let today: i64 = c
        .prepare_cached("SELECT total FROM transfer_day WHERE user = ?1 AND day = ?2")
        .map_err(db)?
        .query_row(params![from, o.day], |r| r.get(0))
        .optional()
        .map_err(db)?
        .unwrap_or(0);
    if today.saturating_add(o.amount) > o.daily_limit {
        return Ok(TransferOutcome::DailyLimit {
            remaining: (o.daily_limit - today).max(0),
        });
    }
    let balance = coins(c, from)?;
    if balance < o.amount {
        return Ok(TransferOutcome::InsufficientFunds { balance });
    }
    let after = add_coins(c, from, -o.amount)?;
    let to_after = add_coins(c, to, o.amount)?;
    let now = now_ms();
    c.prepare_cached(
        "INSERT INTO transfer (id, sender, receiver, amount, sender_after, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .map_err(db)?
    .execute(params![
        id.as_bytes().as_slice(),
        from,
        to,
        o.amount,
        after,
        now
    ])
    .map_err(db)?;
    c.prepare_cached(
        "INSERT INTO transfer_day (user, day, total) VALUES (?1, ?2, ?3)
         ON CONFLICT (user, day) DO UPDATE SET total = total + ?3",
    )
    .map_err(db)?
    .execute(params![from, o.day, o.amount])
    .map_err(db)?;
    let lines = transfer_lines(o, after, Some(to_after), now);
    insert_movements(c, &lines)?;
    Ok(TransferOutcome::Done {
        balance: after,
        applied: true,
    })
}

impl SqliteLedger {
    pub(in crate::ledger) async fn set_seller(&self, user: &UserId, seller: bool) -> Result<()> {
        let user = user.clone();
        self.write(move |c| {
            if seller {
                c.prepare_cached(
                    "INSERT INTO seller (user, since_ms) VALUES (?1, ?2)
                     ON CONFLICT (user) DO NOTHING",
                )
                .map_err(db)?
                .execute(params![user.as_str(), now_ms()])
                .map_err(db)?;
            } else {
                c.prepare_cached("DELETE FROM seller WHERE user = ?1")
                    .map_err(db)?
                    .execute([user.as_str()])
                    .map_err(db)?;
            }
            Ok(())
        })
        .await
    }

    pub(in crate::ledger) async fn is_seller(&self, user: &UserId) -> Result<bool> {
        let user = user.clone();
        self.read(move |c| is_seller(c, user.as_str())).await
    }

    pub(in crate::ledger) async fn transfer(&self, o: &TransferOrder) -> Result<TransferOutcome> {
        let o = o.clone();
        self.write(move |c| tx_transfer(c, &o)).await
    }
}
