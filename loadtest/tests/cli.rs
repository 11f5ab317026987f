//! The `chorus-loadtest` binary end to end: `gifts --compare` spawns a standalone node and the
//! baseline with its gift ledger, runs them in turn, and writes both runs and their ratios;
//! `party` reports each kind of its traffic, and refuses what it cannot run; `--sweep` steps up;
//! `robots` runs robot rooms on one shard and reports their leases.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::process::Command;

/// Runs `chorus-loadtest` with `args` and `--quiet --json <a temp file>`, requires it to
/// succeed, and returns the JSON it wrote.
fn run_json(args: &[&str]) -> serde_json::Value {
    run_json_env(args, &[])
}

/// [`run_json`] with `env` set for the harness (and the nodes it spawns).
fn run_json_env(args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_chorus-loadtest"))
        .envs(env.iter().copied())
        .args(args)
        .args(["--quiet", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
}

/// The string `key` of each object in the JSON array `list`.
fn field_of_each<'a>(list: &'a serde_json::Value, key: &str) -> Vec<&'a str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|r| r[key].as_str().unwrap())
        .collect()
}

/// The number `key` of each object in the JSON array `list`.
fn u64_of_each(list: &serde_json::Value, key: &str) -> Vec<u64> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|r| r[key].as_u64().unwrap())
        .collect()
}

/// Runs `args` for one second with `--compare --rounds 2` ([`run_json`]), requires the runs to
/// alternate baseline and Chorus, and returns the output.
fn compared(args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["--duration", "1", "--compare", "--rounds", "2"]);
    let v = run_json(&all);
    let targets = field_of_each(&v["runs"], "target");
    assert_eq!(targets, ["baseline", "chorus", "baseline", "chorus"]);
    v
}

