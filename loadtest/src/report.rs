//! What a run measured: the [`Report`] (human table, JSON) and the SVG latency plot.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Percentiles drawn in the latency plot (the x axis is `1 / (1 − p)`, log scale).
const PLOT_PERCENTILES: [f64; 13] = [
    0.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.995, 99.999, 100.0,
];

/// A spawned cluster's CPU per delivery by part, µs: what the hop adds over one process is
/// the gateways' and shards' work beyond it plus the shards' Redis writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CpuParts {
    /// The gateways'.
    pub gateways: f64,
    /// The shards'.
    pub shards: f64,
    /// Redis'.
    pub redis: f64,
}

/// Latency summary in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest.
    pub max_ms: f64,
    /// `(percentile, ms)` points for plots.
    pub spectrum: Vec<(f64, f64)>,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

impl Latency {
    /// `p50 / p90 / p99 / p999 / max` in ms, for the human table.
    pub fn row(&self) -> String {
        format!(
            "{:.2} / {:.2} / {:.2} / {:.2} / {:.2}",
            self.p50_ms, self.p90_ms, self.p99_ms, self.p999_ms, self.max_ms
        )
    }

    /// Summarises a µs histogram.
    pub fn from_hist(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            count: h.len(),
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
            spectrum: PLOT_PERCENTILES
                .iter()
                .map(|p| (*p, ms(h.value_at_quantile(p / 100.0))))
                .collect(),
        }
    }
}

