//! What a room keeps across unloads and changes of owner: its info, roles, seats, pending
//! seat requests and invitations, chat mutes, bans, the audit list and the RTC reports. Every
//! time in here is unix milliseconds: a deadline is a time, so a new owner re-arms it from the
//! state it loads, never from a timer it inherited.

use std::collections::{BTreeMap, VecDeque};

use protocol::ErrorCode;
use protocol::UserId;
use protocol::client::manage::{MAX_COVER_BYTES, MAX_NOTICE_CHARS};
use protocol::client::room::{MAX_PASSWORD_CHARS, MAX_SEATS, MAX_TITLE_CHARS, MIN_SEATS};
use protocol::client::{Moderation, SeatMode};
use serde::{Deserialize, Serialize};

use super::{Rejected, rejected};

/// Most entries kept in a room's audit list (the oldest go first).
pub(crate) const AUDIT_LEN: usize = 200;
/// Most bans a room holds.
pub(crate) const MAX_BANS: usize = 1000;
/// Most chat mutes a room holds.
pub(crate) const MAX_MUTES: usize = 1000;
/// Most pending seat requests a room holds.
pub(crate) const MAX_REQUESTS: usize = 100;
/// Most seat invitations a room holds (expired ones kept for their answer included).
pub(crate) const MAX_INVITES: usize = 100;
/// How long an expired invitation is kept, so that accepting it says `REQUEST_EXPIRED`.
pub(crate) const EXPIRED_INVITE_KEEP_MS: u64 = 10 * 60 * 1000;
/// How long an RTC report about a user without a seat is kept (at least the publish
/// deadline): a webhook that arrives before its user takes a seat still counts.
pub(crate) const RTC_KEEP_MS: u64 = 60 * 1000;
/// Most RTC reports kept for users without a seat.
pub(crate) const MAX_RTC: usize = 1000;

/// The room's timing rules, from the shard's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// A seated user must publish audio within this long (0: no deadline).
    pub publish_deadline_ms: u64,
    /// A seat request expires after this long.
    pub request_ttl_ms: u64,
    /// An invitation expires after this long.
    pub invite_ttl_ms: u64,
    /// A member whose connection drops stays (away) this long before it leaves (0: at once).
    pub presence_grace_ms: u64,
}

impl Default for Rules {
    fn default() -> Self {
        Self {
            publish_deadline_ms: 10_000,
            request_ttl_ms: 60_000,
            invite_ttl_ms: 60_000,
            presence_grace_ms: 5_000,
        }
    }
}

/// One mic seat.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seat {
    /// Who sits there.
    pub user: Option<UserId>,
    /// Locked seats cannot be taken.
    pub locked: bool,
    /// Muted, by its user or by the owner or an admin.
    pub muted: bool,
    /// Muted by the owner or an admin: its user cannot unmute it, and it stays muted for the
    /// next user.
    #[serde(default)]
    pub admin_muted: bool,
    /// Whether the seated user's audio is published.
    #[serde(default)]
    pub publishing: bool,
    /// When the seat is freed unless its user publishes (unix ms).
    #[serde(default)]
    pub publish_by: Option<u64>,
}

/// A pending seat request (apply mode).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeatReq {
    /// The requester.
    pub user: UserId,
    /// The seat asked for.
    pub seat: Option<u32>,
    /// When it expires.
    pub expires_at: u64,
}

/// An invitation to a seat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invite {
    /// The invitee.
    pub user: UserId,
    /// Who invited.
    pub by: UserId,
    /// The seat offered.
    pub seat: Option<u32>,
    /// When it expires.
    pub expires_at: u64,
    /// Expired (kept a while so that a late accept is told so).
    #[serde(default)]
    pub expired: bool,
}

/// A chat mute or a ban.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Penalty {
    /// When it ends; `None` until lifted.
    pub until: Option<u64>,
    /// Who set it; `None` for the app's backend (the admin API).
    pub by: Option<UserId>,
}

impl Penalty {
    /// Whether it holds at `now`.
    pub fn holds(&self, now: u64) -> bool {
        self.until.is_none_or(|t| now < t)
    }
}

/// The last RTC report about a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RtcSeen {
    /// Publishing audio.
    pub publishing: bool,
    /// When it happened.
    pub at: u64,
}

