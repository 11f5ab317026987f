//! `chorus-loadtest`: the load generator, the baseline server and the benchmark driver.
//!
//! ```text
//! chorus-loadtest fanout --spawn standalone --duration 5 --sweep --rate 200
//! chorus-loadtest rooms  --spawn standalone --compare --json out.json --plot out.svg
//! chorus-loadtest gifts  --spawn-cluster 2x3 --rate 5000
//! chorus-loadtest party  --spawn standalone --rate 0.5 --bursts-per-sec 2 --seat-rate 100
//! chorus-loadtest party  --spawn standalone --seat-requesters 2 --seat-request-rate 20
//! chorus-loadtest member-list --spawn standalone --members 5000
//! chorus-loadtest robots --rooms 10000 --duration 30 --pin --json robots.json
//! chorus-loadtest directory --sizes 100,100000 --calls 500 --json directory.json
//! chorus-loadtest chaos --seed 1 --duration 60 --out /tmp/chaos-1
//! chorus-loadtest baseline-server --addr 127.0.0.1:7000
//! ```
//!
//! To keep the generator off the server's CPU: `--pin` spawns the server(s) under
//! `taskset -c 0`; run the generator itself as `taskset -c 1 chorus-loadtest ...`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use loadtest::report::{self, Report};
use loadtest::scenario::gifts::Order;
use loadtest::scenario::party::Shape;
use loadtest::scenario::{Params, Scenario};
use loadtest::target::{self, Guard, Target};
use loadtest::{baseline, procfs};
use serde::Serialize;

