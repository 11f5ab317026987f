use super::*;
use sweep::{Bound, sweep_together};

/// A gift storm is over the limit when its replies are, and when its events are, though
/// its replies came in time; a chat scenario is judged by its deliveries alone.
#[test]
fn a_gift_rate_is_sustainable_only_if_replies_and_events_are_in_time() {
    let gifts = Scenario::Gifts {
        rooms: 1,
        members: 2,
        order: Order::default(),
    };
    let mut r = Report::default();
    r.reply.p99_ms = 20.0;
    r.p99_ms = 30.0;
    assert!(sustainable(&gifts, &r, 50.0));
    r.p99_ms = 70.0;
    assert!(!sustainable(&gifts, &r, 50.0), "events late");
    r.p99_ms = 0.0; // events not timed (random request ids)
    r.reply.p99_ms = 60.0;
    assert!(!sustainable(&gifts, &r, 50.0), "replies late");
    // A request still unanswered when the drain ended has no latency to judge: not held.
    r.reply.p99_ms = 20.0;
    assert!(sustainable(&gifts, &r, 50.0));
    r.unanswered = 1;
    assert!(!sustainable(&gifts, &r, 50.0), "a request unanswered");
    let rooms = Scenario::Rooms {
        rooms: 1,
        members: 2,
    };
    let mut r = Report::default();
    r.reply.p99_ms = 500.0;
    r.p99_ms = 40.0;
    assert!(sustainable(&rooms, &r, 50.0));
}

/// A party's rate holds only while its gift bursts, seat changes and comings and goings are
/// in time too: its chat alone does not decide it.
#[test]
fn a_party_rate_is_judged_by_its_gifts_and_seats_as_well_as_its_chat() {
    // The command's default party.
    let Ok(Cli {
        cmd: Cmd::Party { shape, .. },
    }) = Cli::try_parse_from(["chorus-loadtest", "party"])
    else {
        panic!("`party` parses with its defaults");
    };
    assert!(shape.check().is_ok(), "{shape:?}");
    let party = Scenario::Party(shape);
    let mut r = Report {
        p99_ms: 20.0,
        gift_reply: Some(report::Latency::default()),
        seat_reply: Some(report::Latency::default()),
        ..Report::default()
    };
    assert!(sustainable(&party, &r, 100.0));
    if let Some(g) = r.gift_reply.as_mut() {
        g.p99_ms = 150.0;
    }
    assert!(!sustainable(&party, &r, 100.0), "gift replies late");
    r.gift_reply = None;
    if let Some(s) = r.seat_reply.as_mut() {
        s.p99_ms = 101.0;
    }
    assert!(!sustainable(&party, &r, 100.0), "seat replies late");
    r.seat_reply = None;
    r.join_reply = Some(report::Latency {
        p99_ms: 300.0,
        ..report::Latency::default()
    });
    assert!(!sustainable(&party, &r, 100.0), "joins late");
    r.join_reply = None;
    r.p99_ms = 120.0;
    assert!(!sustainable(&party, &r, 100.0), "chat late");
}

/// A party's ratios include its gift bursts and, as it has no CPU per delivery, its CPU
/// for the same work; other scenarios get no CPU-time ratio.
#[test]
fn a_party_compares_its_gift_bursts_and_its_cpu_for_the_same_work() {
    let run = |target: &str, cpu: f64, gift_p99: f64| Report {
        scenario: "party".into(),
        target: target.into(),
        server_cpu_ms: Some(cpu),
        gift_reply: Some(report::Latency {
            count: 10,
            p99_ms: gift_p99,
            ..report::Latency::default()
        }),
        ..Report::default()
    };
    let got = ratios(
        "baseline",
        &[run("baseline", 100.0, 20.0)],
        &[run("chorus", 80.0, 10.0)],
        &[],
    );
    let ratio = |m: &str| got.iter().find(|r| r.metric == m).map(|r| r.ratio);
    assert_eq!(ratio("server_cpu_ms"), Some(0.8));
    assert_eq!(ratio("gift_reply_p99_ms"), Some(0.5));
    let rooms = |target: &str, cpu: f64| Report {
        scenario: "rooms".into(),
        ..run(target, cpu, 1.0)
    };
    let got = ratios(
        "baseline",
        &[rooms("baseline", 100.0)],
        &[rooms("chorus", 80.0)],
        &[],
    );
    assert!(got.iter().all(|r| r.metric != "server_cpu_ms"));
}

