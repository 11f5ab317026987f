//! Error codes (UPPER_SNAKE on the wire), close codes and decode errors.

use serde::{Deserialize, Serialize};

/// A stable error code carried in `{"err":{"code":...}}` replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    /// The frame is not valid JSON or not a request envelope (or `d` has the wrong shape).
    BadFrame,
    /// The `op` is not one this server knows.
    UnknownOp,
    /// The arguments are well-formed but not acceptable (range, length, id syntax).
    BadRequest,
    /// Authentication failed.
    Unauthorized,
    /// The caller may not do this: the operation needs the owner or an admin, or acts on
    /// someone the caller may not act on.
    Forbidden,
    /// The operation needs the caller to be a member of the room.
    NotInRoom,
    /// No such room (and auto-create is off).
    RoomNotFound,
    /// `room.create` named a room that already exists.
    RoomExists,
    /// The room has a password and the right one was not given.
    RoomLocked,
    /// The seat is occupied.
    SeatTaken,
    /// The seat is locked by the owner or an admin.
    SeatLocked,
    /// Every seat is occupied or locked.
    NoFreeSeat,
    /// The seat index is not one of the room's seats.
    NoSuchSeat,
    /// The user the operation names is not a member of the room.
    UserNotInRoom,
    /// The user the operation names holds no seat.
    NotSeated,
    /// No pending seat request or invitation matches (never made, cancelled, or already
    /// answered by someone else).
    NoSuchRequest,
    /// The seat request or invitation timed out.
    RequestExpired,
    /// The room is closed by its owner.
    RoomClosed,
    /// The user is banned from the room (the message says until when).
    Banned,
    /// The sender is muted in the room's chat (the message says until when).
    ChatMuted,
    /// The room is in slow mode and the sender's last chat line was too recent (the message
    /// says when the next may go).
    SlowMode,
    /// `chat.recall` named no chat line the room remembers (another epoch's, one past the
    /// last 64, or not a chat line).
    NoSuchMessage,
    /// A direct message between two users one of whom blocked the other.
    Blocked,
    /// `pk.start` in a room where a PK is already on.
    PkOn,
    /// `pk.stop` in a room where no PK is on.
    NoPk,
    /// The request id was used before for another request (another gift, count, recipients
    /// or room): a reuse, not a retry; nothing was done. Send with a new id.
    IdempotencyConflict,
    /// The sender's balance does not cover the gift.
    InsufficientFunds,
    /// The gift order was cancelled before any coin moved (recovery voided it); send again
    /// with a new `req_id`.
    GiftVoided,
    /// The connection sent faster than its token bucket allows.
    RateLimited,
    /// A per-user room quota refused a room creation (`room.create`, or `room.join` of a
    /// missing room under auto-create): the user created rooms faster than the per-minute
    /// allowance, or owns as many stored rooms as allowed (the message says which).
    QuotaExceeded,
    /// `wallet.transfer` by a user who is not a coin seller (only sellers may transfer).
    NotASeller,
    /// An admin tried to kick, ban or mute a member whose VIP level protects them from
    /// admins (only the owner may).
    VipProtected,
    /// Retry later: ownership of the room is moving, or the room is overloaded.
    Unavailable,
    /// Something failed on the server; details are in its logs.
    Internal,
}

impl ErrorCode {
    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadFrame => "BAD_FRAME",
            Self::UnknownOp => "UNKNOWN_OP",
            Self::BadRequest => "BAD_REQUEST",
            Self::Unauthorized => "UNAUTHORIZED",
            Self::Forbidden => "FORBIDDEN",
            Self::NotInRoom => "NOT_IN_ROOM",
            Self::RoomNotFound => "ROOM_NOT_FOUND",
            Self::RoomExists => "ROOM_EXISTS",
            Self::RoomLocked => "ROOM_LOCKED",
            Self::SeatTaken => "SEAT_TAKEN",
            Self::SeatLocked => "SEAT_LOCKED",
            Self::NoFreeSeat => "NO_FREE_SEAT",
            Self::NoSuchSeat => "NO_SUCH_SEAT",
            Self::UserNotInRoom => "USER_NOT_IN_ROOM",
            Self::NotSeated => "NOT_SEATED",
            Self::NoSuchRequest => "NO_SUCH_REQUEST",
            Self::RequestExpired => "REQUEST_EXPIRED",
            Self::RoomClosed => "ROOM_CLOSED",
            Self::Banned => "BANNED",
            Self::ChatMuted => "CHAT_MUTED",
            Self::SlowMode => "SLOW_MODE",
            Self::NoSuchMessage => "NO_SUCH_MESSAGE",
            Self::Blocked => "BLOCKED",
            Self::PkOn => "PK_ON",
            Self::NoPk => "NO_PK",
            Self::IdempotencyConflict => "IDEMPOTENCY_CONFLICT",
            Self::InsufficientFunds => "INSUFFICIENT_FUNDS",
            Self::GiftVoided => "GIFT_VOIDED",
            Self::RateLimited => "RATE_LIMITED",
            Self::QuotaExceeded => "QUOTA_EXCEEDED",
            Self::NotASeller => "NOT_A_SELLER",
            Self::VipProtected => "VIP_PROTECTED",
            Self::Unavailable => "UNAVAILABLE",
            Self::Internal => "INTERNAL",
        }
    }

    /// Whether a client may retry the same request later and expect a different outcome.
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::RateLimited | Self::Unavailable | Self::Internal)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// WebSocket close codes the server uses (see PROTOCOL.md, "Close codes").
pub mod close {
    /// Normal closure (RFC 6455); the server sends it for nothing of its own.
    pub const NORMAL: u16 = 1000;
    /// Going away: the node drains; reconnect elsewhere and resume with `since`.
    pub const GOING_AWAY: u16 = 1001;
    /// Protocol error: the client broke RFC 6455 (a reserved opcode or bit, an unmasked frame,
    /// a fragmented control frame).
    pub const PROTOCOL_ERROR: u16 = 1002;
    /// Invalid data: a text frame that is not UTF-8.
    pub const INVALID_DATA: u16 = 1007;
    /// Policy violation: a flood after warnings, or the token expired.
    pub const POLICY: u16 = 1008;
    /// A frame or message above the size limit.
    pub const TOO_BIG: u16 = 1009;
    /// The server failed unexpectedly.
    pub const INTERNAL: u16 = 1011;
    /// Slow consumer: the outbound queue overflowed; reconnect and resume with `since`.
    pub const SLOW_CONSUMER: u16 = 4000;
    /// The user opened more connections than a gateway allows one user: the oldest is closed.
    pub const TOO_MANY_CONNECTIONS: u16 = 4001;
    /// Heartbeat time-out: nothing heard from the peer for two heartbeats; reconnect and
    /// resume with `since`. Not 1000, which would tell the client all went as meant.
    pub const HEARTBEAT_TIMEOUT: u16 = 4002;
    /// The user's account is suspended by the platform: do not reconnect.
    pub const SUSPENDED: u16 = 4003;
}
