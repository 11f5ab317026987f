//! `chorus-loadtest robots`: how many robot rooms one shard runs at once, and what keeping
//! their leases costs.
//!
//! A real cluster (one `redis-server`, ONE shard, one gateway; [`Cluster`]) with a configurable
//! lease TTL and robot reconcile interval. `rooms` robot room configurations are written
//! straight into the cluster's robot store (`robots:configs`, [`RobotStore`]), each with
//! `robots` robots chatting one phrase every `chat_every_s` (no gifts: they need human
//! recipients). The shard's reconcile loads them; each room's actor claims its lease and starts
//! its robots. Measured from the shard's admin `/metrics` and `/proc`:
//!
//! - the time until all the robot runtimes started (`chorus_robot_runtime_starts_total` = N
//!   with all N running at once, `chorus_robot_rooms_running` = N; waited for at most
//!   `start_timeout`);
//! - over a `duration` window after that: the lease renewal round trips per renew tick
//!   (Δ`chorus_lease_renew_round_trips_total` / (window / (TTL/3))), leases renewed and lost,
//!   runtime starts beyond N (any is a change of owner), robot chat actions per second, shard
//!   and Redis CPU (Δ CPU seconds / window) and the shard's RSS.
//!
//! The run fails ([`RobotsReport::ok`] false) when not every runtime started or kept running,
//! when any lease was lost, or when any runtime started twice. All traffic is on 127.0.0.1.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::StreamExt as _;
use protocol::RoomId;
use serde::Serialize;
use storage::robots::RobotStore;
use tokio::time::Instant;

use crate::cluster::{Cluster, ClusterOptions};
use crate::{admin, procfs, target};

/// Runtime starts (counter; one per robot room and per change of owner).
const STARTS: &str = "chorus_robot_runtime_starts_total";
/// Rooms whose robots run (gauge).
const RUNNING: &str = "chorus_robot_rooms_running";
/// Rooms running on the shard, robot or not (gauge).
const ROOMS_RUNNING: &str = "chorus_shard_rooms_running";
/// Robot chat messages sent (counter).
const CHATS: &str = "chorus_robot_actions_total{kind=\"chat\"}";
/// Robot actions the room refused (counter).
const REFUSED: &str = "chorus_robot_actions_total{kind=\"refused\"}";
/// Renewal round trips (counter; one per renew tick for all the node's leases).
const ROUND_TRIPS: &str = "chorus_lease_renew_round_trips_total";
/// Leases renewed (counter; one per lease per tick).
const RENEWED: &str = "chorus_lease_renewed_total";
/// Leases lost or not proven in time (counter).
const LOST: &str = "chorus_lease_lost_total";
/// The node's CPU seconds (`metrics-process`), when `/proc` cannot be read.
const CPU_SECONDS: &str = "process_cpu_seconds_total";
/// The node's resident memory in bytes (`metrics-process`), when `/proc` cannot be read.
const RSS_BYTES: &str = "process_resident_memory_bytes";

/// The one phrase every robot says.
const PHRASE: &str = "la la la";
/// Configuration writes in flight.
const WRITE_CONCURRENCY: usize = 64;
/// Longest wait for one `/metrics` answer.
const METRICS_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the start is polled.
const START_POLL: Duration = Duration::from_millis(250);
/// How often progress is printed while waiting or measuring.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// The shortest chat interval a configuration may ask for, seconds (shard's `MIN_EVERY_S`).
const MIN_CHAT_EVERY_S: f64 = 0.2;
/// Most robots in one room (shard's `MAX_ROBOTS`).
const MAX_ROBOTS: usize = 20;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Robot rooms.
    pub rooms: usize,
    /// Robots per room (1..=20).
    pub robots: usize,
    /// Seconds between one robot's chat messages; 2×TTL when `None`.
    pub chat_every_s: Option<f64>,
    /// The shard's lease TTL.
    pub lease_ttl: Duration,
    /// The shard's robot reconcile interval (`robot_reconcile_ms`).
    pub reconcile: Duration,
    /// The measured window after every runtime started.
    pub duration: Duration,
    /// Longest wait for every runtime to start.
    pub start_timeout: Duration,
    /// Pin the cluster's processes (Redis included) to CPU 0.
    pub pin: bool,
    /// Print progress to stderr.
    pub progress: bool,
}

