//! Chorus client side: the typed client, the load generator and the cluster harness.
//!
//! # Layout
//! - [`admin`]: a client of the admin HTTP API.
//! - [`client`]: the typed client (delivery tracking per room).
//! - [`cluster`]: real `redis-server` and node processes on free ports, killed on drop.

pub mod admin;
pub mod client;
pub mod cluster;
