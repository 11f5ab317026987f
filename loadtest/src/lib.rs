//! Chorus client side: the typed client, the load generator and the cluster harness.
//!
//! # Layout
//! - [`admin`], [`client`], [`cluster`], [`node`], [`redis`], [`procfs`]: re-exported from the
//!   test kit (`kit`): the admin HTTP client, the typed client, and real processes.
//! - [`load`]: lean load connections (reader and writer task per socket, latency against
//!   intended send times).
//! - [`scenario`]: the load scenarios (fanout, rooms, gifts, churn, idle, reconnect).
//! - [`baseline`]: the minimal room-broadcast server benchmarks compare against.
//! - [`members`]: connect-to-first-list time of a big room (`chorus-loadtest member-list`).
//! - [`robots`]: robot rooms on one shard (`chorus-loadtest robots`): the start, the lease
//!   renewal round trips per tick, leases lost, CPU.
//! - [`directory`]: `room.list` latency at a small and a large room directory
//!   (`chorus-loadtest directory`).
//! - [`target`]: what a run measures (spawned standalone, cluster or baseline, or given URLs).
//! - [`report`]: reports (table, JSON) and the SVG latency plot.
//! - [`chaos`]: the chaos suite (`chorus-loadtest chaos`): faults from a seed against a real
//!   cluster, a recorded history, and the invariant checkers.

pub mod baseline;
pub mod chaos;
pub mod directory;
pub mod load;
pub mod members;
pub mod report;
pub mod robots;
pub mod scenario;
pub mod target;

pub use kit::{admin, client, cluster, node, procfs, redis};
