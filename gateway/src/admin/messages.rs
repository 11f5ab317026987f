//! The app backend's hand in a room: `POST /admin/rooms/{id}/messages` sends a message (a
//! `custom` event with no sender, `"system": true`, sequenced or volatile as asked),
//! `PUT /admin/rooms/{id}/attrs` sets or removes room attributes (a `room.attrs` event with
//! `by` null), `POST /admin/rooms/{id}/moderation` kicks, bans or mutes a user or lifts
//! those (a `moderation` event with `by` null), `POST /admin/rooms/{id}/close` and `…/open`
//! close a room (its owner cannot reopen it) and reopen it, `PATCH /admin/rooms/{id}`
//! changes its info (a `room.update` with `by` null), and `POST` / `DELETE
//! /admin/rooms/{id}/pk` start and stop a PK (`pk.start` with `by` null, `pk.end`), and
//! `POST /admin/pk` matches two rooms for a PK between them. All go
//! through the same command path as a member's operation and wait for the room's answer.

use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use protocol::client::room::SeatMode;
use protocol::client::{
    BackendManage, BackendModeration, CustomSend, PkLink, PkStart, RoomAttrs, RoomUpdate,
};
use protocol::link::RoomCmd;
use protocol::{ErrorCode, RoomId, UserId};
use serde::Deserialize;
use serde_json::json;

use super::{Admin, Resp, error, json_resp};
use crate::pk::SYSTEM_USER;

/// How much longer than the routing retry budget the call waits for the room.
const ANSWER_SLACK: Duration = Duration::from_secs(1);

/// The body: `custom.send`'s fields without the room (it is in the path).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    data: Option<serde_json::Value>,
    #[serde(default)]
    volatile: bool,
}

/// The attributes body: `room.attrs`'s fields without the room.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AttrsBody {
    #[serde(default)]
    set: std::collections::BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    remove: Vec<String>,
}

/// Sets and removes attributes and answers as [`send`] does (`seq` absent when nothing
/// changed).
pub(super) async fn attrs(admin: &Admin, room: RoomId, body: &Bytes) -> Resp {
    command(admin, room, body, |room, b: AttrsBody| {
        let a = RoomAttrs {
            room,
            set: b.set,
            remove: b.remove,
        };
        a.check().map(|()| RoomCmd::Attrs(a))
    })
    .await
}

/// Kicks, bans or mutes a user, or lifts a ban or a mute, and answers as [`send`] does (`seq`
/// of the `moderation` event, absent when there was nothing to lift); `403` on the room's
/// owner, `404` for a kick of a user not in the room.
pub(super) async fn moderate(admin: &Admin, room: RoomId, body: &Bytes) -> Resp {
    command(admin, room, body, |_, m: BackendModeration| {
        Ok(RoomCmd::Moderate(m))
    })
    .await
}

/// The close body: why, as joiners are told (the body may be empty).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CloseBody {
    #[serde(default)]
    reason: String,
}

/// An empty body (`POST /admin/rooms/{id}/open`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoFields {}

/// The update body: `room.update`'s fields without the room.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateBody {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    notice: Option<String>,
    #[serde(default)]
    cover: Option<String>,
    #[serde(default)]
    seat_mode: Option<SeatMode>,
    #[serde(default)]
    host_seat: Option<bool>,
    #[serde(default)]
    chat_muted: Option<bool>,
    #[serde(default)]
    slow_mode: Option<u32>,
}

/// Closes the room: members taken out, joins refused `ROOM_CLOSED` with the reason, and the
/// owner's `room.open` refused until [`open`]. Answers as [`send`] does.
pub(super) async fn close(admin: &Admin, room: RoomId, body: &Bytes) -> Resp {
    command(admin, room, &or_empty(body), |_, b: CloseBody| {
        let m = BackendManage::Close { reason: b.reason };
        m.check().map(|()| RoomCmd::Manage(m))
    })
    .await
}

