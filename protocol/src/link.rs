//! Gateway <-> shard messages: commands with request ids in, replies and per-gateway room
//! events out.
//!
//! Standalone mode carries these values over an in-process channel; the cluster carries the
//! same values over one multiplexed TCP connection per gateway-shard pair. Event frames travel
//! as the already-encoded client bytes, so a shard serializes an event once and each gateway
//! fans the same bytes out to its sockets.

use bytes::Bytes;

use crate::client::{ChatSend, GiftSend, RankGet, RoomCreate, RoomJoin, SeatTake};
use crate::error::ErrorCode;
use crate::ids::{NodeId, RoomId, SessionId, UserId};

/// Version of the link message set; a gateway and a shard must agree on it.
pub const LINK_VERSION: u16 = 1;

/// A message from a gateway to a shard.
#[derive(Debug, Clone, PartialEq)]
pub enum ToShard {
    /// A room command on behalf of one session.
    Command(Command),
}

/// A room command from one session, with the ids needed to answer it.
#[derive(Debug, Clone, PartialEq)]
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
}

/// Why a session leaves a room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// A room command.
#[derive(Debug, Clone, PartialEq)]
pub enum RoomCmd {
    /// Create the room with the sender as owner.
    Create(RoomCreate),
    /// Join (or resume).
    Join(RoomJoin),
    /// Leave.
    Leave(LeaveReason),
    /// Send a chat message.
    Chat(ChatSend),
    /// Take a seat.
    SeatTake(SeatTake),
    /// Leave the seat held.
    SeatLeave,
    /// Send a gift.
    Gift(GiftSend),
    /// Read a leaderboard.
    Rank(RankGet),
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyError {
    /// The client-visible code.
    pub code: ErrorCode,
    /// The client-visible message.
    pub msg: String,
    /// For `UNAVAILABLE` from a shard that does not own the room: the owner it knows of.
    pub owner_hint: Option<NodeId>,
}

impl ReplyError {
    /// An error with no owner hint.
    pub fn new(code: ErrorCode, msg: impl Into<String>) -> Self {
        Self {
            code,
            msg: msg.into(),
            owner_hint: None,
        }
    }
}

/// A change of a session's membership in a room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// The session is now a member: deliver the room's events to it.
    Joined,
    /// The session is no longer a member.
    Left,
}

/// Who on a gateway receives a room event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audience {
    /// Every member session of the room on this gateway.
    All,
    /// Every member session except this one.
    AllBut(SessionId),
    /// Only these sessions (replays, per-member presence in big rooms, notices).
    Only(Vec<SessionId>),
    /// These sessions, which the room just removed: deliver, then drop them from the room.
    Evict(Vec<SessionId>),
}

/// One room event, encoded once, for one gateway.
#[derive(Debug, Clone, PartialEq)]
pub struct RoomEvent {
    /// The room.
    pub room: RoomId,
    /// Who receives it.
    pub audience: Audience,
    /// The client frame, already encoded.
    pub frame: Bytes,
}
