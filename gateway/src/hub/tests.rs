use super::*;

fn outbox() -> Arc<Outbox> {
    let far = crate::outbox::unix_ms() / 1000 + 3600;
    Arc::new(Outbox::new(16, 1 << 20, far))
}

/// Applies a join's reply; returns the rooms the session left by it.
fn joined(hub: &Hub, session: SessionId, user: &str, room: &str, via: &NodeId) -> Vec<RoomId> {
    joined_req(hub, session, session, user, room, via)
}

fn joined_req(
    hub: &Hub,
    req: u64,
    session: SessionId,
    user: &str,
    room: &str,
    via: &NodeId,
) -> Vec<RoomId> {
    let ok = Ok(Bytes::from_static(b"{}"));
    reply(
        hub,
        via,
        req,
        (session, user),
        room,
        Some(Membership::Joined),
        ok,
    )
}

/// Applies a reply to request `req` of `session` (of `user`); returns the rooms the
/// session left by it.
fn reply(
    hub: &Hub,
    via: &NodeId,
    req: u64,
    (session, user): (SessionId, &str),
    room: &str,
    membership: Option<Membership>,
    outcome: Result<Bytes, protocol::link::ReplyError>,
) -> Vec<RoomId> {
    let follow = hub.apply(
        via,
        ToGateway::Reply(Reply {
            req,
            session,
            user: UserId::from(user),
            client_id: None,
            room: RoomId::from(room),
            membership,
            outcome,
        }),
    );
    follow.leaves.into_iter().map(|l| l.room).collect()
}

fn event(hub: &Hub, room: &str, via: &NodeId, audience: Audience, frame: &'static str) {
    hub.apply(
        via,
        ToGateway::Event(RoomEvent {
            room: RoomId::from(room),
            audience,
            position: Some((1, 1)),
            frame: Bytes::from_static(frame.as_bytes()),
        }),
    );
}

fn drained(o: &Outbox) -> Vec<String> {
    std::iter::from_fn(|| o.try_recv().map(|f| f.as_str().to_owned())).collect()
}

#[test]
fn fan_out_reaches_each_member_once_and_a_closed_session_lets_go_of_its_outbox() {
    let hub = Hub::default();
    let via = NodeId::from("shard-1");
    let (a, b, c) = (outbox(), outbox(), outbox());
    hub.add(1, UserId::from("ann"), a.clone(), Arc::default(), 10);
    hub.add(2, UserId::from("bob"), b.clone(), Arc::default(), 10);
    hub.add(3, UserId::from("cy"), c.clone(), Arc::default(), 10);
    for (session, user, room) in [(1, "ann", "r1"), (2, "bob", "r1"), (3, "cy", "r2")] {
        assert!(joined(&hub, session, user, room, &via).is_empty());
    }

    event(&hub, "r1", &via, Audience::All, "all");
    event(&hub, "r1", &via, Audience::AllBut(1), "but-ann");
    event(&hub, "r1", &NodeId::from("shard-2"), Audience::All, "stale");
    assert_eq!(drained(&a), ["all"]);
    assert_eq!(drained(&b), ["all", "but-ann"]);
    assert!(drained(&c).is_empty(), "another room's member");

    // Closing a session takes its outbox out of the room too: nothing in the hub keeps it.
    assert!(hub.remove(2).is_some());
    assert_eq!(Arc::strong_count(&b), 1);
    event(&hub, "r1", &via, Audience::All, "after");
    assert_eq!(drained(&a), ["after"]);
    assert!(drained(&b).is_empty());

    // So does switching rooms.
    assert_eq!(joined(&hub, 1, "ann", "r2", &via), [RoomId::from("r1")]);
    event(&hub, "r1", &via, Audience::All, "old room");
    event(&hub, "r2", &via, Audience::All, "new room");
    assert_eq!(drained(&a), ["new room"]);
    assert_eq!(drained(&c), ["new room"]);
}

/// Session 1 (ann) joined r1 through shard-1 with request 10.
fn ann_in_r1() -> (Hub, NodeId, Arc<Outbox>) {
    let hub = Hub::default();
    let via = NodeId::from("shard-1");
    let a = outbox();
    hub.add(1, UserId::from("ann"), a.clone(), Arc::default(), 10);
    assert!(joined_req(&hub, 10, 1, "ann", "r1", &via).is_empty());
    (hub, via, a)
}

#[test]
fn a_join_the_client_already_moved_on_from_does_not_move_the_session() {
    let (hub, via, a) = ann_in_r1();
    // The client asks for r2, then r1 again; r1's reply comes back first.
    hub.note_join(1, 11, &RoomId::from("r2"));
    hub.note_join(1, 12, &RoomId::from("r1"));
    assert!(joined_req(&hub, 12, 1, "ann", "r1", &via).is_empty());
    assert_eq!(
        joined_req(&hub, 11, 1, "ann", "r2", &via),
        [RoomId::from("r2")],
        "r2 lets the session go"
    );
    event(&hub, "r2", &via, Audience::All, "r2");
    event(&hub, "r1", &via, Audience::All, "r1");
    assert_eq!(drained(&a), ["r1"]);
}

#[test]
fn a_repeated_join_followed_by_another_leaves_only_through_the_later_reply() {
    let (hub, via, a) = ann_in_r1();
    hub.note_join(1, 11, &RoomId::from("r1"));
    hub.note_join(1, 12, &RoomId::from("r2"));
    // r1 again, superseded by r2: the session stays in r1 until r2's reply says otherwise
    // (had r2's join failed, it would simply stay).
    assert!(joined_req(&hub, 11, 1, "ann", "r1", &via).is_empty());
    event(&hub, "r1", &via, Audience::All, "still r1");
    assert_eq!(drained(&a), ["still r1"]);
    assert_eq!(
        joined_req(&hub, 12, 1, "ann", "r2", &via),
        [RoomId::from("r1")]
    );
    event(&hub, "r1", &via, Audience::All, "r1");
    event(&hub, "r2", &via, Audience::All, "r2");
    assert_eq!(drained(&a), ["r2"]);
}

