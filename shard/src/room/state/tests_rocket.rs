//! Table tests of the room rocket: levels, launches, rewards, caps, announce once.

use std::sync::Arc;

use super::*;

fn u(s: &str) -> UserId {
    UserId::from(s)
}

fn at(session: SessionId) -> SessionRef {
    SessionRef {
        gateway: NodeId::from("g1"),
        session,
    }
}

fn level(fuel: i64, top: &[i64], present: u32, present_coins: i64) -> RocketLevel {
    RocketLevel {
        fuel,
        top: top.to_vec(),
        present,
        present_coins,
    }
}

fn room(rules: RocketRules) -> RoomState {
    let durable = Durable::new(u("host"), "t".into(), 8, None).unwrap();
    let mut r = RoomState::new(RoomId::from("r1"), durable, 7, Rules::default());
    r.set_rocket_rules(Arc::new(rules));
    for (i, m) in ["host", "a", "b", "c", "d", "e"].iter().enumerate() {
        r.join(&u(m), at(i as u64 + 1), None, 0).unwrap();
    }
    r
}

fn rules(daily_cap: i64) -> RocketRules {
    RocketRules {
        levels: vec![level(100, &[30, 20], 2, 5), level(200, &[50], 0, 0)],
        daily_cap,
        progress_interval_ms: 1000,
    }
}

const DAY: u64 = 86_400_000;

#[test]
fn a_level_paying_more_than_its_fuel_is_refused() {
    // (levels, daily cap, accepted)
    let table: Vec<(Vec<RocketLevel>, i64, bool)> = vec![
        (vec![level(100, &[50, 30], 4, 5)], 0, true), // 100: exactly the fuel
        (vec![level(100, &[50, 30], 5, 5)], 0, false), // 105
        (vec![level(100, &[101], 0, 0)], 0, false),
        (vec![level(0, &[], 0, 0)], 0, false),
        (vec![level(100, &[-1], 0, 0)], 0, false),
        (vec![level(100, &[], 3, 0)], 0, false),
        (vec![level(100, &[10], 0, 0)], -1, false),
        (vec![], 0, true), // no rocket
    ];
    for (levels, daily_cap, ok) in table {
        let r = RocketRules {
            levels: levels.clone(),
            daily_cap,
            progress_interval_ms: 1000,
        };
        assert_eq!(r.validate().is_ok(), ok, "{levels:?} cap {daily_cap}");
    }
}

#[test]
fn filling_a_level_decides_a_launch_paid_to_top_contributors_and_present_members() {
    let mut r = room(rules(0));
    assert!(
        !r.rocket_fuel(&u("a"), 30, 10, uuid::Uuid::nil())
            .durable_changed
            || r.pending_launch().is_none()
    );
    r.rocket_fuel(&u("b"), 50, 11, uuid::Uuid::nil());
    r.rocket_fuel(&u("c"), 10, 12, uuid::Uuid::nil());
    assert_eq!(r.pending_launch(), None);
    assert_eq!(r.rocket_progress().unwrap().fuel, 90);
    // 30 more from a: a 60, b 50, c 10; 120 fuel, 20 carried into level 2.
    let launching = uuid::Uuid::from_u128(13);
    let applied = r.rocket_fuel(&u("a"), 30, 13, launching);
    assert!(applied.durable_changed);
    assert!(applied.events.is_empty(), "announced only once paid");
    let l = r.pending_launch().unwrap().clone();
    assert_eq!((l.number, l.level, l.fuel), (1, 1, 100));
    // The launch's day goes into its rewards' keys (a room id made again counts from 1).
    assert_eq!(l.day, r.durable().rocket.as_ref().map(|k| k.day));
    let top: Vec<(&str, i64, &str)> = l
        .rewards
        .iter()
        .map(|w| (w.user.as_str(), w.coins, w.why.as_str()))
        .collect();
    assert_eq!(&top[..2], &[("a", 30, "top"), ("b", 20, "top")]);
    assert_eq!(top.len(), 4, "two present members");
    for w in &top[2..] {
        assert_eq!((w.1, w.2), (5, "present"));
        assert!(
            !["a", "b"].contains(&w.0),
            "top contributors are not drawn again"
        );
    }
    let p = r.rocket_progress().unwrap();
    assert_eq!((p.level, p.fuel, p.target, p.launches), (2, 20, 200, 1));
    // The 20 carried over are a's, the sender whose coins they are.
    let contrib = &r.durable().rocket.as_ref().unwrap().contrib;
    assert_eq!(contrib.get(&u("a")), Some(&20));
    // While it is pending, fuel adds up but no second launch is decided; e's 100 do not fill
    // level 2, d's 400 do (520 in it).
    r.rocket_fuel(&u("e"), 100, 14, uuid::Uuid::nil());
    let filling = uuid::Uuid::from_u128(15);
    r.rocket_fuel(&u("d"), 400, 15, filling);
    assert_eq!(r.pending_launch().unwrap().number, 1);
    // A wrong number changes nothing; the right one announces once.
    assert!(r.rocket_paid(2).events.is_empty());
    let paid = r.rocket_paid(1);
    assert!(paid.durable_changed);
    assert_eq!(paid.events.len(), 1);
    match &paid.events[0].1 {
        Sequenced::RocketLaunch(e) => {
            assert_eq!((e.launch, e.level, e.fuel), (1, 1, 100));
            assert_eq!(e.rewards, l.rewards);
            assert_eq!(
                (e.order, e.by.as_ref()),
                (Some(launching), Some(&u("a"))),
                "the launching order and its sender"
            );
        }
        other => panic!("{other:?}"),
    }
    // Level 2 filled while launch 1 waited: announcing 1 decides 2 at once, not at the next
    // gift, with d's order, which filled it.
    let l2 = r.pending_launch().unwrap();
    assert_eq!((l2.number, l2.level), (2, 2));
    assert_eq!(l2.order, Some((filling, u("d"))));
    assert_eq!(l2.rewards[0].user, u("d"));
    assert!(r.rocket_paid(1).events.is_empty(), "announced once");
    let p = r.rocket_progress().unwrap();
    assert_eq!((p.level, p.fuel, p.launches), (1, 320, 2));
    // Back at level 1 with 320 carried (d's): full again, so announcing 2 decides 3, whose
    // order is d's too.
    assert_eq!(r.rocket_paid(2).events.len(), 1);
    let l3 = r.pending_launch().unwrap();
    assert_eq!((l3.number, l3.level), (3, 1));
    assert_eq!(l3.order, Some((filling, u("d"))));
}