/// What a run measured. Counts come from the shard's Prometheus counters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RobotsReport {
    /// Robot rooms configured.
    pub rooms: usize,
    /// Robots per room.
    pub robots_per_room: usize,
    /// Seconds between one robot's chat messages.
    pub chat_every_s: f64,
    /// The shard's lease TTL, ms.
    pub lease_ttl_ms: u64,
    /// The renew tick (TTL/3), ms.
    pub renew_tick_ms: f64,
    /// The shard's robot reconcile interval, ms.
    pub reconcile_ms: u64,
    /// Whether the cluster ran pinned to CPU 0.
    pub pinned: bool,
    /// Seconds to write every configuration into the store.
    pub write_s: f64,
    /// Runtime starts when the wait ended (restarts included).
    pub started: u64,
    /// Most robot rooms seen running at once during the wait.
    pub peak_running: u64,
    /// Whether all `rooms` robot runtimes ran at once within the wait.
    pub all_started: bool,
    /// Seconds from the first configuration write until all runtimes started (or the wait
    /// ended); includes up to one reconcile interval.
    pub start_s: f64,
    /// Seconds from the first write until the first runtime started.
    pub first_start_s: Option<f64>,
    /// Rooms whose robots ran at the end of the window (gauge).
    pub robot_rooms_running: u64,
    /// Rooms running on the shard at the end of the window (gauge).
    pub rooms_running: u64,
    /// The measured window, seconds (wall time between the two samples).
    pub window_s: f64,
    /// Renew ticks in the window: window / (TTL/3).
    pub renew_ticks: f64,
    /// Renewal round trips in the window.
    pub renew_round_trips: u64,
    /// Renewal round trips per renew tick (1 when every tick renews all leases at once).
    pub round_trips_per_tick: f64,
    /// Leases renewed in the window.
    pub leases_renewed: u64,
    /// Leases renewed per renew tick (`rooms` when every tick renews every lease).
    pub leases_renewed_per_tick: f64,
    /// Leases lost in the window.
    pub leases_lost_window: u64,
    /// Leases lost since the shard started (must be 0).
    pub leases_lost: u64,
    /// Runtime starts beyond one per room since the shard started (must be 0: a second start
    /// is a change of owner); `None` when not all rooms ever ran at once, and a count of starts
    /// cannot tell first starts from restarts.
    pub extra_starts: Option<u64>,
    /// Robot chat messages in the window.
    pub chat_actions: u64,
    /// Robot chat messages per second in the window.
    pub chat_per_sec: f64,
    /// What the configurations ask for: rooms × robots / chat interval.
    pub chat_per_sec_configured: f64,
    /// Robot actions refused in the window.
    pub refused_actions: u64,
    /// Shard CPU over the window, % of one core.
    pub shard_cpu_percent: Option<f64>,
    /// Redis CPU over the window, % of one core.
    pub redis_cpu_percent: Option<f64>,
    /// Shard RSS before any configuration was written, KiB.
    pub shard_rss_kib_before: Option<u64>,
    /// Shard RSS at the end of the window, KiB.
    pub shard_rss_kib: Option<u64>,
    /// Shard RSS growth per robot room, bytes.
    pub rss_bytes_per_room: Option<f64>,
    /// `nproc` of the host.
    pub nproc: usize,
    /// Whether the run held: all started and running, 0 leases lost, 0 extra starts.
    pub ok: bool,
    /// Why it did not.
    pub failures: Vec<String>,
}

/// One sample of the shard's counters.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    starts: f64,
    running: f64,
    rooms_running: f64,
    chats: f64,
    refused: f64,
    round_trips: f64,
    renewed: f64,
    lost: f64,
    /// Shard CPU seconds.
    cpu_s: Option<f64>,
    /// Redis CPU seconds.
    redis_cpu_s: Option<f64>,
    rss_kib: Option<u64>,
}

