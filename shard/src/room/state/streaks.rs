//! Gift combos and storm coalescing: the room numbers the orders of a streak (the same
//! sender, gift and recipients within the combo window) and, above its gift-event budget,
//! merges a streak's orders into one event per storm interval with exact sums. The budget is
//! the room's: a merged event counts against it too, and one due past it waits for the next
//! second, so many streaks storming at once share the budget (each keeps its own events).
//!
//! Pure like the rest of the state machine: the actor passes the time in. The streaks are not
//! durable: a new owner starts them afresh (the events already sent keep their numbers in the
//! resume log). Every order's coins reach exactly one event: an order is either published on
//! its own or held in its streak's batch until the batch's event goes out
//! ([`RoomState::flush_storm`]); the ledger books each order on its own either way. An
//! order's coins fuel the room rocket when its event is recorded for publishing, not while it
//! is held: the fuel and the event go in one write, so an order a runtime never published (it
//! died, or owed the event) is fuel once, when the next runtime publishes it.

use std::collections::HashMap;

use protocol::UserId;
use protocol::client::{Combo, GiftEvent};
use uuid::Uuid;

use super::{Applied, RoomState, Sequenced};

/// Most streaks a room tracks at once; a new streak past it (after dropping the ended ones) is
/// not tracked, and its orders each count as a streak of one.
pub(crate) const MAX_STREAKS: usize = 4096;

/// The length of the gift-event budget's window; windows are whole seconds of unix time.
const BUDGET_WINDOW_MS: u64 = 1000;

/// The rules of combos and storms, from the shard's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiftRules {
    /// Orders of one sender, gift and recipients at most this far apart form a streak (≥ 1).
    pub combo_window_ms: u64,
    /// Gift events a room sends per second (whole seconds of unix time), merged ones
    /// included, before it merges streaks (0: never merges).
    pub events_per_sec: u32,
    /// A merged event goes out this long after the first order it holds, or, when the room
    /// spent that second's budget, in the next second with budget left.
    pub storm_interval_ms: u64,
}

impl Default for GiftRules {
    fn default() -> Self {
        Self {
            combo_window_ms: 3_000,
            events_per_sec: 50,
            storm_interval_ms: 500,
        }
    }
}

/// A settled order whose event went out (or is held): the actor closes its open record with
/// the write that publishes the event, or owes the event when it cannot publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiftMark {
    /// The order id.
    pub order: Uuid,
    /// Whether the order is open in the fenced store (see the room actor's gifts).
    pub open: bool,
}

/// Gift events to publish and the orders they carry.
#[derive(Debug, Default)]
pub struct GiftPublished {
    /// The sequenced events, and the rocket's durable change when their orders' fuel decided a
    /// launch.
    pub applied: Applied,
    /// The orders the events carry, each once.
    pub orders: Vec<GiftMark>,
    /// Whether the orders' coins went into the rocket (its progress moved).
    pub fuelled: bool,
    /// Whether a PK's score moved (a durable change of the same write).
    pub pk_scored: bool,
}

/// What identifies a streak: sender, gift and the recipients (sorted).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    from: UserId,
    gift: Box<str>,
    to: Box<[UserId]>,
}

impl Key {
    fn of(ev: &GiftEvent) -> Self {
        let mut to: Vec<UserId> = ev.to.clone();
        to.sort_unstable();
        Self {
            from: ev.from.clone(),
            gift: ev.gift.as_str().into(),
            to: to.into_boxed_slice(),
        }
    }
}

/// One streak: its numbers so far, and the batch a storm holds back.
#[derive(Debug)]
struct Streak {
    id: Uuid,
    number: u32,
    count: u64,
    coins: i64,
    last_at: u64,
    held: Option<Held>,
}

/// Orders of one streak held back during a storm: their merged event so far, and each
/// order's coins (rocket fuel once the event goes out).
#[derive(Debug)]
struct Held {
    event: GiftEvent,
    orders: Vec<(GiftMark, i64)>,
    flush_at: u64,
}

impl Held {
    /// The batch goes out: its event, its orders into `out` and their fuel into `fuel`.
    fn release(self, out: &mut GiftPublished, fuel: &mut Vec<(Uuid, i64)>) -> GiftEvent {
        for (mark, coins) in self.orders {
            out.orders.push(mark);
            fuel.push((mark.order, coins));
        }
        self.event
    }
}

/// The room's streaks and its gift-event budget.
#[derive(Debug, Default)]
pub(crate) struct Streaks {
    by_key: HashMap<Key, Streak>,
    /// The streaks holding a batch (one per storming streak), in the order their batches go
    /// out when they are due at the same time.
    held: Vec<Key>,
    budget: Budget,
}

/// The gift events sent in the current budget window (one second of unix time).
#[derive(Debug, Default)]
struct Budget {
    window_start: u64,
    window_events: u32,
}

impl Budget {
    /// Moves to the window of `now` when it is a new one.
    fn at(&mut self, now: u64) {
        if now >= self.window_start.saturating_add(BUDGET_WINDOW_MS) || now < self.window_start {
            self.window_start = now - now % BUDGET_WINDOW_MS;
            self.window_events = 0;
        }
    }

