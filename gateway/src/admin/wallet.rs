//! The admin API's wallet operations: `GET /admin/wallets/{user}/history` and the coin
//! sellers (`PUT`, `DELETE`, `GET /admin/sellers/{user}`).

use http::StatusCode;
use protocol::UserId;
use protocol::client::WalletHistory;
use serde_json::json;
use storage::StorageError;

use super::directory::percent_decode;
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
    for (k, v) in query
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
    {
        let Some(v) = percent_decode(v) else {
            return error(StatusCode::BAD_REQUEST, "bad percent-encoding");
        };
        match k {
            "cursor" => h.cursor = Some(v),
            "limit" => match v.parse() {
                Ok(l) => h.limit = Some(l),
                Err(_) => return error(StatusCode::BAD_REQUEST, "limit: 1..=100"),
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
