use super::*;
use crate::ids::UserId;

#[test]
fn decodes_core_ops() {
    let r = decode_request(r#"{"id":7,"op":"chat.send","d":{"room":"r1","text":"hi"}}"#).unwrap();
    assert_eq!(r.id, 7);
    assert_eq!(
        r.op,
        Op::Room(RoomOp::Chat(ChatSend {
            room: "r1".into(),
            text: "hi".into(),
            mentions: Vec::new(),
            reply_to: None,
            mention_all: false,
        }))
    );
    let r = decode_request(r#"{"id":1,"op":"ping"}"#).unwrap();
    assert_eq!(r.op, Op::Ping);
    let r = decode_request(r#"{"id":2,"op":"room.create","d":{"title":"t"}}"#).unwrap();
    match r.op {
        Op::Room(RoomOp::Create(c)) => {
            assert_eq!(c.seats, room::DEFAULT_SEATS);
            assert!(c.room.is_none());
        }
        other => panic!("{other:?}"),
    }
    let r =
        decode_request(r#"{"id":3,"op":"room.join","d":{"room":"r","since":{"epoch":2,"seq":9}}}"#)
            .unwrap();
    match r.op {
        Op::Room(RoomOp::Join(j)) => assert_eq!(j.since, Some(Since { epoch: 2, seq: 9 })),
        other => panic!("{other:?}"),
    }
    let r = decode_request(
        r#"{"id":4,"op":"gift.send","d":{"room":"r","req_id":"x","gift":"rose","to":["u2"]}}"#,
    )
    .unwrap();
    match r.op {
        Op::Room(RoomOp::Gift(g)) => {
            assert_eq!(g.count, 1);
            assert_eq!(g.to, GiftTargets::Users(vec![UserId::from("u2")]));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn gift_targets_are_a_list_of_users_or_seats_and_nothing_else() {
    let targets = |to: &str| {
        let frame = format!(
            r#"{{"id":9,"op":"gift.send","d":{{"room":"r","req_id":"x","gift":"rose","to":{to}}}}}"#
        );
        decode_request(&frame).map(|r| match r.op {
            Op::Room(RoomOp::Gift(g)) => g.to,
            other => panic!("{other:?}"),
        })
    };
    let users = GiftTargets::Users(vec![UserId::from("u2"), UserId::from("u3")]);
    assert_eq!(targets(r#"["u2","u3"]"#).unwrap(), users);
    assert_eq!(
        targets(r#""seats""#).unwrap(),
        GiftTargets::Seated("seats".into())
    );
    assert_eq!(targets("[]").unwrap(), GiftTargets::Users(vec![]));
    for bad in ["5", "[1]", r#"{"u":1}"#, "null", r#"["u2",null]"#] {
        let e = targets(bad).unwrap_err();
        assert_eq!((e.id, e.code), (Some(9), ErrorCode::BadFrame), "to: {bad}");
    }
    // Written as it is read.
    assert_eq!(serde_json::to_string(&users).unwrap(), r#"["u2","u3"]"#);
    assert_eq!(
        serde_json::to_string(&GiftTargets::Seated("seats".into())).unwrap(),
        r#""seats""#
    );
}

#[test]
fn bad_frames_keep_the_id_when_readable() {
    let e = decode_request("not json").unwrap_err();
    assert_eq!((e.id, e.code), (None, ErrorCode::BadFrame));
    let e = decode_request(r#"{"id":5}"#).unwrap_err();
    assert_eq!((e.id, e.code), (Some(5), ErrorCode::BadFrame));
    let e = decode_request(r#"{"id":6,"op":"chat.send","d":{"room":1}}"#).unwrap_err();
    assert_eq!((e.id, e.code), (Some(6), ErrorCode::BadFrame));
    let e = decode_request(r#"{"id":8,"op":"nope"}"#).unwrap_err();
    assert_eq!((e.id, e.code), (Some(8), ErrorCode::UnknownOp));
    let e = decode_request(r#"[1,2]"#).unwrap_err();
    assert_eq!((e.id, e.code), (None, ErrorCode::BadFrame));
    // serde reads a struct from an array of its fields too: neither a frame nor its `d` may
    // be one.
    for frame in [r#"[7,"ping"]"#, r#" [7,"ping",{}]"#, "5", r#""x""#, "null"] {
        let e = decode_request(frame).unwrap_err();
        assert_eq!((e.id, e.code), (None, ErrorCode::BadFrame), "{frame}");
    }
    let e = decode_request(r#"{"id":9,"op":"chat.send","d":["r1","hi"]}"#).unwrap_err();
    assert_eq!((e.id, e.code), (Some(9), ErrorCode::BadFrame));
    let e = decode_request(r#"{"id":10,"op":"ping","d":[]}"#).unwrap_err();
    assert_eq!((e.id, e.code), (Some(10), ErrorCode::BadFrame));
    assert!(decode_request(r#" {"id":11,"op":"ping","d":null}"#).is_ok());
}

#[test]
fn a_chat_line_may_mention_members_and_answer_a_line() {
    let r = decode_request(
        r#"{"id":1,"op":"chat.send","d":{"room":"r1","text":"hi","mentions":["a","b"],"reply_to":4}}"#,
    )
    .unwrap();
    let Op::Room(RoomOp::Chat(c)) = r.op else {
        panic!("a chat.send")
    };
    assert_eq!(
        (c.mentions, c.reply_to),
        (vec![UserId::from("a"), UserId::from("b")], Some(4))
    );
    let null_reply = r#"{"id":1,"op":"chat.send","d":{"room":"r1","text":"hi","reply_to":null}}"#;
    assert!(
        decode_request(null_reply).is_ok(),
        "null reply_to is no reply"
    );
    let null_mentions =
        r#"{"id":1,"op":"chat.send","d":{"room":"r1","text":"hi","mentions":null}}"#;
    assert!(decode_request(null_mentions).is_err(), "a shape error");
}

#[test]
fn encodes_replies_and_events() {
    let ok = encode_ok(3, &ChatSent { seq: 4 });
    assert_eq!(&ok[..], br#"{"re":3,"ok":{"seq":4}}"#);
    let err = encode_err(None, ErrorCode::BadFrame, "x");
    assert_eq!(
        &err[..],
        br#"{"re":null,"err":{"code":"BAD_FRAME","msg":"x"}}"#
    );
    let room = RoomId::from("r1");
    let ev = encode_event(
        "chat",
        Some(&room),
        Some((2, 5)),
        &ChatEvent {
            from: "u1".into(),
            text: "hi".into(),
            robot: false,
            p: None,
            guard: false,
            vip: 0,
            mentions: Vec::new(),
            reply: None,
            mention_all: false,
        },
    );
    assert_eq!(
        &ev[..],
        br#"{"ev":"chat","room":"r1","epoch":2,"seq":5,"d":{"from":"u1","text":"hi"}}"#
    );
    // A robot's message says so; a human's carries no flag at all.
    let robot = ChatEvent {
        from: "bot:amy".into(),
        text: "hi".into(),
        robot: true,
        p: None,
        guard: false,
        vip: 0,
        mentions: Vec::new(),
        reply: None,
        mention_all: false,
    };
    assert_eq!(
        to_json(&robot),
        br#"{"from":"bot:amy","text":"hi","robot":true}"#
    );
    assert!(crate::UserId::from("bot:amy").is_robot() && !crate::UserId::from("amy").is_robot());
    let ev = encode_event("member.count", Some(&room), None, &MemberCount { count: 3 });
    assert_eq!(
        &ev[..],
        br#"{"ev":"member.count","room":"r1","d":{"count":3}}"#
    );
}

/// Order ids go on the wire as hyphenated lowercase UUID strings, as they did when they were
/// held as `String`s, and read back from that form.
#[test]
fn order_ids_are_hyphenated_lowercase_uuid_strings() {
    let order = uuid::Uuid::from_u128(0x0193_A1B2_C3D4_8E5F_9A0B_1C2D_3E4F_5A6B);
    let ok = encode_ok(7, &GiftSent { order, balance: 90 });
    assert_eq!(
        &ok[..],
        br#"{"re":7,"ok":{"order":"0193a1b2-c3d4-8e5f-9a0b-1c2d3e4f5a6b","balance":90}}"#
    );
    let ev = GiftEvent {
        order,
        from: "u1".into(),
        to: vec!["u2".into()],
        gift: "rose".into(),
        count: 1,
        coins: 10,
        lucky_multiplier: None,
        robot: false,
        p: None,
        guard: false,
        vip: 0,
        to_p: std::collections::BTreeMap::new(),
        combo: None,
    };
    let json = to_json(&ev);
    assert!(
        json.starts_with(br#"{"order":"0193a1b2-c3d4-8e5f-9a0b-1c2d3e4f5a6b","from":"u1""#),
        "{}",
        String::from_utf8_lossy(&json)
    );
    let back: GiftEvent = serde_json::from_slice(&json).unwrap();
    assert_eq!(back, ev);
    let win: LuckyWinEvent = serde_json::from_str(
        r#"{"order":"0193a1b2-c3d4-8e5f-9a0b-1c2d3e4f5a6b","user":"u1","multiplier":50,"coins":500}"#,
    )
    .unwrap();
    assert_eq!(win.order, order);
}

#[test]
fn frames_come_out_in_blocks_of_their_own_size_whatever_came_before() {
    // A large frame first: the scratch buffer grows, then is not kept.
    let long = "x".repeat(2 * SCRATCH_KEEP_BYTES);
    let big = to_json(&ChatSent { seq: 1 });
    assert_eq!(big.len(), big.capacity());
    let ok = encode_ok_raw(9, format!("\"{long}\"").as_bytes());
    assert_eq!(ok.len(), long.len() + r#"{"re":9,"ok":""}"#.len());
    SCRATCH.with(|s| assert!(s.borrow().capacity() <= SCRATCH_KEEP_BYTES));
    // Then small ones: exact sizes, the same bytes serde_json writes.
    let ev = MemberCount { count: 12 };
    let v = to_json(&ev);
    assert_eq!(v, serde_json::to_vec(&ev).unwrap());
    assert_eq!(v.len(), v.capacity());
    assert_eq!(&encode_ok(1, &ev)[..], br#"{"re":1,"ok":{"count":12}}"#);
}

/// Serializes by encoding another frame in the middle, as no protocol type does.
struct Nested;

impl Serialize for Nested {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let inner = to_json(&ChatSent { seq: 7 });
        s.serialize_str(&String::from_utf8_lossy(&inner))
    }
}

#[test]
fn a_frame_encoded_inside_another_still_comes_out_whole() {
    assert_eq!(to_json(&Nested), br#""{\"seq\":7}""#.to_vec());
    assert_eq!(
        &encode_ok(2, &Nested)[..],
        br#"{"re":2,"ok":"{\"seq\":7}"}"#
    );
}

#[test]
fn server_frames_parse_both_shapes() {
    let f: ServerFrame = serde_json::from_str(r#"{"re":1,"ok":{"seq":1}}"#).unwrap();
    assert!(matches!(f, ServerFrame::Reply { re: Some(1), .. }));
    let f: ServerFrame =
        serde_json::from_str(r#"{"ev":"chat","room":"r","epoch":1,"seq":2,"d":{}}"#).unwrap();
    assert!(matches!(f, ServerFrame::Event { seq: Some(2), .. }));
}

/// Profiles travel as a nested object under `p`, left out when empty; `member.list` pages and
/// `member.update` read back as written.
#[test]
fn profiles_go_under_p_and_are_left_out_when_empty() {
    let p = Profile {
        name: Some("Bob".into()),
        ..Profile::default()
    };
    let join = MemberJoin {
        user: "bob".into(),
        robot: false,
        p: Some(p.clone()),
        guard: false,
        vip: 0,
        entrance: false,
    };
    assert_eq!(to_json(&join), br#"{"user":"bob","p":{"name":"Bob"}}"#);
    let bare = MemberJoin {
        user: "bob".into(),
        robot: false,
        p: None,
        guard: false,
        vip: 0,
        entrance: false,
    };
    assert_eq!(to_json(&bare), br#"{"user":"bob"}"#);
    // Badges are left out when unset, compact when set.
    let vip = MemberJoin {
        guard: true,
        vip: 3,
        entrance: true,
        ..bare.clone()
    };
    assert_eq!(
        to_json(&vip),
        br#"{"user":"bob","guard":true,"vip":3,"entrance":true}"#
    );
    let up = MemberUpdate {
        user: "bob".into(),
        p: Some(p.clone()),
        guard: false,
        vip: 0,
    };
    assert_eq!(to_json(&up), br#"{"user":"bob","p":{"name":"Bob"}}"#);
    let page = MemberPage {
        members: vec![MemberEntry {
            user: "bob".into(),
            role: "member".into(),
            seat: Some(2),
            robot: false,
            joined_at: 5,
            away: true,
            p: Some(p),
            guard: true,
            vip: 2,
        }],
        count: 1,
        cursor: None,
    };
    let json = to_json(&page);
    assert_eq!(
        json,
        br#"{"members":[{"user":"bob","role":"member","seat":2,"joined_at":5,"away":true,"p":{"name":"Bob"},"guard":true,"vip":2}],"count":1}"#
    );
    let back: MemberPage = serde_json::from_slice(&json).unwrap();
    assert_eq!(back, page);
    let req =
        decode_request(r#"{"id":1,"op":"member.list","d":{"room":"r1","limit":10}}"#).unwrap();
    assert_eq!(req.op.name(), "member.list");
}
