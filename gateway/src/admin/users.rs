//! The user calls of the admin API: read and set a user's profile, suspend an account, and
//! send a user a direct message from the app's own account.
//! Served by nodes with sessions (gateways, standalone): a profile change is stored, then
//! reaches the user's sessions on the node and the rooms they are in, like `user.update`; a
//! suspension is stored, then closes the user's sockets on every gateway
//! (`crate::suspension`).

use bytes::Bytes;
use http::{Method, StatusCode};
use protocol::UserId;
use protocol::client::Profile;
use protocol::ids::is_valid_user_id;
use serde::Deserialize;
use serde_json::json;
use shard::events::Notifier;

use super::{Admin, Resp, error, json_resp};

/// Serves `/admin/users[/…]`; `rest` is the path after `users`.
pub(super) async fn serve(
    admin: &Admin,
    method: &Method,
    rest: &[&str],
    query: Option<&str>,
    body: &Bytes,
) -> Resp {
    let Some(core) = &admin.core else {
        return error(StatusCode::NOT_FOUND, "users are served by gateway nodes");
    };
    match (method, rest) {
        (&Method::GET, [user, "profile"]) if valid_user(user) => {
            let user = UserId::from(*user);
            match core.users.profiles.get(&user).await {
                Ok(s) => json_resp(
                    StatusCode::OK,
                    &json!({
                        "user": user,
                        "profile": s.effective(),
                        "own": s.own,
                        "claims": s.claims,
                    }),
                ),
                Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
            }
        }
        (&Method::PUT, [user, "profile"]) if valid_user(user) => {
            let update: Profile = match serde_json::from_slice(body) {
                Ok(p) => p,
                Err(e) => return error(StatusCode::BAD_REQUEST, &format!("body: {e}")),
            };
            let user = UserId::from(*user);
            match core.update_profile(&user, &update).await {
                Ok(p) => json_resp(StatusCode::OK, &json!({ "user": user, "profile": p })),
                Err((protocol::ErrorCode::BadRequest, msg)) => error(StatusCode::BAD_REQUEST, &msg),
                Err((_, msg)) => error(StatusCode::SERVICE_UNAVAILABLE, &msg),
            }
        }
        (&Method::GET, [user, "suspension"]) if is_valid_user_id(user) => {
            let user = UserId::from(*user);
            match core.users.suspended.stored().await {
                Ok(all) => {
                    let s = all.iter().find(|(u, _)| *u == user).map(|(_, s)| s);
                    json_resp(StatusCode::OK, &suspension_json(&user, s))
                }
                Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
            }
        }
        (&Method::PUT, [user, "suspension"]) if is_valid_user_id(user) => {
            suspend(core, admin.events.as_ref(), UserId::from(*user), body).await
        }
        (&Method::DELETE, [user, "suspension"]) if is_valid_user_id(user) => {
            lift(core, admin.events.as_ref(), UserId::from(*user)).await
        }
        (&Method::POST, [user, "messages"]) if is_valid_user_id(user) => {
            message(core, UserId::from(*user), body).await
        }
        (&Method::GET, [user, "messages"]) if is_valid_user_id(user) => {
            messages(core, &UserId::from(*user), query).await
        }
        _ => error(StatusCode::NOT_FOUND, "no such admin call"),
    }
}

/// Longest suspension with a time: ten years.
const MAX_SUSPENSION_SECS: u64 = 10 * 365 * 24 * 3600;
/// Longest reason, in characters.
const MAX_REASON_CHARS: usize = 200;

/// `PUT /admin/users/{user}/suspension` body.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SuspendBody {
    /// How long; absent: until lifted.
    #[serde(default)]
    seconds: Option<u64>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    by: Option<String>,
}

impl SuspendBody {
    fn check(&self) -> Result<(), &'static str> {
        if self
            .seconds
            .is_some_and(|s| s == 0 || s > MAX_SUSPENSION_SECS)
        {
            return Err("seconds: 1..=315360000 (ten years), or absent for until lifted");
        }
        if self.reason.as_deref().is_some_and(|r| {
            r.chars().count() > MAX_REASON_CHARS || !protocol::text::is_clean(r, false)
        }) {
            return Err("reason: at most 200 characters, no control or bidi characters");
        }
        if self
            .by
            .as_deref()
            .is_some_and(|b| !protocol::client::custom::is_app_name(b))
        {
            return Err("by must be 1..=32 characters of A-Z a-z 0-9 _ . : -");
        }
        Ok(())
    }
}

/// `{user, suspended, reason?, until?, at?, by?}`.
pub(super) fn suspension_json(
    user: &UserId,
    s: Option<&storage::suspensions::Suspension>,
) -> serde_json::Value {
    match s {
        Some(s) => json!({
            "user": user,
            "suspended": true,
            "reason": s.reason,
            "until": s.until,
            "at": s.at,
            "by": s.by,
        }),
        None => json!({ "user": user, "suspended": false }),
    }
}

/// Stores the suspension, applies it here and tells the other gateways holding the user's
/// sockets (the rest learn it from the store within `suspension::REFRESH`); then the event
/// webhook's `user.suspended`.
async fn suspend(
    core: &std::sync::Arc<crate::shared::Core>,
    events: Option<&Notifier>,
    user: UserId,
    body: &Bytes,
) -> Resp {
    let b: SuspendBody = match serde_json::from_slice(body) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("body: {e}")),
    };
    if let Err(msg) = b.check() {
        return error(StatusCode::BAD_REQUEST, msg);
    }
    let now = crate::outbox::unix_ms();
    let s = storage::suspensions::Suspension {
        reason: b.reason,
        until: b
            .seconds
            .map(|secs| now.saturating_add(secs.saturating_mul(1000))),
        at: now,
        by: b.by,
    };
    if let Err(e) = core.users.suspended.store().put(&user, &s, now).await {
        return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string());
    }
    tracing::info!(%user, until = ?s.until, by = ?s.by, "Account suspended.");
    core.apply_suspension(&user, Some(s.clone()));
    notify_gateways(core, &user, &s).await;
    let answer = suspension_json(&user, Some(&s));
    if let Some(n) = events {
        n.emit_account("user.suspended", answer.clone());
    }
    json_resp(StatusCode::OK, &answer)
}

