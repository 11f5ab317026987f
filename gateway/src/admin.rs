//! The admin HTTP port (hyper): `/healthz`, `/metrics` (Prometheus text), and the bearer-token
//! protected `/admin/*` API.

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use protocol::RoomId;
use protocol::ids::is_valid_id;
use serde_json::json;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use storage::lease::{LeaseStore, node_of};

use crate::Core;

/// Largest admin request body accepted.
const MAX_ADMIN_BODY_BYTES: usize = 64 * 1024;

/// The process-wide Prometheus recorder (installed once, shared by every server in the process).
pub fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| match PrometheusBuilder::new().install_recorder() {
            Ok(h) => Some(h),
            Err(e) => {
                warn!(error = %e, "Could not install the metrics recorder.");
                None
            }
        })
        .as_ref()
}

/// What the admin API reaches.
pub(crate) struct Admin {
    pub(crate) node: protocol::NodeId,
    pub(crate) core: Option<Arc<Core>>,
    pub(crate) token: Option<String>,
    pub(crate) shard: Option<shard::Shard>,
    pub(crate) leases: LeaseStore,
}

type Resp = Response<Full<Bytes>>;

fn respond(status: StatusCode, body: impl Into<Bytes>, content_type: &str) -> Resp {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    r
}

pub(crate) fn json_resp(status: StatusCode, v: &serde_json::Value) -> Resp {
    respond(status, v.to_string(), "application/json")
}

pub(crate) fn error(status: StatusCode, msg: &str) -> Resp {
    json_resp(status, &json!({ "error": msg }))
}

/// Serves the admin port until shutdown.
pub(crate) async fn serve(
    admin: Arc<Admin>,
    listener: TcpListener,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let (stream, _) = tokio::select! {
            () = shutdown.cancelled() => break,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    warn!(error = %e, "Admin accept failed.");
                    continue;
                }
            },
        };
        let admin = admin.clone();
        tracker.spawn(async move {
            let svc = service_fn(move |req| {
                let admin = admin.clone();
                async move { Ok::<_, Infallible>(handle(&admin, req).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn authorized(admin: &Admin, req: &Request<Incoming>) -> bool {
    let Some(want) = &admin.token else {
        return false;
    };
    let got = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    got.as_bytes().ct_eq(want.as_bytes()).into()
}

async fn handle(admin: &Admin, req: Request<Incoming>) -> Resp {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    match (&method, path.as_str()) {
        (&Method::GET, "/healthz") => return respond(StatusCode::OK, "ok\n", "text/plain"),
        (&Method::GET, "/metrics") => {
            let body = prometheus()
                .map(PrometheusHandle::render)
                .unwrap_or_default();
            return respond(StatusCode::OK, body, "text/plain; version=0.0.4");
        }
        _ => {}
    }
    if !path.starts_with("/admin/") {
        return error(StatusCode::NOT_FOUND, "not found");
    }
    if !authorized(admin, &req) {
        return error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
    }
    let parts: Vec<&str> = path.trim_start_matches("/admin/").split('/').collect();
    let body = match Limited::new(req.into_body(), MAX_ADMIN_BODY_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => return error(StatusCode::PAYLOAD_TOO_LARGE, "body too large"),
    };
    info!(%method, %path, "Admin call.");
    metrics::counter!("chorus_admin_calls_total", "verb" => verb_of(&method, &parts)).increment(1);
    match (&method, parts.as_slice()) {
        (&Method::GET, ["rooms", id]) if is_valid_id(id) => room(admin, RoomId::from(*id)).await,
        (&Method::POST, ["wallets", user, "grant"]) if is_valid_id(user) => match &admin.core {
            Some(core) => core.admin_grant(user, &body).await,
            None => error(StatusCode::NOT_FOUND, "wallets are served by gateway nodes"),
        },
        (&Method::GET, ["wallets", user]) if is_valid_id(user) => match &admin.core {
            Some(core) => core.admin_wallet(user).await,
            None => error(StatusCode::NOT_FOUND, "wallets are served by gateway nodes"),
        },
        (&Method::GET, ["ledger", "totals"]) => match &admin.core {
            Some(core) => core.admin_totals().await,
            None => error(
                StatusCode::NOT_FOUND,
                "the ledger is served by gateway nodes",
            ),
        },
        _ => error(StatusCode::NOT_FOUND, "no such admin call"),
    }
}

fn verb_of(method: &Method, parts: &[&str]) -> &'static str {
    match (method, parts) {
        (&Method::GET, ["rooms", _]) => "room_get",
        (&Method::POST, ["wallets", _, "grant"]) => "wallet_grant",
        (&Method::GET, ["wallets", _]) => "wallet_get",
        (&Method::GET, ["ledger", "totals"]) => "ledger_totals",
        _ => "other",
    }
}

/// `GET /admin/rooms/{id}`: the live lease holder and fence, answered by any node; a shard
/// also says whether it runs the room itself.
async fn room(admin: &Admin, room: RoomId) -> Resp {
    let here = admin.shard.as_ref().and_then(|s| s.fence_of(&room));
    match admin.leases.holder(&room).await {
        Ok(Some((owner, fence))) => json_resp(
            StatusCode::OK,
            &json!({
                "room": room,
                "owner": node_of(&owner),
                "owner_id": owner,
                "fence": fence,
                "answered_by": admin.node,
                "running_here": here.is_some(),
                "local_fence": here,
            }),
        ),
        Ok(None) if here.is_some() => json_resp(
            StatusCode::NOT_FOUND,
            &json!({
                "error": "room has no lease now",
                "answered_by": admin.node,
                "running_here": true,
                "local_fence": here,
            }),
        ),
        Ok(None) => error(StatusCode::NOT_FOUND, "room has no owner now (not loaded)"),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}
