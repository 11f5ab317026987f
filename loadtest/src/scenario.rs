//! Scenarios: each connects its users to a [`Target`], drives a schedule and returns a
//! [`Report`]. Shared here: parameters, user/room naming, the pacing loop (intended send times
//! from the start and the rate, so no coordinated omission), draining and the common report.
//!
//! - [`chat`]: `fanout` (one room, many listeners) and `rooms` (many rooms, everyone chats);
//! - [`gifts`]: a gift storm with ledger checks;
//! - [`churn`]: joins, leaves, seat takes and switches;
//! - [`idle`]: server memory per idle joined connection;
//! - [`reconnect`]: everyone drops and resumes at once;
//! - [`party`]: rooms chatting while gift bursts and seat changes hit them.

pub mod chat;
pub mod churn;
pub mod gifts;
pub mod idle;
pub mod party;
pub mod reconnect;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tokio::time::Instant;

use crate::load::{self, Conn, Shared};
use crate::procfs;
use crate::report::{CpuParts, Latency, Report};
use crate::target::Target;

/// Knobs every scenario shares.
#[derive(Debug, Clone)]
pub struct Params {
    /// Length of the send schedule.
    pub duration: Duration,
    /// Sending at the run's rate before the measured schedule (`rooms`, `fanout`): its
    /// messages must arrive like any other, but its latency, CPU and rate stay out of the
    /// report, so that a cold start does not decide a short run.
    pub warmup: Duration,
    /// Chat text length in bytes.
    pub msg_bytes: usize,
    /// Handshakes in flight while connecting.
    pub connect_concurrency: usize,
    /// Longest wait for outstanding deliveries after the schedule ends.
    pub drain: Duration,
    /// Show a progress bar.
    pub progress: bool,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(5),
            warmup: Duration::ZERO,
            msg_bytes: 100,
            connect_concurrency: 128,
            drain: Duration::from_secs(5),
            progress: false,
        }
    }
}

/// A scenario and its sizes.
#[derive(Debug, Clone)]
pub enum Scenario {
    /// One room, `listeners` listeners, `publishers` publishers; rate = messages/s in total.
    Fanout {
        /// Listeners.
        listeners: usize,
        /// Publishers (the rate is split between them).
        publishers: usize,
    },
    /// `rooms` × `members`, every member chatting; rate = messages/s per member.
    Rooms {
        /// Rooms.
        rooms: usize,
        /// Members per room.
        members: usize,
    },
    /// A gift storm over `rooms` × `members`; rate = gifts/s in total.
    Gifts {
        /// Rooms.
        rooms: usize,
        /// Members per room.
        members: usize,
        /// How the gifts are sent (request ids, order over the rooms).
        order: gifts::Order,
    },
    /// `conns` connections over `rooms` rooms; rate = membership/seat ops per second in total.
    Churn {
        /// Connections.
        conns: usize,
        /// Rooms.
        rooms: usize,
    },
    /// `conns` idle connections joined to `rooms` rooms (rate unused).
    Idle {
        /// Connections.
        conns: usize,
        /// Rooms.
        rooms: usize,
    },
    /// `rooms` × `members` drop and resume at once; rate = messages each room's publisher sends
    /// while they are away.
    Reconnect {
        /// Rooms.
        rooms: usize,
        /// Members per room (plus one publisher that stays).
        members: usize,
    },
    /// Rooms chatting while gift bursts and seat changes hit them; rate = chat messages/s per
    /// chatter.
    Party(party::Shape),
}

