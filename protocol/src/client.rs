//! Client frames: request envelopes in, replies and events out; one JSON object per text frame.
//!
//! Decoding checks the envelope first (`id`, `op`, `d`), then parses `d` for that op. Encoding
//! writes replies and events straight into bytes, so an event is serialized once and the same
//! bytes go to every member.

pub mod attrs;
pub mod chat;
pub mod custom;
pub mod directory;
pub mod gift;
pub mod guard;
pub mod im;
pub mod like;
pub mod manage;
pub mod members;
pub mod moderation;
mod op;
pub mod pk;
pub mod profile;
pub mod report;
pub mod rocket;
pub mod room;
pub mod seat;
pub mod session;
pub mod user;
pub mod wallet;

use std::borrow::Cow;
use std::io::Write;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::ErrorCode;
use crate::ids::{Epoch, RoomId, Seq};

pub use attrs::{AttrsEvent, MAX_ATTR_VALUE_BYTES, MAX_ATTRS_BYTES, MAX_ROOM_ATTRS, RoomAttrs};
pub use chat::{
    ChatEvent, ChatPin, ChatPinned, ChatRecall, ChatRecalled, ChatReply, ChatSend, ChatSent,
    MAX_CHAT_TEXT_CHARS, MAX_MENTIONS, PinnedLine, RECALL_WINDOW_MS, RECALLABLE_LINES,
};
pub use custom::{
    CustomEvent, CustomSend, CustomSent, MAX_CUSTOM_DATA_BYTES, MAX_CUSTOM_TYPE_BYTES,
};
pub use directory::{RoomEntry, RoomList, RoomListPage};
pub use gift::{
    Combo, GiftEvent, GiftInfo, GiftList, GiftSend, GiftSent, GiftTargets, LuckyWinEvent,
    MAX_REQ_ID_BYTES, RankEntry, RankGet, is_valid_req_id,
};
pub use guard::{
    GuardBought, GuardBuy, GuardEntry, GuardList, GuardOp, GuardPage, GuardPlanInfo, GuardPlans,
};
pub use im::{
    BlockList, ImAck, ImBlocks, ImHistory, ImMessage, ImPage, ImSend, ImSent, ImUser, MAX_BLOCKS,
    MAX_IM_ACK_IDS, MAX_IM_TEXT_CHARS,
};
pub use like::{LikeSend, LikeSent, LikesEvent, MAX_LIKES_PER_SEND, MAX_RECENT_LIKERS};
pub use manage::{
    BackendManage, RoleChange, RoomAdmin, RoomInfo, RoomLock, RoomTransfer, RoomUpdate,
};
pub use members::{MemberEntry, MemberList, MemberPage, MemberUpdate};
pub use moderation::{
    BackendAction, BackendModeration, BanList, BanPage, BanView, ChatMute, Moderation, RoomBan,
    RoomKick, UserInRoom,
};
pub use op::{Addressed, ImOp, Op, RoomOp};
pub use pk::{
    DEFAULT_PK_SECONDS, MAX_PK_LINK_BYTES, MAX_PK_SECONDS, MIN_PK_SECONDS, PK_INVITE_TTL_MS, PkCmd,
    PkDeclined, PkEnd, PkInvite, PkInviteSent, PkInvited, PkLink, PkReply, PkScore, PkStart,
    PkStartEvent, PkStarted, PkVs, checked_pk_seconds,
};
pub use profile::Profile;
pub use report::{
    MAX_REPORT_TEXT_CHARS, MAX_REPORTS_PER_WINDOW, REPORT_WINDOW_MS, ReportFiled, ReportSend,
};
pub use rocket::{RocketLaunch, RocketProgress, RocketReward};
pub use room::{
    InRoom, JoinOk, MemberCount, MemberJoin, MemberLeave, RoomCreate, RoomCreated, RoomJoin,
    RoomLeave, RoomLeft, SeatMode, SeatView, Since, Snapshot,
};
pub use seat::{
    Answered, InviteView, MicPublishing, Pending, RequestList, RequestView, SeatAnswer, SeatCount,
    SeatInvite, SeatKick, SeatLeave, SeatLock, SeatLockAll, SeatMove, SeatMute, SeatRequest,
    SeatTake, SeatTaken, SeatUpdate,
};
pub use session::{Hello, Pong};
pub use user::{
    AuthRefresh, Expiry, FollowCounts, FollowCountsGet, FollowDir, FollowEntry, FollowList,
    FollowPage, FollowRoomsGet, FollowUser, FollowedRoom, FollowedRooms, ProfileOk, Profiles,
    UserGet, UserOp,
};
pub use wallet::{
    Balance, CheckedIn, MovementEntry, Transferred, WalletBalance, WalletCheckin, WalletHistory,
    WalletHistoryPage, WalletOp, WalletTransfer,
};