#[test]
fn gifts_compare_runs_the_baseline_ledger_and_reports_settled_ratios() {
    let v = compared(&[
        "gifts",
        "--spawn",
        "standalone",
        "--rooms",
        "2",
        "--members",
        "3",
        "--rate",
        "60",
    ]);
    let runs = v["runs"].as_array().unwrap();
    for r in runs {
        // Both servers settle every gift, every member gets its event, balances and coins add up.
        assert_eq!(r["settled"], 60, "{r}");
        assert_eq!(
            (r["received"].as_u64(), r["lost"].as_u64()),
            (Some(180), Some(0)),
            "{r}"
        );
        assert_eq!(r["unanswered"], 0, "{r}");
        assert_eq!(r["balance_mismatches"], 0, "{r}");
        assert_eq!(r["balances_checked"], 6, "{r}");
        assert_eq!(r["conserved"], true, "{r}");
        // The server's CPU: per gift, and as a share of a core over the window.
        let cpu = r["server_cpu_ms"].as_f64().unwrap();
        let per_gift = r["cpu_us_per_gift"].as_f64().unwrap();
        assert!((per_gift * 60.0 - cpu * 1000.0).abs() < 1e-6, "{r}");
        let cores = r["server_cores"].as_f64().unwrap();
        assert!((0.0..=2.0).contains(&cores), "{r}");
    }
    let settled = v["ratios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "settled_per_sec")
        .unwrap();
    // Its value is timing (settled over the schedule and the last reply's wait); that both
    // sides have one is the wiring under test.
    let (b, c) = (settled["baseline"].as_f64(), settled["chorus"].as_f64());
    assert!(b.unwrap() > 0.0 && c.unwrap() > 0.0, "{settled}");
}

/// `gifts --economy`: the spawned node merges storms and launches rockets; the report counts
/// the orders merged events carry (so nothing reads as lost), the combo and rocket events, and
/// times the launches; the balance check adds each member's rocket rewards from its statement.
#[test]
fn gifts_with_the_economy_count_combos_storms_and_launches_and_balances_hold() {
    let v = run_json(&[
        "gifts",
        "--spawn",
        "standalone",
        "--economy",
        "--rooms",
        "2",
        "--members",
        "4",
        "--rate",
        "300",
        "--duration",
        "2",
    ]);
    let r = &v["runs"][0];
    assert_eq!(r["settled"], 600, "{r}");
    // Every order reaches every member, one event each or merged into fewer.
    assert_eq!(
        (r["received"].as_u64(), r["lost"].as_u64()),
        (Some(2400), Some(0)),
        "{r}"
    );
    let e = &r["economy"];
    let n = |k: &str| e[k].as_u64().unwrap();
    assert!(n("gift_events") <= 2400, "{e}");
    assert_eq!(
        n("gift_events") - n("merged_events") + n("merged_orders"),
        2400,
        "each order carried once"
    );
    assert!(n("combo_events") > 0, "each sender repeats its gift: {e}");
    // 3,000 coins of fuel per room: at least one launch of 1,000 in each, seen by 4 members.
    assert!(n("launch_events") >= 8, "{e}");
    assert!(n("progress_events") > 0, "{e}");
    assert!(e["launch"]["count"].as_u64().unwrap() >= 8, "timed: {e}");
    assert_eq!(r["balance_mismatches"], 0, "rewards counted: {r}");
    assert_eq!(r["conserved"], true, "{r}");
}

/// `party` from the command line: its JSON carries the side traffic's latencies beside the
/// chat's; sizes it cannot run and `--compare` with seat changes (the baseline has no seats)
/// are refused with a message, before anything is spawned.
#[test]
fn party_writes_each_kind_of_traffic_and_refuses_what_it_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("party.json");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_chorus-loadtest"))
            .args(["party", "--spawn", "standalone", "--rooms", "2"])
            .args(["--members", "2", "--gifters", "1", "--seaters", "1"])
            .args(["--bursts-per-sec", "2", "--burst-gifts", "5"])
            .args(["--seat-rate", "4", "--rate", "2", "--duration", "1"])
            .args(["--listeners", "1", "--join-rate", "4"])
            .args(["--quiet", "--json"])
            .arg(&json)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let text = || {
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    assert!(out.status.success(), "{}", text());
    assert!(text().contains("gift event ms"), "{}", text());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let r = &v["runs"][0];
    assert_eq!(r["scenario"], "party", "{r}");
    // 8 chat messages, 2 bursts of 5 gifts, 4 seat changes, 4 leaves and rejoins.
    assert_eq!(
        (r["sent"].as_u64(), r["unanswered"].as_u64()),
        (Some(26), Some(0)),
        "{r}"
    );
    assert_eq!(r["join_reply"]["count"], 4, "{r}");
    assert_eq!(r["gaps"], 0, "{r}");
    assert_eq!(r["settled"], 10, "{r}");
    assert_eq!(r["gift_reply"]["count"], 10, "{r}");
    assert_eq!(r["gift_events"]["count"], 10, "{r}");
    assert_eq!(r["seat_reply"]["count"], 4, "{r}");
    assert_eq!(r["conserved"], true, "{r}");

    for (extra, says) in [
        (&["--compare"][..], "needs --seat-rate 0 --join-rate 0"),
        (&["--burst-rate", "1"][..], "lasts longer"),
    ] {
        let out = run(extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{extra:?}: {err}"
        );
    }
}

/// `party --compare` without seat or membership changes alternates the baseline (with its gift ledger) and
/// Chorus, and compares the gift bursts as well as the chat.
#[test]
fn party_compare_without_seats_alternates_and_compares_the_gift_bursts() {
    let v = compared(&[
        "party",
        "--spawn",
        "standalone",
        "--rooms",
        "2",
        "--members",
        "2",
        "--gifters",
        "1",
        "--seaters",
        "0",
        "--listeners",
        "0",
        "--join-rate",
        "0",
        "--bursts-per-sec",
        "2",
        "--burst-gifts",
        "5",
        "--seat-rate",
        "0",
        "--rate",
        "2",
    ]);
    let runs = v["runs"].as_array().unwrap();
    for r in runs {
        assert_eq!(
            (r["settled"].as_u64(), r["lost"].as_u64()),
            (Some(10), Some(0)),
            "{r}"
        );
        assert_eq!(r["conserved"], true, "{r}");
    }
    let metrics = field_of_each(&v["ratios"], "metric");
    for m in ["p99_ms", "gift_reply_p99_ms", "gift_events_p99_ms"] {
        assert!(metrics.contains(&m), "{m} in {metrics:?}");
    }
    // CPU time comes from `/proc` in clock ticks (10 ms): in these 1-s rounds the baseline may
    // not use one. A CPU ratio is given whenever the baseline's median measured some, and never
    // one over nothing.
    let baseline_cpu: Vec<f64> = runs
        .iter()
        .filter(|r| r["target"] == "baseline")
        .map(|r| r["server_cpu_ms"].as_f64().unwrap())
        .collect();
    let median = baseline_cpu.iter().sum::<f64>() / baseline_cpu.len() as f64;
    assert_eq!(
        metrics.contains(&"server_cpu_ms"),
        median > 0.0,
        "server_cpu_ms in {metrics:?}, the baseline's CPU {baseline_cpu:?}"
    );
}

/// `rooms --compare` runs the bare baseline by default and says so; the bare baseline serves
/// chat only, so `--baseline bare` is refused for a gift storm.
#[test]
fn rooms_compare_against_the_bare_baseline() {
    let v = compared(&["rooms", "--spawn", "standalone", "--rooms", "2"]);
    assert_eq!(v["baseline"], "bare", "{v}");
    for r in v["runs"].as_array().unwrap() {
        assert_eq!(r["lost"], 0, "{r}");
        assert!(r["p999_ms"].as_f64().unwrap() >= r["p99_ms"].as_f64().unwrap());
    }
    let metrics = field_of_each(&v["ratios"], "metric");
    assert!(metrics.contains(&"p999_ms"), "{metrics:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_chorus-loadtest"))
        .args([
            "gifts",
            "--spawn",
            "standalone",
            "--compare",
            "--baseline",
            "bare",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("the bare baseline serves chat only"),
        "{stderr}"
    );
}

/// `--baseline standalone` alternates a standalone node and a spawned cluster in one run (the
/// link hop's cost): both deliver everything, CPU per delivery is compared, and the cluster's
/// is split by part.
#[test]
fn a_cluster_is_compared_against_a_standalone_node() {
    let v = run_json(&[
        "rooms",
        "--spawn-cluster",
        "1x1",
        "--rooms",
        "2",
        "--members",
        "3",
        "--rate",
        "2",
        "--duration",
        "1",
        "--compare",
        "--rounds",
        "2",
        "--baseline",
        "standalone",
    ]);
    assert_eq!(v["baseline"], "standalone", "{v}");
    let targets = field_of_each(&v["runs"], "target");
    assert_eq!(
        targets,
        [
            "standalone",
            "chorus-cluster-1x1",
            "standalone",
            "chorus-cluster-1x1"
        ]
    );
    for r in v["runs"].as_array().unwrap() {
        assert_eq!(
            (r["lost"].as_u64(), r["received"].as_u64()),
            (Some(0), Some(36)),
            "{r}"
        );
        let total = r["cpu_us_per_delivery"].as_f64().unwrap();
        // A cluster's CPU comes split by part too; the parts add up to the whole (each read
        // in clock ticks of 10 ms, 278 µs per delivery here, at slightly different instants).
        let parts = &r["cpu_parts_us_per_delivery"];
        if r["target"] == "standalone" {
            assert!(parts.is_null(), "{r}");
        } else {
            let sum: f64 = ["gateways", "shards", "redis"]
                .iter()
                .map(|p| parts[p].as_f64().unwrap())
                .sum();
            assert!((sum - total).abs() <= 3.0 * 10_000.0 / 36.0, "{r}");
        }
    }
    let metrics = field_of_each(&v["ratios"], "metric");
    assert!(metrics.contains(&"delivered_per_sec"), "{metrics:?}");
}

/// With `CHORUS_RUNTIME=current-thread` the spawned node and the bare baseline both run every
/// task on one thread, and a compared run still loses nothing.
#[test]
fn a_current_thread_node_and_baseline_lose_nothing() {
    let v = run_json_env(
        &[
            "rooms",
            "--spawn",
            "standalone",
            "--rooms",
            "2",
            "--members",
            "3",
            "--rate",
            "2",
            "--duration",
            "1",
            "--compare",
            "--rounds",
            "2",
        ],
        &[("CHORUS_RUNTIME", "current-thread")],
    );
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4, "{v}");
    for r in runs {
        assert_eq!(
            (r["lost"].as_u64(), r["received"].as_u64()),
            (Some(0), Some(36)),
            "{r}"
        );
    }
}