/// A close by the app's backend: why, and when (unix ms).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlatformClose {
    /// The reason the backend gave (may be empty); joiners are told it.
    pub reason: String,
    /// When the room was closed.
    pub at: u64,
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
    /// The notice (announcement).
    #[serde(default)]
    pub notice: String,
    /// Cover image URL.
    #[serde(default)]
    pub cover: String,
    /// How members get a seat.
    #[serde(default)]
    pub seat_mode: SeatMode,
    /// Seat 0 is the owner's alone.
    #[serde(default)]
    pub host_seat: bool,
    /// The chat is muted for everyone but the owner and the admins (`room.update`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub chat_muted: bool,
    /// Slow mode: seconds between two chat lines of a member who is not staff (0: off).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub slow_mode: u32,
    /// The app-defined attributes (`room.attrs`); boxed, and absent when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attrs: Option<Box<std::collections::BTreeMap<String, serde_json::Value>>>,
    /// The room's like total (`like.send`). Saved with the room's next write, at the latest
    /// with the `room.likes` that announces it (docs/ARCHITECTURE.md, section 7, "Likes").
    #[serde(default, skip_serializing_if = "is_zero")]
    pub likes: u64,
    /// The pinned chat line (`chat.pin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<Box<protocol::client::PinnedLine>>,
    /// Closed by the owner or the app's backend: nobody joins until it is reopened.
    #[serde(default)]
    pub closed: bool,
    /// Closed by the app's backend (the admin API): the owner cannot reopen it. Boxed and
    /// absent for every other room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_closed: Option<Box<PlatformClose>>,
    /// Pending seat requests, oldest first.
    #[serde(default)]
    pub requests: Vec<SeatReq>,
    /// Invitations, pending or recently expired.
    #[serde(default)]
    pub invites: Vec<Invite>,
    /// Chat mutes by user.
    #[serde(default)]
    pub mutes: BTreeMap<UserId, Penalty>,
    /// Bans by user (ordered: the ban list pages by user id).
    #[serde(default)]
    pub bans: BTreeMap<UserId, Penalty>,
    /// The last moderation actions, oldest first.
    #[serde(default)]
    pub audit: VecDeque<Moderation>,
    /// The last RTC report per user.
    #[serde(default)]
    pub rtc: BTreeMap<UserId, RtcSeen>,
    /// Coins each robot has ordered in gifts here, over the room's life (its budget's count).
    /// Boxed and absent until a robot gifts: most rooms have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub robot_spent: Option<Box<BTreeMap<UserId, i64>>>,
    /// The members a planned move hands to the next owner: written only by the old owner's
    /// last save, taken out by the next owner before its first write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roster: Option<super::Roster>,
    /// The owner's region, from their profile when they create or join the room (the room
    /// directory's region filter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_region: Option<Box<str>>,
    /// The room rocket (absent until a gift fuels it). Boxed: most rooms never fuel one, and
    /// every room's actor carries its durable state.
    #[serde(default, skip_serializing_if = "super::rocket::is_idle")]
    pub rocket: Option<Box<super::rocket::Rocket>>,
    /// The room's PKs (absent until the first). Boxed, as the rocket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pk: Option<Box<super::pk::Pks>>,
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
        check_seat_count(seats)?;
        check_title(&title)?;
        if let Some(p) = &password {
            check_password(p)?;
        }
        Ok(Self {
            title,
            owner,
            admins: Vec::new(),
            password,
            seats: vec![Seat::default(); seats as usize],
            notice: String::new(),
            cover: String::new(),
            seat_mode: SeatMode::Free,
            host_seat: false,
            chat_muted: false,
            slow_mode: 0,
            attrs: None,
            likes: 0,
            pinned: None,
            closed: false,
            platform_closed: None,
            requests: Vec::new(),
            invites: Vec::new(),
            mutes: BTreeMap::new(),
            bans: BTreeMap::new(),
            audit: VecDeque::new(),
            rtc: BTreeMap::new(),
            robot_spent: None,
            roster: None,
            owner_region: None,
            rocket: None,
            pk: None,
        })
    }

    /// Appends to the audit list, dropping the oldest entry past `AUDIT_LEN`.
    pub fn audit(&mut self, entry: Moderation) {
        if self.audit.len() >= AUDIT_LEN {
            self.audit.pop_front();
        }
        self.audit.push_back(entry);
    }
}

pub(super) fn check_seat_count(seats: u32) -> Result<(), Rejected> {
    if (MIN_SEATS..=MAX_SEATS).contains(&seats) {
        Ok(())
    } else {
        Err(rejected(ErrorCode::BadRequest, "seats must be 1..=20"))
    }
}

pub(super) fn check_title(title: &str) -> Result<(), Rejected> {
    if title.chars().count() > MAX_TITLE_CHARS {
        return Err(rejected(ErrorCode::BadRequest, "title is too long"));
    }
    if !protocol::text::is_clean(title, false) {
        return Err(rejected(
            ErrorCode::BadRequest,
            "title may not hold control or bidi characters",
        ));
    }
    Ok(())
}

pub(super) fn check_password(p: &str) -> Result<(), Rejected> {
    if p.is_empty() || p.chars().count() > MAX_PASSWORD_CHARS || !protocol::text::is_clean(p, false)
    {
        return Err(rejected(
            ErrorCode::BadRequest,
            "password must be 1..=64 printable chars",
        ));
    }
    Ok(())
}

pub(super) fn check_notice(n: &str) -> Result<(), Rejected> {
    if n.chars().count() > MAX_NOTICE_CHARS || !protocol::text::is_clean(n, true) {
        return Err(rejected(
            ErrorCode::BadRequest,
            "notice must be at most 500 printable characters",
        ));
    }
    Ok(())
}

/// A cover is empty or an `http(s)://` URL without spaces or control characters.
pub(super) fn check_cover(c: &str) -> Result<(), Rejected> {
    let ok = c.is_empty()
        || (c.len() <= MAX_COVER_BYTES
            && (c.starts_with("https://") || c.starts_with("http://"))
            && c.chars().all(|ch| ch.is_ascii_graphic()));
    if ok {
        Ok(())
    } else {
        Err(rejected(
            ErrorCode::BadRequest,
            "cover must be an http(s) URL of at most 512 printable ASCII bytes",
        ))
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}
