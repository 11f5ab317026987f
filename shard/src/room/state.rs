//! The room's rules as a pure state machine: commands in, sequenced events and presence out.
//!
//! No async, no clock, no I/O: the actor in `room.rs` receives, applies (passing the time in
//! unix ms), persists and publishes. The rules are split by subject: seats (`seats`), room
//! management (`manage`), moderation (`moderation`), what falls due when (`deadlines`) and a
//! gift's recipients (`recipients`), among others; this file keeps membership, the rights
//! every rule checks, and the dispatch of `RoomState::apply`.

mod attrs;
mod deadlines;
mod directory;
mod durable;
mod likes;
mod manage;
mod members;
mod messages;
mod moderation;
mod offers;
mod outcome;
mod pins;
mod pk;
mod pk_invite;
mod pk_link;
mod recipients;
mod reports;
mod rocket;
mod seats;
mod standing;
mod streaks;

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use protocol::client::{
    self, Answered, ChatSent, CustomSent, InviteView, LikeSent, Moderation, Pending, Profile,
    RequestView, RoomOp, SeatTaken, SeatUpdate, SeatView, Snapshot,
};
use protocol::link::{LeaveReason, Membership, RoomCmd, RtcEvent};
use protocol::{Epoch, ErrorCode, NodeId, RoomId, Seq, SessionId, UserId};
use serde::Serialize;

pub use durable::{Durable, Invite, Penalty, PlatformClose, RtcSeen, Rules, Seat, SeatReq};
use members::Member;
pub use members::{Roster, RosterEntry, shared_profile};
pub use outcome::{Applied, Direct, Evicted, Joined, Outcome, Presence, PresencePlan, Sequenced};
pub use pk::{Pk, Pks};
pub use pk_invite::{MAX_PK_INVITES, PK_REINVITE_MS};
pub use pk_link::{LINK_GRACE_MS, Versus};
pub use reports::Filed;
pub use rocket::{Launch, Rocket, RocketLevel, RocketRules};
pub use standing::{Badges, MAX_VIP_LEVELS, TargetSpend, VipRules};
pub use streaks::{GiftMark, GiftPublished, GiftRules};

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
    pub msg: Cow<'static, str>,
}

/// A rejection with a fixed message.
pub(crate) const fn rejected(code: ErrorCode, msg: &'static str) -> Rejected {
    Rejected {
        code,
        msg: Cow::Borrowed(msg),
    }
}

