use super::*;
use protocol::client::GiftTargets;

fn at(session: SessionId) -> SessionRef {
    SessionRef {
        gateway: NodeId::from("g1"),
        session,
    }
}

fn u(s: &str) -> UserId {
    UserId::from(s)
}

fn room(seats: u32, password: Option<&str>) -> RoomState {
    let durable = Durable::new(u("host"), "t".into(), seats, password.map(str::to_owned)).unwrap();
    RoomState::new(RoomId::from("r1"), durable, 7, Rules::default())
}

#[test]
fn create_validates_seats_title_and_password() {
    assert!(Durable::new(u("h"), "t".into(), 0, None).is_err());
    assert!(Durable::new(u("h"), "t".into(), 21, None).is_err());
    assert!(Durable::new(u("h"), "t".into(), 20, None).is_ok());
    assert!(Durable::new(u("h"), "x".repeat(101), 8, None).is_err());
    assert!(Durable::new(u("h"), "t".into(), 8, Some(String::new())).is_err());
    let e = Durable::new(u("h"), "t".into(), 1, Some("p".repeat(65))).unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest);
}

#[test]
fn join_announces_presence_once_and_counts_members() {
    let mut r = room(8, None);
    let j = r.join(&u("a"), at(1), None, 0).unwrap();
    assert_eq!(
        j.applied.presence,
        vec![Presence::Join(u("a"), None, Badges::default())]
    );
    assert_eq!(j.replaced, None);
    // The same connection joining again is a no-op.
    let j = r.join(&u("a"), at(1), None, 0).unwrap();
    assert!(j.applied.presence.is_empty());
    r.join(&u("b"), at(2), None, 0).unwrap();
    assert_eq!(r.member_count(), 2);
    assert_eq!(r.snapshot().members, 2);
    // Presence is not sequenced.
    assert_eq!(r.seq(), 0);
}

#[test]
fn second_connection_replaces_the_first_without_presence() {
    let mut r = room(8, None);
    r.join(&u("a"), at(1), None, 0).unwrap();
    let j = r.join(&u("a"), at(2), None, 0).unwrap();
    assert_eq!(j.replaced, Some(at(1)));
    assert!(j.applied.presence.is_empty());
    assert_eq!(r.member(&u("a")), Some(&at(2)));
    // The replaced connection's leave is stale and removes nothing.
    assert_eq!(
        r.leave(&u("a"), &at(1), "left").unwrap_err().code,
        ErrorCode::NotInRoom
    );
    assert_eq!(r.member_count(), 1);
}

#[test]
fn locked_room_needs_the_password_except_for_owner() {
    let mut r = room(8, Some("pw"));
    assert_eq!(
        r.join(&u("a"), at(1), None, 0).unwrap_err().code,
        ErrorCode::RoomLocked
    );
    assert_eq!(
        r.join(&u("a"), at(1), Some("no"), 0).unwrap_err().code,
        ErrorCode::RoomLocked
    );
    r.join(&u("a"), at(1), Some("pw"), 0).unwrap();
    r.join(&u("host"), at(2), None, 0).unwrap();
    assert!(r.snapshot().locked);
}

