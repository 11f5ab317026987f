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