/// Whether `cmd` can create its room when the room does not exist: `room.create`, and a
/// client's `room.join` with `auto_create` (see [`creation`]). A room runtime started for any
/// other command to a room without a snapshot answers `ROOM_NOT_FOUND` without claiming the
/// room: an unknown id costs no lease, fence or ledger write.
pub fn may_create(cmd: &RoomCmd, auto_create: bool) -> bool {
    match cmd {
        RoomCmd::Op(RoomOp::Create(_)) => true,
        RoomCmd::Op(RoomOp::Join(_)) => auto_create,
        _ => false,
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
            let mut d = Durable::new(user.clone(), c.title.clone(), c.seats, c.password.clone())?;
            d.seat_mode = c.seat_mode;
            d.host_seat = c.host_seat;
            Ok(Some(d))
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

/// A user's standing in the room, for the rights every rule checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Role {
    /// Anyone else.
    Member,
    /// An admin.
    Admin,
    /// The owner.
    Owner,
}

/// The gateway robots are members through: no such gateway exists (the name is not a valid
/// node id), so nothing is ever sent to it, and it counts for no fan-out.
pub const ROBOT_GATEWAY: &str = "@robots";

fn is_robot_gateway(gw: &NodeId) -> bool {
    gw.as_str() == ROBOT_GATEWAY
}

/// How many RTC event ids a room remembers to drop duplicates.
const RTC_IDS_KEPT: usize = 256;

/// How long a kick of an away member holds against a gateway's trusted rejoin: longer than a
/// move takes to hand its members over.
pub const KICK_MEMORY_MS: u64 = 60_000;

/// A live room: durable state plus members and the event position.
#[derive(Debug)]
pub struct RoomState {
    id: RoomId,
    durable: Durable,
    rules: Rules,
    /// Every member, connected or away.
    members: HashMap<UserId, Member>,
    /// The away members by the end of their grace window.
    away: BTreeSet<(u64, UserId)>,
    /// When members' guards end, with the member: the `guard` badge that ends is shown with
    /// `member.update` (`standing.rs`). Entries of members who left go when their time comes.
    guard_ends: BTreeSet<(u64, UserId)>,
    /// How many members are robots (kept with `members`: snapshots and the robots' own
    /// presence rule read it without scanning the room).
    robot_members: usize,
    /// Members per gateway: one copy of each event goes to each gateway listed here.
    gateways: HashMap<NodeId, usize>,
    /// The RTC event ids applied lately: a provider's retry is one event.
    rtc_ids: VecDeque<String>,
    /// Members kicked while away (no connection to tell), with when: a gateway's trusted
    /// rejoin of one, made for a move the kick happened in, is refused (`room.left`
    /// `kicked`), not let back in. Kept [`KICK_MEMORY_MS`] (not durable).
    /// Boxed: empty in almost every room, and the room's actor carries its state.
    #[allow(
        clippy::box_collection,
        reason = "one pointer in place of an empty map's 48 bytes in every room's actor"
    )]
    kicked_away: Option<Box<HashMap<UserId, u64>>>,
    /// Gift combos and the storm budget (not durable).
    streaks: streaks::Streaks,
    gift_rules: GiftRules,
    rocket_rules: Arc<RocketRules>,
    vip_rules: Arc<VipRules>,
    /// Likes not announced yet (boxed: absent in most rooms most of the time).
    likes: Option<Box<likes::PendingLikes>>,
    /// In slow mode: when each member who is not staff last chatted (unix ms), only those
    /// within the interval. Boxed, and absent while slow mode is off.
    #[allow(
        clippy::box_collection,
        reason = "one pointer in place of an empty map's 48 bytes in every room's actor"
    )]
    last_chat: Option<Box<HashMap<UserId, u64>>>,
    /// What this epoch remembers of its chat lines and reports (boxed: absent until the first
    /// of either).
    recent: Option<Box<Recent>>,
    epoch: Epoch,
    seq: Seq,
}

/// What a room remembers of this epoch, in memory only: its latest chat lines (for
/// `chat.recall` and reports) and the reports of the last ten minutes (for duplicates and each
/// reporter's allowance), each oldest first.
#[derive(Debug, Default)]
struct Recent {
    lines: VecDeque<messages::ChatLine>,
    reports: VecDeque<reports::Remembered>,
}

