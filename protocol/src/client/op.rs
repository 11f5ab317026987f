//! Every operation a client can send, in one table: the wire name, the variant and the type
//! of its `d`. Room operations are decoded here once, travel to the room's owner as they are
//! (the link's `RoomCmd::Op`) and are applied there by the room's rules.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{
    BanList, ChatMute, ChatPin, ChatRecall, ChatSend, CustomSend, DecodeError, GiftList, GiftSend,
    InRoom, LikeSend, MemberList, MicPublishing, PkInvite, PkReply, PkStart, RankGet, ReportSend,
    RoomAdmin, RoomAttrs, RoomBan, RoomCreate, RoomJoin, RoomKick, RoomLeave, RoomLock,
    RoomTransfer, RoomUpdate, SeatAnswer, SeatCount, SeatInvite, SeatKick, SeatLeave, SeatLock,
    SeatLockAll, SeatMove, SeatMute, SeatRequest, SeatTake, UserInRoom, UserOp, WalletBalance,
    WalletOp, args,
};
use super::{ImAck, ImBlocks, ImHistory, ImSend, ImUser};
use crate::ids::RoomId;

/// The arguments of an operation that addresses one room.
pub trait Addressed {
    /// The room addressed; `None` only for `room.create` without an id (the gateway picks one).
    fn room(&self) -> Option<&RoomId>;
}

/// Implements [`Addressed`] for argument types with a `room: RoomId` field.
macro_rules! addressed {
    ($($ty:ty),* $(,)?) => {$(
        impl Addressed for $ty {
            fn room(&self) -> Option<&RoomId> {
                Some(&self.room)
            }
        }
    )*};
}

/// `rank.get` names a room only at room scope.
impl Addressed for RankGet {
    fn room(&self) -> Option<&RoomId> {
        self.room.as_ref()
    }
}

addressed!(
    RoomJoin,
    RoomLeave,
    ChatSend,
    ChatRecall,
    ChatPin,
    CustomSend,
    LikeSend,
    ReportSend,
    RoomAttrs,
    SeatTake,
    SeatLeave,
    SeatLock,
    GiftSend,
    SeatMove,
    SeatLockAll,
    SeatMute,
    SeatKick,
    SeatCount,
    SeatRequest,
    InRoom,
    SeatAnswer,
    SeatInvite,
    MicPublishing,
    RoomUpdate,
    RoomLock,
    RoomAdmin,
    RoomTransfer,
    ChatMute,
    UserInRoom,
    RoomKick,
    RoomBan,
    BanList,
    MemberList,
    PkStart,
    PkInvite,
    PkReply,
);

impl Addressed for RoomCreate {
    fn room(&self) -> Option<&RoomId> {
        self.room.as_ref()
    }
}

