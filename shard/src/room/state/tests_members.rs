//! Membership rules: the grace window (return, expiry), profiles, `member.list` order and
//! paging under churn, and the roster a planned move hands over.

use super::*;
use protocol::client::MemberPage;
use protocol::link::Standing;

fn at(session: SessionId) -> SessionRef {
    SessionRef {
        gateway: NodeId::from("g1"),
        session,
    }
}

fn u(s: &str) -> UserId {
    UserId::from(s)
}

fn named(n: &str) -> Option<Arc<Profile>> {
    shared_profile(Some(Profile {
        name: Some(n.into()),
        ..Profile::default()
    }))
}

fn room(grace_ms: u64) -> RoomState {
    let durable = Durable::new(u("host"), "t".into(), 4, None).unwrap();
    let rules = Rules {
        presence_grace_ms: grace_ms,
        ..Rules::default()
    };
    RoomState::new(RoomId::from("r1"), durable, 1, rules)
}

#[test]
fn a_return_within_the_window_shows_nothing_and_keeps_the_seat() {
    let mut r = room(5_000);
    r.join_as(&u("a"), at(1), None, named("A"), 100).unwrap();
    r.seat_take(&u("a"), Some(1), 100).unwrap();
    let a = r.disconnect(&u("a"), &at(1), 1_000).unwrap();
    assert!(a.presence.is_empty() && a.events.is_empty());
    assert!(a.rearm, "the actor must re-arm its timer for the window");
    assert_eq!(r.member_count(), 1);
    assert!(r.is_away(&u("a")));
    assert_eq!(r.member(&u("a")), None, "an away member has no connection");
    assert_eq!(r.seat_of(&u("a")), Some(1));
    assert_eq!(r.next_deadline(), Some(6_000));
    // Back through another connection within the window: no presence, same join time.
    let j = r.join_as(&u("a"), at(7), None, named("A"), 5_999).unwrap();
    assert!(j.applied.presence.is_empty());
    assert!(j.returned && j.applied.rearm);
    assert_eq!(j.replaced, None);
    assert_eq!(r.member(&u("a")), Some(&at(7)));
    assert!(r.tick(10_000).presence.is_empty());
    assert_eq!(r.seat_of(&u("a")), Some(1));
    let page = r.member_list(None, None, 0).unwrap();
    assert_eq!(
        page.members
            .iter()
            .find(|m| m.user == u("a"))
            .unwrap()
            .joined_at,
        100
    );
}

#[test]
fn the_window_passing_is_a_disconnect() {
    let mut r = room(5_000);
    r.join(&u("a"), at(1), None, 0).unwrap();
    r.join(&u("b"), at(2), None, 0).unwrap();
    r.seat_take(&u("a"), Some(0), 0).unwrap();
    r.disconnect(&u("a"), &at(1), 1_000).unwrap();
    assert_eq!(r.gateways().count(), 1, "b still holds g1");
    assert!(r.tick(5_999).presence.is_empty());
    let a = r.tick(6_000);
    assert_eq!(a.presence, vec![Presence::Leave(u("a"), "disconnected")]);
    assert_eq!(r.member_count(), 1);
    assert_eq!(r.seat_of(&u("a")), None);
    assert!(
        a.events
            .iter()
            .any(|(_, e)| matches!(e, Sequenced::SeatUpdate(_)))
    );
    // A join after the window is a new membership.
    let j = r.join(&u("a"), at(3), None, 7_000).unwrap();
    assert_eq!(
        j.applied.presence,
        vec![Presence::Join(u("a"), None, Badges::default())]
    );
}

#[test]
fn no_window_leaves_at_once_and_explicit_leaves_stay_immediate() {
    let mut r = room(0);
    r.join(&u("a"), at(1), None, 0).unwrap();
    let a = r.disconnect(&u("a"), &at(1), 0).unwrap();
    assert_eq!(a.presence, vec![Presence::Leave(u("a"), "disconnected")]);
    let mut r = room(5_000);
    r.join(&u("a"), at(1), None, 0).unwrap();
    let a = r.leave(&u("a"), &at(1), "left").unwrap();
    assert_eq!(a.presence, vec![Presence::Leave(u("a"), "left")]);
    // An away member's switch to another room (from any connection) ends it at once.
    r.join(&u("b"), at(2), None, 0).unwrap();
    r.disconnect(&u("b"), &at(2), 0).unwrap();
    let a = r.leave(&u("b"), &at(9), "switched").unwrap();
    assert_eq!(a.presence, vec![Presence::Leave(u("b"), "switched")]);
    assert_eq!(r.member_count(), 0);
    assert_eq!(r.next_deadline(), None);
    // A stale connection's disconnect does nothing.
    r.join(&u("c"), at(3), None, 0).unwrap();
    r.join(&u("c"), at(4), None, 0).unwrap();
    assert!(r.disconnect(&u("c"), &at(3), 0).is_err());
    assert!(!r.is_away(&u("c")));
}

