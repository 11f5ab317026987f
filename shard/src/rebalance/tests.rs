use super::*;

/// The planner as it was before `plan_moves`: one scan of the plan per running room.
fn plan_moves_by_scan<'p>(
    planned: &mut VecDeque<(RoomId, NodeId)>,
    in_flight: &HashMap<RoomId, (NodeId, Instant)>,
    rooms: Vec<RoomId>,
    me: &NodeId,
    owner_of: impl Fn(&RoomId) -> Option<&'p NodeId>,
) {
    planned.retain(|(r, to)| owner_of(r) == Some(to));
    for room in rooms {
        let Some(owner) = owner_of(&room) else {
            continue;
        };
        if owner == me || in_flight.contains_key(&room) {
            continue;
        }
        if !planned.iter().any(|(r, _)| *r == room) {
            planned.push_back((room, owner.clone()));
        }
    }
}

/// A small seeded generator (xorshift64), so every run draws the same inputs.
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn the_linear_planner_decides_like_the_scanning_one_on_random_inputs() {
    let nodes: Vec<NodeId> = ["a", "b", "c", "d"].into_iter().map(NodeId::from).collect();
    let me = nodes[0].clone();
    let mut draw = Draw(0x9e37_79b9_7f4a_7c15);
    for _ in 0..500 {
        let universe = 1 + draw.below(60);
        let room = |i: u64| RoomId::from(format!("r{i}").as_str());
        let mut owners: HashMap<RoomId, NodeId> = HashMap::new();
        for i in 0..universe {
            // Some rooms have no owner at all (an empty ring).
            if draw.below(10) != 0 {
                owners.insert(room(i), nodes[draw.below(4) as usize].clone());
            }
        }
        let mut planned = VecDeque::new();
        for _ in 0..draw.below(20) {
            let to = nodes[draw.below(4) as usize].clone();
            planned.push_back((room(draw.below(universe)), to));
        }
        let mut in_flight = HashMap::new();
        for _ in 0..draw.below(10) {
            in_flight.insert(
                room(draw.below(universe)),
                (nodes[1].clone(), Instant::now()),
            );
        }
        // Running rooms, duplicates included, in a random order.
        let rooms: Vec<RoomId> = (0..draw.below(80))
            .map(|_| room(draw.below(universe)))
            .collect();
        let mut old = planned.clone();
        plan_moves_by_scan(&mut old, &in_flight, rooms.clone(), &me, |r| owners.get(r));
        let mut new = planned;
        plan_moves(&mut new, &in_flight, rooms, &me, |r| owners.get(r));
        assert_eq!(old, new);
    }
}

#[test]
fn two_hundred_thousand_rooms_leaving_are_each_planned_once_in_order() {
    const ROOMS: usize = 200_000;
    let me = NodeId::from("a");
    let other = NodeId::from("b");
    let rooms: Vec<RoomId> = (0..ROOMS)
        .map(|i| RoomId::from(format!("r{i}").as_str()))
        .collect();
    let mut planned = VecDeque::new();
    // Planning twice (a second tick) must not queue any room again.
    for _ in 0..2 {
        plan_moves(
            &mut planned,
            &HashMap::<RoomId, ()>::new(),
            rooms.clone(),
            &me,
            |_| Some(&other),
        );
    }
    assert_eq!(planned.len(), ROOMS);
    assert!(
        planned
            .iter()
            .zip(&rooms)
            .all(|((r, to), want)| r == want && *to == other)
    );
}

/// A handoff sent to a runtime that then stopped for another reason (idle, lease lost,
/// refused) ends with that runtime, so a drain does not wait for the handoff's time-out; a
/// later runtime of the same room keeps the handoff sent to it.
#[test]
fn a_handoff_ends_with_the_runtime_it_was_sent_to() {
    let r = Rebalance::default();
    let room = RoomId::from("r1");
    let flight = |generation: u64| Flight {
        to: NodeId::from("s2"),
        started: Instant::now(),
        generation,
    };
    r.lock().in_flight.insert(room.clone(), flight(7));
    r.dropped(&room, 6);
    assert_eq!(
        r.in_flight(),
        1,
        "an older runtime's stop keeps the newer one's move"
    );
    r.dropped(&room, 7);
    assert_eq!(r.in_flight(), 0);
    assert_eq!((r.status().done, r.status().failed), (0, 0));
}
