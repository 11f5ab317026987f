//! The robots of one room, run by the room's actor on the lease owner: started after the
//! claim (or when the reconcile hands the actor a configuration), stopped with the actor or
//! when the configuration is disabled. Every robot action goes through the room's rules like a
//! member's, and every robot gift through the ledger's saga.

use std::time::Duration;

use protocol::client::{
    ChatSend, GiftSend, GiftTargets, MicPublishing, RoomOp, SeatLeave, SeatTake,
};
use protocol::link::{Command, LeaveReason, RoomCmd};
use protocol::{NodeId, UserId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;
use tracing::debug;

use super::state::{Durable, ROBOT_GATEWAY, SessionRef};
use super::{RoomActor, now_ms};
use crate::metrics as m;
use crate::robots::RobotConfig;

/// How long after it is due a presence check runs: a room whose robots fill it only below a
/// member count looks at that count this often, and a robot that is not in the room (kicked,
/// say) comes back this long after it went (PROTOCOL.md, section 4.6).
const PRESENCE_CHECK: Duration = Duration::from_secs(1);

/// When each robot acts next, per kind.
#[derive(Debug, Clone, Copy, Default)]
struct Timers {
    chat: Option<Instant>,
    seat: Option<Instant>,
    gift: Option<Instant>,
}

/// A room's running robots.
#[derive(Debug)]
pub(super) struct Robots {
    config: RobotConfig,
    timers: Vec<Timers>,
    rng: StdRng,
    /// When the next presence check runs, once one is wanted (see [`RoomActor::robot_due`]).
    /// A fixed instant, not "a second from now" asked anew on every turn of the room's loop: a
    /// busy room turns more often than that and would never get to it.
    presence_at: Option<Instant>,
}

impl Robots {
    fn new(config: RobotConfig, now: Instant) -> Self {
        let n = config.robots.len();
        let mut me = Self {
            config,
            timers: vec![Timers::default(); n],
            rng: StdRng::from_os_rng(),
            presence_at: None,
        };
        for i in 0..n {
            let chat = me.config.chat.as_ref().map(|c| c.every_s);
            let seat = me.config.seat.as_ref().map(|s| s.every_s);
            let gift = me.config.gift.as_ref().map(|g| g.every_s);
            me.timers[i] = Timers {
                chat: chat.map(|s| now + me.jittered(s)),
                seat: seat.map(|s| now + me.jittered(s)),
                gift: gift.map(|s| now + me.jittered(s)),
            };
        }
        me
    }

    /// `mean_s` seconds, drawn within ± the configured jitter.
    fn jittered(&mut self, mean_s: f64) -> Duration {
        let j = self.config.jitter;
        let f = if j > 0.0 {
            self.rng.random_range(1.0 - j..=1.0 + j)
        } else {
            1.0
        };
        Duration::from_secs_f64((mean_s * f).max(0.0))
    }

    /// Robot `i` is not in the room at `now` (a `fill_below` room full of humans, a ban, a
    /// closed room): each of its actions that fell due waits one more of its intervals, as if
    /// it had acted, so that its timers never stay in the past (the actor would wake at once,
    /// again and again).
    fn skip_absent(&mut self, i: usize, now: Instant) {
        let chat = self.config.chat.as_ref().map(|c| c.every_s);
        let seat = self.config.seat.as_ref().map(|s| s.every_s);
        let gift = self.config.gift.as_ref().map(|g| g.every_s);
        let mut t = self.timers[i];
        for (due, every) in [
            (&mut t.chat, chat),
            (&mut t.seat, seat),
            (&mut t.gift, gift),
        ] {
            if let (Some(d), Some(every)) = (due.as_mut(), every)
                && *d <= now
            {
                *d = now + self.jittered(every).max(PRESENCE_CHECK);
            }
        }
        self.timers[i] = t;
    }

    /// When the actor should next call [`RoomActor::robot_tick`]: the first action due, or
    /// the presence check when one is scheduled.
    pub(super) fn next_due(&self, now: Instant) -> Instant {
        let due = self
            .timers
            .iter()
            .flat_map(|t| [t.chat, t.seat, t.gift])
            .flatten()
            .min();
        match (due, self.presence_at) {
            (Some(d), Some(c)) => d.min(c),
            (Some(d), None) => d,
            (None, Some(c)) => c,
            (None, None) => now + Duration::from_secs(3600),
        }
    }
}

/// Robot `id`'s connection: on the robot gateway, which nothing is ever sent to. Drawn from
/// the robot's id, not its place in the configuration, so a new configuration that reorders
/// or drops robots still names the connection each robot joined with.
fn robot_at(id: &UserId) -> SessionRef {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(id.as_str());
    SessionRef {
        gateway: NodeId::from(ROBOT_GATEWAY),
        session: hash | 1,
    }
}

/// A robot's profile: its display name from the configuration, when it is a valid one. A
/// configuration may name a robot in up to 40 characters, a profile in up to 32: a longer name
/// is shown cut to 32, not dropped.
fn robot_profile(name: &str) -> Option<std::sync::Arc<protocol::client::Profile>> {
    let name: String = name
        .chars()
        .take(protocol::client::profile::MAX_NAME_CHARS)
        .collect();
    let p = protocol::client::Profile {
        name: Some(name.clone()),
        ..Default::default()
    };
    if name.is_empty() || p.validate().is_err() {
        return None;
    }
    super::state::shared_profile(Some(p))
}

fn action(kind: &'static str) {
    metrics::counter!(m::ROBOT_ACTIONS, "kind" => kind).increment(1);
}

impl RoomActor {
    /// The durable state a robot room starts with when it does not exist and its enabled
    /// configuration creates it: owned by its first robot.
    pub(super) fn robot_room(config: &RobotConfig) -> Option<Durable> {
        let owner = config.robots.first()?;
        if !(config.enabled && config.create) {
            return None;
        }
        Durable::new(owner.id.clone(), config.title.clone(), config.seats, None).ok()
    }

    /// Starts, changes or stops this room's robots to match `config` (`None` or disabled:
    /// stop, the robots leave).
    pub(super) async fn set_robots(&mut self, config: Option<RobotConfig>) {
        let config = config.filter(|c| c.enabled);
        match (config, self.robots.is_some()) {
            (Some(c), running) => {
                if self.robots.as_ref().is_some_and(|r| r.config == c) {
                    return;
                }
                if !running {
                    metrics::gauge!(m::ROBOT_ROOMS_RUNNING).increment(1.0);
                    metrics::counter!(m::ROBOT_STARTS).increment(1);
                    self.inner.robot_rooms_add(&self.room);
                    debug!(room = %self.room, fence = self.fence, robots = c.robots.len(), "Robots started.");
                }
                // Robots a new configuration drops leave.
                if let Some(old) = self.robots.take() {
                    for r in &old.config.robots {
                        if !c.has(&r.id) {
                            self.robot_leave(&r.id).await;
                        }
                    }
                }
                self.robots = Some(Box::new(Robots::new(c, Instant::now())));
                self.robot_tick().await;
                if !running {
                    // Seats saved from an earlier runtime whose robot did not come back with
                    // this one (the configuration dropped it, or does not want it now).
                    self.free_absent_robot_seats().await;
                }
            }
            (None, true) => {
                if let Some(old) = self.robots.take() {
                    for r in &old.config.robots {
                        self.robot_leave(&r.id).await;
                    }
                }
                self.stop_robots();
                debug!(room = %self.room, "Robots stopped.");
            }
            // Seats robots still hold from an earlier owner's runtime go free.
            (None, false) => self.free_absent_robot_seats().await,
        }
    }

    /// Frees the seats robots hold without being members: an earlier runtime's robots (on
    /// this node before a restart, or on an earlier owner) that this runtime does not run.
    async fn free_absent_robot_seats(&mut self) {
        if let Some(state) = self.state.as_mut() {
            let applied = state.free_absent_robot_seats();
            let _ = self.publish(applied, None).await;
        }
    }

    /// Forgets the robots without a word (the runtime stops: robots are volatile members, as
    /// the humans are, and the next owner starts them again).
    pub(super) fn stop_robots(&mut self) {
        if self.robots.take().is_some() || self.inner.robot_rooms_has(&self.room) {
            metrics::gauge!(m::ROBOT_ROOMS_RUNNING).decrement(1.0);
            self.inner.robot_rooms_remove(&self.room);
        }
    }

    async fn robot_leave(&mut self, id: &UserId) {
        let Some(state) = self.state.as_mut() else {
            return;
        };
        if let Ok(applied) = state.leave(id, &robot_at(id), LeaveReason::Left.as_str()) {
            action("leave");
            let _ = self.publish(applied, None).await;
        }
    }

    /// When the actor should next run [`RoomActor::robot_tick`]. A presence check is
    /// scheduled (once, [`PRESENCE_CHECK`] from the first turn that wants it) while the robots
    /// fill the room only below a member count, or while one of them is not in it (a kicked
    /// robot comes back at the check; a banned one, or any in a closed room, stays out).
    pub(super) fn robot_due(&mut self) -> Option<Instant> {
        let robots = self.robots.as_mut()?;
        let now = Instant::now();
        let absent = self.state.as_ref().is_some_and(|s| {
            robots
                .config
                .robots
                .iter()
                .any(|r| s.member(&r.id).is_none())
        });
        if robots.config.fill_below.is_some() || absent {
            robots.presence_at.get_or_insert(now + PRESENCE_CHECK);
        } else {
            robots.presence_at = None;
        }
        Some(robots.next_due(now))
    }

    /// Brings robots in or out (by the room's human count when they only fill it), then runs
    /// every robot action that is due.
    pub(super) async fn robot_tick(&mut self) {
        let Some(mut robots) = self.robots.take() else {
            return;
        };
        self.robots_present(&robots).await;
        // Checked now: the next check is scheduled afresh by `robot_due`.
        robots.presence_at = None;
        let now = Instant::now();
        let n = robots.config.robots.len();
        for i in 0..n {
            let id = robots.config.robots[i].id.clone();
            if self.state.as_ref().and_then(|s| s.member(&id)).is_none() {
                robots.skip_absent(i, now);
                continue;
            }
            let t = robots.timers[i];
            if t.chat.is_some_and(|d| d <= now) {
                self.robot_chat(&mut robots, i, &id).await;
            }
            if t.seat.is_some_and(|d| d <= now) {
                self.robot_seat(&mut robots, i, &id).await;
            }
            if t.gift.is_some_and(|d| d <= now) {
                self.robot_gift(&mut robots, i, &id).await;
            }
        }
        // The runtime may have stopped meanwhile (a write fenced): then the robots stay off.
        if !self.lease.is_cancelled() {
            self.robots = Some(robots);
        }
    }

    /// Robots join while they are wanted (the room is open, and below `fill_below` humans when
    /// set) and leave when they are not.
    async fn robots_present(&mut self, robots: &Robots) {
        let Some(state) = self.state.as_ref() else {
            return;
        };
        let humans = state.member_count() - state.robot_count();
        let wanted =
            !state.durable().closed && robots.config.fill_below.is_none_or(|n| humans < n as usize);
        let now = now_ms();
        for r in &robots.config.robots {
            let Some(state) = self.state.as_mut() else {
                return;
            };
            let present = state.member(&r.id).is_some();
            if wanted && !present {
                // A banned robot stays out, as anyone would.
                let Ok(joined) = state.rejoin(&r.id, robot_at(&r.id), robot_profile(&r.name), now)
                else {
                    continue;
                };
                action("join");
                let _ = self.publish(joined.applied, None).await;
            } else if !wanted && present {
                self.robot_leave(&r.id).await;
            }
        }
    }

    /// Applies `op` for robot `id`; whether the room's rules took it.
    async fn robot_op(&mut self, id: &UserId, op: RoomOp, kind: &'static str) -> bool {
        let Some(state) = self.state.as_mut() else {
            return false;
        };
        match state.apply(id, &robot_at(id), &op, now_ms()) {
            Ok(out) => {
                action(kind);
                self.publish(out.applied, None).await.is_ok()
            }
            Err(r) => {
                debug!(room = %self.room, robot = %id, op = op.name(), code = %r.code, "Robot action refused.");
                action("refused");
                false
            }
        }
    }

    async fn robot_chat(&mut self, robots: &mut Robots, i: usize, id: &UserId) {
        let Some(chat) = robots.config.chat.clone() else {
            return;
        };
        let k = robots.rng.random_range(0..chat.phrases.len());
        let text = chat.phrases[k].clone();
        let op = RoomOp::Chat(ChatSend {
            room: self.room.clone(),
            text,
            mentions: Vec::new(),
            reply_to: None,
            mention_all: false,
        });
        self.robot_op(id, op, "chat").await;
        robots.timers[i].chat = Some(Instant::now() + robots.jittered(chat.every_s));
    }

    async fn robot_seat(&mut self, robots: &mut Robots, i: usize, id: &UserId) {
        let Some(seat) = robots.config.seat.clone() else {
            return;
        };
        let seated = self.state.as_ref().and_then(|s| s.seat_of(id)).is_some();
        let room = self.room.clone();
        let next = if seated {
            self.robot_op(id, RoomOp::SeatLeave(SeatLeave { room }), "seat_leave")
                .await;
            seat.every_s
        } else {
            let take = RoomOp::SeatTake(SeatTake {
                room: room.clone(),
                seat: None,
            });
            if self.robot_op(id, take, "seat_take").await {
                // A robot's audio is the operator's business: it counts as published.
                let on = RoomOp::MicPublishing(MicPublishing { room, on: true });
                self.robot_op(id, on, "mic").await;
                seat.stay_s
            } else {
                seat.every_s
            }
        };
        robots.timers[i].seat = Some(Instant::now() + robots.jittered(next));
    }

    async fn robot_gift(&mut self, robots: &mut Robots, i: usize, id: &UserId) {
        let Some(gift) = robots.config.gift.clone() else {
            return;
        };
        robots.timers[i].gift = Some(Instant::now() + robots.jittered(gift.every_s));
        let Some(price) = self.inner.config.catalog.get(&gift.gift).map(|d| d.price) else {
            return;
        };
        let cost = price.saturating_mul(i64::from(gift.count));
        let Some(state) = self.state.as_ref() else {
            return;
        };
        let spent = state
            .durable()
            .robot_spent
            .as_ref()
            .and_then(|s| s.get(id).copied())
            .unwrap_or(0);
        if spent.saturating_add(cost) > gift.budget {
            robots.timers[i].gift = None;
            return;
        }
        // To a human: a seated one when there is one, else any.
        let seated: Vec<UserId> = state
            .durable()
            .seats
            .iter()
            .filter_map(|s| s.user.clone())
            .filter(|u| !u.is_robot())
            .collect();
        let pool = if seated.is_empty() {
            state
                .members()
                .map(|(u, _)| u.clone())
                .filter(|u| !u.is_robot())
                .collect()
        } else {
            seated
        };
        if pool.is_empty() {
            return;
        }
        let to = pool[robots.rng.random_range(0..pool.len())].clone();
        // The budget is counted (and stored) before the order: a runtime that stops now never
        // lets the next one spend it again.
        let Some(state) = self.state.as_mut() else {
            return;
        };
        let applied = state.robot_spend(id, cost);
        if self.publish(applied, None).await.is_err() {
            return;
        }
        action("gift");
        metrics::counter!(m::ROBOT_GIFT_COINS).increment(cost.unsigned_abs());
        let at = robot_at(id);
        let cmd = Command {
            req: 0,
            gateway: at.gateway.clone(),
            session: at.session,
            user: id.clone(),
            client_id: None,
            room: self.room.clone(),
            cmd: RoomCmd::Op(RoomOp::Gift(GiftSend {
                room: self.room.clone(),
                req_id: format!("robot-{}", uuid::Uuid::new_v4()),
                gift: gift.gift.clone(),
                count: gift.count,
                to: GiftTargets::Users(vec![to]),
            })),
            profile: None,
            standing: None,
        };
        self.take_gift(Box::new(cmd), &at).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{Robots, robot_profile};
    use crate::robots::RobotConfig;

    /// An absent robot's due actions move to a later time, so the room's next wake-up is never
    /// in the past (the actor would spin); the present robots' timers are left alone.
    #[test]
    fn an_absent_robots_due_actions_wait_another_interval() {
        let json = r#"{"room":"party","robots":[{"id":"bot:amy"},{"id":"bot:bo"}],
            "chat":{"every_s":10,"phrases":["hi"]},"seat":{"every_s":5,"stay_s":30},"jitter":0}"#;
        let config = RobotConfig::parse(json.as_bytes()).unwrap();
        let start = Instant::now();
        let mut robots = Robots::new(config, start);
        let later = start + Duration::from_secs(60);
        assert!(robots.next_due(later) <= later, "both robots are due");
        robots.skip_absent(0, later);
        robots.skip_absent(1, later);
        // The seat's 5 s comes first (no jitter).
        assert_eq!(robots.next_due(later), later + Duration::from_secs(5));
    }

    #[test]
    fn a_robot_shows_its_configured_name_when_it_is_a_valid_one() {
        let p = robot_profile("Amy").unwrap();
        assert_eq!(p.name.as_deref(), Some("Amy"));
        assert_eq!((p.avatar.as_deref(), p.region.as_deref()), (None, None));
        assert_eq!(robot_profile(""), None);
        let long = robot_profile(&"x".repeat(40)).unwrap();
        assert_eq!(
            long.name.as_deref(),
            Some("x".repeat(32).as_str()),
            "cut to 32"
        );
        assert_eq!(robot_profile("a\u{7}b"), None, "a control character");
    }
}
