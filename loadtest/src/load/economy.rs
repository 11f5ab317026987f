//! What a run's members see of the room economy (PROTOCOL.md section 16): `gift` events that
//! continue a combo streak or carry several orders merged in a storm, `rocket.progress`, and
//! `rocket.launch` timed from the intended send time of the gift order that filled the level.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;
use serde::Serialize;

use super::shared::{HIST_MAX_US, lock, new_histogram};
use crate::report::Latency;

/// The run's economy counters, summed over every connection (each member counts the events it
/// receives).
#[derive(Debug)]
pub struct EconomyCounts {
    gift_events: AtomicU64,
    combo_events: AtomicU64,
    merged_events: AtomicU64,
    merged_orders: AtomicU64,
    progress: AtomicU64,
    launches: AtomicU64,
    launch_latency: Mutex<Histogram<u64>>,
}

impl Default for EconomyCounts {
    fn default() -> Self {
        Self {
            gift_events: AtomicU64::new(0),
            combo_events: AtomicU64::new(0),
            merged_events: AtomicU64::new(0),
            merged_orders: AtomicU64::new(0),
            progress: AtomicU64::new(0),
            launches: AtomicU64::new(0),
            launch_latency: Mutex::new(new_histogram()),
        }
    }
}

impl EconomyCounts {
    /// A `gift` event numbered `combo` in its streak, carrying `merged` orders (1 unless a
    /// storm merged several).
    pub(super) fn gift(&self, combo: u64, merged: u64) {
        self.gift_events.fetch_add(1, Ordering::Relaxed);
        if combo > 1 {
            self.combo_events.fetch_add(1, Ordering::Relaxed);
        }
        if merged > 1 {
            self.merged_events.fetch_add(1, Ordering::Relaxed);
            self.merged_orders.fetch_add(merged, Ordering::Relaxed);
        }
    }

    /// A `rocket.progress` event.
    pub(super) fn progress(&self) {
        self.progress.fetch_add(1, Ordering::Relaxed);
    }

    /// A `rocket.launch` event, `latency_us` after its launching order was due (when known).
    pub(super) fn launch(&self, latency_us: Option<u64>) {
        self.launches.fetch_add(1, Ordering::Relaxed);
        if let Some(us) = latency_us {
            let _ = lock(&self.launch_latency).record(us.clamp(1, HIST_MAX_US));
        }
    }

    /// The counts so far; `None` when the run saw no `gift` or rocket event.
    pub fn report(&self) -> Option<EconomyReport> {
        let r = EconomyReport {
            members: 0,
            gift_events: self.gift_events.load(Ordering::Relaxed),
            combo_events: self.combo_events.load(Ordering::Relaxed),
            merged_events: self.merged_events.load(Ordering::Relaxed),
            merged_orders: self.merged_orders.load(Ordering::Relaxed),
            progress_events: self.progress.load(Ordering::Relaxed),
            launch_events: self.launches.load(Ordering::Relaxed),
            launch: Latency::from_hist(&lock(&self.launch_latency)),
        };
        (r.gift_events + r.progress_events + r.launch_events > 0).then_some(r)
    }
}

/// The economy part of a [`crate::report::Report`]: events received, summed over members.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EconomyReport {
    /// The connections counting these events (0: every connection of the run).
    pub members: usize,
    /// `gift` events received.
    pub gift_events: u64,
    /// Of them, events after the first of a combo streak (`combo` > 1).
    pub combo_events: u64,
    /// Of them, events carrying several orders merged in a storm (`merged` > 1).
    pub merged_events: u64,
    /// Orders carried by the merged events.
    pub merged_orders: u64,
    /// `rocket.progress` events received.
    pub progress_events: u64,
    /// `rocket.launch` events received.
    pub launch_events: u64,
    /// From the intended send time of the order that filled the level to its `rocket.launch`:
    /// the ledger payout of the rewards and the announcement (each member's receipt counts).
    pub launch: Latency,
}

impl EconomyReport {
    /// Rows for the human table: over `window_s` seconds, with `connections` in the run.
    pub fn rows(&self, connections: usize, window_s: f64) -> Vec<(&'static str, String)> {
        let connections = if self.members > 0 {
            self.members
        } else {
            connections
        };
        let per_member_s = |n: u64| {
            if connections == 0 || window_s <= 0.0 {
                0.0
            } else {
                n as f64 / connections as f64 / window_s
            }
        };
        let mut rows = vec![
            (
                "gift events (combo>1 / merged: orders)",
                format!(
                    "{} ({} / {}: {})",
                    self.gift_events, self.combo_events, self.merged_events, self.merged_orders
                ),
            ),
            (
                "gift events/s per member",
                format!("{:.1}", per_member_s(self.gift_events)),
            ),
        ];
        if self.progress_events + self.launch_events > 0 {
            rows.push((
                "rocket progress / launch events",
                format!("{} / {}", self.progress_events, self.launch_events),
            ));
            rows.push((
                "rocket progress events/s per member",
                format!("{:.2}", per_member_s(self.progress_events)),
            ));
        }
        if self.launch.count > 0 {
            rows.push(("rocket launch ms p50/p90/p99/p999/max", self.launch.row()));
        }
        rows
    }
}
