//! Gateway <-> shard messages: commands with request ids in, replies and per-gateway room
//! events out.
//!
//! Standalone mode carries these values over an in-process channel; the cluster carries the
//! same values over one multiplexed TCP connection per gateway-shard pair. Event frames travel
//! as the already-encoded client bytes, so a shard serializes an event once and each gateway
//! fans the same bytes out to its sockets.

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

mod standing;

pub use standing::{HeldGuard, Standing};

use crate::client::{Profile, RoomJoin, RoomOp};
use crate::error::ErrorCode;
use crate::ids::{NodeId, RoomId, SessionId, UserId};

/// Version of the link message set; a gateway and a shard must agree on it. Version 2
/// carries a client's room operation as decoded at the edge ([`RoomCmd::Op`]); version 3
/// adds the seat and moderation operations and the RTC provider's reports ([`RoomCmd::Rtc`]);
/// version 4 adds the sender's profile to joins ([`Command::profile`]) and profile changes
/// ([`RoomCmd::Profile`]); version 5 adds the member's standing (guards held, lifetime gift
/// spend) to joins ([`Command::standing`]) and its changes ([`RoomCmd::Standing`]); version 6
/// adds the app backend's room messages and attributes ([`RoomCmd::Custom`],
/// [`RoomCmd::Attrs`]); version 7 adds `like.send` and `chat.recall` to the room operations and the app
/// backend's moderation ([`RoomCmd::Moderate`]); version 8 adds the app backend's closing,
/// reopening and changing of a room ([`RoomCmd::Manage`]) and `report.send`; version 9 adds
/// `pk.start` and `pk.stop`; version 10 adds `chat.pin`, `chat.send`'s mentions and replies,
/// and a PK between two rooms (`BackendManage::PkLink`, `RoomCmd::Pk`).
pub const LINK_VERSION: u16 = 10;

/// A room command from one session, with the ids needed to answer it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Command {
    /// Gateway-local request id, echoed in the reply.
    pub req: u64,
    /// The gateway that sent it (where replies and events go).
    pub gateway: NodeId,
    /// The session on that gateway.
    pub session: SessionId,
    /// The authenticated user.
    pub user: UserId,
    /// The client's request id; `None` for commands the gateway makes itself (leaving a room
    /// on disconnect or on a room switch), whose replies are not shown to the client.
    pub client_id: Option<u64>,
    /// The room addressed.
    pub room: RoomId,
    /// What to do.
    pub cmd: RoomCmd,
    /// The user's profile, sent with the commands that make the user a member (`room.create`,
    /// `room.join`, a rejoin) so the room can show it; `None` on every other command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
    /// The user's standing (guards held, lifetime gift spend), sent with the same commands as
    /// the profile once the gateway has read it (an empty one: read, nothing held); `None` on
    /// every other command, and while the gateway's read is not back (or failed): the room then
    /// takes the member's spend for unknown, and its VIP protection reads it from the ledger
    /// (an older gateway sends `None` for nothing held too: read the same way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standing: Option<Standing>,
}

/// Why a session leaves a room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaveReason {
    /// The client asked (`room.leave`).
    Left,
    /// The user joined another room.
    Switched,
    /// The connection closed.
    Disconnected,
}

impl LeaveReason {
    /// The reason as it appears in `member.leave`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Left => "left",
            Self::Switched => "switched",
            Self::Disconnected => "disconnected",
        }
    }
}

/// A room command: a client's room operation, or one the gateway makes itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RoomCmd {
    /// A client's room operation, as the gateway decoded it.
    Op(RoomOp),
    /// The gateway moves a member to the room's new owner after a handoff: a join with
    /// `since` and no password check (gateways are trusted; clients cannot send this).
    Rejoin(RoomJoin),
    /// The gateway takes a session out of the room (a room switch or a closed connection).
    Leave(LeaveReason),
    /// The RTC provider reported a change in the user's audio (a verified webhook); the
    /// command's session is none of the user's.
    Rtc(RtcEvent),
    /// The user's profile changed (`user.update` or the admin API): the room shows the new one.
    Profile(Profile),
    /// The user's standing changed (a guard bought): the room shows the new badges.
    Standing(Standing),
    /// A message from the app's backend (the admin API), sent to the room as a `custom` event
    /// with no sender; the command's user and session are none of a member's.
    Custom(crate::client::CustomSend),
    /// The app's backend sets or removes room attributes (the admin API); `by` is null.
    Attrs(crate::client::RoomAttrs),
    /// The app's backend kicks, bans, mutes or lifts those on a user (the admin API); `by`
    /// is null.
    Moderate(crate::client::BackendModeration),
    /// The app's backend closes, reopens or changes the room (the admin API); `by` is null.
    Manage(crate::client::BackendManage),
    /// A step of an invitation to a PK between two rooms, sent by the gateway that took the
    /// client's `pk.invite`, `pk.accept` or `pk.decline`, as the caller.
    Pk(crate::client::PkCmd),
}

