//! The like counter: totals, the coalesced `room.likes`, who may like, and refusals.

use serde_json::json;

use super::tests_rights::{party, run, u};
use super::*;

fn like(count: serde_json::Value) -> serde_json::Value {
    json!({"op": "like.send", "d": {"room": "r1", "count": count}})
}

fn frame(applied: &Applied) -> serde_json::Value {
    let [frame] = &applied.broadcast[..] else {
        panic!("one frame: {:?}", applied.broadcast)
    };
    serde_json::from_slice(frame).unwrap()
}

#[test]
fn likes_add_to_the_total_and_are_announced_once_coalesced() {
    let mut r = party();
    let seq = r.seq();
    assert!(!r.likes_pending());
    let out = run(&mut r, "lis", like(json!(3)), 1).unwrap();
    assert_eq!(&out.ok[..], br#"{"total":3}"#);
    // The like itself publishes nothing: no event, no write, no seq.
    assert_eq!(out.applied, Applied::default());
    let out = run(&mut r, "mem", like(json!(null)), 2).unwrap();
    assert_eq!(&out.ok[..], br#"{"total":4}"#);
    run(&mut r, "lis", like(json!(10)), 3).unwrap();
    assert!(r.likes_pending());
    assert_eq!(r.seq(), seq, "likes take no seq");

    let applied = r.take_likes(5).expect("likes wait");
    assert!(
        applied.durable_changed,
        "the total is written before it is shown"
    );
    assert!(applied.events.is_empty());
    let v = frame(&applied);
    assert_eq!(v["ev"], "room.likes");
    assert_eq!(v["room"], "r1");
    assert!(v.get("seq").is_none(), "volatile: {v}");
    // The latest liker first, each once.
    assert_eq!(
        v["d"],
        json!({"total": 14, "added": 14, "recent": ["lis", "mem"]})
    );
    assert!(!r.likes_pending());
    assert_eq!(
        r.take_likes(5),
        None,
        "nothing waits after the announcement"
    );

    run(&mut r, "host", like(json!(1)), 4).unwrap();
    let v = frame(&r.take_likes(5).unwrap());
    assert_eq!(v["d"], json!({"total": 15, "added": 1, "recent": ["host"]}));
    assert_eq!(r.snapshot().likes, 15);
    assert_eq!(r.durable().likes, 15);
}

#[test]
fn an_announcement_names_at_most_five_likers() {
    let mut r = party();
    for (i, who) in ["host", "adm", "mem", "t", "req", "lis"].iter().enumerate() {
        run(&mut r, who, like(json!(1)), i as u64).unwrap();
    }
    let v = frame(&r.take_likes(5).unwrap());
    assert_eq!(v["d"]["added"], 6);
    assert_eq!(v["d"]["recent"], json!(["lis", "req", "t", "mem", "adm"]));
}

#[test]
fn a_bad_count_or_a_non_member_changes_nothing() {
    let mut r = party();
    for bad in [json!(0), json!(101)] {
        let err = run(&mut r, "mem", like(bad.clone()), 1).unwrap_err();
        assert_eq!(err.code, ErrorCode::BadRequest, "{bad}");
    }
    let err = run(&mut r, "stranger", like(json!(1)), 1).unwrap_err();
    assert_eq!(err.code, ErrorCode::NotInRoom);
    assert!(!r.likes_pending());
    assert_eq!(r.durable().likes, 0);
    assert_eq!(r.snapshot().likes, 0);
}

#[test]
fn a_muted_member_may_still_like() {
    let mut r = party();
    run(
        &mut r,
        "host",
        json!({"op": "chat.mute", "d": {"room": "r1", "user": "mem"}}),
        1,
    )
    .unwrap();
    assert!(run(&mut r, "mem", like(json!(2)), 2).is_ok());
    assert_eq!(r.durable().likes, 2);
    assert!(r.durable.mutes.contains_key(&u("mem")));
}

#[test]
fn the_total_survives_a_new_owner_and_old_snapshots_read_as_none() {
    let mut r = party();
    run(&mut r, "mem", like(json!(7)), 1).unwrap();
    let saved = serde_json::to_string(r.durable()).unwrap();
    let back: Durable = serde_json::from_str(&saved).unwrap();
    assert_eq!(back.likes, 7);
    // A snapshot from before likes existed has none, and writes none back.
    let fresh = Durable::new(u("host"), "t".into(), 8, None).unwrap();
    let old = serde_json::to_string(&fresh).unwrap();
    assert!(!old.contains("likes"), "{old}");
    assert_eq!(serde_json::from_str::<Durable>(&old).unwrap().likes, 0);
}

#[test]
fn likes_are_due_an_interval_after_the_last_announcement() {
    let mut r = party();
    assert_eq!(r.likes_due(1000), None);
    run(&mut r, "mem", like(json!(1)), 1).unwrap();
    // Never announced: due at once.
    assert_eq!(r.likes_due(1000), Some(0));
    r.take_likes(5_000).unwrap();
    assert_eq!(r.likes_due(1000), None, "nothing waits");
    run(&mut r, "mem", like(json!(1)), 5_100).unwrap();
    assert_eq!(r.likes_due(1000), Some(6_000));
}
