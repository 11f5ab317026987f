//! Badges and VIP perks: the rights matrix for every role × VIP level × action, and how guard
//! and VIP badges ride on joins, member lists, chat and updates.

use std::sync::Arc;

use protocol::link::{HeldGuard, Standing};
use protocol::{ErrorCode, UserId};

use super::super::tests_rights::{op, party, run, session, u};
use super::super::{Badges, Presence, RoomState, Sequenced, TargetSpend, VipRules};

/// Levels at 100, 200 and 300 coins; entrance from level 2, protection from level 2.
fn rules(protected_level: u8) -> Arc<VipRules> {
    Arc::new(VipRules {
        thresholds: vec![100, 200, 300],
        entrance_level: 2,
        protected_level,
    })
}

/// The room `r` handed over by a planned move (its roster restored at `now`) to a runtime of
/// the next epoch with the same VIP rules as `rules(2)`.
fn moved(r: &RoomState, now: u64) -> RoomState {
    let mut next = RoomState::new(
        protocol::RoomId::from("r1"),
        r.durable().clone(),
        2,
        super::super::Rules::default(),
    );
    next.set_vip_rules(rules(2));
    next.restore(r.roster(), now);
    next
}

/// What the actor passes after reading `who`'s spend from the ledger.
fn read(who: &str, spent: i64) -> TargetSpend {
    TargetSpend::Read(vec![(u(who), spent)])
}

/// No user to read.
fn none() -> Vec<UserId> {
    Vec::new()
}

fn spent(spent: i64) -> Standing {
    Standing {
        guards: Vec::new(),
        spent,
    }
}

