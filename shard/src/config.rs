//! Shard settings: lease timing, inbox sizes, history and presence bounds, with their reasons.

use std::sync::Arc;
use std::time::Duration;

use crate::gifts::Catalog;

/// Lease time-to-live. 10 s by default; renewals run at a third of it (docs/ARCHITECTURE.md, section 4).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);
/// Commands queued per room before new ones are refused with `UNAVAILABLE` (Reject policy):
/// a second of chat in a very busy room.
pub const DEFAULT_ROOM_INBOX: usize = 1024;
/// A room with no members unloads after this long: long enough to ride out a reconnect.
pub const DEFAULT_IDLE_UNLOAD: Duration = Duration::from_secs(60);
/// Events kept per room for resume: a minute of a lively room.
pub const DEFAULT_HISTORY_EVENTS: usize = 1000;
/// Age after which events leave the resume history.
pub const DEFAULT_HISTORY_AGE: Duration = Duration::from_secs(300);
/// Up to this many members everyone gets `member.join`/`member.leave`; above it listeners get a
/// coalesced `member.count` instead, so presence never costs O(members²).
pub const DEFAULT_PRESENCE_FULL_MAX: usize = 100;
/// Listeners of big rooms get `member.count` at most this often.
pub const DEFAULT_MEMBER_COUNT_INTERVAL: Duration = Duration::from_secs(1);

/// Planned handoffs per second: a drain of a node with 1,000 rooms takes 20 s, and gateways
/// never see a burst of moved sessions.
pub const DEFAULT_HANDOFF_RATE_PER_SEC: u32 = 50;

/// Default [`ShardConfig::orphan_sweep`].
pub const DEFAULT_ORPHAN_SWEEP: Duration = Duration::from_secs(60);
/// A seated user must publish audio within this long, or the seat is freed.
pub const DEFAULT_PUBLISH_DEADLINE: Duration = Duration::from_secs(10);
/// Default grace window of a member whose connection dropped.
pub const DEFAULT_PRESENCE_GRACE: Duration = Duration::from_secs(5);
/// How often the robot reconcile runs.
pub const DEFAULT_ROBOT_RECONCILE: Duration = Duration::from_secs(2);
/// A seat request or invitation expires after this long.
pub const DEFAULT_SEAT_OFFER_TTL: Duration = Duration::from_secs(60);

/// Default [`ShardConfig::max_rooms_per_user`].
pub const DEFAULT_MAX_ROOMS_PER_USER: u32 = 100;
/// Default [`ShardConfig::room_creates_per_min`].
pub const DEFAULT_ROOM_CREATES_PER_MIN: u32 = 20;
/// Default [`ShardConfig::room_retention`]: 30 days.
pub const DEFAULT_ROOM_RETENTION: Duration = Duration::from_secs(30 * 86_400);
/// Default [`ShardConfig::retention_sweep`].
pub const DEFAULT_RETENTION_SWEEP: Duration = Duration::from_secs(600);

/// Default [`ShardConfig::directory_publish`].
pub const DEFAULT_DIRECTORY_PUBLISH: Duration = Duration::from_secs(1);
/// Default [`ShardConfig::directory_stale`]: five missed publish ticks.
pub const DEFAULT_DIRECTORY_STALE: Duration = Duration::from_secs(5);

