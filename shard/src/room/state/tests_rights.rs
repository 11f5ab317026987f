//! The seat, management and moderation rules: the rights matrix, and each rule's timing and
//! events.

use super::durable::{Invite, MAX_INVITES};
use super::*;

pub(super) fn at(session: SessionId) -> SessionRef {
    SessionRef {
        gateway: NodeId::from("g1"),
        session,
    }
}

pub(super) fn u(s: &str) -> UserId {
    UserId::from(s)
}

pub(super) fn op(d: serde_json::Value) -> RoomOp {
    let frame = serde_json::json!({"id": 1, "op": d["op"], "d": d["d"]}).to_string();
    match client::decode_request(&frame).map(|r| r.op) {
        Ok(client::Op::Room(op)) => op,
        other => panic!("not a room op: {other:?}"),
    }
}

pub(super) const T: u64 = 10_000;

/// Users: `host` (owner), `adm` (admin), `mem` (member), `t` (member on seat 2), `req`
/// (member with a pending request), `lis` (listener). Apply mode, 8 seats.
pub(super) fn party() -> RoomState {
    let mut d = Durable::new(u("host"), "t".into(), 8, None).unwrap();
    d.seat_mode = client::SeatMode::Apply;
    d.admins.push(u("adm"));
    let mut r = RoomState::new(RoomId::from("r1"), d, 1, Rules::default());
    for (i, name) in ["host", "adm", "mem", "t", "req", "lis"].iter().enumerate() {
        r.join(&u(name), at(i as u64), None, 0).unwrap();
    }
    r.durable.seats[2].user = Some(u("t"));
    r.durable.seats[2].publishing = true;
    r.seat_request(&u("req"), None, 0).unwrap();
    r
}

pub(super) fn session(r: &RoomState, name: &str) -> SessionRef {
    r.member(&u(name)).cloned().unwrap_or_else(|| at(99))
}

pub(super) fn run(
    r: &mut RoomState,
    who: &str,
    d: serde_json::Value,
    now: u64,
) -> Result<Outcome, Rejected> {
    let s = session(r, who);
    r.apply(&u(who), &s, &op(d), now)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    Ok,
    Forbidden,
}

#[test]
fn rights_matrix_owner_admin_member_for_every_privileged_op() {
    use Want::{Forbidden as F, Ok as O};
    let ops: Vec<(serde_json::Value, [Want; 3])> = vec![
        (
            serde_json::json!({"op":"seat.lock","d":{"room":"r1","seat":1,"locked":true}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"seat.lock_all","d":{"room":"r1","locked":true}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"seat.mute","d":{"room":"r1","seat":2,"muted":true}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"seat.kick","d":{"room":"r1","user":"t"}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"seat.count","d":{"room":"r1","seats":6}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"seat.move","d":{"room":"r1","seat":5,"user":"t"}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"seat.requests","d":{"room":"r1"}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"seat.approve","d":{"room":"r1","user":"req"}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"seat.reject","d":{"room":"r1","user":"req"}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"seat.invite","d":{"room":"r1","user":"lis"}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"room.update","d":{"room":"r1","title":"new"}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"room.lock","d":{"room":"r1","password":"pw"}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"room.admin","d":{"room":"r1","user":"t","admin":true}}),
            [O, F, F],
        ),
        (
            serde_json::json!({"op":"room.transfer","d":{"room":"r1","user":"t"}}),
            [O, F, F],
        ),
        (
            serde_json::json!({"op":"room.close","d":{"room":"r1"}}),
            [O, F, F],
        ),
        (
            serde_json::json!({"op":"room.open","d":{"room":"r1"}}),
            [O, F, F],
        ),
        (
            serde_json::json!({"op":"chat.mute","d":{"room":"r1","user":"t","seconds":60}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"chat.unmute","d":{"room":"r1","user":"t"}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"room.kick","d":{"room":"r1","user":"t"}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"room.ban","d":{"room":"r1","user":"t","seconds":60}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"room.unban","d":{"room":"r1","user":"t"}}),
            [O, O, F],
        ),
        (
            serde_json::json!({"op":"room.bans","d":{"room":"r1"}}),
            [O, O, F],
        ),
    ];
    for (d, wants) in ops {
        for (actor, want) in ["host", "adm", "mem"].into_iter().zip(wants) {
            let mut r = party();
            let before = r.durable().clone();
            let got = run(&mut r, actor, d.clone(), 1);
            match want {
                Want::Ok => assert!(got.is_ok(), "{actor} {d}: {got:?}"),
                Want::Forbidden => {
                    assert_eq!(got.unwrap_err().code, ErrorCode::Forbidden, "{actor} {d}");
                    assert_eq!(r.durable(), &before, "a refused {d} changed nothing");
                    assert_eq!(r.seq(), 0);
                }
            }
        }
        // A banned user is not in the room, and cannot join it.
        let mut r = party();
        run(
            &mut r,
            "host",
            serde_json::json!({"op":"room.ban","d":{"room":"r1","user":"mem"}}),
            1,
        )
        .unwrap();
        // (`room.open` needs no membership: it is the owner's, so FORBIDDEN.)
        let code = if d["op"] == "room.open" {
            ErrorCode::Forbidden
        } else {
            ErrorCode::NotInRoom
        };
        assert_eq!(run(&mut r, "mem", d.clone(), 2).unwrap_err().code, code);
        assert_eq!(
            r.join(&u("mem"), at(50), None, 2).unwrap_err().code,
            ErrorCode::Banned
        );
    }
}