#[test]
fn chat_needs_membership_and_bounded_text_and_is_sequenced() {
    let mut r = room(8, None);
    let hi = op(r#"{"id":1,"op":"chat.send","d":{"room":"r1","text":"hi"}}"#);
    assert_eq!(
        r.apply(&u("a"), &at(1), &hi, 0).unwrap_err().code,
        ErrorCode::NotInRoom
    );
    r.join(&u("a"), at(1), None, 0).unwrap();
    assert_eq!(
        r.chat_line(&u("a"), String::new(), 0).unwrap_err().code,
        ErrorCode::BadRequest
    );
    assert_eq!(
        r.chat_line(&u("a"), "é".repeat(501), 0).unwrap_err().code,
        ErrorCode::BadRequest
    );
    assert!(r.chat_line(&u("a"), "é".repeat(500), 0).is_ok());
    let a = r.chat_line(&u("a"), "two".into(), 0).unwrap();
    assert_eq!(a.events.len(), 1);
    assert_eq!(a.events[0].0, 2);
    assert_eq!(r.seq(), 2);
    // A member's stale connection cannot speak for it.
    assert_eq!(
        r.apply(&u("a"), &at(9), &hi, 0).unwrap_err().code,
        ErrorCode::NotInRoom
    );
}

#[test]
fn seats_take_first_free_or_given_and_report_conflicts() {
    let mut r = room(2, None);
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        r.join(&u(name), at(i as u64), None, 0).unwrap();
    }
    let (seat, a) = r.seat_take(&u("a"), None, 0).unwrap();
    assert_eq!(seat, 0);
    assert!(a.durable_changed);
    assert_eq!(
        a.events,
        vec![(
            1,
            Sequenced::SeatUpdate(SeatUpdate {
                seat: SeatView {
                    index: 0,
                    user: Some(u("a")),
                    publish_by: Some(10_000),
                    ..SeatView::default()
                },
                by: Some(u("a")),
                cause: "self".into(),
                reason: None,
            })
        )]
    );
    assert_eq!(
        r.seat_take(&u("b"), Some(0), 0).unwrap_err().code,
        ErrorCode::SeatTaken
    );
    assert_eq!(
        r.seat_take(&u("b"), Some(5), 0).unwrap_err().code,
        ErrorCode::NoSuchSeat
    );
    assert_eq!(r.seat_take(&u("b"), None, 0).unwrap().0, 1);
    assert_eq!(
        r.seat_take(&u("c"), None, 0).unwrap_err().code,
        ErrorCode::NoFreeSeat
    );
    // Taking the seat one already holds changes nothing.
    let (seat, a) = r.seat_take(&u("a"), Some(0), 0).unwrap();
    assert_eq!((seat, a.events.len()), (0, 0));
    assert!(r.is_privileged(&u("a")));
    assert!(!r.is_privileged(&u("c")));
    assert!(r.is_privileged(&u("host")));
}

#[test]
fn moving_seats_frees_the_old_one_with_two_updates() {
    let mut r = room(3, None);
    r.join(&u("a"), at(1), None, 0).unwrap();
    r.seat_take(&u("a"), Some(0), 0).unwrap();
    let (_, a) = r.seat_take(&u("a"), Some(2), 0).unwrap();
    assert_eq!(a.events.len(), 2);
    assert_eq!(r.seat_of(&u("a")), Some(2));
    assert_eq!(r.durable().seats[0].user, None);
}

#[test]
fn locked_seat_cannot_be_taken() {
    let mut r = room(2, None);
    r.durable.seats[1].locked = true;
    r.join(&u("a"), at(1), None, 0).unwrap();
    assert_eq!(
        r.seat_take(&u("a"), Some(1), 0).unwrap_err().code,
        ErrorCode::SeatLocked
    );
    r.durable.seats[0].locked = true;
    assert_eq!(
        r.seat_take(&u("a"), None, 0).unwrap_err().code,
        ErrorCode::NoFreeSeat
    );
}

#[test]
fn leaving_frees_the_seat_and_seat_leave_is_idempotent() {
    let mut r = room(2, None);
    r.join(&u("a"), at(1), None, 0).unwrap();
    assert!(r.seat_leave(&u("a")).events.is_empty());
    r.seat_take(&u("a"), None, 0).unwrap();
    let a = r.seat_leave(&u("a"));
    assert_eq!(a.events.len(), 1);
    r.seat_take(&u("a"), None, 0).unwrap();
    let a = r.leave(&u("a"), &at(1), "left").unwrap();
    assert_eq!(a.events.len(), 1, "seat freed");
    assert_eq!(a.presence, vec![Presence::Leave(u("a"), "left")]);
    assert_eq!(r.member_count(), 0);
    assert_eq!(
        r.leave(&u("a"), &at(1), "left").unwrap_err().code,
        ErrorCode::NotInRoom
    );
}

#[test]
fn seq_is_gap_free_across_event_kinds() {
    let mut r = room(4, None);
    r.join(&u("a"), at(1), None, 0).unwrap();
    let mut seqs = Vec::new();
    seqs.extend(r.chat_line(&u("a"), "1".into(), 0).unwrap().events);
    seqs.extend(r.seat_take(&u("a"), None, 0).unwrap().1.events);
    seqs.extend(r.seat_take(&u("a"), Some(3), 0).unwrap().1.events);
    seqs.extend(r.chat_line(&u("a"), "2".into(), 0).unwrap().events);
    let got: Vec<Seq> = seqs.iter().map(|(s, _)| *s).collect();
    assert_eq!(got, vec![1, 2, 3, 4, 5]);
    assert_eq!(r.snapshot().seq, 5);
    assert_eq!(r.snapshot().epoch, 7);
}

