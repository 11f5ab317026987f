//! Wallets: the compare-and-set protocol that writes an entry under its idempotency key exactly
//! once while moving the balance, and the calls on wallets (grant, balance, earnings, entries).

use std::time::Duration;

use ::scylla::value::CqlTimestamp;
use protocol::UserId;
use rand::Rng;
use tracing::warn;
use uuid::Uuid;

use super::super::decision::{Decision, Observation, decide};
use super::super::movement::single;
use super::super::{EntryKind, GrantOutcome, MovementKind, grant_entry_id, now_ms};
use super::{
    CAS_JITTER_MAX_MS, MAX_CAS_ATTEMPTS, MAX_RESENDS, ScyllaLedger, lwt_applied, now_ts, unknown,
};
use crate::{Result, StorageError};

/// The result of one wallet change.
pub(super) enum Applied {
    /// The key is held by `kind`; `ours` when this call's write is the one that landed (or may
    /// have: an unknown outcome read back as present).
    Held {
        kind: EntryKind,
        balance_after: Option<i64>,
        ours: bool,
    },
    /// The change would take the balance below zero; nothing was written.
    Insufficient { balance: i64 },
}

impl ScyllaLedger {
    pub(super) async fn read_entry(
        &self,
        account: &str,
        entry_id: Uuid,
    ) -> Result<Option<(EntryKind, Option<i64>)>> {
        let rows: Vec<(Option<String>, Option<i64>)> = self
            .rows(&self.st.wallet_entry, (account, entry_id))
            .await?;
        match rows.into_iter().next() {
            Some((Some(kind), after)) => Ok(Some((EntryKind::parse(&kind)?, after))),
            _ => Ok(None),
        }
    }

    /// The amount of one wallet entry (0 when there is none).
    pub(super) async fn read_entry_amount(&self, account: &str, entry_id: Uuid) -> Result<i64> {
        let rows: Vec<(Option<i64>,)> = self
            .rows(&self.st.wallet_entry_amount, (account, entry_id))
            .await?;
        Ok(rows.into_iter().next().and_then(|r| r.0).unwrap_or(0))
    }

    pub(in crate::ledger) async fn read_head(&self, account: &str) -> Result<(i64, Option<i64>)> {
        let rows: Vec<(Option<i64>, Option<i64>)> =
            self.rows(&self.st.wallet_head, (account,)).await?;
        Ok(rows
            .into_iter()
            .next()
            .map_or((0, None), |(b, v)| (b.unwrap_or(0), v)))
    }

