//! Table tests of gift combos and storm coalescing.

use super::*;
use std::collections::HashMap;

use protocol::client::{Combo, GiftEvent};
use uuid::Uuid;

fn u(s: &str) -> UserId {
    UserId::from(s)
}

fn room(rules: GiftRules) -> RoomState {
    let durable = Durable::new(u("host"), "t".into(), 8, None).unwrap();
    let mut r = RoomState::new(RoomId::from("r1"), durable, 7, Rules::default());
    r.set_gift_rules(rules);
    r
}

fn rules(events_per_sec: u32) -> GiftRules {
    GiftRules {
        combo_window_ms: 3_000,
        events_per_sec,
        storm_interval_ms: 500,
    }
}

fn gift(n: u128, from: &str, name: &str, to: &[&str], count: u32) -> GiftEvent {
    GiftEvent {
        order: Uuid::from_u128(n),
        from: u(from),
        to: to.iter().map(|t| u(t)).collect(),
        gift: name.into(),
        count,
        coins: 10 * i64::from(count) * to.len() as i64,
        lucky_multiplier: None,
        robot: false,
        p: None,
        guard: false,
        vip: 0,
        to_p: Default::default(),
        combo: None,
    }
}

/// The gift events in `p`, in order.
fn events(p: &GiftPublished) -> Vec<GiftEvent> {
    p.applied
        .events
        .iter()
        .filter_map(|(_, e)| match e {
            Sequenced::Gift(g) => Some(g.clone()),
            _ => None,
        })
        .collect()
}

fn combo(e: &GiftEvent) -> Combo {
    e.combo.clone().unwrap()
}

/// (order, from, gift, to, at ms, expected number, expected streak's first order)
type Row = (
    u128,
    &'static str,
    &'static str,
    &'static [&'static str],
    u64,
    u32,
    u128,
);

#[test]
fn a_streak_is_same_sender_gift_and_recipients_within_the_window() {
    let table: &[Row] = &[
        (1, "a", "rose", &["b"], 0, 1, 1),
        (2, "a", "rose", &["b"], 1_000, 2, 1),
        (3, "a", "rose", &["b"], 4_000, 3, 1), // 3 s after the last: still in the window
        (4, "a", "heart", &["b"], 4_100, 1, 4), // another gift
        (5, "a", "rose", &["b", "c"], 4_200, 1, 5), // other recipients
        (6, "a", "rose", &["c", "b"], 4_300, 2, 5), // the same recipients in another order
        (7, "c", "rose", &["b"], 4_400, 1, 7), // another sender
        (8, "a", "rose", &["b"], 7_001, 4, 1), // 3,001 ms after order 3... is past the window
    ];
    let mut r = room(rules(0));
    for &(n, from, name, to, at, number, first) in &table[..7] {
        let p = r.record_gift(gift(n, from, name, to, 1), false, at);
        let ev = events(&p);
        assert_eq!(ev.len(), 1, "order {n}");
        let c = combo(&ev[0]);
        assert_eq!(
            (c.combo, c.streak, c.merged),
            (number, Uuid::from_u128(first), 1),
            "order {n}"
        );
        assert_eq!(
            p.orders,
            vec![GiftMark {
                order: Uuid::from_u128(n),
                open: false
            }]
        );
    }
    // Past the window the streak starts again at 1, with the new order as its id.
    let (n, from, name, to, at, _, _) = table[7];
    let ev = events(&r.record_gift(gift(n, from, name, to, 1), false, at));
    let c = combo(&ev[0]);
    assert_eq!((c.combo, c.streak), (1, Uuid::from_u128(8)));
    assert_eq!(r.seq(), 8, "every event sequenced");
}

#[test]
fn streak_totals_add_up_counts_and_coins() {
    let mut r = room(rules(0));
    let mut total = 0;
    for (i, count) in [1u32, 10, 99].into_iter().enumerate() {
        let ev = events(&r.record_gift(
            gift(i as u128 + 1, "a", "rose", &["b", "c"], count),
            false,
            i as u64,
        ));
        let c = combo(&ev[0]);
        total += count;
        assert_eq!(c.streak_count, u64::from(total));
        assert_eq!(c.streak_coins, 10 * i64::from(total) * 2);
        assert_eq!(ev[0].count, count, "an unmerged event keeps its own count");
    }
}