#[test]
fn gift_recipients_are_members_or_the_seated_without_the_sender() {
    let mut r = room(3, None);
    for (i, n) in ["a", "b", "c"].iter().enumerate() {
        r.join(&u(n), at(i as u64), None, 0).unwrap();
    }
    let users = |v: &[&str]| GiftTargets::Users(v.iter().map(|s| u(s)).collect());
    assert_eq!(
        r.gift_recipients(&u("a"), &at(0), &users(&["b", "b", "a", "c"]), 1)
            .unwrap(),
        vec![u("b"), u("c")]
    );
    assert_eq!(
        r.gift_recipients(&u("a"), &at(0), &users(&["zed"]), 1)
            .unwrap_err()
            .code,
        ErrorCode::BadRequest
    );
    assert_eq!(
        r.gift_recipients(&u("a"), &at(0), &users(&["a"]), 1)
            .unwrap_err()
            .code,
        ErrorCode::BadRequest
    );
    assert_eq!(
        r.gift_recipients(&u("a"), &at(0), &users(&["b"]), 0)
            .unwrap_err()
            .code,
        ErrorCode::BadRequest
    );
    assert_eq!(
        r.gift_recipients(&u("x"), &at(9), &users(&["b"]), 1)
            .unwrap_err()
            .code,
        ErrorCode::NotInRoom
    );
    let seats = GiftTargets::Seated("seats".into());
    assert_eq!(
        r.gift_recipients(&u("a"), &at(0), &seats, 1)
            .unwrap_err()
            .code,
        ErrorCode::BadRequest,
        "nobody seated"
    );
    r.seat_take(&u("a"), None, 0).unwrap();
    r.seat_take(&u("b"), None, 0).unwrap();
    r.seat_take(&u("c"), None, 0).unwrap();
    assert_eq!(
        r.gift_recipients(&u("a"), &at(0), &seats, 2).unwrap(),
        vec![u("b"), u("c")]
    );
    let bad = GiftTargets::Seated("everyone".into());
    assert!(r.gift_recipients(&u("a"), &at(0), &bad, 1).is_err());
}

fn op(frame: &str) -> RoomOp {
    match client::decode_request(frame).map(|r| r.op) {
        Ok(client::Op::Room(op)) => op,
        other => panic!("not a room op: {other:?}"),
    }
}

