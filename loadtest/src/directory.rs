//! `chorus-loadtest directory`: whether listing the room directory stays flat from a few rooms
//! to very many.
//!
//! A real cluster (one `redis-server`, one shard, one gateway; [`Cluster`]) with the gateway's
//! page cache off (`directory_cache_ms = 0`, so every call reads Redis). For each size (100
//! and 100,000 by default) the directory is filled through its own API
//! ([`DirectoryStore::publish`], as shards publish: batches of one pipeline) with summaries
//! owned by a `fill` node that is kept alive meanwhile; then one client times `room.list` over
//! its WebSocket, `calls` sequential calls per case:
//!
//! - `first`: the first page (20 rooms, by score);
//! - `region`: the first page of one region's rooms;
//! - `deep`: a page at 90 % of the ranking (cursor `r<0.9·n>`);
//! - `search`: the first page of a title search.
//!
//! The report gives p50/p99 per case and size and the ratios of the largest size to the
//! smallest; the run holds (`ok`) when every p50 ratio is at most [`FLAT_RATIO`].

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use protocol::client::RoomEntry;
use protocol::{NodeId, RoomId};
use serde::Serialize;
use serde_json::{Value, json};
use storage::directory::{DirectoryStore, Update};
use tokio::time::Instant;

use crate::cluster::{Cluster, ClusterOptions};

/// Largest p50 ratio (largest size / smallest) that still counts as flat.
pub const FLAT_RATIO: f64 = 2.0;
/// Summaries per publish (one pipeline), as a shard's publisher batches.
const FILL_BATCH: usize = 2000;
/// Regions the summaries are spread over.
const REGIONS: [&str; 4] = ["eu", "us", "asia", "sa"];
/// Page size of every call.
const PAGE: u32 = 20;

/// `chorus-loadtest directory` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Directory sizes to measure, smallest first.
    #[arg(long, value_delimiter = ',', default_value = "100,100000")]
    pub sizes: Vec<usize>,
    /// Timed calls per case and size.
    #[arg(long, default_value_t = 500)]
    pub calls: usize,
    /// Pin the cluster's processes (Redis included) to CPU 0 (run the generator with
    /// `taskset -c 1`).
    #[arg(long)]
    pub pin: bool,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// The timings of one case at one size, microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct CaseTiming {
    /// The case (`first`, `region`, `deep`, `search`).
    pub case: &'static str,
    /// Rooms in the directory.
    pub rooms: usize,
    /// Median call time, µs.
    pub p50_us: u64,
    /// 99th percentile call time, µs.
    pub p99_us: u64,
    /// Rooms the last page held.
    pub page_rooms: usize,
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct DirectoryReport {
    /// Timed calls per case and size.
    pub calls: usize,
    /// Every case at every size.
    pub timings: Vec<CaseTiming>,
    /// Per case: p50 and p99 ratios, largest size over smallest.
    pub ratios: Vec<(String, f64, f64)>,
    /// Seconds to fill each size.
    pub fill_s: Vec<(usize, f64)>,
    /// Whether every p50 ratio is at most [`FLAT_RATIO`].
    pub ok: bool,
}

