//! Every operation a client can send, in one table: the wire name, the variant and the type
//! of its `d`. Room operations are decoded here once, travel to the room's owner as they are
//! (the link's `RoomCmd::Op`) and are applied there by the room's rules.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{
    ChatSend, DecodeError, GiftList, GiftSend, RankGet, RoomCreate, RoomJoin, RoomLeave, SeatLeave,
    SeatLock, SeatTake, WalletBalance, args,
};
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

addressed!(
    RoomJoin, RoomLeave, ChatSend, SeatTake, SeatLeave, SeatLock, GiftSend, RankGet
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
    /// `seat.take`: a given seat or the first free one.
    "seat.take" => SeatTake(SeatTake),
    /// `seat.leave`.
    "seat.leave" => SeatLeave(SeatLeave),
    /// `seat.lock`: the owner or an admin locks or unlocks a seat.
    "seat.lock" => SeatLock(SeatLock),
    /// `gift.send`: a paid gift, settled through the ledger.
    "gift.send" => Gift(GiftSend),
}

/// Every operation a client can send.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `ping`: answers the server time.
    Ping,
    /// `gift.list`: the gift catalog (answered by the gateway).
    GiftList(GiftList),
    /// `rank.get`: a room leaderboard (answered by the gateway from the ledger).
    RankGet(RankGet),
    /// `wallet.balance` (answered by the gateway from the ledger).
    WalletBalance(WalletBalance),
    /// An operation the room's owner applies.
    Room(RoomOp),
}

impl Op {
    /// The op's wire name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Ping => "ping",
            Self::GiftList(_) => "gift.list",
            Self::RankGet(_) => "rank.get",
            Self::WalletBalance(_) => "wallet.balance",
            Self::Room(op) => op.name(),
        }
    }

    /// The room this op addresses, if it names one.
    pub fn room(&self) -> Option<&RoomId> {
        match self {
            Self::RankGet(r) => Some(&r.room),
            Self::Room(op) => op.room(),
            Self::Ping | Self::GiftList(_) | Self::WalletBalance(_) => None,
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
            _ => return RoomOp::decode(name, id, d).map(|r| r.map(Self::Room)),
        })
    }
}