/// How a shard runs its rooms.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    /// Lease TTL; renewals every TTL/3.
    pub lease_ttl: Duration,
    /// Per-room inbox bound.
    pub room_inbox: usize,
    /// Unload a room after this long without members.
    pub idle_unload: Duration,
    /// Resume history bound by count.
    pub history_events: usize,
    /// Resume history bound by age.
    pub history_age: Duration,
    /// In a cluster, the shortest time between two calls that write the rooms' changes to
    /// Redis: what queues meanwhile, from all rooms, shares one call; a change waits at most
    /// this long, and none after a quiet spell (zero: a call as soon as the last is answered).
    pub history_write_interval: Duration,
    /// Room size up to which every member gets per-member presence.
    pub presence_full_max: usize,
    /// A member whose connection drops (or whose room moved) stays, away, this long before
    /// it leaves: a return within it shows no presence (zero: it leaves at once).
    pub presence_grace: Duration,
    /// Coalescing interval of `member.count` in big rooms.
    pub member_count_interval: Duration,
    /// Shortest time between two `room.likes` of a room (the likes between share one).
    pub likes_interval: Duration,
    /// Joining a missing room creates it with the joiner as owner (standalone default).
    pub auto_create: bool,
    /// Write every sequenced event to the fenced history store before publishing it, so
    /// resumes survive a change of owner (cluster mode); standalone keeps history in memory.
    pub durable_history: bool,
    /// Planned handoffs started per second (the rebalance throttle).
    pub handoff_rate_per_sec: u32,
    /// Gifts, revenue split and lucky table.
    pub catalog: Arc<Catalog>,
    /// How often a shard looks for rooms whose sagas a crashed owner left open and that
    /// nobody has loaded since, and loads them (their load settles or voids those sagas).
    pub orphan_sweep: Duration,
    /// A seated user must publish audio within this long (reported by the client or the RTC
    /// provider), or the server frees the seat; zero turns the deadline off.
    pub publish_deadline: Duration,
    /// A seat request expires after this long.
    pub seat_request_ttl: Duration,
    /// How often the robot reconcile compares the robot runtimes here with the stored
    /// configurations.
    pub robot_reconcile: Duration,
    /// A seat invitation expires after this long.
    pub seat_invite_ttl: Duration,
    /// Rooms one user may have created that are still stored (across the cluster: the
    /// snapshot store counts them); one more creation answers `QUOTA_EXCEEDED`. 0: no cap.
    pub max_rooms_per_user: u32,
    /// Room creations (`room.create`, auto-creating joins) one user may start per minute on
    /// this shard (a token bucket of this size refilled over a minute); more answer
    /// `QUOTA_EXCEEDED`. 0: no limit.
    pub room_creates_per_min: u32,
    /// A room nobody has joined for this long is removed from durable storage (never one
    /// that runs, or has unfinished gifts or a robot configuration). Zero keeps rooms forever.
    pub room_retention: Duration,
    /// How often a shard looks for rooms past their retention (among those placed on it).
    pub retention_sweep: Duration,
    /// How often the shard publishes its rooms' changed directory summaries (one pipeline
    /// for all of them), so at most once per room per interval.
    pub directory_publish: Duration,
    /// Directory entries of a node that has not published for this long are not listed, and
    /// are swept.
    pub directory_stale: Duration,
    /// Gift combos and storm coalescing in every room.
    pub gift_rules: crate::room::state::GiftRules,
    /// The room rocket's levels and caps (no levels: no rocket).
    pub rocket: Arc<crate::room::state::RocketRules>,
    /// The VIP levels and their perks.
    pub vip: Arc<crate::room::state::VipRules>,
    /// Where rooms send their events for the app's backend (event webhooks); none when
    /// `None`.
    pub events: Option<crate::events::EventsConfig>,
    /// TEST ONLY: abort the process when a rocket launch's rewards are paid, before it is
    /// announced, to test that the next owner announces it once and pays nothing twice.
    pub test_crash_after_rocket_payout: bool,
    /// TEST ONLY: abort the process after a gift's debit and before its settle, to test
    /// recovery. Never set in production.
    pub test_crash_after_debit: bool,
    /// TEST ONLY: abort the process when a gift has settled in the ledger, before its event is
    /// published, to test that the next owner publishes it. Never set in production.
    pub test_crash_after_settle: bool,
    /// TEST ONLY: hold a room's broadcast of its sequenced events this long after they are in
    /// the fenced history, so a test can freeze the owner between the write and the broadcast.
    /// Never set in production.
    pub test_hold_before_broadcast: Option<Duration>,
    /// TEST ONLY (the chaos suite's broken build): the orphan sweep also recovers, and so
    /// voids when no debit is found, the open sagas of rooms this node does NOT own, with the
    /// room's current ledger fence. It breaks "only the owner moves a saga" on purpose, so the
    /// chaos checkers can show they catch it. Never set in production.
    pub test_nonowner_void: bool,
}

impl Default for ShardConfig {
    fn default() -> Self {
        Self {
            lease_ttl: DEFAULT_LEASE_TTL,
            room_inbox: DEFAULT_ROOM_INBOX,
            idle_unload: DEFAULT_IDLE_UNLOAD,
            history_events: DEFAULT_HISTORY_EVENTS,
            history_age: DEFAULT_HISTORY_AGE,
            history_write_interval: storage::snapshot::DEFAULT_WRITE_INTERVAL,
            presence_full_max: DEFAULT_PRESENCE_FULL_MAX,
            presence_grace: DEFAULT_PRESENCE_GRACE,
            member_count_interval: DEFAULT_MEMBER_COUNT_INTERVAL,
            likes_interval: Duration::from_secs(1),
            auto_create: true,
            durable_history: false,
            handoff_rate_per_sec: DEFAULT_HANDOFF_RATE_PER_SEC,
            catalog: Arc::new(Catalog::default_with_secret(Vec::new())),
            orphan_sweep: DEFAULT_ORPHAN_SWEEP,
            publish_deadline: DEFAULT_PUBLISH_DEADLINE,
            seat_request_ttl: DEFAULT_SEAT_OFFER_TTL,
            robot_reconcile: DEFAULT_ROBOT_RECONCILE,
            seat_invite_ttl: DEFAULT_SEAT_OFFER_TTL,
            max_rooms_per_user: DEFAULT_MAX_ROOMS_PER_USER,
            room_creates_per_min: DEFAULT_ROOM_CREATES_PER_MIN,
            room_retention: DEFAULT_ROOM_RETENTION,
            retention_sweep: DEFAULT_RETENTION_SWEEP,
            directory_publish: DEFAULT_DIRECTORY_PUBLISH,
            directory_stale: DEFAULT_DIRECTORY_STALE,
            gift_rules: crate::room::state::GiftRules::default(),
            rocket: Arc::new(crate::room::state::RocketRules {
                levels: Vec::new(),
                daily_cap: 0,
                progress_interval_ms: 1000,
            }),
            vip: Arc::default(),
            events: None,
            test_crash_after_rocket_payout: false,
            test_crash_after_debit: false,
            test_crash_after_settle: false,
            test_hold_before_broadcast: None,
            test_nonowner_void: false,
        }
    }
}

impl ShardConfig {
    /// The rooms' timing rules.
    pub fn room_rules(&self) -> crate::room::state::Rules {
        crate::room::state::Rules {
            publish_deadline_ms: self.publish_deadline.as_millis() as u64,
            request_ttl_ms: self.seat_request_ttl.as_millis() as u64,
            invite_ttl_ms: self.seat_invite_ttl.as_millis() as u64,
            presence_grace_ms: self.presence_grace.as_millis() as u64,
        }
    }
}