/// `--sweep` from the command line: the rate rises by `--sweep-factor` for `--sweep-steps`
/// steps while every step holds, each step is printed with how busy the server's core was, and
/// the JSON names the highest rate that held.
#[test]
fn a_gift_sweep_steps_up_and_names_the_highest_rate_that_held() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let started = unix_ms_now();
    let out = Command::new(env!("CARGO_BIN_EXE_chorus-loadtest"))
        .args(["gifts", "--spawn", "standalone", "--rooms", "1"])
        .args(["--members", "2", "--rate", "10", "--duration", "1"])
        .args(["--sweep", "--sweep-factor", "2", "--sweep-steps", "2"])
        // Generous: a loaded CI machine must not turn 20 gifts/s into a failed step.
        .args(["--p99-limit-ms", "5000", "--quiet", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let steps: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("sweep chorus gifts rate"))
        .collect();
    assert_eq!(steps.len(), 2, "{stderr}");
    assert!(
        steps[0].starts_with("sweep chorus gifts rate 10.0:"),
        "{stderr}"
    );
    assert!(
        steps[1].starts_with("sweep chorus gifts rate 20.0:"),
        "{stderr}"
    );
    for s in &steps {
        assert!(s.contains(" cores busy ") && s.ends_with("-> ok"), "{s}");
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let sweep = &v["sweeps"][0];
    assert_eq!(sweep["best_rate"], 20.0, "{sweep}");
    assert_eq!(u64_of_each(&sweep["steps"], "settled"), [10, 20], "{sweep}");
    // Each step says when its schedule started (Unix ms), to match stalls with server logs:
    // within the run, the second after the first step's last gift (its 10th, sent at 0.9 s).
    let ended = unix_ms_now();
    let starts = u64_of_each(&sweep["steps"], "schedule_start_unix_ms");
    assert!(
        started <= starts[0] && starts[0] + 900 <= starts[1] && starts[1] <= ended,
        "{started} {starts:?} {ended}"
    );
}

/// `robots` with 50 rooms for 5 s on a real cluster: every runtime starts once, every renew
/// tick is one round trip for all 50 leases, none is lost, the robots chat; a run that cannot
/// start its rooms in time exits non-zero and says why.
#[test]
fn robots_start_every_room_once_and_renew_all_leases_in_one_round_trip_per_tick() {
    let ttl = ["--lease-ttl-ms", "1000", "--reconcile-ms", "250"];
    let mut args = vec!["robots", "--rooms", "50", "--duration", "5"];
    args.extend(ttl);
    args.extend(["--start-timeout", "60"]);
    let v = run_json(&args);
    let r = &v["robots"];
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["started"], 50, "{r}");
    assert_eq!(r["robot_rooms_running"], 50, "{r}");
    assert_eq!(
        (r["leases_lost"].as_u64(), r["extra_starts"].as_u64()),
        (Some(0), Some(0)),
        "{r}"
    );
    // 5 s at a 1-s TTL is 15 renew ticks; a tick late on a loaded machine moves the ratio a
    // little, a round trip per lease would make it 50.
    let per_tick = r["round_trips_per_tick"].as_f64().unwrap();
    assert!((0.6..=1.4).contains(&per_tick), "{r}");
    let renewed = r["leases_renewed_per_tick"].as_f64().unwrap();
    assert!((30.0..=70.0).contains(&renewed), "{r}");
    // 50 robots speaking every 2 s (2×TTL): 25/s configured; the first message of each comes
    // one interval after its start.
    assert!(r["chat_actions"].as_u64().unwrap() > 0, "{r}");
    assert!(r["shard_cpu_percent"].as_f64().is_some(), "{r}");

    let out = Command::new(env!("CARGO_BIN_EXE_chorus-loadtest"))
        .args([
            "robots",
            "--rooms",
            "50",
            "--duration",
            "1",
            "--lease-ttl-ms",
            "1000",
        ])
        .args([
            "--reconcile-ms",
            "60000",
            "--start-timeout",
            "0.5",
            "--quiet",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("verdict                FAILED"), "{stdout}");
    assert!(
        stderr.contains("not all 50 robot runtimes ran at once"),
        "{stderr}"
    );
}

fn unix_ms_now() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    u64::try_from(now.unwrap().as_millis()).unwrap()
}