/// What an RTC provider's webhook says about one participant's audio.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RtcEvent {
    /// The provider's event id: the same id twice is one event.
    pub id: String,
    /// What happened.
    pub kind: RtcKind,
    /// When the provider says it happened (unix ms): a later event wins over an earlier one
    /// that arrives late.
    pub at_ms: u64,
}

/// The audio changes a webhook can report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RtcKind {
    /// The participant started publishing audio.
    Published,
    /// The participant stopped publishing audio.
    Unpublished,
    /// The participant left the RTC room.
    Left,
}

/// A message from a shard to a gateway.
#[derive(Debug, Clone, PartialEq)]
pub enum ToGateway {
    /// The answer to one command.
    Reply(Reply),
    /// A room event for some or all of the room's members on this gateway.
    Event(RoomEvent),
}

/// The answer to one [`Command`].
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The command's gateway-local request id.
    pub req: u64,
    /// The session that sent the command.
    pub session: SessionId,
    /// The user of that session.
    pub user: UserId,
    /// The client's request id, if the client made the request.
    pub client_id: Option<u64>,
    /// The room.
    pub room: RoomId,
    /// What changed for the session's membership, applied by the gateway before the reply is
    /// written, so later events of the room reach the session.
    pub membership: Option<Membership>,
    /// The `ok` JSON, or the error.
    pub outcome: Result<Bytes, ReplyError>,
}

/// A failed command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyError {
    /// The client-visible code.
    pub code: ErrorCode,
    /// The client-visible message.
    pub msg: String,
    /// For `UNAVAILABLE` from a shard that does not own the room: the owner it knows of.
    pub owner_hint: Option<NodeId>,
    /// For `UNAVAILABLE`: the shard cannot tell whether the command took effect (its write to
    /// storage timed out or lost its connection, and may still land). The gateway answers the
    /// client rather than sending the command again. Absent (false) from older shards.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outcome_unknown: bool,
}

impl ReplyError {
    /// An error with no owner hint.
    pub fn new(code: ErrorCode, msg: impl Into<String>) -> Self {
        Self {
            code,
            msg: msg.into(),
            owner_hint: None,
            outcome_unknown: false,
        }
    }
}

/// A change of a session's membership in a room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Membership {
    /// The session is now a member: deliver the room's events to it.
    Joined,
    /// The session is no longer a member.
    Left,
}

/// Who on a gateway receives a room event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Audience {
    /// Every member session of the room on this gateway.
    All,
    /// Every member session except this one.
    AllBut(SessionId),
    /// Only these sessions (replays, per-member presence in big rooms, notices).
    Only(Vec<SessionId>),
    /// These sessions, which the room just removed: deliver, then drop them from the room.
    Evict(Vec<SessionId>),
    /// The room was handed off to shard `to`: the gateway rejoins these sessions there from
    /// the last event it delivered, without telling the clients (the frame is empty).
    Moved {
        /// The sessions to move.
        sessions: Vec<SessionId>,
        /// The new owner.
        to: NodeId,
    },
}

/// One room event, encoded once, for one gateway.
#[derive(Debug, Clone, PartialEq)]
pub struct RoomEvent {
    /// The room.
    pub room: RoomId,
    /// Who receives it.
    pub audience: Audience,
    /// `(epoch, seq)` of a sequenced event (the gateway remembers the last one per room).
    pub position: Option<(crate::ids::Epoch, crate::ids::Seq)>,
    /// The client frame, already encoded.
    pub frame: Bytes,
}

/// The first frame on a link, from the gateway: who it is, which link version it speaks, and
/// its proof that it knows the cluster's secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkHello {
    /// The link version ([`LINK_VERSION`]).
    pub v: u16,
    /// The gateway's node id.
    pub gateway: NodeId,
    /// The proof; a shard that has a cluster secret refuses a hello without a valid one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<LinkAuth>,
}

/// A gateway's proof on its hello: when it was made and its MAC under the cluster secret
/// (`shard::link` computes and checks it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkAuth {
    /// When the proof was made, in ms since the Unix epoch.
    pub at: u64,
    /// Lowercase hex of HMAC-SHA256 over the version, the gateway's id and `at`.
    pub mac: String,
}

/// Largest link frame body: an event frame is at most a client frame (64 KiB) plus a small
/// header; replays are sent as separate events.
pub const MAX_LINK_FRAME_BYTES: usize = 1024 * 1024;

