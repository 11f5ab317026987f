//! The robot reconcile: on every shard, at a fixed interval, make the robot runtimes here match
//! the stored configurations. An enabled robot room placed on this shard and not running is
//! loaded (its actor claims the lease, then starts the robots); a running one whose
//! configuration changed gets it; one whose configuration was disabled or deleted, or that is
//! placed elsewhere now, has its robots stopped. Runtimes start nowhere else than in their
//! room's actor after the claim, so a reconcile on a node that does not own a room can never
//! act for its robots: at worst its load finds the lease held and stops. A room whose robots
//! only visit it and that its load found gone is not loaded again under the same configuration.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use protocol::RoomId;
use tracing::warn;

use super::RobotConfig;
use crate::Inner;
use crate::room::RoomMsg;

/// Most robot rooms one pass loads: a node that starts tens of thousands of rooms at once
/// (after a restart, a drain elsewhere) would crowd its own lease renewals out with their
/// claims and first writes, and leases that miss their renewal stop their rooms, which the
/// next pass loads again: a restart storm. The rest wait for the next pass.
pub(crate) const LOADS_PER_PASS: usize = 2_000;

/// Runs the reconcile until the node shuts down.
pub(crate) async fn run(inner: Arc<Inner>) {
    // What each running room was last sent, so an unchanged configuration costs no message.
    let mut sent: HashMap<RoomId, Vec<u8>> = HashMap::new();
    loop {
        tokio::select! {
            () = inner.shutdown.cancelled() => return,
            () = tokio::time::sleep(inner.config.robot_reconcile) => {}
        }
        let configs = match inner.robots.list().await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "Could not list the robot configurations.");
                continue;
            }
        };
        let mut wanted: HashSet<RoomId> = HashSet::new();
        let mut loads = 0;
        for (room, bytes) in configs {
            let Ok(config) = RobotConfig::parse(&bytes) else {
                continue;
            };
            if !config.enabled || config.room != room || inner.placed_elsewhere(&room).is_some() {
                continue;
            }
            wanted.insert(room.clone());
            let changed_bytes = sent.get(&room) != Some(&bytes);
            let changed = !inner.robot_rooms_has(&room) || changed_bytes;
            match inner.room_handle(&room) {
                // Running without robots, or with another configuration: hand it over.
                Some(h) if changed => {
                    let handed = h.tx.try_send(Box::new(RoomMsg::Robots(Some(config))));
                    if handed.is_ok() {
                        sent.insert(room, bytes);
                    }
                }
                Some(_) => {}
                // Found with no room to visit under this very configuration: not again.
                None if !changed_bytes && inner.robot_roomless(&room) => {}
                // Not running: its load reads the configuration after the claim (a bounded
                // number per pass).
                None if loads < LOADS_PER_PASS => {
                    inner.set_robot_roomless(&room, false);
                    loads += usize::from(inner.load_room(&room));
                    sent.insert(room, bytes);
                }
                None => {}
            }
        }
        for room in inner.robot_rooms() {
            if !wanted.contains(&room)
                && let Some(h) = inner.room_handle(&room)
            {
                let _ = h.tx.try_send(Box::new(RoomMsg::Robots(None)));
            }
        }
        sent.retain(|room, _| wanted.contains(room));
        inner.robot_roomless_retain(&wanted);
    }
}
