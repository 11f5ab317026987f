//! Guards on Scylla. The purchase row is claimed first, with the order's parameters and no
//! time yet (`at_ms` 0), by an LWT (`IF NOT EXISTS`): a request reusing the id of another
//! purchase (host, plan or price) finds that row and stops before any coin moves, as on the
//! SQL engines. Then the buyer's debit, a wallet change under the purchase id (it refuses to
//! overdraw, racing gifts included); then the purchase's time, fixed once by an LWT (`IF at_ms
//! = 0`); the pair's purchase facts, the host's earnings row and the platform's share (a
//! `settled_house` row keyed by the purchase id) are plain idempotent writes after it, from the
//! row as claimed. A retry with the same request id after a crash anywhere in between finds the
//! claim and the debit held and finishes the rest, never debiting twice. A refusal (debt,
//! coins) leaves the claim: the id stays that order's, which the same order may book later. The
//! expiry is not stored: it is folded from the pair's purchases in time order ([`folded`]), so
//! two purchases at once both count whatever order their writes land in.

use std::collections::HashMap;

use ::scylla::client::session::Session;
use ::scylla::policies::retry::FallthroughRetryPolicy;
use ::scylla::statement::prepared::PreparedStatement;
use ::scylla::statement::{Consistency, SerialConsistency};
use protocol::UserId;
use uuid::Uuid;

use super::super::guard::{Guard, GuardOrder, GuardOutcome, MAX_GUARDS_LISTED, folded, lines};
use super::super::{EntryKind, now_ms};
use super::wallet::Applied;
use super::{ScyllaLedger, backend, unknown};
use crate::{Result, StorageError};

/// The tables (created at start-up with the others).
pub(super) fn schema(ks: &str) -> Vec<String> {
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.guard_purchases (
               id uuid PRIMARY KEY, buyer text, host text, plan text, price bigint,
               host_share bigint, duration_ms bigint, at_ms bigint)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.guards_by_host (
               host text, buyer text, at_ms bigint, id uuid, duration_ms bigint,
               PRIMARY KEY ((host), buyer, at_ms, id))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.guards_by_buyer (
               buyer text, host text, at_ms bigint, id uuid, duration_ms bigint,
               PRIMARY KEY ((buyer), host, at_ms, id))"
        ),
    ]
}

/// The guard statements.
pub(super) struct GuardStatements {
    claim: PreparedStatement,
    fix_time: PreparedStatement,
    get: PreparedStatement,
    by_host_add: PreparedStatement,
    by_buyer_add: PreparedStatement,
    of_pair: PreparedStatement,
    of_host: PreparedStatement,
    of_buyer: PreparedStatement,
}

pub(super) async fn prepare(session: &Session, ks: &str) -> Result<GuardStatements> {
    let prep = |cql: String| async move { session.prepare(cql).await.map_err(backend) };
    let plain = |mut p: PreparedStatement| {
        p.set_consistency(Consistency::LocalQuorum);
        p.set_is_idempotent(true);
        p
    };
    let mut claim = prep(format!(
        "INSERT INTO {ks}.guard_purchases
           (id, buyer, host, plan, price, host_share, duration_ms, at_ms)
         VALUES (?, ?, ?, ?, ?, ?, ?, 0) IF NOT EXISTS"
    ))
    .await?;
    claim.set_consistency(Consistency::LocalQuorum);
    claim.set_serial_consistency(Some(SerialConsistency::LocalSerial));
    claim.set_retry_policy(Some(std::sync::Arc::new(FallthroughRetryPolicy::new())));
    let mut fix_time = prep(format!(
        "UPDATE {ks}.guard_purchases SET at_ms = ? WHERE id = ? IF at_ms = 0"
    ))
    .await?;
    fix_time.set_consistency(Consistency::LocalQuorum);
    fix_time.set_serial_consistency(Some(SerialConsistency::LocalSerial));
    fix_time.set_retry_policy(Some(std::sync::Arc::new(FallthroughRetryPolicy::new())));
    let mut get = prep(format!(
        "SELECT host, plan, price, host_share, duration_ms, at_ms
         FROM {ks}.guard_purchases WHERE id = ?"
    ))
    .await?;
    get.set_consistency(Consistency::LocalSerial);
    Ok(GuardStatements {
        claim,
        fix_time,
        get,
        by_host_add: plain(
            prep(format!(
                "INSERT INTO {ks}.guards_by_host (host, buyer, at_ms, id, duration_ms)
                 VALUES (?, ?, ?, ?, ?)"
            ))
            .await?,
        ),
        by_buyer_add: plain(
            prep(format!(
                "INSERT INTO {ks}.guards_by_buyer (buyer, host, at_ms, id, duration_ms)
                 VALUES (?, ?, ?, ?, ?)"
            ))
            .await?,
        ),
        of_pair: plain(
            prep(format!(
                "SELECT at_ms, duration_ms FROM {ks}.guards_by_host WHERE host = ? AND buyer = ?"
            ))
            .await?,
        ),
        of_host: plain(
            prep(format!(
                "SELECT buyer, at_ms, duration_ms FROM {ks}.guards_by_host WHERE host = ?"
            ))
            .await?,
        ),
        of_buyer: plain(
            prep(format!(
                "SELECT host, at_ms, duration_ms FROM {ks}.guards_by_buyer WHERE buyer = ?"
            ))
            .await?,
        ),
    })
}