/// Reads the shard's `/metrics` once (bounded by [`METRICS_TIMEOUT`]) and `/proc`.
async fn sample(
    shard: SocketAddr,
    shard_pid: u32,
    redis_pid: Option<u32>,
) -> anyhow::Result<Sample> {
    let body = tokio::time::timeout(METRICS_TIMEOUT, admin::get(shard, "/metrics", None))
        .await
        .context("the shard's /metrics did not answer in time")?
        .context("reading the shard's /metrics")?
        .success()?
        .body;
    let m = |name: &str| admin::metric_in(&body, name).unwrap_or(0.0);
    let cpu_s = procfs::cpu_ms(&[shard_pid])
        .map(|ms| ms / 1000.0)
        .or_else(|| admin::metric_in(&body, CPU_SECONDS));
    let rss_kib = procfs::rss_kib(shard_pid).or_else(|| {
        // A byte count read back from Prometheus text: whole, non-negative, far below 2^53.
        admin::metric_in(&body, RSS_BYTES).map(|b| b as u64 / 1024)
    });
    Ok(Sample {
        at: Instant::now(),
        starts: m(STARTS),
        running: m(RUNNING),
        rooms_running: m(ROOMS_RUNNING),
        chats: m(CHATS),
        refused: m(REFUSED),
        round_trips: m(ROUND_TRIPS),
        renewed: m(RENEWED),
        lost: m(LOST),
        cpu_s,
        redis_cpu_s: redis_pid
            .and_then(|p| procfs::cpu_ms(&[p]))
            .map(|ms| ms / 1000.0),
        rss_kib,
    })
}

/// A counter read from Prometheus text as a whole count (never negative).
fn count(v: f64) -> u64 {
    v.round().max(0.0) as u64
}

/// The configuration of robot room `room`: `robots` robots saying one phrase every
/// `every_s` seconds, nothing else.
pub fn config(room: &str, robots: usize, every_s: f64) -> serde_json::Value {
    let robots: Vec<serde_json::Value> = (0..robots)
        .map(|j| serde_json::json!({ "id": format!("bot:{room}-{j}") }))
        .collect();
    serde_json::json!({
        "room": room,
        "title": "robot bench",
        "robots": robots,
        "chat": { "every_s": every_s, "phrases": [PHRASE] },
    })
}

/// The name of robot room `i`.
fn room_name(i: usize) -> String {
    format!("robots-{i}")
}

/// Checks `o` before anything is spawned.
///
/// # Errors
/// A size or interval the shard would refuse, or that cannot be measured.
pub fn check(o: &Options) -> anyhow::Result<()> {
    anyhow::ensure!(o.rooms >= 1, "--rooms must be at least 1");
    anyhow::ensure!(
        (1..=MAX_ROBOTS).contains(&o.robots),
        "--robots must be 1..={MAX_ROBOTS}"
    );
    let every = chat_every_s(o);
    anyhow::ensure!(
        every.is_finite() && (MIN_CHAT_EVERY_S..=86_400.0).contains(&every),
        "--chat-every-s must be {MIN_CHAT_EVERY_S}..=86400"
    );
    anyhow::ensure!(
        o.lease_ttl >= Duration::from_secs(1),
        "--lease-ttl-ms must be at least 1000 (the shard's safety margin)"
    );
    anyhow::ensure!(
        o.duration >= o.lease_ttl,
        "--duration must cover at least one lease TTL"
    );
    Ok(())
}

fn chat_every_s(o: &Options) -> f64 {
    o.chat_every_s.unwrap_or(2.0 * o.lease_ttl.as_secs_f64())
}

/// Writes every configuration, [`WRITE_CONCURRENCY`] at a time.
async fn write_configs(store: &RobotStore, o: &Options, every_s: f64) -> anyhow::Result<()> {
    let writes = futures_util::stream::iter(0..o.rooms)
        .map(|i| {
            let store = store.clone();
            async move {
                let name = room_name(i);
                let bytes = config(&name, o.robots, every_s).to_string().into_bytes();
                store
                    .put(&RoomId::from(name.as_str()), bytes)
                    .await
                    .with_context(|| format!("writing the configuration of {name}"))
            }
        })
        .buffer_unordered(WRITE_CONCURRENCY);
    futures_util::pin_mut!(writes);
    while let Some(r) = writes.next().await {
        r?;
    }
    Ok(())
}

