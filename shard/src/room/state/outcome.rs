//! What the room's rules produce: sequenced events, presence changes, volatile events for
//! some members, members removed, and the reply of an applied operation.

use std::sync::Arc;

use bytes::Bytes;
use protocol::client::{
    self, AttrsEvent, ChatEvent, ChatPinned, ChatRecalled, CustomEvent, GiftEvent, LuckyWinEvent,
    MemberJoin, MemberLeave, MemberUpdate, Moderation, PkEnd, PkStartEvent, Profile, RocketLaunch,
    RoleChange, RoomInfo, SeatUpdate,
};
use protocol::link::Membership;
use protocol::{Epoch, RoomId, Seq, UserId};

use super::SessionRef;

/// A sequenced event produced by a command, before encoding.
#[derive(Debug, Clone, PartialEq)]
pub enum Sequenced {
    /// `chat`.
    Chat(ChatEvent),
    /// `chat.recall`: a chat line taken back.
    ChatRecall(ChatRecalled),
    /// `chat.pin`: the pinned line changed.
    ChatPin(ChatPinned),
    /// `custom`: an app-defined message.
    Custom(CustomEvent),
    /// `seat.update`.
    SeatUpdate(SeatUpdate),
    /// `gift`: a settled gift order.
    Gift(GiftEvent),
    /// `gift.lucky`: a big lucky win.
    LuckyWin(LuckyWinEvent),
    /// `room.update`: room info changed.
    RoomUpdate(RoomInfo),
    /// `room.attrs`: app-defined attributes changed.
    RoomAttrs(AttrsEvent),
    /// `room.role`: a user's role changed.
    Role(RoleChange),
    /// `moderation`: a mute, kick or ban and their lifting.
    Moderation(Moderation),
    /// `rocket.launch`: the room rocket launched and its rewards were paid.
    RocketLaunch(RocketLaunch),
    /// `pk.start`: a PK began.
    PkStart(PkStartEvent),
    /// `pk.end`: a PK ended, with its scores and winner.
    PkEnd(PkEnd),
}

impl Sequenced {
    /// The event name on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Chat(_) => "chat",
            Self::ChatRecall(_) => "chat.recall",
            Self::ChatPin(_) => "chat.pin",
            Self::Custom(_) => "custom",
            Self::SeatUpdate(_) => "seat.update",
            Self::Gift(_) => "gift",
            Self::LuckyWin(_) => "gift.lucky",
            Self::RoomUpdate(_) => "room.update",
            Self::RoomAttrs(_) => "room.attrs",
            Self::Role(_) => "room.role",
            Self::Moderation(_) => "moderation",
            Self::RocketLaunch(_) => "rocket.launch",
            Self::PkStart(_) => "pk.start",
            Self::PkEnd(_) => "pk.end",
        }
    }

    /// The client frame of this event at `(epoch, seq)` in `room`: encoded once, shared by
    /// every recipient and the resume log.
    pub fn encode(&self, room: &RoomId, epoch: Epoch, seq: Seq) -> Bytes {
        let at = Some((epoch, seq));
        let name = self.name();
        match self {
            Self::Chat(e) => client::encode_event(name, Some(room), at, e),
            Self::ChatRecall(e) => client::encode_event(name, Some(room), at, e),
            Self::ChatPin(e) => client::encode_event(name, Some(room), at, e),
            Self::Custom(e) => client::encode_event(name, Some(room), at, e),
            Self::SeatUpdate(e) => client::encode_event(name, Some(room), at, e),
            Self::Gift(e) => client::encode_event(name, Some(room), at, e),
            Self::LuckyWin(e) => client::encode_event(name, Some(room), at, e),
            Self::RoomUpdate(e) => client::encode_event(name, Some(room), at, e),
            Self::RoomAttrs(e) => client::encode_event(name, Some(room), at, e),
            Self::Role(e) => client::encode_event(name, Some(room), at, e),
            Self::Moderation(e) => client::encode_event(name, Some(room), at, e),
            Self::RocketLaunch(e) => client::encode_event(name, Some(room), at, e),
            Self::PkStart(e) => client::encode_event(name, Some(room), at, e),
            Self::PkEnd(e) => client::encode_event(name, Some(room), at, e),
        }
    }
}

/// A presence change, published on the volatile lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    /// A user became a member (with its profile, if any, and its badges).
    Join(UserId, Option<Arc<Profile>>, super::Badges),
    /// A user stopped being a member.
    Leave(UserId, &'static str),
    /// A member's profile or badges changed (profile `None`: now empty).
    Update(UserId, Option<Arc<Profile>>, super::Badges),
}

