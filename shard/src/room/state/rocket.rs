//! The room rocket: the coins of the gifts sent in a room are its fuel; filling a level
//! launches it. A launch is decided here, once, with its rewards (top contributors of the
//! level, then present members, each clipped to the per-user daily cap in this room) and kept
//! in the durable state as pending until the room actor has paid every reward through the
//! ledger (one idempotency key per room, launch and user); then [`RoomState::rocket_paid`]
//! clears it and sequences `rocket.launch`. A runtime that stops in between leaves the launch
//! pending for the room's next owner, which pays the same rewards under the same keys (paid
//! once) and announces it once.
//!
//! An order's coins are fuel when its `gift` event is recorded for publishing (a storm-held
//! order's with its merged event, see `streaks.rs`), so a launch they fill is stored by the
//! write that publishes the order. Fuel is saved with the room's next durable write (every
//! launch is one; a graceful stop saves too); a crashed owner loses at most the fuel since
//! then, never a launch, and never counts an order twice.

use std::collections::BTreeMap;

use protocol::UserId;
use protocol::client::{RocketLaunch, RocketProgress, RocketReward};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{Applied, RoomState, Sequenced};

/// Most contributors a level remembers; past it the smallest is dropped.
const MAX_CONTRIBUTORS: usize = 1000;
const MS_PER_DAY: u64 = 86_400_000;

/// One level of the rocket: the fuel that launches it and what the launch pays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RocketLevel {
    /// Coins of gifts that fill the level.
    pub fuel: i64,
    /// Rewards to the level's top contributors, best first.
    #[serde(default)]
    pub top: Vec<i64>,
    /// How many present members get `present_coins` (top contributors excluded).
    #[serde(default)]
    pub present: u32,
    /// The reward of each present member.
    #[serde(default)]
    pub present_coins: i64,
}

impl RocketLevel {
    /// The most a launch of this level can pay.
    pub fn most_paid(&self) -> i64 {
        self.top
            .iter()
            .sum::<i64>()
            .saturating_add(i64::from(self.present).saturating_mul(self.present_coins))
    }
}

/// The rocket's levels and caps, from the shard's configuration (no levels: no rocket).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RocketRules {
    /// The levels, in order; after the last one the rocket starts again at the first.
    pub levels: Vec<RocketLevel>,
    /// The most rocket rewards one user gets in one room per UTC day (0: no cap).
    pub daily_cap: i64,
    /// `rocket.progress` goes out at most this often (ms).
    pub progress_interval_ms: u64,
}

impl RocketRules {
    /// Checks the levels: positive fuel, no negative reward, and no level paying more than its
    /// fuel.
    ///
    /// # Errors
    /// What is wrong, for the start-up error.
    pub fn validate(&self) -> Result<(), String> {
        for (i, l) in self.levels.iter().enumerate() {
            let n = i + 1;
            if l.fuel <= 0 {
                return Err(format!("rocket level {n}: fuel must be positive"));
            }
            if l.top.iter().any(|c| *c <= 0) || l.present_coins < 0 {
                return Err(format!("rocket level {n}: rewards must be positive"));
            }
            if l.present > 0 && l.present_coins == 0 {
                return Err(format!(
                    "rocket level {n}: present members need present_coins"
                ));
            }
            if l.most_paid() > l.fuel {
                return Err(format!(
                    "rocket level {n}: rewards ({}) exceed the level's fuel ({})",
                    l.most_paid(),
                    l.fuel
                ));
            }
        }
        if self.daily_cap < 0 {
            return Err("rocket_daily_cap must not be negative".into());
        }
        Ok(())
    }
}

/// A rocket nothing ever fuelled.
static IDLE: Rocket = Rocket {
    level: 0,
    fuel: 0,
    launches: 0,
    day: 0,
    contrib: BTreeMap::new(),
    rewarded: BTreeMap::new(),
    pending: None,
    filled_by: None,
};

/// Whether a room's rocket is absent or was never fuelled (not stored then).
pub(super) fn is_idle(r: &Option<Box<Rocket>>) -> bool {
    r.as_deref().is_none_or(Rocket::is_idle)
}