const KIND_HELLO: u8 = 0;
const KIND_COMMAND: u8 = 1;
const KIND_REPLY: u8 = 2;
const KIND_EVENT: u8 = 3;

/// Why a link frame could not be decoded. The link is closed and reconnected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkDecodeError {
    /// Shorter than its header says, or empty.
    #[error("truncated link frame")]
    Truncated,
    /// Above [`MAX_LINK_FRAME_BYTES`].
    #[error("link frame too large")]
    TooLarge,
    /// A kind byte this version does not know.
    #[error("unknown link frame kind {0}")]
    UnknownKind(u8),
    /// The header is not the JSON this kind needs.
    #[error("bad link header: {0}")]
    BadHeader(String),
}

/// One decoded link frame.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkFrame {
    /// Gateway -> shard, first frame.
    Hello(LinkHello),
    /// Gateway -> shard: a room command.
    Command(Command),
    /// Shard -> gateway.
    ToGateway(ToGateway),
}

#[derive(Serialize, Deserialize)]
struct ReplyHeader {
    req: u64,
    session: SessionId,
    user: UserId,
    client_id: Option<u64>,
    room: RoomId,
    membership: Option<Membership>,
    err: Option<ReplyError>,
}

#[derive(Serialize, Deserialize)]
struct EventHeader {
    room: RoomId,
    audience: Audience,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    position: Option<(crate::ids::Epoch, crate::ids::Seq)>,
}

fn frame(kind: u8, header: &impl Serialize, payload: &[u8]) -> Bytes {
    let header = crate::client::to_json(header);
    let mut out = BytesMut::with_capacity(5 + header.len() + payload.len());
    out.put_u8(kind);
    out.put_u32(header.len() as u32);
    out.put_slice(&header);
    out.put_slice(payload);
    out.freeze()
}

/// Encodes a link frame body: `[kind u8][header length u32 BE][header JSON][payload]`.
/// Event frames and reply payloads travel as raw bytes after the header, never re-encoded.
pub fn encode(f: &LinkFrame) -> Bytes {
    match f {
        LinkFrame::Hello(h) => frame(KIND_HELLO, h, &[]),
        LinkFrame::Command(c) => frame(KIND_COMMAND, c, &[]),
        LinkFrame::ToGateway(ToGateway::Reply(r)) => {
            let (err, payload) = match &r.outcome {
                Ok(b) => (None, &b[..]),
                Err(e) => (Some(e.clone()), &[][..]),
            };
            let h = ReplyHeader {
                req: r.req,
                session: r.session,
                user: r.user.clone(),
                client_id: r.client_id,
                room: r.room.clone(),
                membership: r.membership,
                err,
            };
            frame(KIND_REPLY, &h, payload)
        }
        LinkFrame::ToGateway(ToGateway::Event(e)) => {
            let h = EventHeader {
                room: e.room.clone(),
                audience: e.audience.clone(),
                position: e.position,
            };
            frame(KIND_EVENT, &h, &e.frame)
        }
    }
}

fn header<T: serde::de::DeserializeOwned>(b: &[u8]) -> Result<T, LinkDecodeError> {
    serde_json::from_slice(b).map_err(|e| LinkDecodeError::BadHeader(e.to_string()))
}