/// Declares [`RoomOp`] from its table: one line per operation.
macro_rules! room_ops {
    ($( $(#[$doc:meta])* $name:literal => $var:ident($ty:ty), )*) => {
        /// Every operation the owner of a room applies (PROTOCOL.md, "Operations"). The gateway
        /// routes it by [`RoomOp::room`] without looking inside.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        pub enum RoomOp {
            $( $(#[$doc])* $var($ty), )*
        }

        impl RoomOp {
            /// The op's wire name.
            pub fn name(&self) -> &'static str {
                match self {
                    $( Self::$var(_) => $name, )*
                }
            }

            /// The room addressed ([`Addressed::room`]).
            pub fn room(&self) -> Option<&RoomId> {
                match self {
                    $( Self::$var(a) => Addressed::room(a), )*
                }
            }

            /// Decodes `d` for the room op called `name`; `None` when no room op has that name.
            pub(super) fn decode(
                name: &str,
                id: u64,
                d: Option<&RawValue>,
            ) -> Option<Result<Self, DecodeError>> {
                Some(match name {
                    $( $name => args(id, name, d).map(Self::$var), )*
                    _ => return None,
                })
            }
        }
    };
}

room_ops! {
    /// `room.create`: create a room with the sender as owner.
    "room.create" => Create(RoomCreate),
    /// `room.join`: join, or resume from `since`.
    "room.join" => Join(RoomJoin),
    /// `room.leave`.
    "room.leave" => Leave(RoomLeave),
    /// `chat.send`.
    "chat.send" => Chat(ChatSend),
    /// `chat.recall`: take a chat line back (its sender within 2 minutes, or the staff).
    "chat.recall" => ChatRecall(ChatRecall),
    /// `chat.pin`: pin a chat line for everyone, or take it down (owner/admin).
    "chat.pin" => ChatPin(ChatPin),
    /// `custom.send`: an app-defined message, sequenced or volatile.
    "custom.send" => Custom(CustomSend),
    /// `like.send`: likes for the room's counter, announced coalesced (`room.likes`).
    "like.send" => Like(LikeSend),
    /// `seat.take`: a given seat or the first free one.
    "seat.take" => SeatTake(SeatTake),
    /// `seat.leave`.
    "seat.leave" => SeatLeave(SeatLeave),
    /// `seat.lock`: the owner or an admin locks or unlocks a seat.
    "seat.lock" => SeatLock(SeatLock),
    /// `seat.lock_all`: the owner or an admin locks or unlocks every seat.
    "seat.lock_all" => SeatLockAll(SeatLockAll),
    /// `seat.move`: move oneself, or (owner/admin) a seated user, to another seat.
    "seat.move" => SeatMove(SeatMove),
    /// `seat.mute`: mute or unmute a seat (owner/admin any seat, a user their own).
    "seat.mute" => SeatMute(SeatMute),
    /// `seat.kick`: the owner or an admin takes a user off their seat.
    "seat.kick" => SeatKick(SeatKick),
    /// `seat.count`: the owner or an admin changes the number of seats.
    "seat.count" => SeatCount(SeatCount),
    /// `seat.request`: ask for a seat (apply mode).
    "seat.request" => SeatRequest(SeatRequest),
    /// `seat.request.cancel`: withdraw one's own request.
    "seat.request.cancel" => SeatRequestCancel(InRoom),
    /// `seat.requests`: the pending requests (owner/admin).
    "seat.requests" => SeatRequests(InRoom),
    /// `seat.approve`: seat a requester (owner/admin).
    "seat.approve" => SeatApprove(SeatAnswer),
    /// `seat.reject`: turn a request down (owner/admin).
    "seat.reject" => SeatReject(SeatAnswer),
    /// `seat.invite`: invite a member to a seat (owner/admin).
    "seat.invite" => SeatInvite(SeatInvite),
    /// `seat.invite.accept`: take the seat one was invited to.
    "seat.invite.accept" => SeatInviteAccept(InRoom),
    /// `seat.invite.reject`: decline an invitation.
    "seat.invite.reject" => SeatInviteReject(InRoom),
    /// `mic.publishing`: the seated client reports whether its audio is published.
    "mic.publishing" => MicPublishing(MicPublishing),
    /// `room.update`: change title, notice, cover, seat mode, host seat (owner/admin).
    "room.update" => RoomUpdate(RoomUpdate),
    /// `room.attrs`: set or remove the room's app-defined attributes (owner/admin).
    "room.attrs" => RoomAttrs(RoomAttrs),
    /// `room.lock`: set, change or remove the password (owner/admin).
    "room.lock" => RoomLock(RoomLock),
    /// `room.admin`: grant or revoke the admin role (owner).
    "room.admin" => RoomAdmin(RoomAdmin),
    /// `room.transfer`: hand the room to another member (owner).
    "room.transfer" => RoomTransfer(RoomTransfer),
    /// `report.send`: report a user, a chat line or the room to the app's moderators.
    "report.send" => Report(ReportSend),
    /// `room.close`: close the room; every member is taken out (owner).
    "room.close" => RoomClose(InRoom),
    /// `room.open`: reopen a closed room (owner, no membership needed).
    "room.open" => RoomOpen(InRoom),
    /// `chat.mute`: stop a user chatting, for a time or until lifted (owner/admin).
    "chat.mute" => ChatMute(ChatMute),
    /// `chat.unmute`: lift a chat mute (owner/admin).
    "chat.unmute" => ChatUnmute(UserInRoom),
    /// `room.kick`: remove a member, optionally banning them (owner/admin).
    "room.kick" => RoomKick(RoomKick),
    /// `room.ban`: ban a user, removing them if present (owner/admin).
    "room.ban" => RoomBan(RoomBan),
    /// `room.unban`: lift a ban (owner/admin).
    "room.unban" => RoomUnban(UserInRoom),
    /// `room.bans`: one page of the ban list (owner/admin).
    "room.bans" => RoomBans(BanList),
    /// `member.list`: one page of the room's members (members only).
    "member.list" => MemberList(MemberList),
    /// `gift.send`: a paid gift, settled through the ledger.
    "gift.send" => Gift(GiftSend),
    /// `pk.start`: start a timed gift battle between two teams of seats (owner/admin).
    "pk.start" => PkStart(PkStart),
    /// `pk.stop`: end the PK that is on before its time (owner/admin).
    "pk.stop" => PkStop(InRoom),
    /// `pk.invite`: invite another room to a PK between the two rooms (owner/admin).
    "pk.invite" => PkInvite(PkInvite),
    /// `pk.accept`: accept another room's invitation; the PK starts in both (owner/admin).
    "pk.accept" => PkAccept(PkReply),
    /// `pk.decline`: decline another room's invitation (owner/admin).
    "pk.decline" => PkDecline(PkReply),
}

/// Every operation a client can send.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `ping`: answers the server time.
    Ping,
    /// `gift.list`: the gift catalog (answered by the gateway).
    GiftList(GiftList),
    /// `rank.get`: a room's or the app's leaderboard (answered by the gateway from the ledger).
    RankGet(RankGet),
    /// `wallet.balance` (answered by the gateway from the ledger).
    WalletBalance(WalletBalance),
    /// A wallet operation (answered by the gateway from the ledger).
    Wallet(WalletOp),
    /// A direct-message operation (answered by the gateway).
    Im(ImOp),
    /// A profile, follow or token operation (answered by the gateway from its user stores).
    User(UserOp),
    /// `room.list`: the room directory (answered by the gateway).
    RoomList(super::RoomList),
    /// A guard operation (answered by the gateway from the ledger).
    Guard(super::GuardOp),
    /// An operation the room's owner applies.
    Room(RoomOp),
}

/// The direct-message operations, answered by the gateway (no room involved).
#[derive(Debug, Clone, PartialEq)]
pub enum ImOp {
    /// `im.send`: a direct message to another user.
    Send(ImSend),
    /// `im.history`: one page of the caller's messages, newest first.
    History(ImHistory),
    /// `im.block`: refuse messages from a user.
    Block(ImUser),
    /// `im.unblock`: accept messages from a user again.
    Unblock(ImUser),
    /// `im.blocks`: the caller's block list.
    Blocks(ImBlocks),
    /// `im.ack`: the client holds these messages (they are delivered).
    Ack(ImAck),
}

impl ImOp {
    /// The op's wire name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Send(_) => "im.send",
            Self::History(_) => "im.history",
            Self::Block(_) => "im.block",
            Self::Unblock(_) => "im.unblock",
            Self::Blocks(_) => "im.blocks",
            Self::Ack(_) => "im.ack",
        }
    }
}

