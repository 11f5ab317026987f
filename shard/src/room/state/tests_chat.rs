//! The chat's rules: slow mode, taking a line back (`chat.recall`), mentions (of everyone too) and replies,
//! and the pinned line (`chat.pin`).

use serde_json::json;

use super::tests_rights::{party, run, session, u};
use super::*;

fn chat(text: &str) -> serde_json::Value {
    json!({"op": "chat.send", "d": {"room": "r1", "text": text}})
}

fn slow(seconds: u32) -> serde_json::Value {
    json!({"op": "room.update", "d": {"room": "r1", "slow_mode": seconds}})
}

#[test]
fn slow_mode_holds_members_to_one_line_an_interval_and_not_the_staff() {
    let mut r = party();
    let out = run(&mut r, "adm", slow(10), 1_000).unwrap();
    let [(_, Sequenced::RoomUpdate(info))] = &out.applied.events[..] else {
        panic!("one room.update: {:?}", out.applied.events)
    };
    assert_eq!(info.slow_mode, Some(10));
    assert!(out.applied.durable_changed);
    assert_eq!(r.snapshot().slow_mode, 10);

    run(&mut r, "mem", chat("one"), 2_000).unwrap();
    let err = run(&mut r, "mem", chat("two"), 11_999).unwrap_err();
    assert_eq!(err.code, ErrorCode::SlowMode);
    assert!(err.msg.contains("12000"), "{}", err.msg);
    // Another member is not held back by mem's line; the staff never are.
    run(&mut r, "lis", chat("mine"), 3_000).unwrap();
    for t in [3_000, 3_001, 3_002] {
        run(&mut r, "host", chat("host"), t).unwrap();
        run(&mut r, "adm", chat("admin"), t).unwrap();
    }
    // The interval passed: mem speaks again, and waits again.
    run(&mut r, "mem", chat("two"), 12_000).unwrap();
    assert_eq!(
        run(&mut r, "mem", chat("three"), 12_001).unwrap_err().code,
        ErrorCode::SlowMode
    );
    // A refused line is not counted: mem's next chance is 10 s after the line that went.
    run(&mut r, "mem", chat("three"), 22_000).unwrap();
}

#[test]
fn a_new_interval_starts_afresh_and_zero_turns_slow_mode_off() {
    let mut r = party();
    run(&mut r, "host", slow(60), 0).unwrap();
    run(&mut r, "mem", chat("one"), 1_000).unwrap();
    run(&mut r, "host", slow(5), 2_000).unwrap();
    run(&mut r, "mem", chat("two"), 2_001).unwrap();
    run(&mut r, "host", slow(0), 2_002).unwrap();
    assert_eq!(r.snapshot().slow_mode, 0);
    for t in 2_003..2_010 {
        run(&mut r, "mem", chat("free"), t).unwrap();
    }
    assert!(r.last_chat.is_none(), "nothing is kept while it is off");
}

#[test]
fn only_staff_set_slow_mode_and_within_its_bound() {
    let mut r = party();
    assert_eq!(
        run(&mut r, "mem", slow(10), 0).unwrap_err().code,
        ErrorCode::Forbidden
    );
    assert_eq!(
        run(&mut r, "host", slow(301), 0).unwrap_err().code,
        ErrorCode::BadRequest
    );
    run(&mut r, "host", slow(300), 0).unwrap();
    // The same value again changes nothing and announces nothing.
    let out = run(&mut r, "host", slow(300), 0).unwrap();
    assert!(out.applied.events.is_empty());
    // Custom messages are not chat lines: slow mode leaves them alone.
    run(&mut r, "mem", chat("line"), 1).unwrap();
    let custom = json!({"op": "custom.send", "d": {"room": "r1", "type": "game.move"}});
    run(&mut r, "mem", custom.clone(), 2).unwrap();
    run(&mut r, "mem", custom, 3).unwrap();
}

fn recall(seq: u64) -> serde_json::Value {
    json!({"op": "chat.recall", "d": {"room": "r1", "seq": seq}})
}

fn seq_of(out: &Outcome) -> u64 {
    out.applied.events.last().map(|(s, _)| *s).unwrap()
}

