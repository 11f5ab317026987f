//! Coin sellers and their transfers on Scylla. The transfer record is claimed first, with the
//! order's receiver and amount and no time yet (`at_ms` 0), by an LWT (`IF NOT EXISTS`): a
//! request reusing the id of another transfer finds that record and stops before any coin
//! moves, as on the SQL engines. Two wallets are two partitions, and an LWT batch stays in one,
//! so the booking is two wallet changes under the same key (the transfer id): the seller's
//! debit (which refuses to overdraw, racing gifts included), then the receiver's credit. Both
//! are idempotent by that key, and only the claimed order debits under it, so a retry with the
//! same request id after a crash anywhere finishes the credit and never debits twice. The day's
//! rows are plain idempotent writes after them; then the record's time is set (an LWT, `IF
//! at_ms = 0`), which marks it booked for the audit; then the statement lines. A refusal leaves
//! the claim unbooked: the id stays that order's, which the same order may book later. The
//! daily limit is read, not compare-and-set: two transfers of one seller at the same instant
//! may both pass it (the money stays exact; only the limit is soft here).

use ::scylla::client::session::Session;
use ::scylla::statement::Consistency;
use ::scylla::statement::prepared::PreparedStatement;
use protocol::UserId;
use uuid::Uuid;

use super::super::movement::transfer_lines;
use super::super::{EntryKind, TransferOrder, TransferOutcome, now_ms};
use super::schema::{lwt, serial};
use super::wallet::Applied;
use super::{ScyllaLedger, backend, unknown};
use crate::{Result, StorageError};

/// The tables (created at start-up with the others).
pub(super) fn schema(ks: &str) -> Vec<String> {
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.sellers (user_id text PRIMARY KEY, since_ms bigint)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.transfers (
               id uuid PRIMARY KEY, sender text, receiver text, amount bigint, at_ms bigint)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.transfer_days (
               user_id text, day bigint, id uuid, amount bigint,
               PRIMARY KEY ((user_id, day), id))"
        ),
    ]
}

/// The transfer statements.
pub(super) struct TransferStatements {
    seller_add: PreparedStatement,
    seller_del: PreparedStatement,
    seller_get: PreparedStatement,
    claim: PreparedStatement,
    mark_booked: PreparedStatement,
    record_get: PreparedStatement,
    day_add: PreparedStatement,
    day_sum: PreparedStatement,
}

pub(super) async fn prepare(session: &Session, ks: &str) -> Result<TransferStatements> {
    let prep = |cql: String| async move {
        let mut p = session.prepare(cql).await.map_err(backend)?;
        p.set_consistency(Consistency::LocalQuorum);
        p.set_is_idempotent(true);
        Ok::<_, StorageError>(p)
    };
    let raw = |cql: String| async move { session.prepare(cql).await.map_err(backend) };
    Ok(TransferStatements {
        seller_add: prep(format!(
            "INSERT INTO {ks}.sellers (user_id, since_ms) VALUES (?, ?)"
        ))
        .await?,
        seller_del: prep(format!("DELETE FROM {ks}.sellers WHERE user_id = ?")).await?,
        seller_get: prep(format!(
            "SELECT since_ms FROM {ks}.sellers WHERE user_id = ?"
        ))
        .await?,
        claim: lwt(raw(format!(
            "INSERT INTO {ks}.transfers (id, sender, receiver, amount, at_ms)
             VALUES (?, ?, ?, ?, 0) IF NOT EXISTS"
        ))
        .await?),
        mark_booked: lwt(raw(format!(
            "UPDATE {ks}.transfers SET at_ms = ? WHERE id = ? IF at_ms = 0"
        ))
        .await?),
        record_get: serial(
            raw(format!(
                "SELECT receiver, amount, at_ms FROM {ks}.transfers WHERE id = ?"
            ))
            .await?,
        ),
        day_add: prep(format!(
            "INSERT INTO {ks}.transfer_days (user_id, day, id, amount) VALUES (?, ?, ?, ?)"
        ))
        .await?,
        day_sum: prep(format!(
            "SELECT SUM(amount) FROM {ks}.transfer_days WHERE user_id = ? AND day = ?"
        ))
        .await?,
    })
}