/// Sweeps step together: both targets run at a rate before either runs at the next, a
/// target stops at its first step over the limit while the other goes on, and the sweep
/// ends when both have stopped.
#[tokio::test]
async fn compared_sweeps_alternate_at_every_rate_and_stop_each_target_at_its_limit() {
    // Target 0 holds up to 200, target 1 up to 400.
    let limit = [200.0, 400.0];
    let calls = std::cell::RefCell::new(Vec::new());
    let swept = sweep_together(2, 100.0, 2.0, Bound::steps(8), |i, rate| {
        calls.borrow_mut().push((i, rate));
        let r = Report {
            rate,
            ..Report::default()
        };
        std::future::ready(Ok((r, rate <= limit[i])))
    })
    .await
    .unwrap();
    assert_eq!(
        calls.into_inner(),
        [
            (0, 100.0),
            (1, 100.0),
            (0, 200.0),
            (1, 200.0),
            (0, 400.0),
            (1, 400.0),
            (1, 800.0)
        ]
    );
    let best: Vec<Option<f64>> = swept
        .iter()
        .map(|t| t.best.map(|b| t.steps[b].rate))
        .collect();
    assert_eq!(best, [Some(200.0), Some(400.0)]);
    // Each target's ceiling lies between its best rate and the rate that failed.
    let failed: Vec<Option<f64>> = swept.iter().map(|t| t.failed_at).collect();
    assert_eq!(failed, [Some(400.0), Some(800.0)]);
    assert_eq!(
        swept[1].steps.len(),
        4,
        "the over-limit step is kept in the record"
    );
    // At most `steps` rates are run; a target that fails its first step has no best rate.
    for (holds, want) in [(true, (3, Some(2))), (false, (1, None))] {
        let swept = sweep_together(1, 100.0, 2.0, Bound::steps(3), |_, rate| {
            let r = Report {
                rate,
                ..Report::default()
            };
            std::future::ready(Ok((r, holds)))
        })
        .await
        .unwrap();
        let t = &swept[0];
        assert_eq!((t.steps.len(), t.best), want, "holds {holds}");
        // A target still holding at the bound has no ceiling.
        assert_eq!(t.failed_at.is_some(), !holds, "holds {holds}");
    }
}

/// A sweep until failure keeps stepping while a target holds, but starts no rate after its
/// deadline: a server that never fails cannot make it run forever.
#[tokio::test]
async fn a_sweep_until_failure_stops_at_its_deadline() {
    let bound = Bound {
        steps: 1000,
        deadline: Some(tokio::time::Instant::now()),
    };
    let swept = sweep_together(2, 1.0, 2.0, bound, |_, rate| {
        let r = Report {
            rate,
            ..Report::default()
        };
        std::future::ready(Ok((r, true)))
    })
    .await
    .unwrap();
    for t in &swept {
        assert_eq!((t.steps.len(), t.best, t.failed_at), (1, Some(0), None));
    }
}

/// The scenario and common options of a `rooms` or `gifts` command line.
fn rooms_or_gifts(args: &[&str]) -> (Scenario, Common) {
    let mut all = vec!["chorus-loadtest"];
    all.extend(args);
    match Cli::try_parse_from(all).unwrap().cmd {
        Cmd::Rooms {
            rooms,
            members,
            common,
        } => (Scenario::Rooms { rooms, members }, common),
        Cmd::Gifts { rooms, common, .. } => (
            Scenario::Gifts {
                rooms,
                members: 2,
                order: Order::default(),
            },
            common,
        ),
        _ => panic!("rooms or gifts"),
    }
}

/// `rooms` and `fanout` sweep until failure unless `--sweep-steps` fixes the steps; other
/// scenarios take 8 steps, or sweep until failure with `--until-fail`.
#[test]
fn rooms_and_fanout_sweep_until_failure_unless_the_steps_are_fixed() {
    let bound = |args: &[&str]| {
        let (s, c) = rooms_or_gifts(args);
        let b = Bound::of(&s, &c);
        (b.steps, b.deadline.is_some())
    };
    assert_eq!(
        bound(&["rooms", "--sweep"]),
        (sweep::DEFAULT_MAX_STEPS, true)
    );
    assert_eq!(
        bound(&["rooms", "--sweep", "--sweep-max-steps", "12"]),
        (12, true)
    );
    assert_eq!(
        bound(&["rooms", "--sweep", "--sweep-steps", "4"]),
        (4, false)
    );
    assert_eq!(bound(&["gifts", "--sweep"]), (8, false));
    assert_eq!(
        bound(&["gifts", "--sweep", "--sweep-steps", "3", "--until-fail"]),
        (sweep::DEFAULT_MAX_STEPS, true)
    );
}

