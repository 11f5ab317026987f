//! The room rules' timing and moderation: publish deadlines and RTC reports, seat mutes and
//! counts, chat mutes, kicks and bans, closing, transfer, room info, and the durable state.

use super::tests_rights::{T, at, directs, party, run, seat_updates, u};
use super::*;

#[test]
fn a_seat_held_without_audio_is_freed_at_its_deadline() {
    let mut d = Durable::new(u("host"), "t".into(), 4, None).unwrap();
    d.admins.clear();
    let mut r = RoomState::new(RoomId::from("r1"), d, 1, Rules::default());
    r.join(&u("a"), at(1), None, 0).unwrap();
    let (_, a) = r.seat_take(&u("a"), Some(1), 1000).unwrap();
    assert_eq!(seat_updates(&a)[0].seat.publish_by, Some(1000 + T));
    assert_eq!(r.next_deadline(), Some(1000 + T));
    assert!(r.tick(1000 + T - 1).events.is_empty());
    let a = r.tick(1000 + T);
    let up = seat_updates(&a);
    assert_eq!((up[0].seat.user.clone(), up[0].by.clone()), (None, None));
    assert_eq!(
        (up[0].cause.as_str(), up[0].reason.as_deref()),
        ("server", Some("publish_timeout"))
    );
    // Publishing in time keeps the seat; stopping restarts the clock from then.
    r.seat_take(&u("a"), Some(1), 50_000).unwrap();
    r.mic_publishing(&u("a"), true, 50_500).unwrap();
    assert_eq!(r.durable().seats[1].publish_by, None);
    assert!(r.tick(70_000).events.is_empty());
    r.mic_publishing(&u("a"), false, 80_000).unwrap();
    assert_eq!(r.durable().seats[1].publish_by, Some(80_000 + T));
    assert_eq!(
        r.mic_publishing(&u("host"), true, 1).unwrap_err().code,
        ErrorCode::NotSeated
    );
}

fn rtc(id: &str, kind: protocol::link::RtcKind, at_ms: u64) -> RtcEvent {
    RtcEvent {
        id: id.into(),
        kind,
        at_ms,
    }
}

#[test]
fn rtc_reports_are_idempotent_order_tolerant_and_kept_for_later_seats() {
    use protocol::link::RtcKind::{Left, Published, Unpublished};
    let d = Durable::new(u("host"), "t".into(), 4, None).unwrap();
    let mut r = RoomState::new(RoomId::from("r1"), d, 1, Rules::default());
    r.join(&u("a"), at(1), None, 0).unwrap();
    // A webhook before the user sits: kept, and the seat starts publishing with no deadline.
    r.rtc(&u("a"), &rtc("e1", Published, 1000), 1_000_000);
    let (_, a) = r.seat_take(&u("a"), Some(0), 2000).unwrap();
    assert!(seat_updates(&a)[0].seat.publishing);
    assert_eq!(r.durable().seats[0].publish_by, None);
    // Stopped at 3000: deadline 3000 + T. The same event again changes nothing.
    let a = r.rtc(&u("a"), &rtc("e2", Unpublished, 3000), 1_000_000);
    let up = seat_updates(&a);
    assert_eq!(
        (up[0].cause.as_str(), up[0].seat.publish_by),
        ("server", Some(3000 + T))
    );
    assert_eq!(
        r.rtc(&u("a"), &rtc("e2", Unpublished, 3000), 1_000_000),
        Applied::default()
    );
    // A late "started" from before the stop does nothing.
    assert!(
        r.rtc(&u("a"), &rtc("e0", Published, 2500), 1_000_000)
            .events
            .is_empty()
    );
    assert_eq!(r.durable().seats[0].publish_by, Some(3000 + T));
    // A newer start clears the deadline; leaving the RTC room restarts it.
    r.rtc(&u("a"), &rtc("e3", Published, 4000), 1_000_000);
    assert_eq!(r.durable().seats[0].publish_by, None);
    r.rtc(&u("a"), &rtc("e4", Left, 5000), 1_000_000);
    assert_eq!(r.durable().seats[0].publish_by, Some(5000 + T));
    let a = r.tick(5000 + T);
    assert_eq!(
        seat_updates(&a)[0].reason.as_deref(),
        Some("publish_timeout")
    );
    // A time in the future counts as now: it cannot hold the seat's state past later reports.
    r.rtc(&u("a"), &rtc("e6", Published, u64::MAX), 100_000);
    assert_eq!(r.durable().rtc[&u("a")].at, 100_000);
    r.rtc(&u("a"), &rtc("e7", Unpublished, 100_001), 100_001);
    assert!(!r.durable().rtc[&u("a")].publishing);
    // Reports about users without a seat are dropped once stale.
    r.rtc(&u("b"), &rtc("e5", Published, 6000), 1_000_000);
    assert!(r.durable().rtc.contains_key(&u("b")));
    r.tick(6000 + 60_000);
    assert!(!r.durable().rtc.contains_key(&u("b")));
}