/// One run of one scenario against one target.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// `chorus`, `chorus-cluster` or `baseline`.
    pub target: String,
    /// The scenario's rate parameter (see the scenario's doc).
    pub rate: f64,
    /// Messages (or ops) per second the schedule asked for, in total.
    pub offered_per_sec: f64,
    /// Length of the send schedule, seconds.
    pub duration_s: f64,
    /// Connections open during the run.
    pub connections: usize,
    /// Rooms used.
    pub rooms: usize,
    /// Requests sent on the schedule.
    pub sent: u64,
    /// Replies `ok` to them.
    pub accepted: u64,
    /// Requests sent on the schedule that had no reply, `ok` or error, when the drain ended
    /// (their sends failed, or the server had not answered them yet). Their latency is in no
    /// histogram and their deliveries are not expected, so a sweep step with any is not
    /// sustainable.
    pub unanswered: u64,
    /// Deliveries expected (accepted × room members).
    pub expected: u64,
    /// Deliveries received.
    pub received: u64,
    /// `expected − received` when positive.
    pub lost: u64,
    /// Missing sequenced events (seq gaps) seen by receivers.
    pub gaps: u64,
    /// Duplicate sequenced events.
    pub duplicates: u64,
    /// Connections closed under the generator.
    pub closed: u64,
    /// Error replies (and client-side failures) by code.
    pub errors: BTreeMap<String, u64>,
    /// Deliveries per second (received / time to the last delivery).
    pub delivered_per_sec: f64,
    /// Delivery latency (receive − intended send), ms.
    pub p50_ms: f64,
    /// See `p50_ms`.
    pub p90_ms: f64,
    /// See `p50_ms`.
    pub p99_ms: f64,
    /// See `p50_ms`.
    pub p999_ms: f64,
    /// See `p50_ms`.
    pub max_ms: f64,
    /// Reply latency (reply − intended send) of the scheduled requests.
    pub reply: Latency,
    /// Server CPU time (user + system) during the measured window, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_ms: Option<f64>,
    /// Server CPU time over the wall time of the measured window: 1.0 is one core busy all
    /// along (a cluster's processes add up, and may pass 1.0). How near its capacity the server
    /// ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cores: Option<f64>,
    /// The generator's own CPU time over the wall time of the measured window (chat
    /// scenarios): near 1.0 the generator, not the server, may be what limits the rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generator_cores: Option<f64>,
    /// Server CPU per delivery, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_us_per_delivery: Option<f64>,
    /// A spawned cluster's `cpu_us_per_delivery` by part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_parts_us_per_delivery: Option<CpuParts>,
    /// Server CPU per settled gift, µs (gifts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_us_per_gift: Option<f64>,
    /// Frames per socket write on the `--admin` node during the window (its
    /// `chorus_gateway_frames_out_total` over `chorus_gateway_write_batches_total`): how much
    /// the node's write batching saves in system calls. Absent for a target without those
    /// metrics (the baseline server).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frames_per_write: Option<f64>,
    /// Server RSS before connecting, KiB (idle).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_before_kib: Option<u64>,
    /// Server RSS after every connection joined, KiB (idle).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_after_kib: Option<u64>,
    /// (after − before) / connections, bytes (idle).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_per_conn_bytes: Option<f64>,
    /// RSS growth while the second half of the connections joined, per connection of that
    /// half, bytes: one more member's cost, without what the server spends once (idle).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_marginal_per_conn_bytes: Option<f64>,
    /// Gifts settled (ok replies) (gifts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settled: Option<u64>,
    /// Gifts settled per second (gifts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settled_per_sec: Option<f64>,
    /// Wallets whose final balance was checked (gifts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balances_checked: Option<u64>,
    /// Wallets whose balance is not grant − the cost of its settled gifts, allowing for its
    /// gifts still unanswered at the check (each may or may not have settled) (gifts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balance_mismatches: Option<u64>,
    /// Combo, storm and rocket events the members received (runs with `gift` events).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub economy: Option<crate::load::EconomyReport>,
    /// `GET /admin/ledger/totals` → `conserved` (gifts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conserved: Option<bool>,
    /// Reply latency of the gift bursts' `gift.send` (party; the chat's is `reply`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gift_reply: Option<Latency>,
    /// Delivery latency of the gift bursts' `gift` events (party; the chat's is `latency`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gift_events: Option<Latency>,
    /// Reply latency of the seat changes, `seat.take` and `seat.leave` (party).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seat_reply: Option<Latency>,
    /// Reply latency of the listeners' comings and goings, `room.leave` and `room.join`
    /// (party).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join_reply: Option<Latency>,
    /// Reply latency of the requesters' `seat.request`, from their intended send times (party
    /// with seat requesters; Chorus only: the baseline knows no seat requests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seat_request_reply: Option<Latency>,
    /// Reply latency of the owners' `seat.approve`, from when the `seat.request` event it
    /// answers reached the owner (party with seat requesters; Chorus only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seat_approve_reply: Option<Latency>,
    /// Reply latency of the owners' `seat.kick`, from when the kick was due: the hold after
    /// the approval was seen (party with seat requesters; Chorus only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seat_kick_reply: Option<Latency>,
    /// Seat requests approved: `seat.approve` answered `ok` (party with seat requesters;
    /// Chorus only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seats_approved: Option<u64>,
    /// Requesters taken off their seats: `seat.kick` answered `ok` (party with seat
    /// requesters; Chorus only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seats_kicked: Option<u64>,
    /// Connections resumed (reconnect).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed: Option<u64>,
    /// Time from the reconnect start until every connection resumed, ms (reconnect).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_ms: Option<f64>,
    /// Joins answered `resync: true` (reconnect).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resyncs: Option<u64>,
    /// Events missed while disconnected and neither replayed nor received (reconnect).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_lost: Option<u64>,
    /// The 100 ms stretches of the schedule whose messages (deliveries or replies) waited
    /// longest, worst first: (seconds from the schedule's start, worst latency in ms). A
    /// stall shows as one stretch far above the rest; a saturated server as many.
    pub worst_100ms: Vec<(f64, f64)>,
    /// When the schedule started, on the Unix clock (ms): `worst_100ms` and any other offset
    /// from the start can then be matched with the server's logs and traces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule_start_unix_ms: Option<u64>,
    /// The most the generator's schedule ran behind itself, ms. Latency counts from the
    /// intended send time, so a late generator shows as latency: when this is as large as the
    /// worst latency, the stall was the generator's, not the server's.
    pub send_lag_max_ms: f64,
    /// Delivery latency spectrum, for plots.
    pub latency: Latency,
}