/// A gift run plots its replies and, when they were timed, its events; chat its deliveries.
#[test]
fn a_gift_run_plots_replies_and_timed_events() {
    let gifts = Scenario::Gifts {
        rooms: 1,
        members: 2,
        order: Order::default(),
    };
    let mut r = Report {
        target: "chorus".into(),
        rate: 100.0,
        ..Report::default()
    };
    let labels = |s: &Scenario, r: &Report| -> Vec<String> {
        plot_series(s, r).into_iter().map(|(l, _)| l).collect()
    };
    assert_eq!(labels(&gifts, &r), ["chorus rate 100 replies"]);
    r.latency.count = 10;
    assert_eq!(
        labels(&gifts, &r),
        ["chorus rate 100 replies", "chorus rate 100 events"]
    );
    let rooms = Scenario::Rooms {
        rooms: 1,
        members: 2,
    };
    assert_eq!(labels(&rooms, &r), ["chorus rate 100"]);
}

/// `--baseline standalone` compares a cluster with a standalone node of the same build: any
/// scenario may use it; without `--baseline`, chat scenarios get the bare baseline and the
/// rest the full one; the bare one is refused where it cannot serve.
#[test]
fn the_baseline_is_chosen_per_scenario_and_standalone_serves_any() {
    let kind = |args: &[&str]| {
        let (s, c) = rooms_or_gifts(args);
        Baseline::of(&s, &c).map_err(|e| e.to_string())
    };
    let cluster = ["--spawn-cluster", "2x3", "--compare"];
    assert_eq!(kind(&["rooms"]), Ok(Baseline::Bare));
    assert_eq!(kind(&["gifts"]), Ok(Baseline::Full));
    assert_eq!(kind(&["rooms", "--baseline", "full"]), Ok(Baseline::Full));
    for scenario in ["rooms", "gifts"] {
        let mut args = vec![scenario];
        args.extend(cluster);
        args.extend(["--baseline", "standalone"]);
        assert_eq!(kind(&args), Ok(Baseline::Standalone), "{scenario}");
    }
    assert!(kind(&["gifts", "--baseline", "bare"]).is_err_and(|e| e.contains("chat only")));
    assert_eq!(
        (
            Baseline::Standalone.label(),
            Baseline::Standalone.target_name()
        ),
        ("standalone", "standalone")
    );
    assert_eq!(Baseline::Bare.target_name(), "baseline");
}

/// Against a standalone baseline the ratios pair the runs named `standalone` with the
/// cluster's, CPU per delivery at the rate both sweeps held included.
#[test]
fn a_cluster_is_compared_with_the_standalone_runs() {
    let run = |target: &str, rate: f64, cpu: f64| Report {
        scenario: "rooms".into(),
        target: target.into(),
        rate,
        delivered_per_sec: rate * 1000.0,
        cpu_us_per_delivery: Some(cpu),
        ..Report::default()
    };
    let cluster = "chorus-cluster-2x3";
    let got = ratios(
        "standalone",
        &[run("standalone", 1.0, 8.0), run("standalone", 1.0, 10.0)],
        &[run(cluster, 1.0, 12.0), run(cluster, 1.0, 15.0)],
        &[],
    );
    let cpu = got
        .iter()
        .find(|r| r.metric == "cpu_us_per_delivery")
        .unwrap();
    assert_eq!((cpu.baseline, cpu.chorus, cpu.ratio), (9.0, 13.5, 1.5));
    let swept = |target: &str, steps: Vec<Report>, best: f64| SweepResult {
        target: target.into(),
        scenario: "rooms".into(),
        p99_limit_ms: 100.0,
        best_rate: Some(best),
        best_delivered_per_sec: None,
        best_settled_per_sec: None,
        best_cpu_us_per_delivery: None,
        best_p99_ms: None,
        best_p999_ms: None,
        failed_rate: None,
        steps,
    };
    let sweeps = [
        swept(
            "standalone",
            vec![run("standalone", 1.0, 8.0), run("standalone", 2.0, 7.0)],
            2.0,
        ),
        swept(cluster, vec![run(cluster, 1.0, 10.0)], 1.0),
    ];
    let got = ratios("standalone", &[], &[run(cluster, 1.0, 10.0)], &sweeps);
    let at = got
        .iter()
        .find(|r| r.metric == "cpu_us_per_delivery_at_rate_1")
        .unwrap();
    assert_eq!(at.ratio, 1.25);
}
