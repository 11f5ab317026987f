//! The room rocket in the room actor: paying a decided launch through the ledger, announcing
//! it, and the bounded-rate progress events: `rocket.progress`, and a PK's `pk.score`.
//!
//! Only the room's owner pays (its lease proven before every reward), and it pays a launch the
//! state machine decided and stored as pending (see `state/rocket.rs`): every reward under its
//! own key (room, launch number, user), so a retry, a crash or a new owner paying the same
//! launch again credits nothing twice. The launch is announced after every reward is paid, in
//! the write that clears it from the durable state: announced once.

use std::time::Duration;

use futures_util::future::join_all;
use protocol::RoomId;
use protocol::client::RocketReward;
use protocol::link::Audience;
use storage::ledger::Ledger;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::state::Launch;
use super::{RoomActor, RoomMsg};
use crate::Inner;
use crate::metrics as m;
use crate::owner::Validity;

/// Pause between attempts of a reward the ledger could not book; doubles up to 5 s.
const PAY_RETRY: Duration = Duration::from_millis(100);

/// What a launch's payout task needs to book one reward.
struct Payer<'a> {
    inner: &'a Inner,
    ledger: &'a Ledger,
    room: &'a RoomId,
    lease: &'a CancellationToken,
    valid: &'a Validity,
}

