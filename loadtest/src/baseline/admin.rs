//! The baseline's admin port: what `gifts` asks of Chorus' admin API, without a token.
//!
//! - `POST /admin/wallets/{user}/grant` `{"amount":i64,"key":"…"}` → `{"balance":i64}` (once
//!   per key);
//! - `GET /admin/wallets/{user}` → `{"user","balance","earnings"}`;
//! - `GET /admin/ledger/totals` → `{"granted","held","conserved"}`;
//! - `GET /metrics` → `chorus_gateway_frames_out_total` and
//!   `chorus_gateway_write_batches_total`, counted as Chorus counts them (frames fed to
//!   sockets, and the flushes that wrote them), so frames per write compare.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::json;

use super::State;

type Resp = Response<Full<Bytes>>;

/// Binds `addr` and serves the admin routes until the task is dropped.
///
/// # Errors
/// The address cannot be bound.
pub(crate) async fn bind(
    state: Arc<State>,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    super::accept_each(state, addr, |stream, state| async move {
        let svc = service_fn(move |req| {
            let state = Arc::clone(&state);
            async move { Ok::<_, Infallible>(handle(&state, req).await) }
        });
        let _ = http1::Builder::new()
            .serve_connection(TokioIo::new(stream), svc)
            .await;
    })
    .await
}

fn answer(status: StatusCode, body: String) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

fn ok(v: &serde_json::Value) -> Resp {
    answer(StatusCode::OK, v.to_string())
}

fn error(status: StatusCode, msg: &str) -> Resp {
    answer(status, json!({ "error": msg }).to_string())
}

#[derive(Deserialize)]
struct GrantBody {
    amount: i64,
    key: String,
}

async fn handle(state: &State, req: Request<Incoming>) -> Resp {
    let path = req.uri().path().to_owned();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    if parts.as_slice() == ["metrics"] {
        return answer(
            StatusCode::OK,
            format!(
                "chorus_gateway_frames_out_total {}\nchorus_gateway_write_batches_total {}\n",
                state.frames_out.load(Ordering::Relaxed),
                state.write_batches.load(Ordering::Relaxed)
            ),
        );
    }
    let Some(ledger) = &state.ledger else {
        return error(StatusCode::NOT_FOUND, "no ledger");
    };
    let method = req.method().clone();
    match (method, parts.as_slice()) {
        (Method::POST, ["admin", "wallets", user, "grant"]) => {
            let user = (*user).to_owned();
            let Ok(body) = req.into_body().collect().await else {
                return error(StatusCode::BAD_REQUEST, "unreadable body");
            };
            let Ok(g) = serde_json::from_slice::<GrantBody>(&body.to_bytes()) else {
                return error(StatusCode::BAD_REQUEST, "want {\"amount\",\"key\"}");
            };
            match ledger.grant(&user, g.amount, &g.key).await {
                Ok(balance) => ok(&json!({ "balance": balance })),
                Err(super::ledger::Error::BadAmount) => {
                    error(StatusCode::BAD_REQUEST, "bad amount")
                }
                Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
            }
        }
        (Method::GET, ["admin", "wallets", user]) => match ledger.wallet(user).await {
            Ok(w) => ok(&json!({ "user": user, "balance": w.coins, "earnings": w.earnings })),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        },
        (Method::GET, ["admin", "ledger", "totals"]) => match ledger.totals().await {
            Ok(t) => ok(&json!({
                "granted": t.granted, "held": t.held, "conserved": t.is_conserved(),
            })),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        },
        _ => error(StatusCode::NOT_FOUND, "no such route"),
    }
}
