//! The chaos suite (`chorus-loadtest chaos`): a real cluster (2 gateways, 3 shards,
//! redis-server, the SQLite ledger), simulated users doing realistic traffic, a fault schedule
//! drawn from a seed, a recorded history, and checkers over the history, the nodes' audit
//! lines and the ledger afterwards (RELIABILITY.md).
//!
//! A run's directory holds everything the checkers read, so it can be checked again offline:
//! `history.jsonl` (every operation and event), `nodes/*.log` (every node process's log),
//! `ledger.db`, `totals.json`, `inputs.json`, and the `report.json` of the checkers.
//!
//! - [`cluster`]: the processes and the fault proxies between them.
//! - [`sim`]: the simulated users.
//! - [`faults`]: the fault schedule and its execution.
//! - [`history`]: the JSONL history.
//! - [`audit`]: the nodes' audit lines.
//! - [`check`]: the checkers and the summary.
//! - [`cli`]: the command's flags.

pub mod audit;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod faults;
pub mod history;
pub mod sim;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use check::{Inputs, Summary, Verdict};
use faults::FaultKind;
use history::{Kind, Record, Recorder};

/// Coins every simulated user gets at the start: far more than a run spends.
pub const GRANT: i64 = 1_000_000;

/// What a run does.
#[derive(Clone, Debug)]
pub struct ChaosOptions {
    /// Seed of the fault schedule and of the users' choices.
    pub seed: u64,
    /// How long faults are injected (traffic runs throughout, and a calm period after).
    pub duration: Duration,
    /// The run's directory (created; its old files are overwritten).
    pub out: PathBuf,
    /// Rooms.
    pub rooms: usize,
    /// Users per room.
    pub per_room: usize,
    /// Lease TTL of the shards.
    pub ttl: Duration,
    /// The fault kinds to draw from (none: a run without faults).
    pub kinds: Vec<FaultKind>,
    /// Extra environment for the shards (test switches of the broken builds).
    pub shard_env: Vec<(String, String)>,
    /// Extra environment for the first process of each shard only (e.g. a crash switch: a
    /// restarted shard runs without it).
    pub first_shard_env: Vec<(String, String)>,
    /// Test-only: shards renew leases on traffic (the seed bug).
    pub renew_on_traffic: bool,
    /// Users join and then only listen (a quiet run: what renew-on-traffic breaks).
    pub quiet: bool,
    /// How long after the last fault every room must serve again, on top of the TTL.
    pub recovery_bound: Duration,
}

impl ChaosOptions {
    /// Defaults for `seed`, `duration` and `out`: 6 rooms × 4 users, TTL 2 s, every fault kind.
    pub fn new(seed: u64, duration: Duration, out: PathBuf) -> Self {
        Self {
            seed,
            duration,
            out,
            rooms: 6,
            per_room: 4,
            ttl: Duration::from_secs(2),
            kinds: FaultKind::ALL.to_vec(),
            shard_env: Vec::new(),
            first_shard_env: Vec::new(),
            renew_on_traffic: false,
            quiet: false,
            recovery_bound: Duration::from_secs(15),
        }
    }
}

/// Saved beside the history: what the checkers need to know about the run.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct SavedInputs {
    seed: u64,
    ttl_ms: u64,
    grant: i64,
    recovery_bound_ms: u64,
    members: BTreeMap<String, Vec<String>>,
}

/// A run's verdicts and summary.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// One per checker.
    pub verdicts: Vec<Verdict>,
    /// The liveness summary.
    pub summary: Summary,
}

impl Outcome {
    /// Whether every checker passed.
    pub fn passed(&self) -> bool {
        self.verdicts.iter().all(|v| v.violations == 0)
    }

    /// The verdict of checker `n` (1-based, as numbered in [`check`]).
    pub fn verdict(&self, n: usize) -> Option<&Verdict> {
        self.verdicts.get(n.wrapping_sub(1))
    }

    /// A human-readable report.
    pub fn report(&self) -> String {
        let mut s = String::new();
        let s_ = &self.summary;
        s.push_str(&format!(
            "operations: {}  events received: {}\n",
            s_.ops.values().sum::<u64>(),
            s_.events
        ));
        for (k, n) in &s_.ops {
            s.push_str(&format!("  {k}: {n}\n"));
        }
        s.push_str(&format!("faults: {:?}\n", s_.faults));
        s.push_str(&format!(
            "p99 of successful ops: {} ms during faults, {} ms calm\n",
            s_.p99_ms_during_faults, s_.p99_ms_calm
        ));
        s.push_str(&format!(
            "longest outage per fault kind (ms): {:?}\n",
            s_.failover_ms
        ));
        s.push_str(&format!(
            "served again after the faults (ms): {:?}\n",
            s_.served_again_ms
        ));
        for v in &self.verdicts {
            let mark = if v.violations == 0 { "PASS" } else { "FAIL" };
            s.push_str(&format!(
                "[{mark}] {}: {} checked, {} violations, {} excused\n",
                v.name, v.checked, v.violations, v.excused
            ));
            for e in &v.examples {
                s.push_str(&format!("    - {e}\n"));
            }
        }
        s
    }
}

