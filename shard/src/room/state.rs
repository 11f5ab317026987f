//! The room's rules as a pure state machine: commands in, sequenced events and presence out.
//!
//! No async, no clock, no I/O: the actor in `room.rs` receives, applies, persists and publishes.

use std::collections::HashMap;

use bytes::Bytes;
use protocol::client::gift::{MAX_GIFT_COUNT, MAX_GIFT_RECIPIENTS};
use protocol::client::room::{MAX_PASSWORD_CHARS, MAX_SEATS, MAX_TITLE_CHARS, MIN_SEATS};
use protocol::client::{
    self, ChatEvent, ChatSent, GiftEvent, GiftTargets, LuckyWinEvent, MAX_CHAT_TEXT_CHARS,
    MemberJoin, MemberLeave, RoomOp, SeatTaken, SeatView, Snapshot,
};
use protocol::link::{LeaveReason, Membership, RoomCmd};
use protocol::{Epoch, ErrorCode, NodeId, RoomId, Seq, SessionId, UserId};
use serde::{Deserialize, Serialize};

/// Where a member's connection lives: which gateway, which session there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionRef {
    /// The gateway holding the socket.
    pub gateway: NodeId,
    /// The session on that gateway.
    pub session: SessionId,
}

/// A rule violation, answered to the client with its code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {msg}")]
pub struct Rejected {
    /// The client-visible code.
    pub code: ErrorCode,
    /// The client-visible message.
    pub msg: &'static str,
}

const fn rejected(code: ErrorCode, msg: &'static str) -> Rejected {
    Rejected { code, msg }
}

/// One mic seat.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seat {
    /// Who sits there.
    pub user: Option<UserId>,
    /// Locked seats cannot be taken.
    pub locked: bool,
    /// Muted by the owner or an admin.
    pub muted: bool,
}

/// The state that survives an unload or a change of owner (saved through fenced writes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Durable {
    /// Display title.
    pub title: String,
    /// The host.
    pub owner: UserId,
    /// Room admins.
    pub admins: Vec<UserId>,
    /// Password for locked rooms.
    pub password: Option<String>,
    /// Mic seats by index.
    pub seats: Vec<Seat>,
}

impl Durable {
    /// A new room's durable state, validated.
    ///
    /// # Errors
    /// `BAD_REQUEST` for a seat count outside 1..=20, a title or password that is too long.
    pub fn new(
        owner: UserId,
        title: String,
        seats: u32,
        password: Option<String>,
    ) -> Result<Self, Rejected> {
        if !(MIN_SEATS..=MAX_SEATS).contains(&seats) {
            return Err(rejected(ErrorCode::BadRequest, "seats must be 1..=20"));
        }
        if title.chars().count() > MAX_TITLE_CHARS {
            return Err(rejected(ErrorCode::BadRequest, "title is too long"));
        }
        if !protocol::text::is_clean(&title, false) {
            return Err(rejected(
                ErrorCode::BadRequest,
                "title may not hold control or bidi characters",
            ));
        }
        if let Some(p) = &password
            && (p.is_empty()
                || p.chars().count() > MAX_PASSWORD_CHARS
                || !protocol::text::is_clean(p, false))
        {
            return Err(rejected(
                ErrorCode::BadRequest,
                "password must be 1..=64 printable chars",
            ));
        }
        Ok(Self {
            title,
            owner,
            admins: Vec::new(),
            password,
            seats: vec![Seat::default(); seats as usize],
        })
    }
}

/// A sequenced event produced by a command, before encoding.
#[derive(Debug, Clone, PartialEq)]
pub enum Sequenced {
    /// `chat`.
    Chat(ChatEvent),
    /// `seat.update`.
    SeatUpdate(SeatView),
    /// `gift`: a settled gift order.
    Gift(GiftEvent),
    /// `gift.lucky`: a big lucky win.
    LuckyWin(LuckyWinEvent),
}

