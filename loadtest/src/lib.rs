//! Chorus client side: the typed client, the load generator and the cluster harness.
//!
//! # Layout
//! - [`admin`]: a client of the admin HTTP API.
//! - [`client`]: the typed client (delivery tracking per room).
//! - [`cluster`]: real `redis-server` and node processes on free ports, killed on drop.
//! - [`load`]: lean load connections (reader and writer task per socket, latency against
//!   intended send times).
//! - [`scenario`]: the load scenarios (fanout, rooms, gifts, churn, idle, reconnect).
//! - [`baseline`]: the minimal room-broadcast server benchmarks compare against.
//! - [`target`]: what a run measures (spawned standalone, cluster or baseline, or given URLs).
//! - [`report`]: reports (table, JSON) and the SVG latency plot.
//! - [`procfs`]: server CPU and RSS from `/proc`.

pub mod admin;
pub mod baseline;
pub mod client;
pub mod cluster;
pub mod load;
pub mod procfs;
pub mod report;
pub mod scenario;
pub mod target;
