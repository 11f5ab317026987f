//! Top-ups, refunds and debts on Scylla (see the `payment` module of the ledger). The payment
//! row is claimed with an LWT (`IF NOT EXISTS`; the table sees only LWTs), so one attempt's
//! debt split wins and every repeat reads it; the coins move by the wallet's compare-and-set
//! under the payment's own key, so a repeat after a crash finishes the credit and never
//! credits twice. A debt is the sum of plain rows per user (owed by a refund, paid by a
//! top-up), each keyed by its payment, so rewrites are identical.

use ::scylla::client::session::Session;
use ::scylla::statement::prepared::PreparedStatement;
use protocol::UserId;

use super::super::movement::single;
use super::super::{
    EntryKind, MovementKind, Payment, RefundOutcome, TopUpOutcome, now_ms, payment_entry_id,
};
use super::schema::{lwt, plain, scan, serial};
use super::wallet::Applied;
use super::{ScyllaLedger, backend, unknown};
use crate::{Result, StorageError};

/// The tables (created at start-up with the others).
pub(super) fn schema(ks: &str) -> Vec<String> {
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.payments (
               id text PRIMARY KEY, user_id text, product text, coins bigint, debt_paid bigint,
               refunded boolean, at_ms bigint)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.debts (
               user_id text, key text, amount bigint, PRIMARY KEY ((user_id), key))"
        ),
    ]
}

/// The payment statements.
pub(super) struct PaymentStatements {
    claim: PreparedStatement,
    get: PreparedStatement,
    mark_refunded: PreparedStatement,
    debt_add: PreparedStatement,
    debt_sum: PreparedStatement,
    scan_payments: PreparedStatement,
    scan_debts: PreparedStatement,
    scan_transfers: PreparedStatement,
}

pub(super) async fn prepare(session: &Session, ks: &str) -> Result<PaymentStatements> {
    let prep = |cql: String| async move { session.prepare(cql).await.map_err(backend) };
    Ok(PaymentStatements {
        claim: lwt(prep(format!(
            "INSERT INTO {ks}.payments (id, user_id, product, coins, debt_paid, refunded, at_ms)
             VALUES (?, ?, ?, ?, ?, false, ?) IF NOT EXISTS"
        ))
        .await?),
        get: serial(
            prep(format!(
                "SELECT user_id, coins, debt_paid, refunded FROM {ks}.payments WHERE id = ?"
            ))
            .await?,
        ),
        mark_refunded: lwt(prep(format!(
            "UPDATE {ks}.payments SET refunded = true WHERE id = ? IF EXISTS"
        ))
        .await?),
        debt_add: plain(
            prep(format!(
                "INSERT INTO {ks}.debts (user_id, key, amount) VALUES (?, ?, ?)"
            ))
            .await?,
        ),
        debt_sum: plain(
            prep(format!(
                "SELECT SUM(amount) FROM {ks}.debts WHERE user_id = ?"
            ))
            .await?,
        ),
        scan_payments: scan(prep(format!("SELECT coins, refunded FROM {ks}.payments")).await?),
        scan_debts: scan(prep(format!("SELECT amount FROM {ks}.debts")).await?),
        scan_transfers: scan(prep(format!("SELECT amount, at_ms FROM {ks}.transfers")).await?),
    })
}

/// `user_id, coins, debt_paid, refunded` of a payment row.
type PaymentRow = (Option<String>, Option<i64>, Option<i64>, Option<bool>);

impl ScyllaLedger {
    async fn payment_row(&self, id: &str) -> Result<Option<PaymentRow>> {
        let rows: Vec<PaymentRow> = self.rows(&self.st.payments.get, (id,)).await?;
        Ok(rows.into_iter().next())
    }

    /// The user's debt: owed by refunds, less what top-ups paid.
    pub(super) async fn debt_sum(&self, user: &str) -> Result<i64> {
        let rows: Vec<(Option<i64>,)> = self.rows(&self.st.payments.debt_sum, (user,)).await?;
        Ok(rows
            .into_iter()
            .next()
            .and_then(|r| r.0)
            .unwrap_or(0)
            .max(0))
    }