/// For `skip_serializing_if`: flags such as `robot` appear only when set.
pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// A decoded request: the client's id and the typed operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Chosen by the client, echoed in the reply.
    pub id: u64,
    /// What the client asks for.
    pub op: Op,
}

/// Why a frame could not be decoded; answered with an error reply, the connection stays open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {msg}")]
pub struct DecodeError {
    /// The request id, when one could be read.
    pub id: Option<u64>,
    /// `BAD_FRAME` or `UNKNOWN_OP`.
    pub code: ErrorCode,
    /// A short human-readable reason.
    pub msg: String,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    id: u64,
    #[serde(borrow)]
    op: Cow<'a, str>,
    #[serde(borrow, default)]
    d: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct IdOnly {
    id: u64,
}

/// Whether JSON `text` is an object. serde would also read a struct from an array of its
/// fields in order; a frame and its `d` must be objects.
fn is_object(text: &str) -> bool {
    text.trim_start().starts_with('{')
}

fn args<T: DeserializeOwned>(id: u64, op: &str, d: Option<&RawValue>) -> Result<T, DecodeError> {
    let text = d.map_or("{}", RawValue::get);
    serde_json::from_str(text).map_err(|e| DecodeError {
        id: Some(id),
        code: ErrorCode::BadFrame,
        msg: format!("bad `d` for {op}: {e}"),
    })
}

/// Decodes one text frame into a request.
///
/// # Errors
/// `BAD_FRAME` when the frame is not JSON, not a request envelope, or `d` does not have the
/// op's shape; `UNKNOWN_OP` for an op this server does not know. `id` is set whenever the frame
/// carried a readable one.
pub fn decode_request(text: &str) -> Result<Request, DecodeError> {
    if !is_object(text) {
        return Err(DecodeError {
            id: None,
            code: ErrorCode::BadFrame,
            msg: "not a request frame: not a JSON object".into(),
        });
    }
    let env: Envelope<'_> = serde_json::from_str(text).map_err(|e| DecodeError {
        id: serde_json::from_str::<IdOnly>(text).ok().map(|i| i.id),
        code: ErrorCode::BadFrame,
        msg: format!("not a request frame: {e}"),
    })?;
    let (id, d) = (env.id, env.d);
    if d.is_some_and(|d| !is_object(d.get())) {
        return Err(DecodeError {
            id: Some(id),
            code: ErrorCode::BadFrame,
            msg: "bad `d`: not an object".into(),
        });
    }
    let op = match Op::decode(&env.op, id, d) {
        Some(op) => op?,
        None => {
            return Err(DecodeError {
                id: Some(id),
                code: ErrorCode::UnknownOp,
                msg: format!("unknown op {:?}", truncate(&env.op, 40)),
            });
        }
    };
    Ok(Request { id, op })
}

fn truncate(s: &str, max_chars: usize) -> &str {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Encodes a success reply `{"re":id,"ok":<ok>}` from the already-encoded `ok` JSON.
pub fn encode_ok_raw(id: u64, ok_json: &[u8]) -> Bytes {
    Bytes::from(with_scratch(|out| {
        // Writing to a Vec cannot fail.
        let _ = write!(out, "{{\"re\":{id},\"ok\":");
        out.extend_from_slice(ok_json);
        out.push(b'}');
    }))
}

/// Encodes a success reply `{"re":id,"ok":...}`.
pub fn encode_ok<T: Serialize>(id: u64, ok: &T) -> Bytes {
    Bytes::from(with_scratch(|out| {
        let _ = write!(out, "{{\"re\":{id},\"ok\":");
        json_into(out, ok);
        out.push(b'}');
    }))
}

/// Encodes an error reply `{"re":id|null,"err":{"code":...,"msg":...}}`.
pub fn encode_err(id: Option<u64>, code: ErrorCode, msg: &str) -> Bytes {
    #[derive(Serialize)]
    struct Err<'a> {
        code: ErrorCode,
        msg: &'a str,
    }
    #[derive(Serialize)]
    struct Frame<'a> {
        re: Option<u64>,
        err: Err<'a>,
    }
    Bytes::from(to_json(&Frame {
        re: id,
        err: Err { code, msg },
    }))
}