#[test]
fn a_rejoin_right_after_a_leave_keeps_the_session_in_only_if_the_room_takes_it() {
    for refused in [false, true] {
        let (hub, via, a) = ann_in_r1();
        // The client leaves r1 (request 11) and joins it again (12) before either reply.
        hub.note_join(1, 12, &RoomId::from("r1"));
        let ok = || Ok(Bytes::from_static(b"{}"));
        let left = reply(
            &hub,
            &via,
            11,
            (1, "ann"),
            "r1",
            Some(Membership::Left),
            ok(),
        );
        assert!(left.is_empty());
        event(&hub, "r1", &via, Audience::All, "between");
        assert_eq!(drained(&a), ["between"], "kept in for the rejoin");
        if refused {
            let no = Err(protocol::link::ReplyError {
                code: protocol::ErrorCode::RoomLocked,
                msg: "wrong password".into(),
                owner_hint: None,
                outcome_unknown: false,
            });
            assert!(reply(&hub, &via, 12, (1, "ann"), "r1", None, no).is_empty());
        } else {
            assert!(joined_req(&hub, 12, 1, "ann", "r1", &via).is_empty());
        }
        event(&hub, "r1", &via, Audience::All, "after");
        let expected: &[&str] = if refused { &[] } else { &["after"] };
        assert_eq!(drained(&a), expected, "refused: {refused}");
    }
}

#[test]
fn taking_a_session_out_for_a_switch_elsewhere_tells_it_and_frees_its_place() {
    let (hub, via, a) = ann_in_r1();
    drained(&a);
    assert!(
        hub.take_out(1, &RoomId::from("r2"), LeaveReason::Switched)
            .is_none(),
        "not in r2: nothing to do"
    );
    let leave = hub
        .take_out(1, &RoomId::from("r1"), LeaveReason::Switched)
        .unwrap();
    assert_eq!(
        (leave.room.as_str(), leave.reason),
        ("r1", LeaveReason::Switched)
    );
    assert_eq!(
        drained(&a),
        [r#"{"ev":"room.left","d":{"room":"r1","reason":"switched"}}"#]
    );
    assert_eq!(hub.room_of(1), None);
    event(&hub, "r1", &via, Audience::All, "after");
    assert!(drained(&a).is_empty());
    assert_eq!(hub.sessions_of(&UserId::from("ann")).len(), 1);
    assert_eq!(hub.session_users(), [(1, UserId::from("ann"))]);
}

/// Applies an event of `room` from `via` at `position`; returns the rejoins it asks for.
fn event_at(
    hub: &Hub,
    room: &str,
    via: &NodeId,
    audience: Audience,
    position: Option<(Epoch, Seq)>,
) -> Vec<PendingRejoin> {
    hub.apply(
        via,
        ToGateway::Event(RoomEvent {
            room: RoomId::from(room),
            audience,
            position,
            frame: Bytes::from_static(b"{}"),
        }),
    )
    .rejoins
}

/// A handoff whose old owner gives no position rejoins the members from the last event the
/// gateway delivered from that shard: another shard's events do not count, and a room its
/// members all left forgets the position.
#[test]
fn a_move_without_a_position_rejoins_from_the_last_event_delivered_from_that_shard() {
    let (hub, via, _a) = ann_in_r1();
    let other = NodeId::from("shard-2");
    let moved = || Audience::Moved {
        sessions: vec![1],
        to: NodeId::from("shard-3"),
    };
    for seq in 1..=3 {
        assert!(event_at(&hub, "r1", &via, Audience::All, Some((7, seq))).is_empty());
    }
    assert!(event_at(&hub, "r1", &other, Audience::All, Some((9, 9))).is_empty());
    let rejoins = event_at(&hub, "r1", &via, moved(), None);
    assert_eq!(rejoins.len(), 1);
    assert_eq!(rejoins[0].since, Some((7, 3)));

    // The move took ann out; she joins again through shard-1, which has sent nothing since.
    assert!(joined(&hub, 1, "ann", "r1", &via).is_empty());
    let rejoins = event_at(&hub, "r1", &via, moved(), None);
    assert_eq!(rejoins.len(), 1);
    assert_eq!(rejoins[0].since, None);
}

/// The per-user cap closes the oldest connections past it, counting only those that hold a
/// place: one already told to close (here its token expired) is leaving and is not counted.
#[test]
fn the_cap_counts_only_connections_not_already_closing() {
    let hub = Hub::default();
    let ann = UserId::from("ann");
    let (a, b, c, d) = (outbox(), outbox(), outbox(), outbox());
    for (id, o) in [(1, &a), (2, &b), (3, &c)] {
        assert!(
            hub.add(id, ann.clone(), o.clone(), Arc::default(), 3)
                .is_empty()
        );
    }
    b.kick(crate::outbox::Kick::TokenExpired);
    // b is on its way out: a fourth connection fits in the cap of three.
    assert!(
        hub.add(4, ann.clone(), d.clone(), Arc::default(), 3)
            .is_empty()
    );
    // One more is past it: the oldest that holds a place goes (a), not the closing b.
    let e = outbox();
    let evicted = hub.add(5, ann, e, Arc::default(), 3);
    assert_eq!(evicted.len(), 1);
    assert!(Arc::ptr_eq(&evicted[0], &a));
}
