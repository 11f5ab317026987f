//! Seat swaps (`seat.move` with `swap`): who may swap whom, what goes with each user and what
//! stays with the seats, and the refusals that leave the room as it was.

use super::tests_rights::{T, party, run, seat_updates, u};
use super::*;

fn swap(user: Option<&str>, seat: u32) -> serde_json::Value {
    let mut d = serde_json::json!({"room": "r1", "seat": seat, "swap": true});
    if let Some(user) = user {
        d["user"] = user.into();
    }
    serde_json::json!({"op": "seat.move", "d": d})
}

/// [`party`] with `mem` seated on 5 (not publishing, deadline at `T`) besides `t` on 2
/// (publishing), seat 2 muted by `t` and seat 5 muted by staff.
fn seated() -> RoomState {
    let mut r = party();
    let five = &mut r.durable.seats[5];
    five.user = Some(u("mem"));
    five.publish_by = Some(T);
    five.muted = true;
    five.admin_muted = true;
    r.durable.seats[2].muted = true;
    r
}

#[test]
fn an_admin_swaps_two_members_and_each_takes_their_state_along() {
    let mut r = seated();
    let out = run(&mut r, "adm", swap(Some("t"), 5), 1).unwrap();
    assert_eq!(&out.ok[..], br#"{"seat":5}"#);
    let up = seat_updates(&out.applied);
    let seen: Vec<_> = up
        .iter()
        .map(|e| {
            (
                e.seat.index,
                e.seat.user.clone(),
                e.by.clone(),
                e.cause.as_str(),
                e.reason.as_deref(),
            )
        })
        .collect();
    let by = Some(u("adm"));
    assert_eq!(
        seen,
        vec![
            (2, Some(u("mem")), by.clone(), "admin", Some("swapped")),
            (5, Some(u("t")), by, "admin", Some("swapped")),
        ]
    );
    let (two, five) = (&r.durable.seats[2], &r.durable.seats[5]);
    // Publishing and the deadline go with the users.
    assert_eq!((two.publishing, two.publish_by), (false, Some(T)));
    assert_eq!((five.publishing, five.publish_by), (true, None));
    // The staff mute stays on seat 5; t's own mute of seat 2 ends with t leaving it.
    assert_eq!((five.muted, five.admin_muted), (true, true));
    assert_eq!((two.muted, two.admin_muted), (false, false));
    // The deadline frees mem, now on seat 2, and nobody else.
    let due = seat_updates(&r.tick(T));
    assert_eq!(due.len(), 1);
    assert_eq!((due[0].seat.index, due[0].seat.user.clone()), (2, None));
    assert_eq!(r.seat_of(&u("t")), Some(5));
}

#[test]
fn without_swap_a_held_seat_is_still_taken_and_a_free_seat_is_a_plain_move() {
    let mut r = seated();
    let before = r.durable().clone();
    let plain = serde_json::json!({"op":"seat.move","d":{"room":"r1","seat":5,"user":"t"}});
    let e = run(&mut r, "adm", plain, 1).unwrap_err();
    assert_eq!(e.code, ErrorCode::SeatTaken);
    assert_eq!(r.durable(), &before);
    // Asked to swap onto a free seat, the user just moves.
    let up = seat_updates(&run(&mut r, "adm", swap(Some("t"), 6), 1).unwrap().applied);
    let seen: Vec<_> = up
        .iter()
        .map(|e| (e.seat.index, e.seat.user.clone(), e.reason.as_deref()))
        .collect();
    assert_eq!(
        seen,
        vec![(2, None, Some("moved")), (6, Some(u("t")), Some("moved"))]
    );
}

#[test]
fn a_swap_needs_the_right_over_both_users() {
    let mut r = seated();
    r.durable.admins.push(u("adm2"));
    r.join(&u("adm2"), super::tests_rights::at(20), None, 0)
        .unwrap();
    r.durable.seats[0].user = Some(u("host"));
    r.durable.seats[1].user = Some(u("adm2"));
    let refused = [
        // A member may move only into a free seat.
        ("t", swap(None, 5)),
        // An admin moves neither the owner nor another admin out of their seat.
        ("adm", swap(Some("t"), 0)),
        ("adm", swap(Some("t"), 1)),
        ("adm", swap(Some("host"), 5)),
    ];
    for (who, d) in refused {
        let before = r.durable().clone();
        let e = run(&mut r, who, d.clone(), 1).unwrap_err();
        assert_eq!(e.code, ErrorCode::Forbidden, "{who}: {d}");
        assert_eq!(r.durable(), &before, "{who}: {d}");
    }
    // An admin may swap themselves with a member, and the owner anyone with anyone.
    r.durable.seats[7].user = Some(u("adm"));
    run(&mut r, "adm", swap(None, 2), 1).unwrap();
    assert_eq!(
        (r.seat_of(&u("adm")), r.seat_of(&u("t"))),
        (Some(2), Some(7))
    );
    run(&mut r, "host", swap(Some("adm2"), 0), 1).unwrap();
    assert_eq!(
        (r.seat_of(&u("adm2")), r.seat_of(&u("host"))),
        (Some(0), Some(1))
    );
}

#[test]
fn a_swap_keeps_the_host_seat_the_owners_and_refuses_locked_seats() {
    let mut r = seated();
    r.durable.host_seat = true;
    r.durable.seats[0].user = Some(u("host"));
    let before = r.durable().clone();
    // Neither direction may put someone else on seat 0.
    for (who, d) in [
        ("adm", swap(Some("t"), 0)),
        ("host", swap(None, 2)),
        ("host", swap(Some("t"), 0)),
    ] {
        let e = run(&mut r, who, d.clone(), 1).unwrap_err();
        assert_eq!(e.code, ErrorCode::Forbidden, "{who}: {d}");
        assert_eq!(r.durable(), &before, "{who}: {d}");
    }
    // A locked seat on either side refuses the swap.
    for locked in [2, 5] {
        let mut r = seated();
        r.durable.seats[locked].locked = true;
        let before = r.durable().clone();
        let e = run(&mut r, "adm", swap(Some("t"), 5), 1).unwrap_err();
        assert_eq!(e.code, ErrorCode::SeatLocked, "seat {locked} locked");
        assert_eq!(r.durable(), &before);
    }
}
