//! Consistent-hash placement of rooms on shards, identical on every node.
//!
//! The ring is a pure function of `(nodes, weights, vnodes_per_weight)`: every gateway and shard
//! that sees the same membership computes the same owner for every room, whatever order the
//! membership arrived in.
//!
//! # The function (stable across builds, platforms and languages)
//! - The hash is XXH3-64 with seed 0 (the standard `XXH3_64bits`), over raw bytes.
//! - A node with weight `w` gets `w * vnodes_per_weight` points (capped at
//!   [`MAX_VNODES_PER_NODE`]). Point `i` of node `n` is `XXH3(n ++ 0x00 ++ u32_le(i))`.
//! - Points are sorted by `(hash, node id)`, so a hash collision is broken by the node id.
//! - A room hashes to `XXH3(room id)`; its owner is the node of the first point whose hash is
//!   `>=` the room's, wrapping around to the first point.
//!
//! Adding a node (or raising a weight) only adds points, so rooms only move *to* the node that
//! gained points; removing a node (or lowering a weight) only moves the rooms that node held.

use std::collections::BTreeMap;

use crate::ids::{NodeId, RoomId};

/// Points per unit of weight by default: 160 is what ketama uses; it keeps each node's share
/// within a few percent of its weight's share while the ring stays small (160 × 16 B per node).
pub const DEFAULT_VNODES_PER_WEIGHT: u32 = 160;

/// Upper bound on the points one node gets, whatever its weight: bounds the ring's memory
/// (16 B per point, so 1 MiB per node) and build time against a mistyped weight.
pub const MAX_VNODES_PER_NODE: u32 = 65_536;

/// Separator between a node id and its point index in the hashed bytes. Ids never contain NUL
/// (see `ids::is_valid_id`), so `node ++ 0x00 ++ index` cannot collide across nodes.
const POINT_SEPARATOR: u8 = 0x00;

/// The placement ring for one membership version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ring {
    version: u64,
    /// Distinct nodes with their effective weights, sorted by id.
    nodes: Vec<(NodeId, u32)>,
    /// `(hash, index into nodes)`, sorted by hash then node id.
    points: Vec<(u64, u32)>,
}

impl Ring {
    /// Builds the ring for `nodes` (id, weight); input order does not matter.
    ///
    /// A node listed twice counts once, with the larger weight. A node with weight 0 is kept in
    /// [`Ring::nodes`] but owns nothing (a draining node).
    pub fn new(version: u64, nodes: &[(NodeId, u32)], vnodes_per_weight: u32) -> Self {
        let mut merged: BTreeMap<&NodeId, u32> = BTreeMap::new();
        for (id, weight) in nodes {
            let slot = merged.entry(id).or_insert(0);
            *slot = (*slot).max(*weight);
        }
        let nodes: Vec<(NodeId, u32)> = merged
            .into_iter()
            .map(|(id, weight)| (id.clone(), weight))
            .collect();

        let mut points = Vec::new();
        let mut buf = Vec::new();
        for (index, (id, weight)) in (0u32..).zip(nodes.iter()) {
            let count = weight
                .saturating_mul(vnodes_per_weight)
                .min(MAX_VNODES_PER_NODE);
            for i in 0..count {
                buf.clear();
                buf.extend_from_slice(id.as_str().as_bytes());
                buf.push(POINT_SEPARATOR);
                buf.extend_from_slice(&i.to_le_bytes());
                points.push((hash(&buf), index));
            }
        }
        // Node indexes follow id order, so sorting the pairs breaks hash ties by node id.
        points.sort_unstable();
        Self {
            version,
            nodes,
            points,
        }
    }

    /// The node that owns `room`, or `None` when no node has a positive weight.
    pub fn owner(&self, room: &RoomId) -> Option<&NodeId> {
        let first = self.points.first()?;
        let h = hash(room.as_str().as_bytes());
        let at = self.points.partition_point(|(p, _)| *p < h);
        let (_, index) = self.points.get(at).unwrap_or(first);
        self.nodes
            .get(usize::try_from(*index).ok()?)
            .map(|(id, _)| id)
    }

    /// The membership version this ring was built from.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The distinct nodes (sorted by id) with their weights, including weight-0 nodes.
    pub fn nodes(&self) -> &[(NodeId, u32)] {
        &self.nodes
    }