impl RoomState {
    /// A room at the start of `epoch`, with no members.
    pub fn new(id: RoomId, durable: Durable, epoch: Epoch, rules: Rules) -> Self {
        Self {
            id,
            durable,
            rules,
            members: HashMap::new(),
            away: BTreeSet::new(),
            guard_ends: BTreeSet::new(),
            robot_members: 0,
            gateways: HashMap::new(),
            rtc_ids: VecDeque::new(),
            kicked_away: None,
            streaks: streaks::Streaks::default(),
            gift_rules: GiftRules::default(),
            rocket_rules: Arc::default(),
            vip_rules: Arc::default(),
            likes: None,
            last_chat: None,
            recent: None,
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

    /// How many members are robots.
    pub fn robot_count(&self) -> usize {
        self.robot_members
    }

    /// Whether `user` gets per-member presence in a big room: the owner, admins and seat
    /// holders.
    pub fn is_privileged(&self, user: &UserId) -> bool {
        self.role(user) > Role::Member || self.seat_of(user).is_some()
    }

    pub(crate) fn role(&self, user: &UserId) -> Role {
        if self.durable.owner == *user {
            Role::Owner
        } else if self.durable.admins.contains(user) {
            Role::Admin
        } else {
            Role::Member
        }
    }

    /// The owner and the admins who are members now: who sees seat requests.
    fn staff_present(&self) -> Vec<UserId> {
        std::iter::once(&self.durable.owner)
            .chain(&self.durable.admins)
            .filter(|u| self.member(u).is_some())
            .cloned()
            .collect()
    }

    /// `FORBIDDEN` unless `user` is the owner or an admin.
    fn require_staff(&self, user: &UserId, what: &'static str) -> Result<(), Rejected> {
        if self.role(user) >= Role::Admin {
            Ok(())
        } else {
            Err(rejected(ErrorCode::Forbidden, what))
        }
    }

    /// `FORBIDDEN` unless `user` is the owner.
    fn require_owner(&self, user: &UserId, what: &'static str) -> Result<(), Rejected> {
        if self.role(user) == Role::Owner {
            Ok(())
        } else {
            Err(rejected(ErrorCode::Forbidden, what))
        }
    }

    /// The owner or an admin acting on `target`: an admin acts on plain members only, nobody
    /// on themselves.
    fn require_over(&self, actor: &UserId, target: &UserId) -> Result<(), Rejected> {
        self.require_staff(actor, "only the owner or an admin may do this")?;
        if actor == target {
            return Err(rejected(ErrorCode::BadRequest, "not on yourself"));
        }
        if self.role(target) >= self.role(actor) || self.role(target) == Role::Owner {
            return Err(rejected(
                ErrorCode::Forbidden,
                "an admin cannot act on the owner or another admin",
            ));
        }
        Ok(())
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
        let d = &self.durable;
        Snapshot {
            room: self.id.clone(),
            title: d.title.clone(),
            owner: d.owner.clone(),
            admins: d.admins.clone(),
            locked: d.password.is_some(),
            notice: d.notice.clone(),
            cover: d.cover.clone(),
            seat_mode: d.seat_mode,
            host_seat: d.host_seat,
            chat_muted: d.chat_muted,
            slow_mode: d.slow_mode,
            attrs: self.attrs(),
            likes: d.likes,
            seats: (0..d.seats.len()).map(|i| self.seat_view(i)).collect(),
            members: self.members.len() as u64,
            robots: self.robot_members as u64,
            pk: self.pk_view(true),
            pinned: d.pinned.as_deref().cloned(),
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
            admin_muted: s.admin_muted,
            publishing: s.publishing,
            publish_by: s.publish_by,
            robot: s.user.as_ref().is_some_and(UserId::is_robot),
        }
    }

    fn push(&mut self, applied: &mut Applied, ev: Sequenced) {
        self.seq += 1;
        applied.events.push((self.seq, ev));
    }

    /// A volatile event named `ev` for `to`.
    fn direct<T: Serialize>(&self, applied: &mut Applied, to: Vec<UserId>, ev: &str, d: &T) {
        if to.is_empty() {
            return;
        }
        let frame = client::encode_event(ev, Some(&self.id), None, d);
        applied.direct.push(Direct { to, frame });
    }

    /// Adds `user` (connected at `at`) as a member, without a profile ([`RoomState::join_as`]).
    ///
    /// # Errors
    /// As [`RoomState::join_as`].
    pub fn join(
        &mut self,
        user: &UserId,
        at: SessionRef,
        password: Option<&str>,
        now: u64,
    ) -> Result<Joined, Rejected> {
        self.join_as(user, at, password, None, now)
    }

    /// Adds `user` (connected at `at`, showing `profile`) as a member at `now`; a member
    /// away within its grace window comes back silently.
    ///
    /// # Errors
    /// As [`RoomState::admits`]; then `ROOM_LOCKED` when the room has a password and
    /// `password` is not it (the owner, admins and members already in the room need none).
    pub fn join_as(
        &mut self,
        user: &UserId,
        at: SessionRef,
        password: Option<&str>,
        profile: Option<Arc<Profile>>,
        now: u64,
    ) -> Result<Joined, Rejected> {
        self.admits(user, now)?;
        // A member already in the room (resuming on its connection, replacing it, or back
        // within its grace window) stays whatever the password became meanwhile.
        if let Some(p) = &self.durable.password
            && self.role(user) == Role::Member
            && !self.is_member(user)
            && password != Some(p.as_str())
        {
            return Err(rejected(
                ErrorCode::RoomLocked,
                "room is locked: wrong password",
            ));
        }
        // Back by a join of its own: a kick while away no longer holds against a rejoin.
        self.forget_kick(user);
        Ok(self.add(user, at, profile, now))
    }

    /// Forgets a kick of `user` while away; when it was kicked, if it was.
    fn forget_kick(&mut self, user: &UserId) -> Option<u64> {
        let kicked = self.kicked_away.as_mut()?;
        let at = kicked.remove(user);
        if kicked.is_empty() {
            self.kicked_away = None;
        }
        at
    }

    /// Adds `user` back after a handoff: a trusted join (the gateway vouches the user was a
    /// member at the previous owner), so no password check. A member of the roster the
    /// previous owner handed over comes back silently.
    ///
    /// # Errors
    /// As [`RoomState::admits`]: a ban or a `room.close` made while the user was away (during
    /// the move) holds against its rejoin as against any join.
    pub fn rejoin(
        &mut self,
        user: &UserId,
        at: SessionRef,
        profile: Option<Arc<Profile>>,
        now: u64,
    ) -> Result<Joined, Rejected> {
        self.admits(user, now)?;
        if let Some(at_ms) = self.forget_kick(user)
            && !self.is_member(user)
            && now.saturating_sub(at_ms) <= KICK_MEMORY_MS
        {
            // Kicked while away during the move: the gateway's vouching is out of date. Its
            // refusal tells the client `room.left` `kicked` (as for a ban).
            return Err(rejected(
                ErrorCode::Banned,
                "kicked from this room while away",
            ));
        }
        Ok(self.add(user, at, profile, now))
    }

    /// Whether `user` may join at `now`, password aside.
    ///
    /// # Errors
    /// `ROOM_CLOSED` when the owner or the platform closed the room (with the platform's
    /// reason); `BANNED` while a ban holds.
    pub fn admits(&self, user: &UserId, now: u64) -> Result<(), Rejected> {
        if self.durable.closed {
            return Err(match &self.durable.platform_closed {
                None => rejected(ErrorCode::RoomClosed, "the room is closed by its owner"),
                Some(c) if c.reason.is_empty() => {
                    rejected(ErrorCode::RoomClosed, "the room is closed by the platform")
                }
                Some(c) => Rejected {
                    code: ErrorCode::RoomClosed,
                    msg: Cow::Owned(format!("the room is closed by the platform: {}", c.reason)),
                },
            });
        }
        if let Some(ban) = self.durable.bans.get(user)
            && ban.holds(now)
        {
            return Err(Rejected {
                code: ErrorCode::Banned,
                msg: Cow::Owned(match ban.until {
                    Some(t) => format!("banned from this room until {t} (unix ms)"),
                    None => "banned from this room".to_owned(),
                }),
            });
        }
        Ok(())
    }

    /// Removes `user` if its membership is the connection `at` (a stale connection's leave
    /// does not remove the connection that replaced it). Frees the user's seat and drops its
    /// pending request and invitation.
    ///
    /// A member away within its grace window has no connection: any leave of that user ends
    /// its membership (the user left from elsewhere, e.g. joined another room).
    ///
    /// # Errors
    /// `NOT_IN_ROOM` when `user` is not a member through `at` (nor an away member).
    pub fn leave(
        &mut self,
        user: &UserId,
        at: &SessionRef,
        reason: &'static str,
    ) -> Result<Applied, Rejected> {
        if self.member(user) != Some(at) && !self.is_away(user) {
            return Err(rejected(ErrorCode::NotInRoom, "not in this room"));
        }
        let mut applied = Applied::default();
        self.take_out(
            &mut applied,
            user,
            Some(user),
            seats::Cause::Own,
            "left_room",
        );
        applied.presence.push(Presence::Leave(user.clone(), reason));
        Ok(applied)
    }

    /// Takes `user` out of the room: seat freed (with `by`, `cause`, `why`), pending request
    /// and invitation dropped, membership removed. Returns the connection it had.
    fn take_out(
        &mut self,
        applied: &mut Applied,
        user: &UserId,
        by: Option<&UserId>,
        cause: seats::Cause,
        why: &'static str,
    ) -> Option<Member> {
        let m = self.remove_member(user);
        if let Some(i) = self.seat_of(user) {
            self.free_seat(applied, i as usize, by, cause, Some(why));
        }
        self.drop_pending(applied, user);
        m
    }

    fn check_member(&self, user: &UserId, at: &SessionRef) -> Result<(), Rejected> {
        if self.member(user) == Some(at) {
            Ok(())
        } else {
            Err(rejected(ErrorCode::NotInRoom, "join the room first"))
        }
    }

    /// `USER_NOT_IN_ROOM` unless `user` is a member.
    fn check_target_member(&self, user: &UserId) -> Result<(), Rejected> {
        if self.members.contains_key(user) {
            Ok(())
        } else {
            Err(rejected(
                ErrorCode::UserNotInRoom,
                "that user is not in the room",
            ))
        }
    }

    /// Applies a member's room operation at `now` (unix ms): the reply and the change to
    /// publish. A new room operation gets its rule here. A refused operation changes nothing.
    ///
    /// # Errors
    /// The rule's rejection; `INTERNAL` for the operations the actor runs itself (create,
    /// join, gift), which never come here.
    pub fn apply(
        &mut self,
        user: &UserId,
        at: &SessionRef,
        op: &RoomOp,
        now: u64,
    ) -> Result<Outcome, Rejected> {
        self.apply_with(user, at, op, TargetSpend::NotRead, now)
    }

    /// [`Self::apply`], with the lifetime spend the actor read for the operation's targets
    /// whose spend the room does not know ([`Self::spend_reads`]), for the VIP protection.
    ///
    /// # Errors
    /// As [`Self::apply`].
    pub fn apply_with(
        &mut self,
        user: &UserId,
        at: &SessionRef,
        op: &RoomOp,
        spend: TargetSpend,
        now: u64,
    ) -> Result<Outcome, Rejected> {
        if let RoomOp::RoomOpen(_) = op {
            // The one operation of a non-member: the owner reopens a closed room.
            return self.room_open(user, now).map(Outcome::empty);
        }
        self.check_member(user, at)?;
        let taken =
            |(seat, applied): (u32, Applied)| Outcome::new(json(&SeatTaken { seat }), applied);
        let pending = |(expires_at, applied): (u64, Applied)| {
            Outcome::new(json(&Pending { expires_at }), applied)
        };
        Ok(match op {
            RoomOp::Leave(_) => {
                let applied = self.leave(user, at, LeaveReason::Left.as_str())?;
                Outcome {
                    membership: Some(Membership::Left),
                    ..Outcome::empty(applied)
                }
            }
            RoomOp::Chat(c) => {
                let applied = self.chat(user, c, now)?;
                let seq = applied.events.last().map_or(0, |(s, _)| *s);
                Outcome::new(json(&ChatSent { seq }), applied)
            }
            RoomOp::ChatRecall(c) => Outcome::empty(self.chat_recall(user, c.seq, now)?),
            RoomOp::Custom(c) => {
                let applied = self.custom(Some(user), c, now)?;
                let seq = applied.events.last().map(|(s, _)| *s);
                Outcome::new(json(&CustomSent { seq }), applied)
            }
            RoomOp::Like(l) => {
                let total = self.like(user, l.count)?;
                Outcome::new(json(&LikeSent { total }), Applied::default())
            }
            RoomOp::SeatTake(t) => taken(self.seat_take(user, t.seat, now)?),
            RoomOp::SeatLeave(_) => Outcome::empty(self.seat_leave(user)),
            RoomOp::SeatMove(m) => taken(self.seat_move(user, m.user.as_ref(), m.seat, m.swap)?),
            RoomOp::SeatLock(l) => Outcome::empty(self.seat_lock(user, Some(l.seat), l.locked)?),
            RoomOp::SeatLockAll(l) => Outcome::empty(self.seat_lock(user, None, l.locked)?),
            RoomOp::SeatMute(m) => Outcome::empty(self.seat_mute(user, m.seat, m.muted, &spend)?),
            RoomOp::SeatKick(k) => Outcome::empty(self.seat_kick(user, &k.user, &spend, now)?),
            RoomOp::SeatCount(c) => Outcome::empty(self.seat_count(user, c.seats, &spend)?),
            RoomOp::SeatRequest(r) => pending(self.seat_request(user, r.seat, now)?),
            RoomOp::SeatRequestCancel(_) => Outcome::empty(self.seat_request_cancel(user)?),
            RoomOp::SeatRequests(_) => {
                let list = self.seat_requests(user, now)?;
                Outcome::new(json(&list), Applied::default())
            }
            RoomOp::SeatApprove(a) => taken(self.seat_approve(user, &a.user, now)?),
            RoomOp::SeatReject(a) => Outcome::empty(self.seat_reject(user, &a.user)?),
            RoomOp::SeatInvite(i) => pending(self.seat_invite(user, &i.user, i.seat, now)?),
            RoomOp::SeatInviteAccept(_) => taken(self.invite_accept(user, now)?),
            RoomOp::SeatInviteReject(_) => Outcome::empty(self.invite_reject(user, now)?),
            RoomOp::MicPublishing(m) => Outcome::empty(self.mic_publishing(user, m.on, now)?),
            RoomOp::RoomUpdate(u) => Outcome::empty(self.room_update(user, u, &spend)?),
            RoomOp::RoomAttrs(a) => Outcome::empty(self.room_attrs(Some(user), a)?),
            RoomOp::RoomLock(l) => Outcome::empty(self.room_lock(user, l.password.as_deref())?),
            RoomOp::RoomAdmin(a) => Outcome::empty(self.room_admin(user, &a.user, a.admin, now)?),
            RoomOp::RoomTransfer(t) => Outcome::empty(self.room_transfer(user, &t.user, now)?),
            RoomOp::RoomClose(_) => Outcome::empty(self.room_close(user, now)?),
            RoomOp::ChatMute(m) => {
                Outcome::empty(self.chat_mute(user, &m.user, m.seconds, &spend, now)?)
            }
            RoomOp::ChatUnmute(m) => Outcome::empty(self.chat_unmute(user, &m.user, now)?),
            RoomOp::RoomKick(k) => {
                Outcome::empty(self.room_kick(user, &k.user, k.ban_seconds, &spend, now)?)
            }
            RoomOp::RoomBan(b) => {
                Outcome::empty(self.room_ban(user, &b.user, b.seconds, &spend, now)?)
            }
            RoomOp::RoomUnban(b) => Outcome::empty(self.room_unban(user, &b.user, now)?),
            RoomOp::RoomBans(b) => {
                let page = self.room_bans(user, b.cursor.as_ref(), b.limit, now)?;
                Outcome::new(json(&page), Applied::default())
            }
            RoomOp::PkStart(p) => {
                let (started, applied) = self.pk_start(Some(user), p, now)?;
                Outcome::new(json(&started), applied)
            }
            RoomOp::PkStop(_) => Outcome::empty(self.pk_stop(Some(user), now)?),
            RoomOp::MemberList(l) => {
                let page = self.member_list(l.cursor.as_deref(), l.limit, now)?;
                Outcome::new(json(&page), Applied::default())
            }
            RoomOp::RoomOpen(_)
            | RoomOp::Create(_)
            | RoomOp::Join(_)
            | RoomOp::Gift(_)
            | RoomOp::Report(_)
            | RoomOp::ChatPin(_) => {
                return Err(rejected(
                    ErrorCode::Internal,
                    "this operation is run by the room actor",
                ));
            }
            RoomOp::PkInvite(_) | RoomOp::PkAccept(_) | RoomOp::PkDecline(_) => {
                // Two rooms' steps: the gateway carries each to its room (`RoomCmd::Pk`).
                return Err(rejected(
                    ErrorCode::Internal,
                    "this operation is run by the gateway",
                ));
            }
        })
    }

    /// Applies an RTC provider's report about `user` (a verified webhook) at `now`: the same
    /// event id twice is once, an event older than the last one applied changes nothing, and
    /// a time in the future counts as now (a bad clock cannot pin a seat's state).
    pub fn rtc(&mut self, user: &UserId, ev: &RtcEvent, now: u64) -> Applied {
        if self.rtc_ids.contains(&ev.id) {
            return Applied::default();
        }
        if self.rtc_ids.len() >= RTC_IDS_KEPT {
            self.rtc_ids.pop_front();
        }
        self.rtc_ids.push_back(ev.id.clone());
        self.rtc_report(user, ev.kind, ev.at_ms.min(now), seats::Cause::Server)
    }

    /// Counts `coins` against robot `user`'s gift budget (durable, so a new owner's robots
    /// do not spend it again).
    pub fn robot_spend(&mut self, user: &UserId, coins: i64) -> Applied {
        let spent = self
            .durable
            .robot_spent
            .get_or_insert_with(Box::default)
            .entry(user.clone())
            .or_default();
        *spent = spent.saturating_add(coins);
        Applied::changed()
    }

    /// Frees the seats robots hold without being members (their runtime stopped on another
    /// owner, or their configuration went away): cause `server`, reason `robot_left`.
    pub fn free_absent_robot_seats(&mut self) -> Applied {
        let mut applied = Applied::default();
        for i in 0..self.durable.seats.len() {
            if let Some(u) = &self.durable.seats[i].user
                && u.is_robot()
                && !self.members.contains_key(u)
            {
                self.free_seat(
                    &mut applied,
                    i,
                    None,
                    seats::Cause::Server,
                    Some("robot_left"),
                );
            }
        }
        applied
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

/// The view of a request, for events and lists.
fn request_view(r: &SeatReq) -> RequestView {
    RequestView {
        user: r.user.clone(),
        seat: r.seat,
        expires_at: r.expires_at,
    }
}

/// The view of an invitation, for the invitee's event.
fn invite_view(i: &Invite) -> InviteView {
    InviteView {
        user: i.user.clone(),
        by: i.by.clone(),
        seat: i.seat,
        expires_at: i.expires_at,
    }
}

/// How a request or invitation ended.
fn answered(user: &UserId, state: &str, by: Option<&UserId>, seat: Option<u32>) -> Answered {
    Answered {
        user: user.clone(),
        state: state.to_owned(),
        by: by.cloned(),
        seat,
    }
}

#[cfg(test)]
#[path = "state/tests.rs"]
mod tests;

#[cfg(test)]
#[path = "state/tests_rights.rs"]
mod tests_rights;

#[cfg(test)]
#[path = "state/tests_rules.rs"]
mod tests_rules;

#[cfg(test)]
#[path = "state/tests_members.rs"]
mod tests_members;

#[cfg(test)]
#[path = "state/tests_streaks.rs"]
mod tests_streaks;

#[cfg(test)]
#[path = "state/tests_rocket.rs"]
mod tests_rocket;

#[cfg(test)]
#[path = "state/tests_pk.rs"]
mod tests_pk;
#[cfg(test)]
#[path = "state/tests_pk_link.rs"]
mod tests_pk_link;

#[cfg(test)]
#[path = "state/tests_swap.rs"]
mod tests_swap;

#[cfg(test)]
#[path = "state/tests_custom.rs"]
mod tests_custom;

#[cfg(test)]
#[path = "state/tests_likes.rs"]
mod tests_likes;

#[cfg(test)]
#[path = "state/tests_chat.rs"]
mod tests_chat;

#[cfg(test)]
#[path = "state/tests_backend.rs"]
mod tests_backend;

#[cfg(test)]
#[path = "state/tests_reports.rs"]
mod tests_reports;