    /// Counts an event against `budget` at `now` (it goes out either way): whether the budget
    /// still had room.
    fn spend(&mut self, now: u64, budget: u32) -> bool {
        self.at(now);
        let fits = budget == 0 || self.window_events < budget;
        self.window_events = self.window_events.saturating_add(1);
        fits
    }

    /// Counts an event against `budget` at `now` only if the budget has room for it.
    fn take(&mut self, now: u64, budget: u32) -> bool {
        self.at(now);
        let fits = budget == 0 || self.window_events < budget;
        if fits {
            self.window_events = self.window_events.saturating_add(1);
        }
        fits
    }

    /// When the window after the current one starts.
    fn next_window(&self) -> u64 {
        self.window_start.saturating_add(BUDGET_WINDOW_MS)
    }
}

impl Streaks {
    /// Drops the streaks that ended (holding nothing) when the room tracks too many.
    fn make_room(&mut self, now: u64, window: u64) -> bool {
        if self.by_key.len() < MAX_STREAKS {
            return true;
        }
        self.by_key
            .retain(|_, s| s.held.is_some() || now.saturating_sub(s.last_at) <= window);
        self.by_key.len() < MAX_STREAKS
    }
}

fn combo_of(s: &Streak, merged: u32) -> Combo {
    Combo {
        combo: s.number,
        merged,
        streak: s.id,
        streak_count: s.count,
        streak_coins: s.coins,
    }
}

impl RoomState {
    /// Sets the combo and storm rules (the default until then: [`GiftRules::default`]).
    pub fn set_gift_rules(&mut self, rules: GiftRules) {
        self.gift_rules = GiftRules {
            combo_window_ms: rules.combo_window_ms.max(1),
            ..rules
        };
    }

    /// Records a settled order's `gift` event at `now` (`open`: its order is open in the
    /// fenced store): numbers it in its streak and either publishes it, or, while the room is
    /// over its gift-event budget, holds it in its streak's batch for [`RoomState::flush_storm`].
    /// A lucky order is never merged (its prize is its own): it goes out at once, after the
    /// batch its streak held. Any `combo` the event came with is replaced.
    pub fn record_gift(&mut self, mut ev: GiftEvent, open: bool, now: u64) -> GiftPublished {
        let rules = self.gift_rules;
        let mark = GiftMark {
            order: ev.order,
            open,
        };
        let mut out = GiftPublished::default();
        let mut emit: Vec<GiftEvent> = Vec::with_capacity(1);
        // The orders published now with their coins: the streak's sender's fuel.
        let mut fuel: Vec<(Uuid, i64)> = Vec::with_capacity(1);
        let sender = ev.from.clone();
        let key = Key::of(&ev);
        let streaks = &mut self.streaks;
        let tracked =
            streaks.by_key.contains_key(&key) || streaks.make_room(now, rules.combo_window_ms);
        if !tracked {
            // Too many streaks at once: a streak of one.
            ev.combo = Some(Combo {
                combo: 1,
                merged: 1,
                streak: ev.order,
                streak_count: u64::from(ev.count),
                streak_coins: ev.coins,
            });
            streaks.budget.spend(now, 0);
            out.orders.push(mark);
            fuel.push((mark.order, ev.coins));
            emit.push(ev);
        } else {
            let s = streaks.by_key.entry(key.clone()).or_insert(Streak {
                id: ev.order,
                number: 0,
                count: 0,
                coins: 0,
                last_at: now,
                held: None,
            });
            if s.number > 0 && now.saturating_sub(s.last_at) > rules.combo_window_ms {
                // The streak ended: its batch goes out first, and a new streak begins.
                if let Some(h) = s.held.take() {
                    emit.push(h.release(&mut out, &mut fuel));
                    streaks.held.retain(|k| *k != key);
                    streaks.budget.spend(now, 0);
                }
                *s = Streak {
                    id: ev.order,
                    number: 0,
                    count: 0,
                    coins: 0,
                    last_at: now,
                    held: None,
                };
            }
            s.number = s.number.saturating_add(1);
            s.count = s.count.saturating_add(u64::from(ev.count));
            s.coins = s.coins.saturating_add(ev.coins);
            s.last_at = now;
            let lucky = ev.lucky_multiplier.is_some();
            let numbers = combo_of(s, 1);
            if let Some(h) = s.held.as_mut().filter(|_| !lucky) {
                let e = &mut h.event;
                e.count = e.count.saturating_add(ev.count);
                e.coins = e.coins.saturating_add(ev.coins);
                // The last order's fields, its sender's badges as they are now among them.
                e.order = ev.order;
                e.p = ev.p;
                e.to_p = ev.to_p;
                e.guard = ev.guard;
                e.vip = ev.vip;
                let merged = e.combo.as_ref().map_or(1, |c| c.merged).saturating_add(1);
                e.combo = Some(Combo { merged, ..numbers });
                h.orders.push((mark, ev.coins));
                // Held: the budget is not spent, nor the fuel added, until the batch goes out.
            } else {
                if let Some(h) = s.held.take() {
                    emit.push(h.release(&mut out, &mut fuel));
                    streaks.held.retain(|k| *k != key);
                    streaks.budget.spend(now, 0);
                }
                ev.combo = Some(numbers);
                let fits = streaks.budget.spend(now, rules.events_per_sec);
                if fits || lucky {
                    out.orders.push(mark);
                    fuel.push((mark.order, ev.coins));
                    emit.push(ev);
                } else {
                    let flush_at = now.saturating_add(rules.storm_interval_ms);
                    let coins = ev.coins;
                    s.held = Some(Held {
                        event: ev,
                        orders: vec![(mark, coins)],
                        flush_at,
                    });
                    streaks.held.push(key);
                }
            }
        }
        for e in emit {
            self.emit_gift(&mut out, e, now);
        }
        self.fuel_published(&sender, &fuel, now, &mut out);
        out
    }