impl Sequenced {
    /// The event name on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Chat(_) => "chat",
            Self::SeatUpdate(_) => "seat.update",
            Self::Gift(_) => "gift",
            Self::LuckyWin(_) => "gift.lucky",
        }
    }

    /// The client frame of this event at `(epoch, seq)` in `room`: encoded once, shared by
    /// every recipient and the resume log.
    pub fn encode(&self, room: &RoomId, epoch: Epoch, seq: Seq) -> Bytes {
        let at = Some((epoch, seq));
        match self {
            Self::Chat(e) => client::encode_event(self.name(), Some(room), at, e),
            Self::SeatUpdate(e) => client::encode_event(self.name(), Some(room), at, e),
            Self::Gift(e) => client::encode_event(self.name(), Some(room), at, e),
            Self::LuckyWin(e) => client::encode_event(self.name(), Some(room), at, e),
        }
    }
}

/// A presence change, published on the volatile lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    /// A user became a member.
    Join(UserId),
    /// A user stopped being a member.
    Leave(UserId, &'static str),
}

impl Presence {
    /// The user whose presence changed.
    pub fn user(&self) -> &UserId {
        match self {
            Self::Join(u) | Self::Leave(u, _) => u,
        }
    }

    /// The client frame (`member.join` / `member.leave`, not sequenced).
    pub fn encode(&self, room: &RoomId) -> Bytes {
        match self {
            Self::Join(u) => client::encode_event(
                "member.join",
                Some(room),
                None,
                &MemberJoin { user: u.clone() },
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

/// Who gets a presence event ([`RoomState::presence_plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PresencePlan {
    /// A small room: every member, except the joiner's own session.
    Everyone,
    /// A big room: only these sessions (the owner, admins and the seated, not the subject);
    /// listeners see a coalesced `member.count` instead.
    Privileged(Vec<SessionRef>),
}

/// What a command applied by [`RoomState::apply`] produced.
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
    fn new(ok: Bytes, applied: Applied) -> Self {
        Self {
            ok,
            applied,
            membership: None,
        }
    }
}

/// The rule for rooms that do not exist yet: the durable state `cmd` creates, if it creates
/// the room.
///
/// # Errors
/// `ROOM_EXISTS` for `room.create` of an existing room; `ROOM_NOT_FOUND` for any other command
/// to a missing room, except a client's join where `auto_create` makes a default room; the
/// checks of [`Durable::new`].
pub fn creation(
    cmd: &RoomCmd,
    exists: bool,
    user: &UserId,
    auto_create: bool,
) -> Result<Option<Durable>, Rejected> {
    match (cmd, exists) {
        (RoomCmd::Op(RoomOp::Create(_)), true) => {
            Err(rejected(ErrorCode::RoomExists, "room already exists"))
        }
        (RoomCmd::Op(RoomOp::Create(c)), false) => {
            Durable::new(user.clone(), c.title.clone(), c.seats, c.password.clone()).map(Some)
        }
        (_, true) => Ok(None),
        (RoomCmd::Op(RoomOp::Join(_)), false) if auto_create => Durable::new(
            user.clone(),
            String::new(),
            client::room::DEFAULT_SEATS,
            None,
        )
        .map(Some),
        (_, false) => Err(rejected(ErrorCode::RoomNotFound, "no such room")),
    }
}

/// What applying a command produced: sequenced events (seq assigned) and presence changes.
#[derive(Debug, Default, PartialEq)]
pub struct Applied {
    /// Sequenced events, in order, each with its seq.
    pub events: Vec<(Seq, Sequenced)>,
    /// Presence changes.
    pub presence: Vec<Presence>,
    /// Whether durable state changed (the actor saves a snapshot).
    pub durable_changed: bool,
}

/// The outcome of a successful join.
#[derive(Debug, Default, PartialEq)]
pub struct Joined {
    /// The user's previous connection in this room, which the new one replaces.
    pub replaced: Option<SessionRef>,
    /// Presence to publish (empty when an existing member only replaced its connection).
    pub applied: Applied,
}

/// A live room: durable state plus members and the event position.
#[derive(Debug)]
pub struct RoomState {
    id: RoomId,
    durable: Durable,
    members: HashMap<UserId, SessionRef>,
    /// Members per gateway: one copy of each event goes to each gateway listed here.
    gateways: HashMap<NodeId, usize>,
    epoch: Epoch,
    seq: Seq,
}

impl RoomState {
    /// A room at the start of `epoch`, with no members.
    pub fn new(id: RoomId, durable: Durable, epoch: Epoch) -> Self {
        Self {
            id,
            durable,
            members: HashMap::new(),
            gateways: HashMap::new(),
            epoch,
            seq: 0,
        }
    }

    /// The room id.
    pub fn id(&self) -> &RoomId {
        &self.id
    }

    /// The durable part, for snapshots.
    pub fn durable(&self) -> &Durable {
        &self.durable
    }

    /// The current epoch.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The seq of the last sequenced event of this epoch.
    pub fn seq(&self) -> Seq {
        self.seq
    }

    /// How many members the room has.
    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// The members and their sessions.
    pub fn members(&self) -> impl Iterator<Item = (&UserId, &SessionRef)> {
        self.members.iter()
    }

    /// The session of a member.
    pub fn member(&self, user: &UserId) -> Option<&SessionRef> {
        self.members.get(user)
    }

    /// The gateways that hold members of the room, each once.
    pub fn gateways(&self) -> impl Iterator<Item = &NodeId> {
        self.gateways.keys()
    }

    /// Who gets presence change `p`: everyone in a room of at most `full_max` members; in a
    /// bigger one only the owner, admins and the seated (never the subject), so that presence
    /// never costs members squared.
    pub fn presence_plan(&self, p: &Presence, full_max: usize) -> PresencePlan {
        if self.members.len() <= full_max {
            return PresencePlan::Everyone;
        }
        let subject = p.user();
        PresencePlan::Privileged(
            self.members
                .iter()
                .filter(|(u, _)| *u != subject && self.is_privileged(u))
                .map(|(_, at)| at.clone())
                .collect(),
        )
    }

    /// Makes `at` the connection of `user`; returns the one it replaced.
    fn insert_member(&mut self, user: &UserId, at: SessionRef) -> Option<SessionRef> {
        *self.gateways.entry(at.gateway.clone()).or_default() += 1;
        let old = self.members.insert(user.clone(), at);
        if let Some(old) = &old {
            self.gateway_lost_member(&old.gateway);
        }
        old
    }

    fn remove_member(&mut self, user: &UserId) {
        if let Some(old) = self.members.remove(user) {
            self.gateway_lost_member(&old.gateway);
        }
    }

    fn gateway_lost_member(&mut self, gw: &NodeId) {
        if let Some(n) = self.gateways.get_mut(gw) {
            *n -= 1;
            if *n == 0 {
                self.gateways.remove(gw);
            }
        }
    }

    /// Whether `user` gets per-member presence in a big room: the owner, admins and seat
    /// holders.
    pub fn is_privileged(&self, user: &UserId) -> bool {
        self.durable.owner == *user
            || self.durable.admins.contains(user)
            || self.seat_of(user).is_some()
    }

    /// The seat `user` holds.
    pub fn seat_of(&self, user: &UserId) -> Option<u32> {
        self.durable
            .seats
            .iter()
            .position(|s| s.user.as_ref() == Some(user))
            .map(|i| i as u32)
    }

    /// The snapshot a joiner receives.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            room: self.id.clone(),
            title: self.durable.title.clone(),
            owner: self.durable.owner.clone(),
            admins: self.durable.admins.clone(),
            locked: self.durable.password.is_some(),
            notice: String::new(),
            cover: String::new(),
            seat_mode: client::SeatMode::Free,
            host_seat: false,
            seats: (0..self.durable.seats.len())
                .map(|i| self.seat_view(i))
                .collect(),
            members: self.members.len() as u64,
            epoch: self.epoch,
            seq: self.seq,
        }
    }

