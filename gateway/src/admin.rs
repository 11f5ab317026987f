//! The admin HTTP port (hyper): `/healthz`, `/metrics` (Prometheus text; open unless the node
//! has a metrics token), the bearer-token protected `/admin/*` API, the RTC provider
//! webhooks `/rtc/*` and the payment provider's `/payments/webhook` (signed, no token), and
//! the operator dashboard's page (`/dashboard`).

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use protocol::RoomId;
use protocol::ids::{is_valid_id, is_valid_user_id};
use serde_json::json;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use storage::lease::{LeaseStore, node_of};

use crate::shared::Core;

mod cluster_ops;
mod dashboard;
mod directory;
mod health;
mod messages;
mod money;
mod payments;
mod reports;
mod robots;
mod rtc;
mod users;
mod wallet;

pub(crate) use health::Readiness;
pub(crate) use reports::REPORTS_OPEN;

/// How long an admin connection may take to send a request's headers, and how long it may sit
/// idle between requests, before it is closed: the WebSocket port's handshake bound.
const ADMIN_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request's body may take to arrive (then `408`).
const ADMIN_BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Admin connections open at once; one more is closed as soon as it is accepted, so the admin
/// port cannot take the file descriptors the WebSocket port needs. Monitoring and operators
/// need a handful.
const ADMIN_MAX_CONNECTIONS: usize = 256;
/// Longest an admin connection lives: then it answers the request in hand and closes, so
/// clients that keep connections busy with cheap requests cannot hold every place (and lock
/// out the orchestrator's probes). Keep-alive clients reconnect transparently.
const ADMIN_CONNECTION_LIFETIME: Duration = Duration::from_secs(20);
/// How long a connection past its lifetime may take to finish its answer before it is dropped.
const ADMIN_CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Largest admin request body accepted.
const MAX_ADMIN_BODY_BYTES: usize = 64 * 1024;

/// The process-wide Prometheus recorder (installed once, shared by every server in the process).
pub fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| match PrometheusBuilder::new().install_recorder() {
            Ok(h) => {
                process_metrics().describe();
                Some(h)
            }
            Err(e) => {
                warn!(error = %e, "Could not install the metrics recorder.");
                None
            }
        })
        .as_ref()
}

/// The standard `process_*` metrics (CPU seconds, resident and virtual memory, open and most
/// file descriptors, threads, start time), read from the OS at each scrape.
fn process_metrics() -> &'static metrics_process::Collector {
    static COLLECTOR: OnceLock<metrics_process::Collector> = OnceLock::new();
    COLLECTOR.get_or_init(metrics_process::Collector::default)
}

/// The `/metrics` page: the process metrics refreshed, then every metric of the process.
fn render_metrics() -> String {
    prometheus().map_or_else(String::new, |h| {
        process_metrics().collect();
        h.render()
    })
}

