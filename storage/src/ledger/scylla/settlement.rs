//! Host settlements on Scylla: the settlement row is claimed with an LWT (`IF NOT EXISTS`) and
//! the settled amount leaves the host's earnings as a negative `earnings_entries` row keyed by
//! the settlement (a plain idempotent write, like every earnings fact), only once the row is
//! known to hold this settlement: a claim lost to another host or amount answers `KeyReused`
//! and writes nothing, as on the SQL engines. The cover check reads the earnings sum before the
//! claim, so a refusal leaves no row: two different settlements of one host at the same
//! instant could both pass it (settlements are an operator's serial work; the amounts stay
//! exact and visible in the totals).

use ::scylla::client::session::Session;
use ::scylla::policies::retry::FallthroughRetryPolicy;
use ::scylla::statement::prepared::PreparedStatement;
use ::scylla::statement::{Consistency, SerialConsistency};

use super::super::movement::single;
use super::super::{MovementKind, SettlementOrder, SettlementOutcome, now_ms, settlement_key};
use super::{SCAN_PAGE_ROWS, ScyllaLedger, backend, unknown};
use crate::Result;

/// The table (created at start-up with the others).
pub(super) fn schema(ks: &str) -> Vec<String> {
    vec![format!(
        "CREATE TABLE IF NOT EXISTS {ks}.settlements (
           id text PRIMARY KEY, user_id text, amount bigint, payout bigint, period text,
           at_ms bigint)"
    )]
}

/// `user_id, amount, payout` of a settlement row.
type SettlementRow = (Option<String>, Option<i64>, Option<i64>);

/// The settlement statements.
pub(super) struct SettlementStatements {
    claim: PreparedStatement,
    get: PreparedStatement,
    scan: PreparedStatement,
}

pub(super) async fn prepare(session: &Session, ks: &str) -> Result<SettlementStatements> {
    let prep = |cql: String| async move { session.prepare(cql).await.map_err(backend) };
    let mut claim = prep(format!(
        "INSERT INTO {ks}.settlements (id, user_id, amount, payout, period, at_ms)
         VALUES (?, ?, ?, ?, ?, ?) IF NOT EXISTS"
    ))
    .await?;
    claim.set_consistency(Consistency::LocalQuorum);
    claim.set_serial_consistency(Some(SerialConsistency::LocalSerial));
    claim.set_retry_policy(Some(std::sync::Arc::new(FallthroughRetryPolicy::new())));
    let mut get = prep(format!(
        "SELECT user_id, amount, payout FROM {ks}.settlements WHERE id = ?"
    ))
    .await?;
    get.set_consistency(Consistency::LocalSerial);
    let mut scan = prep(format!("SELECT amount FROM {ks}.settlements")).await?;
    scan.set_consistency(Consistency::LocalQuorum);
    scan.set_is_idempotent(true);
    scan.set_page_size(SCAN_PAGE_ROWS);
    Ok(SettlementStatements { claim, get, scan })
}

impl ScyllaLedger {
    /// The settlement row `id` holds: `user_id, amount, payout`.
    async fn settlement_row(&self, id: &str) -> Result<Option<SettlementRow>> {
        let rows: Vec<SettlementRow> = self.rows(&self.st.settlements.get, (id,)).await?;
        Ok(rows.into_iter().next())
    }

    pub(in crate::ledger) async fn settle_earnings(
        &self,
        o: &SettlementOrder,
    ) -> Result<SettlementOutcome> {
        let st = &self.st.settlements;
        let user = o.user.as_str();
        let now = now_ms();
        // `None`: this call's claim landed; else the row holding the id (found first, or read
        // back after a claim lost or unknown).
        let held = match self.settlement_row(&o.id).await? {
            Some(row) => Some(row),
            None => {
                let have = self.earnings(&o.user).await?;
                if have < o.amount {
                    return Ok(SettlementOutcome::InsufficientEarnings { earnings: have });
                }
                let claimed = self
                    .lwt(
                        &st.claim,
                        (
                            o.id.as_str(),
                            user,
                            o.amount,
                            o.payout,
                            o.period.as_str(),
                            now,
                        ),
                    )
                    .await;
                if claimed == Ok(true) {
                    None
                } else {
                    match self.read_back(|| self.settlement_row(&o.id)).await? {
                        Some(row) => Some(row),
                        None => return Err(unknown("settlement claim outcome unknown")),
                    }
                }
            }
        };
        // Another host's or amount's settlement under this id: nothing is written.
        let (applied, payout) = match held {
            None => (true, o.payout),
            Some((who, amount, payout)) => {
                if who.as_deref() != Some(user) || amount != Some(o.amount) {
                    return Ok(SettlementOutcome::KeyReused);
                }
                (false, payout.unwrap_or(o.payout))
            }
        };
        // The earnings fact is an idempotent rewrite for a repeat.
        let key = settlement_key(&o.id);
        self.write(&self.st.earn_add, (user, key, -o.amount, "settlement"))
            .await?;
        if applied {
            let line = single(
                &o.user,
                MovementKind::Settlement,
                -o.amount,
                None,
                None,
                &o.id,
                now,
            );
            self.write_movements(&[line]).await?;
        }
        Ok(SettlementOutcome::Settled {
            earnings: self.earnings(&o.user).await?,
            payout,
            applied,
        })
    }

    /// Earnings settled so far, for the audit.
    pub(super) async fn settled_total(&self) -> Result<i64> {
        let rows: Vec<(Option<i64>,)> = self.scan(&self.st.settlements.scan, ()).await?;
        Ok(rows.iter().filter_map(|r| r.0).sum())
    }
}