fn guarding(host: &str, until: u64) -> Standing {
    Standing {
        guards: vec![HeldGuard {
            host: UserId::from(host),
            until,
        }],
        spent: 0,
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    Ok,
    Forbidden,
    Protected,
}

#[test]
fn rights_matrix_role_by_vip_level_by_action() {
    use Want::{Forbidden as F, Ok as O, Protected as P};
    // Target `t` (a member on seat 2) with each level's spend: 0, 1, 2 (protected), 3.
    let spends = [0, 150, 250, 350];
    let actions: Vec<(serde_json::Value, [[Want; 4]; 3])> = vec![
        (
            serde_json::json!({"op":"room.kick","d":{"room":"r1","user":"t"}}),
            [[O, O, O, O], [O, O, P, P], [F, F, F, F]],
        ),
        (
            serde_json::json!({"op":"room.ban","d":{"room":"r1","user":"t","seconds":60}}),
            [[O, O, O, O], [O, O, P, P], [F, F, F, F]],
        ),
        (
            serde_json::json!({"op":"chat.mute","d":{"room":"r1","user":"t","seconds":60}}),
            [[O, O, O, O], [O, O, P, P], [F, F, F, F]],
        ),
        (
            serde_json::json!({"op":"seat.kick","d":{"room":"r1","user":"t"}}),
            [[O, O, O, O], [O, O, P, P], [F, F, F, F]],
        ),
        (
            serde_json::json!({"op":"seat.mute","d":{"room":"r1","seat":2,"muted":true}}),
            [[O, O, O, O], [O, O, P, P], [F, F, F, F]],
        ),
        // Removing the seat takes its holder off it, as a seat.kick does.
        (
            serde_json::json!({"op":"seat.count","d":{"room":"r1","seats":2}}),
            [[O, O, O, O], [O, O, P, P], [F, F, F, F]],
        ),
        // Lifting a penalty and moving a seat are not protected against.
        (
            serde_json::json!({"op":"chat.unmute","d":{"room":"r1","user":"t"}}),
            [[O, O, O, O], [O, O, O, O], [F, F, F, F]],
        ),
        (
            serde_json::json!({"op":"seat.mute","d":{"room":"r1","seat":2,"muted":false}}),
            [[O, O, O, O], [O, O, O, O], [F, F, F, F]],
        ),
        (
            serde_json::json!({"op":"seat.move","d":{"room":"r1","seat":5,"user":"t"}}),
            [[O, O, O, O], [O, O, O, O], [F, F, F, F]],
        ),
    ];
    for (d, by_role) in &actions {
        for (actor, wants) in ["host", "adm", "mem"].into_iter().zip(by_role) {
            for (spend, want) in spends.iter().zip(wants) {
                let mut r = party();
                r.set_vip_rules(rules(2));
                r.set_standing(&u("t"), spent(*spend), 1).unwrap();
                let before = r.durable().clone();
                let seq = r.seq();
                let got = run(&mut r, actor, d.clone(), 1);
                let ctx = format!("{actor} on a spend of {spend}: {d}");
                match want {
                    Want::Ok => assert!(got.is_ok(), "{ctx}: {got:?}"),
                    Want::Forbidden | Want::Protected => {
                        let code = if *want == Want::Forbidden {
                            ErrorCode::Forbidden
                        } else {
                            ErrorCode::VipProtected
                        };
                        assert_eq!(got.unwrap_err().code, code, "{ctx}");
                        assert_eq!(r.durable(), &before, "{ctx}: a refusal changed nothing");
                        assert_eq!(r.seq(), seq, "{ctx}");
                        assert!(r.member(&u("t")).is_some(), "{ctx}");
                    }
                }
            }
        }
    }
    // With protection off (level 0), an admin acts on every level.
    for (d, _) in &actions {
        let mut r = party();
        r.set_vip_rules(rules(0));
        r.set_standing(&u("t"), spent(350), 1).unwrap();
        assert!(run(&mut r, "adm", d.clone(), 1).is_ok(), "{d}");
    }
}

/// A protected VIP who is not in the room: an admin's ban or chat mute needs their spend,
/// which the actor reads from the ledger; with it they are protected as a member is, and an
/// unreadable ledger refuses the admin (the owner needs no read).
#[test]
fn an_absent_vip_is_protected_by_the_spend_read_for_them() {
    let ban = op(serde_json::json!({"op":"room.ban","d":{"room":"r1","user":"gone","seconds":60}}));
    let mute = op(serde_json::json!({"op":"chat.mute","d":{"room":"r1","user":"gone"}}));
    let fresh = || {
        let mut r = party();
        r.set_vip_rules(rules(2));
        r
    };
    let mut r = fresh();
    // Who needs a read: an admin's ban or mute of a non-member, nothing else.
    let gone = vec![u("gone")];
    assert_eq!(r.spend_reads(&u("adm"), &ban), gone);
    assert_eq!(r.spend_reads(&u("adm"), &mute), gone);
    assert_eq!(r.spend_reads(&u("host"), &ban), none(), "the owner may");
    assert_eq!(r.spend_reads(&u("mem"), &ban), none(), "refused anyway");
    let present = op(serde_json::json!({"op":"room.ban","d":{"room":"r1","user":"t"}}));
    r.set_standing(&u("t"), spent(0), 1).unwrap();
    assert_eq!(
        r.spend_reads(&u("adm"), &present),
        none(),
        "a member's spend read is held"
    );
    let unmute = op(serde_json::json!({"op":"chat.unmute","d":{"room":"r1","user":"gone"}}));
    assert_eq!(r.spend_reads(&u("adm"), &unmute), none());
    let robot = op(serde_json::json!({"op":"room.ban","d":{"room":"r1","user":"bot:1"}}));
    assert_eq!(
        r.spend_reads(&u("adm"), &robot),
        none(),
        "robots have no level"
    );

    let adm = session(&r, "adm");
    for o in [&ban, &mute] {
        for (spend, want) in [
            (read("gone", 250), Some(ErrorCode::VipProtected)),
            (read("gone", 350), Some(ErrorCode::VipProtected)),
            (TargetSpend::Unreadable, Some(ErrorCode::Unavailable)),
            (read("gone", 150), None),
        ] {
            let mut r = fresh();
            let before = r.durable().clone();
            let got = r.apply_with(&u("adm"), &adm, o, spend.clone(), 1);
            match want {
                Some(code) => {
                    assert_eq!(got.unwrap_err().code, code, "{o:?} {spend:?}");
                    assert_eq!(r.durable(), &before, "a refusal changed nothing");
                }
                None => assert!(got.is_ok(), "{o:?} {spend:?}: {got:?}"),
            }
        }
        // The owner is never refused, read or not.
        let host = session(&r, "host");
        let mut owner = fresh();
        assert!(
            owner
                .apply_with(&u("host"), &host, o, TargetSpend::NotRead, 1)
                .is_ok()
        );
    }
    // A member's own standing (read) wins over anything passed.
    r.set_standing(&u("t"), spent(250), 1).unwrap();
    let got = r.apply_with(&u("adm"), &adm, &present, read("t", 0), 1);
    assert_eq!(got.unwrap_err().code, ErrorCode::VipProtected);
}

fn joined(r: &mut RoomState, who: &str, s: Standing, now: u64) -> Vec<Presence> {
    let mut j = r
        .join(&u(who), super::super::tests_rights::at(70), None, now)
        .unwrap();
    r.joined_with(&mut j, &u(who), Some(s), now);
    j.applied.presence
}

#[test]
fn badges_ride_on_join_list_chat_and_change_with_spend() {
    let mut r = party();
    r.set_vip_rules(rules(2));
    // A guard of the owner, in force: `guard`; level 2: `vip` and the entrance.
    let mut s = guarding("host", 500);
    s.spent = 250;
    let p = joined(&mut r, "fan", s, 10);
    let want = Badges {
        guard: true,
        vip: 2,
        entrance: true,
    };
    assert_eq!(p, vec![Presence::Join(u("fan"), None, want)]);
    let frame = p[0].encode(&r.id().clone());
    let v: serde_json::Value = serde_json::from_slice(&frame).unwrap();
    assert_eq!(
        v["d"],
        serde_json::json!({"user":"fan","guard":true,"vip":2,"entrance":true})
    );
    // A guard of another host, or one already ended, shows nothing; level 1 has no entrance.
    let mut s = guarding("someone-else", 500);
    s.spent = 150;
    let p = joined(&mut r, "other", s, 10);
    let want = Badges {
        guard: false,
        vip: 1,
        entrance: false,
    };
    assert_eq!(p, vec![Presence::Join(u("other"), None, want)]);
    let p = joined(&mut r, "late", guarding("host", 10), 10);
    assert_eq!(p, vec![Presence::Join(u("late"), None, Badges::default())]);
    let frame = p[0].encode(&r.id().clone());
    assert_eq!(
        std::str::from_utf8(&frame).unwrap(),
        r#"{"ev":"member.join","room":"r1","d":{"user":"late"}}"#,
        "no badge fields when there are none"
    );
    // The member list shows what holds at the time of the read.
    let entry = |r: &RoomState, now: u64| {
        let page = r.member_list(None, Some(200), now).unwrap();
        let e = page
            .members
            .into_iter()
            .find(|e| e.user == u("fan"))
            .unwrap();
        (e.guard, e.vip)
    };
    assert_eq!(entry(&r, 499), (true, 2));
    assert_eq!(entry(&r, 500), (false, 2), "the guard ended at 500");
    // Chat carries the sender's badges.
    let out = run(
        &mut r,
        "fan",
        serde_json::json!({"op":"chat.send","d":{"room":"r1","text":"hi"}}),
        20,
    )
    .unwrap();
    let Some((_, Sequenced::Chat(c))) = out.applied.events.first() else {
        panic!("{:?}", out.applied.events)
    };
    assert_eq!((c.guard, c.vip), (true, 2));
    // Spend crossing a threshold moves the level once, with `member.update`.
    let a = r.add_spent(&u("other"), 10, 30);
    assert!(a.presence.is_empty(), "160 coins: still level 1");
    let a = r.add_spent(&u("other"), 40, 30);
    let want = Badges {
        guard: false,
        vip: 2,
        entrance: true,
    };
    assert_eq!(a.presence, vec![Presence::Update(u("other"), None, want)]);
    assert!(r.add_spent(&u("nobody"), 1_000, 30).presence.is_empty());
    joined(&mut r, "bot:amy", spent(0), 30);
    assert!(r.add_spent(&u("bot:amy"), 1_000, 30).presence.is_empty());
    assert_eq!(
        r.badges(&u("bot:amy"), 30),
        Badges::default(),
        "robots have no level"
    );
    // A guard bought while in the room: `member.update` with the badge.
    let a = r
        .set_standing(&u("late"), guarding("host", 900), 40)
        .unwrap();
    assert_eq!(
        a.presence,
        vec![Presence::Update(
            u("late"),
            None,
            Badges {
                guard: true,
                ..Badges::default()
            }
        )]
    );
    // The same standing again shows nothing new.
    let a = r
        .set_standing(&u("late"), guarding("host", 900), 41)
        .unwrap();
    assert!(a.presence.is_empty());
    assert_eq!(
        r.set_standing(&u("nobody"), spent(1), 41).unwrap_err().code,
        ErrorCode::NotInRoom
    );
}

#[test]
fn a_rejoin_with_new_badges_is_shown_as_an_update() {
    let mut r = party();
    r.set_vip_rules(rules(2));
    assert_eq!(
        joined(&mut r, "fan", spent(0), 10),
        vec![Presence::Join(u("fan"), None, Badges::default())]
    );
    // A second connection of the same member, now with a guard: no join, an update.
    let p = joined(&mut r, "fan", guarding("host", 100), 20);
    assert_eq!(
        p,
        vec![Presence::Update(
            u("fan"),
            None,
            Badges {
                guard: true,
                ..Badges::default()
            }
        )]
    );
    // Nothing changed: nothing shown.
    assert!(joined(&mut r, "fan", guarding("host", 100), 30).is_empty());
}

#[test]
fn vip_levels_and_their_validation() {
    let r = VipRules {
        thresholds: vec![100, 200, 300],
        entrance_level: 2,
        protected_level: 3,
    };
    assert!(r.validate().is_ok());
    let levels: Vec<u8> = [0, 99, 100, 199, 200, 300, i64::MAX]
        .iter()
        .map(|s| r.level(*s))
        .collect();
    assert_eq!(levels, vec![0, 0, 1, 1, 2, 3, 3]);
    assert!(VipRules::default().validate().is_ok());
    let bad = |thresholds: Vec<i64>, e: u8, p: u8| {
        VipRules {
            thresholds,
            entrance_level: e,
            protected_level: p,
        }
        .validate()
        .unwrap_err()
    };
    assert!(bad(vec![100, 100], 0, 0).contains("ascending"));
    assert!(bad(vec![200, 100], 0, 0).contains("ascending"));
    assert!(bad(vec![0, 100], 0, 0).contains("positive"));
    assert!(bad(vec![100], 2, 0).contains("entrance_level"));
    assert!(bad(vec![100], 0, 2).contains("protected_level"));
    assert!(bad((1..=101).collect(), 0, 0).contains("at most"));
    let none = VipRules {
        thresholds: Vec::new(),
        entrance_level: 0,
        protected_level: 0,
    };
    assert!(none.validate().is_ok());
    assert_eq!(none.level(i64::MAX), 0);
}

#[test]
fn a_planned_move_hands_the_standing_over_with_the_roster() {
    let mut r = party();
    r.set_vip_rules(rules(2));
    let mut s = guarding("host", 1_000);
    s.spent = 250;
    joined(&mut r, "fan", s, 10);
    let mut next = moved(&r, 20);
    let want = Badges {
        guard: true,
        vip: 2,
        entrance: true,
    };
    assert_eq!(next.badges(&u("fan"), 20), want);
    // The protection holds on the new owner too (the admin back on their connection).
    next.join(&u("adm"), super::super::tests_rights::at(5), None, 21)
        .unwrap();
    assert_eq!(
        run(
            &mut next,
            "adm",
            serde_json::json!({"op":"chat.mute","d":{"room":"r1","user":"fan"}}),
            21
        )
        .unwrap_err()
        .code,
        ErrorCode::VipProtected
    );
}

#[test]
fn the_guard_badge_follows_the_rooms_owner() {
    let mut r = party();
    // `fan` guards `t`, not the owner: no badge until `t` owns the room.
    joined(&mut r, "fan", guarding("t", 1_000), 10);
    assert!(!r.badges(&u("fan"), 10).guard);
    run(
        &mut r,
        "host",
        serde_json::json!({"op":"room.transfer","d":{"room":"r1","user":"t"}}),
        11,
    )
    .unwrap();
    assert!(r.badges(&u("fan"), 12).guard);
    assert!(!r.badges(&u("fan"), 1_000).guard, "and it ends at its time");
}

#[test]
fn a_guard_that_ends_in_the_room_is_shown_gone_once() {
    let mut r = party();
    joined(&mut r, "fan", guarding("host", 500), 10);
    joined(&mut r, "other", guarding("adm", 300), 10);
    assert!(r.next_deadline().is_some_and(|t| t <= 300));
    let updates = |a: super::super::Applied| -> Vec<Presence> {
        a.presence
            .into_iter()
            .filter(|p| matches!(p, Presence::Update(..)))
            .collect()
    };
    // A guard of someone else than the owner shows no badge: its end shows nothing.
    assert!(updates(r.tick(300)).is_empty());
    assert!(updates(r.tick(499)).is_empty());
    assert!(r.badges(&u("fan"), 499).guard);
    assert_eq!(
        updates(r.tick(500)),
        vec![Presence::Update(u("fan"), None, Badges::default())]
    );
    assert!(updates(r.tick(501)).is_empty(), "once");
    assert!(
        r.next_deadline().is_none_or(|t| t > 501),
        "nothing left to wake for"
    );
    // A renewal before the end moves it: the first end shows nothing.
    joined(&mut r, "fan", guarding("host", 900), 600);
    let a = r
        .set_standing(&u("fan"), guarding("host", 1_500), 700)
        .unwrap();
    assert!(!a.rearm, "a later end does not move the next deadline");
    let a = r
        .set_standing(&u("other"), guarding("adm", 800), 700)
        .unwrap();
    assert!(a.rearm, "an earlier end moves it");
    assert!(updates(r.tick(900)).is_empty());
    assert_eq!(
        updates(r.tick(1_500)),
        vec![Presence::Update(u("fan"), None, Badges::default())]
    );
}

/// Reserving seat 0 for the owner takes its holder off it: an admin may do it only over a
/// holder the admin could `seat.kick` (not a protected VIP, not another admin); the owner may.
#[test]
fn reserving_the_host_seat_over_a_protected_vip_or_an_admin_is_the_owners_call() {
    let host_seat = serde_json::json!({"op":"room.update","d":{"room":"r1","host_seat":true}});
    let on_seat_0 = |holder: &str, spend: i64| {
        let mut r = party();
        r.set_vip_rules(rules(2));
        r.durable.admins.push(u("adm2"));
        r.join(&u("adm2"), super::super::tests_rights::at(20), None, 0)
            .unwrap();
        r.set_standing(&u("t"), spent(spend), 1).unwrap();
        r.durable.seats[2].user = None;
        r.durable.seats[0].user = Some(u(holder));
        r
    };
    for (holder, spend, actor, want) in [
        ("t", 250, "adm", Some(ErrorCode::VipProtected)),
        ("adm2", 0, "adm", Some(ErrorCode::Forbidden)),
        ("t", 150, "adm", None),
        ("t", 250, "host", None),
        ("adm2", 0, "host", None),
    ] {
        let mut r = on_seat_0(holder, spend);
        let before = r.durable().clone();
        let got = run(&mut r, actor, host_seat.clone(), 2);
        let ctx = format!("{actor} over {holder} at a spend of {spend}");
        match want {
            Some(code) => {
                assert_eq!(got.unwrap_err().code, code, "{ctx}");
                assert_eq!(r.durable(), &before, "{ctx}: nothing changed");
            }
            None => {
                got.unwrap();
                assert!(r.durable().host_seat, "{ctx}");
                assert_eq!(r.seat_of(&u(holder)), None, "{ctx}");
            }
        }
    }
}

/// A member's spend in the room (gifts sent since the gateway read the ledger) travels with a
/// planned move and is not undone by the gateway's rejoin, which carries the reading of the
/// connection's start: the level stays, and no `member.update` takes it away.
#[test]
fn the_spend_made_in_the_room_survives_a_move_and_the_rejoin() {
    let mut r = party();
    r.set_vip_rules(rules(2));
    joined(&mut r, "fan", spent(0), 10);
    r.add_spent(&u("fan"), 250, 20);
    assert_eq!(r.badges(&u("fan"), 20).vip, 2);
    let mut next = moved(&r, 30);
    let mut j = next
        .rejoin(&u("fan"), super::super::tests_rights::at(9), None, 40)
        .unwrap();
    // The gateway's standing, read when the connection opened: 0 spent.
    next.joined_with(&mut j, &u("fan"), Some(spent(0)), 40);
    assert_eq!(next.badges(&u("fan"), 40).vip, 2);
    assert!(j.applied.presence.is_empty(), "{:?}", j.applied.presence);
    // A newer reading with more spend (gifts elsewhere) raises it.
    next.set_standing(&u("fan"), spent(350), 50).unwrap();
    assert_eq!(next.badges(&u("fan"), 50).vip, 3);
}

/// Every admin action the protection covers, on `t`, with the seat `t` holds for it.
fn covered() -> Vec<(usize, serde_json::Value)> {
    let j = |op: &str, d: serde_json::Value| serde_json::json!({"op": op, "d": d});
    vec![
        (
            2,
            j("room.kick", serde_json::json!({"room":"r1","user":"t"})),
        ),
        (
            2,
            j("room.ban", serde_json::json!({"room":"r1","user":"t"})),
        ),
        (
            2,
            j("chat.mute", serde_json::json!({"room":"r1","user":"t"})),
        ),
        (
            2,
            j("seat.kick", serde_json::json!({"room":"r1","user":"t"})),
        ),
        (
            2,
            j(
                "seat.mute",
                serde_json::json!({"room":"r1","seat":2,"muted":true}),
            ),
        ),
        (
            2,
            j("seat.count", serde_json::json!({"room":"r1","seats":2})),
        ),
        (
            0,
            j(
                "room.update",
                serde_json::json!({"room":"r1","host_seat":true}),
            ),
        ),
    ]
}

/// `t` of `r` moved to `seat`.
fn seat_t(r: &mut RoomState, seat: usize) {
    r.durable.seats[2].user = None;
    r.durable.seats[seat].user = Some(u("t"));
}

/// Applies `d` by the admin in the room `mk` makes with `spend`: refused with `want`, changing
/// nothing, or done (`None`).
fn admin_with(
    mk: &dyn Fn() -> RoomState,
    d: &serde_json::Value,
    spend: TargetSpend,
    want: Option<ErrorCode>,
) {
    let mut r = mk();
    let adm = session(&r, "adm");
    let before = r.durable().clone();
    let ctx = format!("{d} with {spend:?}");
    let got = r.apply_with(&u("adm"), &adm, &op(d.clone()), spend, 5);
    match want {
        Some(code) => {
            assert_eq!(got.unwrap_err().code, code, "{ctx}");
            assert_eq!(r.durable(), &before, "{ctx}: a refusal changed nothing");
        }
        None => assert!(got.is_ok(), "{ctx}: {got:?}"),
    }
}

/// A member who joined before the gateway's read of their standing arrived (the join carried
/// none: not read yet, or the read failed) has no known spend. An admin's moderation of them
/// needs it read from the ledger, as for an absent user, and never takes them for level 0; the
/// owner needs no read; once the standing arrives nothing is read.
#[test]
fn a_member_whose_spend_is_not_read_yet_is_protected_by_the_spend_read_for_them() {
    for (seat, d) in covered() {
        let o = op(d.clone());
        // `t` joined with no standing (as every member of `party` did).
        let mk = || {
            let mut r = party();
            r.set_vip_rules(rules(2));
            seat_t(&mut r, seat);
            r
        };
        let r = mk();
        assert_eq!(r.spend_reads(&u("adm"), &o), vec![u("t")], "{d}");
        assert_eq!(r.spend_reads(&u("host"), &o), none(), "{d}: the owner may");
        assert_eq!(r.spend_reads(&u("mem"), &o), none(), "{d}: refused anyway");
        admin_with(&mk, &d, read("t", 250), Some(ErrorCode::VipProtected));
        admin_with(
            &mk,
            &d,
            TargetSpend::Unreadable,
            Some(ErrorCode::Unavailable),
        );
        admin_with(&mk, &d, read("t", 150), None);
        // Gifts sent here before the read count: the larger figure decides.
        let gifted = || {
            let mut r = mk();
            r.add_spent(&u("t"), 250, 2);
            r
        };
        admin_with(&gifted, &d, read("t", 0), Some(ErrorCode::VipProtected));
        // The standing arrives: known, nothing is read, and it decides.
        let with = |spend: i64| {
            move || {
                let mut r = mk();
                r.set_standing(&u("t"), spent(spend), 3).unwrap();
                r
            }
        };
        assert_eq!(with(250)().spend_reads(&u("adm"), &o), none(), "{d}");
        admin_with(
            &with(250),
            &d,
            TargetSpend::NotRead,
            Some(ErrorCode::VipProtected),
        );
        assert_eq!(with(0)().spend_reads(&u("adm"), &o), none(), "{d}");
        admin_with(&with(0), &d, TargetSpend::NotRead, None);
    }
    // A join that carries a standing (even an empty one: read, nothing held) needs no read,
    // and a later join without one (another connection, its read not back) keeps it.
    let kick = op(serde_json::json!({"op":"room.kick","d":{"room":"r1","user":"fan"}}));
    let mut r = party();
    r.set_vip_rules(rules(2));
    joined(&mut r, "fan", spent(0), 10);
    assert_eq!(r.spend_reads(&u("adm"), &kick), none());
    let mut j = r
        .join(&u("fan"), super::super::tests_rights::at(71), None, 11)
        .unwrap();
    r.joined_with(&mut j, &u("fan"), None, 11);
    assert_eq!(r.spend_reads(&u("adm"), &kick), none(), "still read");
    // Nothing is read without protection, nor for anything else than the covered actions.
    let chat = op(serde_json::json!({"op":"chat.unmute","d":{"room":"r1","user":"t"}}));
    assert_eq!(r.spend_reads(&u("adm"), &chat), none());
    let unmute = op(serde_json::json!({"op":"seat.mute","d":{"room":"r1","seat":2,"muted":false}}));
    assert_eq!(r.spend_reads(&u("adm"), &unmute), none());
    r.set_vip_rules(rules(0));
    let ban = op(serde_json::json!({"op":"room.ban","d":{"room":"r1","user":"t"}}));
    assert_eq!(r.spend_reads(&u("adm"), &ban), none());
}

/// After an unplanned stop the next runtime adopts the seat holders as away members, without
/// their standing: until one rejoins with it, an admin's moderation of them needs their spend
/// read, never level 0. A planned move hands an unknown spend over as unknown.
#[test]
fn a_seat_holder_adopted_after_an_unplanned_stop_is_protected_by_the_spend_read() {
    for (seat, d) in covered() {
        let o = op(d.clone());
        let mk = || {
            let mut r = party();
            r.set_vip_rules(rules(2));
            r.set_standing(&u("t"), spent(250), 1).unwrap();
            seat_t(&mut r, seat);
            // No roster: the new owner has the saved seats only.
            let mut next = RoomState::new(
                protocol::RoomId::from("r1"),
                r.durable().clone(),
                2,
                super::super::Rules::default(),
            );
            next.set_vip_rules(rules(2));
            next.adopt_seated(10);
            next.join(&u("adm"), super::super::tests_rights::at(5), None, 11)
                .unwrap();
            next
        };
        assert_eq!(mk().spend_reads(&u("adm"), &o), vec![u("t")], "{d}");
        admin_with(&mk, &d, read("t", 250), Some(ErrorCode::VipProtected));
        admin_with(
            &mk,
            &d,
            TargetSpend::Unreadable,
            Some(ErrorCode::Unavailable),
        );
        admin_with(&mk, &d, read("t", 0), None);
        // Back with the standing the gateway read: known again.
        let back = || {
            let mut next = mk();
            let mut j = next
                .rejoin(&u("t"), super::super::tests_rights::at(9), None, 12)
                .unwrap();
            next.joined_with(&mut j, &u("t"), Some(spent(250)), 12);
            next
        };
        assert_eq!(back().spend_reads(&u("adm"), &o), none(), "{d}");
        admin_with(
            &back,
            &d,
            TargetSpend::NotRead,
            Some(ErrorCode::VipProtected),
        );
    }
    // A planned move: the roster says which spends were read.
    let mut r = party();
    r.set_vip_rules(rules(2));
    r.set_standing(&u("mem"), spent(0), 1).unwrap();
    let mut next = moved(&r, 20);
    next.join(&u("adm"), super::super::tests_rights::at(5), None, 21)
        .unwrap();
    let kick = |who: &str| op(serde_json::json!({"op":"room.kick","d":{"room":"r1","user":who}}));
    assert_eq!(next.spend_reads(&u("adm"), &kick("t")), vec![u("t")]);
    assert_eq!(next.spend_reads(&u("adm"), &kick("mem")), none());
}