    /// Writes `claim` under `entry_id` in `account`'s wallet, moving the balance by `delta`,
    /// exactly once; or finds who holds the key. The protocol of the module docs, driven by `decide`.
    pub(super) async fn wallet_apply(
        &self,
        account: &str,
        entry_id: Uuid,
        claim: EntryKind,
        delta: i64,
        reference: &str,
    ) -> Result<Applied> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            if attempts > MAX_CAS_ATTEMPTS {
                return Err(StorageError::Conflict(format!(
                    "wallet {account}: compare-and-set kept losing"
                )));
            }
            // The entry first, then the head: see the module doc for why that order matters.
            if let Some((kind, after)) = self.read_entry(account, entry_id).await? {
                return held(
                    claim,
                    Observation::NotApplied { entry: Some(kind) },
                    after,
                    false,
                );
            }
            let (balance, version) = self.read_head(account).await?;
            let new = balance
                .checked_add(delta)
                .ok_or_else(|| StorageError::backend_msg("balance overflow"))?;
            if new < 0 {
                return Ok(Applied::Insufficient { balance });
            }
            let v1 = version.unwrap_or(0) + 1;
            let values = (
                (new, v1, account, version),
                (
                    account,
                    entry_id,
                    claim.as_str(),
                    delta.abs(),
                    new,
                    v1,
                    reference,
                    now_ts(),
                ),
            );
            let mut observed = self.change(&values).await;
            let mut resends = 0;
            loop {
                match decide(claim, observed) {
                    Decision::Holds(kind) => {
                        // Ours when this call's write landed, or may have (an unknown outcome
                        // read back as our kind); for a grant this decides `applied`.
                        let ours =
                            kind == claim && !matches!(observed, Observation::NotApplied { .. });
                        let balance_after = if observed == Observation::Applied {
                            Some(new)
                        } else {
                            self.read_entry(account, entry_id)
                                .await?
                                .and_then(|(_, a)| a)
                        };
                        return Ok(Applied::Held {
                            kind,
                            balance_after,
                            ours,
                        });
                    }
                    Decision::RetryFresh => break,
                    Decision::ReadBack => {
                        let entry = self
                            .read_back(|| self.read_entry(account, entry_id))
                            .await?
                            .map(|(k, _)| k);
                        observed = Observation::ReadBack { entry };
                    }
                    Decision::ResendSame => {
                        resends += 1;
                        if resends > MAX_RESENDS {
                            return Err(unknown("wallet change outcome stays unknown"));
                        }
                        observed = self.change(&values).await;
                    }
                    Decision::Corrupt(kind) => {
                        return Err(StorageError::corrupt_msg(format!(
                            "wallet {account} key {entry_id} holds a {kind:?}, wanted {claim:?}"
                        )));
                    }
                }
            }
            let jitter = rand::rng().random_range(0..=CAS_JITTER_MAX_MS);
            tokio::time::sleep(Duration::from_millis(jitter)).await;
        }
    }

    /// Sends the wallet batch once. A not-applied answer is completed with a serial read of
    /// the key, so `decide` sees who holds it.
    pub(super) async fn change(&self, values: &WalletChange<'_>) -> Observation {
        match self.session.batch(&self.st.wallet_change, values).await {
            Ok(res) => match lwt_applied(res) {
                Ok(true) => Observation::Applied,
                Ok(false) => {
                    let (account, entry_id) = (values.1.0, values.1.1);
                    match self.read_entry(account, entry_id).await {
                        Ok(entry) => Observation::NotApplied {
                            entry: entry.map(|(k, _)| k),
                        },
                        Err(_) => Observation::Unknown,
                    }
                }
                Err(_) => Observation::Unknown,
            },
            Err(e) => {
                warn!(error = %e, "Wallet LWT outcome unknown; reading back.");
                Observation::Unknown
            }
        }
    }

    /// Moves a saga `from → to` if its fence allows. `Ok(None)`: it is now in `to`;
    /// `Ok(Some(state))`: it is in another state, unchanged.
    pub(in crate::ledger) async fn grant_as(
        &self,
        user: &UserId,
        amount: i64,
        key: &str,
        line: MovementKind,
    ) -> Result<GrantOutcome> {
        let reference = format!("grant:{key}");
        match self
            .wallet_apply(
                user.as_str(),
                grant_entry_id(key),
                EntryKind::Grant,
                amount,
                &reference,
            )
            .await?
        {
            Applied::Held {
                ours,
                balance_after,
                ..
            } => {
                if ours {
                    let line = single(user, line, amount, balance_after, None, key, now_ms());
                    self.write_movements(&[line]).await?;
                }
                Ok(GrantOutcome {
                    balance: self.read_head(user.as_str()).await?.0,
                    applied: ours,
                    amount: if ours {
                        amount
                    } else {
                        self.read_entry_amount(user.as_str(), grant_entry_id(key))
                            .await?
                    },
                })
            }
            Applied::Insufficient { .. } => {
                Err(StorageError::corrupt_msg("a credit cannot overdraw"))
            }
        }
    }

    pub(in crate::ledger) async fn balance(&self, user: &UserId) -> Result<i64> {
        Ok(self.read_head(user.as_str()).await?.0)
    }

    pub(in crate::ledger) async fn earnings(&self, user: &UserId) -> Result<i64> {
        let rows: Vec<(Option<i64>,)> = self.rows(&self.st.earn_sum, (user.as_str(),)).await?;
        Ok(rows.into_iter().next().and_then(|r| r.0).unwrap_or(0))
    }

    pub(in crate::ledger) async fn wallet_entry(
        &self,
        sender: &UserId,
        gift_id: Uuid,
    ) -> Result<Option<EntryKind>> {
        Ok(self
            .read_entry(sender.as_str(), gift_id)
            .await?
            .map(|(k, _)| k))
    }
}

/// Values of the wallet batch: the head CAS, then the entry row.
pub(super) type WalletChange<'a> = (
    (i64, i64, &'a str, Option<i64>),
    (&'a str, Uuid, &'a str, i64, i64, i64, &'a str, CqlTimestamp),
);

pub(super) fn held(
    claim: EntryKind,
    observed: Observation,
    balance_after: Option<i64>,
    ours: bool,
) -> Result<Applied> {
    match decide(claim, observed) {
        Decision::Holds(kind) => Ok(Applied::Held {
            kind,
            balance_after,
            ours,
        }),
        Decision::Corrupt(kind) => Err(StorageError::corrupt_msg(format!(
            "key holds a {kind:?}, wanted {claim:?}"
        ))),
        other => Err(StorageError::corrupt_msg(format!(
            "unexpected decision {other:?} for a found entry"
        ))),
    }
}