#[test]
fn seat_mutes_by_admins_bind_the_seated_user() {
    let mut r = party();
    let mute = |muted: bool| serde_json::json!({"op":"seat.mute","d":{"room":"r1","seat":2,"muted":muted}});
    // The user mutes and unmutes their own seat.
    run(&mut r, "t", mute(true), 1).unwrap();
    let out = run(&mut r, "t", mute(false), 1).unwrap();
    assert_eq!(seat_updates(&out.applied)[0].cause, "self");
    // Muted by an admin, they cannot unmute.
    let out = run(&mut r, "adm", mute(true), 1).unwrap();
    let up = seat_updates(&out.applied);
    assert_eq!(
        (
            up[0].seat.muted,
            up[0].seat.admin_muted,
            up[0].cause.as_str()
        ),
        (true, true, "admin")
    );
    assert_eq!(
        run(&mut r, "t", mute(false), 1).unwrap_err().code,
        ErrorCode::Forbidden
    );
    // Another member cannot touch it; the mute stays with the seat when its user leaves.
    assert_eq!(
        run(&mut r, "mem", mute(false), 1).unwrap_err().code,
        ErrorCode::Forbidden
    );
    r.seat_leave(&u("t"));
    assert!(r.durable().seats[2].muted && r.durable().seats[2].user.is_none());
    run(&mut r, "host", mute(false), 1).unwrap();
    assert!(!r.durable().seats[2].muted);
}

#[test]
fn seat_count_lock_all_move_and_host_seat() {
    let mut r = party();
    r.durable.seats[7].user = Some(u("mem"));
    let out = run(
        &mut r,
        "adm",
        serde_json::json!({"op":"seat.count","d":{"room":"r1","seats":5}}),
        1,
    )
    .unwrap();
    let up = seat_updates(&out.applied);
    assert_eq!(up.len(), 1);
    assert_eq!(
        (up[0].seat.index, up[0].reason.as_deref()),
        (7, Some("seat_removed"))
    );
    assert!(
        matches!(out.applied.events.last(), Some((_, Sequenced::RoomUpdate(i))) if i.seats == Some(5))
    );
    assert_eq!(r.durable().seats.len(), 5);
    // Lock all: every seat that changes gets its update; the seated stay.
    let out = run(
        &mut r,
        "host",
        serde_json::json!({"op":"seat.lock_all","d":{"room":"r1","locked":true}}),
        1,
    )
    .unwrap();
    assert_eq!(seat_updates(&out.applied).len(), 5);
    assert_eq!(r.seat_of(&u("t")), Some(2));
    run(
        &mut r,
        "host",
        serde_json::json!({"op":"seat.lock_all","d":{"room":"r1","locked":false}}),
        1,
    )
    .unwrap();
    // Moving oneself (allowed in apply mode once seated) keeps the publish state.
    let out = run(
        &mut r,
        "t",
        serde_json::json!({"op":"seat.move","d":{"room":"r1","seat":4}}),
        1,
    )
    .unwrap();
    let up = seat_updates(&out.applied);
    assert_eq!(up.len(), 2);
    assert!(up[1].seat.publishing);
    assert_eq!(
        run(
            &mut r,
            "mem",
            serde_json::json!({"op":"seat.move","d":{"room":"r1","seat":1}}),
            1
        )
        .unwrap_err()
        .code,
        ErrorCode::NotSeated
    );
    // The host seat: reserved for the owner, freed from anyone else when turned on.
    r.durable.seats[0].user = Some(u("lis"));
    let out = run(&mut r, "host", serde_json::json!({"op":"room.update","d":{"room":"r1","host_seat":true,"seat_mode":"free"}}), 1).unwrap();
    assert_eq!(
        seat_updates(&out.applied)[0].reason.as_deref(),
        Some("host_seat")
    );
    assert_eq!(
        r.seat_take(&u("lis"), Some(0), 1).unwrap_err().code,
        ErrorCode::Forbidden
    );
    assert_ne!(r.seat_take(&u("lis"), None, 1).unwrap().0, 0);
    assert_eq!(r.seat_take(&u("host"), None, 1).unwrap().0, 0);
}

