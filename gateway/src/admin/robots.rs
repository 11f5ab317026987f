//! The robot room calls of the admin API: list, create, read, replace, enable, disable and
//! delete configurations in the robot store. Writing the store is all they do: every shard's
//! reconcile reads it every couple of seconds and starts, changes or stops the robots of the
//! rooms it owns.
//!
//! A configuration is checked before it is stored: [`RobotConfig::parse`] (bounds), a room id
//! usable in a path, and what needs the node's stores:
//! - `create: false` (robots visiting a human room): the room must exist (its snapshot);
//! - `gift`: the gift must be in this node's catalog, and each robot's wallet must hold at
//!   least `gift.budget` coins. Wallets are read from the gateway's ledger, so a configuration
//!   with `gift` is refused like the wallet calls on a node without one: `404` on a shard
//!   node, `503` on a gateway started without a ledger. Configurations without `gift` are
//!   accepted by every node.
//!
//! Enabling and disabling flip `enabled` and check nothing else: a robot that already spent
//! part of its budget may be re-enabled.
//!
//! Creation writes only if the room has no robot configuration yet: of two concurrent creates
//! of one room exactly one wins and the other is answered 409. Two concurrent replaces both
//! succeed, and the last one stays.

use bytes::Bytes;
use http::{Method, StatusCode};
use protocol::RoomId;
use protocol::ids::is_valid_id;
use serde_json::{Value, json};
use shard::robots::RobotConfig;
use storage::robots::RobotStore;
use tracing::info;

use super::{Admin, Resp, error, json_resp};

fn unavailable(e: &storage::StorageError) -> Resp {
    error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
}

fn no_config() -> Resp {
    error(StatusCode::NOT_FOUND, "no robot config for this room")
}

fn bad(msg: &str) -> Resp {
    error(StatusCode::BAD_REQUEST, msg)
}

/// Serves `/admin/robots[/…]`; `rest` is the path after `robots`.
pub(super) async fn serve(admin: &Admin, method: &Method, rest: &[&str], body: &Bytes) -> Resp {
    let store = &admin.robots;
    match (method, rest) {
        (&Method::GET, []) => list(store).await,
        (&Method::POST, []) => create(admin, body).await,
        (&Method::GET, [room]) if is_valid_id(room) => get(store, &RoomId::from(*room)).await,
        (&Method::PUT, [room]) if is_valid_id(room) => {
            update(admin, &RoomId::from(*room), body).await
        }
        (&Method::DELETE, [room]) if is_valid_id(room) => delete(store, &RoomId::from(*room)).await,
        (&Method::POST, [room, "enable"]) if is_valid_id(room) => {
            set_enabled(store, &RoomId::from(*room), true).await
        }
        (&Method::POST, [room, "disable"]) if is_valid_id(room) => {
            set_enabled(store, &RoomId::from(*room), false).await
        }
        _ => error(StatusCode::NOT_FOUND, "no such admin call"),
    }
}

/// The `chorus_admin_calls_total` verb of a robots call (`rest` as in [`serve`]).
pub(super) fn verb_of(method: &Method, rest: &[&str]) -> &'static str {
    match (method, rest) {
        (&Method::GET, []) => "robots_list",
        (&Method::POST, []) => "robots_create",
        (&Method::GET, [_]) => "robots_get",
        (&Method::PUT, [_]) => "robots_update",
        (&Method::DELETE, [_]) => "robots_delete",
        (&Method::POST, [_, "enable"]) => "robots_enable",
        (&Method::POST, [_, "disable"]) => "robots_disable",
        _ => "other",
    }
}

/// A stored configuration answered as is (`500` when the stored bytes are not JSON).
fn stored_json(bytes: &[u8]) -> Resp {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => json_resp(StatusCode::OK, &v),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("stored robot config unreadable: {e}"),
        ),
    }
}

/// `GET /admin/robots`: every configuration, by room id.
async fn list(store: &RobotStore) -> Resp {
    match store.list().await {
        Ok(all) => {
            let configs: Vec<Value> = all
                .into_iter()
                .map(|(room, bytes)| {
                    serde_json::from_slice(&bytes).unwrap_or_else(
                        |e| json!({ "room": room, "error": format!("unreadable: {e}") }),
                    )
                })
                .collect();
            json_resp(StatusCode::OK, &json!({ "configs": configs }))
        }
        Err(e) => unavailable(&e),
    }
}

/// `GET /admin/robots/{room}`.
async fn get(store: &RobotStore, room: &RoomId) -> Resp {
    match store.get(room).await {
        Ok(Some(bytes)) => stored_json(&bytes),
        Ok(None) => no_config(),
        Err(e) => unavailable(&e),
    }
}