/// A single gift worth several levels launches them one after another, each as soon as the
/// one before is announced; the order that filled them is each launch's.
#[test]
fn a_gift_worth_several_levels_launches_them_in_turn() {
    let mut r = room(rules(0));
    let big = uuid::Uuid::from_u128(7);
    // 100 + 200 + 100 (levels 1, 2, 1 again) and 50 over.
    r.rocket_fuel(&u("a"), 450, 10, big);
    for number in 1..=3 {
        let l = r.pending_launch().unwrap().clone();
        assert_eq!(l.number, number);
        assert_eq!(l.order, Some((big, u("a"))));
        assert_eq!(r.rocket_paid(number).events.len(), 1);
    }
    assert_eq!(r.pending_launch(), None);
    let p = r.rocket_progress().unwrap();
    assert_eq!((p.level, p.fuel, p.launches), (2, 50, 3));
}

#[test]
fn the_daily_cap_clips_a_users_rewards_in_the_room_and_a_new_day_starts_afresh() {
    let mut r = room(RocketRules {
        levels: vec![level(100, &[60], 0, 0)],
        daily_cap: 100,
        progress_interval_ms: 1000,
    });
    let mut got = Vec::new();
    for day in [0u64, 0, 0] {
        r.rocket_fuel(&u("a"), 100, day * DAY + 1, uuid::Uuid::nil());
        let l = r.pending_launch().cloned();
        got.push(
            l.as_ref()
                .map_or(0, |l| l.rewards.iter().map(|w| w.coins).sum::<i64>()),
        );
        if let Some(l) = l {
            r.rocket_paid(l.number);
        }
    }
    assert_eq!(
        got,
        vec![60, 40, 0],
        "60, then the 40 left under the cap, then nothing"
    );
    // A launch with no reward left is still a launch.
    assert_eq!(r.durable().rocket.as_ref().map_or(0, |k| k.launches), 3);
    r.rocket_fuel(&u("a"), 100, DAY + 1, uuid::Uuid::nil());
    assert_eq!(r.pending_launch().unwrap().rewards[0].coins, 60);
}

#[test]
fn robots_and_absent_users_are_not_drawn_and_fuel_without_rules_is_ignored() {
    let mut r = room(RocketRules::default());
    assert!(!r.rocket_on());
    assert!(
        !r.rocket_fuel(&u("a"), 1_000, 1, uuid::Uuid::nil())
            .durable_changed
    );
    assert!(super::rocket::is_idle(&r.durable().rocket));
    let mut r = room(RocketRules {
        levels: vec![level(10, &[2], 7, 1)],
        daily_cap: 0,
        progress_interval_ms: 1000,
    });
    r.join(&UserId::from("bot:r1"), at(99), None, 0).unwrap();
    r.rocket_fuel(&UserId::from("bot:r1"), 5, 1, uuid::Uuid::nil());
    r.rocket_fuel(&u("zed"), 5, 1, uuid::Uuid::nil());
    let launch = r.pending_launch().unwrap();
    assert_eq!(
        launch.rewards[0].user,
        u("zed"),
        "the robot put in as much, and is skipped"
    );
    let drawn: Vec<&str> = r
        .pending_launch()
        .unwrap()
        .rewards
        .iter()
        .map(|w| w.user.as_str())
        .collect();
    assert_eq!(drawn.len(), 7, "zed, then the six human members");
    assert!(!drawn.iter().any(|u| u.starts_with("bot:")));
}

