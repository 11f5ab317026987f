//! Table tests of PK: teams, rights, scoring by seat, the end at its time or by the staff,
//! storm-held gifts, and the PK kept in the durable state.

use super::*;

use protocol::client::{GiftEvent, PkEnd, PkStart, PkStartEvent};
use uuid::Uuid;

fn u(s: &str) -> UserId {
    UserId::from(s)
}

fn at(session: SessionId) -> SessionRef {
    SessionRef {
        gateway: NodeId::from("g1"),
        session,
    }
}

const T0: u64 = 1_000_000;
const MIN: u64 = 60_000;

/// A room of 8 seats: the host on seat 0, `a` on 1 (red by default), `b` on 5 (blue), all
/// publishing, and `c`, `d` and the robot `bot:r` listening.
fn room() -> RoomState {
    let durable = Durable::new(u("host"), "t".into(), 8, None).unwrap();
    let mut r = RoomState::new(RoomId::from("r1"), durable, 7, Rules::default());
    for (i, m) in ["host", "a", "b", "c", "d", "bot:r"].iter().enumerate() {
        r.join(&u(m), at(i as u64 + 1), None, 0).unwrap();
    }
    for (m, seat) in [("host", 0), ("a", 1), ("b", 5)] {
        r.seat_take(&u(m), Some(seat), 0).unwrap();
        // Publishing: no publish deadline, so the room's next deadline is the PK's alone.
        r.mic_publishing(&u(m), true, 0).unwrap();
    }
    r
}

fn start(seconds: Option<u32>, red: Option<&[u32]>, blue: Option<&[u32]>) -> RoomOp {
    RoomOp::PkStart(PkStart {
        room: RoomId::from("r1"),
        seconds,
        red: red.map(<[u32]>::to_vec),
        blue: blue.map(<[u32]>::to_vec),
    })
}

fn stop() -> RoomOp {
    RoomOp::PkStop(client::InRoom {
        room: RoomId::from("r1"),
    })
}

/// `user` (session `s`) applies `op` at `now`.
fn op(
    r: &mut RoomState,
    user: &str,
    s: SessionId,
    op: &RoomOp,
    now: u64,
) -> Result<Outcome, Rejected> {
    r.apply(&u(user), &at(s), op, now)
}

fn gift(n: u128, from: &str, to: &[&str], coins_each: i64) -> GiftEvent {
    GiftEvent {
        order: Uuid::from_u128(n),
        from: u(from),
        to: to.iter().map(|t| u(t)).collect(),
        gift: "rose".into(),
        count: 1,
        coins: coins_each * to.len() as i64,
        lucky_multiplier: None,
        robot: false,
        p: None,
        guard: false,
        vip: 0,
        to_p: Default::default(),
        combo: None,
    }
}

fn started(a: &Applied) -> PkStartEvent {
    a.events
        .iter()
        .find_map(|(_, e)| match e {
            Sequenced::PkStart(s) => Some(s.clone()),
            _ => None,
        })
        .unwrap()
}

fn ended(a: &Applied) -> Option<PkEnd> {
    a.events.iter().find_map(|(_, e)| match e {
        Sequenced::PkEnd(e) => Some(e.clone()),
        _ => None,
    })
}

/// (red, blue) scores of the PK that is on.
fn scores(r: &RoomState) -> (i64, i64) {
    let v = r.pk_view(false).unwrap();
    (v.red, v.blue)
}

#[test]
fn gifts_to_each_teams_seats_score_for_it_and_the_pk_ends_at_its_time() {
    let mut r = room();
    let out = op(&mut r, "host", 1, &start(None, None, None), T0).unwrap();
    assert!(out.applied.durable_changed);
    let ev = started(&out.applied);
    assert_eq!(ev.pk, 1);
    assert_eq!(
        (ev.red_seats, ev.blue_seats),
        (vec![0, 1, 2, 3], vec![4, 5, 6, 7])
    );
    assert_eq!(ev.ends_at, T0 + 5 * MIN);
    assert_eq!(ev.by, Some(u("host")));
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&out.ok).unwrap(),
        serde_json::json!({"pk": 1, "ends_at": T0 + 5 * MIN})
    );
    assert_eq!(r.next_deadline(), Some(T0 + 5 * MIN));

    // (gift, red, blue after it, whether a score moved)
    let table: Vec<(GiftEvent, i64, i64, bool)> = vec![
        (gift(1, "c", &["a"], 10), 10, 0, true),
        // Shared equally among the recipients: 10 to each.
        (gift(2, "d", &["a", "b"], 10), 20, 10, true),
        // To the host on seat 0 (red) and a listener (no team).
        (gift(3, "d", &["host", "c"], 7), 27, 10, true),
        // To a listener only: no score.
        (gift(4, "a", &["c"], 100), 27, 10, false),
        // A robot's coins count too.
        (gift(5, "bot:r", &["b"], 50), 27, 60, true),
    ];
    for (i, (g, red, blue, moved)) in table.into_iter().enumerate() {
        let out = r.record_gift(g, false, T0 + 1_000 + i as u64);
        assert_eq!(out.pk_scored, moved, "gift {i}");
        assert_eq!(
            out.applied.durable_changed, moved,
            "gift {i}: stored with its event"
        );
        assert_eq!(scores(&r), (red, blue), "gift {i}");
    }

    // Not yet: nothing ends a minute before the time.
    assert_eq!(ended(&r.tick(T0 + 4 * MIN)), None);
    let out = r.tick(T0 + 5 * MIN);
    assert!(out.durable_changed);
    let end = ended(&out).unwrap();
    assert_eq!((end.pk, end.red, end.blue), (1, 27, 60));
    assert_eq!(end.winner, "blue");
    // Red: c 10, d 10 + 7: d. Blue: d 10, the robot 50: robots are never the top.
    assert_eq!(end.red_top, Some(u("d")));
    assert_eq!(end.blue_top, Some(u("d")));
    assert_eq!((end.reason.as_str(), end.by), ("time", None));
    assert_eq!(r.pk_view(false), None);
    assert_eq!(r.next_deadline(), None);
    // Once over, gifts score nothing.
    assert!(
        !r.record_gift(gift(6, "c", &["a"], 10), false, T0 + 6 * MIN)
            .pk_scored
    );
}

