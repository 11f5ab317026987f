//! Planned moves: when the placement (ring weights, added or removed nodes, operator pins)
//! moves a room away from this shard, its runtime hands the room off — throttled to a
//! configurable number of rooms per second — instead of waiting for a lease to expire.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use protocol::{NodeId, RoomId};
use serde::Serialize;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::Inner;
use crate::metrics as m;
use crate::room::RoomMsg;

/// How long a handoff may take before it counts as failed (it may still finish; a failed
/// move is planned again while the placement still says so).
const HANDOFF_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the planner re-checks even without a placement change.
const PLAN_INTERVAL: Duration = Duration::from_secs(1);
/// Completed moves remembered for `GET /admin/rebalance`.
const RECENT_MOVES: usize = 100;

/// One completed, in-flight or planned move.
#[derive(Debug, Clone, Serialize)]
pub struct Move {
    /// The room.
    pub room: RoomId,
    /// Its new owner.
    pub to: NodeId,
    /// How long the old owner kept it stopped (done moves), in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub took_ms: Option<u64>,
}

/// The rebalance state of one shard, for the admin API.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RebalanceStatus {
    /// Moves waiting for their turn (throttle).
    pub planned: Vec<Move>,
    /// Moves started and not yet confirmed.
    pub in_flight: Vec<Move>,
    /// Moves completed since start.
    pub done: u64,
    /// Moves that timed out.
    pub failed: u64,
    /// The most recent completed moves.
    pub recent: Vec<Move>,
}

#[derive(Debug, Default)]
struct State {
    planned: VecDeque<(RoomId, NodeId)>,
    in_flight: HashMap<RoomId, Flight>,
    done: u64,
    failed: u64,
    recent: VecDeque<Move>,
}

/// A move started: the room's runtime (`generation`) was sent its handoff to `to`.
#[derive(Debug)]
struct Flight {
    to: NodeId,
    started: Instant,
    generation: u64,
}

/// The shard's planner of moves.
#[derive(Debug, Default)]
pub(crate) struct Rebalance {
    state: Mutex<State>,
    pub(crate) changed: Notify,
}

impl Rebalance {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A room finished its handoff.
    pub(crate) fn done(&self, room: &RoomId) {
        let mut st = self.lock();
        if let Some(f) = st.in_flight.remove(room) {
            st.done += 1;
            st.recent.push_back(Move {
                room: room.clone(),
                to: f.to,
                took_ms: Some(f.started.elapsed().as_millis() as u64),
            });
            while st.recent.len() > RECENT_MOVES {
                st.recent.pop_front();
            }
        }
        publish_gauges(&st);
    }

    /// Runtime `generation` of `room` stopped for another reason than the handoff it was sent
    /// (idle, lease lost, gone): the move ended with it, as the room is no longer here. Without
    /// this a drain would wait for the handoff's time-out.
    pub(crate) fn dropped(&self, room: &RoomId, generation: u64) {
        let mut st = self.lock();
        if st
            .in_flight
            .get(room)
            .is_some_and(|f| f.generation == generation)
        {
            st.in_flight.remove(room);
            publish_gauges(&st);
        }
    }

    /// How many moves were started and not yet confirmed (their handoff notices not yet
    /// queued to the gateways).
    pub(crate) fn in_flight(&self) -> usize {
        self.lock().in_flight.len()
    }

    /// The current state.
    pub(crate) fn status(&self) -> RebalanceStatus {
        let st = self.lock();
        RebalanceStatus {
            planned: st
                .planned
                .iter()
                .map(|(room, to)| Move {
                    room: room.clone(),
                    to: to.clone(),
                    took_ms: None,
                })
                .collect(),
            in_flight: st
                .in_flight
                .iter()
                .map(|(room, f)| Move {
                    room: room.clone(),
                    to: f.to.clone(),
                    took_ms: None,
                })
                .collect(),
            done: st.done,
            failed: st.failed,
            recent: st.recent.iter().cloned().collect(),
        }
    }
}