/// `host, plan, price, host_share, duration_ms, at_ms` of a purchase row (`at_ms` 0 until the
/// debit is booked).
type PurchaseRow = (
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// The guards in force at `now` from `(other side, at_ms, duration_ms)` rows of one user.
fn in_force(
    rows: Vec<(Option<String>, Option<i64>, Option<i64>)>,
    now: i64,
    guard: impl Fn(String, i64) -> Guard,
) -> Vec<Guard> {
    let mut by_other: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
    for (other, at, d) in rows {
        if let (Some(other), Some(at), Some(d)) = (other, at, d) {
            by_other.entry(other).or_default().push((at, d));
        }
    }
    let mut out: Vec<Guard> = by_other
        .into_iter()
        .filter_map(|(other, mut p)| folded(&mut p).map(|e| guard(other, e)))
        .filter(|g| g.expires_ms > now)
        .collect();
    out.sort_by(|a, b| {
        b.expires_ms
            .cmp(&a.expires_ms)
            .then_with(|| a.buyer.cmp(&b.buyer))
            .then_with(|| a.host.cmp(&b.host))
    });
    out.truncate(MAX_GUARDS_LISTED);
    out
}

impl ScyllaLedger {
    async fn purchase(&self, id: Uuid) -> Result<Option<PurchaseRow>> {
        let rows: Vec<PurchaseRow> = self.rows(&self.st.guards.get, (id,)).await?;
        Ok(rows.into_iter().next())
    }

    async fn pair_expiry(&self, host: &str, buyer: &str) -> Result<Option<i64>> {
        let rows: Vec<(Option<i64>, Option<i64>)> =
            self.rows(&self.st.guards.of_pair, (host, buyer)).await?;
        let mut p: Vec<(i64, i64)> = rows
            .into_iter()
            .filter_map(|(a, d)| Some((a?, d?)))
            .collect();
        Ok(folded(&mut p))
    }

    /// Claims the purchase row with `o`'s parameters, or reads who holds it: `None` when it
    /// holds another purchase (host, plan or price), else the order as claimed (a repeat's share
    /// and duration are the first call's). Nothing is written but the claim.
    async fn claim_purchase(&self, o: &GuardOrder) -> Result<Option<GuardOrder>> {
        let id = o.id();
        let claimed = self
            .lwt(
                &self.st.guards.claim,
                (
                    id,
                    o.buyer.as_str(),
                    o.host.as_str(),
                    o.plan.as_str(),
                    o.price,
                    o.host_share,
                    o.duration_ms,
                ),
            )
            .await;
        if claimed == Ok(true) {
            return Ok(Some(o.clone()));
        }
        // Lost or unknown: the row read back says whose it is (ours, a twin's, or another's).
        let Some((host, plan, price, share, duration, _)) =
            self.read_back(|| self.purchase(id)).await?
        else {
            return Err(unknown("guard claim outcome unknown"));
        };
        if host.as_deref() != Some(o.host.as_str())
            || plan.as_deref() != Some(o.plan.as_str())
            || price != Some(o.price)
        {
            return Ok(None);
        }
        Ok(Some(GuardOrder {
            host_share: share.unwrap_or(o.host_share),
            duration_ms: duration.unwrap_or(o.duration_ms),
            ..o.clone()
        }))
    }

    pub(in crate::ledger) async fn buy_guard(&self, o: &GuardOrder) -> Result<GuardOutcome> {
        let st = &self.st.guards;
        let id = o.id();
        let (buyer, host) = (o.buyer.as_str(), o.host.as_str());
        // The claim before any coin moves: another purchase's id stops here, writing nothing.
        let Some(o) = self.claim_purchase(o).await? else {
            return Ok(GuardOutcome::KeyReused);
        };
        if self.read_entry(buyer, id).await?.is_none() {
            let debt = self.debt_sum(buyer).await?;
            if debt > 0 {
                return Ok(GuardOutcome::InDebt { debt });
            }
        }
        let reference = format!("guard:{host}:{}", o.req_id);
        let (balance, ours) = match self
            .wallet_apply(buyer, id, EntryKind::Guard, -o.price, &reference)
            .await?
        {
            Applied::Insufficient { balance } => {
                return Ok(GuardOutcome::InsufficientFunds { balance });
            }
            Applied::Held {
                kind: EntryKind::Guard,
                balance_after,
                ours,
            } => (balance_after.unwrap_or(0), ours),
            Applied::Held { kind, .. } => {
                return Err(StorageError::corrupt_msg(format!(
                    "guard {id}: the buyer's key is held by {}",
                    kind.as_str()
                )));
            }
        };
        // Only this claim's order debits under its id; another amount there is no booking of it.
        if !ours && self.read_entry_amount(buyer, id).await? != o.price {
            return Err(StorageError::corrupt_msg(format!(
                "guard {id}: the buyer's debit is not the claimed price"
            )));
        }
        // The time, fixed once now that the debit is held (a claim a refusal or a crash left
        // carries none, so a later booking of it runs from its own time).
        let fixed = self.lwt(&st.fix_time, (now_ms(), id)).await;
        let at_ms = match self.read_back(|| self.purchase(id)).await? {
            Some((.., Some(at))) if at > 0 => at,
            _ if fixed.is_err() => return Err(unknown("guard time outcome unknown")),
            _ => return Err(StorageError::corrupt_msg("guard purchase time missing")),
        };
        self.write(&st.by_host_add, (host, buyer, at_ms, id, o.duration_ms))
            .await?;
        self.write(&st.by_buyer_add, (buyer, host, at_ms, id, o.duration_ms))
            .await?;
        if o.host_share > 0 {
            self.write(&self.st.earn_add, (host, id, o.host_share, "guard"))
                .await?;
        }
        self.write(&self.st.house_add, (id, o.platform_share(), 0_i64))
            .await?;
        if ours {
            self.write_movements(&lines(&o, balance, at_ms)).await?;
        }
        let balance = if ours {
            balance
        } else {
            self.read_head(buyer).await?.0
        };
        Ok(GuardOutcome::Bought {
            expires_ms: self.pair_expiry(host, buyer).await?.unwrap_or(0),
            balance,
            applied: ours,
        })
    }

    pub(in crate::ledger) async fn guards_of_host(
        &self,
        host: &UserId,
        now: i64,
    ) -> Result<Vec<Guard>> {
        let rows = self.scan(&self.st.guards.of_host, (host.as_str(),)).await?;
        Ok(in_force(rows, now, |buyer, expires_ms| Guard {
            buyer: UserId::new(buyer),
            host: host.clone(),
            expires_ms,
        }))
    }

    pub(in crate::ledger) async fn guards_of_buyer(
        &self,
        buyer: &UserId,
        now: i64,
    ) -> Result<Vec<Guard>> {
        let rows = self
            .scan(&self.st.guards.of_buyer, (buyer.as_str(),))
            .await?;
        Ok(in_force(rows, now, |host, expires_ms| Guard {
            buyer: buyer.clone(),
            host: UserId::new(host),
            expires_ms,
        }))
    }
}