    fn seat_view(&self, i: usize) -> SeatView {
        let s = &self.durable.seats[i];
        SeatView {
            index: i as u32,
            user: s.user.clone(),
            locked: s.locked,
            muted: s.muted,
            admin_muted: false,
            publishing: false,
            publish_by: None,
        }
    }

    fn push(&mut self, applied: &mut Applied, ev: Sequenced) {
        self.seq += 1;
        applied.events.push((self.seq, ev));
    }

    /// Adds `user` (connected at `at`) as a member.
    ///
    /// # Errors
    /// `ROOM_LOCKED` when the room has a password and `password` is not it. The owner and
    /// admins need no password.
    pub fn join(
        &mut self,
        user: &UserId,
        at: SessionRef,
        password: Option<&str>,
    ) -> Result<Joined, Rejected> {
        if let Some(p) = &self.durable.password {
            let exempt = self.durable.owner == *user || self.durable.admins.contains(user);
            if !exempt && password != Some(p.as_str()) {
                return Err(rejected(
                    ErrorCode::RoomLocked,
                    "room is locked: wrong password",
                ));
            }
        }
        Ok(self.add(user, at))
    }

    /// Adds `user` back after a handoff: a trusted join (the gateway vouches the user was a
    /// member at the previous owner), so no password check.
    pub fn rejoin(&mut self, user: &UserId, at: SessionRef) -> Joined {
        self.add(user, at)
    }