/// What the admin API reaches.
pub(crate) struct Admin {
    pub(crate) node: protocol::NodeId,
    pub(crate) core: Option<Arc<Core>>,
    pub(crate) token: Option<String>,
    /// The bearer token `/metrics` requires (`None`: open).
    pub(crate) metrics_token: Option<String>,
    pub(crate) shard: Option<shard::Shard>,
    pub(crate) leases: LeaseStore,
    /// The ring membership (cluster nodes); `None` in standalone.
    pub(crate) membership: Option<storage::membership::Membership>,
    /// What `/readyz` checks.
    pub(crate) ready: Readiness,
    /// The robot room configurations every shard reconciles from (`/admin/robots`).
    pub(crate) robots: storage::robots::RobotStore,
    /// The moderation queue (`/admin/reports`).
    pub(crate) reports: storage::reports::ReportStore,
    /// The event webhook's sender (when configured): resolutions and suspensions taken here.
    pub(crate) events: Option<shard::events::Notifier>,
    /// The room snapshots, read to tell whether a room exists.
    pub(crate) snapshots: storage::snapshot::SnapshotStore,
    /// The room directory (`/admin/rooms`, directory pins).
    pub(crate) directory: Arc<crate::directory::Directory>,
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

/// A query string's `name=value` pairs, `%XX` and `+` decoded (bytes that are not UTF-8 read
/// as U+FFFD, so a bad escape is a value that matches nothing rather than an error).
pub(super) fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

/// The decoded value of the first `name` in a query string (`""` when absent).
pub(crate) fn query_value(query: Option<&str>, name: &str) -> String {
    query_pairs(query)
        .into_iter()
        .find_map(|(k, v)| (k == name).then_some(v))
        .unwrap_or_default()
}

pub(crate) fn json_resp(status: StatusCode, v: &serde_json::Value) -> Resp {
    respond(status, v.to_string(), "application/json")
}

pub(crate) fn error(status: StatusCode, msg: &str) -> Resp {
    json_resp(status, &json!({ "error": msg }))
}

/// Serves the admin port until shutdown: at most [`ADMIN_MAX_CONNECTIONS`] connections, each
/// closed when its headers take longer than [`ADMIN_HEADER_TIMEOUT`] or it idles that long, and
/// at the latest after [`ADMIN_CONNECTION_LIFETIME`].
pub(crate) async fn serve(
    admin: Arc<Admin>,
    listener: TcpListener,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    tracker.spawn(reports::watch_backlog(
        admin.reports.clone(),
        shutdown.clone(),
    ));
    let open = Arc::new(Semaphore::new(ADMIN_MAX_CONNECTIONS));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(ADMIN_HEADER_TIMEOUT);
    loop {
        let (stream, _) = tokio::select! {
            () = shutdown.cancelled() => break,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    shard::link::accept_failed(&e, "admin").await;
                    continue;
                }
            },
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            // Reject policy: the connection is closed unread.
            metrics::counter!("chorus_admin_connections_refused_total").increment(1);
            drop(stream);
            continue;
        };
        let admin = admin.clone();
        let http = http.clone();
        tracker.spawn(async move {
            let svc = service_fn(move |req| {
                let admin = admin.clone();
                async move { Ok::<_, Infallible>(handle(&admin, req).await) }
            });
            let conn = http.serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = tokio::time::sleep(ADMIN_CONNECTION_LIFETIME) => {
                    // The answer under way may finish; a client that does not read it is
                    // dropped after the grace, so it cannot keep its place for ever.
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(ADMIN_CLOSE_GRACE, conn).await;
                }
            }
            drop(permit);
        });
    }
}

fn authorized(admin: &Admin, req: &Request<Incoming>) -> bool {
    admin.token.as_deref().is_some_and(|want| bears(req, want))
}

/// Whether `req` bears `Authorization: Bearer <want>` (compared in constant time). An empty
/// `want` is no token: nothing bears it, not even a request without the header.
fn bears(req: &Request<Incoming>, want: &str) -> bool {
    if want.is_empty() {
        return false;
    }
    let got = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .unwrap_or("");
    got.as_bytes().ct_eq(want.as_bytes()).into()
}

/// The token of an `Authorization: Bearer <token>` value; the scheme's case does not matter
/// (RFC 9110, section 11.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

/// Whether `req` may read `/metrics`: always on a node without a metrics token, else only
/// bearing it.
fn metrics_allowed(admin: &Admin, req: &Request<Incoming>) -> bool {
    admin
        .metrics_token
        .as_deref()
        .is_none_or(|want| bears(req, want))
}