    pub(in crate::ledger) async fn top_up(&self, p: &Payment) -> Result<TopUpOutcome> {
        let st = &self.st.payments;
        let user = p.user.as_str();
        let now = now_ms();
        // The debt this top-up pays, claimed with the payment row: one attempt's split wins.
        let debt = self.debt_sum(user).await?;
        let paid = debt.min(p.coins);
        let claimed = self
            .lwt(
                &st.claim,
                (p.id.as_str(), user, p.product.as_str(), p.coins, paid, now),
            )
            .await;
        let Some((who, coins, debt_paid, _)) = self.payment_row(&p.id).await? else {
            return Err(unknown("payment claim outcome unknown"));
        };
        if who.as_deref() != Some(user) || coins != Some(p.coins) {
            return Ok(TopUpOutcome::KeyReused);
        }
        let paid = debt_paid.unwrap_or(0);
        if paid > 0 {
            self.write(&st.debt_add, (user, format!("paid:{}", p.id), -paid))
                .await?;
        }
        let rest = p.coins - paid;
        let mut applied = claimed == Ok(true);
        let mut balance = self.read_head(user).await?.0;
        if rest > 0 {
            let key = payment_entry_id(&p.id, false);
            let reference = format!("topup:{}", p.id);
            match self
                .wallet_apply(user, key, EntryKind::TopUp, rest, &reference)
                .await?
            {
                Applied::Held {
                    balance_after,
                    ours,
                    ..
                } => {
                    applied = applied || ours;
                    balance = balance_after.unwrap_or(balance);
                    if ours {
                        let line = single(
                            &p.user,
                            MovementKind::TopUp,
                            rest,
                            balance_after,
                            None,
                            &p.id,
                            now,
                        );
                        self.write_movements(&[line]).await?;
                    }
                }
                Applied::Insufficient { .. } => {
                    return Err(StorageError::corrupt_msg("a credit cannot overdraw"));
                }
            }
        }
        Ok(TopUpOutcome::Credited {
            balance,
            applied,
            debt_paid: paid,
        })
    }

    pub(in crate::ledger) async fn refund(&self, id: &str) -> Result<RefundOutcome> {
        let st = &self.st.payments;
        let Some((Some(user), Some(amount), _, refunded)) = self.payment_row(id).await? else {
            return Ok(RefundOutcome::Unknown);
        };
        let key = payment_entry_id(id, true);
        if refunded == Some(true) {
            return Ok(RefundOutcome::Refunded {
                balance: self.read_head(&user).await?.0,
                debt: self.debt_sum(&user).await?,
                applied: false,
            });
        }
        // Take what the coins cover; a balance that moved meanwhile is read again.
        let mut taken = None;
        for _ in 0..super::MAX_CAS_ATTEMPTS {
            let have = self.read_head(&user).await?.0;
            let take = have.min(amount);
            match self
                .wallet_apply(
                    &user,
                    key,
                    EntryKind::Refund,
                    -take,
                    &format!("refund:{id}"),
                )
                .await?
            {
                Applied::Held {
                    balance_after,
                    ours,
                    ..
                } => {
                    let take = if ours {
                        take
                    } else {
                        self.read_entry_amount(&user, key).await?
                    };
                    taken = Some((take, balance_after, ours));
                    break;
                }
                Applied::Insufficient { .. } => {}
            }
        }
        let Some((take, balance_after, ours)) = taken else {
            return Err(StorageError::Conflict(format!(
                "refund {id}: the balance kept moving"
            )));
        };
        let owed = amount - take;
        if owed > 0 {
            self.write(&st.debt_add, (user.as_str(), format!("refund:{id}"), owed))
                .await?;
        }
        if self.lwt(&st.mark_refunded, (id,)).await.is_err() {
            return Err(unknown("refund mark outcome unknown"));
        }
        let uid = UserId::from(user.as_str());
        if ours {
            let line = single(
                &uid,
                MovementKind::Refund,
                -take,
                balance_after,
                None,
                id,
                now_ms(),
            );
            self.write_movements(&[line]).await?;
        }
        Ok(RefundOutcome::Refunded {
            balance: self.read_head(&user).await?.0,
            debt: self.debt_sum(&user).await?,
            applied: ours,
        })
    }

    pub(in crate::ledger) async fn debt(&self, user: &UserId) -> Result<i64> {
        self.debt_sum(user.as_str()).await
    }

    /// `topped_up, refunded, debt, transferred` for the audit (full scans).
    pub(super) async fn payment_totals(&self) -> Result<(i64, i64, i64, i64)> {
        let st = &self.st.payments;
        let payments: Vec<(Option<i64>, Option<bool>)> = self.scan(&st.scan_payments, ()).await?;
        let (mut topped_up, mut refunded) = (0, 0);
        for (coins, was_refunded) in payments {
            topped_up += coins.unwrap_or(0);
            if was_refunded == Some(true) {
                refunded += coins.unwrap_or(0);
            }
        }
        let debts: Vec<(Option<i64>,)> = self.scan(&st.scan_debts, ()).await?;
        let debt = debts.iter().filter_map(|r| r.0).sum();
        // Booked transfers only: a claim a refusal left (`at_ms` 0) moved nothing.
        let transfers: Vec<(Option<i64>, Option<i64>)> = self.scan(&st.scan_transfers, ()).await?;
        let transferred = transfers
            .iter()
            .filter(|r| r.1.unwrap_or(0) > 0)
            .filter_map(|r| r.0)
            .sum();
        Ok((topped_up, refunded, debt, transferred))
    }
}
