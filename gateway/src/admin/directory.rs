//! The room directory calls of the admin API: `GET /admin/rooms` (the directory, paged, with
//! `room.list`'s filters), `POST` / `DELETE /admin/rooms/{id}/pin` (directory pins: listed
//! first) and `GET /admin/directory/pins`. Directory pins are not the placement pins of
//! `POST /admin/rooms/{id}/move`.

use bytes::Bytes;
use http::StatusCode;
use protocol::RoomId;
use protocol::client::RoomList;
use serde::Deserialize;
use serde_json::json;
use storage::directory::{MAX_PINS, Pin, PinScope};
use tracing::info;

use super::{Admin, Resp, error, json_resp, query_pairs};

/// `GET /admin/rooms?cursor=&limit=&region=&query=`.
pub(super) async fn list(admin: &Admin, query: Option<&str>) -> Resp {
    let mut req = RoomList::default();
    for (k, v) in query_pairs(query) {
        match k.as_str() {
            "cursor" => req.cursor = Some(v),
            "limit" => match v.parse() {
                Ok(l) => req.limit = Some(l),
                Err(_) => return error(StatusCode::BAD_REQUEST, "limit: 1..=100"),
            },
            "region" => req.region = Some(v),
            "query" | "q" => req.query = Some(v),
            _ => {}
        }
    }
    match admin.directory.page(&req).await {
        Ok(page) => json_resp(StatusCode::OK, &json!(*page)),
        Err(e) if e.code == protocol::ErrorCode::BadRequest => {
            error(StatusCode::BAD_REQUEST, &e.msg)
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.msg),
    }
}

/// The body of `POST /admin/rooms/{id}/pin`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PinBody {
    scope: PinScope,
    #[serde(default)]
    region: Option<String>,
    /// Unix ms.
    #[serde(default)]
    until: Option<u64>,
}

/// `POST /admin/rooms/{id}/pin {scope, region?, until?}`: pins a stored room.
pub(super) async fn pin(admin: &Admin, room: RoomId, body: &Bytes) -> Resp {
    let b: PinBody = match serde_json::from_slice(body) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("body: {e}")),
    };
    let now = crate::outbox::unix_ms();
    let region_ok = |r: &str| {
        (1..=protocol::client::profile::MAX_REGION_BYTES).contains(&r.len())
            && r.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
    };
    match (b.scope, &b.region) {
        (PinScope::Global, Some(_)) => {
            return error(StatusCode::BAD_REQUEST, "a global pin names no region");
        }
        (PinScope::Region, None) => {
            return error(StatusCode::BAD_REQUEST, "a region pin needs a region");
        }
        (PinScope::Region, Some(r)) if !region_ok(r) => {
            return error(StatusCode::BAD_REQUEST, "region: 1..=16 of [A-Za-z0-9-]");
        }
        _ => {}
    }
    if b.until.is_some_and(|u| u <= now) {
        return error(
            StatusCode::BAD_REQUEST,
            "until: a time in the future (unix ms)",
        );
    }
    let store = admin.directory.store();
    match admin.snapshots.load(&room).await {
        Ok(Some(_)) => {}
        Ok(None) => return error(StatusCode::NOT_FOUND, "no such room"),
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
    match store.pins().await {
        Ok(p) if p.len() >= MAX_PINS && !p.contains_key(&room) => {
            return error(
                StatusCode::CONFLICT,
                "too many directory pins (at most 100)",
            );
        }
        Ok(_) => {}
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
    let pin = Pin {
        scope: b.scope,
        region: b.region,
        until: b.until,
        at: now,
    };
    match store.pin(&room, &pin).await {
        Ok(()) => {
            info!(%room, scope = ?pin.scope, region = ?pin.region, until = ?pin.until, "Room pinned in the directory.");
            json_resp(StatusCode::OK, &json!({ "room": room, "pin": pin }))
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// `DELETE /admin/rooms/{id}/pin`.
pub(super) async fn unpin(admin: &Admin, room: RoomId) -> Resp {
    match admin.directory.store().unpin(&room).await {
        Ok(true) => {
            info!(%room, "Room unpinned in the directory.");
            json_resp(StatusCode::OK, &json!({ "room": room, "unpinned": true }))
        }
        Ok(false) => error(StatusCode::NOT_FOUND, "room is not pinned"),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// `GET /admin/directory/pins`: every directory pin, expired ones included.
pub(super) async fn pins(admin: &Admin) -> Resp {
    match admin.directory.store().pins().await {
        Ok(p) => {
            let mut all: Vec<_> = p.into_iter().collect();
            all.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
            let pins: Vec<_> = all
                .into_iter()
                .map(|(room, pin)| json!({ "room": room, "pin": pin }))
                .collect();
            json_resp(StatusCode::OK, &json!({ "pins": pins }))
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}
