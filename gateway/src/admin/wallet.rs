//! The admin API's wallet operations: `GET /admin/wallets/{user}/history` and the coin
//! sellers (`PUT`, `DELETE`, `GET /admin/sellers/{user}`), and host settlements
//! (`POST /admin/settlements`).

use bytes::Bytes;
use http::StatusCode;
use protocol::UserId;
use protocol::client::{WalletHistory, is_valid_req_id};
use protocol::ids::is_valid_user_id;
use serde::Deserialize;
use serde_json::json;
use storage::StorageError;
use storage::ledger::{SettlementOrder, SettlementOutcome};

use super::query_pairs;
use super::{Resp, error, json_resp};
use crate::money::Money;
use crate::wallet::{history_query, page_of};

/// `GET /admin/wallets/{user}/history?cursor=&limit=&kind=`: one page of the user's statement,
/// newest first (the shape of `wallet.history`'s answer).
pub(super) async fn history(money: &Money, user: &str, query: Option<&str>) -> Resp {
    let Some(ledger) = &money.ledger else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "no ledger on this node");
    };
    let mut h = WalletHistory::default();
    for (k, v) in query_pairs(query) {
        match k.as_str() {
            "cursor" => h.cursor = Some(v),
            // The contract's bounds (admin-openapi.yaml); the client op clamps instead.
            "limit" => match v.parse() {
                Ok(l @ 1..=100) => h.limit = Some(l),
                _ => return error(StatusCode::BAD_REQUEST, "limit: 1..=100"),
            },
            "kind" => h.kind = Some(v),
            _ => {}
        }
    }
    let q = match history_query(&h) {
        Ok(q) => q,
        Err(msg) => return error(StatusCode::BAD_REQUEST, &msg),
    };
    match ledger.history(&UserId::from(user), &q).await {
        Ok(page) => json_resp(StatusCode::OK, &json!(page_of(page))),
        Err(StorageError::Invalid { .. }) => error(StatusCode::BAD_REQUEST, "bad cursor"),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// `PUT /admin/sellers/{user}` (mark) or `DELETE` (unmark): idempotent; answers the state.
pub(super) async fn set_seller(money: &Money, user: &str, seller: bool) -> Resp {
    let Some(ledger) = &money.ledger else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "no ledger on this node");
    };
    match ledger.set_seller(&UserId::from(user), seller).await {
        Ok(()) => {
            tracing::info!(user, seller, "Coin seller changed.");
            json_resp(StatusCode::OK, &json!({ "user": user, "seller": seller }))
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// `GET /admin/sellers/{user}`: whether the user is a coin seller.
pub(super) async fn seller(money: &Money, user: &str) -> Resp {
    let Some(ledger) = &money.ledger else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "no ledger on this node");
    };
    match ledger.is_seller(&UserId::from(user)).await {
        Ok(seller) => json_resp(StatusCode::OK, &json!({ "user": user, "seller": seller })),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// The body of `POST /admin/settlements`.
#[derive(Deserialize)]
struct SettleBody {
    settlement_id: String,
    user: String,
    earnings: i64,
    #[serde(default)]
    period: String,
}

/// Longest `period` label.
const MAX_PERIOD_BYTES: usize = 64;

/// `POST /admin/settlements` `{settlement_id, user, earnings, period}`: moves `earnings` of
/// the host's earnings to a settlement record with its payout at `rate_milli` (payout units
/// per 1,000 coins), once per settlement id; 422 when the earnings do not cover it.
pub(super) async fn settle(money: &Money, rate_milli: i64, body: &Bytes) -> Resp {
    let Some(ledger) = &money.ledger else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "no ledger on this node");
    };
    let b: SettleBody = match serde_json::from_slice(body) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("body: {e}")),
    };
    if !is_valid_req_id(&b.settlement_id)
        || !is_valid_user_id(&b.user)
        || b.earnings <= 0
        || b.earnings > crate::money::MAX_GRANT_COINS
        || b.period.len() > MAX_PERIOD_BYTES
    {
        return error(
            StatusCode::BAD_REQUEST,
            "settlement_id 1..=128 printable ASCII, user a user id, earnings 1..=10^12, period <= 64 bytes",
        );
    }
    let payout =
        i64::try_from(i128::from(b.earnings) * i128::from(rate_milli) / 1000).unwrap_or(i64::MAX);
    let order = SettlementOrder {
        id: b.settlement_id.clone(),
        user: UserId::from(b.user.as_str()),
        amount: b.earnings,
        payout,
        period: b.period,
    };
    match ledger.settle_earnings(&order).await {
        Ok(SettlementOutcome::Settled {
            earnings,
            payout,
            applied,
        }) => {
            if applied {
                tracing::info!(user = %b.user, settled = b.earnings, payout, "Host settled.");
            }
            json_resp(
                StatusCode::OK,
                &json!({
                    "settlement_id": b.settlement_id, "user": b.user, "settled": b.earnings,
                    "payout": payout, "earnings": earnings, "applied": applied,
                }),
            )
        }
        Ok(SettlementOutcome::InsufficientEarnings { earnings }) => json_resp(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({ "error": "earnings do not cover the settlement", "earnings": earnings }),
        ),
        Ok(SettlementOutcome::KeyReused) => error(
            StatusCode::CONFLICT,
            "settlement_id already used for another host or amount",
        ),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}