#[test]
fn a_sender_recalls_their_line_within_two_minutes_once() {
    let mut r = party();
    let line = seq_of(&run(&mut r, "mem", chat("oops"), 1_000).unwrap());
    let out = run(&mut r, "mem", recall(line), 121_000).unwrap();
    let [(seq, Sequenced::ChatRecall(ev))] = &out.applied.events[..] else {
        panic!("one chat.recall: {:?}", out.applied.events)
    };
    assert_eq!(*seq, line + 1, "the recall is sequenced after the line");
    assert_eq!(
        (ev.line, ev.from.as_str(), ev.by.as_str()),
        (line, "mem", "mem")
    );
    assert!(!out.applied.durable_changed);
    // Again: answered, with no second event.
    let again = run(&mut r, "mem", recall(line), 121_001).unwrap();
    assert!(again.applied.events.is_empty());
    // Past the window: refused.
    let late = seq_of(&run(&mut r, "mem", chat("kept"), 200_000).unwrap());
    let err = run(&mut r, "mem", recall(late), 320_001).unwrap_err();
    assert_eq!(err.code, ErrorCode::Forbidden);
}

#[test]
fn the_staff_recall_lines_of_those_below_them_at_any_age() {
    let mut r = party();
    let mem = seq_of(&run(&mut r, "mem", chat("rude"), 0).unwrap());
    let host = seq_of(&run(&mut r, "host", chat("owner's"), 0).unwrap());
    let adm = seq_of(&run(&mut r, "adm", chat("admin's"), 0).unwrap());
    // Another member cannot; an admin can take a member's line back, not the owner's.
    let err = run(&mut r, "lis", recall(mem), 1).unwrap_err();
    assert_eq!(err.code, ErrorCode::Forbidden);
    let out = run(&mut r, "adm", recall(mem), 10_000_000).unwrap();
    let [(_, Sequenced::ChatRecall(ev))] = &out.applied.events[..] else {
        panic!("one chat.recall")
    };
    assert_eq!((ev.from.as_str(), ev.by.as_str()), ("mem", "adm"));
    assert_eq!(
        run(&mut r, "adm", recall(host), 1).unwrap_err().code,
        ErrorCode::Forbidden
    );
    run(&mut r, "host", recall(adm), 1).unwrap();
}

#[test]
fn only_the_latest_chat_lines_of_this_epoch_can_be_recalled() {
    let mut r = party();
    let first = seq_of(&run(&mut r, "mem", chat("first"), 0).unwrap());
    // Not a chat line (a custom message), and no line at all.
    let custom = json!({"op": "custom.send", "d": {"room": "r1", "type": "x"}});
    let other = seq_of(&run(&mut r, "mem", custom, 0).unwrap());
    for seq in [other, 999_999] {
        let err = run(&mut r, "host", recall(seq), 1).unwrap_err();
        assert_eq!(err.code, ErrorCode::NoSuchMessage, "{seq}");
    }
    for i in 0..client::RECALLABLE_LINES {
        run(&mut r, "host", chat(&format!("line {i}")), 1).unwrap();
    }
    let err = run(&mut r, "host", recall(first), 2).unwrap_err();
    assert_eq!(
        err.code,
        ErrorCode::NoSuchMessage,
        "pushed out by newer lines"
    );
    let refused = run(&mut r, "mem", recall(first), 2).unwrap_err();
    assert_eq!(refused.code, ErrorCode::NoSuchMessage);
}

fn chat_with(text: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut d = json!({"room": "r1", "text": text});
    for (k, v) in extra.as_object().unwrap() {
        d[k] = v.clone();
    }
    json!({"op": "chat.send", "d": d})
}

fn the_chat(out: &Outcome) -> &client::ChatEvent {
    let [(_, Sequenced::Chat(ev))] = &out.applied.events[..] else {
        panic!("one chat: {:?}", out.applied.events)
    };
    ev
}

