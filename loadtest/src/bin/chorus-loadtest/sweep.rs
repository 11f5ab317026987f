//! `--sweep`: the rate steps up by `--sweep-factor` until each target fails a step (p99 over
//! the limit or anything lost), or, with a fixed `--sweep-steps`, for that many steps. A sweep
//! that runs until failure is bounded in steps and in time; its record says whether it found
//! the target's ceiling (a failed step) or stopped at the bound with the target still holding.

use std::time::Duration;

use tokio::time::Instant;

use loadtest::report::Report;
use loadtest::scenario::{Params, Scenario};
use loadtest::target::Target;
use serde::Serialize;

use crate::{Common, sustainable};

/// Most steps of a sweep run until failure when `--sweep-max-steps` is not given.
pub(crate) const DEFAULT_MAX_STEPS: usize = 30;

/// Where a sweep stops when its targets keep holding.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound {
    /// Most rates run.
    pub(crate) steps: usize,
    /// No new rate is started after this.
    pub(crate) deadline: Option<Instant>,
}

impl Bound {
    /// `steps` rates, no time limit.
    pub(crate) fn steps(steps: usize) -> Self {
        Self {
            steps,
            deadline: None,
        }
    }

    /// The sweep's bound from the command line: `--sweep-steps` when given (a fixed number of
    /// steps); else, for a scenario swept until failure (`rooms`, `fanout`, or any with
    /// `--until-fail`), `--sweep-max-steps` and `--sweep-max-secs`; else 8 steps.
    pub(crate) fn of(s: &Scenario, c: &Common) -> Self {
        if let Some(n) = c.sweep_steps
            && !c.until_fail
        {
            return Self::steps(n);
        }
        if c.until_fail || matches!(s, Scenario::Rooms { .. } | Scenario::Fanout { .. }) {
            let secs = c.sweep_max_secs.max(1.0);
            return Self {
                steps: c.sweep_max_steps.max(1),
                deadline: Some(Instant::now() + Duration::from_secs_f64(secs)),
            };
        }
        Self::steps(8)
    }
}

/// One target's sweep.
#[derive(Debug)]
pub(crate) struct Swept {
    /// Every step run, in order (the failed one included).
    pub(crate) steps: Vec<Report>,
    /// The index of the last step that held.
    pub(crate) best: Option<usize>,
    /// The rate of the step that failed: the ceiling was found (`None`: the bound came first).
    pub(crate) failed_at: Option<f64>,
}

#[derive(Serialize)]
pub(crate) struct SweepResult {
    pub(crate) target: String,
    pub(crate) scenario: String,
    pub(crate) p99_limit_ms: f64,
    /// Highest rate that met the limit with nothing lost (`None`: not even the first).
    pub(crate) best_rate: Option<f64>,
    pub(crate) best_delivered_per_sec: Option<f64>,
    pub(crate) best_settled_per_sec: Option<f64>,
    pub(crate) best_cpu_us_per_delivery: Option<f64>,
    /// Delivery p99 and p99.9 at the best rate, ms.
    pub(crate) best_p99_ms: Option<f64>,
    pub(crate) best_p999_ms: Option<f64>,
    /// The first rate that failed (the ceiling lies between `best_rate` and this); `None` when
    /// the sweep reached its bound with the target still holding.
    pub(crate) failed_rate: Option<f64>,
    pub(crate) steps: Vec<Report>,
}

impl SweepResult {
    /// The step that held at the best rate.
    pub(crate) fn best(&self) -> Option<&Report> {
        self.best_rate
            .and_then(|b| self.steps.iter().find(|r| r.rate == b))
    }

    /// The summary line.
    pub(crate) fn line(&self) -> String {
        let b = self.best();
        let ceiling = match self.failed_rate {
            Some(f) => format!("failed at rate {f:.2} (ceiling found)"),
            None => "held every step up to the sweep's bound (ceiling not found)".to_owned(),
        };
        format!(
            "sweep {}: best rate {:?} (delivered/s {:?}, settled/s {:?}, cpu µs/delivery {:?}, p99 {:?} ms, p99.9 {:?} ms) at p99 ≤ {} ms; {ceiling}",
            self.target,
            self.best_rate,
            self.best_delivered_per_sec.map(f64::round),
            self.best_settled_per_sec.map(f64::round),
            self.best_cpu_us_per_delivery,
            b.map(|r| r.p99_ms),
            b.map(|r| r.p999_ms),
            self.p99_limit_ms,
        )
    }
}

