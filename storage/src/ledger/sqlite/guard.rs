//! Guards on SQLite: one job checks the buyer's debt and coins, debits the price, credits the
//! host's share to their earnings and the rest to the house, records the purchase (keyed by
//! its id) and moves the guard's running expiry, with both statement lines.

use protocol::UserId;
use rusqlite::{Connection, OptionalExtension, params};

use super::super::guard::{Guard, GuardOrder, GuardOutcome, MAX_GUARDS_LISTED, extended};
use super::super::now_ms;
use super::movements::insert_movements;
use super::payment::debt_of;
use super::rows::{coins, set_coins};
use super::tx::{PLATFORM_REVENUE, Tx};
use super::{SqliteLedger, db};
use crate::Result;

/// The tables (created at open with the others). `guard` holds each pair's running expiry;
/// `guard_purchase` each purchase, by id (the idempotency key).
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS guard_purchase (
  id          BLOB PRIMARY KEY,
  buyer       TEXT NOT NULL,
  host        TEXT NOT NULL,
  plan        TEXT NOT NULL,
  price       INTEGER NOT NULL CHECK (price > 0),
  host_share  INTEGER NOT NULL,
  duration_ms INTEGER NOT NULL,
  at_ms       INTEGER NOT NULL,
  expires_ms  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS guard (
  host       TEXT NOT NULL,
  buyer      TEXT NOT NULL,
  expires_ms INTEGER NOT NULL,
  PRIMARY KEY (host, buyer)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS guard_buyer ON guard (buyer, expires_ms);
";

fn expiry(c: &Connection, host: &str, buyer: &str) -> Result<Option<i64>> {
    c.prepare_cached("SELECT expires_ms FROM guard WHERE host = ?1 AND buyer = ?2")
        .map_err(db)?
        .query_row([host, buyer], |r| r.get(0))
        .optional()
        .map_err(db)
}

fn tx_buy(c: &Tx<'_, '_>, o: &GuardOrder) -> Result<GuardOutcome> {
    let id = o.id();
    let (buyer, host) = (o.buyer.as_str(), o.host.as_str());
    type First = (String, String, i64);
    let first: Option<First> = c
        .prepare_cached("SELECT host, plan, price FROM guard_purchase WHERE id = ?1")
        .map_err(db)?
        .query_row([id.as_bytes().as_slice()], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()
        .map_err(db)?;
    if let Some((h, plan, price)) = first {
        if h != host || plan != o.plan || price != o.price {
            return Ok(GuardOutcome::KeyReused);
        }
        return Ok(GuardOutcome::Bought {
            expires_ms: expiry(c, host, buyer)?.unwrap_or(0),
            balance: coins(c, buyer)?,
            applied: false,
        });
    }
    let debt = debt_of(c, buyer)?;
    if debt > 0 {
        return Ok(GuardOutcome::InDebt { debt });
    }
    let have = coins(c, buyer)?;
    if have < o.price {
        return Ok(GuardOutcome::InsufficientFunds { balance: have });
    }
    let balance = set_coins(c, buyer, have - o.price)?;
    if o.host_share > 0 {
        let credited = c
            .prepare_cached(super::tx::SQL_CREDIT)
            .map_err(db)?
            .execute(params![host, o.host_share])
            .map_err(db)?;
        if credited == 0 {
            c.prepare_cached(super::tx::SQL_CREDIT_NEW)
                .map_err(db)?
                .execute(params![host, o.host_share])
                .map_err(db)?;
        }
    }
    let now = now_ms();
    let expires_ms = extended(expiry(c, host, buyer)?, now, o.duration_ms);
    c.prepare_cached(
        "INSERT INTO guard (host, buyer, expires_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT (host, buyer) DO UPDATE SET expires_ms = ?3",
    )
    .map_err(db)?
    .execute(params![host, buyer, expires_ms])
    .map_err(db)?;
    c.prepare_cached(
        "INSERT INTO guard_purchase
           (id, buyer, host, plan, price, host_share, duration_ms, at_ms, expires_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )
    .map_err(db)?
    .execute(params![
        id.as_bytes().as_slice(),
        buyer,
        host,
        o.plan,
        o.price,
        o.host_share,
        o.duration_ms,
        now,
        expires_ms
    ])
    .map_err(db)?;
    insert_movements(c, &super::super::guard::lines(o, balance, now))?;
    c.add_house(PLATFORM_REVENUE, o.platform_share())?;
    Ok(GuardOutcome::Bought {
        expires_ms,
        balance,
        applied: true,
    })
}

/// The guards a buyer holds in force, latest expiry first.
const BUYER_GUARDS: &str =
    "SELECT host, buyer, expires_ms FROM guard WHERE buyer = ?1 AND expires_ms > ?2
 ORDER BY expires_ms DESC, host ASC LIMIT ?3";

fn listed(c: &Connection, sql: &str, who: &str, now: i64) -> Result<Vec<Guard>> {
    let limit = i64::try_from(MAX_GUARDS_LISTED).unwrap_or(i64::MAX);
    let mut stmt = c.prepare_cached(sql).map_err(db)?;
    let rows = stmt
        .query_map(params![who, now, limit], |r| {
            Ok(Guard {
                host: UserId::new(r.get::<_, String>(0)?),
                buyer: UserId::new(r.get::<_, String>(1)?),
                expires_ms: r.get(2)?,
            })
        })
        .map_err(db)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(db)
}

impl SqliteLedger {
    pub(in crate::ledger) async fn buy_guard(&self, o: &GuardOrder) -> Result<GuardOutcome> {
        let o = o.clone();
        self.write(move |c| tx_buy(c, &o)).await
    }

    pub(in crate::ledger) async fn guards_of_host(
        &self,
        host: &UserId,
        now: i64,
    ) -> Result<Vec<Guard>> {
        let host = host.as_str().to_owned();
        self.read(move |c| {
            listed(
                c,
                "SELECT host, buyer, expires_ms FROM guard WHERE host = ?1 AND expires_ms > ?2
                 ORDER BY expires_ms DESC, buyer ASC LIMIT ?3",
                &host,
                now,
            )
        })
        .await
    }

    pub(in crate::ledger) async fn guards_of_buyer(
        &self,
        buyer: &UserId,
        now: i64,
    ) -> Result<Vec<Guard>> {
        let buyer = buyer.as_str().to_owned();
        self.read(move |c| listed(c, BUYER_GUARDS, &buyer, now))
            .await
    }

    /// [`Self::guards_of_buyer`] and the lifetime spend of each of `users`, in their order, in
    /// one read (one turn on the reader), not waiting for the WAL's sync: what connecting
    /// sessions show as badges.
    pub(in crate::ledger) async fn standings(
        &self,
        users: &[UserId],
        now: i64,
    ) -> Result<Vec<(Vec<Guard>, i64)>> {
        let users = users.to_vec();
        self.read_unsynced(move |c| {
            users
                .iter()
                .map(|u| {
                    let guards = listed(c, BUYER_GUARDS, u.as_str(), now)?;
                    Ok((guards, super::app_rank::spent_in(c, u)?))
                })
                .collect()
        })
        .await
    }
}
