//! Chorus client side: the typed client, the load generator and the cluster harness.
//!
//! # Layout
//! - [`cluster`]: real `redis-server` and node processes on free ports, killed on drop.

pub mod cluster;