/// The same allocator as the `chorus` binary, so that the baseline server runs on the same
/// stack as Chorus down to malloc (docs/BENCHMARKS-LOG.md, method), and the generator gains too.
#[path = "chorus-loadtest/compare.rs"]
mod compare;
use compare::{Baseline, Ratio, ratios};
#[path = "chorus-loadtest/sweep.rs"]
mod sweep;
use sweep::{SweepResult, sweep};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "chorus-loadtest",
    about = "Load generator and benchmarks for Chorus"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// One room, N listeners, publishers sending --rate msgs/s in total.
    Fanout {
        /// Listeners.
        #[arg(long, default_value_t = 2000)]
        listeners: usize,
        /// Publishers (the rate is split between them).
        #[arg(long, default_value_t = 1)]
        publishers: usize,
        #[command(flatten)]
        common: Common,
    },
    /// K rooms × M members, every member chatting at --rate msgs/s.
    Rooms {
        /// Rooms.
        #[arg(long, default_value_t = 500)]
        rooms: usize,
        /// Members per room.
        #[arg(long, default_value_t = 10)]
        members: usize,
        #[command(flatten)]
        common: Common,
    },
    /// Gift storm: K rooms × M members, --rate gifts/s in total, ledger checked at the end.
    Gifts {
        /// Rooms.
        #[arg(long, default_value_t = 100)]
        rooms: usize,
        /// Members per room.
        #[arg(long, default_value_t = 10)]
        members: usize,
        /// Send random (UUIDv4) request ids, not time-ordered (UUIDv7) ones: the ledger then
        /// writes one random page of its saga index per gift.
        #[arg(long)]
        random_req_ids: bool,
        /// Send consecutive gifts to different rooms (gift i to room i % rooms), not a run of
        /// --members gifts to one room after another: a room's members then get its gifts one
        /// at a time, and the node writes fewer frames per socket write.
        #[arg(long)]
        interleave_rooms: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Joins, leaves, seat takes and switches at --rate ops/s.
    Churn {
        /// Connections.
        #[arg(long, default_value_t = 1000)]
        conns: usize,
        /// Rooms.
        #[arg(long, default_value_t = 100)]
        rooms: usize,
        #[command(flatten)]
        common: Common,
    },
    /// N idle joined connections: server RSS per connection.
    Idle {
        /// Connections.
        #[arg(long, default_value_t = 5000)]
        conns: usize,
        /// Rooms.
        #[arg(long, default_value_t = 100)]
        rooms: usize,
        #[command(flatten)]
        common: Common,
    },
    /// Everyone drops and resumes at once; --rate = messages per room sent while away.
    Reconnect {
        /// Rooms.
        #[arg(long, default_value_t = 100)]
        rooms: usize,
        /// Members per room (each room also has a publisher that stays connected).
        #[arg(long, default_value_t = 10)]
        members: usize,
        #[command(flatten)]
        common: Common,
    },
    /// A party: K rooms × M chatters at --rate msgs/s each, while gift bursts, seat changes and
    /// listeners coming and going hit the rooms (and, with --seat-requesters, seat requests
    /// that the rooms' owners approve and kick); each kind of traffic is reported on its own
    /// (--compare only with --seat-rate 0 --join-rate 0 and no seat requesters: the baseline
    /// sends no seat or member events and knows no seat requests).
    Party {
        #[command(flatten)]
        shape: Shape,
        #[command(flatten)]
        common: Common,
    },
    /// Robot rooms on ONE shard (with redis-server and one gateway): the time until all their
    /// runtimes started, then over --duration the lease renewal round trips per renew tick,
    /// leases renewed and lost, extra runtime starts, robot chat/s, shard CPU and RSS. Exits
    /// non-zero when any lease was lost, any runtime started twice or not all started.
    Robots(RobotsArgs),
    /// One room of --members joined clients; then new clients, one at a time, connect, join
    /// and ask `member.list`: the time from connect to the first page, the page alone, and
    /// one full scan.
    MemberList {
        /// Members joined before the samples.
        #[arg(long, default_value_t = 5000)]
        members: usize,
        /// New clients timed.
        #[arg(long, default_value_t = 20)]
        samples: usize,
        /// Page size asked for.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[command(flatten)]
        common: Common,
    },
    /// `room.list` latency at 100 and 100,000 directory entries (redis-server, one shard, one
    /// gateway); exits non-zero unless listing stays flat (see `loadtest::directory`).
    Directory(loadtest::directory::Options),
    /// The chaos suite: a real cluster under a seeded fault schedule, a recorded history and
    /// the invariant checkers (RELIABILITY.md); exits non-zero on any violation.
    Chaos(loadtest::chaos::cli::ChaosArgs),
    /// Checks a chaos run's directory again (history, node logs, ledger).
    ChaosCheck {
        /// The run's directory.
        #[arg(long)]
        out: PathBuf,
    },
    /// Runs the minimal room-broadcast baseline server.
    BaselineServer {
        /// Listen address.
        #[arg(long, default_value = "127.0.0.1:7000")]
        addr: SocketAddr,
        /// Serve `gift.send` with a durable SQLite gift ledger in this file.
        #[arg(long)]
        ledger: Option<std::path::PathBuf>,
        /// Admin address (grants, wallets, totals, /metrics).
        #[arg(long)]
        admin_addr: Option<SocketAddr>,
        /// HS256 secret of the users' bearer tokens (without it, users are named by
        /// connection and no token is asked for).
        #[arg(long, env = "CHORUS_JWT_SECRET", hide_env_values = true)]
        jwt_secret: Option<String>,
        /// Serve the bare chat protocol: one task per connection, events encoded once and
        /// shared, no tokens, ledger or admin port (the `rooms` and `fanout` baseline).
        #[arg(long, conflicts_with_all = ["ledger", "admin_addr", "jwt_secret"])]
        bare: bool,
    },
}

