//! Table tests of the PK between two rooms: its invitations, start, scoring, the two-step end that makes both
//! rooms announce the same result (at the time, on a stop in either room, or after the grace),
//! and the side kept in the durable state. Two room states stand for the two rooms; a map
//! stands for the board both write and read.

use std::collections::HashMap;

use super::*;

use protocol::client::{BackendManage, GiftEvent, PkEnd, PkLink, PkStartEvent};
use storage::pk_board::PkSide;
use uuid::Uuid;

fn u(s: &str) -> UserId {
    UserId::from(s)
}

const T0: u64 = 1_000_000;
const ENDS: u64 = T0 + 300_000;

/// Room `id` of 8 seats: its host on seat 0, `fan` and `bot:r` listening.
fn room(id: &str) -> RoomState {
    let durable = Durable::new(u("host"), "t".into(), 8, None).unwrap();
    let mut r = RoomState::new(RoomId::from(id), durable, 7, Rules::default());
    for (i, m) in ["host", "fan", "bot:r"].iter().enumerate() {
        let at = SessionRef {
            gateway: NodeId::from("g1"),
            session: i as u64 + 1,
        };
        r.join(&u(m), at, None, 0).unwrap();
    }
    r.seat_take(&u("host"), Some(0), 0).unwrap();
    r.mic_publishing(&u("host"), true, 0).unwrap();
    r
}

fn link(vs: &str) -> BackendManage {
    BackendManage::PkLink(PkLink {
        link: "m1".into(),
        vs: RoomId::from(vs),
        ends_at: ENDS,
    })
}

/// Rooms `a` and `b` matched, the PK on in both.
fn matched() -> (RoomState, RoomState) {
    let (mut a, mut b) = (room("a"), room("b"));
    a.backend_manage(&link("b"), T0).unwrap();
    b.backend_manage(&link("a"), T0).unwrap();
    (a, b)
}

fn gift(n: u128, from: &str, to: &str, coins: i64) -> GiftEvent {
    GiftEvent {
        order: Uuid::from_u128(n),
        from: u(from),
        to: vec![u(to)],
        gift: "rose".into(),
        count: 1,
        coins,
        lucky_multiplier: None,
        robot: false,
        p: None,
        guard: false,
        vip: 0,
        to_p: Default::default(),
        combo: None,
    }
}

fn ended(a: &Applied) -> Option<PkEnd> {
    a.events.iter().find_map(|(_, e)| match e {
        Sequenced::PkEnd(e) => Some(e.clone()),
        _ => None,
    })
}

/// One exchange of `r` with the board at `now`, as the actor makes it: writes the room's side,
/// reads the other's, hands the answer to the rule.
fn exchange(board: &mut HashMap<RoomId, PkSide>, r: &mut RoomState, now: u64) -> (Applied, bool) {
    let (link, _, side) = r.pk_side(now).unwrap();
    board.insert(r.id().clone(), side);
    let theirs = board
        .iter()
        .find(|(room, _)| *room != r.id())
        .map(|(_, s)| *s);
    r.pk_their_side(&link, side, theirs, now)
}

fn scores(r: &RoomState) -> (i64, i64) {
    let v = r.pk_view(false).unwrap();
    (v.red, v.blue)
}