async fn handle(admin: &Admin, req: Request<Incoming>) -> Resp {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    match (&method, path.as_str()) {
        (&Method::GET, "/healthz") => return respond(StatusCode::OK, "ok\n", "text/plain"),
        (&Method::GET, "/readyz") => return health::readyz(admin).await,
        (&Method::GET, "/metrics") => {
            if !metrics_allowed(admin, &req) {
                return error(StatusCode::UNAUTHORIZED, "missing or wrong metrics token");
            }
            // Off the runtime: counting open descriptors lists `/proc/self/fd`, one entry per
            // socket.
            let body = tokio::task::spawn_blocking(render_metrics)
                .await
                .unwrap_or_default();
            return respond(StatusCode::OK, body, "text/plain; version=0.0.4");
        }
        _ => {}
    }
    if method == Method::GET
        && let Some(page) = dashboard::page(&path)
    {
        return page;
    }
    if path == rtc::CHORUS_PATH || path == rtc::LIVEKIT_PATH {
        return rtc::serve(admin, req).await;
    }
    if path == payments::PATH {
        return payments::serve(admin, req).await;
    }
    if !path.starts_with("/admin/") {
        return error(StatusCode::NOT_FOUND, "not found");
    }
    if !authorized(admin, &req) {
        return error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
    }
    // Segments are percent-decoded: a client (the dashboard) encodes ids, and `:` is valid in
    // one. A decoded `/` stays inside its segment and fails the id check.
    let segments: Vec<String> = path
        .strip_prefix("/admin/")
        .unwrap_or_default()
        .split('/')
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let parts: Vec<&str> = segments.iter().map(String::as_str).collect();
    let req_query_has_local = query_value(req.uri().query(), "local") == "1";
    let req_query = req.uri().query().map(str::to_owned);
    let body = match read_body(req.into_body(), MAX_ADMIN_BODY_BYTES).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    info!(%method, %path, "Admin call.");
    metrics::counter!("chorus_admin_calls_total", "verb" => verb_of(&method, &parts)).increment(1);
    let uri_query = req_query.as_deref();
    let local = req_query_has_local;
    match (&method, parts.as_slice()) {
        (&Method::GET, ["rooms"]) => directory::list(admin, uri_query).await,
        (&Method::POST, ["rooms", id, "pin"]) if is_valid_id(id) => {
            directory::pin(admin, RoomId::from(*id), &body).await
        }
        (&Method::DELETE, ["rooms", id, "pin"]) if is_valid_id(id) => {
            directory::unpin(admin, RoomId::from(*id)).await
        }
        (&Method::GET, ["directory", "pins"]) => directory::pins(admin).await,
        (&Method::GET, ["rooms", id]) if is_valid_id(id) => {
            room(admin, RoomId::from(*id), local).await
        }
        (&Method::GET, ["rooms", id, "moderation"]) if is_valid_id(id) => {
            cluster_ops::moderation(admin, &RoomId::from(*id)).await
        }
        (&Method::POST, ["rooms", id, "messages"]) if is_valid_id(id) => {
            messages::send(admin, RoomId::from(*id), &body).await
        }
        (&Method::PUT, ["rooms", id, "attrs"]) if is_valid_id(id) => {
            messages::attrs(admin, RoomId::from(*id), &body).await
        }
        (&Method::POST, ["rooms", id, "moderation"]) if is_valid_id(id) => {
            messages::moderate(admin, RoomId::from(*id), &body).await
        }
        (&Method::POST, ["rooms", id, "close"]) if is_valid_id(id) => {
            messages::close(admin, RoomId::from(*id), &body).await
        }
        (&Method::POST, ["rooms", id, "open"]) if is_valid_id(id) => {
            messages::open(admin, RoomId::from(*id), &body).await
        }
        (&Method::PATCH, ["rooms", id]) if is_valid_id(id) => {
            messages::update(admin, RoomId::from(*id), &body).await
        }
        (&Method::POST, ["pk"]) => messages::pk_match(admin, &body).await,
        (&Method::POST, ["rooms", id, "pk"]) if is_valid_id(id) => {
            messages::pk_start(admin, RoomId::from(*id), &body).await
        }
        (&Method::DELETE, ["rooms", id, "pk"]) if is_valid_id(id) => {
            messages::pk_stop(admin, RoomId::from(*id), &body).await
        }
        (&Method::POST, ["rooms", id, "move"]) if is_valid_id(id) => {
            cluster_ops::move_room(admin, id, &body).await
        }
        (&Method::GET, ["ring"]) => cluster_ops::ring(admin).await,
        (&Method::GET, ["nodes"]) => cluster_ops::nodes(admin).await,
        (&Method::POST, ["nodes"]) => cluster_ops::join(admin, &body).await,
        (&Method::PUT, ["nodes", id, "weight"]) if is_valid_id(id) => {
            cluster_ops::weight(admin, id, &body).await
        }
        (&Method::POST, ["nodes", id, "drain"]) if is_valid_id(id) => {
            cluster_ops::drain(admin, id).await
        }
        (&Method::DELETE, ["nodes", id]) if is_valid_id(id) => cluster_ops::remove(admin, id).await,
        (&Method::GET, ["rebalance"]) => cluster_ops::rebalance(admin).await,
        (&Method::GET, ["local"]) => cluster_ops::local(admin),
        (&Method::GET, ["local", "rooms"]) => dashboard::local_rooms(admin),
        (&Method::GET, ["leases"]) => dashboard::leases(admin).await,
        (&Method::GET, ["metrics"]) => dashboard::metrics(admin, uri_query).await,
        (&Method::POST, ["wallets", user, "grant"]) if is_valid_user_id(user) => {
            match &admin.core {
                Some(core) => money::grant(&core.money, user, &body).await,
                None => error(StatusCode::NOT_FOUND, "wallets are served by gateway nodes"),
            }
        }
        (&Method::PUT | &Method::DELETE | &Method::GET, ["sellers", user])
            if is_valid_user_id(user) =>
        {
            match &admin.core {
                Some(core) if method == Method::GET => wallet::seller(&core.money, user).await,
                Some(core) => wallet::set_seller(&core.money, user, method == Method::PUT).await,
                None => error(StatusCode::NOT_FOUND, "wallets are served by gateway nodes"),
            }
        }
        (&Method::POST, ["settlements"]) => match &admin.core {
            Some(core) => {
                let rate = core.config.settlement_rate_milli;
                wallet::settle(&core.money, rate, &body).await
            }
            None => error(StatusCode::NOT_FOUND, "wallets are served by gateway nodes"),
        },
        (&Method::GET, ["wallets", user, "history"]) if is_valid_user_id(user) => match &admin.core
        {
            Some(core) => wallet::history(&core.money, user, uri_query).await,
            None => error(StatusCode::NOT_FOUND, "wallets are served by gateway nodes"),
        },
        (&Method::GET, ["wallets", user]) if is_valid_user_id(user) => match &admin.core {
            Some(core) => money::wallet(&core.money, user).await,
            None => error(StatusCode::NOT_FOUND, "wallets are served by gateway nodes"),
        },
        (_, ["robots", rest @ ..]) => robots::serve(admin, &method, rest, &body).await,
        (_, ["reports", rest @ ..]) => reports::serve(admin, &method, rest, uri_query, &body).await,
        (_, ["users", rest @ ..]) => users::serve(admin, &method, rest, uri_query, &body).await,
        (&Method::GET, ["suspensions"]) => match &admin.core {
            Some(core) => users::suspensions(core).await,
            None => error(StatusCode::NOT_FOUND, "users are served by gateway nodes"),
        },
        (&Method::GET, ["ledger", "totals"]) => match &admin.core {
            Some(core) => money::totals(&core.money).await,
            None => error(
                StatusCode::NOT_FOUND,
                "the ledger is served by gateway nodes",
            ),
        },
        _ => error(StatusCode::NOT_FOUND, "no such admin call"),
    }
}