impl ScyllaLedger {
    pub(in crate::ledger) async fn set_seller(&self, user: &UserId, seller: bool) -> Result<()> {
        let st = &self.st.transfers;
        if seller {
            self.write(&st.seller_add, (user.as_str(), now_ms())).await
        } else {
            self.write(&st.seller_del, (user.as_str(),)).await
        }
    }

    pub(in crate::ledger) async fn is_seller(&self, user: &UserId) -> Result<bool> {
        let rows: Vec<(Option<i64>,)> = self
            .rows(&self.st.transfers.seller_get, (user.as_str(),))
            .await?;
        Ok(!rows.is_empty())
    }

    /// `receiver, amount, at_ms` of a transfer record.
    async fn transfer_record(
        &self,
        id: Uuid,
    ) -> Result<Option<(Option<String>, Option<i64>, Option<i64>)>> {
        let rows = self.rows(&self.st.transfers.record_get, (id,)).await?;
        Ok(rows.into_iter().next())
    }

    pub(in crate::ledger) async fn transfer(&self, o: &TransferOrder) -> Result<TransferOutcome> {
        let st = &self.st.transfers;
        let id = o.id();
        let (from, to) = (o.from.as_str(), o.to.as_str());
        // The claim before any coin moves: another transfer's id stops here, writing nothing.
        let claimed = self.lwt(&st.claim, (id, from, to, o.amount)).await;
        let booked = if claimed == Ok(true) {
            false
        } else {
            // Lost or unknown: the record read back says whose it is.
            match self.read_back(|| self.transfer_record(id)).await? {
                None => return Err(unknown("transfer claim outcome unknown")),
                Some((receiver, amount, at_ms)) => {
                    if receiver.as_deref() != Some(to) || amount != Some(o.amount) {
                        return Ok(TransferOutcome::KeyReused);
                    }
                    at_ms.unwrap_or(0) > 0
                }
            }
        };
        // The checks, unless this transfer's debit is held already (a repeat finishes it).
        if !booked && self.read_entry(from, id).await?.is_none() {
            if !self.is_seller(&o.from).await? {
                return Ok(TransferOutcome::NotSeller);
            }
            let sum: Vec<(Option<i64>,)> = self.rows(&st.day_sum, (from, o.day)).await?;
            let today = sum.into_iter().next().and_then(|r| r.0).unwrap_or(0);
            if today.saturating_add(o.amount) > o.daily_limit {
                let remaining = (o.daily_limit - today).max(0);
                return Ok(TransferOutcome::DailyLimit { remaining });
            }
        }
        let reference = format!("transfer:{}", o.req_id);
        let (after, applied) = match self
            .wallet_apply(from, id, EntryKind::Transfer, -o.amount, &reference)
            .await?
        {
            Applied::Insufficient { balance } => {
                return Ok(TransferOutcome::InsufficientFunds { balance });
            }
            Applied::Held {
                balance_after,
                ours,
                ..
            } => (balance_after.unwrap_or(0), ours),
        };
        // Only the claimed order debits under its id; another amount there is no booking of it.
        if !applied && self.read_entry_amount(from, id).await? != o.amount {
            return Err(StorageError::corrupt_msg(format!(
                "transfer {id}: the seller's debit is not the claimed amount"
            )));
        }
        let to_after = match self
            .wallet_apply(to, id, EntryKind::Transfer, o.amount, &reference)
            .await?
        {
            Applied::Held { balance_after, .. } => balance_after,
            Applied::Insufficient { .. } => {
                return Err(StorageError::corrupt_msg("a credit cannot overdraw"));
            }
        };
        // Counted against the day of the attempt that books it: a repeat of a booked transfer
        // (maybe on a later UTC day) counts nothing again. (An attempt that died between this
        // write and the mark, retried on a later day, counts on both days: rare, and only
        // against the limit, never a coin.)
        if !booked {
            self.write(&st.day_add, (from, o.day, id, o.amount)).await?;
        }
        let now = now_ms();
        if !booked && self.lwt(&st.mark_booked, (now, id)).await.is_err() {
            return Err(unknown("transfer mark outcome unknown"));
        }
        if applied {
            let lines = transfer_lines(o, after, to_after, now);
            self.write_movements(&lines).await?;
        }
        Ok(TransferOutcome::Done {
            balance: after,
            applied,
        })
    }
}