#[test]
fn a_line_mentions_members_of_the_room_each_once_and_never_its_sender() {
    let mut r = party();
    let out = run(
        &mut r,
        "mem",
        chat_with("hi both", json!({"mentions": ["host", "lis"]})),
        0,
    )
    .unwrap();
    let ev = the_chat(&out);
    assert_eq!(ev.mentions, [u("host"), u("lis")]);
    let encoded = serde_json::to_value(ev).unwrap();
    assert_eq!(encoded["mentions"], json!(["host", "lis"]));
    // A plain line carries neither field.
    let plain = serde_json::to_value(the_chat(&run(&mut r, "mem", chat("x"), 0).unwrap())).unwrap();
    assert_eq!((plain.get("mentions"), plain.get("reply")), (None, None));

    let eleven: Vec<String> = (0..11).map(|i| format!("u{i}")).collect();
    for (mentions, why) in [
        (json!(["mem"]), "its sender"),
        (json!(["host", "host"]), "twice"),
        (json!(["nobody"]), "not in the room"),
        (json!(eleven), "at most 10"),
    ] {
        let err = run(
            &mut r,
            "mem",
            chat_with("hey", json!({"mentions": mentions})),
            0,
        )
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::BadRequest, "{why}");
        assert!(err.msg.contains(why), "{why}: {}", err.msg);
    }
    // A refused line took no seq: the next one follows the last accepted.
    let before = r.seq;
    run(&mut r, "mem", chat("after"), 0).unwrap();
    assert_eq!(r.seq, before + 1);
}

#[test]
fn only_the_staff_mention_everyone() {
    let mut r = party();
    let all = || chat_with("@all we start at nine", json!({"mention_all": true}));
    let err = run(&mut r, "mem", all(), 0).unwrap_err();
    assert_eq!(err.code, ErrorCode::Forbidden);
    for staff in ["host", "adm"] {
        let out = run(&mut r, staff, all(), 0).unwrap();
        let ev = the_chat(&out);
        assert!(ev.mention_all);
        assert_eq!(serde_json::to_value(ev).unwrap()["mention_all"], true);
    }
    // With members named too, and absent from a line that does not mention everyone.
    let both = chat_with("hi", json!({"mention_all": true, "mentions": ["mem"]}));
    let out = run(&mut r, "adm", both, 0).unwrap();
    assert_eq!(the_chat(&out).mentions, [u("mem")]);
    let plain =
        serde_json::to_value(the_chat(&run(&mut r, "host", chat("x"), 0).unwrap())).unwrap();
    assert_eq!(plain.get("mention_all"), None);
}

#[test]
fn a_reply_names_the_line_it_answers_while_the_room_remembers_it() {
    let mut r = party();
    let asked = seq_of(&run(&mut r, "mem", chat("who sings next?"), 1_000).unwrap());
    let out = run(
        &mut r,
        "lis",
        chat_with("me!", json!({"reply_to": asked})),
        2_000,
    )
    .unwrap();
    let reply = the_chat(&out).reply.clone().unwrap();
    assert_eq!((reply.seq, reply.from.as_str()), (asked, "mem"));
    assert_eq!(
        serde_json::to_value(the_chat(&out)).unwrap()["reply"],
        json!({"seq": asked, "from": "mem"})
    );
    // A line taken back, a custom message, and no line at all cannot be answered.
    let gone = seq_of(&run(&mut r, "mem", chat("oops"), 3_000).unwrap());
    run(&mut r, "mem", recall(gone), 3_001).unwrap();
    let custom = json!({"op": "custom.send", "d": {"room": "r1", "type": "x"}});
    let other = seq_of(&run(&mut r, "mem", custom, 3_002).unwrap());
    for seq in [gone, other, 999_999] {
        let err = run(
            &mut r,
            "lis",
            chat_with("re", json!({"reply_to": seq})),
            4_000,
        )
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::NoSuchMessage, "{seq}");
    }
    // Mentions and a reply together.
    let both = chat_with("@mem yes", json!({"reply_to": asked, "mentions": ["mem"]}));
    let ev = run(&mut r, "host", both, 5_000).unwrap();
    let ev = the_chat(&ev);
    assert_eq!(
        (ev.mentions.len(), ev.reply.as_ref().map(|r| r.seq)),
        (1, Some(asked))
    );
}

