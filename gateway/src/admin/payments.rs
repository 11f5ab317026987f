//! The payment provider's webhook on the admin port: `POST /payments/webhook`. No admin token:
//! the body is signed like `POST /rtc/webhook` (`X-Chorus-Timestamp`, `X-Chorus-Signature:
//! v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`), and the signature and the timestamp
//! window are checked on the raw body before anything is parsed.
//!
//! Bodies: `{"type":"payment.succeeded","payment_id","user","product"}` credits the product's
//! coins (`payment_products`) once per payment id; `{"type":"payment.refunded","payment_id"}`
//! takes them back once (coins already spent become a debt). A repeated notification answers
//! 200 with the first result (`applied: false`), so a provider's retries are harmless.

use http::{Method, Request, StatusCode};
use hyper::body::Incoming;
use protocol::UserId;
use protocol::client::is_valid_req_id;
use protocol::ids::is_valid_user_id;
use serde::Deserialize;
use serde_json::json;
use storage::ledger::{Payment, RefundOutcome, TopUpOutcome};
use tracing::{info, warn};

use super::rtc::{Refused, SIGNATURE_HEADER, TIMESTAMP_HEADER, header, unix_now, verify_chorus};
use super::{Admin, Resp, error, json_resp, read_body};

/// The webhook's path.
pub(super) const PATH: &str = "/payments/webhook";
/// Largest notification body.
const MAX_BODY_BYTES: usize = 16 * 1024;

/// A verified notification.
#[derive(Deserialize)]
struct Notice {
    #[serde(rename = "type")]
    kind: String,
    payment_id: String,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    product: Option<String>,
}

/// `POST /payments/webhook`.
pub(super) async fn serve(admin: &Admin, req: Request<Incoming>) -> Resp {
    if req.method() != Method::POST {
        return error(StatusCode::METHOD_NOT_ALLOWED, "use POST");
    }
    let Some(core) = &admin.core else {
        return error(
            StatusCode::NOT_FOUND,
            "payments are served by gateway nodes",
        );
    };
    let Some(secret) = core
        .config
        .payments_webhook_secret
        .as_ref()
        .filter(|s| !s.is_empty())
    else {
        warn!("Payment webhook received, but no payments_webhook_secret is configured.");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "payments are not configured",
        );
    };
    let Some(ledger) = &core.money.ledger else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "no ledger on this node");
    };
    let ts = header(req.headers(), TIMESTAMP_HEADER).map(str::to_owned);
    let sig = header(req.headers(), SIGNATURE_HEADER).map(str::to_owned);
    let body = match read_body(req.into_body(), MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    // The signature and its window first: nothing unverified is parsed.
    let verified = verify_chorus(
        secret.as_bytes(),
        ts.as_deref(),
        sig.as_deref(),
        &body,
        unix_now(),
    );
    if let Err(refused) = verified {
        let why = match refused {
            Refused::Unauthorized(w) => w.to_owned(),
            Refused::BadRequest(w) => w,
        };
        warn!(why = %why, "Payment webhook refused.");
        return error(StatusCode::UNAUTHORIZED, &why);
    }
    let notice: Notice = match serde_json::from_slice(&body) {
        Ok(n) => n,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("body: {e}")),
    };
    if !is_valid_req_id(&notice.payment_id) {
        return error(
            StatusCode::BAD_REQUEST,
            "payment_id: 1..=128 bytes of printable ASCII",
        );
    }
    match notice.kind.as_str() {
        "payment.succeeded" => {
            let Some(user) = notice.user.filter(|u| is_valid_user_id(u)) else {
                return error(StatusCode::BAD_REQUEST, "user: a valid user id");
            };
            let product = notice.product.unwrap_or_default();
            let Some(&coins) = core.config.payment_products.get(&product) else {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!("unknown product {product:?}"),
                );
            };
            let payment = Payment {
                id: notice.payment_id,
                user: UserId::from(user.as_str()),
                product,
                coins,
            };
            match ledger.top_up(&payment).await {
                Ok(TopUpOutcome::Credited {
                    balance,
                    applied,
                    debt_paid,
                }) => {
                    if applied {
                        info!(user = %user, coins, payment = %payment.id, "Top-up credited.");
                    }
                    json_resp(
                        StatusCode::OK,
                        &json!({
                            "payment_id": payment.id, "applied": applied, "coins": coins,
                            "balance": balance, "debt_paid": debt_paid,
                        }),
                    )
                }
                Ok(TopUpOutcome::KeyReused) => error(
                    StatusCode::CONFLICT,
                    "payment_id already booked for another user or amount",
                ),
                Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
            }
        }
        "payment.refunded" => match ledger.refund(&notice.payment_id).await {
            Ok(RefundOutcome::Refunded {
                balance,
                debt,
                applied,
            }) => {
                if applied {
                    info!(payment = %notice.payment_id, debt, "Top-up refunded.");
                }
                json_resp(
                    StatusCode::OK,
                    &json!({
                        "payment_id": notice.payment_id, "applied": applied,
                        "balance": balance, "debt": debt,
                    }),
                )
            }
            Ok(RefundOutcome::Unknown) => error(StatusCode::NOT_FOUND, "unknown payment_id"),
            Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        },
        other => error(
            StatusCode::BAD_REQUEST,
            &format!("unknown type {other:?} (payment.succeeded, payment.refunded)"),
        ),
    }
}