/// Reopens the room, whoever closed it; an open room is left as is.
pub(super) async fn open(admin: &Admin, room: RoomId, body: &Bytes) -> Resp {
    command(admin, room, &or_empty(body), |_, NoFields {}| {
        Ok(RoomCmd::Manage(BackendManage::Open))
    })
    .await
}

/// Changes the room's info as `room.update` does, past the staff's rights; answers as
/// [`send`] does (`seq` absent when nothing changed).
pub(super) async fn update(admin: &Admin, room: RoomId, body: &Bytes) -> Resp {
    command(admin, room, body, |room, b: UpdateBody| {
        Ok(RoomCmd::Manage(BackendManage::Update(RoomUpdate {
            room,
            title: b.title,
            notice: b.notice,
            cover: b.cover,
            seat_mode: b.seat_mode,
            host_seat: b.host_seat,
            chat_muted: b.chat_muted,
            slow_mode: b.slow_mode,
        })))
    })
    .await
}

/// The PK body: `pk.start`'s fields without the room.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PkBody {
    #[serde(default)]
    seconds: Option<u32>,
    #[serde(default)]
    red: Option<Vec<u32>>,
    #[serde(default)]
    blue: Option<Vec<u32>>,
}

/// Starts a PK as `pk.start` does; answers `{"room","seq","pk","ends_at"}`, `409` while one is
/// on.
pub(super) async fn pk_start(admin: &Admin, room: RoomId, body: &Bytes) -> Resp {
    command(admin, room, &or_empty(body), |room, b: PkBody| {
        let m = BackendManage::PkStart(PkStart {
            room,
            seconds: b.seconds,
            red: b.red,
            blue: b.blue,
        });
        m.check().map(|()| RoomCmd::Manage(m))
    })
    .await
}

/// Ends the PK that is on; `404` when none is.
pub(super) async fn pk_stop(admin: &Admin, room: RoomId, body: &Bytes) -> Resp {
    command(admin, room, &or_empty(body), |_, NoFields {}| {
        Ok(RoomCmd::Manage(BackendManage::PkStop))
    })
    .await
}

/// The match body: the two rooms, the length, and the app's own id for the match.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchBody {
    rooms: [RoomId; 2],
    #[serde(default)]
    seconds: Option<u32>,
    #[serde(default)]
    link: Option<String>,
}