impl Report {
    /// Fills the delivery latency fields from a µs histogram.
    pub fn set_latency(&mut self, h: &Histogram<u64>) {
        let l = Latency::from_hist(h);
        self.p50_ms = l.p50_ms;
        self.p90_ms = l.p90_ms;
        self.p99_ms = l.p99_ms;
        self.p999_ms = l.p999_ms;
        self.max_ms = l.max_ms;
        self.latency = l;
    }

    /// The highest p99 of the traffic a `party` run carries beside its chat (gift replies, gift
    /// events, seat and membership replies, seat requests, approvals and kicks), ms; 0 for
    /// other scenarios.
    pub fn side_p99_ms(&self) -> f64 {
        [
            &self.gift_reply,
            &self.gift_events,
            &self.seat_reply,
            &self.join_reply,
            &self.seat_request_reply,
            &self.seat_approve_reply,
            &self.seat_kick_reply,
        ]
        .into_iter()
        .flatten()
        .map(|l| l.p99_ms)
        .fold(0.0, f64::max)
    }

    /// The rows of the human table.
    pub fn rows(&self) -> Vec<(&'static str, String)> {
        let mut r = vec![
            ("target", self.target.clone()),
            ("scenario", self.scenario.clone()),
            ("rate", format!("{:.1}", self.rate)),
            ("offered/s", format!("{:.0}", self.offered_per_sec)),
            ("duration s", format!("{:.1}", self.duration_s)),
            ("connections", self.connections.to_string()),
            ("rooms", self.rooms.to_string()),
            ("sent", self.sent.to_string()),
            ("accepted", self.accepted.to_string()),
            ("unanswered", self.unanswered.to_string()),
            ("expected", self.expected.to_string()),
            ("received", self.received.to_string()),
            ("lost", self.lost.to_string()),
            ("gaps", self.gaps.to_string()),
            ("duplicates", self.duplicates.to_string()),
            ("closed", self.closed.to_string()),
            ("errors", format!("{:?}", self.errors)),
            ("delivered/s", format!("{:.0}", self.delivered_per_sec)),
            (
                "latency ms p50/p90/p99/p999/max",
                format!(
                    "{:.2} / {:.2} / {:.2} / {:.2} / {:.2}",
                    self.p50_ms, self.p90_ms, self.p99_ms, self.p999_ms, self.max_ms
                ),
            ),
            ("reply ms p50/p90/p99/p999/max", self.reply.row()),
        ];
        let parts = [
            ("gift reply ms p50/p90/p99/p999/max", &self.gift_reply),
            ("gift event ms p50/p90/p99/p999/max", &self.gift_events),
            ("seat reply ms p50/p90/p99/p999/max", &self.seat_reply),
            ("join/leave reply ms p50/p90/p99/p999/max", &self.join_reply),
            (
                "seat.request reply ms p50/p90/p99/p999/max (Chorus only)",
                &self.seat_request_reply,
            ),
            (
                "seat.approve reply ms p50/p90/p99/p999/max (Chorus only)",
                &self.seat_approve_reply,
            ),
            (
                "seat.kick reply ms p50/p90/p99/p999/max (Chorus only)",
                &self.seat_kick_reply,
            ),
        ];
        r.extend(
            parts
                .into_iter()
                .filter_map(|(k, l)| l.as_ref().map(|l| (k, l.row()))),
        );
        let opt = |v: Option<f64>, d: usize| v.map(|v| format!("{v:.d$}"));
        let extra: [(&'static str, Option<String>); 21] = [
            ("server cpu ms", opt(self.server_cpu_ms, 0)),
            ("server cores busy", opt(self.server_cores, 2)),
            ("generator cores busy", opt(self.generator_cores, 2)),
            ("cpu µs/delivery", opt(self.cpu_us_per_delivery, 3)),
            (
                "cpu µs/delivery gateways/shards/redis",
                self.cpu_parts_us_per_delivery
                    .map(|p| format!("{:.3} / {:.3} / {:.3}", p.gateways, p.shards, p.redis)),
            ),
            ("cpu µs/gift", opt(self.cpu_us_per_gift, 1)),
            ("frames/write", opt(self.frames_per_write, 2)),
            ("rss before KiB", self.rss_before_kib.map(|v| v.to_string())),
            ("rss after KiB", self.rss_after_kib.map(|v| v.to_string())),
            ("rss bytes/conn", opt(self.rss_per_conn_bytes, 0)),
            (
                "rss bytes/conn, marginal",
                opt(self.rss_marginal_per_conn_bytes, 0),
            ),
            ("settled", self.settled.map(|v| v.to_string())),
            ("settled/s", opt(self.settled_per_sec, 0)),
            (
                "balances checked",
                self.balances_checked.map(|v| v.to_string()),
            ),
            (
                "balance mismatches",
                self.balance_mismatches.map(|v| v.to_string()),
            ),
            ("conserved", self.conserved.map(|v| v.to_string())),
            ("seats approved", self.seats_approved.map(|v| v.to_string())),
            ("seats kicked", self.seats_kicked.map(|v| v.to_string())),
            ("resumed", self.resumed.map(|v| v.to_string())),
            ("resume ms", opt(self.resume_ms, 1)),
            ("resyncs", self.resyncs.map(|v| v.to_string())),
        ];
        r.extend(extra.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))));
        if let Some(e) = &self.economy {
            r.extend(e.rows(self.connections, self.duration_s));
        }
        if let Some(l) = self.events_lost {
            r.push(("events lost", l.to_string()));
        }
        if !self.worst_100ms.is_empty() {
            let worst: Vec<String> = self
                .worst_100ms
                .iter()
                .map(|(at, ms)| format!("{at:+.1} s {ms:.0} ms"))
                .collect();
            r.push(("worst 100 ms at", worst.join(", ")));
        }
        if let Some(ms) = self.schedule_start_unix_ms {
            r.push(("schedule start unix ms", ms.to_string()));
        }
        r.push(("sender lag max ms", format!("{:.1}", self.send_lag_max_ms)));
        r
    }
}