#[test]
fn an_away_member_can_be_kicked() {
    let mut r = room(5_000);
    r.join(&u("a"), at(1), None, 0).unwrap();
    r.disconnect(&u("a"), &at(1), 0).unwrap();
    let a = r
        .room_kick(&u("host"), &u("a"), None, &super::TargetSpend::NotRead, 0)
        .unwrap();
    assert_eq!(a.presence, vec![Presence::Leave(u("a"), "kicked")]);
    assert!(a.evicted.is_empty(), "no connection to tell");
    assert_eq!(r.member_count(), 0);
    assert_eq!(r.next_deadline(), None);
}

#[test]
fn profiles_ride_on_join_chat_and_update() {
    let mut r = room(5_000);
    let j = r.join_as(&u("a"), at(1), None, named("A"), 0).unwrap();
    assert_eq!(
        j.applied.presence,
        vec![Presence::Join(u("a"), named("A"), Badges::default())]
    );
    let frame = j.applied.presence[0].encode(r.id());
    assert_eq!(
        &frame[..],
        br#"{"ev":"member.join","room":"r1","d":{"user":"a","p":{"name":"A"}}}"#
    );
    let c = r.chat_line(&u("a"), "hi".into(), 0).unwrap();
    let Sequenced::Chat(ev) = &c.events[0].1 else {
        panic!()
    };
    assert_eq!(ev.p.as_ref().and_then(|p| p.name.as_deref()), Some("A"));
    // The same profile again is nothing; a new one is a member.update; an empty one clears.
    assert!(
        r.set_profile(&u("a"), (*named("A").unwrap()).clone(), 0)
            .unwrap()
            .presence
            .is_empty()
    );
    let up = r
        .set_profile(&u("a"), (*named("B").unwrap()).clone(), 0)
        .unwrap();
    assert_eq!(
        up.presence,
        vec![Presence::Update(u("a"), named("B"), Badges::default())]
    );
    assert!(!up.presence[0].counts());
    let up = r.set_profile(&u("a"), Profile::default(), 0).unwrap();
    let frame = up.presence[0].encode(r.id());
    assert_eq!(
        &frame[..],
        br#"{"ev":"member.update","room":"r1","d":{"user":"a"}}"#
    );
    assert_eq!(r.profile_of(&u("a")), None);
    assert_eq!(
        r.set_profile(&u("x"), Profile::default(), 0)
            .unwrap_err()
            .code,
        ErrorCode::NotInRoom
    );
    // A return within the window with a new profile shows it as an update.
    r.disconnect(&u("a"), &at(1), 0).unwrap();
    let j = r.join_as(&u("a"), at(2), None, named("C"), 1).unwrap();
    assert_eq!(
        j.applied.presence,
        vec![Presence::Update(u("a"), named("C"), Badges::default())]
    );
}

fn users(p: &MemberPage) -> Vec<String> {
    p.members.iter().map(|m| m.user.to_string()).collect()
}