/// Runs the suite and checks it.
///
/// # Errors
/// When the cluster cannot start or a node cannot be restarted; violations are not errors
/// (see [`Outcome::passed`]).
pub async fn run(o: ChaosOptions) -> anyhow::Result<Outcome> {
    std::fs::create_dir_all(&o.out)?;
    let _ = std::fs::remove_dir_all(o.out.join("nodes"));
    let _ = std::fs::remove_file(o.out.join("ledger.db"));
    let mut c = cluster::ChaosCluster::start(
        &o.out,
        3,
        2,
        o.ttl,
        o.shard_env.clone(),
        o.first_shard_env.clone(),
        o.renew_on_traffic,
    )
    .await?;
    let rec = Recorder::create(&o.out.join("history.jsonl"))?;
    let mut start = Record::new(Kind::Phase);
    start.op = Some("start".into());
    start.client = Some(format!("seed={}", o.seed));
    rec.put(&start);
    let sh = sim::Shared {
        urls: c.urls(),
        secret: c.secret.clone(),
        rec: rec.clone(),
        stop: Arc::new(AtomicBool::new(false)),
        storm: Arc::new(AtomicU64::new(0)),
        quiet: o.quiet,
    };
    let users = sim::users(&sh, o.rooms, o.per_room, o.seed);
    let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in 0..o.rooms {
        let list = (0..o.per_room).map(|k| sim::user_id(r, k)).collect();
        members.insert(format!("room-{r}"), list);
    }
    for u in &users {
        grant(&c, u.id()).await?;
    }
    let tasks: Vec<_> = users.into_iter().map(|u| tokio::spawn(u.run())).collect();
    let t0 = Instant::now();
    let plan = faults::schedule(
        o.seed,
        o.duration,
        o.ttl,
        &o.kinds,
        c.shards.len(),
        c.gateways.len(),
        o.rooms,
    );
    faults::run(&mut c, &plan, t0, &sh, o.rooms).await?;
    tokio::time::sleep_until(t0 + o.duration).await;
    c.heal_all().await?;
    let mut end = Record::new(Kind::Phase);
    end.op = Some("faults_end".into());
    rec.put(&end);
    // Calm traffic: rooms fail back and serve again.
    tokio::time::sleep(o.ttl * 2 + Duration::from_secs(4)).await;
    sh.stop.store(true, Ordering::Relaxed);
    let mut users = Vec::new();
    for t in tasks {
        users.push(t.await?);
    }
    let conv: Vec<_> = users
        .into_iter()
        .map(|u| {
            let room = u.room().to_string();
            let m = members.get(&room).cloned().unwrap_or_default();
            tokio::spawn(u.converge(m, Duration::from_secs(30)))
        })
        .collect();
    for t in conv {
        t.await?;
    }
    let mut q = Record::new(Kind::Phase);
    q.op = Some("quiesced".into());
    rec.put(&q);
    wait_sagas_closed(&c.ledger_path(), Duration::from_secs(30)).await;
    let totals = c
        .admin("GET", "/admin/ledger/totals", None)
        .await
        .map(|r| r.json())
        .unwrap_or_default();
    std::fs::write(
        o.out.join("totals.json"),
        serde_json::to_vec_pretty(&totals)?,
    )?;
    c.stop_all();
    rec.flush()?;
    let saved = SavedInputs {
        seed: o.seed,
        ttl_ms: o.ttl.as_millis() as u64,
        grant: GRANT,
        recovery_bound_ms: o.recovery_bound.as_millis() as u64,
        members,
    };
    std::fs::write(
        o.out.join("inputs.json"),
        serde_json::to_vec_pretty(&saved)?,
    )?;
    check_dir(&o.out)
}

/// Checks a run's directory (again): reads its history, node logs, ledger and totals.
///
/// # Errors
/// When a file of the run cannot be read.
pub fn check_dir(dir: &Path) -> anyhow::Result<Outcome> {
    let saved: SavedInputs = serde_json::from_slice(&std::fs::read(dir.join("inputs.json"))?)?;
    let inp = Inputs {
        ttl: Duration::from_millis(saved.ttl_ms),
        grant: saved.grant,
        members: saved.members,
        recovery_bound: Duration::from_millis(saved.recovery_bound_ms),
    };
    let h = history::load(&dir.join("history.jsonl"))?;
    let audit = audit::load(&dir.join("nodes"))?;
    let totals: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("totals.json"))?)?;
    let end = check::read_end_state(&dir.join("ledger.db"), totals)?;
    let w = check::windows(&h);
    let (live, back) = check::liveness(&h, &inp, &w);
    let verdicts = vec![
        check::single_writer(&h, &audit, &inp, &w),
        check::order(&h),
        check::acked_delivered(&h, &w, &end),
        check::gifts_once(&h, &end, &inp),
        check::recovery(&h, &audit, &end),
        check::conservation(&end, &inp),
        live,
        check::faults_took_effect(&audit, &w, &inp),
    ];
    let out = Outcome {
        verdicts,
        summary: check::summary(&h, &w, back),
    };
    std::fs::write(dir.join("report.json"), serde_json::to_vec_pretty(&out)?)?;
    Ok(out)
}

async fn grant(c: &cluster::ChaosCluster, user: &str) -> anyhow::Result<()> {
    let path = format!("/admin/wallets/{user}/grant");
    let body = serde_json::json!({"amount": GRANT, "key": format!("chaos-grant-{user}")});
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.admin("POST", &path, Some(body.clone())).await {
            Ok(r) if r.is_success() => return Ok(()),
            other if Instant::now() >= deadline => {
                anyhow::bail!("granting {user}: {other:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Waits (at most `within`) until the ledger has no saga PENDING or DEBITED: recovery sweeps
/// close what crashes left open.
async fn wait_sagas_closed(ledger: &Path, within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let open = rusqlite::Connection::open_with_flags(
            ledger,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .and_then(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM gift_saga WHERE state IN ('PENDING','DEBITED')",
                [],
                |r| r.get::<_, i64>(0),
            )
        });
        if matches!(open, Ok(0)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