#[test]
fn an_admin_cannot_act_on_the_owner_or_another_admin() {
    let mut r = party();
    r.durable.admins.push(u("adm2"));
    r.join(&u("adm2"), at(20), None, 0).unwrap();
    r.durable.seats[0].user = Some(u("host"));
    r.durable.seats[1].user = Some(u("adm2"));
    let on = |user: &str| {
        vec![
            serde_json::json!({"op":"seat.kick","d":{"room":"r1","user":user}}),
            serde_json::json!({"op":"chat.mute","d":{"room":"r1","user":user}}),
            serde_json::json!({"op":"room.kick","d":{"room":"r1","user":user}}),
            serde_json::json!({"op":"room.ban","d":{"room":"r1","user":user}}),
            serde_json::json!({"op":"seat.move","d":{"room":"r1","user":user,"seat":7}}),
        ]
    };
    for target in ["host", "adm2"] {
        for d in on(target) {
            let before = r.durable().clone();
            let e = run(&mut r, "adm", d.clone(), 1).unwrap_err();
            assert_eq!(e.code, ErrorCode::Forbidden, "adm on {target}: {d}");
            assert_eq!(r.durable(), &before);
        }
    }
    let mute = serde_json::json!({"op":"seat.mute","d":{"room":"r1","seat":0,"muted":true}});
    assert_eq!(
        run(&mut r, "adm", mute, 1).unwrap_err().code,
        ErrorCode::Forbidden
    );
    // The owner may act on an admin.
    run(
        &mut r,
        "host",
        serde_json::json!({"op":"seat.kick","d":{"room":"r1","user":"adm2"}}),
        1,
    )
    .unwrap();
    assert_eq!(r.seat_of(&u("adm2")), None);
}

#[test]
fn unknown_seats_users_and_requests_have_their_own_codes() {
    let mut r = party();
    let cases = [
        (
            serde_json::json!({"op":"seat.lock","d":{"room":"r1","seat":8,"locked":true}}),
            ErrorCode::NoSuchSeat,
        ),
        (
            serde_json::json!({"op":"seat.kick","d":{"room":"r1","user":"ghost"}}),
            ErrorCode::UserNotInRoom,
        ),
        (
            serde_json::json!({"op":"seat.kick","d":{"room":"r1","user":"lis"}}),
            ErrorCode::NotSeated,
        ),
        (
            serde_json::json!({"op":"seat.approve","d":{"room":"r1","user":"lis"}}),
            ErrorCode::NoSuchRequest,
        ),
        (
            serde_json::json!({"op":"seat.invite","d":{"room":"r1","user":"ghost"}}),
            ErrorCode::UserNotInRoom,
        ),
        (
            serde_json::json!({"op":"seat.invite","d":{"room":"r1","user":"lis","seat":2}}),
            ErrorCode::SeatTaken,
        ),
        (
            serde_json::json!({"op":"room.kick","d":{"room":"r1","user":"ghost"}}),
            ErrorCode::UserNotInRoom,
        ),
        (
            serde_json::json!({"op":"chat.mute","d":{"room":"r1","user":"t","seconds":0}}),
            ErrorCode::BadRequest,
        ),
        (
            serde_json::json!({"op":"seat.count","d":{"room":"r1","seats":21}}),
            ErrorCode::BadRequest,
        ),
        (
            serde_json::json!({"op":"room.admin","d":{"room":"r1","user":"ghost","admin":true}}),
            ErrorCode::UserNotInRoom,
        ),
    ];
    for (d, code) in cases {
        let before = r.durable().clone();
        assert_eq!(
            run(&mut r, "host", d.clone(), 1).unwrap_err().code,
            code,
            "{d}"
        );
        assert_eq!(r.durable(), &before, "{d}");
    }
    let accept = serde_json::json!({"op":"seat.invite.accept","d":{"room":"r1"}});
    assert_eq!(
        run(&mut r, "lis", accept, 1).unwrap_err().code,
        ErrorCode::NoSuchRequest
    );
    let cancel = serde_json::json!({"op":"seat.request.cancel","d":{"room":"r1"}});
    assert_eq!(
        run(&mut r, "lis", cancel, 1).unwrap_err().code,
        ErrorCode::NoSuchRequest
    );
}