    /// Whether no node can own a room.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

/// The ring's hash: XXH3-64, seed 0.
fn hash(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOMS: usize = 10_000;
    /// Relative tolerance on a moved-room count: a node's share with 160 points deviates by
    /// roughly 1/sqrt(160) ≈ 8 %; 25 % leaves room for that without hiding a wrong function.
    const TOLERANCE: f64 = 0.25;

    fn nodes(ids: &[(&str, u32)]) -> Vec<(NodeId, u32)> {
        ids.iter().map(|(id, w)| (NodeId::from(*id), *w)).collect()
    }

    fn rooms() -> Vec<RoomId> {
        (0..ROOMS)
            .map(|i| RoomId::from(format!("room-{i}")))
            .collect()
    }

    fn owners(ring: &Ring, rooms: &[RoomId]) -> Vec<NodeId> {
        rooms
            .iter()
            .map(|r| ring.owner(r).expect("ring has nodes").clone())
            .collect()
    }

    fn assert_near(actual: usize, expected: f64) {
        let lo = expected * (1.0 - TOLERANCE);
        let hi = expected * (1.0 + TOLERANCE);
        let a = actual as f64;
        assert!(
            a >= lo && a <= hi,
            "{actual} not within {TOLERANCE} of {expected}"
        );
    }

    #[test]
    fn hash_is_standard_xxh3() {
        // Reference vector of XXH3_64bits (seed 0) for the empty input, from the xxHash repo.
        assert_eq!(hash(b""), 0x2D06_8005_38D3_94C2);
    }

    #[test]
    fn golden_owners() {
        let ring = Ring::new(
            7,
            &nodes(&[("s1", 1), ("s2", 1), ("s3", 2)]),
            DEFAULT_VNODES_PER_WEIGHT,
        );
        let got: Vec<(&str, String)> = GOLDEN
            .iter()
            .map(|(room, _)| {
                let owner = ring.owner(&RoomId::from(*room)).expect("non-empty");
                (*room, owner.as_str().to_owned())
            })
            .collect();
        let want: Vec<(&str, String)> = GOLDEN
            .iter()
            .map(|(room, owner)| (*room, (*owner).to_owned()))
            .collect();
        assert_eq!(got, want, "the placement function changed");
    }

    /// Owners for rooms on the ring {s1:1, s2:1, s3:2} with 160 points per weight.
    const GOLDEN: &[(&str, &str)] = &[
        ("r1", "s2"),
        ("r2", "s3"),
        ("r3", "s1"),
        ("lobby", "s3"),
        ("room-0", "s3"),
        ("room-1", "s2"),
        ("room-42", "s3"),
        ("room-9999", "s1"),
        ("a", "s3"),
        ("zz:top", "s3"),
    ];

    #[test]
    fn deterministic_regardless_of_input_order() {
        let a = Ring::new(1, &nodes(&[("s1", 1), ("s2", 3), ("s3", 2)]), 40);
        let b = Ring::new(1, &nodes(&[("s3", 2), ("s1", 1), ("s2", 3)]), 40);
        assert_eq!(a, b);
        let rooms = rooms();
        assert_eq!(owners(&a, &rooms), owners(&b, &rooms));
    }

    #[test]
    fn empty_and_zero_weight_rings_own_nothing() {
        let room = RoomId::from("r1");
        assert_eq!(Ring::new(1, &[], 160).owner(&room), None);
        let drained = Ring::new(1, &nodes(&[("s1", 0)]), 160);
        assert!(drained.is_empty());
        assert_eq!(drained.owner(&room), None);
        assert_eq!(drained.nodes().len(), 1);
        let one = Ring::new(1, &nodes(&[("s1", 0), ("s2", 1)]), 160);
        assert_eq!(one.owner(&room).map(NodeId::as_str), Some("s2"));
    }

    #[test]
    fn duplicates_count_once_with_the_larger_weight() {
        let a = Ring::new(1, &nodes(&[("s1", 1), ("s1", 2), ("s2", 1)]), 50);
        let b = Ring::new(1, &nodes(&[("s1", 2), ("s2", 1)]), 50);
        assert_eq!(a, b);
    }

    #[test]
    fn huge_weights_are_capped() {
        let ring = Ring::new(1, &nodes(&[("s1", u32::MAX)]), u32::MAX);
        assert_eq!(ring.points.len(), MAX_VNODES_PER_NODE as usize);
    }

    #[test]
    fn adding_a_node_moves_about_its_share_and_only_to_it() {
        let rooms = rooms();
        for n in [1usize, 3, 4, 8] {
            let mut members: Vec<(NodeId, u32)> = (1..=n)
                .map(|i| (NodeId::from(format!("s{i}")), 1))
                .collect();
            let before = owners(&Ring::new(1, &members, DEFAULT_VNODES_PER_WEIGHT), &rooms);
            let new = NodeId::from("s-new");
            members.push((new.clone(), 1));
            let after = owners(&Ring::new(2, &members, DEFAULT_VNODES_PER_WEIGHT), &rooms);
            let moved: Vec<usize> = (0..ROOMS).filter(|&i| before[i] != after[i]).collect();
            assert!(moved.iter().all(|&i| after[i] == new), "n={n}");
            assert_near(moved.len(), ROOMS as f64 / (n as f64 + 1.0));
        }
    }

    #[test]
    fn removing_a_node_moves_only_its_rooms() {
        let rooms = rooms();
        let all = nodes(&[("s1", 1), ("s2", 1), ("s3", 1), ("s4", 1), ("s5", 1)]);
        let before = owners(&Ring::new(1, &all, DEFAULT_VNODES_PER_WEIGHT), &rooms);
        let gone = NodeId::from("s3");
        let rest: Vec<(NodeId, u32)> = all.iter().filter(|(id, _)| *id != gone).cloned().collect();
        let after = owners(&Ring::new(2, &rest, DEFAULT_VNODES_PER_WEIGHT), &rooms);
        for i in 0..ROOMS {
            if before[i] == gone {
                assert_ne!(after[i], gone);
            } else {
                assert_eq!(before[i], after[i], "room {i} moved but its owner stayed");
            }
        }
        let held = before.iter().filter(|o| **o == gone).count();
        assert_near(held, ROOMS as f64 / 5.0);
    }

    #[test]
    fn doubling_a_weight_moves_rooms_in_proportion() {
        let rooms = rooms();
        let n = 4usize;
        let base = nodes(&[("s1", 1), ("s2", 1), ("s3", 1), ("s4", 1)]);
        let before = owners(&Ring::new(1, &base, DEFAULT_VNODES_PER_WEIGHT), &rooms);
        let heavy = NodeId::from("s2");
        let doubled: Vec<(NodeId, u32)> = base
            .iter()
            .map(|(id, w)| (id.clone(), if *id == heavy { 2 * w } else { *w }))
            .collect();
        let after = owners(&Ring::new(2, &doubled, DEFAULT_VNODES_PER_WEIGHT), &rooms);
        let moved: Vec<usize> = (0..ROOMS).filter(|&i| before[i] != after[i]).collect();
        assert!(moved.iter().all(|&i| after[i] == heavy));
        // Its share goes from 1/n to 2/(n+1).
        let expected = ROOMS as f64 * (2.0 / (n as f64 + 1.0) - 1.0 / n as f64);
        assert_near(moved.len(), expected);
        let share = after.iter().filter(|o| **o == heavy).count();
        assert_near(share, ROOMS as f64 * 2.0 / (n as f64 + 1.0));
    }
}

/// Where rooms go: the ring, plus rooms an operator pinned to a node (a manual move).
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    ring: Ring,
    pins: std::collections::HashMap<RoomId, NodeId>,
}

