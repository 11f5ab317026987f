//! The user calls of the admin API: read and set a user's profile. Served by nodes with
//! sessions (gateways, standalone): a change is stored, then reaches the user's sessions on
//! the node and the rooms they are in, like `user.update`.

use bytes::Bytes;
use http::{Method, StatusCode};
use protocol::UserId;
use protocol::client::Profile;
use protocol::ids::is_valid_user_id;
use serde_json::json;

use super::{Admin, Resp, error, json_resp};

/// Serves `/admin/users[/…]`; `rest` is the path after `users`.
pub(super) async fn serve(admin: &Admin, method: &Method, rest: &[&str], body: &Bytes) -> Resp {
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
        _ => error(StatusCode::NOT_FOUND, "no such admin call"),
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
        _ => "other",
    }
}
