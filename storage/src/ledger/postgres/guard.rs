//! Guards on PostgreSQL: one transaction inserts the purchase row first (its id the idempotency
//! key: a concurrent retry waits on it, then finds it), checks the buyer's debt, debits the
//! price conditionally (`coins >= price`; the account's CHECK forbids a negative balance),
//! credits the host's share to an earnings slot, and moves the pair's running expiry in one
//! upsert (`GREATEST(expiry, now) + duration`, so two purchases at once both count). The
//! platform's share is the purchase row's `price - host_share`, summed by the audit.

use deadpool_postgres::Transaction;
use protocol::UserId;

use super::super::guard::{Guard, GuardOrder, GuardOutcome, MAX_GUARDS_LISTED, lines};
use super::super::now_ms;
use super::movements::insert_movements;
use super::payment::debt_of;
use super::saga::{SQL_CREDIT, coins, col};
use super::schema::slot_of;
use super::{PostgresLedger, TxResult, transact};
use crate::Result;

/// Schema version 7 (appended to the migrations).
pub(super) const MIGRATION: &str = "
CREATE TABLE guard_purchase (
  id          UUID PRIMARY KEY,
  buyer       TEXT NOT NULL,
  host        TEXT NOT NULL,
  plan        TEXT NOT NULL,
  price       BIGINT NOT NULL CHECK (price > 0),
  host_share  BIGINT NOT NULL CHECK (host_share >= 0 AND host_share <= price),
  duration_ms BIGINT NOT NULL CHECK (duration_ms > 0),
  at_ms       BIGINT NOT NULL
);
CREATE TABLE guard (
  host       TEXT NOT NULL,
  buyer      TEXT NOT NULL,
  expires_ms BIGINT NOT NULL,
  PRIMARY KEY (host, buyer)
);
CREATE INDEX guard_buyer ON guard (buyer, expires_ms);
";

/// A refusal: roll back (the purchase row inserted first must not stay).
struct Refused(GuardOutcome);

async fn expiry(tx: &Transaction<'_>, host: &str, buyer: &str) -> TxResult<Option<i64>> {
    Ok(
        match tx
            .query_opt(
                "SELECT expires_ms FROM guard WHERE host = $1 AND buyer = $2",
                &[&host, &buyer],
            )
            .await?
        {
            Some(row) => Some(col(&row, 0)?),
            None => None,
        },
    )
}

async fn buy_tx(
    tx: &Transaction<'_>,
    o: &GuardOrder,
) -> TxResult<std::result::Result<GuardOutcome, Refused>> {
    let id = o.id();
    let (buyer, host) = (o.buyer.as_str(), o.host.as_str());
    let now = now_ms();
    let inserted = tx
        .execute(
            "INSERT INTO guard_purchase (id, buyer, host, plan, price, host_share, duration_ms, at_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING",
            &[
                &id,
                &buyer,
                &host,
                &o.plan,
                &o.price,
                &o.host_share,
                &o.duration_ms,
                &now,
            ],
        )
        .await?;
    if inserted == 0 {
        let row = tx
            .query_one(
                "SELECT host, plan, price FROM guard_purchase WHERE id = $1",
                &[&id],
            )
            .await?;
        let (h, plan, price): (String, String, i64) = (col(&row, 0)?, col(&row, 1)?, col(&row, 2)?);
        if h != host || plan != o.plan || price != o.price {
            return Ok(Ok(GuardOutcome::KeyReused));
        }
        return Ok(Ok(GuardOutcome::Bought {
            expires_ms: expiry(tx, host, buyer).await?.unwrap_or(0),
            balance: coins(tx, buyer).await?,
            applied: false,
        }));
    }
    let debt = debt_of(tx, buyer).await?;
    if debt > 0 {
        return Ok(Err(Refused(GuardOutcome::InDebt { debt })));
    }
    let Some(row) = tx
        .query_opt(
            "UPDATE account SET coins = coins - $2 WHERE user_id = $1 AND coins >= $2
             RETURNING coins",
            &[&buyer, &o.price],
        )
        .await?
    else {
        let balance = coins(tx, buyer).await?;
        return Ok(Err(Refused(GuardOutcome::InsufficientFunds { balance })));
    };
    let balance: i64 = col(&row, 0)?;
    if o.host_share > 0 {
        tx.execute(SQL_CREDIT, &[&vec![host], &slot_of(id), &o.host_share])
            .await?;
    }
    let row = tx
        .query_one(
            "INSERT INTO guard (host, buyer, expires_ms) VALUES ($1, $2, $3::BIGINT + $4::BIGINT)
             ON CONFLICT (host, buyer)
               DO UPDATE SET expires_ms = GREATEST(guard.expires_ms, $3::BIGINT) + $4::BIGINT
             RETURNING expires_ms",
            &[&host, &buyer, &now, &o.duration_ms],
        )
        .await?;
    let expires_ms: i64 = col(&row, 0)?;
    insert_movements(tx, &lines(o, balance, now)).await?;
    Ok(Ok(GuardOutcome::Bought {
        expires_ms,
        balance,
        applied: true,
    }))
}

fn guards(rows: &[tokio_postgres::Row]) -> Result<Vec<Guard>> {
    rows.iter()
        .map(|r| {
            Ok(Guard {
                host: UserId::new(col::<String>(r, 0)?),
                buyer: UserId::new(col::<String>(r, 1)?),
                expires_ms: col(r, 2)?,
            })
        })
        .collect()
}

impl PostgresLedger {
    pub(in crate::ledger) async fn buy_guard(&self, o: &GuardOrder) -> Result<GuardOutcome> {
        let out = transact!(
            self,
            |tx| buy_tx(&tx, o).await,
            commit_if | r: &std::result::Result<GuardOutcome, Refused> | r.is_ok()
        )?;
        Ok(out.unwrap_or_else(|Refused(r)| r))
    }

    pub(in crate::ledger) async fn guards_of_host(
        &self,
        host: &UserId,
        now: i64,
    ) -> Result<Vec<Guard>> {
        self.guards_in_force(
            "SELECT host, buyer, expires_ms FROM guard WHERE host = $1 AND expires_ms > $2
             ORDER BY expires_ms DESC, buyer COLLATE \"C\" ASC LIMIT $3",
            host,
            now,
        )
        .await
    }

    pub(in crate::ledger) async fn guards_of_buyer(
        &self,
        buyer: &UserId,
        now: i64,
    ) -> Result<Vec<Guard>> {
        self.guards_in_force(
            "SELECT host, buyer, expires_ms FROM guard WHERE buyer = $1 AND expires_ms > $2
             ORDER BY expires_ms DESC, host COLLATE \"C\" ASC LIMIT $3",
            buyer,
            now,
        )
        .await
    }

    /// The guards `sql` lists for `who` in force at `now`, at most [`MAX_GUARDS_LISTED`].
    async fn guards_in_force(&self, sql: &str, who: &UserId, now: i64) -> Result<Vec<Guard>> {
        let limit = i64::try_from(MAX_GUARDS_LISTED).unwrap_or(i64::MAX);
        let rows = self.read(sql, &[&who.as_str(), &now, &limit]).await?;
        guards(&rows)
    }
}