#[test]
fn only_the_staff_start_and_stop_a_pk_and_one_is_on_at_a_time() {
    let mut r = room();
    let refused = |res: Result<Outcome, Rejected>| res.err().map(|e| e.code);
    assert_eq!(
        refused(op(&mut r, "c", 4, &start(None, None, None), T0)),
        Some(ErrorCode::Forbidden)
    );
    assert_eq!(
        refused(op(&mut r, "host", 1, &stop(), T0)),
        Some(ErrorCode::NoPk)
    );
    op(
        &mut r,
        "host",
        1,
        &RoomOp::RoomAdmin(client::RoomAdmin {
            room: RoomId::from("r1"),
            user: u("a"),
            admin: true,
        }),
        T0,
    )
    .unwrap();
    op(&mut r, "a", 2, &start(Some(60), None, None), T0).unwrap();
    assert_eq!(
        refused(op(&mut r, "host", 1, &start(None, None, None), T0 + 1)),
        Some(ErrorCode::PkOn)
    );
    assert_eq!(
        refused(op(&mut r, "c", 4, &stop(), T0 + 2)),
        Some(ErrorCode::Forbidden)
    );
    r.record_gift(gift(1, "c", &["b"], 30), false, T0 + 3);
    let out = op(&mut r, "host", 1, &stop(), T0 + 4).unwrap();
    let end = ended(&out.applied).unwrap();
    assert_eq!((end.red, end.blue, end.winner.as_str()), (0, 30, "blue"));
    assert_eq!((end.reason.as_str(), end.by), ("stopped", Some(u("host"))));
    assert_eq!((end.red_top, end.blue_top), (None, Some(u("c"))));
    assert_eq!(
        refused(op(&mut r, "host", 1, &stop(), T0 + 5)),
        Some(ErrorCode::NoPk)
    );
    // The next one is number 2; a draw is a draw.
    let out = op(&mut r, "host", 1, &start(None, None, None), T0 + 6).unwrap();
    assert_eq!(started(&out.applied).pk, 2);
    let end = ended(&r.tick(T0 + 6 + 5 * MIN)).unwrap();
    assert_eq!((end.pk, end.winner.as_str()), (2, "draw"));
}

#[test]
fn teams_and_lengths_are_checked() {
    // (seconds, red, blue, accepted)
    type Row = (
        Option<u32>,
        Option<&'static [u32]>,
        Option<&'static [u32]>,
        bool,
    );
    let table: Vec<Row> = vec![
        (Some(30), None, None, true),
        (Some(3600), None, None, true),
        (Some(29), None, None, false),
        (Some(3601), None, None, false),
        (None, Some(&[1, 2][..]), Some(&[5, 6][..]), true),
        (None, Some(&[1][..]), Some(&[7][..]), true),
        (None, Some(&[1][..]), None, false),
        (None, None, Some(&[1][..]), false),
        (None, Some(&[][..]), Some(&[1][..]), false),
        (None, Some(&[1, 2][..]), Some(&[2, 3][..]), false),
        (None, Some(&[1, 1][..]), Some(&[3][..]), false),
        (None, Some(&[1][..]), Some(&[8][..]), false),
    ];
    for (seconds, red, blue, ok) in table {
        let mut r = room();
        let res = op(&mut r, "host", 1, &start(seconds, red, blue), T0);
        match res {
            Ok(out) => {
                assert!(ok, "{seconds:?} {red:?} {blue:?} accepted");
                let ev = started(&out.applied);
                if let (Some(red), Some(blue)) = (red, blue) {
                    assert_eq!(
                        (ev.red_seats.as_slice(), ev.blue_seats.as_slice()),
                        (red, blue)
                    );
                }
                let secs = u64::from(seconds.unwrap_or(300));
                assert_eq!(ev.ends_at, T0 + secs * 1000);
            }
            Err(e) => {
                assert!(!ok, "{seconds:?} {red:?} {blue:?} refused: {e}");
                assert_eq!(e.code, ErrorCode::BadRequest);
                assert!(r.pk_view(false).is_none());
            }
        }
    }
}

