//! The chat's room-wide rules: slow mode.

use serde_json::json;

use super::tests_rights::{party, run};
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