/// Prints reports side by side (one column per report).
pub fn table(reports: &[&Report]) -> String {
    let mut out = String::new();
    let Some(first) = reports.first() else {
        return out;
    };
    let cols: Vec<Vec<(&'static str, String)>> = reports.iter().map(|r| r.rows()).collect();
    let keys: Vec<&'static str> = first.rows().iter().map(|(k, _)| *k).collect();
    let kw = keys.iter().map(|k| k.chars().count()).max().unwrap_or(0);
    for k in keys {
        let _ = write!(out, "{k:<kw$} ");
        for c in &cols {
            let v = c
                .iter()
                .find(|(ck, _)| *ck == k)
                .map(|(_, v)| v.as_str())
                .unwrap_or("-");
            let _ = write!(out, "| {v:<24} ");
        }
        out.push('\n');
    }
    out
}

/// Draws the latency spectra of `series` (`(label, latency)`) into an SVG file.
///
/// # Errors
/// The file cannot be written.
pub fn plot(path: &Path, title: &str, series: &[(String, Latency)]) -> anyhow::Result<()> {
    use plotters::prelude::*;

    let x_of = |p: f64| (1.0 / (1.0 - (p / 100.0).min(0.999_99))).log10();
    let y_max = series
        .iter()
        .flat_map(|(_, l)| l.spectrum.iter().map(|(_, v)| *v))
        .fold(1.0_f64, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..5.0_f64, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency ms")
        .x_label_formatter(&|x| {
            let p = 100.0 * (1.0 - 10f64.powf(-x));
            format!("{p:.3}")
        })
        .draw()?;
    let palette = [&BLUE, &RED, &GREEN, &MAGENTA, &CYAN, &BLACK];
    for (i, (label, l)) in series.iter().enumerate() {
        let color = palette[i % palette.len()];
        chart
            .draw_series(LineSeries::new(
                l.spectrum.iter().map(|(p, v)| (x_of(*p), *v)),
                color,
            ))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
