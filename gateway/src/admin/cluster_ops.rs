//! The operator API of the cluster: ring, nodes, weights, drains, removals, manual room
//! moves and the state of the rebalance. Changes go to the ring membership in Redis; every
//! node sees them within a second and the shards hand rooms off, throttled.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use http::StatusCode;
use protocol::ring::DEFAULT_VNODES_PER_WEIGHT;
use protocol::{NodeId, RoomId};
use serde::Deserialize;
use serde_json::{Value, json};
use storage::membership::{NodeRole, NodeSpec, STALE_AFTER};
use tracing::info;

use super::{Admin, Resp, error, json_resp};

/// How long one node-to-node admin call may take.
const PEER_CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// `GET` on another node's admin port (to aggregate room and rebalance state).
pub(super) async fn peer_get(addr: &str, path: &str, token: Option<&str>) -> Option<Value> {
    let addr: SocketAddr = addr.parse().ok()?;
    let call = kit::admin::get(addr, path, token);
    let answer = tokio::time::timeout(PEER_CALL_TIMEOUT, call)
        .await
        .ok()?
        .ok()?;
    serde_json::from_str(&answer.body).ok()
}

fn no_cluster() -> Resp {
    error(
        StatusCode::NOT_FOUND,
        "standalone mode has no ring to change",
    )
}

/// `GET /admin/local`: this node's own view (rooms running, leases, rebalance).
pub(super) fn local(admin: &Admin) -> Resp {
    let mut v = json!({ "node": admin.node });
    if let Some(s) = &admin.shard {
        v["ring_version"] = json!(s.placement_version());
        v["rooms_running"] = json!(s.rooms_running());
        v["leases_held"] = json!(s.leases_held());
        v["rebalance"] = json!(s.rebalance_status());
    }
    if let Some(c) = &admin.core {
        v["sessions"] = json!(c.hub.session_count());
        if admin.shard.is_none() {
            v["ring_version"] = json!(c.router.placement_version());
        }
    }
    json_resp(StatusCode::OK, &v)
}

/// `GET /admin/ring`.
pub(super) async fn ring(admin: &Admin) -> Resp {
    let Some(m) = &admin.membership else {
        return json_resp(
            StatusCode::OK,
            &json!({
                "version": 0,
                "vnodes_per_weight": DEFAULT_VNODES_PER_WEIGHT,
                "nodes": [{ "id": admin.node, "weight": 1, "vnodes": DEFAULT_VNODES_PER_WEIGHT }],
                "pins": {},
            }),
        );
    };
    match m.list().await {
        Ok(view) => {
            let live = view.live_shards();
            let nodes: Vec<Value> = view
                .nodes
                .iter()
                .filter(|n| n.role.owns_rooms())
                .map(|n| {
                    json!({
                        "id": n.id,
                        "weight": n.weight,
                        "vnodes": n.weight.saturating_mul(DEFAULT_VNODES_PER_WEIGHT),
                        "on_ring": live.iter().any(|(l, _)| *l == n.id),
                    })
                })
                .collect();
            json_resp(
                StatusCode::OK,
                &json!({
                    "version": view.version,
                    "vnodes_per_weight": DEFAULT_VNODES_PER_WEIGHT,
                    "nodes": nodes,
                    "pins": view.pins,
                }),
            )
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// `GET /admin/nodes`.
pub(super) async fn nodes(admin: &Admin) -> Resp {
    let Some(m) = &admin.membership else {
        return json_resp(StatusCode::OK, &json!({ "nodes": [local_json(admin)] }));
    };
    let view = match m.list().await {
        Ok(v) => v,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    };
    let stale_ms = STALE_AFTER.as_millis() as u64;
    let age = |n: &storage::membership::NodeInfo| view.now_ms.saturating_sub(n.last_heartbeat_ms);
    // Every live node at once, each within its time-out; a stale node is not asked (it would
    // only cost the time-out).
    let locals = join_all(view.nodes.iter().map(|n| async move {
        if age(n) > stale_ms {
            return None;
        }
        peer_get(&n.admin_addr, "/admin/local", admin.token.as_deref()).await
    }))
    .await;
    let mut out = Vec::new();
    for (n, local) in view.nodes.iter().zip(locals) {
        let age = age(n);
        out.push(json!({
            "id": n.id,
            "role": n.role,
            "link_addr": n.link_addr,
            "admin_addr": n.admin_addr,
            "weight": n.weight,
            "health": if age <= stale_ms { "live" } else { "stale" },
            "heartbeat_age_ms": age,
            "rooms_owned": local.as_ref().and_then(|l| l.get("rooms_running").cloned()),
            "sessions": local.as_ref().and_then(|l| l.get("sessions").cloned()),
        }));
    }
    json_resp(
        StatusCode::OK,
        &json!({ "version": view.version, "nodes": out }),
    )
}

fn local_json(admin: &Admin) -> Value {
    json!({
        "id": admin.node,
        "role": "standalone",
        "health": "live",
        "rooms_owned": admin.shard.as_ref().map(shard::Shard::rooms_running),
    })
}

#[derive(Deserialize)]
struct JoinBody {
    id: String,
    weight: u32,
    #[serde(default)]
    link_addr: Option<String>,
    #[serde(default)]
    admin_addr: Option<String>,
}

#[derive(Deserialize)]
struct WeightBody {
    weight: u32,
}

#[derive(Deserialize)]
struct MoveBody {
    to: String,
}

/// `POST /admin/nodes`: a node joins (or rejoins) the ring with a weight.
pub(super) async fn join(admin: &Admin, body: &Bytes) -> Resp {
    let Some(m) = &admin.membership else {
        return no_cluster();
    };
    let b: JoinBody = match serde_json::from_slice(body) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("body: {e}")),
    };
    // A node that joined under an id the other calls cannot name could never be drained,
    // re-weighted or removed; an address that does not parse could never be reached.
    if !protocol::ids::is_valid_id(&b.id) {
        return error(
            StatusCode::BAD_REQUEST,
            "node ids are 1..=64 of [A-Za-z0-9-_.:]",
        );
    }
    for addr in [&b.link_addr, &b.admin_addr].into_iter().flatten() {
        if addr.parse::<SocketAddr>().is_err() {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("{addr:?} is not an address (host:port)"),
            );
        }
    }
    let id = NodeId::from(b.id.as_str());
    let existing = match m.list().await {
        Ok(view) => view.get(&id).cloned(),
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    };
    if let Some(n) = &existing
        && !n.role.owns_rooms()
    {
        return not_a_shard(&id);
    }
    let result = match (existing, b.link_addr) {
        (Some(_), _) => m.set_weight(&id, b.weight).await,
        (None, Some(link_addr)) => {
            let spec = NodeSpec {
                id: id.clone(),
                role: NodeRole::Shard,
                link_addr,
                admin_addr: b.admin_addr.unwrap_or_default(),
            };
            m.join(&spec, b.weight).await
        }
        (None, None) => {
            return error(
                StatusCode::BAD_REQUEST,
                "unknown node: give link_addr (a shard joins by itself when it starts)",
            );
        }
    };
    changed(result, "join", &id, json!({ "weight": b.weight }))
}