impl Scenario {
    /// The scenario's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Fanout { .. } => "fanout",
            Self::Rooms { .. } => "rooms",
            Self::Gifts { .. } => "gifts",
            Self::Churn { .. } => "churn",
            Self::Idle { .. } => "idle",
            Self::Reconnect { .. } => "reconnect",
            Self::Party(_) => "party",
        }
    }

    /// Whether the baseline server needs its gift ledger, admin port and users for it.
    pub fn needs_ledger(&self) -> bool {
        match self {
            Self::Gifts { .. } => true,
            Self::Party(shape) => shape.sends_gifts(),
            _ => false,
        }
    }

    /// Whether a sweep judges the run by reply latency (requests) rather than delivery latency.
    pub fn judged_by_reply(&self) -> bool {
        matches!(self, Self::Gifts { .. } | Self::Churn { .. })
    }

    /// Runs once against `target` at `rate`.
    ///
    /// # Errors
    /// Connecting or joining failed.
    pub async fn run(&self, target: &Target, p: &Params, rate: f64) -> anyhow::Result<Report> {
        let mut r = match *self {
            Self::Fanout {
                listeners,
                publishers,
            } => chat::fanout(target, p, rate, listeners, publishers).await?,
            Self::Rooms { rooms, members } => chat::rooms(target, p, rate, rooms, members).await?,
            Self::Gifts {
                rooms,
                members,
                order,
            } => gifts::run(target, p, rate, rooms, members, order).await?,
            Self::Churn { conns, rooms } => churn::run(target, p, rate, conns, rooms).await?,
            Self::Idle { conns, rooms } => idle::run(target, p, conns, rooms).await?,
            Self::Reconnect { rooms, members } => {
                reconnect::run(target, p, rate, rooms, members).await?
            }
            Self::Party(shape) => party::run(target, p, rate, shape).await?,
        };
        r.scenario = self.name().to_owned();
        r.target = target.name.clone();
        r.rate = rate;
        Ok(r)
    }
}