impl Op {
    /// The op's wire name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Ping => "ping",
            Self::GiftList(_) => "gift.list",
            Self::RankGet(_) => "rank.get",
            Self::WalletBalance(_) => "wallet.balance",
            Self::Wallet(op) => op.name(),
            Self::Im(op) => op.name(),
            Self::User(op) => op.name(),
            Self::RoomList(_) => "room.list",
            Self::Guard(op) => op.name(),
            Self::Room(op) => op.name(),
        }
    }

    /// The room this op addresses, if it names one.
    pub fn room(&self) -> Option<&RoomId> {
        match self {
            Self::RankGet(r) => r.room.as_ref(),
            Self::Room(op) => op.room(),
            Self::Guard(super::GuardOp::List(l)) => l.room.as_ref(),
            Self::Guard(_)
            | Self::Ping
            | Self::GiftList(_)
            | Self::WalletBalance(_)
            | Self::Wallet(_)
            | Self::Im(_)
            | Self::User(_)
            | Self::RoomList(_) => None,
        }
    }

    /// Decodes `d` for the op called `name`; `None` for a name no op has.
    pub(super) fn decode(
        name: &str,
        id: u64,
        d: Option<&RawValue>,
    ) -> Option<Result<Self, DecodeError>> {
        Some(match name {
            "ping" => Ok(Self::Ping),
            "gift.list" => args(id, name, d).map(Self::GiftList),
            "rank.get" => args(id, name, d).map(Self::RankGet),
            "wallet.balance" => args(id, name, d).map(Self::WalletBalance),
            "wallet.history" => args(id, name, d).map(|a| Self::Wallet(WalletOp::History(a))),
            "wallet.transfer" => args(id, name, d).map(|a| Self::Wallet(WalletOp::Transfer(a))),
            "wallet.checkin" => args(id, name, d).map(|a| Self::Wallet(WalletOp::Checkin(a))),
            "room.list" => args(id, name, d).map(Self::RoomList),
            "guard.buy" => args(id, name, d).map(|a| Self::Guard(super::GuardOp::Buy(a))),
            "guard.list" => args(id, name, d).map(|a| Self::Guard(super::GuardOp::List(a))),
            "guard.plans" => args(id, name, d).map(|a| Self::Guard(super::GuardOp::Plans(a))),
            "im.send" => args(id, name, d).map(|a| Self::Im(ImOp::Send(a))),
            "im.history" => args(id, name, d).map(|a| Self::Im(ImOp::History(a))),
            "im.block" => args(id, name, d).map(|a| Self::Im(ImOp::Block(a))),
            "im.unblock" => args(id, name, d).map(|a| Self::Im(ImOp::Unblock(a))),
            "im.blocks" => args(id, name, d).map(|a| Self::Im(ImOp::Blocks(a))),
            "im.ack" => args(id, name, d).map(|a| Self::Im(ImOp::Ack(a))),
            _ => {
                if let Some(u) = UserOp::decode(name, id, d) {
                    return Some(u.map(Self::User));
                }
                return RoomOp::decode(name, id, d).map(|r| r.map(Self::Room));
            }
        })
    }
}