#[test]
fn a_client_supplied_combo_is_replaced() {
    let mut r = room(rules(0));
    let mut g = gift(1, "a", "rose", &["b"], 1);
    g.combo = Some(Combo {
        combo: 999,
        merged: 50,
        streak: Uuid::from_u128(77),
        streak_count: 1_000_000,
        streak_coins: 1,
    });
    let ev = events(&r.record_gift(g, false, 0));
    assert_eq!(
        combo(&ev[0]),
        Combo {
            combo: 1,
            merged: 1,
            streak: Uuid::from_u128(1),
            streak_count: 1,
            streak_coins: 10
        }
    );
}

#[test]
fn over_the_budget_a_streak_is_merged_into_one_event_per_interval() {
    let mut r = room(rules(3));
    let mut sent = Vec::new();
    for n in 1..=10u128 {
        let p = r.record_gift(gift(n, "a", "rose", &["b"], 2), true, 100);
        sent.extend(events(&p));
        if n <= 3 {
            assert_eq!(p.orders.len(), 1, "within the budget: published at once");
        } else {
            assert!(p.orders.is_empty() && p.applied.events.is_empty(), "held");
        }
    }
    assert_eq!(sent.len(), 3);
    assert_eq!(r.held_gifts(), 7);
    assert_eq!(r.next_storm_flush(), Some(600));
    // Not due yet: nothing goes.
    assert!(r.flush_storm(599, false).orders.is_empty());
    // Due, but the room spent this second's budget: it waits for the next second.
    assert!(r.flush_storm(600, false).orders.is_empty());
    assert_eq!(r.next_storm_flush(), Some(1_000));
    let p = r.flush_storm(1_000, false);
    let ev = events(&p);
    assert_eq!(ev.len(), 1);
    let c = combo(&ev[0]);
    assert_eq!((c.combo, c.merged), (10, 7), "numbers 4..=10 of the streak");
    assert_eq!(
        (ev[0].count, ev[0].coins),
        (14, 140),
        "sums of the merged orders"
    );
    assert_eq!(ev[0].order, Uuid::from_u128(10), "the last order's id");
    assert_eq!((c.streak_count, c.streak_coins), (20, 200));
    let orders: Vec<u128> = p.orders.iter().map(|m| m.order.as_u128()).collect();
    assert_eq!(orders, (4..=10).collect::<Vec<_>>());
    assert!(p.orders.iter().all(|m| m.open));
    assert_eq!(r.next_storm_flush(), None);
    assert_eq!(r.held_gifts(), 0);
}

#[test]
fn a_new_budget_window_does_not_reorder_a_held_streak() {
    let mut r = room(rules(1));
    r.record_gift(gift(1, "a", "rose", &["b"], 1), false, 0);
    assert!(
        r.record_gift(gift(2, "a", "rose", &["b"], 1), false, 10)
            .orders
            .is_empty()
    );
    // The budget has room again, but the streak holds a batch: this order joins it.
    assert!(
        r.record_gift(gift(3, "a", "rose", &["b"], 1), false, 1_200)
            .orders
            .is_empty()
    );
    // Another streak is published at once within the new window.
    assert_eq!(
        r.record_gift(gift(4, "c", "rose", &["b"], 1), false, 1_300)
            .orders
            .len(),
        1
    );
    let ev = events(&r.flush_storm(5_000, false));
    assert_eq!(ev.len(), 1);
    let c = combo(&ev[0]);
    assert_eq!((c.combo, c.merged), (3, 2), "orders 2 and 3, after order 1");
}

#[test]
fn a_lucky_order_is_never_merged_and_goes_after_its_streaks_batch() {
    let mut r = room(rules(1));
    r.record_gift(gift(1, "a", "clover", &["b"], 1), false, 0);
    assert!(
        r.record_gift(gift(2, "a", "clover", &["b"], 1), false, 1)
            .orders
            .is_empty()
    );
    let mut lucky = gift(3, "a", "clover", &["b"], 1);
    lucky.lucky_multiplier = Some(5);
    let p = r.record_gift(lucky, false, 2);
    let ev = events(&p);
    assert_eq!(
        ev.len(),
        2,
        "the held batch, then the lucky order, over the budget"
    );
    assert_eq!(ev[0].order, Uuid::from_u128(2));
    assert_eq!(ev[1].order, Uuid::from_u128(3));
    assert_eq!(ev[1].lucky_multiplier, Some(5));
    assert_eq!((combo(&ev[0]).combo, combo(&ev[1]).combo), (2, 3));
    assert_eq!(r.held_gifts(), 0);
}