impl Presence {
    /// The user whose presence changed.
    pub fn user(&self) -> &UserId {
        match self {
            Self::Join(u, ..) | Self::Leave(u, _) | Self::Update(u, ..) => u,
        }
    }

    /// Whether the member count changed (big rooms then send a coalesced `member.count`).
    pub fn counts(&self) -> bool {
        !matches!(self, Self::Update(..))
    }

    /// The client frame (`member.join` / `member.leave` / `member.update`, not sequenced).
    pub fn encode(&self, room: &RoomId) -> Bytes {
        match self {
            Self::Join(u, p, b) => client::encode_event(
                "member.join",
                Some(room),
                None,
                &MemberJoin {
                    user: u.clone(),
                    robot: u.is_robot(),
                    p: p.as_deref().cloned(),
                    guard: b.guard,
                    vip: b.vip,
                    entrance: b.entrance,
                },
            ),
            Self::Update(u, p, b) => client::encode_event(
                "member.update",
                Some(room),
                None,
                &MemberUpdate {
                    user: u.clone(),
                    p: p.as_deref().cloned(),
                    guard: b.guard,
                    vip: b.vip,
                },
            ),
            Self::Leave(u, reason) => client::encode_event(
                "member.leave",
                Some(room),
                None,
                &MemberLeave {
                    user: u.clone(),
                    reason: (*reason).to_owned(),
                },
            ),
        }
    }
}

/// Who gets a presence event (`RoomState::presence_plan`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PresencePlan {
    /// A small room: every member, except the joiner's own session.
    Everyone,
    /// A big room: only these sessions (the owner, admins and the seated, not the subject);
    /// listeners see a coalesced `member.count` instead.
    Privileged(Vec<SessionRef>),
}

/// A volatile event for some members only (seat requests and invitations): it carries the
/// room but no seq, and is never replayed.
#[derive(Debug, Clone, PartialEq)]
pub struct Direct {
    /// The members it goes to (those no longer in the room are skipped).
    pub to: Vec<UserId>,
    /// The event frame.
    pub frame: Bytes,
}

/// A member the room removed (a kick, a ban, the room closing): told with `room.left`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evicted {
    /// The user.
    pub user: UserId,
    /// Their connection.
    pub at: SessionRef,
    /// The `room.left` reason.
    pub reason: &'static str,
}

/// What a command applied by `RoomState::apply` produced.
#[derive(Debug, PartialEq)]
pub struct Outcome {
    /// The reply's `ok` JSON.
    pub ok: Bytes,
    /// The change to publish.
    pub applied: Applied,
    /// The sender's membership change, applied by its gateway before the reply.
    pub membership: Option<Membership>,
}

impl Outcome {
    pub(super) fn new(ok: Bytes, applied: Applied) -> Self {
        Self {
            ok,
            applied,
            membership: None,
        }
    }

    pub(super) fn empty(applied: Applied) -> Self {
        Self::new(Bytes::from_static(b"{}"), applied)
    }
}

/// What applying a command produced: sequenced events (seq assigned), presence changes,
/// volatile events for some or all members, and members removed.
#[derive(Debug, Default, PartialEq)]
pub struct Applied {
    /// Sequenced events, in order, each with its seq.
    pub events: Vec<(Seq, Sequenced)>,
    /// Presence changes.
    pub presence: Vec<Presence>,
    /// Volatile events for some members.
    pub direct: Vec<Direct>,
    /// Volatile events for every member in the room now (volatile `custom` messages).
    pub broadcast: Vec<Bytes>,
    /// Members the room removed.
    pub evicted: Vec<Evicted>,
    /// Whether durable state changed (the actor saves a snapshot).
    pub durable_changed: bool,
    /// Whether a deadline outside durable state changed (a grace window began or ended):
    /// the actor recomputes its next deadline.
    pub rearm: bool,
}

impl Applied {
    pub(super) fn changed() -> Self {
        Self {
            durable_changed: true,
            ..Self::default()
        }
    }
}

/// The outcome of a successful join.
#[derive(Debug, Default, PartialEq)]
pub struct Joined {
    /// The user's previous connection in this room, which the new one replaces.
    pub replaced: Option<SessionRef>,
    /// Presence to publish (empty when an existing member only replaced its connection).
    pub applied: Applied,
    /// The user was away (its connection had dropped) and is back within the grace window.
    pub returned: bool,
}