fn pin(
    r: &mut RoomState,
    who: &str,
    seq: Option<u64>,
    text: Option<&str>,
) -> Result<Applied, Rejected> {
    let at = session(r, who);
    r.chat_pin(&u(who), &at, seq, text.map(str::to_owned), 7_000)
}

fn the_pin(applied: &Applied) -> &client::ChatPinned {
    let [(_, Sequenced::ChatPin(ev))] = &applied.events[..] else {
        panic!("one chat.pin: {:?}", applied.events)
    };
    ev
}

#[test]
fn the_staff_pin_a_line_for_everyone_and_take_it_down() {
    let mut r = party();
    let line = seq_of(&run(&mut r, "mem", chat("the set list is up"), 1_000).unwrap());
    let pinned = pin(&mut r, "adm", Some(line), Some("the set list is up")).unwrap();
    assert!(pinned.durable_changed);
    let want = client::PinnedLine {
        seq: line,
        epoch: r.epoch(),
        from: u("mem"),
        text: "the set list is up".into(),
        by: u("adm"),
        at: 7_000,
    };
    assert_eq!(the_pin(&pinned).line.as_ref(), Some(&want));
    assert_eq!(
        r.snapshot().pinned.as_ref(),
        Some(&want),
        "newcomers see it"
    );
    // Kept with the durable state, so it outlives a move or a restart.
    let saved: Durable =
        serde_json::from_value(serde_json::to_value(r.durable()).unwrap()).unwrap();
    assert_eq!(saved.pinned.as_deref(), Some(&want));
    // The same line again changes nothing.
    assert!(
        pin(&mut r, "host", Some(line), Some("the set list is up"))
            .unwrap()
            .events
            .is_empty()
    );

    // Members may not; lines the room does not remember, or whose text is gone, cannot be.
    assert_eq!(
        pin(&mut r, "mem", Some(line), Some("x")).unwrap_err().code,
        ErrorCode::Forbidden
    );
    assert_eq!(
        pin(&mut r, "nobody", Some(line), Some("x"))
            .unwrap_err()
            .code,
        ErrorCode::NotInRoom
    );
    for (seq, text) in [(999_999, Some("x")), (line, None)] {
        let err = pin(&mut r, "host", Some(seq), text).unwrap_err();
        assert_eq!(err.code, ErrorCode::NoSuchMessage, "{seq} {text:?}");
    }

    // Taken down: an event with no line, and nothing the second time.
    let down = pin(&mut r, "host", None, None).unwrap();
    assert_eq!(
        (the_pin(&down).line.as_ref(), the_pin(&down).by.as_str()),
        (None, "host")
    );
    assert_eq!(r.snapshot().pinned, None);
    assert!(pin(&mut r, "host", None, None).unwrap().events.is_empty());
}

#[test]
fn a_pinned_line_taken_back_comes_down_with_it() {
    let mut r = party();
    let kept = seq_of(&run(&mut r, "host", chat("welcome"), 1_000).unwrap());
    let oops = seq_of(&run(&mut r, "mem", chat("oops"), 1_000).unwrap());
    pin(&mut r, "host", Some(oops), Some("oops")).unwrap();
    // Another line's recall leaves the pin alone.
    let other = run(&mut r, "host", recall(kept), 2_000).unwrap();
    assert_eq!(other.applied.events.len(), 1);
    assert!(r.snapshot().pinned.is_some());
    let out = run(&mut r, "mem", recall(oops), 2_000).unwrap();
    let [(a, Sequenced::ChatRecall(_)), (b, Sequenced::ChatPin(down))] = &out.applied.events[..]
    else {
        panic!(
            "the recall, then the pin coming down: {:?}",
            out.applied.events
        )
    };
    assert_eq!(
        (*b, down.line.as_ref(), down.by.as_str()),
        (*a + 1, None, "mem")
    );
    assert!(out.applied.durable_changed);
    assert_eq!(r.snapshot().pinned, None);
    // A recalled line cannot be pinned again.
    let err = pin(&mut r, "host", Some(oops), Some("oops")).unwrap_err();
    assert_eq!(err.code, ErrorCode::NoSuchMessage);
}