impl Payer<'_> {
    /// Books `w`, retrying until the ledger has it: `false` when the runtime lost its lease or
    /// the node stops first (the launch stays pending for the room's next owner).
    async fn pay(&self, launch: &Launch, w: &RocketReward) -> bool {
        let (room, lease) = (self.room, self.lease);
        let key = reward_key(room, launch, &w.user);
        let mut pause = PAY_RETRY;
        loop {
            // Owner-only: a runtime that cannot prove its lease pays nothing.
            if lease.is_cancelled() || !self.inner.owner.proven(self.valid) {
                return false;
            }
            match self.ledger.rocket_reward(&w.user, w.coins, &key).await {
                Ok(out) => {
                    if out.amount != w.coins {
                        warn!(%room, launch = launch.number, user = %w.user, booked = out.amount, "A rocket reward key holds another amount.");
                    }
                    return true;
                }
                Err(e) => {
                    warn!(%room, launch = launch.number, error = %e, "Rocket reward failed; retrying.");
                    tokio::select! {
                        () = lease.cancelled() => return false,
                        () = self.inner.shutdown.cancelled() => return false,
                        () = tokio::time::sleep(pause) => {}
                    }
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

/// The rocket's run-time part in a room actor.
#[derive(Debug, Default)]
pub(super) struct RocketRun {
    /// The launch whose rewards a task is paying now (launches count from 1; one word, and the
    /// actor stays in its allocation class).
    paying: Option<std::num::NonZeroU64>,
    /// Fuel changed since the last `rocket.progress`.
    dirty: bool,
    /// A PK's score changed since the last `pk.score`.
    pub(super) pk_dirty: bool,
    /// A PK between two rooms: an exchange with the board, or the wait for the next, runs.
    pub(super) pk_syncing: bool,
    /// When the last progress event went out.
    last: Option<Instant>,
}

/// The ledger key of `launch`'s reward to `user`: the room, the launch's day and number, the
/// user (a launch without a day, decided by an older build, keeps the key it was paid under).
pub(crate) fn reward_key(
    room: &protocol::RoomId,
    launch: &super::state::Launch,
    user: &protocol::UserId,
) -> String {
    match launch.day {
        Some(day) => format!("rocket:{room}:d{day}:{}:{user}", launch.number),
        None => format!("rocket:{room}:{}:{user}", launch.number),
    }
}

impl RoomActor {
    /// After gift events went out: the progress of what they moved is due (the rocket's, a
    /// PK's score), and a launch they decided is paid.
    pub(super) fn gifts_moved(&mut self, fuelled: bool, pk_scored: bool) {
        self.rocket.pk_dirty |= pk_scored;
        if fuelled {
            self.rocket.dirty = true;
            self.pay_launch();
        }
    }

    /// When the next progress event may go out (None: nothing to send). The rocket's and the
    /// PK's share one rate: at most one of each per `rocket_progress_ms`.
    pub(super) fn progress_due(&self) -> Option<Instant> {
        if !self.rocket.dirty && !self.rocket.pk_dirty {
            return None;
        }
        let every = Duration::from_millis(self.inner.config.rocket.progress_interval_ms);
        Some(self.rocket.last.map_or_else(Instant::now, |t| t + every))
    }

    /// Sends `rocket.progress` and `pk.score` (volatile, latest wins), whichever moved, to
    /// every member.
    pub(super) async fn send_progress(&mut self) {
        let (rocket, pk) = (self.rocket.dirty, self.rocket.pk_dirty);
        self.rocket.dirty = false;
        self.rocket.pk_dirty = false;
        self.rocket.last = Some(Instant::now());
        let Some(state) = self.state.as_ref() else {
            return;
        };
        let mut frames = Vec::with_capacity(2);
        if let Some(p) = state.rocket_progress().filter(|_| rocket) {
            frames.push(protocol::client::encode_event(
                "rocket.progress",
                Some(&self.room),
                None,
                &p,
            ));
        }
        if let Some(p) = state.pk_view(false).filter(|_| pk) {
            frames.push(protocol::client::encode_event(
                "pk.score",
                Some(&self.room),
                None,
                &p,
            ));
        }
        for gw in self.gateways() {
            for frame in &frames {
                self.send_event(&gw, Audience::All, frame.clone(), None)
                    .await;
            }
        }
    }

    /// Starts paying the pending launch, unless a task pays it already. The task reports to
    /// the room when every reward is booked ([`RoomMsg::RocketPaid`]).
    pub(super) fn pay_launch(&mut self) {
        let Some(launch) = self
            .state
            .as_ref()
            .and_then(|s| s.pending_launch())
            .cloned()
        else {
            return;
        };
        if self.rocket.paying.map(std::num::NonZeroU64::get) == Some(launch.number) {
            return;
        }
        let Some(ledger) = self.inner.ledger.clone() else {
            return;
        };
        self.rocket.paying = std::num::NonZeroU64::new(launch.number);
        let inner = self.inner.clone();
        let room = self.room.clone();
        let lease = self.lease.clone();
        let valid = self.valid.clone();
        let weak = self.self_tx.clone();
        let started = Instant::now();
        self.inner.tracker.spawn(async move {
            // Every reward at once: the ledger books concurrent grants in one commit, so a
            // launch costs one commit, not one per reward (launches queue behind each other).
            let payer = Payer {
                inner: &inner,
                ledger: &ledger,
                room: &room,
                lease: &lease,
                valid: &valid,
            };
            let paid = join_all(launch.rewards.iter().map(|w| payer.pay(&launch, w))).await;
            if !paid.into_iter().all(|p| p) {
                return;
            }
            metrics::histogram!(m::ROCKET_PAYOUT_SECONDS).record(started.elapsed().as_secs_f64());
            if inner.config.test_crash_after_rocket_payout {
                // TEST ONLY: die between the payout and the announcement.
                std::process::abort();
            }
            if let Some(tx) = weak.upgrade() {
                let _ = tx.send(Box::new(RoomMsg::RocketPaid(launch.number))).await;
            }
        });
    }

    /// Every reward of launch `number` is booked: announce it (and clear it) in one write.
    pub(super) async fn rocket_paid(&mut self, number: u64) {
        if self.rocket.paying.map(std::num::NonZeroU64::get) == Some(number) {
            self.rocket.paying = None;
        }
        let Some(state) = self.state.as_mut() else {
            return;
        };
        let applied = state.rocket_paid(number);
        if applied.events.is_empty() {
            return;
        }
        metrics::counter!(m::ROCKET_LAUNCHES).increment(1);
        info!(room = %self.room, launch = number, "Rocket launched.");
        if self.publish(applied, None).await.is_ok() {
            self.rocket.dirty = true;
            // The announcement may have decided the next launch (a level that filled while
            // this one waited): pay it now.
            self.pay_launch();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::reward_key;
    use crate::room::state::Launch;

    /// A launch's day is in its rewards' keys; a launch decided before days were recorded
    /// keeps the key it may already have been paid under.
    #[test]
    fn a_reward_key_names_the_launch_day_when_it_has_one() {
        let (room, user) = (protocol::RoomId::from("r1"), protocol::UserId::from("u"));
        let mut launch = Launch {
            number: 3,
            level: 1,
            fuel: 100,
            rewards: Vec::new(),
            order: None,
            day: Some(20_428),
        };
        assert_eq!(reward_key(&room, &launch, &user), "rocket:r1:d20428:3:u");
        launch.day = None;
        assert_eq!(reward_key(&room, &launch, &user), "rocket:r1:3:u");
    }
}