/// Sweeps `targets` together: at each rate every target still holding runs once, in the order
/// given, before the rate goes up, so that with `--compare` the baseline and Chorus meet the
/// same minutes of a noisy host. A target stops at its first step over the limit; the sweep
/// ends when every target has stopped or at `bound` (its steps, or its deadline, checked
/// before each new rate). `run` runs target `i` at a rate and says whether it held.
pub(crate) async fn sweep_together<F, Fut>(
    targets: usize,
    start: f64,
    factor: f64,
    bound: Bound,
    mut run: F,
) -> anyhow::Result<Vec<Swept>>
where
    F: FnMut(usize, f64) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<(Report, bool)>>,
{
    let mut out: Vec<Swept> = (0..targets)
        .map(|_| Swept {
            steps: Vec::new(),
            best: None,
            failed_at: None,
        })
        .collect();
    let mut rate = start;
    for step in 0..bound.steps.max(1) {
        if step > 0 && bound.deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        for (i, t) in out.iter_mut().enumerate() {
            if t.failed_at.is_some() {
                continue;
            }
            let (r, ok) = run(i, rate).await?;
            t.steps.push(r);
            if ok {
                t.best = Some(t.steps.len() - 1);
            } else {
                t.failed_at = Some(rate);
            }
        }
        if out.iter().all(|t| t.failed_at.is_some()) {
            break;
        }
        rate *= factor.max(1.01);
    }
    Ok(out)
}

/// One round of `--sweep` over `targets`, stepped together ([`sweep_together`]).
pub(crate) async fn sweep(
    s: &Scenario,
    targets: &[&Target],
    p: &Params,
    start: f64,
    c: &Common,
) -> anyhow::Result<Vec<SweepResult>> {
    let swept = sweep_together(
        targets.len(),
        start,
        c.sweep_factor,
        Bound::of(s, c),
        |i, rate| async move {
            let t = targets[i];
            let r = s.run(t, p, rate).await?;
            let ok = sustainable(s, &r, c.p99_limit_ms);
            eprintln!("{}", step_line(t, s, rate, &r, ok));
            Ok((r, ok))
        },
    )
    .await?;
    Ok(targets
        .iter()
        .zip(swept)
        .map(|(t, sw)| {
            let b = sw.best.and_then(|i| sw.steps.get(i));
            SweepResult {
                target: t.name.clone(),
                scenario: s.name().to_owned(),
                p99_limit_ms: c.p99_limit_ms,
                best_rate: b.map(|r| r.rate),
                best_delivered_per_sec: b.map(|r| r.delivered_per_sec),
                best_settled_per_sec: b.and_then(|r| r.settled_per_sec),
                best_cpu_us_per_delivery: b.and_then(|r| r.cpu_us_per_delivery),
                best_p99_ms: b.map(|r| r.p99_ms),
                best_p999_ms: b.map(|r| r.p999_ms),
                failed_rate: sw.failed_at,
                steps: sw.steps,
            }
        })
        .collect())
}

/// The progress line of one step: its rate, throughput, p99 and p99.9, how busy the server's
/// core(s) and the generator were, what was lost, and the verdict.
fn step_line(t: &Target, s: &Scenario, rate: f64, r: &Report, ok: bool) -> String {
    // A party's gift bursts and seat changes count too.
    let side = r.side_p99_ms();
    let sides = if side > 0.0 {
        format!(" gifts/seats p99 {side:.2} ms")
    } else {
        String::new()
    };
    // How near its capacity the server ran at this step, and whether the generator did.
    let cores = r
        .server_cores
        .map(|c| format!(" cores busy {c:.2}"))
        .unwrap_or_default();
    let generator = r
        .generator_cores
        .map(|c| format!(" generator {c:.2}"))
        .unwrap_or_default();
    format!(
        "sweep {} {} rate {rate:.1}: delivered/s {:.0} p99 {:.2} ms p99.9 {:.2} ms reply p99 {:.2} ms{sides}{generator}{cores} lost {} errors {:?} -> {}",
        t.name,
        s.name(),
        r.delivered_per_sec,
        r.p99_ms,
        r.p999_ms,
        r.reply.p99_ms,
        r.lost,
        r.errors,
        if ok { "ok" } else { "over the limit" }
    )
}