    fn add(&mut self, user: &UserId, at: SessionRef) -> Joined {
        let mut joined = Joined::default();
        match self.insert_member(user, at.clone()) {
            Some(old) if old != at => joined.replaced = Some(old),
            Some(_) => {}
            None => joined.applied.presence.push(Presence::Join(user.clone())),
        }
        joined
    }

    /// Removes `user` if its membership is the connection `at` (a stale connection's leave
    /// does not remove the connection that replaced it). Frees the user's seat.
    ///
    /// # Errors
    /// `NOT_IN_ROOM` when `user` is not a member through `at`.
    pub fn leave(
        &mut self,
        user: &UserId,
        at: &SessionRef,
        reason: &'static str,
    ) -> Result<Applied, Rejected> {
        if self.members.get(user) != Some(at) {
            return Err(rejected(ErrorCode::NotInRoom, "not in this room"));
        }
        self.remove_member(user);
        let mut applied = Applied::default();
        if let Some(i) = self.seat_of(user) {
            self.durable.seats[i as usize].user = None;
            applied.durable_changed = true;
            let view = self.seat_view(i as usize);
            self.push(&mut applied, Sequenced::SeatUpdate(view));
        }
        applied.presence.push(Presence::Leave(user.clone(), reason));
        Ok(applied)
    }

    fn check_member(&self, user: &UserId, at: &SessionRef) -> Result<(), Rejected> {
        if self.members.get(user) == Some(at) {
            Ok(())
        } else {
            Err(rejected(ErrorCode::NotInRoom, "join the room first"))
        }
    }

    /// Applies a member's room operation that needs nothing but the room's state: the reply
    /// and the change to publish. A new room operation gets its rule here.
    ///
    /// # Errors
    /// The rule's rejection; `INTERNAL` for the operations the actor runs itself (create,
    /// join, gift), which never come here.
    pub fn apply(
        &mut self,
        user: &UserId,
        at: &SessionRef,
        op: &RoomOp,
    ) -> Result<Outcome, Rejected> {
        match op {
            RoomOp::Leave(_) => {
                let applied = self.leave(user, at, LeaveReason::Left.as_str())?;
                Ok(Outcome {
                    membership: Some(Membership::Left),
                    ..Outcome::new(Bytes::from_static(b"{}"), applied)
                })
            }
            RoomOp::Chat(c) => {
                let applied = self.chat(user, at, c.text.clone())?;
                let seq = applied.events.last().map_or(0, |(s, _)| *s);
                Ok(Outcome::new(json(&ChatSent { seq }), applied))
            }
            RoomOp::SeatTake(t) => {
                let (seat, applied) = self.seat_take(user, at, t.seat)?;
                Ok(Outcome::new(json(&SeatTaken { seat }), applied))
            }
            RoomOp::SeatLeave(_) => {
                let applied = self.seat_leave(user, at)?;
                Ok(Outcome::new(Bytes::from_static(b"{}"), applied))
            }
            RoomOp::SeatLock(l) => {
                let applied = self.seat_lock(user, at, l.seat, l.locked)?;
                Ok(Outcome::new(Bytes::from_static(b"{}"), applied))
            }
            RoomOp::Create(_) | RoomOp::Join(_) | RoomOp::Gift(_) => Err(rejected(
                ErrorCode::Internal,
                "this operation is run by the room actor",
            )),
            _ => Err(rejected(ErrorCode::UnknownOp, "not served yet")),
        }
    }