/// Runs the benchmark: starts the cluster, writes the configurations, waits for the start and
/// measures the window. The cluster is gone when this returns.
///
/// # Errors
/// The cluster does not start, the store or the shard's `/metrics` fail. A run that starts but
/// does not hold is a report with `ok: false`, not an error.
pub async fn run(o: &Options) -> anyhow::Result<RobotsReport> {
    check(o)?;
    let every_s = chat_every_s(o);
    let dir = tempfile::tempdir()?;
    let toml = dir.path().join("chorus.toml");
    std::fs::write(
        &toml,
        format!("robot_reconcile_ms = {}\n", o.reconcile.as_millis()),
    )?;
    let cluster = Cluster::start(ClusterOptions {
        shards: 1,
        gateways: 1,
        lease_ttl: o.lease_ttl,
        renew_on_traffic: false,
        env: vec![
            ("CHORUS_CONFIG".into(), toml.display().to_string()),
            // 10,000 rooms log 10,000 claims at info.
            ("CHORUS_LOG".into(), "warn".into()),
        ],
    })
    .await
    .context("starting the cluster (redis-server, one shard, one gateway)")?;
    let shard = cluster.shards.first().context("the cluster has no shard")?;
    let (shard_admin, shard_pid) = (shard.admin, shard.node.pid());
    let redis_pid = cluster.redis.pid();
    if o.pin {
        let mut pids = vec![shard_pid];
        pids.extend(cluster.gateways.iter().map(|g| g.node.pid()));
        pids.extend(redis_pid);
        for p in pids {
            target::pin_pid(p)?;
        }
    }
    let redis = storage::redis::Redis::connect(&cluster.redis.url())
        .await
        .context("connecting to the cluster's redis-server")?;
    let store = RobotStore::redis(&redis);
    let mut r = RobotsReport {
        rooms: o.rooms,
        robots_per_room: o.robots,
        chat_every_s: every_s,
        lease_ttl_ms: o.lease_ttl.as_millis() as u64,
        renew_tick_ms: o.lease_ttl.as_secs_f64() * 1000.0 / 3.0,
        reconcile_ms: o.reconcile.as_millis() as u64,
        pinned: o.pin,
        chat_per_sec_configured: (o.rooms * o.robots) as f64 / every_s,
        nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
        ..RobotsReport::default()
    };
    let before = sample(shard_admin, shard_pid, redis_pid).await?;
    r.shard_rss_kib_before = before.rss_kib;

    // Write every configuration; the reconcile picks them up as they land.
    let t0 = Instant::now();
    write_configs(&store, o, every_s).await?;
    r.write_s = t0.elapsed().as_secs_f64();
    if o.progress {
        eprintln!(
            "robots: {} configurations written in {:.2} s",
            o.rooms, r.write_s
        );
    }

    // Wait (bounded) until every runtime started.
    let want = o.rooms as f64;
    let deadline = t0 + o.start_timeout;
    let mut last_print = Instant::now();
    let mut s = sample(shard_admin, shard_pid, redis_pid).await?;
    let mut peak = s.running;
    while (s.starts < want || s.running < want) && Instant::now() < deadline {
        if r.first_start_s.is_none() && s.starts > 0.0 {
            r.first_start_s = Some(s.at.duration_since(t0).as_secs_f64());
        }
        if o.progress && last_print.elapsed() >= PROGRESS_EVERY {
            last_print = Instant::now();
            eprintln!(
                "robots: {:.0} of {} runtimes started after {:.1} s (lost leases {:.0})",
                s.starts,
                o.rooms,
                t0.elapsed().as_secs_f64(),
                s.lost
            );
        }
        tokio::time::sleep(START_POLL).await;
        s = sample(shard_admin, shard_pid, redis_pid).await?;
        peak = peak.max(s.running);
    }
    if r.first_start_s.is_none() && s.starts > 0.0 {
        r.first_start_s = Some(s.at.duration_since(t0).as_secs_f64());
    }
    r.started = count(s.starts);
    r.peak_running = count(peak);
    r.all_started = s.starts >= want && s.running >= want;
    r.start_s = s.at.duration_since(t0).as_secs_f64();
    if o.progress {
        eprintln!(
            "robots: {} of {} runtimes started in {:.2} s; measuring {:.0} s",
            r.started,
            o.rooms,
            r.start_s,
            o.duration.as_secs_f64()
        );
    }

    // The window, sampled every PROGRESS_EVERY for the progress line only.
    let a = s;
    let end = Instant::now() + o.duration;
    while Instant::now() < end {
        let step = end
            .saturating_duration_since(Instant::now())
            .min(PROGRESS_EVERY);
        tokio::time::sleep(step).await;
        if o.progress && Instant::now() < end {
            let m = sample(shard_admin, shard_pid, redis_pid).await?;
            eprintln!(
                "robots: +{:.0} s: round trips {:.0}, renewed {:.0}, lost {:.0}, chats {:.0}",
                m.at.duration_since(a.at).as_secs_f64(),
                m.round_trips - a.round_trips,
                m.renewed - a.renewed,
                m.lost - a.lost,
                m.chats - a.chats
            );
        }
    }
    let b = sample(shard_admin, shard_pid, redis_pid).await?;
    fill_window(&mut r, o, &a, &b);
    judge(&mut r);
    drop(cluster);
    Ok(r)
}