#[test]
fn an_ended_streak_publishes_its_batch_before_the_next_streak_starts() {
    let mut r = room(GiftRules {
        combo_window_ms: 100,
        events_per_sec: 1,
        storm_interval_ms: 10_000,
    });
    r.record_gift(gift(1, "a", "rose", &["b"], 1), false, 0);
    r.record_gift(gift(2, "a", "rose", &["b"], 1), false, 50);
    let ev = events(&r.record_gift(gift(3, "a", "rose", &["b"], 1), false, 2_000));
    assert_eq!(ev.len(), 1, "the batch, which spends this second's budget");
    assert_eq!(combo(&ev[0]).streak, Uuid::from_u128(1));
    // The new streak's first order is held, and numbered 1 in it.
    let ev = events(&r.flush_storm(20_000, false));
    assert_eq!(
        (combo(&ev[0]).streak, combo(&ev[0]).combo),
        (Uuid::from_u128(3), 1)
    );
}

#[test]
fn a_stopping_runtime_flushes_every_batch() {
    let mut r = room(rules(1));
    for (n, from) in [(1, "a"), (2, "a"), (3, "c"), (4, "d")] {
        r.record_gift(gift(n, from, "rose", &["b"], 1), false, 0);
    }
    assert_eq!(r.held_gifts(), 3);
    let p = r.flush_storm(0, true);
    assert_eq!(p.orders.len(), 3);
    assert_eq!(events(&p).len(), 3);
    assert_eq!(r.held_gifts(), 0);
}

#[test]
fn a_storm_of_20000_orders_adds_up_exactly_and_stays_within_budget() {
    let budget = 50;
    let mut r = room(rules(budget));
    let senders = ["s1", "s2", "s3", "s4"];
    let mut booked_coins = 0i64;
    let mut booked_count = 0u64;
    let mut events_seen = Vec::new();
    let mut orders = Vec::new();
    // 20,000 orders over one second of room time (20,000/s), flushes run as the actor would.
    for n in 0..20_000u64 {
        let now = n / 20;
        let p = r.flush_storm(now, false);
        orders.extend(p.orders.iter().map(|m| m.order));
        events_seen.extend(events(&p));
        let count = 1 + (n % 3) as u32;
        let g = gift(
            u128::from(n) + 1,
            senders[(n % 4) as usize],
            "rose",
            &["host"],
            count,
        );
        booked_coins += g.coins;
        booked_count += u64::from(count);
        let p = r.record_gift(g, false, now);
        orders.extend(p.orders.iter().map(|m| m.order));
        events_seen.extend(events(&p));
    }
    let p = r.flush_storm(10_000, false);
    orders.extend(p.orders.iter().map(|m| m.order));
    events_seen.extend(events(&p));
    assert_eq!(r.held_gifts(), 0);
    let coins: i64 = events_seen.iter().map(|e| e.coins).sum();
    let count: u64 = events_seen.iter().map(|e| u64::from(e.count)).sum();
    let merged: u64 = events_seen.iter().map(|e| u64::from(combo(e).merged)).sum();
    assert_eq!((coins, count, merged), (booked_coins, booked_count, 20_000));
    orders.sort_unstable();
    orders.dedup();
    assert_eq!(
        orders.len(),
        20_000,
        "every order carried by exactly one event"
    );
    // 50 within the second the orders came in (merged events included), then one merged
    // event per streak.
    assert!(events_seen.len() <= 50 + 4, "{} events", events_seen.len());
    // Every streak's last event carries its exact totals.
    for s in senders {
        let last = events_seen
            .iter()
            .rev()
            .find(|e| e.from.as_str() == s)
            .unwrap();
        let mine: i64 = events_seen
            .iter()
            .filter(|e| e.from.as_str() == s)
            .map(|e| e.coins)
            .sum();
        assert_eq!(combo(last).streak_coins, mine);
        assert_eq!(combo(last).combo, 5_000);
    }
}

