//! The Chorus test kit: what every test and the load generator use to talk to real processes.
//!
//! # Layout
//! - [`client`]: the typed WebSocket client (delivery tracking per room), and test tokens
//!   ([`token`]).
//! - [`admin`]: the admin HTTP client (calls, typed answers, metrics).
//! - [`redis`]: a real `redis-server` on a free port, killed on drop.
//! - [`postgres`]: a throwaway PostgreSQL server (initdb in a temp dir, a free port), shut down
//!   and removed on drop.
//! - [`node`]: real `chorus` node processes, free ports, readiness polls.
//! - [`cluster`]: a whole cluster (Redis, shards, gateways) started for a test.
//! - [`standalone`]: one standalone node process started for a test.
//! - [`procfs`]: process CPU and RSS from `/proc`.
//! - [`proxy`]: a TCP fault proxy (delay, drop, blackhole, half-open) between two processes.

pub mod admin;
pub mod client;
pub mod cluster;
pub mod hooks;
pub mod node;
pub mod postgres;
pub mod procfs;
pub mod proxy;
pub mod redis;
pub mod standalone;

pub use client::token;