/// `PUT /admin/nodes/{id}/weight`.
pub(super) async fn weight(admin: &Admin, id: &str, body: &Bytes) -> Resp {
    let Some(m) = &admin.membership else {
        return no_cluster();
    };
    let b: WeightBody = match serde_json::from_slice(body) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("body: {e}")),
    };
    let id = NodeId::from(id);
    if let Some(refused) = refuse_non_shard(m, &id).await {
        return refused;
    }
    changed(
        m.set_weight(&id, b.weight).await,
        "weight",
        &id,
        json!({ "weight": b.weight }),
    )
}

/// The refusal of a weight for a member that owns no rooms (a gateway): its weight places
/// nothing, so a change would be reported while nothing moved.
fn not_a_shard(id: &NodeId) -> Resp {
    error(
        StatusCode::BAD_REQUEST,
        &format!("{id} is a gateway: only shards own rooms and have a weight"),
    )
}

/// [`not_a_shard`] when `id` is a member that owns no rooms; `None` for a shard or a node
/// that is not a member (the weight call answers that one).
async fn refuse_non_shard(m: &storage::membership::Membership, id: &NodeId) -> Option<Resp> {
    match m.list().await {
        Ok(view) => view
            .get(id)
            .filter(|n| !n.role.owns_rooms())
            .map(|_| not_a_shard(id)),
        Err(e) => Some(error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())),
    }
}

/// `POST /admin/nodes/{id}/drain`: weight 0; its rooms are handed off, it stays a member.
pub(super) async fn drain(admin: &Admin, id: &str) -> Resp {
    let Some(m) = &admin.membership else {
        return no_cluster();
    };
    let id = NodeId::from(id);
    if let Some(refused) = refuse_non_shard(m, &id).await {
        return refused;
    }
    changed(
        m.set_weight(&id, 0).await,
        "drain",
        &id,
        json!({ "weight": 0 }),
    )
}

/// `DELETE /admin/nodes/{id}`.
pub(super) async fn remove(admin: &Admin, id: &str) -> Resp {
    let Some(m) = &admin.membership else {
        return no_cluster();
    };
    let id = NodeId::from(id);
    changed(m.remove(&id).await, "remove", &id, json!({}))
}

/// `POST /admin/rooms/{id}/move` with `{"to": "<shard>"}`: pins the room to a shard.
pub(super) async fn move_room(admin: &Admin, room: &str, body: &Bytes) -> Resp {
    let Some(m) = &admin.membership else {
        return no_cluster();
    };
    let b: MoveBody = match serde_json::from_slice(body) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("body: {e}")),
    };
    let to = NodeId::from(b.to.as_str());
    match m.list().await {
        Ok(view) if view.live_shards().iter().any(|(n, _)| *n == to) => {}
        Ok(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "`to` is not a live shard on the ring",
            );
        }
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
    let r = RoomId::from(room);
    changed(
        m.pin(r.as_str(), Some(&to)).await,
        "move",
        &to,
        json!({ "room": r, "to": to }),
    )
}

