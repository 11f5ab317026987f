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

/// The files in a crate's `tests` directory that `tests/main.rs` does not declare as a module.
/// A crate's integration tests are one binary (`autotests = false`, one `[[test]]` at
/// `tests/main.rs`), so a file without its `mod` line there would never be built or run.
///
/// # Errors
/// The directory or `main.rs` cannot be read.
pub fn undeclared_test_files(tests: &std::path::Path) -> std::io::Result<Vec<String>> {
    let main = std::fs::read_to_string(tests.join("main.rs"))?;
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(tests)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let Some(module) = name.strip_suffix(".rs") else {
            continue;
        };
        if module != "main" && !main.lines().any(|l| l == format!("mod {module};")) {
            missing.push(name);
        }
    }
    missing.sort();
    Ok(missing)
}