#[test]
fn the_list_orders_owner_admins_seated_then_by_join_time() {
    let mut r = room(5_000);
    for (i, n) in ["m1", "s1", "ad", "m2", "host", "bot:x"].iter().enumerate() {
        r.join(&u(n), at(i as u64 + 1), None, 10 * i as u64)
            .unwrap();
    }
    r.room_admin(&u("host"), &u("ad"), true, 0).unwrap();
    r.seat_take(&u("s1"), Some(2), 0).unwrap();
    r.disconnect(&u("m2"), &at(4), 100).unwrap();
    let p = r.member_list(None, None, 0).unwrap();
    assert_eq!(users(&p), ["host", "ad", "s1", "m1", "m2", "bot:x"]);
    assert_eq!(p.count, 6);
    assert_eq!(p.cursor, None);
    let roles: Vec<&str> = p.members.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(
        roles,
        ["owner", "admin", "member", "member", "member", "member"]
    );
    assert_eq!(p.members[2].seat, Some(2));
    assert!(p.members[4].away && !p.members[3].away);
    assert!(p.members[5].robot);
    assert_eq!(p.members[0].joined_at, 40);
    assert_eq!(
        r.member_list(None, Some(0), 0).unwrap_err().code,
        ErrorCode::BadRequest
    );
    assert_eq!(
        r.member_list(None, Some(201), 0).unwrap_err().code,
        ErrorCode::BadRequest
    );
    assert_eq!(
        r.member_list(Some("nope"), None, 0).unwrap_err().code,
        ErrorCode::BadRequest
    );
    // Only members ask.
    let op = RoomOp::MemberList(protocol::client::MemberList {
        room: RoomId::from("r1"),
        cursor: None,
        limit: None,
    });
    assert_eq!(
        r.apply(&u("zed"), &at(99), &op, 0).unwrap_err().code,
        ErrorCode::NotInRoom
    );
    assert!(r.apply(&u("m1"), &at(1), &op, 0).is_ok());
}

#[test]
fn paging_under_churn_lists_every_stable_member_once() {
    let mut r = room(5_000);
    for i in 0..300u64 {
        r.join(&u(&format!("u{i:03}")), at(i + 1), None, i).unwrap();
    }
    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0..100u64 {
        let next = 1_000 + page;
        let p = r.member_list(cursor.as_deref(), Some(7), 0).unwrap();
        seen.extend(users(&p));
        // Churn between pages: the first few of the old members leave, new ones join, and
        // an away member returns.
        let gone = format!("u{:03}", page * 3);
        if let Some(a) = r.member(&u(&gone)).cloned() {
            r.leave(&u(&gone), &a, "left").unwrap();
        }
        r.join(&u(&format!("n{page:03}")), at(10_000 + page), None, next)
            .unwrap();
        match p.cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let mut dedup = seen.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), seen.len(), "no member listed twice");
    // Every member present for the whole scan was listed.
    for i in 0..300u64 {
        let name = format!("u{i:03}");
        if r.member(&u(&name)).is_some() {
            assert!(seen.contains(&name), "{name} skipped");
        }
    }
}