/// `chorus-loadtest robots` (see [`loadtest::robots`]).
#[derive(Args, Clone)]
struct RobotsArgs {
    /// Robot rooms.
    #[arg(long, default_value_t = 10_000)]
    rooms: usize,
    /// Robots per room (1..=20).
    #[arg(long, default_value_t = 1)]
    robots: usize,
    /// Seconds between one robot's chat messages (default: 2 × the lease TTL).
    #[arg(long)]
    chat_every_s: Option<f64>,
    /// The shard's lease TTL, ms (it renews every TTL/3).
    #[arg(long, default_value_t = 2000)]
    lease_ttl_ms: u64,
    /// The shard's robot reconcile interval (`robot_reconcile_ms`), ms.
    #[arg(long, default_value_t = 2000)]
    reconcile_ms: u64,
    /// Seconds measured after every runtime started.
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// Longest wait for every runtime to start, seconds from the first configuration write.
    #[arg(long, default_value_t = 300.0)]
    start_timeout: f64,
    /// Pin the cluster (shard, gateway, Redis) to CPU 0 (run the generator under
    /// `taskset -c 1`).
    #[arg(long)]
    pin: bool,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

/// Runs `robots`, prints its report and writes its JSON; an error when the run did not hold.
async fn run_robots(a: RobotsArgs) -> anyhow::Result<()> {
    let secs = |s: f64, what: &str| {
        anyhow::ensure!(s.is_finite() && s > 0.0, "{what} must be a positive number");
        Ok(Duration::from_secs_f64(s))
    };
    let o = loadtest::robots::Options {
        rooms: a.rooms,
        robots: a.robots,
        chat_every_s: a.chat_every_s,
        lease_ttl: Duration::from_millis(a.lease_ttl_ms),
        reconcile: Duration::from_millis(a.reconcile_ms),
        duration: secs(a.duration, "--duration")?,
        start_timeout: secs(a.start_timeout, "--start-timeout")?,
        pin: a.pin,
        progress: !a.quiet,
    };
    let r = loadtest::robots::run(&o).await?;
    print!("{}", loadtest::robots::text(&r));
    if let Some(path) = &a.json {
        #[derive(Serialize)]
        struct Out<'a> {
            command: Vec<String>,
            robots: &'a loadtest::robots::RobotsReport,
        }
        let out = Out {
            command: std::env::args().collect(),
            robots: &r,
        };
        std::fs::write(path, serde_json::to_string_pretty(&out)?)?;
    }
    anyhow::ensure!(r.ok, "the run did not hold: {}", r.failures.join("; "));
    Ok(())
}