impl Placement {
    /// A placement of `ring` with `pins` (pins to nodes absent from the ring are ignored).
    pub fn new(ring: Ring, pins: impl IntoIterator<Item = (RoomId, NodeId)>) -> Self {
        let live: std::collections::HashSet<&NodeId> =
            ring.nodes().iter().map(|(n, _)| n).collect();
        let pins = pins.into_iter().filter(|(_, n)| live.contains(n)).collect();
        Self { ring, pins }
    }

    /// The owner of `room`: its pin, else the ring's choice.
    pub fn owner(&self, room: &RoomId) -> Option<&NodeId> {
        self.pins.get(room).or_else(|| self.ring.owner(room))
    }

    /// The ring.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The pins in force.
    pub fn pins(&self) -> &std::collections::HashMap<RoomId, NodeId> {
        &self.pins
    }
}

#[cfg(test)]
mod placement_tests {
    use super::*;

    #[test]
    fn pins_win_over_the_ring_only_for_live_nodes() {
        let ring = Ring::new(1, &[(NodeId::from("a"), 1), (NodeId::from("b"), 1)], 64);
        let room = RoomId::from("r");
        let natural = ring.owner(&room).cloned().expect("non-empty ring");
        let other = if natural.as_str() == "a" {
            NodeId::from("b")
        } else {
            NodeId::from("a")
        };
        let p = Placement::new(ring.clone(), [(room.clone(), other.clone())]);
        assert_eq!(p.owner(&room), Some(&other));
        let p = Placement::new(ring, [(room.clone(), NodeId::from("gone"))]);
        assert_eq!(p.owner(&room), Some(&natural));
    }
}