#[test]
fn creation_rule_for_missing_and_existing_rooms() {
    let create = RoomCmd::Op(op(
        r#"{"id":1,"op":"room.create","d":{"room":"r1","title":"t","seats":4}}"#,
    ));
    let join = RoomCmd::Op(op(r#"{"id":2,"op":"room.join","d":{"room":"r1"}}"#));
    let chat = RoomCmd::Op(op(
        r#"{"id":3,"op":"chat.send","d":{"room":"r1","text":"x"}}"#,
    ));
    let rejoin = RoomCmd::Rejoin(client::RoomJoin {
        room: "r1".into(),
        since: None,
        password: None,
    });
    let host = u("host");
    // room.create makes the room, validated, with the sender as owner.
    let made = creation(&create, false, &host, false).unwrap().unwrap();
    assert_eq!((made.owner.as_str(), made.seats.len()), ("host", 4));
    assert_eq!(
        creation(&create, true, &host, true).unwrap_err().code,
        ErrorCode::RoomExists
    );
    // A client's join makes a default room only when auto-create is on.
    let auto = creation(&join, false, &host, true).unwrap().unwrap();
    assert_eq!(auto.seats.len(), client::room::DEFAULT_SEATS as usize);
    assert_eq!(
        creation(&join, false, &host, false).unwrap_err().code,
        ErrorCode::RoomNotFound
    );
    // Nothing else creates a room, not even a gateway's rejoin.
    for cmd in [&chat, &rejoin, &RoomCmd::Leave(LeaveReason::Disconnected)] {
        assert_eq!(
            creation(cmd, false, &host, true).unwrap_err().code,
            ErrorCode::RoomNotFound
        );
        assert_eq!(creation(cmd, true, &host, true), Ok(None));
    }
    let bad = RoomCmd::Op(op(r#"{"id":4,"op":"room.create","d":{"seats":0}}"#));
    assert_eq!(
        creation(&bad, false, &host, false).unwrap_err().code,
        ErrorCode::BadRequest
    );
    // `may_create` (whether a runtime may claim a room that has no snapshot) agrees with the
    // rule: the commands it says no to are the ones answered ROOM_NOT_FOUND.
    let leave = RoomCmd::Leave(LeaveReason::Disconnected);
    for auto_create in [false, true] {
        for cmd in [&create, &join, &chat, &rejoin, &leave] {
            let creates = creation(cmd, false, &host, auto_create).is_ok_and(|d| d.is_some());
            assert_eq!(may_create(cmd, auto_create), creates, "{cmd:?}");
        }
    }
}

#[test]
fn apply_answers_plain_ops_with_their_ok_and_change() {
    let mut r = room(2, None);
    r.join(&u("a"), at(1), None, 0).unwrap();
    let chat = op(r#"{"id":1,"op":"chat.send","d":{"room":"r1","text":"hi"}}"#);
    let out = r.apply(&u("a"), &at(1), &chat, 0).unwrap();
    assert_eq!(&out.ok[..], br#"{"seq":1}"#);
    assert_eq!(out.applied.events.len(), 1);
    assert_eq!(out.membership, None);
    let take = op(r#"{"id":2,"op":"seat.take","d":{"room":"r1","seat":1}}"#);
    let out = r.apply(&u("a"), &at(1), &take, 0).unwrap();
    assert_eq!(&out.ok[..], br#"{"seat":1}"#);
    assert!(out.applied.durable_changed);
    let leave_seat = op(r#"{"id":3,"op":"seat.leave","d":{"room":"r1"}}"#);
    assert_eq!(
        &r.apply(&u("a"), &at(1), &leave_seat, 0).unwrap().ok[..],
        b"{}"
    );
    let leave = op(r#"{"id":4,"op":"room.leave","d":{"room":"r1"}}"#);
    let out = r.apply(&u("a"), &at(1), &leave, 0).unwrap();
    assert_eq!(out.membership, Some(Membership::Left));
    assert_eq!(out.applied.presence, vec![Presence::Leave(u("a"), "left")]);
    assert_eq!(r.member_count(), 0);
    // A non-member is refused by the op's own rule.
    assert_eq!(
        r.apply(&u("a"), &at(1), &chat, 0).unwrap_err().code,
        ErrorCode::NotInRoom
    );
    // The actor runs joins, creates and gifts itself.
    let join = op(r#"{"id":5,"op":"room.join","d":{"room":"r1"}}"#);
    r.join(&u("b"), at(2), None, 0).unwrap();
    assert_eq!(
        r.apply(&u("b"), &at(2), &join, 0).unwrap_err().code,
        ErrorCode::Internal
    );
}

#[test]
fn gateways_are_counted_by_their_members() {
    let on = |gw: &str, session| SessionRef {
        gateway: NodeId::from(gw),
        session,
    };
    let gws = |r: &RoomState| {
        let mut v: Vec<String> = r.gateways().map(|g| g.as_str().to_owned()).collect();
        v.sort();
        v
    };
    let mut r = room(8, None);
    r.join(&u("a"), on("g1", 1), None, 0).unwrap();
    // The same connection joining twice counts once.
    r.join(&u("a"), on("g1", 1), None, 0).unwrap();
    r.join(&u("b"), on("g2", 2), None, 0).unwrap();
    assert_eq!(gws(&r), ["g1", "g2"]);
    r.leave(&u("b"), &on("g2", 2), "left").unwrap();
    assert_eq!(gws(&r), ["g1"]);
    // A's new connection on g3 replaces the one on g1.
    let j = r.join(&u("a"), on("g3", 9), None, 0).unwrap();
    assert_eq!(j.replaced, Some(on("g1", 1)));
    assert_eq!(gws(&r), ["g3"]);
    r.leave(&u("a"), &on("g3", 9), "left").unwrap();
    assert_eq!(r.gateways().count(), 0);
}

#[test]
fn presence_goes_to_everyone_in_small_rooms_and_to_the_privileged_in_big_ones() {
    let mut r = room(2, None);
    r.join(&u("host"), at(1), None, 0).unwrap();
    r.join(&u("a"), at(2), None, 0).unwrap();
    r.join(&u("b"), at(3), None, 0).unwrap();
    r.seat_take(&u("a"), Some(0), 0).unwrap();
    let joined = Presence::Join(u("b"), None, Badges::default());
    assert_eq!(r.presence_plan(&joined, 3), PresencePlan::Everyone);
    let PresencePlan::Privileged(mut to) = r.presence_plan(&joined, 2) else {
        panic!("a room over the bound gets privileged presence only");
    };
    to.sort_by_key(|s| s.session);
    assert_eq!(to, vec![at(1), at(2)]);
    // The subject never hears of itself, even when privileged.
    let PresencePlan::Privileged(to) =
        r.presence_plan(&Presence::Join(u("a"), None, Badges::default()), 2)
    else {
        panic!("privileged");
    };
    assert_eq!(to, vec![at(1)]);
}

#[test]
fn events_and_presence_encode_as_the_protocol_says() {
    let ev = Sequenced::Chat(client::ChatEvent {
        from: u("a"),
        text: "hi".into(),
        robot: false,
        p: None,
        guard: false,
        vip: 0,
        mentions: Vec::new(),
        reply: None,
        mention_all: false,
    });
    let frame = ev.encode(&RoomId::from("r1"), 3, 9);
    let v: serde_json::Value = serde_json::from_slice(&frame).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"ev":"chat","room":"r1","epoch":3,"seq":9,"d":{"from":"a","text":"hi"}})
    );
    let left = Presence::Leave(u("a"), "disconnected").encode(&RoomId::from("r1"));
    let v: serde_json::Value = serde_json::from_slice(&left).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"ev":"member.leave","room":"r1","d":{"user":"a","reason":"disconnected"}})
    );
}

#[test]
fn the_owner_or_an_admin_locks_seats_and_a_locked_seat_cannot_be_taken() {
    let mut r = room(2, None);
    r.join(&u("host"), at(1), None, 0).unwrap();
    r.join(&u("a"), at(2), None, 0).unwrap();
    let lock = |seat: u32, locked: bool| {
        op(&format!(
            r#"{{"id":1,"op":"seat.lock","d":{{"room":"r1","seat":{seat},"locked":{locked}}}}}"#
        ))
    };
    // A plain member may not; a non-member is not in the room.
    assert_eq!(
        r.apply(&u("a"), &at(2), &lock(0, true), 0)
            .unwrap_err()
            .code,
        ErrorCode::Forbidden
    );
    assert_eq!(
        r.apply(&u("x"), &at(9), &lock(0, true), 0)
            .unwrap_err()
            .code,
        ErrorCode::NotInRoom
    );
    assert_eq!(
        r.apply(&u("host"), &at(1), &lock(2, true), 0)
            .unwrap_err()
            .code,
        ErrorCode::NoSuchSeat
    );
    let out = r.apply(&u("host"), &at(1), &lock(0, true), 0).unwrap();
    assert_eq!(&out.ok[..], b"{}");
    assert!(out.applied.durable_changed);
    let [(seq, Sequenced::SeatUpdate(view))] = out.applied.events.as_slice() else {
        panic!("one seat.update: {:?}", out.applied.events);
    };
    assert_eq!((*seq, view.seat.index, view.seat.locked), (1, 0, true));
    assert!(r.durable().seats[0].locked);
    // Locking a locked seat changes nothing.
    let again = r.apply(&u("host"), &at(1), &lock(0, true), 0).unwrap();
    assert_eq!(again.applied, Applied::default());
    assert_eq!(
        r.seat_take(&u("a"), Some(0), 0).unwrap_err().code,
        ErrorCode::SeatLocked
    );
    // The first free seat skips it; unlocked, it can be taken.
    assert_eq!(r.seat_take(&u("a"), None, 0).unwrap().0, 1);
    r.apply(&u("host"), &at(1), &lock(0, false), 0).unwrap();
    assert_eq!(r.seat_take(&u("a"), Some(0), 0).unwrap().0, 0);
    // Whoever sits on a seat stays when it is locked.
    r.apply(&u("host"), &at(1), &lock(0, true), 0).unwrap();
    assert_eq!(r.seat_of(&u("a")), Some(0));
}

#[test]
fn control_and_bidi_characters_are_refused_in_chat_titles_and_passwords() {
    let mut r = room(2, None);
    r.join(&u("a"), at(1), None, 0).unwrap();
    for bad in ["nul\0", "esc\u{1b}[2J", "\u{202E}txt.exe"] {
        let e = r.chat_line(&u("a"), bad.into(), 0).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest, "{bad:?}");
        let e = Durable::new(u("h"), bad.into(), 4, None).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest, "{bad:?}");
        let e = Durable::new(u("h"), "t".into(), 4, Some(bad.into())).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest, "{bad:?}");
    }
    // Newlines and tabs are fine in chat, not in a title; nothing was sequenced above.
    assert_eq!(r.seq(), 0);
    r.chat_line(&u("a"), "two\nlines\tok".into(), 0).unwrap();
    assert!(Durable::new(u("h"), "two\nlines".into(), 4, None).is_err());
    assert!(Durable::new(u("h"), "Friday night 🎤".into(), 4, None).is_ok());
}