/// The window's figures, from its first sample `a` and its last `b`.
fn fill_window(r: &mut RobotsReport, o: &Options, a: &Sample, b: &Sample) {
    let window = b.at.duration_since(a.at).as_secs_f64();
    r.window_s = window;
    r.renew_ticks = window / (o.lease_ttl.as_secs_f64() / 3.0);
    r.renew_round_trips = count(b.round_trips - a.round_trips);
    r.leases_renewed = count(b.renewed - a.renewed);
    if r.renew_ticks > 0.0 {
        r.round_trips_per_tick = (b.round_trips - a.round_trips) / r.renew_ticks;
        r.leases_renewed_per_tick = (b.renewed - a.renewed) / r.renew_ticks;
    }
    r.leases_lost_window = count(b.lost - a.lost);
    r.leases_lost = count(b.lost);
    r.extra_starts = r.all_started.then(|| count(b.starts - o.rooms as f64));
    r.chat_actions = count(b.chats - a.chats);
    r.refused_actions = count(b.refused - a.refused);
    r.robot_rooms_running = count(b.running);
    r.rooms_running = count(b.rooms_running);
    if window > 0.0 {
        r.chat_per_sec = (b.chats - a.chats) / window;
        let pct = |x: Option<f64>, y: Option<f64>| x.zip(y).map(|(x, y)| (y - x) / window * 100.0);
        r.shard_cpu_percent = pct(a.cpu_s, b.cpu_s);
        r.redis_cpu_percent = pct(a.redis_cpu_s, b.redis_cpu_s);
    }
    r.shard_rss_kib = b.rss_kib;
    r.rss_bytes_per_room = r
        .shard_rss_kib_before
        .zip(b.rss_kib)
        .map(|(x, y)| (y as f64 - x as f64) * 1024.0 / o.rooms as f64);
}

/// Sets `ok` and `failures`.
fn judge(r: &mut RobotsReport) {
    let mut f = Vec::new();
    if !r.all_started {
        f.push(format!(
            "not all {} robot runtimes ran at once within the wait (at most {} running; {} starts)",
            r.rooms, r.peak_running, r.started
        ));
    }
    if r.robot_rooms_running < r.rooms as u64 {
        f.push(format!(
            "{} of {} robot rooms running at the end",
            r.robot_rooms_running, r.rooms
        ));
    }
    if r.leases_lost > 0 {
        f.push(format!("{} leases lost", r.leases_lost));
    }
    if let Some(extra) = r.extra_starts.filter(|e| *e > 0) {
        f.push(format!(
            "{extra} robot runtime starts beyond one per room (changes of owner)"
        ));
    }
    r.ok = f.is_empty();
    r.failures = f;
}