/// Decodes a link frame body (checks the lengths, then parses the header).
///
/// # Errors
/// [`LinkDecodeError`] for anything malformed; the caller closes the link.
pub fn decode(body: Bytes) -> Result<LinkFrame, LinkDecodeError> {
    if body.len() > MAX_LINK_FRAME_BYTES {
        return Err(LinkDecodeError::TooLarge);
    }
    if body.len() < 5 {
        return Err(LinkDecodeError::Truncated);
    }
    let kind = body[0];
    let hlen = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    let end = 5usize.checked_add(hlen).ok_or(LinkDecodeError::Truncated)?;
    if end > body.len() {
        return Err(LinkDecodeError::Truncated);
    }
    let h = &body[5..end];
    let payload = body.slice(end..);
    Ok(match kind {
        KIND_HELLO => LinkFrame::Hello(header(h)?),
        KIND_COMMAND => LinkFrame::Command(header(h)?),
        KIND_REPLY => {
            let r: ReplyHeader = header(h)?;
            LinkFrame::ToGateway(ToGateway::Reply(Reply {
                req: r.req,
                session: r.session,
                user: r.user,
                client_id: r.client_id,
                room: r.room,
                membership: r.membership,
                outcome: match r.err {
                    Some(e) => Err(e),
                    None => Ok(payload),
                },
            }))
        }
        KIND_EVENT => {
            let e: EventHeader = header(h)?;
            LinkFrame::ToGateway(ToGateway::Event(RoomEvent {
                room: e.room,
                audience: e.audience,
                position: e.position,
                frame: payload,
            }))
        }
        k => return Err(LinkDecodeError::UnknownKind(k)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{ChatSend, RoomOp};

    fn round_trip(f: LinkFrame) {
        assert_eq!(decode(encode(&f)).unwrap(), f);
    }

    /// PROTOCOL.md, section 12, names the link version the code speaks, in its text and in
    /// the hello's example.
    #[test]
    fn the_protocol_doc_names_this_link_version() {
        let doc = include_str!("../PROTOCOL.md");
        let named = format!("**`LINK_VERSION` = {LINK_VERSION}**");
        let hello = format!("`{{\"v\":{LINK_VERSION},\"gateway\":\"<node id>\"}}`");
        assert!(doc.contains(&named), "PROTOCOL.md does not say {named}");
        assert!(doc.contains(&hello), "PROTOCOL.md does not show {hello}");
    }

    #[test]
    fn every_kind_round_trips() {
        round_trip(LinkFrame::Hello(LinkHello {
            v: LINK_VERSION,
            gateway: "g1".into(),
            auth: None,
        }));
        round_trip(LinkFrame::Hello(LinkHello {
            v: LINK_VERSION,
            gateway: "g1".into(),
            auth: Some(LinkAuth {
                at: 1_700_000_000_000,
                mac: "00ff".into(),
            }),
        }));
        round_trip(LinkFrame::Command(Command {
            req: 7,
            gateway: "g1".into(),
            session: 3,
            user: "u1".into(),
            client_id: Some(9),
            room: "r1".into(),
            cmd: RoomCmd::Op(RoomOp::Chat(ChatSend {
                room: "r1".into(),
                text: "hi".into(),
                mentions: Vec::new(),
                reply_to: None,
                mention_all: false,
            })),
            profile: None,
            standing: None,
        }));
        round_trip(LinkFrame::Command(Command {
            req: 8,
            gateway: "g1".into(),
            session: 3,
            user: "u1".into(),
            client_id: None,
            room: "r1".into(),
            cmd: RoomCmd::Leave(LeaveReason::Switched),
            profile: None,
            standing: None,
        }));
        round_trip(LinkFrame::Command(Command {
            req: 9,
            gateway: "g1".into(),
            session: 4,
            user: "@admin".into(),
            client_id: Some(u64::MAX),
            room: "r1".into(),
            cmd: RoomCmd::Custom(crate::client::CustomSend {
                room: "r1".into(),
                kind: "notice".into(),
                data: Some(serde_json::json!({"text": "hi", "n": [1, 2.5, null]})),
                volatile: true,
            }),
            profile: None,
            standing: None,
        }));
        for outcome in [
            Ok(Bytes::from_static(b"{\"seq\":1}")),
            Err(ReplyError {
                code: ErrorCode::Unavailable,
                msg: "moving".into(),
                owner_hint: Some("s2".into()),
                outcome_unknown: false,
            }),
            Err(ReplyError {
                outcome_unknown: true,
                ..ReplyError::new(ErrorCode::Unavailable, "may have been applied")
            }),
        ] {
            round_trip(LinkFrame::ToGateway(ToGateway::Reply(Reply {
                req: 1,
                session: 2,
                user: "u".into(),
                client_id: Some(4),
                room: "r".into(),
                membership: Some(Membership::Joined),
                outcome,
            })));
        }
        for audience in [
            Audience::All,
            Audience::AllBut(4),
            Audience::Only(vec![1, 2]),
            Audience::Evict(vec![3]),
            Audience::Moved {
                sessions: vec![5, 6],
                to: "s2".into(),
            },
        ] {
            round_trip(LinkFrame::ToGateway(ToGateway::Event(RoomEvent {
                room: "r".into(),
                audience,
                position: Some((3, 9)),
                frame: Bytes::from_static(b"{\"ev\":\"chat\"}"),
            })));
        }
    }

    #[test]
    fn malformed_frames_are_errors_not_panics() {
        assert_eq!(decode(Bytes::new()), Err(LinkDecodeError::Truncated));
        assert_eq!(
            decode(Bytes::from_static(&[1, 0, 0, 0, 9, b'{'])),
            Err(LinkDecodeError::Truncated)
        );
        assert_eq!(
            decode(Bytes::from_static(&[9, 0, 0, 0, 0])),
            Err(LinkDecodeError::UnknownKind(9))
        );
        assert!(matches!(
            decode(Bytes::from_static(&[1, 0, 0, 0, 2, b'{', b'}'])),
            Err(LinkDecodeError::BadHeader(_))
        ));
        assert_eq!(
            decode(Bytes::from_static(&[1, 255, 255, 255, 255])),
            Err(LinkDecodeError::Truncated)
        );
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = decode(Bytes::from(data));
        }
    }
}