/// Removing a seat takes its holder off it: an admin's shrink may remove only seats an admin
/// could `seat.kick` from, never the owner's or another admin's; the owner's may remove any.
#[test]
fn an_admins_seat_count_spares_the_owner_and_other_admins() {
    let count = |n: u32| serde_json::json!({"op":"seat.count","d":{"room":"r1","seats":n}});
    for (holder, actor, want) in [
        ("host", "adm", Some(ErrorCode::Forbidden)),
        ("adm2", "adm", Some(ErrorCode::Forbidden)),
        ("adm", "adm", None),
        ("adm", "host", None),
    ] {
        let mut r = party();
        r.join(&u("adm2"), at(20), None, 0).unwrap();
        r.durable.admins.push(u("adm2"));
        r.durable.seats[6].user = Some(u(holder));
        let before = r.durable().clone();
        let got = run(&mut r, actor, count(5), 1);
        match want {
            Some(code) => {
                assert_eq!(
                    got.unwrap_err().code,
                    code,
                    "{actor} removing {holder}'s seat"
                );
                assert_eq!(r.durable(), &before, "a refusal changed nothing");
            }
            None => {
                got.unwrap();
                assert_eq!(r.seat_of(&u(holder)), None);
                assert_eq!(r.durable().seats.len(), 5);
            }
        }
    }
}

/// A room holds at most 100 invitations; expired ones (kept to answer `REQUEST_EXPIRED`) make
/// way for new ones, pending ones do not.
#[test]
fn invitations_are_bounded() {
    let mut r = party();
    for i in 0..100 {
        let name = format!("m{i}");
        r.join(&u(&name), at(100 + i), None, 0).unwrap();
        r.seat_invite(&u("host"), &u(&name), None, 0).unwrap();
    }
    r.join(&u("late"), at(300), None, 0).unwrap();
    let full = r.seat_invite(&u("host"), &u("late"), None, 0).unwrap_err();
    assert_eq!(full.code, ErrorCode::BadRequest);
    // A new invitation for someone invited already replaces theirs.
    r.seat_invite(&u("host"), &u("m0"), None, 0).unwrap();
    // Once they expired and were swept, there is room again.
    let ttl = r.rules.invite_ttl_ms;
    r.tick(ttl + 1);
    r.seat_invite(&u("host"), &u("late"), None, ttl + 2)
        .unwrap();
    assert!(r.durable().invites.len() <= 100);
}

/// Staff take seats directly: a member's pending request goes when the owner makes them an
/// admin or the owner. A request whose user is not in the room (saved before an unplanned
/// stop) cannot be approved.
#[test]
fn requests_end_with_promotion_and_need_a_member_to_approve() {
    let mut r = party();
    run(
        &mut r,
        "host",
        serde_json::json!({"op":"room.admin","d":{"room":"r1","user":"req","admin":true}}),
        1,
    )
    .unwrap();
    assert!(r.durable().requests.is_empty());
    let mut r = party();
    run(
        &mut r,
        "host",
        serde_json::json!({"op":"room.transfer","d":{"room":"r1","user":"req"}}),
        1,
    )
    .unwrap();
    assert!(r.durable().requests.is_empty());
    let mut r = party();
    r.members.remove(&u("req"));
    let got = run(
        &mut r,
        "host",
        serde_json::json!({"op":"seat.approve","d":{"room":"r1","user":"req"}}),
        1,
    );
    assert_eq!(got.unwrap_err().code, ErrorCode::UserNotInRoom);
    assert_eq!(r.seat_of(&u("req")), None);
}