#[derive(Args, Clone)]
struct Common {
    /// Gateway URL(s) (ws://127.0.0.1:PORT/ws), comma-separated or repeated.
    #[arg(long, value_delimiter = ',')]
    url: Vec<String>,
    /// JWT secret the gateways check (tokens are minted HS256).
    #[arg(
        long,
        env = "CHORUS_JWT_SECRET",
        default_value = "chorus-loadtest-secret"
    )]
    secret: String,
    /// Admin address (gifts).
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// Admin bearer token.
    #[arg(
        long,
        env = "CHORUS_ADMIN_TOKEN",
        default_value = "chorus-loadtest-admin"
    )]
    admin_token: String,
    /// Server pid(s) for CPU and RSS (found through the URL's port when omitted; when none is
    /// found, CPU and RSS come from the `--admin` node's `process_*` metrics).
    #[arg(long, value_delimiter = ',')]
    server_pid: Vec<u32>,
    /// Spawn the server: `standalone` (the `chorus` binary, see CHORUS_BIN).
    #[arg(long)]
    spawn: Option<String>,
    /// With --spawn standalone: the node runs the room economy (storm coalescing at its
    /// default budget, a rocket every 1,000 coins per room); the report counts combo, merged
    /// and rocket events and times each launch from the gift that filled its level.
    #[arg(long)]
    economy: bool,
    /// Spawn a cluster GxS (gateways × shards), e.g. 2x3.
    #[arg(long)]
    spawn_cluster: Option<String>,
    /// Pin spawned servers to CPU 0 (run the generator under `taskset -c 1`).
    #[arg(long)]
    pin: bool,
    /// The scenario's rate (see each scenario); a default per scenario when omitted.
    #[arg(long)]
    rate: Option<f64>,
    /// Seconds of scheduled sending per run.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seconds of sending at the run's rate before each measured schedule (`rooms`,
    /// `fanout`): its messages must arrive like the rest (a loss fails the run), but their
    /// latency, the CPU and the rate are measured after it, so a cold start (fresh
    /// connections' first buffers, the first burst after the joins) does not decide a run.
    #[arg(long, default_value_t = 0.0)]
    warmup: f64,
    /// Chat message size in bytes.
    #[arg(long, default_value_t = 100)]
    msg_bytes: usize,
    /// Longest wait for outstanding deliveries after the schedule, seconds.
    #[arg(long, default_value_t = 5.0)]
    drain: f64,
    /// Handshakes in flight while connecting.
    #[arg(long, default_value_t = 128)]
    connect_concurrency: usize,
    /// Raise the rate step by step until p99 exceeds --p99-limit-ms or anything is lost.
    /// `rooms` and `fanout` go on until each server fails a step (bounded by
    /// --sweep-max-steps and --sweep-max-secs) unless --sweep-steps is given.
    #[arg(long)]
    sweep: bool,
    /// Rate multiplier between sweep steps.
    #[arg(long, default_value_t = 1.5)]
    sweep_factor: f64,
    /// A fixed number of sweep steps (a cap: the sweep may end with a server still holding);
    /// default 8, except for `rooms` and `fanout`, which sweep until failure.
    #[arg(long)]
    sweep_steps: Option<usize>,
    /// Sweep any scenario until each server fails a step (ignores --sweep-steps).
    #[arg(long)]
    until_fail: bool,
    /// Most steps of a sweep until failure.
    #[arg(long, default_value_t = sweep::DEFAULT_MAX_STEPS)]
    sweep_max_steps: usize,
    /// Longest sweep until failure, seconds (no new step starts after it).
    #[arg(long, default_value_t = 1800.0)]
    sweep_max_secs: f64,
    /// The p99 limit of a sustainable rate, ms.
    #[arg(long, default_value_t = 100.0)]
    p99_limit_ms: f64,
    /// Run against the baseline and Chorus alternately (A B A B …) and report ratios; with
    /// --sweep the two step up together, both at each rate before the next.
    #[arg(long)]
    compare: bool,
    /// The baseline of --compare: `bare` (the plain broadcast server, chat only; the default
    /// for `rooms` and `fanout`), `full` (the baseline with the other scenarios' ops, gift
    /// ledger and tokens; the default for the rest) or `standalone` (a standalone node: with
    /// --spawn-cluster, what the link hop costs).
    #[arg(long, value_parser = ["bare", "full", "standalone"])]
    baseline: Option<String>,
    /// Rounds of --compare (at least 2).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Write the reports as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an SVG latency plot here.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn default_rate(s: &Scenario) -> f64 {
    match s {
        Scenario::Fanout { .. } => 50.0,
        Scenario::Rooms { .. } => 1.0,
        Scenario::Gifts { .. } => 2000.0,
        Scenario::Churn { .. } => 500.0,
        Scenario::Idle { .. } => 0.0,
        Scenario::Reconnect { .. } => 20.0,
        Scenario::Party(_) => 0.5,
    }
}

/// Error codes that make a rate unsustainable (others, e.g. `SEAT_TAKEN`, are answers).
const FAILURE_CODES: [&str; 8] = [
    "CLOSED",
    "TIMEOUT",
    "SEND",
    "RATE_LIMITED",
    "UNAVAILABLE",
    "INTERNAL",
    "INSUFFICIENT_FUNDS",
    "BAD_FRAME_FROM_SERVER",
];