#[test]
fn the_backend_matches_two_rooms_and_each_announces_the_other() {
    let mut a = room("a");
    let out = a.backend_manage(&link("b"), T0).unwrap();
    let ev: PkStartEvent = out
        .events
        .iter()
        .find_map(|(_, e)| match e {
            Sequenced::PkStart(s) => Some(s.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!((ev.pk, ev.ends_at, ev.by), (1, ENDS, None));
    assert!(ev.red_seats.is_empty() && ev.blue_seats.is_empty());
    let vs = ev.vs.unwrap();
    assert_eq!((vs.room.as_str(), vs.link.as_str()), ("b", "m1"));
    assert_eq!(a.pk_view(true).unwrap().vs.unwrap().room.as_str(), "b");
    assert_eq!(a.next_deadline(), Some(ENDS));

    let refused =
        |r: &mut RoomState, m: BackendManage, now| r.backend_manage(&m, now).err().map(|e| e.code);
    assert_eq!(refused(&mut a, link("c"), T0), Some(ErrorCode::PkOn));
    let mut c = room("c");
    assert_eq!(
        refused(&mut c, link("c"), T0),
        Some(ErrorCode::BadRequest),
        "itself"
    );
    let bad = |link: &str, ends_at| {
        BackendManage::PkLink(PkLink {
            link: link.into(),
            vs: RoomId::from("b"),
            ends_at,
        })
    };
    assert_eq!(
        refused(&mut c, bad("m 1", ENDS), T0),
        Some(ErrorCode::BadRequest)
    );
    assert_eq!(
        refused(&mut c, bad("m1", T0), T0),
        Some(ErrorCode::BadRequest),
        "ended"
    );
    assert_eq!(
        refused(&mut c, bad("m1", T0 + 3_700_000), T0),
        Some(ErrorCode::BadRequest),
        "longer than the longest PK"
    );
    assert_eq!(c.pk_view(false), None);
}

#[test]
fn every_gift_in_a_room_scores_for_it_and_the_other_rooms_score_comes_from_the_board() {
    let (mut a, mut b) = matched();
    let mut board = HashMap::new();
    // To the host, to a listener, and a robot's: all count for the room.
    for (n, to, coins) in [(1, "host", 10), (2, "fan", 5)] {
        assert!(
            a.record_gift(gift(n, "fan", to, coins), false, T0 + 1)
                .pk_scored
        );
    }
    assert!(
        b.record_gift(gift(3, "bot:r", "host", 7), false, T0 + 1)
            .pk_scored
    );
    assert_eq!(scores(&a), (15, 0));

    let (applied, moved) = exchange(&mut board, &mut a, T0 + 2);
    assert!(!moved && applied.events.is_empty(), "b wrote nothing yet");
    let (_, moved) = exchange(&mut board, &mut b, T0 + 2);
    assert!(moved);
    assert_eq!(scores(&b), (7, 15));
    let (_, moved) = exchange(&mut board, &mut a, T0 + 3);
    assert!(moved);
    assert_eq!(scores(&a), (15, 7));
    let (_, moved) = exchange(&mut board, &mut a, T0 + 4);
    assert!(!moved, "the same score read again moves nothing");

    // An answer for another match (one that ended since) changes nothing.
    let side = PkSide {
        score: 999,
        closed: true,
        stopped: false,
    };
    let (applied, moved) = a.pk_their_side("m0", side, Some(side), T0 + 5);
    assert!(!moved && !applied.durable_changed);
    assert_eq!(scores(&a), (15, 7));
}

#[test]
fn at_the_time_both_rooms_end_with_the_same_two_final_scores() {
    let (mut a, mut b) = matched();
    let mut board = HashMap::new();
    a.record_gift(gift(1, "fan", "host", 100), false, T0 + 1);
    b.record_gift(gift(2, "fan", "host", 150), false, T0 + 1);
    exchange(&mut board, &mut a, T0 + 2);
    exchange(&mut board, &mut b, T0 + 2);
    // b's last gift lands after a's last read of it, just before the end.
    b.record_gift(gift(3, "fan", "host", 60), false, ENDS - 1);
    // After the time nothing scores.
    assert!(
        !a.record_gift(gift(4, "fan", "host", 500), false, ENDS)
            .pk_scored
    );

    // Both close at the time, with no event: the end waits for the other's final.
    for r in [&mut a, &mut b] {
        let out = r.tick(ENDS);
        assert!(out.durable_changed && out.events.is_empty());
        assert_eq!(r.next_deadline(), Some(ENDS + LINK_GRACE_MS));
    }
    let (out, _) = exchange(&mut board, &mut a, ENDS + 100);
    assert_eq!(ended(&out), None, "b's final is not on the board yet");
    let (out, _) = exchange(&mut board, &mut b, ENDS + 200);
    let end_b = ended(&out).unwrap();
    let (out, _) = exchange(&mut board, &mut a, ENDS + 900);
    let end_a = ended(&out).unwrap();
    assert_eq!(
        (end_a.red, end_a.blue, end_a.winner.as_str()),
        (100, 210, "blue")
    );
    assert_eq!(
        (end_b.red, end_b.blue, end_b.winner.as_str()),
        (210, 100, "red")
    );
    for end in [&end_a, &end_b] {
        assert_eq!((end.reason.as_str(), end.by.as_ref()), ("time", None));
        assert_eq!(
            end.blue_top, None,
            "the other room's senders are not known here"
        );
    }
    assert_eq!(end_a.red_top, Some(u("fan")));
    assert_eq!(end_a.vs.unwrap().room.as_str(), "b");
    assert_eq!((a.pk_view(false), a.pk_side(ENDS + 1000)), (None, None));
    assert_eq!(a.next_deadline(), None);
}

#[test]
fn a_stop_in_one_room_ends_both_with_the_same_result() {
    let (mut a, mut b) = matched();
    let mut board = HashMap::new();
    a.record_gift(gift(1, "fan", "host", 40), false, T0 + 1);
    exchange(&mut board, &mut a, T0 + 2);
    exchange(&mut board, &mut b, T0 + 2);

    // a's host stops it: no event yet, and a stop again is refused.
    let stop = RoomOp::PkStop(client::InRoom {
        room: RoomId::from("a"),
    });
    let host = SessionRef {
        gateway: NodeId::from("g1"),
        session: 1,
    };
    let out = a.apply(&u("host"), &host, &stop, T0 + 10).unwrap();
    assert!(out.applied.durable_changed && out.applied.events.is_empty());
    assert_eq!(
        a.apply(&u("host"), &host, &stop, T0 + 11)
            .err()
            .map(|e| e.code),
        Some(ErrorCode::NoPk)
    );
    assert!(
        !a.record_gift(gift(2, "fan", "host", 5), false, T0 + 12)
            .pk_scored,
        "closed"
    );
    // b scores until it reads the stop.
    assert!(
        b.record_gift(gift(3, "fan", "host", 30), false, T0 + 13)
            .pk_scored
    );

    let (out, _) = exchange(&mut board, &mut a, T0 + 1000);
    assert_eq!(ended(&out), None);
    let (out, _) = exchange(&mut board, &mut b, T0 + 1000);
    assert!(
        out.durable_changed && ended(&out).is_none(),
        "b closes as stopped"
    );
    assert!(
        !b.record_gift(gift(4, "fan", "host", 9), false, T0 + 1001)
            .pk_scored
    );
    let (out, _) = exchange(&mut board, &mut b, T0 + 2000);
    let end_b = ended(&out).unwrap();
    let (out, _) = exchange(&mut board, &mut a, T0 + 2000);
    let end_a = ended(&out).unwrap();
    assert_eq!(
        (end_a.red, end_a.blue, end_a.winner.as_str()),
        (40, 30, "red")
    );
    assert_eq!(
        (end_b.red, end_b.blue, end_b.winner.as_str()),
        (30, 40, "blue")
    );
    assert_eq!(
        (end_a.reason.as_str(), end_a.by),
        ("stopped", Some(u("host")))
    );
    assert_eq!((end_b.reason.as_str(), end_b.by), ("stopped", None));
}

#[test]
fn without_the_other_rooms_final_a_room_ends_after_the_grace_with_the_last_score_read() {
    let (mut a, mut b) = matched();
    let mut board = HashMap::new();
    b.record_gift(gift(1, "fan", "host", 20), false, T0 + 1);
    exchange(&mut board, &mut b, T0 + 2);
    exchange(&mut board, &mut a, T0 + 2);
    // b goes quiet (unloaded, or its node down); a closes at the time and waits.
    a.tick(ENDS);
    exchange(&mut board, &mut a, ENDS + 1000);
    assert_eq!(ended(&a.tick(ENDS + LINK_GRACE_MS - 1)), None);
    let end = ended(&a.tick(ENDS + LINK_GRACE_MS)).unwrap();
    assert_eq!((end.red, end.blue, end.winner.as_str()), (0, 20, "blue"));
    assert_eq!(end.reason, "time");
}

#[test]
fn the_side_is_kept_in_the_durable_state() {
    let (mut a, _) = matched();
    a.record_gift(gift(1, "fan", "host", 12), false, T0 + 1);
    a.backend_manage(&BackendManage::PkStop, T0 + 2).unwrap();
    let json = serde_json::to_value(a.durable()).unwrap();
    let back: Durable = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(&back, a.durable());
    let vs = &json["pk"]["on"]["vs"];
    assert_eq!(vs["room"], "b");
    assert_eq!(vs["closed_at"], T0 + 2);
    assert_eq!(vs["reason"], "stopped");
    // A new owner of a reports the same closed side.
    let reloaded = RoomState::new(RoomId::from("a"), back, 8, Rules::default());
    let (_, _, side) = reloaded.pk_side(T0 + 3).unwrap();
    assert_eq!(
        side,
        PkSide {
            score: 12,
            closed: true,
            stopped: true
        }
    );
}

fn invite_from(from: &str, link: &str, expires_at: u64) -> protocol::client::PkCmd {
    protocol::client::PkCmd::Invited(protocol::client::PkInvited {
        link: link.into(),
        from: RoomId::from(from),
        by: u("host"),
        seconds: 120,
        expires_at,
    })
}

fn answer(link: &str, accept: bool) -> protocol::client::PkCmd {
    let r = protocol::client::PkReply {
        room: RoomId::from("b"),
        link: link.into(),
    };
    if accept {
        protocol::client::PkCmd::Accept(r)
    } else {
        protocol::client::PkCmd::Decline(r)
    }
}

#[test]
fn an_invitation_is_checked_in_the_inviting_room_and_kept_and_told_in_the_invited_one() {
    use protocol::client::{PkCmd, PkInvite};
    let mut a = room("a");
    let code = |r: Result<(bytes::Bytes, Applied), Rejected>| r.err().map(|e| e.code);
    let ask = |vs: &str, seconds| {
        PkCmd::Invite(PkInvite {
            room: RoomId::from("a"),
            vs: RoomId::from(vs),
            seconds,
        })
    };
    assert_eq!(
        code(a.pk_cmd(&u("fan"), &ask("b", None), T0)),
        Some(ErrorCode::Forbidden)
    );
    assert_eq!(
        code(a.pk_cmd(&u("stranger"), &ask("b", None), T0)),
        Some(ErrorCode::NotInRoom)
    );
    assert_eq!(
        code(a.pk_cmd(&u("host"), &ask("a", None), T0)),
        Some(ErrorCode::BadRequest)
    );
    assert_eq!(
        code(a.pk_cmd(&u("host"), &ask("b", Some(5)), T0)),
        Some(ErrorCode::BadRequest)
    );
    let (ok, applied) = a.pk_cmd(&u("host"), &ask("b", Some(60)), T0).unwrap();
    assert_eq!((&ok[..], applied.durable_changed), (&b"{}"[..], false));

    // The invited room keeps it and tells its staff present (the host), nobody else.
    let mut b = room("b");
    let (_, applied) = b
        .pk_cmd(&u("host"), &invite_from("a", "i1", T0 + 30_000), T0)
        .unwrap();
    assert!(applied.durable_changed);
    assert_eq!(applied.direct.len(), 1);
    assert_eq!(applied.direct[0].to, vec![u("host")]);
    let frame: serde_json::Value = serde_json::from_slice(&applied.direct[0].frame).unwrap();
    assert_eq!(frame["ev"], "pk.invite");
    assert_eq!(frame["d"]["from"], "a");
    assert_eq!(frame["d"]["link"], "i1");
    // A second from the same room: too soon, then it replaces the first.
    let again = b.pk_cmd(&u("host"), &invite_from("a", "i2", T0 + 30_001), T0 + 1);
    assert_eq!(code(again), Some(ErrorCode::RateLimited));
    b.pk_cmd(&u("host"), &invite_from("a", "i2", T0 + 33_000), T0 + 3_000)
        .unwrap();
    assert_eq!(b.pk_invites().len(), 1);
    assert_eq!(b.pk_invites()[0].link, "i2");
    // Past MAX_PK_INVITES pending, more are refused; lapsed ones make room.
    for n in 0..MAX_PK_INVITES - 1 {
        b.pk_cmd(
            &u("host"),
            &invite_from(&format!("r{n}"), &format!("j{n}"), T0 + 3_010),
            T0 + 3_000,
        )
        .unwrap();
    }
    let more = b.pk_cmd(&u("host"), &invite_from("z", "k", T0 + 50_000), T0 + 3_000);
    assert_eq!(code(more), Some(ErrorCode::BadRequest));
    b.pk_cmd(&u("host"), &invite_from("z", "k", T0 + 50_000), T0 + 3_010)
        .unwrap();
    assert_eq!(b.pk_invites().len(), 2, "the lapsed ones went");
    // Kept across a reload of the room.
    let json = serde_json::to_value(b.durable()).unwrap();
    assert_eq!(json["pk"]["invites"][0]["link"], "i2");
}

#[test]
fn the_invited_rooms_staff_accept_or_decline_once_before_it_lapses() {
    let mut b = room("b");
    let code = |r: Result<(bytes::Bytes, Applied), Rejected>| r.err().map(|e| e.code);
    for (from, link) in [("a", "i1"), ("c", "i2"), ("d", "i3")] {
        b.pk_cmd(&u("host"), &invite_from(from, link, T0 + 30_000), T0)
            .unwrap();
    }
    assert_eq!(
        code(b.pk_cmd(&u("fan"), &answer("i1", true), T0)),
        Some(ErrorCode::Forbidden)
    );
    assert_eq!(
        code(b.pk_cmd(&u("host"), &answer("nope", true), T0)),
        Some(ErrorCode::NoSuchRequest)
    );
    let (ok, applied) = b.pk_cmd(&u("host"), &answer("i1", true), T0 + 1).unwrap();
    assert!(applied.durable_changed);
    let inv: protocol::client::PkInvited = serde_json::from_slice(&ok).unwrap();
    assert_eq!((inv.from.as_str(), inv.seconds), ("a", 120));
    assert_eq!(
        code(b.pk_cmd(&u("host"), &answer("i1", true), T0 + 2)),
        Some(ErrorCode::NoSuchRequest),
        "answered once"
    );
    // Declined: answered with the invitation, for the gateway to tell the inviting room.
    let (ok, _) = b.pk_cmd(&u("host"), &answer("i2", false), T0 + 3).unwrap();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&ok).unwrap()["from"],
        "c"
    );
    // Lapsed: refused, and gone.
    assert_eq!(
        code(b.pk_cmd(&u("host"), &answer("i3", true), T0 + 30_000)),
        Some(ErrorCode::RequestExpired)
    );
    assert!(b.pk_invites().is_empty());
    // With a PK on, an accept is refused (and the invitation stays).
    b.pk_cmd(
        &u("host"),
        &invite_from("e", "i4", T0 + 90_000),
        T0 + 60_000,
    )
    .unwrap();
    b.backend_manage(&link("x"), T0 + 60_000).unwrap();
    assert_eq!(
        code(b.pk_cmd(&u("host"), &answer("i4", true), T0 + 60_001)),
        Some(ErrorCode::PkOn)
    );
    assert_eq!(b.pk_invites().len(), 1);
    // The inviting room's staff hear of a decline.
    let mut a = room("a");
    let declined = protocol::client::PkCmd::Declined(protocol::client::PkDeclined {
        link: "i2".into(),
        vs: RoomId::from("b"),
        by: u("host"),
    });
    let (_, applied) = a.pk_cmd(&u("host"), &declined, T0).unwrap();
    let frame: serde_json::Value = serde_json::from_slice(&applied.direct[0].frame).unwrap();
    assert_eq!(
        (frame["ev"].as_str(), applied.direct[0].to.clone()),
        (Some("pk.declined"), vec![u("host")])
    );
}