/// A prefix unique to one run of this process (users and rooms never collide across runs).
pub fn run_prefix(kind: &str) -> String {
    static RUN: AtomicU64 = AtomicU64::new(0);
    format!(
        "lt{}-{}-{kind}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    )
}

/// Connects `users` to the target's URLs round-robin (with tokens when the target checks them).
///
/// # Errors
/// A connection failed.
pub async fn connect_users(
    target: &Target,
    users: &[String],
    p: &Params,
    shared: &Arc<Shared>,
) -> anyhow::Result<Vec<Conn>> {
    anyhow::ensure!(!target.urls.is_empty(), "no URL to connect to");
    let mut specs = Vec::with_capacity(users.len());
    for (i, u) in users.iter().enumerate() {
        let token = match &target.secret {
            Some(s) => Some(crate::client::mint_token(s, u, Duration::from_secs(3600))?),
            None => None,
        };
        specs.push((u.clone(), target.urls[i % target.urls.len()].clone(), token));
    }
    load::connect_many(specs, p.connect_concurrency, shared).await
}

/// Connects `users` ([`connect_users`]) and joins connection `i` to `room_of(i)` ([`join_all`]).
///
/// # Errors
/// A connection or a join failed.
pub async fn connect_and_join(
    target: &Target,
    users: &[String],
    p: &Params,
    shared: &Arc<Shared>,
    room_of: impl Fn(usize) -> String,
) -> anyhow::Result<Vec<Conn>> {
    let conns = connect_users(target, users, p, shared).await?;
    join_all(&conns, room_of, p.connect_concurrency).await?;
    Ok(conns)
}

/// Joins `conns[i]` to `room_of(i)`, at most `concurrency` joins in flight.
///
/// # Errors
/// A join failed.
pub async fn join_all(
    conns: &[Conn],
    room_of: impl Fn(usize) -> String,
    concurrency: usize,
) -> anyhow::Result<()> {
    use futures_util::StreamExt;
    let futs = conns.iter().enumerate().map(|(i, c)| {
        let room = room_of(i);
        async move {
            c.join(&room, None)
                .await
                .map_err(|e| anyhow::anyhow!("join {room} as {}: {e}", c.user))
        }
    });
    let results: Vec<anyhow::Result<load::Joined>> = futures_util::stream::iter(futs)
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(())
}

/// A progress bar over `total` scheduled sends that follows the shared counters.
pub struct Progress {
    bar: Option<ProgressBar>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    /// Starts the bar (hidden when `show` is false).
    pub fn start(show: bool, label: &str, total: u64, shared: &Arc<Shared>) -> Self {
        if !show {
            return Self {
                bar: None,
                ticker: None,
            };
        }
        let bar = ProgressBar::new(total);
        if let Ok(style) = ProgressStyle::with_template(
            "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} sent {msg}",
        ) {
            bar.set_style(style);
        }
        bar.set_prefix(label.to_owned());
        let b = bar.clone();
        let s = shared.clone();
        let ticker = tokio::spawn(async move {
            loop {
                b.set_position(s.sent.load(Ordering::Relaxed));
                b.set_message(format!(
                    "| received {} | errors {}",
                    s.received.load(Ordering::Relaxed),
                    s.failed.load(Ordering::Relaxed)
                ));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Self {
            bar: Some(bar),
            ticker: Some(ticker),
        }
    }

    /// Stops the bar.
    pub fn finish(self) {
        if let Some(t) = self.ticker {
            t.abort();
        }
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

/// How many sends a schedule at `rate` over `duration` makes.
pub fn schedule_len(rate: f64, duration: Duration) -> u64 {
    (rate * duration.as_secs_f64()).round().max(0.0) as u64
}

/// Runs the schedule: send `i` is intended at `t0 + i / rate`; `send(i, intended_ns)` is
/// awaited in order. A late schedule sends at once with the original intended times. Bounded:
/// `schedule_len` sends, and never past `duration` + 30 s. Returns `(t0_ns, sends)`.
pub async fn pace<F, Fut>(shared: &Shared, rate: f64, duration: Duration, send: F) -> (u64, u64)
where
    F: FnMut(u64, u64) -> Fut,
    Fut: Future<Output = ()>,
{
    if rate <= 0.0 {
        return (shared.now_ns(), 0);
    }
    let interval = 1e9 / rate;
    let total = schedule_len(rate, duration);
    pace_by(
        shared,
        total,
        |i| (i as f64 * interval) as u64,
        duration,
        send,
    )
    .await
}

/// Runs a schedule of `total` sends, send `i` intended at `t0 + offset_ns(i)` (offsets that
/// never decrease); otherwise as [`pace`]: a late schedule sends at once with the original
/// intended times, and it stops `duration` + 30 s after it began. Returns `(t0_ns, sends)`.
pub async fn pace_by<F, Fut>(
    shared: &Shared,
    total: u64,
    offset_ns: impl Fn(u64) -> u64,
    duration: Duration,
    mut send: F,
) -> (u64, u64)
where
    F: FnMut(u64, u64) -> Fut,
    Fut: Future<Output = ()>,
{
    let t0 = shared.now_ns();
    let hard_stop = Instant::now() + duration + Duration::from_secs(30);
    let mut i = 0;
    while i < total {
        let due = t0 + offset_ns(i);
        let now = shared.now_ns();
        if due > now {
            tokio::time::sleep(Duration::from_nanos(due - now)).await;
        } else {
            shared
                .send_lag_max_ns
                .fetch_max(now - due, Ordering::Relaxed);
        }
        send(i, due).await;
        i += 1;
        if Instant::now() >= hard_stop {
            break;
        }
    }
    (t0, i)
}

/// Waits (at most `max`) until every scheduled request has its reply and `expected()`
/// deliveries arrived. Returns nanoseconds since start when it stopped waiting.
pub async fn drain(shared: &Shared, max: Duration, expected: impl Fn() -> u64) -> u64 {
    let deadline = Instant::now() + max;
    loop {
        let done =
            shared.unanswered() == 0 && shared.received.load(Ordering::Relaxed) >= expected();
        if done || Instant::now() >= deadline {
            return shared.now_ns();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Process metric the node's admin port serves (`metrics-process`): CPU seconds.
const ADMIN_CPU_SECONDS: &str = "process_cpu_seconds_total";
/// Process metric the node's admin port serves: resident memory in bytes.
const ADMIN_RSS_BYTES: &str = "process_resident_memory_bytes";

/// The server's CPU time (user + system, ms) and when it was read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuReading {
    /// CPU time so far, ms.
    pub ms: f64,
    /// A spawned cluster's share of `ms` by part: gateways, shards, Redis.
    pub parts: Option<[f64; 3]>,
    /// When it was read.
    pub at: Instant,
}

/// What the server used between two [`CpuReading`]s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuUse {
    /// CPU time, ms.
    pub ms: f64,
    /// CPU time over the wall time between the readings: 1.0 is one core busy all along. How
    /// near its capacity the server ran, which decides how long its queues get: on this shared
    /// host the same work takes more or less CPU from one minute to the next.
    pub cores: Option<f64>,
    /// A spawned cluster's CPU time by part (gateways, shards, Redis), ms.
    pub parts: Option<[f64; 3]>,
}

impl CpuUse {
    /// The use between `before` and `after`, when both were read.
    pub fn between(before: Option<CpuReading>, after: Option<CpuReading>) -> Option<Self> {
        let (a, b) = before.zip(after)?;
        let wall_ms = b.at.saturating_duration_since(a.at).as_secs_f64() * 1000.0;
        let ms = b.ms - a.ms;
        let parts = a
            .parts
            .zip(b.parts)
            .map(|(a, b)| std::array::from_fn(|i| b[i] - a[i]));
        Some(Self {
            ms,
            cores: (wall_ms > 0.0).then(|| ms / wall_ms),
            parts,
        })
    }

    /// Sets the report's server CPU fields (not its CPU per delivery).
    pub fn record(self, r: &mut Report) {
        r.server_cpu_ms = Some(self.ms);
        r.server_cores = self.cores;
    }
}

/// Server CPU now: summed over the target's pids from `/proc`, or, when no pid is known (a
/// node under another user or in a container, which `ss` cannot name), the `--admin` node's
/// `process_cpu_seconds_total`.
pub async fn server_cpu(target: &Target) -> Option<CpuReading> {
    let ms = if target.pids.is_empty() {
        admin_metric(target, ADMIN_CPU_SECONDS).await? * 1000.0
    } else {
        procfs::cpu_ms(&target.pids)?
    };
    let parts = target.parts.as_ref().and_then(|p| {
        Some([
            procfs::cpu_ms(&p.gateways)?,
            procfs::cpu_ms(&p.shards)?,
            procfs::cpu_ms(&p.redis)?,
        ])
    });
    Some(CpuReading {
        ms,
        parts,
        at: Instant::now(),
    })
}

/// The generator's own CPU time now (this process, from `/proc`).
pub fn own_cpu() -> Option<CpuReading> {
    Some(CpuReading {
        ms: procfs::cpu_ms(&[std::process::id()])?,
        parts: None,
        at: Instant::now(),
    })
}

/// Server resident memory (KiB) now: summed over the target's pids from `/proc`, or, when no
/// pid is known, the `--admin` node's `process_resident_memory_bytes`.
pub async fn server_rss_kib(target: &Target) -> Option<u64> {
    if !target.pids.is_empty() {
        return procfs::rss_total_kib(&target.pids);
    }
    // A byte count read back from Prometheus text: whole, non-negative, far below 2^53.
    Some(admin_metric(target, ADMIN_RSS_BYTES).await? as u64 / 1024)
}

/// The `--admin` node's counts of frames written to sockets and of the writes that carried
/// them, read before and after a measured window (see [`frames_per_write`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Writes {
    /// `chorus_gateway_frames_out_total`.
    pub frames: f64,
    /// `chorus_gateway_write_batches_total`.
    pub batches: f64,
}

/// Reads [`Writes`] now; `None` for a target without an admin node or those metrics.
pub async fn server_writes(target: &Target) -> Option<Writes> {
    Some(Writes {
        frames: admin_metric(target, ADMIN_FRAMES_OUT).await?,
        batches: admin_metric(target, ADMIN_WRITE_BATCHES).await?,
    })
}

/// Frames per socket write between two readings; `None` when either is missing or nothing
/// was written.
pub fn frames_per_write(before: Option<Writes>, after: Option<Writes>) -> Option<f64> {
    let (a, b) = (before?, after?);
    let batches = b.batches - a.batches;
    (batches > 0.0).then(|| (b.frames - a.frames) / batches)
}

/// Gateway metric: frames written to sockets.
const ADMIN_FRAMES_OUT: &str = "chorus_gateway_frames_out_total";
/// Gateway metric: the batches (socket writes) that carried them.
const ADMIN_WRITE_BATCHES: &str = "chorus_gateway_write_batches_total";

/// One metric of the target's admin node; `None` without an admin address, when it cannot be
/// reached, or when it does not serve the metric.
async fn admin_metric(target: &Target, name: &str) -> Option<f64> {
    crate::admin::metric_if_present(target.admin?, name)
        .await
        .ok()
        .flatten()
}

/// How many of the worst 100 ms stretches a report lists.
const WORST_SLOTS_REPORTED: usize = 3;

/// The fields every scheduled scenario reports, from the shared counters.
pub fn common_report(
    shared: &Shared,
    t0_ns: u64,
    expected: u64,
    cpu_before: Option<CpuReading>,
    cpu_after: Option<CpuReading>,
) -> Report {
    let received = shared.received.load(Ordering::Relaxed);
    // Deliveries of the measured schedule (all of them without a warm-up): what the rate and
    // the CPU per delivery count.
    let measured = received.saturating_sub(shared.received_before_measure());
    let mut r = Report {
        sent: shared.sent.load(Ordering::Relaxed),
        accepted: shared.ok.load(Ordering::Relaxed),
        unanswered: shared.unanswered(),
        expected,
        received,
        lost: expected.saturating_sub(received),
        gaps: shared.gaps.load(Ordering::Relaxed),
        duplicates: shared.duplicates.load(Ordering::Relaxed),
        closed: shared.closed.load(Ordering::Relaxed),
        errors: shared.errors(),
        reply: Latency::from_hist(&shared.reply_latency()),
        worst_100ms: shared.worst_slots(t0_ns, WORST_SLOTS_REPORTED),
        schedule_start_unix_ms: Some(shared.unix_ms_at(t0_ns)),
        send_lag_max_ms: shared.send_lag_max_ns.load(Ordering::Relaxed) as f64 / 1e6,
        ..Report::default()
    };
    let last = shared.last_delivery_ns.load(Ordering::Relaxed);
    if last > t0_ns && measured > 0 {
        r.delivered_per_sec = measured as f64 / ((last - t0_ns) as f64 / 1e9);
    }
    r.set_latency(&shared.latency());
    r.economy = shared.economy.report();
    if let Some(cpu) = CpuUse::between(cpu_before, cpu_after) {
        cpu.record(&mut r);
        if measured > 0 {
            let per = |ms: f64| ms * 1000.0 / measured as f64;
            r.cpu_us_per_delivery = Some(per(cpu.ms));
            r.cpu_parts_us_per_delivery = cpu.parts.map(|[gateways, shards, redis]| CpuParts {
                gateways: per(gateways),
                shards: per(shards),
                redis: per(redis),
            });
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{CpuReading, CpuUse, pace};
    use crate::load::Shared;
    use crate::report::Report;

    /// 500 ms of CPU over 2 s of wall time is a quarter of a core, split by a cluster's parts
    /// as each part used it; without both readings there is no figure, and without wall time
    /// no share.
    #[tokio::test(start_paused = true)]
    async fn cpu_use_is_the_cpu_time_and_its_share_of_the_wall_time() {
        let before = CpuReading {
            ms: 1_000.0,
            parts: Some([600.0, 300.0, 100.0]),
            at: Instant::now(),
        };
        tokio::time::advance(Duration::from_secs(2)).await;
        let after = CpuReading {
            ms: 1_500.0,
            parts: Some([900.0, 450.0, 150.0]),
            at: Instant::now(),
        };
        let used = CpuUse::between(Some(before), Some(after)).unwrap();
        assert_eq!(
            used,
            CpuUse {
                ms: 500.0,
                cores: Some(0.25),
                parts: Some([300.0, 150.0, 50.0]),
            }
        );
        let one = CpuReading {
            parts: None,
            ..after
        };
        assert_eq!(
            CpuUse::between(Some(before), Some(one)).unwrap().parts,
            None
        );
        let mut r = Report::default();
        used.record(&mut r);
        assert_eq!((r.server_cpu_ms, r.server_cores), (Some(500.0), Some(0.25)));

        assert_eq!(CpuUse::between(Some(before), None), None);
        assert_eq!(CpuUse::between(None, Some(after)), None);
        let same = CpuUse::between(Some(before), Some(before)).unwrap();
        assert_eq!((same.ms, same.cores), (0.0, None));
    }

    /// A generator that cannot keep its schedule says so: 20 sends due 1 ms apart, each taking
    /// at least 5 ms, so the last one (due at +19 ms) starts at +95 ms at the earliest.
    #[tokio::test]
    async fn a_sender_behind_its_schedule_reports_how_far() {
        let shared = Shared::new();
        let (_, sends) = pace(&shared, 1_000.0, Duration::from_millis(20), |_, _| {
            tokio::time::sleep(Duration::from_millis(5))
        })
        .await;
        assert_eq!(sends, 20);
        let lag = shared.send_lag_max_ns.load(Ordering::Relaxed);
        assert!(lag >= 76_000_000, "the sender was {lag} ns behind");
    }
}