#[test]
fn the_default_split_leaves_the_host_seat_out() {
    let mut r = room();
    r.durable.host_seat = true;
    let out = op(&mut r, "host", 1, &start(None, None, None), T0).unwrap();
    let ev = started(&out.applied);
    assert_eq!(
        (ev.red_seats, ev.blue_seats),
        (vec![1, 2, 3], vec![4, 5, 6, 7])
    );

    // Two seats, one the host's: nothing to split.
    let durable = Durable::new(u("host"), "t".into(), 2, None).unwrap();
    let mut r = RoomState::new(RoomId::from("r2"), durable, 7, Rules::default());
    r.durable.host_seat = true;
    r.join(&u("host"), at(1), None, 0).unwrap();
    let op = RoomOp::PkStart(PkStart {
        room: RoomId::from("r2"),
        seconds: None,
        red: None,
        blue: None,
    });
    let e = r.apply(&u("host"), &at(1), &op, T0).err().unwrap();
    assert_eq!(e.code, ErrorCode::BadRequest);
}

#[test]
fn a_storm_held_gift_scores_when_its_merged_event_goes_out() {
    let mut r = room();
    r.set_gift_rules(GiftRules {
        combo_window_ms: 3_000,
        events_per_sec: 1,
        storm_interval_ms: 500,
    });
    op(&mut r, "host", 1, &start(None, None, None), T0).unwrap();
    assert!(r.record_gift(gift(1, "c", &["a"], 10), false, T0).pk_scored);
    // Over the budget: held, and not scored until it goes out.
    let held = r.record_gift(gift(2, "c", &["a"], 10), false, T0 + 10);
    assert!(!held.pk_scored);
    assert_eq!(scores(&r), (10, 0));
    let out = r.flush_storm(T0 + 1_000, false);
    assert!(out.pk_scored && out.applied.durable_changed);
    assert_eq!(scores(&r), (20, 0));
}

#[test]
fn the_pk_is_kept_in_the_durable_state_and_shown_to_joiners() {
    let mut r = room();
    op(
        &mut r,
        "host",
        1,
        &start(Some(60), Some(&[1]), Some(&[5])),
        T0,
    )
    .unwrap();
    r.record_gift(gift(1, "c", &["a"], 10), false, T0 + 1);
    r.record_gift(gift(2, "d", &["b"], 25), false, T0 + 2);
    let view = r.snapshot().pk.unwrap();
    assert_eq!((view.pk, view.red, view.blue), (1, 10, 25));
    assert_eq!(
        (view.red_seats, view.blue_seats),
        (Some(vec![1]), Some(vec![5]))
    );
    assert_eq!(view.ends_at, T0 + MIN);
    // pk.score carries no teams.
    assert_eq!(r.pk_view(false).unwrap().red_seats, None);

    // A new owner loads the stored state: the same PK, scores and end.
    let stored = serde_json::to_string(&r.durable).unwrap();
    let durable: Durable = serde_json::from_str(&stored).unwrap();
    let mut next = RoomState::new(RoomId::from("r1"), durable, 8, Rules::default());
    assert_eq!(next.pk_view(true), r.pk_view(true));
    assert_eq!(next.next_deadline(), Some(T0 + MIN));
    let end = ended(&next.tick(T0 + MIN)).unwrap();
    assert_eq!((end.red, end.blue, end.winner.as_str()), (10, 25, "blue"));
    assert_eq!((end.red_top, end.blue_top), (Some(u("c")), Some(u("d"))));

    // A room that never had a PK stores nothing of it.
    let plain = serde_json::to_value(&room().durable).unwrap();
    assert!(plain.get("pk").is_none(), "{plain}");
}

#[test]
fn the_apps_backend_starts_and_stops_a_pk_past_the_staffs_rights() {
    use protocol::client::BackendManage;
    let mut r = room();
    let start = BackendManage::PkStart(PkStart {
        room: RoomId::from("r1"),
        seconds: Some(90),
        red: None,
        blue: None,
    });
    let out = r.backend_manage(&start, T0).unwrap();
    let ev = started(&out);
    assert_eq!((ev.pk, ev.by, ev.ends_at), (1, None, T0 + 90_000));
    assert_eq!(
        r.backend_manage(&start, T0 + 1).err().map(|e| e.code),
        Some(ErrorCode::PkOn)
    );
    let too_long = BackendManage::PkStart(PkStart {
        room: RoomId::from("r1"),
        seconds: Some(4000),
        red: None,
        blue: None,
    });
    assert_eq!(too_long.check(), Err("seconds must be 30..=3600"));
    let out = r.backend_manage(&BackendManage::PkStop, T0 + 2).unwrap();
    let end = ended(&out).unwrap();
    assert_eq!((end.reason.as_str(), end.by), ("stopped", None));
    let again = r.backend_manage(&BackendManage::PkStop, T0 + 3);
    assert_eq!(again.err().map(|e| e.code), Some(ErrorCode::NoPk));
}
