//! The money calls of the admin API: grants, wallets and the ledger's audit totals.

use bytes::Bytes;
use http::StatusCode;
use protocol::UserId;
use protocol::client::is_valid_req_id;
use serde::Deserialize;
use serde_json::json;
use tracing::info;

use super::{Resp, error, json_resp};
use crate::money::{MAX_GRANT_COINS, Money};

#[derive(Deserialize)]
struct GrantBody {
    amount: i64,
    key: String,
}

fn no_ledger() -> Resp {
    error(StatusCode::SERVICE_UNAVAILABLE, "no ledger on this node")
}

/// `POST /admin/wallets/{user}/grant` with `{"amount": coins, "key": "idempotency key"}`; the
/// key follows the rule of a `gift.send` `req_id` ([`is_valid_req_id`]).
pub(super) async fn grant(money: &Money, user: &str, body: &Bytes) -> Resp {
    let Some(ledger) = &money.ledger else {
        return no_ledger();
    };
    let g: GrantBody = match serde_json::from_slice(body) {
        Ok(g) => g,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("body: {e}")),
    };
    if g.amount <= 0 || g.amount > MAX_GRANT_COINS || !is_valid_req_id(&g.key) {
        return error(
            StatusCode::BAD_REQUEST,
            "amount must be 1..=10^12 and key 1..=128 bytes of printable ASCII (0x21..=0x7E)",
        );
    }
    match ledger.grant(&UserId::from(user), g.amount, &g.key).await {
        Ok(out) if !out.applied && out.amount != g.amount => json_resp(
            // The key names another grant: a reuse, not a retry (nothing was credited).
            StatusCode::CONFLICT,
            &json!({
                "error": format!("key already used for a grant of {} coins", out.amount),
                "balance": out.balance,
            }),
        ),
        Ok(out) => {
            info!(user, amount = g.amount, key = %g.key, applied = out.applied, "Admin grant.");
            json_resp(
                StatusCode::OK,
                &json!({ "balance": out.balance, "applied": out.applied }),
            )
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// `GET /admin/wallets/{user}`.
pub(super) async fn wallet(money: &Money, user: &str) -> Resp {
    let Some(ledger) = &money.ledger else {
        return no_ledger();
    };
    let u = UserId::from(user);
    match (ledger.balance(&u).await, ledger.earnings(&u).await) {
        (Ok(balance), Ok(earnings)) => json_resp(
            StatusCode::OK,
            &json!({ "user": user, "balance": balance, "earnings": earnings }),
        ),
        (Err(e), _) | (_, Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// `GET /admin/ledger/totals`: sums for audits (conservation).
pub(super) async fn totals(money: &Money) -> Resp {
    let Some(ledger) = &money.ledger else {
        return no_ledger();
    };
    match ledger.audit_totals().await {
        Ok(t) => json_resp(
            StatusCode::OK,
            &json!({
                "totals": {
                    "granted": t.granted,
                    "coins": t.coins,
                    "earnings": t.earnings,
                    "platform_revenue": t.platform_revenue,
                    "lucky_paid": t.lucky_paid,
                    "negative_accounts": t.negative_accounts,
                    "topped_up": t.topped_up,
                    "refunded": t.refunded,
                    "debt": t.debt,
                    "transferred": t.transferred,
                    "settled": t.settled,
                    "entered": t.entered(),
                },
                "conserved": t.is_conserved(),
            }),
        ),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}