/// Encodes an event. Sequenced room events pass `Some((epoch, seq))`; volatile ones `None`.
pub fn encode_event<T: Serialize>(
    ev: &str,
    room: Option<&RoomId>,
    position: Option<(Epoch, Seq)>,
    d: &T,
) -> Bytes {
    #[derive(Serialize)]
    struct Frame<'a, T> {
        ev: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        room: Option<&'a RoomId>,
        #[serde(skip_serializing_if = "Option::is_none")]
        epoch: Option<Epoch>,
        #[serde(skip_serializing_if = "Option::is_none")]
        seq: Option<Seq>,
        d: &'a T,
    }
    Bytes::from(to_json(&Frame {
        ev,
        room,
        epoch: position.map(|p| p.0),
        seq: position.map(|p| p.1),
        d,
    }))
}

/// Serializes a value the protocol defines; these types cannot fail to serialize.
pub fn to_json<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    with_scratch(|out| json_into(out, v))
}

/// Appends `v`'s JSON to `out`.
fn json_into<T: Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    let start = out.len();
    // Protocol types are plain structs with string keys: serde_json cannot fail on them.
    if serde_json::to_writer(&mut *out, v).is_err() {
        out.truncate(start);
        out.extend_from_slice(b"null");
    }
}

/// Scratch buffers above this size are not kept for the next frame.
const SCRATCH_KEEP_BYTES: usize = 16 * 1024;

thread_local! {
    /// Each thread's buffer that frames are encoded into before they get their own block.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `write` on an empty buffer and returns what it wrote in a vector of exactly that
/// size. The writing happens in a per-thread scratch buffer, so a frame costs one allocation
/// of its own size: serializing into a fresh vector would grow it a few times, and a vector
/// with spare room costs [`Bytes`] a second block for its shared header.
fn with_scratch(write: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut write = Some(write);
    let kept = SCRATCH
        .try_with(|cell| {
            // A frame encoded while another is being encoded on this thread (never done by
            // the protocol's own types) takes the plain path below.
            let mut buf = cell.try_borrow_mut().ok()?;
            buf.clear();
            (write.take()?)(&mut buf);
            let out = buf.as_slice().to_vec();
            if buf.capacity() > SCRATCH_KEEP_BYTES {
                *buf = Vec::new();
            }
            Some(out)
        })
        .ok()
        .flatten();
    match (kept, write) {
        (Some(out), _) => out,
        (None, Some(write)) => {
            let mut out = Vec::new();
            write(&mut out);
            out
        }
        (None, None) => Vec::new(),
    }
}

/// A server frame as a client sees it (used by clients and tests).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ServerFrame {
    /// An event.
    Event {
        /// The event name.
        ev: String,
        /// The room, for room events.
        #[serde(default)]
        room: Option<RoomId>,
        /// The epoch, for sequenced room events.
        #[serde(default)]
        epoch: Option<Epoch>,
        /// The seq, for sequenced room events.
        #[serde(default)]
        seq: Option<Seq>,
        /// The payload.
        #[serde(default)]
        d: serde_json::Value,
    },
    /// A reply to a request.
    Reply {
        /// The request id, or null for an undecodable frame.
        re: Option<u64>,
        /// Present on success.
        #[serde(default)]
        ok: Option<serde_json::Value>,
        /// Present on failure.
        #[serde(default)]
        err: Option<ErrBody>,
    },
}

/// The `err` object of a failed reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrBody {
    /// The stable code.
    pub code: ErrorCode,
    /// A human-readable message.
    pub msg: String,
}

#[cfg(test)]
mod tests;
