//! The wallet operations at the gateway (`wallet.history`), answered from the ledger for the
//! caller's own wallet; the admin API reads any user's through the same calls.

use bytes::Bytes;
use protocol::client::{self, MovementEntry, WalletHistory, WalletHistoryPage, WalletOp};
use protocol::{ErrorCode, UserId};
use storage::StorageError;
use storage::ledger::{HistoryPage, HistoryQuery, Ledger, MovementKind};
use tracing::warn;

/// A statement query from the wire's arguments.
///
/// # Errors
/// A message for an unknown kind.
pub(crate) fn history_query(h: &WalletHistory) -> Result<HistoryQuery, String> {
    let kind = match h.kind.as_deref() {
        None => None,
        Some(k) => {
            Some(MovementKind::from_name(k).ok_or_else(|| format!("unknown movement kind {k:?}"))?)
        }
    };
    Ok(HistoryQuery {
        cursor: h.cursor.clone(),
        limit: h.limit.map_or(0, |l| l as usize),
        kind,
    })
}

/// The wire form of a statement page.
pub(crate) fn page_of(page: HistoryPage) -> WalletHistoryPage {
    WalletHistoryPage {
        movements: page
            .movements
            .into_iter()
            .map(|m| MovementEntry {
                kind: m.kind.as_str().to_owned(),
                account: m.kind.account().as_str().to_owned(),
                amount: m.amount,
                balance_after: m.balance_after,
                counterparty: m.counterparty,
                key: m.key,
                at: m.at_ms,
            })
            .collect(),
        next: page.next,
    }
}

/// Answers a wallet op of `user`.
pub(crate) async fn answer(ledger: &Ledger, user: &UserId, id: u64, op: WalletOp) -> Bytes {
    match op {
        WalletOp::History(h) => {
            let query = match history_query(&h) {
                Ok(q) => q,
                Err(msg) => return client::encode_err(Some(id), ErrorCode::BadRequest, &msg),
            };
            match ledger.history(user, &query).await {
                Ok(page) => client::encode_ok(id, &page_of(page)),
                Err(StorageError::Invalid { .. }) => {
                    client::encode_err(Some(id), ErrorCode::BadRequest, "bad cursor")
                }
                Err(e) => {
                    warn!(error = %e, "Statement read failed.");
                    client::encode_err(
                        Some(id),
                        ErrorCode::Unavailable,
                        "ledger unavailable; retry",
                    )
                }
            }
        }
    }
}