fn publish_gauges(st: &State) {
    metrics::gauge!(m::HANDOFFS, "state" => "planned").set(st.planned.len() as f64);
    metrics::gauge!(m::HANDOFFS, "state" => "in_flight").set(st.in_flight.len() as f64);
    metrics::gauge!(m::HANDOFFS, "state" => "done").set(st.done as f64);
    metrics::gauge!(m::HANDOFFS, "state" => "failed").set(st.failed as f64);
}

/// Plans and paces the moves of this shard's rooms until shutdown.
pub(crate) async fn run(inner: Arc<Inner>) {
    let pace = Duration::from_secs_f64(1.0 / f64::from(inner.config.handoff_rate_per_sec.max(1)));
    loop {
        let wait = if inner.rebalance.lock().planned.is_empty() {
            PLAN_INTERVAL
        } else {
            pace
        };
        tokio::select! {
            () = inner.shutdown.cancelled() => return,
            () = inner.rebalance.changed.notified() => {}
            () = tokio::time::sleep(wait) => {}
        }
        plan(&inner);
        start_next(&inner);
    }
}

/// Adds every running room the placement now puts elsewhere to the plan.
fn plan(inner: &Arc<Inner>) {
    let Some(placement) = inner.placement() else {
        return;
    };
    let rooms = inner.running_rooms();
    let mut st = inner.rebalance.lock();
    let now = Instant::now();
    let timed_out: Vec<RoomId> = st
        .in_flight
        .iter()
        .filter(|(_, f)| now.saturating_duration_since(f.started) > HANDOFF_TIMEOUT)
        .map(|(r, _)| r.clone())
        .collect();
    for r in timed_out {
        st.in_flight.remove(&r);
        st.failed += 1;
        warn!(room = %r, "Handoff timed out.");
    }
    let st = &mut *st;
    plan_moves(&mut st.planned, &st.in_flight, rooms, &inner.node, |r| {
        placement.owner(r)
    });
    publish_gauges(st);
}

/// Drops planned moves whose target changed, then queues every room of `rooms` that
/// `owner_of` puts on a node other than `me` and that is neither planned nor in flight.
/// Linear in rooms plus planned moves (a set of planned rooms, not a scan per room).
fn plan_moves<'p, V>(
    planned: &mut VecDeque<(RoomId, NodeId)>,
    in_flight: &HashMap<RoomId, V>,
    rooms: Vec<RoomId>,
    me: &NodeId,
    owner_of: impl Fn(&RoomId) -> Option<&'p NodeId>,
) {
    planned.retain(|(r, to)| owner_of(r) == Some(to));
    let mut queued: HashSet<RoomId> = planned.iter().map(|(r, _)| r.clone()).collect();
    for room in rooms {
        let Some(owner) = owner_of(&room) else {
            continue;
        };
        if owner == me || in_flight.contains_key(&room) {
            continue;
        }
        if queued.insert(room.clone()) {
            planned.push_back((room, owner.clone()));
        }
    }
}

/// Starts the next planned move (one per pace tick: the throttle).
fn start_next(inner: &Arc<Inner>) {
    let next = inner.rebalance.lock().planned.pop_front();
    let Some((room, to)) = next else { return };
    let Some(handle) = inner.room_handle(&room) else {
        return;
    };
    // In flight before the room can see the message: a handoff that finishes at once finds
    // its entry (and a drain waiting for it does not stop the node first).
    inner.rebalance.lock().in_flight.insert(
        room.clone(),
        Flight {
            to: to.clone(),
            started: Instant::now(),
            generation: handle.generation,
        },
    );
    match handle.tx.try_send(Box::new(RoomMsg::Handoff(to.clone()))) {
        Ok(()) => {
            info!(%room, %to, "Handing the room off.");
            publish_gauges(&inner.rebalance.lock());
        }
        Err(_) => {
            // A full inbox: try again on the next tick.
            let mut st = inner.rebalance.lock();
            st.in_flight.remove(&room);
            st.planned.push_back((room, to));
        }
    }
}

#[cfg(test)]
mod tests;