    /// A chat message from a member.
    ///
    /// # Errors
    /// `NOT_IN_ROOM`; `BAD_REQUEST` for empty or over-long text.
    pub fn chat(
        &mut self,
        user: &UserId,
        at: &SessionRef,
        text: String,
    ) -> Result<Applied, Rejected> {
        self.check_member(user, at)?;
        let chars = text.chars().count();
        if chars == 0 || chars > MAX_CHAT_TEXT_CHARS {
            return Err(rejected(
                ErrorCode::BadRequest,
                "text must be 1..=500 characters",
            ));
        }
        if !protocol::text::is_clean(&text, true) {
            return Err(rejected(
                ErrorCode::BadRequest,
                "text may not hold control or bidi characters (newline and tab are fine)",
            ));
        }
        let mut applied = Applied::default();
        self.push(
            &mut applied,
            Sequenced::Chat(ChatEvent {
                from: user.clone(),
                text,
            }),
        );
        Ok(applied)
    }

    /// A member takes seat `want`, or the first free one. Taking another seat moves the user.
    ///
    /// # Errors
    /// `NOT_IN_ROOM`; `BAD_REQUEST` for an index out of range; `SEAT_TAKEN`, `SEAT_LOCKED`,
    /// `NO_FREE_SEAT`.
    pub fn seat_take(
        &mut self,
        user: &UserId,
        at: &SessionRef,
        want: Option<u32>,
    ) -> Result<(u32, Applied), Rejected> {
        self.check_member(user, at)?;
        let current = self.seat_of(user);
        let target = match want {
            Some(i) => {
                let seat = self
                    .durable
                    .seats
                    .get(i as usize)
                    .ok_or(rejected(ErrorCode::BadRequest, "no such seat"))?;
                if current == Some(i) {
                    return Ok((i, Applied::default()));
                }
                if seat.user.is_some() {
                    return Err(rejected(ErrorCode::SeatTaken, "seat is taken"));
                }
                if seat.locked {
                    return Err(rejected(ErrorCode::SeatLocked, "seat is locked"));
                }
                i
            }
            None => {
                if let Some(i) = current {
                    return Ok((i, Applied::default()));
                }
                self.durable
                    .seats
                    .iter()
                    .position(|s| s.user.is_none() && !s.locked)
                    .ok_or(rejected(ErrorCode::NoFreeSeat, "no free seat"))? as u32
            }
        };
        let mut applied = Applied {
            durable_changed: true,
            ..Applied::default()
        };
        if let Some(old) = current {
            self.durable.seats[old as usize].user = None;
            let view = self.seat_view(old as usize);
            self.push(&mut applied, Sequenced::SeatUpdate(view));
        }
        self.durable.seats[target as usize].user = Some(user.clone());
        let view = self.seat_view(target as usize);
        self.push(&mut applied, Sequenced::SeatUpdate(view));
        Ok((target, applied))
    }

