//! Same-run comparison: which server runs beside Chorus (the bare or full baseline, or a
//! standalone node beside a cluster), the median of each metric over the rounds, and Chorus'
//! ratio to it.

use loadtest::report::Report;
use loadtest::scenario::Scenario;
use loadtest::target::{self, Target};
use serde::Serialize;

use crate::{Common, SweepResult};

/// The server `--compare` alternates with Chorus (`--baseline`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Baseline {
    /// `baseline-server --bare`: chat only (the default for `rooms` and `fanout`).
    Bare,
    /// `baseline-server`: every scenario's ops, a gift ledger and tokens (the default for the
    /// rest).
    Full,
    /// A standalone `chorus` node, so that a cluster (`--spawn-cluster`) is measured against
    /// the same code in one process: its ratios are the cost of the link hop.
    Standalone,
}

impl Baseline {
    /// `--baseline`, or the scenario's default.
    pub(crate) fn of(s: &Scenario, c: &Common) -> anyhow::Result<Self> {
        let chat = matches!(s, Scenario::Rooms { .. } | Scenario::Fanout { .. });
        match c.baseline.as_deref() {
            None if chat => Ok(Self::Bare),
            None | Some("full") => Ok(Self::Full),
            Some("standalone") => Ok(Self::Standalone),
            Some(_) => {
                anyhow::ensure!(
                    chat,
                    "the bare baseline serves chat only: --baseline bare is for rooms and fanout"
                );
                Ok(Self::Bare)
            }
        }
    }

    /// Its name in the JSON output (`baseline`).
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Bare => "bare",
            Self::Full => "full",
            Self::Standalone => "standalone",
        }
    }

    /// The name of its runs (`target` in each report).
    pub(crate) fn target_name(self) -> &'static str {
        match self {
            Self::Bare | Self::Full => "baseline",
            Self::Standalone => "standalone",
        }
    }

    /// What the run prints when it starts.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::Bare => "bare (baseline-server --bare)",
            Self::Full => "full (baseline-server)",
            Self::Standalone => "standalone (chorus standalone: the same code without the link)",
        }
    }

    /// Starts it (pinned with `--pin`, like Chorus).
    pub(crate) async fn spawn(self, s: &Scenario, c: &Common) -> anyhow::Result<Target> {
        match self {
            Self::Bare => target::spawn_bare_baseline(c.pin).await,
            // Gifts need the baseline's ledger, its admin port and users from tokens.
            Self::Full => {
                let secret = s.needs_ledger().then_some(c.secret.as_bytes());
                target::spawn_baseline(c.pin, secret).await
            }
            Self::Standalone => {
                let mut t =
                    target::spawn_standalone(c.secret.as_bytes(), &c.admin_token, c.pin, false)
                        .await?;
                t.name = self.target_name().to_owned();
                Ok(t)
            }
        }
    }
}

#[derive(Serialize, Default)]
pub(crate) struct Ratio {
    pub(crate) metric: String,
    pub(crate) baseline: f64,
    pub(crate) chorus: f64,
    /// chorus / baseline.
    pub(crate) ratio: f64,
}

pub(crate) fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Chorus' ratio to the baseline, whose runs and sweeps are named `base_name`, per metric.
pub(crate) fn ratios(
    base_name: &str,
    base: &[Report],
    chorus: &[Report],
    sweeps: &[SweepResult],
) -> Vec<Ratio> {
    type Get = fn(&Report) -> Option<f64>;
    let metrics: [(&str, Get); 12] = [
        ("delivered_per_sec", |r| Some(r.delivered_per_sec)),
        ("settled_per_sec", |r| r.settled_per_sec),
        ("cpu_us_per_delivery", |r| r.cpu_us_per_delivery),
        ("p99_ms", |r| (r.latency.count > 0).then_some(r.p99_ms)),
        ("p999_ms", |r| (r.latency.count > 0).then_some(r.p999_ms)),
        ("rss_per_conn_bytes", |r| r.rss_per_conn_bytes),
        ("rss_marginal_per_conn_bytes", |r| {
            r.rss_marginal_per_conn_bytes
        }),
        ("resume_ms", |r| r.resume_ms),
        ("reply_p99_ms", |r| {
            (r.reply.count > 0).then_some(r.reply.p99_ms)
        }),
        // A party's side traffic, and its CPU for the same work (it counts only part of what
        // the node delivers, so it has no CPU per delivery).
        ("gift_reply_p99_ms", |r| {
            r.gift_reply.as_ref().map(|l| l.p99_ms)
        }),
        ("gift_events_p99_ms", |r| {
            r.gift_events.as_ref().map(|l| l.p99_ms)
        }),
        ("server_cpu_ms", |r| {
            (r.scenario == "party").then_some(r.server_cpu_ms).flatten()
        }),
    ];
    let mut out = Vec::new();
    for (name, get) in metrics {
        let b = median(base.iter().filter_map(get).collect());
        let c = median(chorus.iter().filter_map(get).collect());
        if let (Some(b), Some(c)) = (b, c)
            && b != 0.0
        {
            out.push(Ratio {
                metric: name.to_owned(),
                baseline: b,
                chorus: c,
                ratio: c / b,
            });
        }
    }
    let best = |target: &str, f: fn(&SweepResult) -> Option<f64>| {
        median(
            sweeps
                .iter()
                .filter(|s| s.target == target)
                .map(|s| f(s).unwrap_or(0.0))
                .collect(),
        )
    };
    let chorus_name = chorus.first().map(|r| r.target.clone()).unwrap_or_default();
    // CPU per delivery falls with rate (writes batch better), so compare it at one rate: the
    // highest rate every sweep sustained.
    let common = sweeps
        .iter()
        .map(|s| s.best_rate.unwrap_or(0.0))
        .fold(f64::INFINITY, f64::min);
    if common.is_finite() && common > 0.0 {
        let at = |target: &str| {
            median(
                sweeps
                    .iter()
                    .filter(|s| s.target == target)
                    .flat_map(|s| s.steps.iter().filter(|r| r.rate == common))
                    .filter_map(|r| r.cpu_us_per_delivery)
                    .collect(),
            )
        };
        if let (Some(b), Some(c)) = (at(base_name), at(&chorus_name))
            && b != 0.0
        {
            out.push(Ratio {
                metric: format!("cpu_us_per_delivery_at_rate_{common}"),
                baseline: b,
                chorus: c,
                ratio: c / b,
            });
        }
    }
    for (name, f) in [
        (
            "sweep_best_rate",
            (|s: &SweepResult| s.best_rate) as fn(&SweepResult) -> Option<f64>,
        ),
        ("sweep_best_delivered_per_sec", |s| s.best_delivered_per_sec),
        ("sweep_best_settled_per_sec", |s| s.best_settled_per_sec),
        ("sweep_best_cpu_us_per_delivery", |s| {
            s.best_cpu_us_per_delivery
        }),
    ] {
        if let (Some(b), Some(c)) = (best(base_name, f), best(&chorus_name, f))
            && b != 0.0
        {
            out.push(Ratio {
                metric: name.to_owned(),
                baseline: b,
                chorus: c,
                ratio: c / b,
            });
        }
    }
    out
}