/// `GET /admin/rebalance`: moves planned, in flight, done and failed, over every shard.
pub(super) async fn rebalance(admin: &Admin) -> Resp {
    let mut per_node = Vec::new();
    let (mut planned, mut in_flight, mut done, mut failed) = (0u64, 0u64, 0u64, 0u64);
    let mut add = |node: &Value, v: &Value| {
        let r = &v["rebalance"];
        planned += r["planned"].as_array().map_or(0, |a| a.len() as u64);
        in_flight += r["in_flight"].as_array().map_or(0, |a| a.len() as u64);
        done += r["done"].as_u64().unwrap_or(0);
        failed += r["failed"].as_u64().unwrap_or(0);
        per_node.push(json!({ "node": node, "rebalance": r }));
    };
    match &admin.membership {
        None => {
            if let Some(s) = &admin.shard {
                add(
                    &json!(admin.node),
                    &json!({ "rebalance": s.rebalance_status() }),
                );
            }
        }
        Some(m) => {
            let view = match m.list().await {
                Ok(v) => v,
                Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
            };
            let shards: Vec<_> = view
                .nodes
                .iter()
                .filter(|n| n.role == NodeRole::Shard)
                .collect();
            let answers = join_all(
                shards
                    .iter()
                    .map(|n| peer_get(&n.admin_addr, "/admin/local", admin.token.as_deref())),
            )
            .await;
            for (n, v) in shards.iter().zip(answers) {
                if let Some(v) = v {
                    add(&json!(n.id), &v);
                }
            }
        }
    }
    json_resp(
        StatusCode::OK,
        &json!({
            "planned": planned,
            "in_flight": in_flight,
            "done": done,
            "failed": failed,
            "nodes": per_node,
        }),
    )
}

/// A room's details from the shard that runs it (members, seats), for `GET /admin/rooms/{id}`.
pub(super) async fn room_details(admin: &Admin, room: &RoomId, owner: &str) -> Option<Value> {
    if let Some(s) = &admin.shard
        && let Some(v) = s.inspect(room).await
    {
        return Some(v);
    }
    let m = admin.membership.as_ref()?;
    let view = m.list().await.ok()?;
    let node = view.get(&NodeId::from(owner))?;
    let v = peer_get(
        &node.admin_addr,
        &format!("/admin/rooms/{room}?local=1"),
        admin.token.as_deref(),
    )
    .await?;
    v.get("details").cloned()
}

/// `GET /admin/rooms/{id}/moderation`: the room's bans, chat mutes and audit list from its
/// durable state, read by this node when it runs a shard, else by a live shard node.
pub(super) async fn moderation(admin: &Admin, room: &RoomId) -> Resp {
    if let Some(s) = &admin.shard {
        return match s.moderation(room).await {
            Ok(Some(v)) => json_resp(StatusCode::OK, &v),
            Ok(None) => error(StatusCode::NOT_FOUND, "no such room"),
            Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        };
    }
    let Some(m) = &admin.membership else {
        return error(StatusCode::NOT_FOUND, "no shard to ask");
    };
    let Ok(view) = m.list().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "membership unreadable");
    };
    let path = format!("/admin/rooms/{room}/moderation");
    let path = path.as_str();
    // Every shard at once; the first in membership order that answers wins.
    let answers = join_all(
        view.nodes
            .iter()
            .filter(|n| n.role == storage::membership::NodeRole::Shard)
            .filter_map(|n| n.admin_addr.parse::<SocketAddr>().ok())
            .map(|addr| async move {
                let call = kit::admin::get(addr, path, admin.token.as_deref());
                match tokio::time::timeout(PEER_CALL_TIMEOUT, call).await {
                    Ok(Ok(a)) if a.status == 200 || a.status == 404 => Some(a),
                    _ => None,
                }
            }),
    )
    .await;
    match answers.into_iter().flatten().next() {
        Some(answer) => {
            let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
            json_resp(status, &answer.json())
        }
        None => error(StatusCode::SERVICE_UNAVAILABLE, "no shard answered"),
    }
}

fn changed(result: storage::Result<u64>, verb: &str, node: &NodeId, detail: Value) -> Resp {
    match result {
        Ok(version) => {
            info!(verb, %node, %detail, version, "Ring changed by an operator.");
            metrics::counter!("chorus_admin_ring_changes_total", "verb" => verb.to_owned())
                .increment(1);
            json_resp(
                StatusCode::OK,
                &json!({ "version": version, "node": node, "detail": detail }),
            )
        }
        Err(storage::StorageError::Conflict(m)) => error(StatusCode::NOT_FOUND, &m),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}
