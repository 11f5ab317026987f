//! Gift throughput of the ledger engines under concurrency, by hand in release (not a
//! pass/fail timing test: run it and read the figure):
//!
//! `cargo test --release -p storage --test it -- --ignored --nocapture ledger_bench::postgres_gift_throughput`
//!
//! Kept apart from the conformance suite (`ledger_conformance.rs`), which checks what every
//! engine must do; this measures how fast two of them do it.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use protocol::UserId;
use storage::ledger::GiftOutcome;

use crate::support::ledger as fixture;
use fixture::{Fixture, postgres, sqlite};

/// Durable SQLite throughput under concurrency (group commit). Not a pass/fail timing test:
/// run it by hand and read the figure:
/// `cargo test --release -p storage --test it -- --ignored --nocapture ledger_bench::sqlite_gift_throughput`
/// Request ids are `b<i>` strings (v5 gift ids, random in the saga index) unless
/// `CHORUS_BENCH_REQ_IDS` is `uuid7` (time-ordered ids) or `uuid4`; `CHORUS_BENCH_IN_FLIGHT`
/// sets the gifts in flight (default 2,048) and `CHORUS_BENCH_GIFTS_PER_SENDER` the gifts per
/// each of the 1,000 senders (default 100).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by hand with --release"]
async fn sqlite_gift_throughput() {
    gift_throughput(sqlite().await, "sqlite").await;
}

/// [`sqlite_gift_throughput`] on a throwaway PostgreSQL server with its default durability
/// (`synchronous_commit = on`, `fsync = on`), on the same machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by hand with --release"]
async fn postgres_gift_throughput() {
    gift_throughput(postgres().await, "postgres").await;
}

/// `name` from the environment as a number, or `default`.
fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn gift_throughput(f: Fixture, engine: &str) {
    const SENDERS: usize = 1_000;
    let gifts_per_sender = env_usize("CHORUS_BENCH_GIFTS_PER_SENDER", 100);
    let in_flight = env_usize("CHORUS_BENCH_IN_FLIGHT", 2_048);
    let room = f.room("bench");
    let host = f.user("host");
    let senders: Vec<UserId> = (0..SENDERS).map(|i| f.user(&format!("s{i}"))).collect();
    for s in &senders {
        f.ledger.grant(s, 1_000_000, "seed").await.unwrap();
    }
    // Orders are built before the clock starts: the figure is the ledger's, not the harness's.
    let req_ids = std::env::var("CHORUS_BENCH_REQ_IDS").unwrap_or_default();
    let mut orders = Vec::with_capacity(SENDERS * gifts_per_sender);
    for i in 0..gifts_per_sender {
        for s in &senders {
            let req = match req_ids.as_str() {
                "uuid7" => uuid::Uuid::now_v7().to_string(),
                "uuid4" => uuid::Uuid::new_v4().to_string(),
                _ => format!("b{i}"),
            };
            let o = f.order(s, &req, &room, 3, std::slice::from_ref(&host));
            orders.push(o);
        }
    }
    let ledger = Arc::new(f.ledger.clone());
    let permits = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let cpu_before = kit::procfs::cpu_ms(&[std::process::id()]);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(orders.len());
    for o in orders {
        let ledger = Arc::clone(&ledger);
        let permit = Arc::clone(&permits).acquire_owned().await.unwrap();
        tasks.push(tokio::spawn(async move {
            // A reply's latency from when its gift got a place in flight.
            let sent = tokio::time::Instant::now();
            let out = ledger.send_gift(&o, 1).await;
            drop(permit);
            (out, sent.elapsed())
        }));
    }
    let mut settled = 0usize;
    let mut latencies = Vec::with_capacity(tasks.len());
    for t in tasks {
        let (out, took) = t.await.unwrap();
        latencies.push(took);
        if matches!(out.unwrap(), GiftOutcome::Settled { .. }) {
            settled += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let p99 = latencies[latencies.len() * 99 / 100].as_secs_f64() * 1e3;
    // The whole test process: the writer and checkpointer threads plus the callers' tasks.
    let cpu_us_per_gift = match (cpu_before, kit::procfs::cpu_ms(&[std::process::id()])) {
        (Some(a), Some(b)) => format!("{:.1}", (b - a) * 1000.0 / settled as f64),
        _ => "?".into(),
    };
    println!(
        "{engine} ledger: {settled} settled gifts in {secs:.2} s = {:.0} gifts/s (durable, {in_flight} in flight, req ids {req_ids:?}), reply p99 {p99:.1} ms, process cpu {cpu_us_per_gift} us/gift",
        settled as f64 / secs
    );
    assert_eq!(settled, SENDERS * gifts_per_sender);
    assert!(f.ledger.audit_totals().await.unwrap().is_conserved());
}