    /// Sequences a `gift` event that goes out at `now`, scoring it for the PK that is on.
    fn emit_gift(&mut self, out: &mut GiftPublished, e: GiftEvent, now: u64) {
        if self.pk_score(&e, now) {
            out.pk_scored = true;
            out.applied.durable_changed = true;
        }
        self.push(&mut out.applied, Sequenced::Gift(e));
    }

    /// Adds the coins of `orders` (of `sender`), whose events go out in `out`, as rocket fuel
    /// at `now`: a launch they decide is a durable change of the same write.
    fn fuel_published(
        &mut self,
        sender: &UserId,
        orders: &[(Uuid, i64)],
        now: u64,
        out: &mut GiftPublished,
    ) {
        if !self.rocket_on() || orders.is_empty() {
            return;
        }
        for &(order, coins) in orders {
            out.applied.durable_changed |=
                self.rocket_fuel(sender, coins, now, order).durable_changed;
        }
        out.fuelled = true;
    }

    /// When the first held batch is due (unix ms).
    pub fn next_storm_flush(&self) -> Option<u64> {
        let s = &self.streaks;
        s.held
            .iter()
            .filter_map(|k| s.by_key.get(k).and_then(|st| st.held.as_ref()))
            .map(|h| h.flush_at)
            .min()
    }

    /// Publishes the held batches due at `now` (`all`: every one, for a runtime that stops,
    /// whatever the budget), each as one `gift` event with the sums of its orders; their
    /// orders' coins go into the rocket with them. The budget is the room's: due batches past
    /// what is left of it this second wait for the next one (the longest due first), and the
    /// orders that come meanwhile join them.
    pub fn flush_storm(&mut self, now: u64, all: bool) -> GiftPublished {
        let mut out = GiftPublished::default();
        let budget = self.gift_rules.events_per_sec;
        let mut due = self.take_due(now, all);
        // Stable: batches due at the same time keep the order they were held (or deferred) in.
        due.sort_by_key(|(_, h)| h.flush_at);
        let mut go = Vec::with_capacity(due.len());
        for (key, mut h) in due {
            let wait = !all && !self.streaks.budget.take(now, budget);
            match self.streaks.by_key.get_mut(&key) {
                Some(s) if wait => {
                    h.flush_at = self.streaks.budget.next_window();
                    s.held = Some(h);
                    self.streaks.held.push(key);
                }
                _ => go.push(h),
            }
        }
        if all {
            for _ in &go {
                self.streaks.budget.spend(now, 0);
            }
        }
        for h in go {
            let mut fuel = Vec::with_capacity(h.orders.len());
            let sender = h.event.from.clone();
            let e = h.release(&mut out, &mut fuel);
            self.emit_gift(&mut out, e, now);
            self.fuel_published(&sender, &fuel, now, &mut out);
        }
        out
    }

    /// Takes the held batches due at `now` (`all`: every one) without publishing them: the
    /// orders of a runtime that cannot publish, whose events it owes. Their coins are not
    /// fuel here: the runtime that publishes their events adds them.
    pub fn owe_storm(&mut self, now: u64, all: bool) -> Vec<GiftMark> {
        self.take_due(now, all)
            .into_iter()
            .flat_map(|(_, h)| h.orders.into_iter().map(|(mark, _)| mark))
            .collect()
    }

    /// Takes the held batches due at `now` (`all`: every one) out of their streaks.
    fn take_due(&mut self, now: u64, all: bool) -> Vec<(Key, Held)> {
        let streaks = &mut self.streaks;
        let mut due = Vec::new();
        let keys = std::mem::take(&mut streaks.held);
        for key in keys {
            let Some(s) = streaks.by_key.get_mut(&key) else {
                continue;
            };
            match s.held.take() {
                Some(h) if all || h.flush_at <= now => due.push((key, h)),
                Some(h) => {
                    s.held = Some(h);
                    streaks.held.push(key);
                }
                None => {}
            }
        }
        due
    }

    /// How many orders the room holds back in storm batches.
    pub fn held_gifts(&self) -> usize {
        let s = &self.streaks;
        s.held
            .iter()
            .filter_map(|k| s.by_key.get(k).and_then(|st| st.held.as_ref()))
            .map(|h| h.orders.len())
            .sum()
    }
}