pub(super) fn directs(a: &Applied) -> Vec<(Vec<String>, serde_json::Value)> {
    a.direct
        .iter()
        .map(|d| {
            let mut to: Vec<String> = d.to.iter().map(|u| u.as_str().to_owned()).collect();
            to.sort();
            (to, serde_json::from_slice(&d.frame).unwrap())
        })
        .collect()
}

pub(super) fn seat_updates(a: &Applied) -> Vec<SeatUpdate> {
    a.events
        .iter()
        .filter_map(|(_, e)| match e {
            Sequenced::SeatUpdate(s) => Some(s.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn apply_mode_requests_go_to_staff_and_the_first_answer_wins() {
    let mut r = party();
    // A member cannot take a seat directly; the request is announced to the staff only.
    let take = serde_json::json!({"op":"seat.take","d":{"room":"r1"}});
    assert_eq!(
        run(&mut r, "mem", take, 5).unwrap_err().code,
        ErrorCode::Forbidden
    );
    let out = run(
        &mut r,
        "mem",
        serde_json::json!({"op":"seat.request","d":{"room":"r1","seat":4}}),
        5,
    )
    .unwrap();
    assert_eq!(&out.ok[..], br#"{"expires_at":60005}"#);
    let d = directs(&out.applied);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].0, ["adm", "host"]);
    assert_eq!(d[0].1["ev"], "seat.request");
    assert_eq!(
        d[0].1["d"],
        serde_json::json!({"user":"mem","seat":4,"expires_at":60005})
    );
    assert!(d[0].1.get("seq").is_none(), "volatile");
    let list = run(
        &mut r,
        "adm",
        serde_json::json!({"op":"seat.requests","d":{"room":"r1"}}),
        6,
    )
    .unwrap();
    let list: serde_json::Value = serde_json::from_slice(&list.ok).unwrap();
    assert_eq!(
        list["requests"].as_array().unwrap().len(),
        2,
        "req and mem, oldest first"
    );
    assert_eq!(list["requests"][0]["user"], "req");
    // The admin approves; the owner's approval of the same request then finds none.
    let ok = run(
        &mut r,
        "adm",
        serde_json::json!({"op":"seat.approve","d":{"room":"r1","user":"mem"}}),
        7,
    )
    .unwrap();
    assert_eq!(&ok.ok[..], br#"{"seat":4}"#);
    let up = seat_updates(&ok.applied);
    assert_eq!(up.len(), 1);
    assert_eq!(
        (up[0].seat.index, up[0].seat.user.clone()),
        (4, Some(u("mem")))
    );
    assert_eq!(
        (
            up[0].by.clone(),
            up[0].cause.as_str(),
            up[0].reason.as_deref()
        ),
        (Some(u("adm")), "admin", Some("approved"))
    );
    let d = directs(&ok.applied);
    assert_eq!(d[0].0, ["adm", "host", "mem"]);
    assert_eq!(
        d[0].1["d"],
        serde_json::json!({"user":"mem","state":"approved","by":"adm","seat":4})
    );
    let before = r.durable().clone();
    let second = run(
        &mut r,
        "host",
        serde_json::json!({"op":"seat.approve","d":{"room":"r1","user":"mem"}}),
        8,
    );
    assert_eq!(second.unwrap_err().code, ErrorCode::NoSuchRequest);
    let reject = run(
        &mut r,
        "host",
        serde_json::json!({"op":"seat.reject","d":{"room":"r1","user":"mem"}}),
        8,
    );
    assert_eq!(reject.unwrap_err().code, ErrorCode::NoSuchRequest);
    assert_eq!(r.durable(), &before);
    // Reject and cancel tell the staff (and the requester).
    let out = run(
        &mut r,
        "host",
        serde_json::json!({"op":"seat.reject","d":{"room":"r1","user":"req"}}),
        9,
    )
    .unwrap();
    assert_eq!(directs(&out.applied)[0].1["d"]["state"], "rejected");
    assert!(r.durable().requests.is_empty());
}

#[test]
fn requests_expire_with_an_event_and_late_answers_are_refused() {
    let mut r = party();
    let exp = Rules::default().request_ttl_ms;
    assert_eq!(r.next_deadline(), Some(exp));
    let approve = serde_json::json!({"op":"seat.approve","d":{"room":"r1","user":"req"}});
    // Due but not yet swept: refused as expired, nothing changes.
    assert_eq!(
        run(&mut r, "host", approve.clone(), exp).unwrap_err().code,
        ErrorCode::RequestExpired
    );
    let a = r.tick(exp);
    let d = directs(&a);
    assert_eq!(d[0].0, ["adm", "host", "req"]);
    assert_eq!(d[0].1["ev"], "seat.request.update");
    assert_eq!(
        d[0].1["d"],
        serde_json::json!({"user":"req","state":"expired"})
    );
    assert!(a.durable_changed);
    assert_eq!(
        run(&mut r, "host", approve, exp + 1).unwrap_err().code,
        ErrorCode::NoSuchRequest
    );
    assert_eq!(r.next_deadline(), None);
}

#[test]
fn invitations_are_accepted_in_time_or_refused_as_expired() {
    let mut r = party();
    let invite = serde_json::json!({"op":"seat.invite","d":{"room":"r1","user":"lis","seat":6}});
    let out = run(&mut r, "adm", invite.clone(), 100).unwrap();
    let d = directs(&out.applied);
    assert_eq!(d[0].0, ["lis"]);
    assert_eq!(
        d[0].1["d"],
        serde_json::json!({"user":"lis","by":"adm","seat":6,"expires_at":60100})
    );
    let accept = serde_json::json!({"op":"seat.invite.accept","d":{"room":"r1"}});
    // Accepted in time: seated on the seat offered, in apply mode, by the inviter's hand.
    let mut early = party();
    run(&mut early, "adm", invite, 100).unwrap();
    let ok = run(&mut early, "lis", accept.clone(), 60_099).unwrap();
    assert_eq!(&ok.ok[..], br#"{"seat":6}"#);
    let up = seat_updates(&ok.applied);
    assert_eq!(
        (up[0].by.clone(), up[0].reason.as_deref()),
        (Some(u("adm")), Some("invited"))
    );
    // Expired: the invitee and the staff are told; a late accept says so.
    let a = r.tick(60_100);
    let invite_ends: Vec<_> = directs(&a)
        .into_iter()
        .filter(|(_, f)| f["ev"] == "seat.invite.update")
        .collect();
    assert_eq!(invite_ends[0].0, ["adm", "host", "lis"]);
    assert_eq!(
        invite_ends[0].1["d"],
        serde_json::json!({"user":"lis","state":"expired","by":"adm"})
    );
    let before = r.durable().clone();
    assert_eq!(
        run(&mut r, "lis", accept.clone(), 60_200).unwrap_err().code,
        ErrorCode::RequestExpired
    );
    assert_eq!(r.durable(), &before);
    // The expired invitation is dropped after a while; then there is none.
    r.tick(60_100 + 10 * 60 * 1000);
    assert_eq!(
        run(&mut r, "lis", accept, 60_100 + 10 * 60 * 1000)
            .unwrap_err()
            .code,
        ErrorCode::NoSuchRequest
    );
}

/// Made an admin or the owner, a user's invitation ends (staff take seats directly), as their
/// request does.
#[test]
fn becoming_staff_or_the_owner_ends_an_invitation() {
    let invite = serde_json::json!({"op":"seat.invite","d":{"room":"r1","user":"lis"}});
    let accept = serde_json::json!({"op":"seat.invite.accept","d":{"room":"r1"}});
    for change in [
        serde_json::json!({"op":"room.admin","d":{"room":"r1","user":"lis","admin":true}}),
        serde_json::json!({"op":"room.transfer","d":{"room":"r1","user":"lis"}}),
    ] {
        let mut r = party();
        run(&mut r, "host", invite.clone(), 100).unwrap();
        run(&mut r, "host", change.clone(), 110).unwrap();
        assert!(r.durable().invites.is_empty(), "{change}");
        assert_eq!(
            run(&mut r, "lis", accept.clone(), 120).unwrap_err().code,
            ErrorCode::NoSuchRequest,
            "{change}"
        );
    }
}

/// With 100 invitations pending, a new one is refused for the cap before its seat is looked
/// at (the documented order), and the refusal changes nothing, not even the expired ones.
#[test]
fn the_invitation_cap_comes_before_the_seat_and_a_refusal_changes_nothing() {
    let mut r = party();
    for i in 0..MAX_INVITES {
        r.durable.invites.push(Invite {
            user: u(&format!("x{i}")),
            by: u("host"),
            seat: None,
            expires_at: u64::MAX,
            expired: i == 0,
        });
    }
    // One expired invitation makes room: the new one goes in, the expired one goes.
    let taken = serde_json::json!({"op":"seat.invite","d":{"room":"r1","user":"lis","seat":2}});
    assert_eq!(
        run(&mut r, "host", taken.clone(), 100).unwrap_err().code,
        ErrorCode::SeatTaken
    );
    r.durable.invites[0].expired = false;
    let before = r.durable().clone();
    assert_eq!(
        run(&mut r, "host", taken, 100).unwrap_err().code,
        ErrorCode::BadRequest
    );
    assert_eq!(r.durable(), &before);
}

/// The directory shows the owner's region: after a transfer, the new owner's.
#[test]
fn a_transfer_shows_the_new_owners_region() {
    let mut r = party();
    let region = |name: &str| {
        shared_profile(Some(Profile {
            region: Some(name.into()),
            ..Profile::default()
        }))
    };
    r.note_owner_region(&u("host"), Some("eu"));
    r.join_as(&u("us1"), at(30), None, region("us"), 0).unwrap();
    run(
        &mut r,
        "host",
        serde_json::json!({"op":"room.transfer","d":{"room":"r1","user":"us1"}}),
        1,
    )
    .unwrap();
    assert_eq!(r.durable().owner_region.as_deref(), Some("us"));
    // A new owner with no region known: none shown, not the old owner's.
    run(
        &mut r,
        "us1",
        serde_json::json!({"op":"room.transfer","d":{"room":"r1","user":"lis"}}),
        2,
    )
    .unwrap();
    assert_eq!(r.durable().owner_region.as_deref(), None);
}

/// The owner's ban of an admin takes the role away (`room.role` `member`, before the
/// `moderation` event): the admin leaves the cap, and an unban brings back a member, not staff.
#[test]
fn a_banned_admin_is_staff_no_more() {
    let mut r = party();
    for ban in [
        serde_json::json!({"op":"room.ban","d":{"room":"r1","user":"adm","seconds":60}}),
        serde_json::json!({"op":"room.kick","d":{"room":"r1","user":"adm","ban_seconds":60}}),
    ] {
        let mut r = party();
        let out = run(&mut r, "host", ban.clone(), 100).unwrap();
        assert!(r.durable().admins.is_empty(), "{ban}");
        let kinds: Vec<&str> = out
            .applied
            .events
            .iter()
            .map(|(_, e)| match e {
                Sequenced::Role(c) => {
                    assert_eq!((c.user.as_str(), c.role.as_str()), ("adm", "member"));
                    "role"
                }
                Sequenced::Moderation(_) => "moderation",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["role", "moderation"], "{ban}");
    }
    // A kick without a ban leaves the role: the admin may come back as staff.
    run(
        &mut r,
        "host",
        serde_json::json!({"op":"room.kick","d":{"room":"r1","user":"adm"}}),
        100,
    )
    .unwrap();
    assert_eq!(r.durable().admins, vec![u("adm")]);
    // Unbanned, a former admin is a member.
    run(
        &mut r,
        "host",
        serde_json::json!({"op":"room.ban","d":{"room":"r1","user":"adm"}}),
        200,
    )
    .unwrap();
    run(
        &mut r,
        "host",
        serde_json::json!({"op":"room.unban","d":{"room":"r1","user":"adm"}}),
        300,
    )
    .unwrap();
    r.join(&u("adm"), at(7), None, 400).unwrap();
    assert_eq!(r.role(&u("adm")), Role::Member);
}

/// An invitation is the inviter's act as staff: when the inviter stops being staff (the role
/// revoked, banned, or the owner who handed the room over), it is withdrawn, the invitee and
/// the staff are told, and it can no longer seat anyone.
#[test]
fn an_invitation_ends_when_its_inviter_is_staff_no_more() {
    let accept = serde_json::json!({"op":"seat.invite.accept","d":{"room":"r1"}});
    for (inviter, change) in [
        (
            "adm",
            serde_json::json!({"op":"room.admin","d":{"room":"r1","user":"adm","admin":false}}),
        ),
        (
            "adm",
            serde_json::json!({"op":"room.ban","d":{"room":"r1","user":"adm","seconds":60}}),
        ),
        (
            "host",
            serde_json::json!({"op":"room.transfer","d":{"room":"r1","user":"mem"}}),
        ),
    ] {
        let mut r = party();
        let invite = serde_json::json!({"op":"seat.invite","d":{"room":"r1","user":"lis"}});
        run(&mut r, inviter, invite, 100).unwrap();
        let out = run(&mut r, "host", change.clone(), 110).unwrap();
        assert!(r.durable().invites.is_empty(), "{change}");
        let told: Vec<_> = directs(&out.applied)
            .into_iter()
            .filter(|(_, f)| f["ev"] == "seat.invite.update")
            .collect();
        assert_eq!(told.len(), 1, "{change}");
        assert!(told[0].0.contains(&"lis".to_owned()), "{change}");
        assert_eq!(told[0].1["d"]["state"], "withdrawn", "{change}");
        assert_eq!(
            run(&mut r, "lis", accept.clone(), 120).unwrap_err().code,
            ErrorCode::NoSuchRequest,
            "{change}"
        );
        assert_eq!(r.seat_of(&u("lis")), None, "{change}");
    }
}

/// A request that ends because its user became staff or the owner is told to the staff as
/// cancelled, as when the requester leaves: no request stays on their list that no longer is.
#[test]
fn a_request_ended_by_a_role_change_is_told_to_the_staff() {
    for change in [
        serde_json::json!({"op":"room.admin","d":{"room":"r1","user":"req","admin":true}}),
        serde_json::json!({"op":"room.transfer","d":{"room":"r1","user":"req"}}),
    ] {
        let mut r = party();
        let out = run(&mut r, "host", change.clone(), 100).unwrap();
        assert!(r.durable().requests.is_empty(), "{change}");
        let told: Vec<_> = directs(&out.applied)
            .into_iter()
            .filter(|(_, f)| f["ev"] == "seat.request.update")
            .collect();
        assert_eq!(told.len(), 1, "{change}");
        assert!(told[0].0.contains(&"host".to_owned()), "{change}");
        assert_eq!(
            told[0].1["d"],
            serde_json::json!({"user":"req","state":"cancelled"}),
            "{change}"
        );
    }
}

/// An invitation that ends because its invitee became staff or the owner (who take seats
/// directly), or left the room, is told as cancelled: to the staff, and to the invitee while
/// present, so that no client keeps showing it pending.
#[test]
fn an_invitation_ended_by_a_role_change_or_a_leave_is_told() {
    let invite = serde_json::json!({"op":"seat.invite","d":{"room":"r1","user":"lis"}});
    for change in [
        Some(serde_json::json!({"op":"room.admin","d":{"room":"r1","user":"lis","admin":true}})),
        Some(serde_json::json!({"op":"room.transfer","d":{"room":"r1","user":"lis"}})),
        None,
    ] {
        let mut r = party();
        run(&mut r, "adm", invite.clone(), 100).unwrap();
        let applied = match &change {
            Some(c) => run(&mut r, "host", c.clone(), 110).unwrap().applied,
            None => {
                let at = session(&r, "lis");
                r.leave(&u("lis"), &at, "left").unwrap()
            }
        };
        assert!(r.durable().invites.is_empty(), "{change:?}");
        let told: Vec<_> = directs(&applied)
            .into_iter()
            .filter(|(_, f)| f["ev"] == "seat.invite.update")
            .collect();
        assert_eq!(told.len(), 1, "{change:?}");
        assert!(told[0].0.contains(&"host".to_owned()), "{change:?}");
        assert_eq!(
            told[0].1["d"],
            serde_json::json!({"user":"lis","state":"cancelled","by":"adm"}),
            "{change:?}"
        );
    }
}