#[test]
fn chat_mutes_hold_until_their_end_and_the_server_announces_it() {
    let mut r = party();
    let out = run(
        &mut r,
        "adm",
        serde_json::json!({"op":"chat.mute","d":{"room":"r1","user":"mem","seconds":30}}),
        1000,
    )
    .unwrap();
    let [(_, Sequenced::Moderation(m))] = out.applied.events.as_slice() else {
        panic!()
    };
    assert_eq!(
        (m.action.as_str(), m.until, m.by.clone()),
        ("chat_mute", Some(31_000), Some(u("adm")))
    );
    let e = r.chat_line(&u("mem"), "hi".into(), 30_999).unwrap_err();
    assert_eq!(e.code, ErrorCode::ChatMuted);
    assert!(e.msg.contains("31000"), "{}", e.msg);
    let a = r.tick(31_000);
    let [(_, Sequenced::Moderation(m))] = a.events.as_slice() else {
        panic!()
    };
    assert_eq!((m.action.as_str(), m.by.clone()), ("chat_unmute", None));
    r.chat_line(&u("mem"), "hi".into(), 31_000).unwrap();
    assert_eq!(r.durable().audit.len(), 1, "the mute is audited");
}

#[test]
fn kicks_and_bans_evict_and_bans_hold_until_they_end() {
    let mut r = party();
    let out = run(
        &mut r,
        "adm",
        serde_json::json!({"op":"room.kick","d":{"room":"r1","user":"t","ban_seconds":60}}),
        1000,
    )
    .unwrap();
    let a = &out.applied;
    assert_eq!(
        a.evicted,
        vec![Evicted {
            user: u("t"),
            at: at(3),
            reason: "kicked"
        }]
    );
    assert_eq!(a.presence, vec![Presence::Leave(u("t"), "kicked")]);
    let up = seat_updates(a);
    assert_eq!(
        (up[0].seat.user.clone(), up[0].reason.as_deref()),
        (None, Some("kicked"))
    );
    assert!(
        matches!(a.events.last(), Some((_, Sequenced::Moderation(m))) if m.action == "kick" && m.until == Some(61_000))
    );
    assert_eq!(
        r.join(&u("t"), at(30), None, 60_999).unwrap_err().code,
        ErrorCode::Banned
    );
    r.tick(61_000);
    r.join(&u("t"), at(30), None, 61_000).unwrap();
    // A ban without end holds until lifted; a plain kick lets them back at once.
    run(
        &mut r,
        "host",
        serde_json::json!({"op":"room.ban","d":{"room":"r1","user":"t"}}),
        62_000,
    )
    .unwrap();
    assert_eq!(
        r.join(&u("t"), at(31), None, u64::MAX / 2)
            .unwrap_err()
            .code,
        ErrorCode::Banned
    );
    run(
        &mut r,
        "adm",
        serde_json::json!({"op":"room.unban","d":{"room":"r1","user":"t"}}),
        63_000,
    )
    .unwrap();
    r.join(&u("t"), at(31), None, 63_000).unwrap();
    run(
        &mut r,
        "adm",
        serde_json::json!({"op":"room.kick","d":{"room":"r1","user":"t"}}),
        64_000,
    )
    .unwrap();
    r.join(&u("t"), at(32), None, 64_000).unwrap();
}