#[test]
fn a_page_over_five_thousand_members_is_cheap() {
    let mut r = room(5_000);
    for i in 0..5_000u64 {
        r.join(&u(&format!("u{i}")), at(i + 1), None, i).unwrap();
    }
    let t = tokio::time::Instant::now();
    let mut cursor = None;
    let mut n = 0;
    for _ in 0..25 {
        let p = r.member_list(cursor.as_deref(), Some(200), 0).unwrap();
        n += p.members.len();
        cursor = p.cursor;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(n, 5_000);
    eprintln!("25 pages of 200 over 5,000 members: {:?}", t.elapsed());
}

#[test]
fn a_planned_move_hands_the_roster_over() {
    let mut old = room(5_000);
    old.join_as(&u("a"), at(1), None, named("A"), 10).unwrap();
    old.join(&u("b"), at(2), None, 20).unwrap();
    old.seat_take(&u("b"), Some(0), 20).unwrap();
    old.disconnect(&u("b"), &at(2), 30).unwrap();
    let roster = old.roster();
    old.set_roster(roster);
    // Through the snapshot's JSON, as the store carries it.
    let json = serde_json::to_vec(old.durable()).unwrap();
    let mut d: Durable = serde_json::from_slice(&json).unwrap();
    let roster = d.roster.take().unwrap();
    let mut new = RoomState::new(RoomId::from("r1"), d, 2, old.rules);
    new.restore(roster, 1_000);
    assert_eq!(new.member_count(), 2);
    assert_eq!(new.snapshot().members, 2);
    assert!(new.is_away(&u("a")) && new.is_away(&u("b")));
    // A robot is never away: it runs again or its seat is freed as `robot_left`.
    assert!(!new.is_member(&u("bot:amy")));
    assert_eq!(new.gateways().count(), 0);
    // a rejoins silently, keeping its join time and profile.
    let j = new.rejoin(&u("a"), at(5), named("A"), 1_100).unwrap();
    assert!(j.applied.presence.is_empty());
    let p = new.member_list(None, None, 0).unwrap();
    let a = p.members.iter().find(|m| m.user == u("a")).unwrap();
    assert_eq!(a.joined_at, 10);
    assert_eq!(a.p.as_ref().and_then(|p| p.name.as_deref()), Some("A"));
    // b was away already: its window ends when it did at the old owner.
    let t = new.tick(5_030);
    assert_eq!(t.presence, vec![Presence::Leave(u("b"), "disconnected")]);
    assert_eq!(new.member_count(), 1);
    assert_eq!(new.seat_of(&u("b")), None);
    // Nobody else is pending.
    assert_eq!(new.next_deadline(), None);
}

/// A ban or a close made during a planned move, while the members are away, holds against
/// the gateways' rejoins that come after it, as against any join.
#[test]
fn a_ban_or_close_during_a_move_holds_against_the_rejoin() {
    let mut old = room(5_000);
    old.join(&u("a"), at(1), None, 0).unwrap();
    old.join(&u("b"), at(2), None, 0).unwrap();
    let roster = old.roster();
    let mut new = room(5_000);
    new.restore(roster.clone(), 100);
    new.rejoin(&u("host"), at(3), None, 110).unwrap();
    new.room_ban(&u("host"), &u("a"), None, &super::TargetSpend::NotRead, 120)
        .unwrap();
    let refused = new.rejoin(&u("a"), at(4), None, 130).unwrap_err();
    assert_eq!(refused.code, ErrorCode::Banned);
    assert!(new.member(&u("a")).is_none());
    // b is not banned: back silently.
    assert!(new.rejoin(&u("b"), at(5), None, 130).is_ok());
    let mut closed = room(5_000);
    closed.restore(roster, 100);
    closed.rejoin(&u("host"), at(3), None, 110).unwrap();
    closed.room_close(&u("host"), 120).unwrap();
    let refused = closed.rejoin(&u("b"), at(5), None, 130).unwrap_err();
    assert_eq!(refused.code, ErrorCode::RoomClosed);
}

/// A kick of a member away during a planned move (staff that rejoined first act on away
/// members) is not undone by the gateway's rejoin for that member, which comes after it:
/// refused as for a ban, the client is told `room.left` `kicked`. A join of the user's own
/// afterwards is an ordinary join, and a kick remembered past its time is forgotten.
#[test]
fn a_kick_during_a_move_holds_against_the_rejoin() {
    let mut old = room(5_000);
    old.join(&u("a"), at(1), None, 0).unwrap();
    old.join(&u("b"), at(2), None, 0).unwrap();
    let roster = old.roster();
    let mut new = room(5_000);
    new.restore(roster.clone(), 100);
    new.rejoin(&u("host"), at(3), None, 110).unwrap();
    let kick = new
        .room_kick(&u("host"), &u("a"), None, &super::TargetSpend::NotRead, 120)
        .unwrap();
    assert!(kick.evicted.is_empty(), "no connection to tell");
    let refused = new.rejoin(&u("a"), at(4), None, 130).unwrap_err();
    assert_eq!(refused.code, ErrorCode::Banned);
    assert!(!new.is_member(&u("a")));
    // Told once: the client may join again by itself, as after any kick.
    new.join(&u("a"), at(5), None, 140).unwrap();
    assert!(new.is_member(&u("a")));
    // A kick remembered longer than a move takes holds no more.
    let mut late = room(5_000);
    late.restore(roster, 100);
    late.rejoin(&u("host"), at(3), None, 110).unwrap();
    late.room_kick(&u("host"), &u("b"), None, &super::TargetSpend::NotRead, 120)
        .unwrap();
    assert!(
        late.rejoin(&u("b"), at(6), None, 120 + KICK_MEMORY_MS + 1)
            .is_ok()
    );
}

/// Setting or changing the password keeps the members present in: they resume on their
/// connection, replace it, or come back within the grace window without it.
#[test]
fn members_present_stay_in_a_room_locked_after_they_joined() {
    let mut r = room(5_000);
    r.join(&u("host"), at(1), None, 0).unwrap();
    r.join(&u("t"), at(2), None, 0).unwrap();
    r.seat_take(&u("t"), Some(2), 0).unwrap();
    r.room_lock(&u("host"), Some("secret")).unwrap();
    // A resume on the same connection, a second connection replacing it.
    assert!(r.join(&u("t"), at(2), None, 10).is_ok());
    assert!(r.join(&u("t"), at(3), None, 20).is_ok());
    // Back within the window after a drop: still seated.
    r.disconnect(&u("t"), &at(3), 30).unwrap();
    assert!(r.join(&u("t"), at(4), None, 1_000).is_ok());
    assert_eq!(r.seat_of(&u("t")), Some(2));
    // Anyone else needs the password; so does t once it has left.
    let refused = r.join(&u("x"), at(5), None, 1_000).unwrap_err();
    assert_eq!(refused.code, ErrorCode::RoomLocked);
    r.leave(&u("t"), &at(4), "left").unwrap();
    let refused = r.join(&u("t"), at(6), None, 1_200).unwrap_err();
    assert_eq!(refused.code, ErrorCode::RoomLocked);
}

/// After an unplanned stop no roster comes over, but the saved seats do: their holders are
/// away for the window. One who never comes back leaves then, and the seat is free; one who
/// rejoins within it keeps the seat, silently.
#[test]
fn seat_holders_nobody_handed_over_are_away_for_the_window() {
    let mut old = room(5_000);
    old.join(&u("a"), at(1), None, 0).unwrap();
    old.join(&u("b"), at(2), None, 0).unwrap();
    old.seat_take(&u("a"), Some(0), 0).unwrap();
    old.seat_take(&u("b"), Some(1), 0).unwrap();
    // The saved state alone: the members were never handed over.
    let mut d = old.durable().clone();
    d.seats[2].user = Some(u("bot:amy"));
    let mut new = RoomState::new(RoomId::from("r1"), d, 2, old.rules);
    new.adopt_seated(100);
    assert!(new.is_away(&u("a")) && new.is_away(&u("b")));
    assert_eq!(new.next_deadline(), Some(5_100));
    let back = new.rejoin(&u("a"), at(5), None, 200).unwrap();
    assert!(back.returned && back.applied.presence.is_empty());
    let t = new.tick(5_100);
    assert_eq!(t.presence, vec![Presence::Leave(u("b"), "disconnected")]);
    assert_eq!(
        (new.seat_of(&u("a")), new.seat_of(&u("b"))),
        (Some(0), None)
    );
    // Adopting again finds nobody new.
    new.adopt_seated(6_000);
    assert_eq!(new.member_count(), 1);
}

#[test]
fn a_roster_member_who_never_returns_leaves_after_the_window() {
    let mut old = room(5_000);
    old.join(&u("a"), at(1), None, 0).unwrap();
    let roster = old.roster();
    let mut new = room(5_000);
    new.restore(roster, 100);
    assert_eq!(new.next_deadline(), Some(5_100));
    assert!(new.tick(5_099).presence.is_empty());
    assert_eq!(
        new.tick(5_100).presence,
        vec![Presence::Leave(u("a"), "disconnected")]
    );
    assert_eq!(new.member_count(), 0);
}

/// Every place of a room's members table, the spare ones too, holds a member: a room of 10
/// has 16 places. At 56 bytes (72 with the user id) the table is a 1,280-byte allocation;
/// with the standing inline it was 96 per place and 1,792 bytes.
#[test]
fn a_member_is_56_bytes() {
    assert_eq!(std::mem::size_of::<members::Member>(), 56);
}

/// A member's standing (kept boxed, and only while it holds something) reads back as it was
/// set, and as nothing again once a standing of nothing replaces it; the lifetime spend only
/// grows (an older reading does not lower it).
#[test]
fn a_members_standing_reads_back_as_set() {
    let mut r = room(0);
    r.join(&u("a"), at(1), None, 1_000).unwrap();
    let held = |r: &RoomState| !r.members[&u("a")].standing().is_empty();
    assert!(!held(&r));
    let guard = Standing {
        guards: vec![protocol::link::HeldGuard {
            host: u("host"),
            until: 5_000,
        }],
        spent: 0,
    };
    r.set_standing(&u("a"), guard.clone(), 1_000).unwrap();
    assert_eq!(r.members[&u("a")].standing(), &guard);
    r.set_standing(&u("a"), Standing::default(), 1_000).unwrap();
    assert!(!held(&r));
    let s = Standing {
        guards: Vec::new(),
        spent: 500,
    };
    r.set_standing(&u("a"), s.clone(), 1_000).unwrap();
    assert_eq!(r.members[&u("a")].standing(), &s);
    r.set_standing(&u("a"), Standing::default(), 1_000).unwrap();
    assert_eq!(r.members[&u("a")].standing(), &s);
}