#[test]
fn past_the_streak_cap_an_order_is_a_streak_of_one() {
    let mut r = room(rules(0));
    for n in 0..MAX_STREAKS_FOR_TESTS as u128 {
        r.record_gift(gift(n + 1, &format!("s{n}"), "rose", &["b"], 1), false, 0);
    }
    let name = "late";
    let ev = events(&r.record_gift(gift(1_000_000, name, "rose", &["b"], 1), false, 1));
    assert_eq!(combo(&ev[0]).combo, 1);
    let ev = events(&r.record_gift(gift(1_000_001, name, "rose", &["b"], 1), false, 2));
    assert_eq!(
        combo(&ev[0]).combo,
        1,
        "not tracked: every order its own streak"
    );
    // Once the streaks end, new ones are tracked again.
    let ev = events(&r.record_gift(gift(1_000_002, name, "rose", &["b"], 1), false, 10_000));
    assert_eq!(combo(&ev[0]).combo, 1);
    let ev = events(&r.record_gift(gift(1_000_003, name, "rose", &["b"], 1), false, 10_001));
    assert_eq!(combo(&ev[0]).combo, 2);
}

const MAX_STREAKS_FOR_TESTS: usize = super::streaks::MAX_STREAKS;

/// A merged event carries the last order's fields, its sender's badges among them: a badge
/// gained (or lost) during the storm shows on the event.
#[test]
fn a_merged_event_carries_the_last_orders_badges() {
    let mut r = room(rules(1));
    r.record_gift(gift(1, "a", "rose", &["b"], 1), false, 0);
    assert!(
        r.record_gift(gift(2, "a", "rose", &["b"], 1), false, 1)
            .orders
            .is_empty()
    );
    let mut last = gift(3, "a", "rose", &["b"], 1);
    (last.guard, last.vip) = (true, 2);
    r.record_gift(last, false, 2);
    let ev = events(&r.flush_storm(10_000, false));
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].order, ev[0].guard, ev[0].vip),
        (Uuid::from_u128(3), true, 2)
    );
}

/// The budget is the room's, not each streak's: 200 senders storming at once, one order each
/// per 100 ms, get at most the budget of events in every second of room time, each streak
/// still its own events, every order carried once with exact sums.
#[test]
fn the_gift_event_budget_holds_room_wide_with_many_storming_streaks() {
    let budget = 50;
    let mut r = room(rules(budget));
    let senders: Vec<String> = (0..200).map(|i| format!("s{i}")).collect();
    let mut per_second: HashMap<u64, u32> = HashMap::new();
    let mut seen = Vec::new();
    let mut orders = Vec::new();
    let mut n = 0u128;
    let mut booked = 0i64;
    let mut take = |p: GiftPublished, now: u64, seen: &mut Vec<GiftEvent>| {
        let ev = events(&p);
        *per_second.entry(now / 1000).or_default() += ev.len() as u32;
        orders.extend(p.orders.iter().map(|m| m.order));
        seen.extend(ev);
    };
    // 10 s of room time in 10 ms steps; each sender sends in its own 10 ms slot of every 100.
    for now in (0..10_000u64).step_by(10) {
        // The actor's storm timer: flush when the first batch is due.
        if r.next_storm_flush().is_some_and(|at| at <= now) {
            let p = r.flush_storm(now, false);
            take(p, now, &mut seen);
        }
        for (i, s) in senders.iter().enumerate() {
            if (i as u64 * 10) % 100 != now % 100 {
                continue;
            }
            n += 1;
            let g = gift(n, s, "rose", &["host"], 1);
            booked += g.coins;
            let p = r.record_gift(g, false, now);
            take(p, now, &mut seen);
        }
    }
    for (second, sent) in &per_second {
        assert!(*sent <= budget, "{sent} gift events in second {second}");
    }
    let before_stop = seen.len();
    // A stopping runtime publishes what it holds, whatever the budget.
    let p = r.flush_storm(10_000, true);
    orders.extend(p.orders.iter().map(|m| m.order));
    seen.extend(events(&p));
    assert_eq!(r.held_gifts(), 0);
    let coins: i64 = seen.iter().map(|e| e.coins).sum();
    assert_eq!(coins, booked);
    orders.sort_unstable();
    orders.dedup();
    assert_eq!(
        orders.len() as u128,
        n,
        "every order carried by exactly one event"
    );
    // No streak waits for ever: every sender's storm had events before the stop (200
    // streaks share 50 events a second: one each about every 4 s).
    for s in &senders {
        let mine = seen[..before_stop]
            .iter()
            .filter(|e| e.from.as_str() == s)
            .count();
        assert!(mine >= 2, "{s}: {mine} events");
    }
}
