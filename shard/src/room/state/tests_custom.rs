//! App-defined messages (`custom.send` and the admin API's): sequenced or volatile, who may
//! send them, and the refusals that leave the room as it was.

use serde_json::json;

use super::tests_rights::{party, run, u};
use super::*;

fn custom(kind: &str, data: serde_json::Value, volatile: bool) -> serde_json::Value {
    json!({"op": "custom.send", "d": {"room": "r1", "type": kind, "data": data, "volatile": volatile}})
}

fn send(kind: &str, volatile: bool) -> client::CustomSend {
    client::CustomSend {
        room: "r1".into(),
        kind: kind.into(),
        data: Some(json!({"n": 1})),
        volatile,
    }
}

#[test]
fn a_members_message_is_sequenced_with_its_sender_and_data() {
    let mut r = party();
    let before = r.seq();
    let out = run(
        &mut r,
        "mem",
        custom("game.move", json!({"x": 3}), false),
        1,
    )
    .unwrap();
    assert_eq!(r.seq(), before + 1);
    assert_eq!(out.ok, format!(r#"{{"seq":{}}}"#, before + 1).into_bytes());
    let [(seq, ev)] = &out.applied.events[..] else {
        panic!("one event: {:?}", out.applied.events)
    };
    assert_eq!(*seq, before + 1);
    let frame = ev.encode(&RoomId::from("r1"), r.epoch(), *seq);
    let v: serde_json::Value = serde_json::from_slice(&frame).unwrap();
    assert_eq!(v["ev"], "custom");
    assert_eq!(v["seq"], before + 1);
    assert_eq!(
        v["d"],
        json!({"from": "mem", "type": "game.move", "data": {"x": 3}})
    );
    assert!(out.applied.broadcast.is_empty());
}

#[test]
fn a_volatile_message_goes_to_everyone_unsequenced_and_is_not_kept() {
    let mut r = party();
    let before = r.seq();
    let out = run(&mut r, "lis", custom("like", json!(null), true), 1).unwrap();
    assert_eq!(&out.ok[..], b"{}");
    assert_eq!(r.seq(), before, "a volatile message takes no seq");
    assert!(out.applied.events.is_empty());
    assert!(!out.applied.durable_changed);
    let [frame] = &out.applied.broadcast[..] else {
        panic!("one frame: {:?}", out.applied.broadcast)
    };
    let v: serde_json::Value = serde_json::from_slice(frame).unwrap();
    assert_eq!(
        v,
        json!({"ev": "custom", "room": "r1", "d": {"from": "lis", "type": "like"}})
    );
}

#[test]
fn the_apps_backend_sends_as_the_system_without_a_sender() {
    let mut r = party();
    let out = r.custom(None, &send("notice", false), 1).unwrap();
    let [(seq, ev)] = &out.events[..] else {
        panic!("one event")
    };
    let v: serde_json::Value =
        serde_json::from_slice(&ev.encode(&RoomId::from("r1"), r.epoch(), *seq)).unwrap();
    assert_eq!(
        v["d"],
        json!({"system": true, "type": "notice", "data": {"n": 1}})
    );
    let out = r.custom(None, &send("notice", true), 1).unwrap();
    assert_eq!((out.events.len(), out.broadcast.len()), (0, 1));
}

#[test]
fn a_chat_mute_silences_custom_messages_too_and_refusals_change_nothing() {
    let mut r = party();
    run(
        &mut r,
        "adm",
        json!({"op": "chat.mute", "d": {"room": "r1", "user": "mem", "seconds": 60}}),
        1,
    )
    .unwrap();
    let before = r.seq();
    for volatile in [false, true] {
        let e = run(&mut r, "mem", custom("like", json!(1), volatile), 2).unwrap_err();
        assert_eq!(e.code, ErrorCode::ChatMuted);
    }
    // The mute ends: the member may send again.
    assert!(run(&mut r, "mem", custom("like", json!(1), true), 61_000).is_ok());
    for bad in [
        custom("has space", json!(1), false),
        custom("", json!(1), true),
        custom("big", json!("x".repeat(3000)), false),
    ] {
        let e = run(&mut r, "host", bad, 2).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
    }
    let mut big = send("big", false);
    big.data = Some(json!("x".repeat(3000)));
    assert_eq!(
        r.custom(None, &big, 2).unwrap_err().code,
        ErrorCode::BadRequest
    );
    // Only a member through its own connection sends.
    let s = r.member(&u("mem")).cloned().unwrap();
    let stranger = r.apply(
        &u("nobody"),
        &s,
        &super::tests_rights::op(custom("x", json!(1), false)),
        2,
    );
    assert_eq!(stranger.unwrap_err().code, ErrorCode::NotInRoom);
    assert_eq!(r.seq(), before);
}

#[test]
fn a_room_wide_chat_mute_silences_members_but_not_the_staff_until_lifted() {
    let mut r = party();
    let mute = |on: bool| json!({"op": "room.update", "d": {"room": "r1", "chat_muted": on}});
    let chat = json!({"op": "chat.send", "d": {"room": "r1", "text": "hi"}});
    // Only the staff mute the room.
    let e = run(&mut r, "mem", mute(true), 1).unwrap_err();
    assert_eq!(e.code, ErrorCode::Forbidden);
    let out = run(&mut r, "adm", mute(true), 1).unwrap();
    let [(_, Sequenced::RoomUpdate(info))] = &out.applied.events[..] else {
        panic!("one room.update: {:?}", out.applied.events)
    };
    assert_eq!(
        (info.chat_muted, info.by.clone()),
        (Some(true), Some(u("adm")))
    );
    assert!(out.applied.durable_changed);
    assert!(r.snapshot().chat_muted);
    // Muting a muted room changes nothing.
    assert!(
        run(&mut r, "host", mute(true), 2)
            .unwrap()
            .applied
            .events
            .is_empty()
    );
    let before = r.seq();
    for who in ["mem", "t", "lis"] {
        let e = run(&mut r, who, chat.clone(), 3).unwrap_err();
        assert_eq!(e.code, ErrorCode::ChatMuted, "{who}");
        let e = run(&mut r, who, custom("like", json!(1), true), 3).unwrap_err();
        assert_eq!(e.code, ErrorCode::ChatMuted, "{who}");
    }
    assert_eq!(r.seq(), before);
    // The owner and the admins still speak, and so does the app's backend.
    for who in ["host", "adm"] {
        run(&mut r, who, chat.clone(), 3).unwrap();
        run(&mut r, who, custom("like", json!(1), false), 3).unwrap();
    }
    r.custom(None, &send("notice", false), 3).unwrap();
    // Lifted: members speak again; the snapshot says nothing (the field is absent when off).
    run(&mut r, "host", mute(false), 4).unwrap();
    run(&mut r, "mem", chat, 5).unwrap();
    assert!(!r.snapshot().chat_muted);
}

fn attrs_op(set: serde_json::Value, remove: &[&str]) -> serde_json::Value {
    json!({"op": "room.attrs", "d": {"room": "r1", "set": set, "remove": remove}})
}

#[test]
fn the_staff_set_and_remove_attributes_and_only_changes_are_announced() {
    let mut r = party();
    let e = run(&mut r, "mem", attrs_op(json!({"theme": "night"}), &[]), 1).unwrap_err();
    assert_eq!(e.code, ErrorCode::Forbidden);
    let out = run(
        &mut r,
        "adm",
        attrs_op(json!({"theme": "night", "pk": [0, 0]}), &[]),
        1,
    )
    .unwrap();
    let [(_, Sequenced::RoomAttrs(ev))] = &out.applied.events[..] else {
        panic!("one room.attrs: {:?}", out.applied.events)
    };
    assert_eq!(ev.by, Some(u("adm")));
    assert_eq!(
        serde_json::to_value(&ev.set).unwrap(),
        json!({"pk": [0, 0], "theme": "night"})
    );
    assert!(out.applied.durable_changed);
    assert_eq!(
        serde_json::to_value(r.snapshot().attrs).unwrap(),
        json!({"pk": [0, 0], "theme": "night"})
    );
    // The same values again, and removing a key that is not there: nothing to announce.
    let out = run(
        &mut r,
        "host",
        attrs_op(json!({"theme": "night"}), &["song"]),
        2,
    )
    .unwrap();
    assert!(out.applied.events.is_empty() && !out.applied.durable_changed);
    // The app's backend changes one and removes another: only those are in the event.
    let a = client::RoomAttrs {
        room: "r1".into(),
        set: [("pk".to_owned(), json!([3, 1]))].into(),
        remove: vec!["theme".into()],
    };
    let out = r.room_attrs(None, &a).unwrap();
    let [(_, Sequenced::RoomAttrs(ev))] = &out.events[..] else {
        panic!("one room.attrs")
    };
    assert_eq!(
        (ev.by.clone(), ev.removed.clone()),
        (None, vec!["theme".to_owned()])
    );
    assert_eq!(
        serde_json::to_value(r.snapshot().attrs).unwrap(),
        json!({"pk": [3, 1]})
    );
    // All removed: the snapshot has none, and the durable state keeps no empty map.
    r.room_attrs(
        None,
        &client::RoomAttrs {
            room: "r1".into(),
            set: Default::default(),
            remove: vec!["pk".into()],
        },
    )
    .unwrap();
    assert!(r.snapshot().attrs.is_empty() && r.durable().attrs.is_none());
}

#[test]
fn attributes_past_the_rooms_bounds_are_refused_whole() {
    let mut r = party();
    let twenty: serde_json::Map<String, serde_json::Value> =
        (0..20).map(|i| (format!("k{i}"), json!(i))).collect();
    run(&mut r, "host", attrs_op(twenty.into(), &[]), 1).unwrap();
    let before = r.seq();
    let e = run(&mut r, "host", attrs_op(json!({"k20": 1}), &[]), 2).unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest);
    // Replacing and removing within the bound works.
    run(&mut r, "host", attrs_op(json!({"k20": 1}), &["k0"]), 2).unwrap();
    // Eight values of 1,000 bytes and more are past the 8,192-byte total.
    let big: serde_json::Map<String, serde_json::Value> = (0..9)
        .map(|i| (format!("k{i}"), json!("x".repeat(998))))
        .collect();
    let e = run(&mut r, "host", attrs_op(big.into(), &[]), 3).unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert_eq!(r.seq(), before + 1);
    assert_eq!(r.snapshot().attrs.len(), 20);
    assert_eq!(
        r.snapshot().attrs["k1"],
        json!(1),
        "the refused change left nothing behind"
    );
}