#[test]
fn the_ban_list_pages_by_user_with_a_stable_cursor() {
    let mut r = party();
    for (i, name) in ["b1", "b2", "b3", "b4", "b5"].iter().enumerate() {
        run(
            &mut r,
            "host",
            serde_json::json!({"op":"room.ban","d":{"room":"r1","user":name}}),
            i as u64,
        )
        .unwrap();
    }
    let page = |r: &mut RoomState, cursor: Option<&str>| {
        let out = run(
            r,
            "adm",
            serde_json::json!({"op":"room.bans","d":{"room":"r1","cursor":cursor,"limit":2}}),
            10,
        )
        .unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.ok).unwrap()
    };
    let p1 = page(&mut r, None);
    assert_eq!(p1["bans"][0]["user"], "b1");
    assert_eq!(p1["next"], "b2");
    // A ban lifted during the scan skips nobody still banned.
    run(
        &mut r,
        "host",
        serde_json::json!({"op":"room.unban","d":{"room":"r1","user":"b1"}}),
        11,
    )
    .unwrap();
    let p2 = page(&mut r, Some("b2"));
    assert_eq!(p2["bans"][0]["user"], "b3");
    let p3 = page(&mut r, p2["next"].as_str());
    assert_eq!(p3["bans"].as_array().unwrap().len(), 1);
    assert_eq!(p3["next"], serde_json::Value::Null);
    let bad = run(
        &mut r,
        "adm",
        serde_json::json!({"op":"room.bans","d":{"room":"r1","limit":101}}),
        10,
    );
    assert_eq!(bad.unwrap_err().code, ErrorCode::BadRequest);
}

#[test]
fn closing_evicts_everyone_and_only_the_owner_reopens() {
    let mut r = party();
    let out = run(
        &mut r,
        "host",
        serde_json::json!({"op":"room.close","d":{"room":"r1"}}),
        5,
    )
    .unwrap();
    assert_eq!(out.applied.evicted.len(), 6);
    assert!(out.applied.evicted.iter().all(|e| e.reason == "closed"));
    assert_eq!(r.member_count(), 0);
    assert!(r.durable().seats.iter().all(|s| s.user.is_none()));
    assert_eq!(
        r.join(&u("host"), at(40), None, 6).unwrap_err().code,
        ErrorCode::RoomClosed
    );
    let open = serde_json::json!({"op":"room.open","d":{"room":"r1"}});
    assert_eq!(
        run(&mut r, "adm", open.clone(), 7).unwrap_err().code,
        ErrorCode::Forbidden
    );
    run(&mut r, "host", open, 7).unwrap();
    r.join(&u("mem"), at(41), None, 8).unwrap();
    let actions: Vec<&str> = r
        .durable()
        .audit
        .iter()
        .map(|m| m.action.as_str())
        .collect();
    assert_eq!(actions, ["close", "reopen"]);
}

