//! The operator dashboard on the admin port: its page (`/dashboard`, no token: the page asks
//! for the admin token, keeps it in memory and sends it with each call) and the one read the
//! rest of the admin API lacked, which rooms each shard runs under which fence
//! (`GET /admin/leases`, from each shard's `GET /admin/local/rooms`).

use http::StatusCode;
use serde_json::{Value, json};
use storage::membership::NodeRole;

use super::{Admin, Resp, cluster_ops::peer_get, error, json_resp, respond};
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
    let mut shards = Vec::new();
    for n in view.nodes.iter().filter(|n| n.role == NodeRole::Shard) {
        let got = peer_get(&n.admin_addr, "/admin/local/rooms", admin.token.as_deref()).await;
        shards.push(
            got.unwrap_or_else(
                || json!({ "node": n.id, "error": "no answer from its admin port" }),
            ),
        );
    }
    json_resp(StatusCode::OK, &json!({ "shards": shards }))
}