/// The latency spectra one run adds to `--plot`: its deliveries; for a scenario of requests
/// its replies, and its deliveries too when they were timed (a gift storm's events).
fn plot_series(s: &Scenario, r: &Report) -> Vec<(String, report::Latency)> {
    let name = format!("{} rate {:.0}", r.target, r.rate);
    if !s.judged_by_reply() {
        // A party's side traffic is drawn beside its chat.
        let sides = [
            ("gift replies", &r.gift_reply),
            ("gift events", &r.gift_events),
            ("seat replies", &r.seat_reply),
            ("join/leave replies", &r.join_reply),
            ("seat.request replies", &r.seat_request_reply),
            ("seat.approve replies", &r.seat_approve_reply),
            ("seat.kick replies", &r.seat_kick_reply),
        ];
        let mut out = vec![(name.clone(), r.latency.clone())];
        out.extend(
            sides
                .into_iter()
                .filter_map(|(k, l)| l.as_ref().map(|l| (format!("{name} {k}"), l.clone()))),
        );
        return out;
    }
    let mut out = vec![(format!("{name} replies"), r.reply.clone())];
    if r.latency.count > 0 {
        out.push((format!("{name} events"), r.latency.clone()));
    }
    out
}

fn sustainable(s: &Scenario, r: &Report, p99_limit_ms: f64) -> bool {
    // A scenario of requests is judged by its replies, and by its deliveries too where they
    // are timed (a gift storm's events): a rate is not sustainable if the room sees it late.
    // A party is judged by its gift bursts and seat changes as well as by its chat.
    let p99 = if s.judged_by_reply() {
        r.reply.p99_ms.max(r.p99_ms)
    } else {
        r.p99_ms
    }
    .max(r.side_p99_ms());
    let failures: u64 = FAILURE_CODES.iter().filter_map(|c| r.errors.get(*c)).sum();
    p99 <= p99_limit_ms
        && r.lost == 0
        && r.unanswered == 0
        && r.gaps == 0
        && r.closed == 0
        && failures == 0
        && r.balance_mismatches.unwrap_or(0) == 0
        && r.conserved != Some(false)
}

#[derive(Serialize, Default)]
struct Output {
    command: Vec<String>,
    /// The baseline of `--compare`: `bare`, `full` or `standalone`.
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline: Option<&'static str>,
    nproc: usize,
    runs: Vec<Report>,
    sweeps: Vec<SweepResult>,
    ratios: Vec<Ratio>,
}

fn is_loopback_url(u: &str) -> bool {
    u.starts_with("ws://127.0.0.1:") || u.starts_with("ws://localhost:")
}

fn url_port(u: &str) -> Option<u16> {
    let rest = u.strip_prefix("ws://")?;
    let hostport = rest.split('/').next()?;
    hostport.rsplit(':').next()?.parse().ok()
}

async fn make_target(c: &Common) -> anyhow::Result<Target> {
    anyhow::ensure!(
        !c.economy || c.spawn.is_some(),
        "--economy configures a spawned node: give --spawn standalone"
    );
    if let Some(mode) = &c.spawn {
        anyhow::ensure!(mode == "standalone", "--spawn takes `standalone`");
        return target::spawn_standalone(c.secret.as_bytes(), &c.admin_token, c.pin, c.economy)
            .await;
    }
    if let Some(shape) = &c.spawn_cluster {
        let (g, s) = shape
            .split_once('x')
            .context("--spawn-cluster takes GxS, e.g. 2x3")?;
        return target::spawn_cluster(g.parse()?, s.parse()?, c.pin).await;
    }
    anyhow::ensure!(
        !c.url.is_empty(),
        "give --url, --spawn standalone or --spawn-cluster GxS"
    );
    for u in &c.url {
        anyhow::ensure!(is_loopback_url(u), "only 127.0.0.1 targets: {u}");
    }
    let mut pids = c.server_pid.clone();
    if pids.is_empty() {
        pids = c
            .url
            .iter()
            .filter_map(|u| url_port(u).and_then(procfs::pid_listening_on))
            .collect();
    }
    Ok(Target {
        name: "chorus".into(),
        urls: c.url.clone(),
        pids,
        parts: None,
        admin: c.admin,
        admin_token: Some(c.admin_token.clone()),
        secret: Some(c.secret.as_bytes().to_vec()),
        guard: Guard::None,
    })
}

