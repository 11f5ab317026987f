//! Host settlements on Scylla: the settlement row is claimed with an LWT (`IF NOT EXISTS`) and
//! the settled amount leaves the host's earnings as a negative `earnings_entries` row keyed by
//! the settlement (a plain idempotent write, like every earnings fact). The cover check reads
//! the earnings sum before the claim: two different settlements of one host at the same
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
    pub(in crate::ledger) async fn settle_earnings(
        &self,
        o: &SettlementOrder,
    ) -> Result<SettlementOutcome> {
        let st = &self.st.settlements;
        let user = o.user.as_str();
        type Row = (Option<String>, Option<i64>, Option<i64>);
        let first: Vec<Row> = self.rows(&st.get, (o.id.as_str(),)).await?;
        let retry = if let Some((who, amount, _)) = first.into_iter().next() {
            if who.as_deref() != Some(user) || amount != Some(o.amount) {
                return Ok(SettlementOutcome::KeyReused);
            }
            true
        } else {
            let have = self.earnings(&o.user).await?;
            if have < o.amount {
                return Ok(SettlementOutcome::InsufficientEarnings { earnings: have });
            }
            false
        };
        let now = now_ms();
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
        if claimed.is_err() && !retry {
            // Unknown: read it back; a row that is ours carries on idempotently below.
            let rows: Vec<Row> = self.rows(&st.get, (o.id.as_str(),)).await?;
            if rows.is_empty() {
                return Err(unknown("settlement claim outcome unknown"));
            }
        }
        let applied = claimed == Ok(true);
        // The earnings fact and the line are idempotent rewrites for a repeat.
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
            payout: o.payout,
            applied,
        })
    }

    /// Earnings settled so far, for the audit.
    pub(super) async fn settled_total(&self) -> Result<i64> {
        let rows: Vec<(Option<i64>,)> = self.scan(&self.st.settlements.scan, ()).await?;
        Ok(rows.iter().filter_map(|r| r.0).sum())
    }
}