async fn lift(
    core: &std::sync::Arc<crate::shared::Core>,
    events: Option<&Notifier>,
    user: UserId,
) -> Resp {
    match core.users.suspended.store().lift(&user).await {
        Ok(true) => {
            tracing::info!(%user, "Account suspension lifted.");
            core.apply_suspension(&user, None);
            if let Some(n) = events {
                n.emit_account("user.reinstated", json!({ "user": user }));
            }
            json_resp(StatusCode::OK, &suspension_json(&user, None))
        }
        Ok(false) => error(StatusCode::NOT_FOUND, "not suspended"),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// `POST /admin/users/{user}/messages` body: `im.send`'s fields but `to`, and the sender.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageBody {
    from: UserId,
    text: String,
    req_id: String,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    data: Option<serde_json::Value>,
}

/// The app's backend sends `to` a direct message as its `from` account
/// (`crate::social::im::send_system`).
async fn message(core: &std::sync::Arc<crate::shared::Core>, to: UserId, body: &Bytes) -> Resp {
    use crate::social::im::{SystemRefusal, send_system};
    let b: MessageBody = match serde_json::from_slice(body) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("body: {e}")),
    };
    if !is_valid_user_id(b.from.as_str()) {
        return error(StatusCode::BAD_REQUEST, "from: not a user id");
    }
    let send = protocol::client::ImSend {
        to,
        text: b.text,
        req_id: b.req_id,
        kind: b.kind,
        data: b.data,
    };
    match send_system(core, &b.from, &send).await {
        Ok(sent) => json_resp(StatusCode::OK, &json!(sent)),
        Err(SystemRefusal::Refused(code, why)) => {
            let status = match code {
                protocol::ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
                _ => StatusCode::CONFLICT,
            };
            json_resp(status, &json!({ "error": why, "code": code }))
        }
        Err(SystemRefusal::Unavailable) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "messages unavailable; retry with the same req_id",
        ),
    }
}

/// `GET /admin/users/{user}/messages?with=&before=&limit=`: one page of the user's kept
/// direct messages, as `im.history` answers the user (a moderator reading a reported
/// conversation).
async fn messages(core: &crate::shared::Core, user: &UserId, query: Option<&str>) -> Resp {
    let (mut with, mut before, mut limit) = (None, None, None);
    for (k, v) in super::query_pairs(query) {
        match k.as_str() {
            "with" => with = Some(UserId::from(v.as_str())),
            "before" => match v.parse() {
                Ok(b) => before = Some(b),
                Err(_) => return error(StatusCode::BAD_REQUEST, "before: a message id"),
            },
            "limit" => match v.parse() {
                Ok(l) => limit = Some(l),
                Err(_) => return error(StatusCode::BAD_REQUEST, "limit must be 1..=100"),
            },
            _ => {}
        }
    }
    match crate::social::im::history_page(core, user, with.as_ref(), before, limit).await {
        Ok(body) => super::respond(StatusCode::OK, body, "application/json"),
        Err((protocol::ErrorCode::BadRequest, why)) => error(StatusCode::BAD_REQUEST, why),
        Err((_, why)) => error(StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

/// Sends the suspension to the other gateways that hold `user`'s sockets.
async fn notify_gateways(
    core: &std::sync::Arc<crate::shared::Core>,
    user: &UserId,
    s: &storage::suspensions::Suspension,
) {
    let gateways = match core.gateways_of(user).await {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!(%user, error = %e, "Could not read where the user is connected; the gateways learn the suspension from the store.");
            return;
        }
    };
    let notice = crate::social::Notice::Suspended {
        user: user.clone(),
        suspension: s.clone(),
    };
    for gw in gateways.iter().filter(|g| **g != core.node) {
        core.notify(gw, &notice).await;
    }
}

/// `GET /admin/suspensions`: every suspension that holds now, newest first, from the store.
pub(super) async fn suspensions(core: &crate::shared::Core) -> Resp {
    match core.users.suspended.stored().await {
        Ok(all) => {
            let all: Vec<_> = all
                .iter()
                .map(|(u, s)| suspension_json(u, Some(s)))
                .collect();
            json_resp(StatusCode::OK, &json!({ "suspensions": all }))
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// A user id usable in a path, not a robot's (robots have no stored profile).
fn valid_user(s: &str) -> bool {
    is_valid_user_id(s) && !UserId::from(s).is_robot()
}

/// The `chorus_admin_calls_total` verb of a users call (`rest` as in [`serve`]).
pub(super) fn verb_of(method: &Method, rest: &[&str]) -> &'static str {
    match (method, rest) {
        (&Method::GET, [_, "profile"]) => "user_profile_get",
        (&Method::PUT, [_, "profile"]) => "user_profile_set",
        (&Method::GET, [_, "suspension"]) => "user_suspension_get",
        (&Method::PUT, [_, "suspension"]) => "user_suspend",
        (&Method::DELETE, [_, "suspension"]) => "user_unsuspend",
        (&Method::POST, [_, "messages"]) => "user_message",
        (&Method::GET, [_, "messages"]) => "user_messages",
        _ => "other",
    }
}