/// Reads a request body of at most `limit` bytes within [`ADMIN_BODY_TIMEOUT`]; the answer
/// is `413` or `408` otherwise.
async fn read_body(body: Incoming, limit: usize) -> Result<Bytes, Resp> {
    let body = Limited::new(body, limit).collect();
    match tokio::time::timeout(ADMIN_BODY_TIMEOUT, body).await {
        Ok(Ok(b)) => Ok(b.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(error(StatusCode::PAYLOAD_TOO_LARGE, "body too large"))
        }
        // A body that breaks off or does not parse (bad chunked framing).
        Ok(Err(e)) => Err(error(StatusCode::BAD_REQUEST, &format!("body: {e}"))),
        Err(_) => Err(error(StatusCode::REQUEST_TIMEOUT, "body too slow")),
    }
}

fn verb_of(method: &Method, parts: &[&str]) -> &'static str {
    match (method, parts) {
        (&Method::GET, ["rooms"]) => "rooms_list",
        (&Method::POST, ["rooms", _, "pin"]) => "room_pin",
        (&Method::DELETE, ["rooms", _, "pin"]) => "room_unpin",
        (&Method::GET, ["directory", "pins"]) => "directory_pins",
        (&Method::GET, ["rooms", _]) => "room_get",
        (&Method::POST, ["rooms", _, "move"]) => "room_move",
        (&Method::POST, ["rooms", _, "messages"]) => "room_message",
        (&Method::PUT, ["rooms", _, "attrs"]) => "room_attrs",
        (&Method::POST, ["rooms", _, "moderation"]) => "room_moderate",
        (&Method::POST, ["rooms", _, "close"]) => "room_close",
        (&Method::POST, ["rooms", _, "open"]) => "room_open",
        (&Method::PATCH, ["rooms", _]) => "room_update",
        (&Method::POST, ["pk"]) => "pk_match",
        (&Method::POST, ["rooms", _, "pk"]) => "room_pk_start",
        (&Method::DELETE, ["rooms", _, "pk"]) => "room_pk_stop",
        (&Method::GET, ["rooms", _, "moderation"]) => "room_moderation",
        (&Method::GET, ["ring"]) => "ring_get",
        (&Method::GET, ["nodes"]) => "nodes_get",
        (&Method::POST, ["nodes"]) => "node_join",
        (&Method::PUT, ["nodes", _, "weight"]) => "node_weight",
        (&Method::POST, ["nodes", _, "drain"]) => "node_drain",
        (&Method::DELETE, ["nodes", _]) => "node_remove",
        (&Method::GET, ["rebalance"]) => "rebalance_get",
        (&Method::GET, ["local"]) => "local_get",
        (&Method::GET, ["local", "rooms"]) => "local_rooms_get",
        (&Method::GET, ["leases"]) => "leases_get",
        (&Method::GET, ["metrics"]) => "metrics_get",
        (&Method::POST, ["wallets", _, "grant"]) => "wallet_grant",
        (&Method::GET, ["wallets", _]) => "wallet_get",
        (&Method::GET, ["wallets", _, "history"]) => "wallet_history",
        (&Method::PUT, ["sellers", _]) => "seller_set",
        (&Method::POST, ["settlements"]) => "settlement",
        (&Method::DELETE, ["sellers", _]) => "seller_unset",
        (&Method::GET, ["sellers", _]) => "seller_get",
        (&Method::GET, ["ledger", "totals"]) => "ledger_totals",
        (_, ["robots", rest @ ..]) => robots::verb_of(method, rest),
        (_, ["reports", rest @ ..]) => reports::verb_of(method, rest),
        (_, ["users", rest @ ..]) => users::verb_of(method, rest),
        (&Method::GET, ["suspensions"]) => "suspensions_list",
        _ => "other",
    }
}