#[test]
fn transfer_swaps_roles_and_admins_are_capped() {
    let mut r = party();
    let out = run(
        &mut r,
        "host",
        serde_json::json!({"op":"room.transfer","d":{"room":"r1","user":"adm"}}),
        1,
    )
    .unwrap();
    let roles: Vec<(String, String)> = out
        .applied
        .events
        .iter()
        .filter_map(|(_, e)| match e {
            Sequenced::Role(c) => Some((c.user.as_str().to_owned(), c.role.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        roles,
        [
            ("adm".into(), "owner".into()),
            ("host".into(), "member".into())
        ]
    );
    assert_eq!(r.durable().owner, u("adm"));
    assert!(r.durable().admins.is_empty());
    assert_eq!(
        run(
            &mut r,
            "host",
            serde_json::json!({"op":"room.close","d":{"room":"r1"}}),
            1
        )
        .unwrap_err()
        .code,
        ErrorCode::Forbidden
    );
    for i in 0..20 {
        let name = format!("x{i}");
        r.join(&u(&name), at(100 + i), None, 1).unwrap();
        run(
            &mut r,
            "adm",
            serde_json::json!({"op":"room.admin","d":{"room":"r1","user":name,"admin":true}}),
            1,
        )
        .unwrap();
    }
    let e = run(
        &mut r,
        "adm",
        serde_json::json!({"op":"room.admin","d":{"room":"r1","user":"mem","admin":true}}),
        1,
    );
    assert_eq!(e.unwrap_err().code, ErrorCode::BadRequest);
}

#[test]
fn room_info_and_password_changes_are_validated_and_announced() {
    let mut r = party();
    let out = run(&mut r, "adm", serde_json::json!({"op":"room.update","d":{"room":"r1","notice":"be kind\nno spam","cover":"https://x.test/c.png","title":"t"}}), 1).unwrap();
    let [(_, Sequenced::RoomUpdate(info))] = out.applied.events.as_slice() else {
        panic!()
    };
    assert_eq!(info.title, None, "unchanged fields are not announced");
    assert_eq!(info.notice.as_deref(), Some("be kind\nno spam"));
    for bad in [
        serde_json::json!({"room":"r1","cover":"javascript:alert(1)"}),
        serde_json::json!({"room":"r1","notice":"x".repeat(501)}),
        serde_json::json!({"room":"r1","title":"bad\u{202e}"}),
    ] {
        let before = r.durable().clone();
        let e = run(
            &mut r,
            "adm",
            serde_json::json!({"op":"room.update","d":bad}),
            1,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert_eq!(r.durable(), &before);
    }
    let out = run(
        &mut r,
        "adm",
        serde_json::json!({"op":"room.lock","d":{"room":"r1","password":"pw"}}),
        1,
    )
    .unwrap();
    assert!(
        matches!(out.applied.events.as_slice(), [(_, Sequenced::RoomUpdate(i))] if i.locked == Some(true))
    );
    assert_eq!(
        r.join(&u("new"), at(60), None, 1).unwrap_err().code,
        ErrorCode::RoomLocked
    );
    run(
        &mut r,
        "adm",
        serde_json::json!({"op":"room.lock","d":{"room":"r1","password":null}}),
        1,
    )
    .unwrap();
    r.join(&u("new"), at(60), None, 1).unwrap();
}

#[test]
fn leaving_drops_pending_requests_and_invitations() {
    let mut r = party();
    run(
        &mut r,
        "host",
        serde_json::json!({"op":"seat.invite","d":{"room":"r1","user":"lis"}}),
        1,
    )
    .unwrap();
    let a = r.leave(&u("req"), &at(4), "left").unwrap();
    assert_eq!(
        directs(&a)[0].1["d"],
        serde_json::json!({"user":"req","state":"cancelled"})
    );
    r.leave(&u("lis"), &at(5), "left").unwrap();
    assert!(r.durable().requests.is_empty() && r.durable().invites.is_empty());
}

#[test]
fn the_audit_list_is_bounded_and_durable_state_round_trips() {
    let mut r = party();
    for i in 0..(durable::AUDIT_LEN as u64 + 5) {
        run(
            &mut r,
            "host",
            serde_json::json!({"op":"chat.mute","d":{"room":"r1","user":"mem","seconds":60}}),
            i,
        )
        .unwrap();
    }
    assert_eq!(r.durable().audit.len(), durable::AUDIT_LEN);
    assert_eq!(r.durable().audit[0].at, 5, "the oldest went first");
    run(
        &mut r,
        "host",
        serde_json::json!({"op":"room.ban","d":{"room":"r1","user":"zed","seconds":60}}),
        1,
    )
    .unwrap();
    r.rtc(
        &u("t"),
        &rtc("e", protocol::link::RtcKind::Published, 3),
        1_000_000,
    );
    let json = serde_json::to_string(r.durable()).unwrap();
    let back: Durable = serde_json::from_str(&json).unwrap();
    assert_eq!(&back, r.durable());
    // A snapshot written before these fields existed still loads.
    let old = r#"{"title":"t","owner":"h","admins":[],"password":null,"seats":[{"user":null,"locked":false,"muted":false}]}"#;
    let d: Durable = serde_json::from_str(old).unwrap();
    assert_eq!(d.seat_mode, client::SeatMode::Free);
    assert!(d.bans.is_empty() && !d.closed);
}

#[test]
fn robots_are_counted_as_they_come_and_go() {
    let mut r = party();
    let bot = SessionRef {
        gateway: NodeId::from(ROBOT_GATEWAY),
        session: 1,
    };
    r.rejoin(&u("bot:amy"), bot.clone(), None, 0).unwrap();
    // The same robot again, on the same connection, is not a second robot.
    r.rejoin(&u("bot:amy"), bot.clone(), None, 0).unwrap();
    assert_eq!((r.robot_count(), r.snapshot().robots), (1, 1));
    r.leave(&u("bot:amy"), &bot, "left").unwrap();
    r.leave(&u("mem"), &at(2), "left").unwrap();
    assert_eq!((r.robot_count(), r.member_count()), (0, 5));
    // Robots are members through no gateway a room sends to.
    r.rejoin(&u("bot:bo"), bot, None, 0).unwrap();
    assert!(r.gateways().all(|g| g.as_str() != ROBOT_GATEWAY));
}

#[test]
fn moving_with_seat_take_keeps_the_publish_deadline_as_seat_move_does() {
    let mut d = Durable::new(u("host"), "t".into(), 4, None).unwrap();
    d.admins.clear();
    let mut r = RoomState::new(RoomId::from("r1"), d, 1, Rules::default());
    r.join(&u("a"), at(1), None, 0).unwrap();
    r.seat_take(&u("a"), Some(1), 1000).unwrap();
    // Hopping to another seat just before the deadline does not buy another T.
    let (_, a) = r.seat_take(&u("a"), Some(2), 1000 + T - 1).unwrap();
    assert_eq!(seat_updates(&a)[1].seat.publish_by, Some(1000 + T));
    let (_, a) = r.seat_move(&u("a"), None, 3, false).unwrap();
    assert_eq!(seat_updates(&a)[1].seat.publish_by, Some(1000 + T));
    let up = seat_updates(&r.tick(1000 + T));
    assert_eq!(
        (
            up[0].seat.index,
            up[0].seat.user.clone(),
            up[0].reason.as_deref()
        ),
        (3, None, Some("publish_timeout"))
    );
}

/// The app's backend moderates like the owner, past VIP protection, never the owner, and with
/// no `by`.
#[test]
fn the_backend_kicks_bans_and_mutes_anyone_but_the_owner_with_no_by() {
    use protocol::client::{BackendAction, BackendModeration};
    let mut r = party();
    let m = |action, user: &str, seconds| BackendModeration {
        action,
        user: u(user),
        seconds,
    };
    // An admin, banned: out, no longer staff, the role change and the ban with no `by`.
    let out = r
        .backend_moderate(&m(BackendAction::Ban, "adm", Some(60)), 1_000)
        .unwrap();
    assert!(!r.is_member(&u("adm")));
    assert!(!r.durable.admins.contains(&u("adm")));
    assert_eq!(r.durable.bans[&u("adm")].by, None);
    assert_eq!(r.durable.bans[&u("adm")].until, Some(61_000));
    let by: Vec<(&str, Option<UserId>)> = out
        .events
        .iter()
        .filter_map(|(_, e)| match e {
            Sequenced::Role(c) => Some(("role", c.by.clone())),
            Sequenced::Moderation(m) => Some(("moderation", m.by.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(by, [("role", None), ("moderation", None)]);
    assert_eq!(out.evicted.len(), 1);
    // A mute and its lifting; lifting what is not there changes nothing.
    r.backend_moderate(&m(BackendAction::Mute, "mem", None), 2_000)
        .unwrap();
    assert_eq!(
        run(
            &mut r,
            "mem",
            serde_json::json!({"op": "chat.send", "d": {"room": "r1", "text": "x"}}),
            3_000
        )
        .unwrap_err()
        .code,
        ErrorCode::ChatMuted
    );
    let lifted = r
        .backend_moderate(&m(BackendAction::Unmute, "mem", None), 4_000)
        .unwrap();
    assert_eq!(lifted.events.len(), 1);
    let again = r
        .backend_moderate(&m(BackendAction::Unmute, "mem", None), 4_000)
        .unwrap();
    assert!(again.events.is_empty());
    // A kick needs a member; a kick with seconds bans too; unban lifts it.
    let err = r
        .backend_moderate(&m(BackendAction::Kick, "stranger", None), 5_000)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::UserNotInRoom);
    r.backend_moderate(&m(BackendAction::Kick, "lis", Some(10)), 5_000)
        .unwrap();
    assert!(!r.is_member(&u("lis")) && r.durable.bans.contains_key(&u("lis")));
    r.backend_moderate(&m(BackendAction::Unban, "lis", None), 6_000)
        .unwrap();
    assert!(!r.durable.bans.contains_key(&u("lis")));
    // Never the owner; a bad duration changes nothing.
    let err = r
        .backend_moderate(&m(BackendAction::Ban, "host", None), 7_000)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Forbidden);
    let err = r
        .backend_moderate(&m(BackendAction::Ban, "t", Some(0)), 7_000)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::BadRequest);
    assert!(r.is_member(&u("t")) && !r.durable.bans.contains_key(&u("t")));
}