/// The human report.
pub fn text(r: &RobotsReport) -> String {
    let opt = |v: Option<f64>, unit: &str| v.map_or("n/a".to_owned(), |v| format!("{v:.1}{unit}"));
    let mut s = String::new();
    let _ = writeln!(
        s,
        "== robots: {} rooms × {} robot(s), chat every {:.1} s, lease TTL {} ms (renew tick {:.0} ms), reconcile {} ms{} ==",
        r.rooms,
        r.robots_per_room,
        r.chat_every_s,
        r.lease_ttl_ms,
        r.renew_tick_ms,
        r.reconcile_ms,
        if r.pinned { ", pinned to CPU 0" } else { "" }
    );
    let _ = writeln!(s, "configs written        {:.2} s", r.write_s);
    let _ = writeln!(
        s,
        "runtimes started       {} starts for {} rooms, {} at most running at once, in {:.2} s from the first write (first after {})",
        r.started,
        r.rooms,
        r.peak_running,
        r.start_s,
        opt(r.first_start_s, " s")
    );
    let _ = writeln!(
        s,
        "running at the end     {} robot rooms ({} rooms on the shard)",
        r.robot_rooms_running, r.rooms_running
    );
    let _ = writeln!(
        s,
        "window                 {:.2} s = {:.1} renew ticks",
        r.window_s, r.renew_ticks
    );
    let _ = writeln!(
        s,
        "renew round trips      {} = {:.2} per tick",
        r.renew_round_trips, r.round_trips_per_tick
    );
    let _ = writeln!(
        s,
        "leases renewed         {} = {:.0} per tick",
        r.leases_renewed, r.leases_renewed_per_tick
    );
    let _ = writeln!(
        s,
        "leases lost            {} in the window, {} in all",
        r.leases_lost_window, r.leases_lost
    );
    let _ = writeln!(
        s,
        "extra runtime starts   {}",
        r.extra_starts
            .map_or("n/a (not all ran at once)".to_owned(), |e| e.to_string())
    );
    let _ = writeln!(
        s,
        "robot chat             {} = {:.1}/s (configured {:.1}/s), refused {}",
        r.chat_actions, r.chat_per_sec, r.chat_per_sec_configured, r.refused_actions
    );
    let _ = writeln!(
        s,
        "shard CPU              {} of one core (redis {})",
        opt(r.shard_cpu_percent, " %"),
        opt(r.redis_cpu_percent, " %")
    );
    let _ = writeln!(
        s,
        "shard RSS              {} KiB (before the configs {} KiB; {} per room)",
        r.shard_rss_kib.map_or("n/a".to_owned(), |v| v.to_string()),
        r.shard_rss_kib_before
            .map_or("n/a".to_owned(), |v| v.to_string()),
        opt(r.rss_bytes_per_room, " B")
    );
    if r.ok {
        let _ = writeln!(s, "verdict                ok");
    } else {
        let _ = writeln!(
            s,
            "verdict                FAILED: {}",
            r.failures.join("; ")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Options {
        Options {
            rooms: 10,
            robots: 1,
            chat_every_s: None,
            lease_ttl: Duration::from_secs(2),
            reconcile: Duration::from_secs(2),
            duration: Duration::from_secs(30),
            start_timeout: Duration::from_secs(60),
            pin: false,
            progress: false,
        }
    }

    fn at(base: Instant, s: u64) -> Sample {
        Sample {
            at: base + Duration::from_secs(s),
            starts: 10.0,
            running: 10.0,
            rooms_running: 10.0,
            chats: 0.0,
            refused: 0.0,
            round_trips: 0.0,
            renewed: 0.0,
            lost: 0.0,
            cpu_s: Some(1.0),
            redis_cpu_s: None,
            rss_kib: Some(2048),
        }
    }

    /// A configuration the shard accepts, with the chat interval defaulting to 2×TTL.
    #[test]
    fn configs_chat_one_phrase_every_two_ttls_by_default() {
        let o = options();
        check(&o).expect("valid options");
        let c = config("robots-1", 2, chat_every_s(&o));
        assert_eq!(c["chat"]["every_s"], 4.0);
        assert_eq!(c["robots"][1]["id"], "bot:robots-1-1");
        assert!(c.get("gift").is_none());
        assert!(
            check(&Options {
                robots: 21,
                ..o.clone()
            })
            .is_err()
        );
        assert!(
            check(&Options {
                chat_every_s: Some(0.1),
                ..o
            })
            .is_err()
        );
    }

    /// 30 s at a 2-s TTL is 45 ticks: 45 round trips are one per tick; a lost lease or a second
    /// start fails the run.
    #[test]
    fn the_window_counts_round_trips_per_tick_and_fails_on_a_lost_lease() {
        let o = options();
        let base = Instant::now();
        let a = at(base, 0);
        let mut b = at(base, 30);
        b.round_trips = 45.0;
        b.renewed = 450.0;
        b.chats = 75.0;
        b.cpu_s = Some(4.0);
        let mut r = RobotsReport {
            rooms: 10,
            all_started: true,
            started: 10,
            ..RobotsReport::default()
        };
        fill_window(&mut r, &o, &a, &b);
        judge(&mut r);
        assert!((r.renew_ticks - 45.0).abs() < 1e-9);
        assert!((r.round_trips_per_tick - 1.0).abs() < 1e-9);
        assert!((r.leases_renewed_per_tick - 10.0).abs() < 1e-9);
        assert!((r.chat_per_sec - 2.5).abs() < 1e-9);
        assert_eq!(r.shard_cpu_percent.map(|c| c.round()), Some(10.0));
        assert!(r.ok, "{:?}", r.failures);
        b.lost = 1.0;
        b.starts = 11.0;
        fill_window(&mut r, &o, &a, &b);
        judge(&mut r);
        assert!(!r.ok);
        assert_eq!((r.leases_lost, r.extra_starts), (1, Some(1)));
        assert_eq!(r.failures.len(), 2, "{:?}", r.failures);
        assert!(text(&r).contains("FAILED"));
    }
}