/// The rocket's durable state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rocket {
    /// The level being filled (index into the rules' levels).
    pub level: u32,
    /// Fuel in it.
    pub fuel: i64,
    /// Launches so far (the next one is `launches + 1`).
    pub launches: u64,
    /// The UTC day (days since the epoch) the rocket's caps count for.
    pub day: u64,
    /// Coins each user put into the current level.
    pub contrib: BTreeMap<UserId, i64>,
    /// Rocket rewards each user got in this room today.
    pub rewarded: BTreeMap<UserId, i64>,
    /// A launch decided and not yet announced: its rewards may be paid or not.
    pub pending: Option<Launch>,
    /// The gift order (and its sender) that filled the current level while it could not
    /// launch (a launch was pending): the `order` of its launch, decided once the pending one
    /// is announced. Absent in states stored before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filled_by: Option<(Uuid, UserId)>,
}

impl Rocket {
    /// Whether nothing was ever fuelled (not stored then).
    pub fn is_idle(&self) -> bool {
        *self == Self::default()
    }
}

/// A decided launch: what it pays, to whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// The launch's number in the room (1, 2, …): part of every reward's ledger key.
    pub number: u64,
    /// The level launched (1-based).
    pub level: u32,
    /// The fuel the level took.
    pub fuel: i64,
    /// The rewards, each to a distinct user.
    pub rewards: Vec<RocketReward>,
    /// The gift order whose coins filled the level, and its sender.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<(uuid::Uuid, UserId)>,
    /// The UTC day of the launch, also part of its rewards' ledger keys: a room id made again
    /// after its room expired counts launches from 1 again, on a later day. `None` for a
    /// launch decided before the day was recorded (its keys stay as they were paid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day: Option<u64>,
}

impl RoomState {
    /// Sets the rocket's rules (none until then: no rocket).
    pub fn set_rocket_rules(&mut self, rules: std::sync::Arc<RocketRules>) {
        self.rocket_rules = rules;
    }

    /// Whether rooms have a rocket.
    pub fn rocket_on(&self) -> bool {
        !self.rocket_rules.levels.is_empty()
    }

    /// The launch waiting for its rewards, if any.
    pub fn pending_launch(&self) -> Option<&Launch> {
        self.durable.rocket.as_ref()?.pending.as_ref()
    }

    /// The rocket's progress, for `rocket.progress` (None without a rocket).
    pub fn rocket_progress(&self) -> Option<RocketProgress> {
        let r = self.durable.rocket.as_deref().unwrap_or(&IDLE);
        let level = self.rocket_rules.levels.get(r.level as usize)?;
        Some(RocketProgress {
            level: r.level + 1,
            fuel: r.fuel,
            target: level.fuel,
            launches: r.launches,
        })
    }

    /// Adds `coins` of a gift from `sender` at `now` (unix ms) as fuel. Fills levels (the
    /// excess goes to the next, counted as the sender's contribution there), and decides a
    /// launch when one fills: kept pending in the durable state (the change is then
    /// `durable_changed`). While a launch is pending, fuel still adds up in the next level but
    /// no other launch is decided; a level full by then launches as soon as the pending one is
    /// announced ([`RoomState::rocket_paid`]).
    pub fn rocket_fuel(&mut self, sender: &UserId, coins: i64, now: u64, order: Uuid) -> Applied {
        let mut applied = Applied::default();
        if !self.rocket_on() || coins <= 0 {
            return applied;
        }
        let day = now / MS_PER_DAY;
        let rules = self.rocket_rules.clone();
        let r = self.durable.rocket.get_or_insert_with(Box::default);
        if r.day != day {
            // A new day: the rocket starts again at its first level, the caps afresh.
            r.day = day;
            r.level = 0;
            r.fuel = 0;
            r.contrib.clear();
            r.rewarded.clear();
            r.filled_by = None;
            applied.durable_changed = true;
        }
        let target = rules.levels[r.level as usize % rules.levels.len()].fuel;
        let was = r.fuel;
        r.fuel = r.fuel.saturating_add(coins);
        credit(&mut r.contrib, sender, coins, MAX_CONTRIBUTORS);
        if r.pending.is_some() {
            if was < target && r.fuel >= target {
                // Filled while it cannot launch: this order is the launch's, later.
                r.filled_by = Some((order, sender.clone()));
                applied.durable_changed = true;
            }
            return applied;
        }
        self.rocket_launch_if_full(Some((order, sender.clone())), &mut applied);
        applied
    }