/// A storm room: one gift event per second, and a rocket whose levels take 1,000 coins.
fn storm_room() -> RoomState {
    let mut r = room(RocketRules {
        levels: vec![level(1000, &[100], 0, 0)],
        daily_cap: 0,
        progress_interval_ms: 1000,
    });
    r.set_gift_rules(GiftRules {
        combo_window_ms: 3_000,
        events_per_sec: 1,
        storm_interval_ms: 500,
    });
    r
}

fn rose(n: u128, coins: i64) -> protocol::client::GiftEvent {
    protocol::client::GiftEvent {
        order: uuid::Uuid::from_u128(n),
        from: u("a"),
        to: vec![u("host")],
        gift: "rose".into(),
        count: 1,
        coins,
        lucky_multiplier: None,
        robot: false,
        p: None,
        guard: false,
        vip: 0,
        to_p: Default::default(),
        combo: None,
    }
}

/// Coins the rocket counted: the levels launched and the fuel in the current one.
fn counted(r: &RoomState) -> i64 {
    let k = r.durable().rocket.as_deref().cloned().unwrap_or_default();
    k.launches as i64 * 1000 + k.fuel
}

/// A held order fuels the rocket with the write that publishes its merged event, not while it
/// is held: a runtime that dies holding it (the order stays open in the fenced store, and the
/// next owner publishes it) or owes its event must not have counted its coins, or the next
/// owner counts them again and a second launch is paid from coins that came in once.
#[test]
fn a_held_order_fuels_the_rocket_once_across_a_crash() {
    let mut r = storm_room();
    // What the fenced store holds: the durable state of the last write that changed it.
    let mut stored = r.durable().clone();
    let one = r.record_gift(rose(1, 10), true, 0);
    assert_eq!(one.orders.len(), 1, "within the budget: published");
    if one.applied.durable_changed {
        stored = r.durable().clone();
    }
    // Order 2 (1,000 coins) is held: it would fill the level.
    let two = r.record_gift(rose(2, 1000), true, 10);
    assert!(two.orders.is_empty(), "held");
    if two.applied.durable_changed {
        stored = r.durable().clone();
    }
    // The runtime dies. The next owner loads the stored state and publishes order 2, found
    // open, as a single event.
    let mut next = storm_room();
    next.durable = stored;
    let again = next.record_gift(rose(2, 1000), true, 20);
    assert_eq!(again.orders.len(), 1);
    assert!(
        counted(&next) <= 1010,
        "{} counted vs 1010 taken in",
        counted(&next)
    );
    assert_eq!(
        counted(&next),
        1000,
        "order 2 counted once (order 1's fuel was never saved)"
    );
    assert_eq!(
        next.pending_launch().map(|l| (l.number, l.order.clone())),
        Some((1, Some((uuid::Uuid::from_u128(2), u("a")))))
    );
    // A runtime that owes a held order's event (lost lease) has not counted it either.
    let mut r = storm_room();
    r.record_gift(rose(1, 10), true, 0);
    r.record_gift(rose(2, 1000), true, 10);
    let owed = r.owe_storm(10, true);
    assert_eq!(owed.len(), 1);
    assert_eq!(counted(&r), 10);
}

/// The merged event's write carries its orders' fuel: the launch is decided with it, and its
/// order is the held order that filled the level.
#[test]
fn a_held_order_fuels_the_rocket_when_its_merged_event_goes_out() {
    let mut r = storm_room();
    r.record_gift(rose(1, 10), true, 0);
    assert!(!r.record_gift(rose(2, 500), true, 10).fuelled);
    assert!(!r.record_gift(rose(3, 600), true, 20).fuelled);
    assert_eq!(counted(&r), 10);
    // Due at 510, sent at 1,000 (the second's one event went to order 1).
    let out = r.flush_storm(1_000, false);
    assert_eq!(out.orders.len(), 2);
    assert!(
        out.fuelled && out.applied.durable_changed,
        "the launch goes in the same write"
    );
    assert_eq!(counted(&r), 1110);
    assert_eq!(
        r.pending_launch().and_then(|l| l.order.clone()),
        Some((uuid::Uuid::from_u128(3), u("a"))),
        "order 3's coins filled the level"
    );
}