    /// A member leaves the seat it holds (no event when it holds none).
    ///
    /// # Errors
    /// `NOT_IN_ROOM`.
    pub fn seat_leave(&mut self, user: &UserId, at: &SessionRef) -> Result<Applied, Rejected> {
        self.check_member(user, at)?;
        let mut applied = Applied::default();
        if let Some(i) = self.seat_of(user) {
            self.durable.seats[i as usize].user = None;
            applied.durable_changed = true;
            let view = self.seat_view(i as usize);
            self.push(&mut applied, Sequenced::SeatUpdate(view));
        }
        Ok(applied)
    }

    /// The owner or an admin locks (or unlocks) seat `seat`. A locked seat cannot be taken;
    /// whoever sits on it stays. Setting the state it already has changes nothing.
    ///
    /// # Errors
    /// `NOT_IN_ROOM`; `FORBIDDEN` for a member who is neither the owner nor an admin;
    /// `BAD_REQUEST` for an index out of range.
    pub fn seat_lock(
        &mut self,
        user: &UserId,
        at: &SessionRef,
        seat: u32,
        locked: bool,
    ) -> Result<Applied, Rejected> {
        self.check_member(user, at)?;
        if self.durable.owner != *user && !self.durable.admins.contains(user) {
            return Err(rejected(
                ErrorCode::Forbidden,
                "only the owner or an admin locks seats",
            ));
        }
        let i = seat as usize;
        let s = self
            .durable
            .seats
            .get_mut(i)
            .ok_or(rejected(ErrorCode::BadRequest, "no such seat"))?;
        let mut applied = Applied::default();
        if s.locked != locked {
            s.locked = locked;
            applied.durable_changed = true;
            let view = self.seat_view(i);
            self.push(&mut applied, Sequenced::SeatUpdate(view));
        }
        Ok(applied)
    }

    /// Who receives a gift from `sender`: the listed members, or everyone seated (`"seats"`),
    /// without the sender, each once.
    ///
    /// # Errors
    /// `NOT_IN_ROOM` for a sender who is not a member; `BAD_REQUEST` for a bad count, an
    /// unknown target word, a recipient who is not in the room, or no recipient at all.
    pub fn gift_recipients(
        &self,
        sender: &UserId,
        at: &SessionRef,
        targets: &GiftTargets,
        count: u32,
    ) -> Result<Vec<UserId>, Rejected> {
        self.check_member(sender, at)?;
        if count == 0 || count > MAX_GIFT_COUNT {
            return Err(rejected(ErrorCode::BadRequest, "count must be 1..=9999"));
        }
        let mut out: Vec<UserId> = Vec::new();
        match targets {
            GiftTargets::Users(users) => {
                for u in users {
                    if u == sender || out.contains(u) {
                        continue;
                    }
                    if !self.members.contains_key(u) {
                        return Err(rejected(
                            ErrorCode::BadRequest,
                            "a recipient is not in the room",
                        ));
                    }
                    out.push(u.clone());
                }
            }
            GiftTargets::Seated(word) if word == "seats" => {
                for seat in &self.durable.seats {
                    if let Some(u) = &seat.user
                        && u != sender
                        && !out.contains(u)
                    {
                        out.push(u.clone());
                    }
                }
            }
            GiftTargets::Seated(_) => {
                return Err(rejected(
                    ErrorCode::BadRequest,
                    "`to` is a list of users or \"seats\"",
                ));
            }
        }
        if out.is_empty() {
            return Err(rejected(
                ErrorCode::BadRequest,
                "no recipient (the sender is not one)",
            ));
        }
        if out.len() > MAX_GIFT_RECIPIENTS {
            return Err(rejected(ErrorCode::BadRequest, "too many recipients"));
        }
        Ok(out)
    }

    /// Appends an externally decided sequenced event (a settled gift), assigning its seq.
    pub fn record(&mut self, ev: Sequenced) -> Applied {
        let mut applied = Applied::default();
        self.push(&mut applied, ev);
        applied
    }
}

fn json<T: Serialize>(v: &T) -> Bytes {
    Bytes::from(client::to_json(v))
}

#[cfg(test)]
#[path = "state/tests.rs"]
mod tests;
