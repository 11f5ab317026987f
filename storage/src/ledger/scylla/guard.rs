//! Guards on Scylla. The buyer's debit is a wallet change under the purchase id (it refuses
//! to overdraw, racing gifts included); the purchase row is then claimed with an LWT (`IF NOT
//! EXISTS`), which fixes its time once; the pair's purchase facts, the host's earnings row and
//! the platform's share (a `settled_house` row keyed by the purchase id) are plain idempotent
//! writes after it. A retry with the same request id after a crash anywhere in between finds
//! the debit held and finishes the rest, never debiting twice. The expiry is not stored: it is
//! folded from the pair's purchases in time order ([`folded`]), so two purchases at once both
//! count whatever order their writes land in.

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
         VALUES (?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
    ))
    .await?;
    claim.set_consistency(Consistency::LocalQuorum);
    claim.set_serial_consistency(Some(SerialConsistency::LocalSerial));
    claim.set_retry_policy(Some(std::sync::Arc::new(FallthroughRetryPolicy::new())));
    let mut get = prep(format!(
        "SELECT host, plan, price, at_ms FROM {ks}.guard_purchases WHERE id = ?"
    ))
    .await?;
    get.set_consistency(Consistency::LocalSerial);
    Ok(GuardStatements {
        claim,
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

/// `host, plan, price, at_ms` of a purchase row.
type PurchaseRow = (Option<String>, Option<String>, Option<i64>, Option<i64>);

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

    pub(in crate::ledger) async fn buy_guard(&self, o: &GuardOrder) -> Result<GuardOutcome> {
        let st = &self.st.guards;
        let id = o.id();
        let (buyer, host) = (o.buyer.as_str(), o.host.as_str());
        if let Some((h, plan, price, _)) = self.purchase(id).await? {
            if h.as_deref() != Some(host)
                || plan.as_deref() != Some(o.plan.as_str())
                || price != Some(o.price)
            {
                return Ok(GuardOutcome::KeyReused);
            }
        } else if self.read_entry(buyer, id).await?.is_none() {
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
        let now = now_ms();
        let claimed = self
            .lwt(
                &st.claim,
                (
                    id,
                    buyer,
                    host,
                    o.plan.as_str(),
                    o.price,
                    o.host_share,
                    o.duration_ms,
                    now,
                ),
            )
            .await;
        let at_ms = match self.purchase(id).await? {
            Some((_, _, _, Some(at))) => at,
            _ if claimed.is_err() => return Err(unknown("guard claim outcome unknown")),
            _ => return Err(StorageError::corrupt_msg("guard purchase row missing")),
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
            self.write_movements(&lines(o, balance, at_ms)).await?;
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