async fn run_scenario(s: Scenario, c: Common) -> anyhow::Result<()> {
    let p = Params {
        duration: Duration::from_secs_f64(c.duration.max(0.1)),
        warmup: Duration::from_secs_f64(c.warmup.max(0.0)),
        msg_bytes: c.msg_bytes.max(24),
        connect_concurrency: c.connect_concurrency,
        drain: Duration::from_secs_f64(c.drain.max(0.0)),
        progress: !c.quiet,
    };
    if let (true, Scenario::Party(shape)) = (c.compare, &s) {
        anyhow::ensure!(
            !shape.changes_seats_or_members(),
            "the baseline server answers seat and membership changes without their events and \
             knows no seat requests: a party with --compare needs --seat-rate 0 --join-rate 0 \
             (and no --seat-requesters)"
        );
    }
    let rate = c.rate.unwrap_or_else(|| default_rate(&s));
    let kind = Baseline::of(&s, &c)?;
    let chorus = make_target(&c).await?;
    let baseline = if c.compare {
        eprintln!("baseline: {}", kind.describe());
        Some(kind.spawn(&s, &c).await?)
    } else {
        None
    };
    let mut out = Output {
        command: std::env::args().collect(),
        nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
        baseline: c.compare.then_some(kind.label()),
        ..Output::default()
    };
    let rounds = if c.compare { c.rounds.max(2) } else { 1 };
    // Idle memory is only honest on a fresh process (a warm allocator reuses freed memory):
    // spawned targets are started again for every round after the first.
    let fresh =
        matches!(s, Scenario::Idle { .. }) && (c.spawn.is_some() || c.spawn_cluster.is_some());
    let mut baseline = baseline;
    let mut chorus = chorus;
    for round in 0..rounds {
        if fresh && round > 0 {
            if baseline.is_some() {
                baseline = Some(kind.spawn(&s, &c).await?);
            }
            chorus = make_target(&c).await?;
        }
        let mut order: Vec<&Target> = Vec::new();
        if let Some(b) = &baseline {
            order.push(b);
        }
        order.push(&chorus);
        if c.sweep {
            out.sweeps.extend(sweep(&s, &order, &p, rate, &c).await?);
            continue;
        }
        for t in order {
            let r = s.run(t, &p, rate).await?;
            if c.compare {
                eprintln!("{}", report::table(&[&r]));
            }
            out.runs.push(r);
        }
    }
    // Summaries.
    let mut cols: Vec<&Report> = out.runs.iter().collect();
    for sw in &out.sweeps {
        if let Some(r) = sw.best().or(sw.steps.first()) {
            cols.push(r);
        }
    }
    println!("== {} ==", s.name());
    println!("{}", report::table(&cols));
    for sw in &out.sweeps {
        println!("{}", sw.line());
    }
    if baseline.is_some() {
        let pick = |name: &str| -> Vec<Report> {
            let mut v: Vec<Report> = out
                .runs
                .iter()
                .filter(|r| r.target == name)
                .cloned()
                .collect();
            for sw in out.sweeps.iter().filter(|s| s.target == name) {
                v.extend(sw.best().cloned());
            }
            v
        };
        let base = kind.target_name();
        out.ratios = ratios(base, &pick(base), &pick(&chorus.name), &out.sweeps);
        println!("{} / {base} (medians over {rounds} rounds):", chorus.name);
        for r in &out.ratios {
            println!(
                "  {:<32} baseline {:>12.3}  chorus {:>12.3}  ratio {:>7.3}",
                r.metric, r.baseline, r.chorus, r.ratio
            );
        }
        // A best rate is a server's ceiling only if a later step failed; else it is a floor.
        for sw in out.sweeps.iter().filter(|sw| sw.failed_rate.is_none()) {
            println!(
                "  note: {} held every step of one round's sweep: its best rate there is a floor, not its ceiling",
                sw.target
            );
        }
    }
    if let Some(path) = &c.plot {
        let mut series = Vec::new();
        let runs = out
            .runs
            .iter()
            .chain(out.sweeps.iter().flat_map(|sw| &sw.steps));
        for r in runs {
            series.extend(plot_series(&s, r));
        }
        report::plot(
            path,
            &format!("{} latency by percentile", s.name()),
            &series,
        )?;
    }
    if let Some(path) = &c.json {
        std::fs::write(path, serde_json::to_string_pretty(&out)?)?;
    }
    drop(baseline);
    drop(chorus);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The baseline server runs on the runtime a spawned `chorus` would (`CHORUS_RUNTIME`,
    // inherited from the generator): a same-run comparison then changes only the server.
    let current_thread = matches!(cli.cmd, Cmd::BaselineServer { .. })
        && std::env::var("CHORUS_RUNTIME").is_ok_and(|v| v == "current-thread");
    let rt = if current_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    }
    .enable_all()
    .build()?;
    rt.block_on(async move {
        match cli.cmd {
            Cmd::BaselineServer {
                addr,
                ledger,
                admin_addr,
                jwt_secret,
                bare,
            } => {
                baseline::run(baseline::Options {
                    addr,
                    ledger,
                    admin: admin_addr,
                    jwt_secret: jwt_secret.map(String::into_bytes),
                    bare,
                })
                .await
            }
            Cmd::Fanout {
                listeners,
                publishers,
                common,
            } => {
                run_scenario(
                    Scenario::Fanout {
                        listeners,
                        publishers,
                    },
                    common,
                )
                .await
            }
            Cmd::Rooms {
                rooms,
                members,
                common,
            } => run_scenario(Scenario::Rooms { rooms, members }, common).await,
            Cmd::Gifts {
                rooms,
                members,
                random_req_ids,
                interleave_rooms,
                common,
            } => {
                let s = Scenario::Gifts {
                    rooms,
                    members,
                    order: Order {
                        random_req_ids,
                        interleave_rooms,
                    },
                };
                run_scenario(s, common).await
            }
            Cmd::Churn {
                conns,
                rooms,
                common,
            } => run_scenario(Scenario::Churn { conns, rooms }, common).await,
            Cmd::Idle {
                conns,
                rooms,
                common,
            } => run_scenario(Scenario::Idle { conns, rooms }, common).await,
            Cmd::Reconnect {
                rooms,
                members,
                common,
            } => run_scenario(Scenario::Reconnect { rooms, members }, common).await,
            Cmd::Robots(a) => run_robots(a).await,
            Cmd::Chaos(a) => {
                let out = loadtest::chaos::run(a.options()?).await?;
                loadtest::chaos::cli::finish(&out)
            }
            Cmd::ChaosCheck { out } => {
                loadtest::chaos::cli::finish(&loadtest::chaos::check_dir(&out)?)
            }
            Cmd::MemberList {
                members,
                samples,
                limit,
                common,
            } => {
                let target = make_target(&common).await?;
                let o = loadtest::members::Options {
                    members,
                    samples,
                    limit,
                    connect_concurrency: common.connect_concurrency,
                };
                let r = loadtest::members::run(&target, &o).await?;
                print!("{}", loadtest::members::text(&r));
                if let Some(path) = &common.json {
                    std::fs::write(path, serde_json::to_string_pretty(&r)?)?;
                }
                Ok(())
            }
            Cmd::Directory(o) => {
                let r = loadtest::directory::run(&o).await?;
                print!("{}", loadtest::directory::text(&r));
                if let Some(path) = &o.json {
                    std::fs::write(path, serde_json::to_vec_pretty(&r)?)?;
                }
                anyhow::ensure!(r.ok, "listing is not flat");
                Ok(())
            }
            Cmd::Party { shape, common } => {
                shape.check()?;
                run_scenario(Scenario::Party(shape), common).await
            }
        }
    })
}

#[cfg(test)]
#[path = "chorus-loadtest/tests.rs"]
mod tests;