fn entry(i: usize) -> RoomEntry {
    // Varied scores (members 0..=500, some gift heat) so the ranking is a real one.
    let members = ((i * 7919) % 501) as u64;
    RoomEntry {
        room: RoomId::from(format!("d{i:07}")),
        title: format!("Room {i} party"),
        owner: format!("host{i}").as_str().into(),
        members,
        seated: (i % 9) as u32,
        score: members as f64 + (i % 13) as f64 / 10.0,
        robots: i.is_multiple_of(17),
        locked: i.is_multiple_of(23),
        region: Some(REGIONS[i % REGIONS.len()].to_owned()),
        pinned: false,
        pk: false,
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Fills the directory with `n` summaries owned by `node`.
async fn fill(store: &DirectoryStore, node: &NodeId, n: usize) -> anyhow::Result<()> {
    let mut batch = Vec::with_capacity(FILL_BATCH);
    for i in 0..n {
        batch.push(Update::Put(entry(i)));
        if batch.len() == FILL_BATCH {
            store.publish(node, now_ms(), &batch).await?;
            batch.clear();
        }
    }
    store.publish(node, now_ms(), &batch).await?;
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_micros() as u64
}

/// Runs the benchmark. The cluster is gone when this returns.
///
/// # Errors
/// The cluster does not start, Redis or a call fails.
pub async fn run(o: &Options) -> anyhow::Result<DirectoryReport> {
    anyhow::ensure!(!o.sizes.is_empty() && o.calls > 0, "sizes and calls");
    let dir = tempfile::tempdir()?;
    let toml = dir.path().join("chorus.toml");
    std::fs::write(
        &toml,
        "directory_cache_ms = 0\nrate_per_sec = 1000000\nrate_burst = 1000000\n",
    )?;
    let cluster = Cluster::start(ClusterOptions {
        shards: 1,
        gateways: 1,
        env: vec![
            ("CHORUS_CONFIG".into(), toml.display().to_string()),
            ("CHORUS_LOG".into(), "warn".into()),
        ],
        ..ClusterOptions::default()
    })
    .await
    .context("starting the cluster (redis-server, one shard, one gateway)")?;
    if o.pin {
        let mut pids: Vec<u32> = cluster.shards.iter().map(|s| s.node.pid()).collect();
        pids.extend(cluster.gateways.iter().map(|g| g.node.pid()));
        pids.extend(cluster.redis.pid());
        for p in pids {
            crate::target::pin_pid(p)?;
        }
    }
    let redis = storage::redis::Redis::connect(&cluster.redis.url()).await?;
    let store = DirectoryStore::redis(&redis);
    let node = NodeId::from("fill");
    // The fill node stays alive while it is measured, as a live shard would.
    let keep = {
        let (store, node) = (store.clone(), node.clone());
        tokio::spawn(async move {
            loop {
                let _ = store.publish(&node, now_ms(), &[]).await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let mut client = cluster.connect(0, "lister").await?;
    let mut report = DirectoryReport {
        calls: o.calls,
        timings: Vec::new(),
        ratios: Vec::new(),
        fill_s: Vec::new(),
        ok: true,
    };
    let result: anyhow::Result<()> = async {
        for &n in &o.sizes {
            store.purge_node(&node).await?;
            let started = Instant::now();
            fill(&store, &node, n).await?;
            report.fill_s.push((n, started.elapsed().as_secs_f64()));
            let deep = format!("r{}", n * 9 / 10);
            let cases: [(&'static str, Value); 4] = [
                ("first", json!({"limit": PAGE})),
                ("region", json!({"limit": PAGE, "region": "eu"})),
                ("deep", json!({"limit": PAGE, "cursor": deep})),
                ("search", json!({"limit": PAGE, "query": "room 1"})),
            ];
            for (case, d) in cases {
                // Warm-up: connections, scripts, caches of the first call.
                for _ in 0..10 {
                    client.request("room.list", d.clone()).await?;
                }
                let mut took = Vec::with_capacity(o.calls);
                let mut page_rooms = 0;
                for _ in 0..o.calls {
                    let t = Instant::now();
                    let page = client.request("room.list", d.clone()).await?;
                    took.push(t.elapsed());
                    page_rooms = page["rooms"].as_array().map_or(0, Vec::len);
                }
                anyhow::ensure!(page_rooms > 0, "{case} at {n} rooms listed nothing");
                took.sort();
                report.timings.push(CaseTiming {
                    case,
                    rooms: n,
                    p50_us: percentile(&took, 0.5),
                    p99_us: percentile(&took, 0.99),
                    page_rooms,
                });
            }
        }
        Ok(())
    }
    .await;
    keep.abort();
    result?;
    if let (Some(&small), Some(&large)) = (o.sizes.first(), o.sizes.last()) {
        for case in ["first", "region", "deep", "search"] {
            let at = |n: usize| {
                report
                    .timings
                    .iter()
                    .find(|t| t.case == case && t.rooms == n)
            };
            if let (Some(a), Some(b)) = (at(small), at(large)) {
                let r50 = b.p50_us as f64 / a.p50_us.max(1) as f64;
                let r99 = b.p99_us as f64 / a.p99_us.max(1) as f64;
                report.ok &= r50 <= FLAT_RATIO;
                report.ratios.push((case.to_owned(), r50, r99));
            }
        }
    }
    Ok(report)
}

/// The report as text.
pub fn text(r: &DirectoryReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "room.list, {} calls per case (µs)", r.calls);
    let _ = writeln!(
        s,
        "{:<8} {:>8} {:>8} {:>8} {:>6}",
        "case", "rooms", "p50", "p99", "page"
    );
    for t in &r.timings {
        let _ = writeln!(
            s,
            "{:<8} {:>8} {:>8} {:>8} {:>6}",
            t.case, t.rooms, t.p50_us, t.p99_us, t.page_rooms
        );
    }
    for (case, r50, r99) in &r.ratios {
        let _ = writeln!(s, "ratio {case}: p50 ×{r50:.2}, p99 ×{r99:.2}");
    }
    for (n, secs) in &r.fill_s {
        let _ = writeln!(s, "fill {n} rooms: {secs:.2} s");
    }
    let _ = writeln!(s, "verdict: {}", if r.ok { "flat" } else { "NOT flat" });
    s
}
