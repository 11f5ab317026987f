//! The operator dashboard on the admin port: its page (`/dashboard`, no token: the page asks
//! for the admin token, keeps it in memory and sends it with each call) and the one read the
//! rest of the admin API lacked: which rooms each shard runs under which fence
//! (`GET /admin/leases`, from each shard's `GET /admin/local/rooms`), and another node's
//! `/metrics` through this one (`GET /admin/metrics?node=<id>`), since the page may call only
//! the port that served it.

use http::StatusCode;
use serde_json::{Value, json};
use storage::membership::NodeRole;

use super::{Admin, Resp, cluster_ops::peer_get, error, json_resp, render_metrics, respond};
use crate::web;

/// Most rooms one shard lists (the dashboard shows a sample of a busy shard, with its count).
const MAX_ROOMS_LISTED: usize = 500;

/// The dashboard's files.
pub(super) fn page(path: &str) -> Option<Resp> {
    let asset = web::dashboard_asset(path)?;
    let mut r = respond(StatusCode::OK, asset.body, asset.content_type);
    for (name, value) in web::PAGE_HEADERS {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            http::HeaderValue::from_str(value),
        ) {
            r.headers_mut().insert(n, v);
        }
    }
    Some(r)
}

/// `GET /admin/local/rooms`: the rooms this node runs, each with its fence.
pub(super) fn local_rooms(admin: &Admin) -> Resp {
    json_resp(StatusCode::OK, &local_rooms_json(admin))
}

fn local_rooms_json(admin: &Admin) -> Value {
    let Some(s) = &admin.shard else {
        return json!({ "node": admin.node, "rooms": [], "running": 0 });
    };
    let rooms: Vec<Value> = s
        .rooms_with_fences(MAX_ROOMS_LISTED)
        .into_iter()
        .map(|(room, fence)| json!({ "room": room, "fence": fence }))
        .collect();
    json!({
        "node": admin.node,
        "owner_id": s.owner_id(),
        "running": s.rooms_running(),
        "rooms": rooms,
    })
}

/// `GET /admin/leases`: every shard's rooms with their fences (standalone: its own).
pub(super) async fn leases(admin: &Admin) -> Resp {
    let Some(m) = &admin.membership else {
        return json_resp(
            StatusCode::OK,
            &json!({ "shards": [local_rooms_json(admin)] }),
        );
    };
    let view = match m.list().await {
        Ok(v) => v,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    };
    let asked: Vec<_> = view
        .nodes
        .iter()
        .filter(|n| n.role == NodeRole::Shard)
        .collect();
    // Every shard at once, each within its time-out.
    let answers = futures_util::future::join_all(
        asked
            .iter()
            .map(|n| peer_get(&n.admin_addr, "/admin/local/rooms", admin.token.as_deref())),
    )
    .await;
    let shards: Vec<Value> = asked
        .iter()
        .zip(answers)
        .map(|(n, got)| {
            got.unwrap_or_else(|| json!({ "node": n.id, "error": "no answer from its admin port" }))
        })
        .collect();
    json_resp(StatusCode::OK, &json!({ "shards": shards }))
}

/// How long a peer's `/metrics` may take.
const PEER_METRICS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// `GET /admin/metrics?node=<id>`: the Prometheus text of node `id` (this node's own when `id`
/// is this node or left out), fetched from its admin port with this node's metrics token.
pub(super) async fn metrics(admin: &Admin, query: Option<&str>) -> Resp {
    let want = super::query_value(query, "node");
    let want = want.as_str();
    if want.is_empty() || want == admin.node.as_str() {
        let body = tokio::task::spawn_blocking(render_metrics)
            .await
            .unwrap_or_default();
        return respond(StatusCode::OK, body, "text/plain; version=0.0.4");
    }
    let Some(m) = &admin.membership else {
        return error(StatusCode::NOT_FOUND, "no such node");
    };
    let view = match m.list().await {
        Ok(v) => v,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    };
    let Some(addr) = view
        .nodes
        .iter()
        .find(|n| n.id.as_str() == want)
        .and_then(|n| n.admin_addr.parse::<std::net::SocketAddr>().ok())
    else {
        return error(StatusCode::NOT_FOUND, "no such node");
    };
    let call = kit::admin::get(addr, "/metrics", admin.metrics_token.as_deref());
    match tokio::time::timeout(PEER_METRICS_TIMEOUT, call).await {
        Ok(Ok(answer)) if answer.status == 200 => {
            respond(StatusCode::OK, answer.body, "text/plain; version=0.0.4")
        }
        Ok(Ok(answer)) => error(
            StatusCode::BAD_GATEWAY,
            &format!("the node answered {}", answer.status),
        ),
        Ok(Err(e)) => error(StatusCode::BAD_GATEWAY, &e.to_string()),
        Err(_) => error(
            StatusCode::GATEWAY_TIMEOUT,
            "the node did not answer in 3 s",
        ),
    }
}