/// Matches two rooms for a PK between them (`POST /admin/pk`): starts each room's side, both
/// ending at the same time. Answers `200 {"link","ends_at","rooms":[{"room","pk","seq"},…]}`;
/// when one room refuses (`409` a PK on, `404` no such room, …) the other's side, if it
/// started, is stopped again, and the answer is the refusal with the room that refused.
pub(super) async fn pk_match(admin: &Admin, body: &Bytes) -> Resp {
    let Some(core) = &admin.core else {
        return error(
            StatusCode::NOT_FOUND,
            "the backend's room calls are served by gateway nodes",
        );
    };
    let b: MatchBody = match parse(body) {
        Ok(b) => b,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    let [a, z] = b.rooms;
    if !protocol::ids::is_valid_id(a.as_str()) || !protocol::ids::is_valid_id(z.as_str()) {
        return error(StatusCode::BAD_REQUEST, "rooms: not room ids");
    }
    if a == z {
        return error(
            StatusCode::BAD_REQUEST,
            "rooms: a room cannot PK against itself",
        );
    }
    let seconds = match protocol::client::checked_pk_seconds(b.seconds) {
        Ok(s) => s,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let link = b.link.unwrap_or_else(crate::pk::new_link);
    let check = PkLink {
        link: link.clone(),
        vs: z.clone(),
        ends_at: 0,
    };
    if let Err(why) = check.check() {
        return error(StatusCode::BAD_REQUEST, why);
    }
    match crate::pk::start_match(core, &a, &z, seconds, &link).await {
        Ok(m) => {
            let view = |room: &RoomId, ok: &Bytes| {
                let v = serde_json::from_slice::<serde_json::Value>(ok).unwrap_or_default();
                json!({"room": room, "pk": v.get("pk"), "seq": v.get("seq")})
            };
            json_resp(
                StatusCode::OK,
                &json!({
                    "link": link,
                    "ends_at": m.ends_at,
                    "rooms": [view(&a, &m.a), view(&z, &m.z)],
                }),
            )
        }
        Err((room, why)) => answered(room, Err(why)),
    }
}

/// An empty body read as `{}`.
fn or_empty(body: &Bytes) -> Bytes {
    if body.iter().all(u8::is_ascii_whitespace) {
        Bytes::from_static(b"{}")
    } else {
        body.clone()
    }
}

/// Sends the message and answers `200 {"room", "seq"}` (no `seq` for a volatile one), `400`
/// for a bad body, `404` for a room that does not exist, `503` when the room could not be
/// reached (`outcome_unknown: true` when it may have taken the message: do not send it again
/// blindly).
pub(super) async fn send(admin: &Admin, room: RoomId, body: &Bytes) -> Resp {
    command(admin, room, body, |room, b: Body| {
        let msg = CustomSend {
            room,
            kind: b.kind,
            data: b.data,
            volatile: b.volatile,
        };
        msg.check().map(|()| RoomCmd::Custom(msg))
    })
    .await
}

/// Parses the body, builds the room command (`Err`: why the body is refused, a 400), sends it
/// as the app's backend and answers with the room's answer.
async fn command<B: serde::de::DeserializeOwned>(
    admin: &Admin,
    room: RoomId,
    body: &Bytes,
    build: impl FnOnce(RoomId, B) -> Result<RoomCmd, &'static str>,
) -> Resp {
    let Some(core) = &admin.core else {
        return error(
            StatusCode::NOT_FOUND,
            "the backend's room calls are served by gateway nodes",
        );
    };
    let b: B = match parse(body) {
        Ok(b) => b,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    let cmd = match build(room.clone(), b) {
        Ok(cmd) => cmd,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let wait = core.config.route_retry_budget + ANSWER_SLACK;
    let answer = core
        .command_reply(&UserId::from(SYSTEM_USER), room.clone(), cmd, wait)
        .await;
    answered(room, answer)
}

/// The body read as `B`, or why it is refused (a `400`).
fn parse<B: serde::de::DeserializeOwned>(body: &Bytes) -> Result<B, String> {
    // An object only: serde would also read a struct from an array of its fields.
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(v) if v.is_object() => serde_json::from_value(v).map_err(|e| format!("body: {e}")),
        Ok(_) => Err("body: expected a JSON object".into()),
        Err(e) => Err(format!("body: {e}")),
    }
}

/// The HTTP answer to a room's answer: `200 {"room", "seq"?}` (and a PK's `pk` and
/// `ends_at`), or the error with its code and the room.
fn answered(room: RoomId, answer: crate::shared::Answer) -> Resp {
    match answer {
        Ok(ok) => {
            let v = serde_json::from_slice::<serde_json::Value>(&ok).unwrap_or_default();
            let mut out = json!({ "room": room });
            for key in ["seq", "pk", "ends_at"] {
                if let Some(x) = v.get(key).filter(|x| !x.is_null()) {
                    out[key] = x.clone();
                }
            }
            json_resp(StatusCode::OK, &out)
        }
        Err(e) => {
            let status = match e.code {
                ErrorCode::RoomNotFound | ErrorCode::UserNotInRoom | ErrorCode::NoPk => {
                    StatusCode::NOT_FOUND
                }
                ErrorCode::PkOn => StatusCode::CONFLICT,
                ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
                ErrorCode::Forbidden => StatusCode::FORBIDDEN,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            let mut out = json!({ "error": e.msg, "code": e.code, "room": room });
            if e.outcome_unknown {
                out["outcome_unknown"] = true.into();
            }
            json_resp(status, &out)
        }
    }
}