/// `POST /admin/robots`: a new configuration (`409` when the room has one).
async fn create(admin: &Admin, body: &Bytes) -> Resp {
    let config = match checked(admin, body).await {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    let v = match serde_json::to_value(&config) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    // Written only if absent: of two creates at once, exactly one wins.
    match admin
        .robots
        .put_new(&config.room, v.to_string().into_bytes())
        .await
    {
        Ok(true) => {
            info!(room = %config.room, robots = config.robots.len(), "Admin robot config created.");
            json_resp(StatusCode::CREATED, &v)
        }
        Ok(false) => error(
            StatusCode::CONFLICT,
            "this room already has a robot config (PUT /admin/robots/{room} replaces it)",
        ),
        Err(e) => unavailable(&e),
    }
}

/// `PUT /admin/robots/{room}`: replaces the room's configuration (`404` when it has none).
/// The body's `room` may be left out; when present it must be the path's.
async fn update(admin: &Admin, room: &RoomId, body: &Bytes) -> Resp {
    let was = match admin.robots.get(room).await {
        Ok(Some(was)) => was,
        Ok(None) => return no_config(),
        Err(e) => return unavailable(&e),
    };
    let mut v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return bad(&format!("bad JSON: {e}")),
    };
    let Some(obj) = v.as_object_mut() else {
        return bad("the body must be a JSON object");
    };
    match obj.get("room") {
        None => {
            obj.insert("room".into(), json!(room));
        }
        Some(r) if r.as_str() == Some(room.as_str()) => {}
        Some(r) => {
            return bad(&format!(
                "the body's room {r} is not the path's room {:?}",
                room.as_str()
            ));
        }
    }
    let config = match checked(admin, v.to_string().as_bytes()).await {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    info!(%room, robots = config.robots.len(), enabled = config.enabled, "Admin robot config replaced.");
    replace_config(&admin.robots, was, &config).await
}

/// `POST /admin/robots/{room}/enable` and `…/disable`.
async fn set_enabled(store: &RobotStore, room: &RoomId, enabled: bool) -> Resp {
    let bytes = match store.get(room).await {
        Ok(Some(b)) => b,
        Ok(None) => return no_config(),
        Err(e) => return unavailable(&e),
    };
    let mut config = match RobotConfig::parse(&bytes) {
        Ok(c) => c,
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("stored robot config unreadable: {e}"),
            );
        }
    };
    config.enabled = enabled;
    info!(%room, enabled, "Admin robot config switched.");
    replace_config(store, bytes, &config).await
}

/// Writes `config` over the stored `was` (read at the start of the call): `409` when the
/// configuration changed or was deleted meanwhile, so the caller reads it again.
async fn replace_config(store: &RobotStore, was: Vec<u8>, config: &RobotConfig) -> Resp {
    let v = match serde_json::to_value(config) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    match store
        .replace(&config.room, was, v.to_string().into_bytes())
        .await
    {
        Ok(true) => json_resp(StatusCode::OK, &v),
        Ok(false) => error(
            StatusCode::CONFLICT,
            "the robot config changed or was deleted meanwhile; read it again",
        ),
        Err(e) => unavailable(&e),
    }
}

/// `DELETE /admin/robots/{room}`.
async fn delete(store: &RobotStore, room: &RoomId) -> Resp {
    match store.delete(room).await {
        Ok(true) => {
            info!(%room, "Admin robot config deleted.");
            json_resp(StatusCode::OK, &json!({ "room": room, "deleted": true }))
        }
        Ok(false) => no_config(),
        Err(e) => unavailable(&e),
    }
}

/// Parses and checks a configuration: its bounds, then what needs this node's stores.
async fn checked(admin: &Admin, body: &[u8]) -> Result<RobotConfig, Resp> {
    let config = RobotConfig::parse(body).map_err(|e| bad(&e.0))?;
    if !is_valid_id(config.room.as_str()) {
        return Err(bad("room must be 1..=64 bytes of [A-Za-z0-9-_.:]"));
    }
    if !config.create {
        match admin.snapshots.load(&config.room).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(bad("unknown room: with create false the room must exist"));
            }
            Err(e) => return Err(unavailable(&e)),
        }
    }
    if let Some(gift) = &config.gift {
        let Some(core) = &admin.core else {
            return Err(error(
                StatusCode::NOT_FOUND,
                "wallets are served by gateway nodes: store robot configs with gifts there",
            ));
        };
        if core.money.catalog.get(&gift.gift).is_none() {
            return Err(bad(&format!(
                "gift.gift: no gift {:?} in the catalog",
                gift.gift
            )));
        }
        let Some(ledger) = &core.money.ledger else {
            return Err(error(
                StatusCode::SERVICE_UNAVAILABLE,
                "no ledger on this node",
            ));
        };
        for r in &config.robots {
            let balance = ledger.balance(&r.id).await.map_err(|e| unavailable(&e))?;
            if balance < gift.budget {
                return Err(bad(&format!(
                    "budget overdraw: {} holds {balance} coins, budget {}",
                    r.id, gift.budget
                )));
            }
        }
    }
    Ok(config)
}