/// `GET /admin/rooms/{id}`: the live lease holder and fence, answered by any node; a shard
/// also says whether it runs the room itself.
async fn room(admin: &Admin, room: RoomId, local_only: bool) -> Resp {
    let here = admin.shard.as_ref().and_then(|s| s.fence_of(&room));
    match admin.leases.holder(&room).await {
        Ok(Some((owner, fence))) => {
            let details = if local_only {
                match &admin.shard {
                    Some(s) => s.inspect(&room).await,
                    None => None,
                }
            } else {
                cluster_ops::room_details(admin, &room, node_of(&owner)).await
            };
            let members = details
                .as_ref()
                .and_then(|d| d.get("member_count").cloned());
            let seats = details
                .as_ref()
                .and_then(|d| d.get("snapshot"))
                .and_then(|s| s.get("seats"))
                .cloned();
            json_resp(
                StatusCode::OK,
                &json!({
                    "room": room,
                    "owner": node_of(&owner),
                    "owner_id": owner,
                    "fence": fence,
                    "answered_by": admin.node,
                    "running_here": here.is_some(),
                    "local_fence": here,
                    "members": members,
                    "seats": seats,
                    "details": details,
                }),
            )
        }
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

#[cfg(test)]
mod query_tests {
    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(super::bearer_token("Bearer t1"), Some("t1"));
        assert_eq!(super::bearer_token("bearer t1"), Some("t1"));
        assert_eq!(super::bearer_token("BEARER t1"), Some("t1"));
        assert_eq!(super::bearer_token("Basic t1"), None);
        assert_eq!(super::bearer_token("Bearer"), None);
    }

    #[test]
    fn query_pairs_are_decoded() {
        let pairs = super::query_pairs(Some("query=late+night%20jazz&region=caf%C3%A9&x"));
        let want = [("query", "late night jazz"), ("region", "café"), ("x", "")];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        assert_eq!(pairs, want);
        assert!(super::query_pairs(None).is_empty());
        assert_eq!(
            super::query_value(Some("a=1&node=s%3A1&node=x"), "node"),
            "s:1"
        );
        assert_eq!(super::query_value(Some("local=10"), "local"), "10");
        assert_eq!(super::query_value(None, "node"), "");
    }
}