    /// Decides the launch of the current level if its fuel fills it and no launch is pending:
    /// rewards to the level's top contributors, then to present members. `order` is the gift
    /// order that filled it. The fuel past the level stays in the next one, as the
    /// contribution of the order's sender (whose coins they are), and if it fills that level
    /// too, that order is also the next launch's.
    fn rocket_launch_if_full(&mut self, order: Option<(Uuid, UserId)>, applied: &mut Applied) {
        let rules = self.rocket_rules.clone();
        let Some(r) = self.durable.rocket.as_deref_mut() else {
            return;
        };
        let level_at = r.level as usize % rules.levels.len();
        let level = &rules.levels[level_at];
        if r.fuel < level.fuel || r.pending.is_some() {
            return;
        }
        // Robots fuel the rocket (their coins are real) but are never rewarded.
        let mut top: Vec<(&UserId, i64)> = r
            .contrib
            .iter()
            .filter(|(u, _)| !u.is_robot())
            .map(|(u, c)| (u, *c))
            .collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let mut rewards: Vec<RocketReward> = Vec::new();
        for ((user, _), coins) in top.into_iter().zip(&level.top) {
            rewards.push(RocketReward {
                user: user.clone(),
                coins: *coins,
                why: "top".into(),
            });
        }
        let number = r.launches + 1;
        let mut present: Vec<&UserId> = self
            .members
            .keys()
            .filter(|u| !u.is_robot() && !rewards.iter().any(|w| w.user == **u))
            .collect();
        // A fair, repeatable draw: ordered by a hash of the launch and the user.
        present.sort_by_key(|u| (draw_key(&self.id, number, u), (*u).clone()));
        for u in present.into_iter().take(level.present as usize) {
            rewards.push(RocketReward {
                user: u.clone(),
                coins: level.present_coins,
                why: "present".into(),
            });
        }
        // The daily cap per user in this room.
        if rules.daily_cap > 0 {
            for w in &mut rewards {
                let had = r.rewarded.get(&w.user).copied().unwrap_or(0);
                w.coins = w.coins.min(rules.daily_cap.saturating_sub(had).max(0));
            }
            rewards.retain(|w| w.coins > 0);
        }
        for w in &rewards {
            let had = r.rewarded.entry(w.user.clone()).or_default();
            *had = had.saturating_add(w.coins);
        }
        r.launches = number;
        r.fuel -= level.fuel;
        r.level = ((level_at + 1) % rules.levels.len()) as u32;
        r.contrib.clear();
        r.filled_by = None;
        if r.fuel > 0
            && let Some((o, sender)) = &order
        {
            credit(&mut r.contrib, sender, r.fuel, MAX_CONTRIBUTORS);
            if r.fuel >= rules.levels[r.level as usize].fuel {
                r.filled_by = Some((*o, sender.clone()));
            }
        }
        r.pending = Some(Launch {
            number,
            level: level_at as u32 + 1,
            fuel: level.fuel,
            rewards,
            order,
            day: Some(r.day),
        });
        applied.durable_changed = true;
    }

    /// The pending launch `number` was paid: clears it and sequences `rocket.launch`. A
    /// number that is not the pending launch's changes nothing (a late or repeated report).
    pub fn rocket_paid(&mut self, number: u64) -> Applied {
        let mut applied = Applied::default();
        let Some(r) = self.durable.rocket.as_deref_mut() else {
            return applied;
        };
        let Some(launch) = r.pending.take_if(|l| l.number == number) else {
            return applied;
        };
        let filled_by = r.filled_by.take();
        applied.durable_changed = true;
        self.push(
            &mut applied,
            Sequenced::RocketLaunch(RocketLaunch {
                launch: launch.number,
                level: launch.level,
                fuel: launch.fuel,
                rewards: launch.rewards,
                order: launch.order.as_ref().map(|(o, _)| *o),
                by: launch.order.map(|(_, u)| u),
            }),
        );
        // A level that filled while this launch waited launches now, not at the next gift.
        self.rocket_launch_if_full(filled_by, &mut applied);
        applied
    }
}

/// The order of members in a launch's draw.
fn draw_key(room: &protocol::RoomId, launch: u64, user: &UserId) -> u64 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(room.as_str().as_bytes());
    h.update(launch.to_le_bytes());
    h.update(user.as_str().as_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_le_bytes(first)
}

/// Adds `coins` to `user`'s contribution, keeping at most `max` contributors: past that the
/// smallest one is dropped (the largest stay, so the top contributors are still right).
pub(super) fn credit(contrib: &mut BTreeMap<UserId, i64>, user: &UserId, coins: i64, max: usize) {
    let c = contrib.entry(user.clone()).or_default();
    *c = c.saturating_add(coins);
    if contrib.len() > max
        && let Some(least) = contrib
            .iter()
            .min_by_key(|(_, c)| **c)
            .map(|(u, _)| u.clone())
    {
        contrib.remove(&least);
    }
}
