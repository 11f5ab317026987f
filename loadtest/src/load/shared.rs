//! What a run's connections share: the delivery counters and latency histograms, by intended
//! send time and per time slot.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use tokio::time::Instant;

use hdrhistogram::Histogram;
use uuid::{NoContext, Timestamp, Uuid};

/// Largest latency a histogram records, in microseconds (larger values are clamped).
pub(super) const HIST_MAX_US: u64 = 120_000_000;

/// A fresh latency histogram (microseconds, 3 significant digits).
///
/// # Panics
/// Never: the bounds are constants that hdrhistogram accepts.
#[allow(clippy::expect_used)]
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("constant histogram bounds are valid")
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Which events a [`Shared`] counts as deliveries. Every connection tracks every room event's
/// seq whatever this says; a `party` run keeps one `Shared` per kind of traffic, and each counts
/// the deliveries of its own kind only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    /// `chat` events.
    pub chat: bool,
    /// `gift` events.
    pub gift: bool,
}

impl Counted {
    /// Chat and gift events: what every single-kind scenario counts.
    pub const ALL: Self = Self {
        chat: true,
        gift: true,
    };
    /// Chat events only.
    pub const CHAT: Self = Self {
        chat: true,
        gift: false,
    };
    /// Gift events only.
    pub const GIFT: Self = Self {
        chat: false,
        gift: true,
    };
    /// No events (connections whose requests are what is measured).
    pub const NONE: Self = Self {
        chat: false,
        gift: false,
    };
}

/// Run-wide clock, counters and histograms that every connection of a run writes into.
pub struct Shared {
    /// The events counted as deliveries.
    pub counted: Counted,
    /// The run's clock origin: chat texts carry nanoseconds since this instant.
    pub start: Instant,
    /// `start` on the Unix clock (ns): gift request ids carry their intended send time as a
    /// UUIDv7 timestamp, and the order ids of their `gift` events carry it on (PROTOCOL.md).
    start_unix_ns: u128,
    /// Timed chat and gift events received (deliveries).
    pub received: AtomicU64,
    /// Requests handed to writers by the schedule.
    pub sent: AtomicU64,
    /// Replies `ok` to requests nobody waits for.
    pub ok: AtomicU64,
    /// Error replies to requests nobody waits for.
    pub failed: AtomicU64,
    /// Missing sequenced events (sum of seq jumps).
    pub gaps: AtomicU64,
    /// Sequenced events at or below the last seen seq.
    pub duplicates: AtomicU64,
    /// Epoch changes seen on live events.
    pub epoch_changes: AtomicU64,
    /// `room.left` notices received.
    pub room_left: AtomicU64,
    /// Connections whose reader ended (closed by the server or dropped).
    pub closed: AtomicU64,
    /// Nanoseconds since `start` of the latest delivery.
    pub last_delivery_ns: AtomicU64,
    /// Messages intended before this (ns since `start`) are a warm-up's: delivered and
    /// counted, but in no latency figure (0: every message is measured).
    measure_from_ns: AtomicU64,
    /// Deliveries received when the measured schedule began (see `measure_from_ns`).
    received_before_measure: AtomicU64,
    /// The most the schedule's sender ran behind it (ns): a late generator, not the server,
    /// when it is as large as the worst latency.
    pub send_lag_max_ns: AtomicU64,
    /// Delivery latency: receive time − intended send time (µs).
    pub latency: Mutex<Histogram<u64>>,
    /// Reply latency of timed requests: reply time − intended send time (µs).
    pub reply_latency: Mutex<Histogram<u64>>,
    /// Error replies by code (and `CLOSED`, `TIMEOUT`, `SEND` on the client side).
    pub errors: Mutex<BTreeMap<String, u64>>,
    /// The worst latency (µs, deliveries and replies alike) of the messages scheduled in each
    /// [`SLOT_NS`] since `start`: where in the run a stall happened.
    slots: Box<[AtomicU64]>,
    /// Combo, storm and rocket events received.
    pub economy: super::EconomyCounts,
}

/// Width of one [`Shared`] latency slot: 100 ms of schedule.
pub const SLOT_NS: u64 = 100_000_000;
/// Slots kept: the first ten minutes of a run (later samples count in the histograms only).
const SLOTS: usize = 6_000;

impl Shared {
    /// A fresh run starting now, counting chat and gift events.
    pub fn new() -> Arc<Self> {
        Self::counting(Counted::ALL)
    }

    /// A fresh run starting now, counting the deliveries of `counted` only.
    pub fn counting(counted: Counted) -> Arc<Self> {
        let start = Instant::now();
        let start_unix_ns = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Arc::new(Self {
            counted,
            start,
            start_unix_ns,
            received: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            gaps: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            epoch_changes: AtomicU64::new(0),
            room_left: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            last_delivery_ns: AtomicU64::new(0),
            measure_from_ns: AtomicU64::new(0),
            received_before_measure: AtomicU64::new(0),
            send_lag_max_ns: AtomicU64::new(0),
            latency: Mutex::new(new_histogram()),
            reply_latency: Mutex::new(new_histogram()),
            errors: Mutex::new(BTreeMap::new()),
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            economy: super::EconomyCounts::default(),
        })
    }

    /// Nanoseconds since the run's start.
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The Unix time (ms) of `ns` since `start`.
    pub fn unix_ms_at(&self, ns: u64) -> u64 {
        u64::try_from((self.start_unix_ns + u128::from(ns)) / 1_000_000).unwrap_or(u64::MAX)
    }

    /// A UUIDv7 whose timestamp is `intended_ns` (since `start`) on the Unix clock: a gift's
    /// `req_id`, so that its `gift` events can be timed from their order id.
    pub fn v7_at(&self, intended_ns: u64) -> Uuid {
        let unix_ns = self.start_unix_ns + u128::from(intended_ns);
        let secs = u64::try_from(unix_ns / 1_000_000_000).unwrap_or(u64::MAX);
        let nanos = u32::try_from(unix_ns % 1_000_000_000).unwrap_or(0);
        Uuid::new_v7(Timestamp::from_unix(NoContext, secs, nanos))
    }

    /// The intended send time (ns since `start`) of the gift whose order is `order`: the
    /// order id of a gift whose `req_id` was a UUIDv7 begins with that id's millisecond
    /// timestamp (PROTOCOL.md, `gift.send`). `None` for any other id, or a time before `start`.
    /// The millisecond is rounded down, so such a latency reads up to 1 ms high, never low.
    pub fn gift_intended_ns(&self, order: &str) -> Option<u64> {
        let id = Uuid::try_parse(order).ok()?;
        if id.get_version_num() != 8 {
            return None;
        }
        let mut ms = [0u8; 8];
        ms[2..].copy_from_slice(id.as_bytes().get(..6)?);
        let unix_ns = u128::from(u64::from_be_bytes(ms)) * 1_000_000;
        // A gift of the run's first millisecond rounds down to just before `start`.
        if unix_ns + 1_000_000 <= self.start_unix_ns {
            return None;
        }
        u64::try_from(unix_ns.saturating_sub(self.start_unix_ns)).ok()
    }

    /// Counts an error by code.
    pub fn error(&self, code: &str) {
        *lock(&self.errors).entry(code.to_owned()).or_default() += 1;
    }

    /// Requests sent on the schedule with no reply yet, `ok` or error (a failed send counts:
    /// it never gets one).
    pub fn unanswered(&self) -> u64 {
        let replies = self.ok.load(Ordering::Relaxed) + self.failed.load(Ordering::Relaxed);
        self.sent.load(Ordering::Relaxed).saturating_sub(replies)
    }

    /// Errors by code so far.
    pub fn errors(&self) -> BTreeMap<String, u64> {
        lock(&self.errors).clone()
    }

    /// A copy of the delivery latency histogram.
    pub fn latency(&self) -> Histogram<u64> {
        lock(&self.latency).clone()
    }

    /// A copy of the reply latency histogram.
    pub fn reply_latency(&self) -> Histogram<u64> {
        lock(&self.reply_latency).clone()
    }

    /// Leaves the messages intended before `ns` (since `start`) out of the latency figures:
    /// they are a warm-up's.
    pub fn measure_from(&self, ns: u64) {
        self.measure_from_ns.store(ns, Ordering::Relaxed);
    }

    /// Whether a message intended at `intended_ns` counts in the latency figures.
    pub(super) fn measured(&self, intended_ns: u64) -> bool {
        intended_ns >= self.measure_from_ns.load(Ordering::Relaxed)
    }

    /// Notes that the measured schedule begins now: the deliveries received so far are the
    /// warm-up's, out of the rate and CPU figures.
    pub fn begin_measure(&self) {
        let n = self.received.load(Ordering::Relaxed);
        self.received_before_measure.store(n, Ordering::Relaxed);
    }

    /// Deliveries received before the measured schedule began (0 without a warm-up).
    pub fn received_before_measure(&self) -> u64 {
        self.received_before_measure.load(Ordering::Relaxed)
    }

    /// Records a reply latency sample (µs).
    pub fn record_reply_us(&self, us: u64) {
        let _ = lock(&self.reply_latency).record(us.clamp(1, HIST_MAX_US));
    }

    /// Notes `us` as a latency of a message scheduled at `intended_ns`.
    pub(super) fn note_slot(&self, intended_ns: u64, us: u64) {
        let slot = usize::try_from(intended_ns / SLOT_NS).unwrap_or(usize::MAX);
        if let Some(s) = self.slots.get(slot) {
            s.fetch_max(us, Ordering::Relaxed);
        }
    }

    /// The `n` slots of the schedule from `t0_ns` on with the worst latency, worst first, as
    /// (seconds from `t0_ns` to the slot's start, worst latency in ms). The slot that holds
    /// `t0_ns` starts at 0 s, not before it.
    pub fn worst_slots(&self, t0_ns: u64, n: usize) -> Vec<(f64, f64)> {
        let first = usize::try_from(t0_ns / SLOT_NS).unwrap_or(usize::MAX);
        let mut all: Vec<(usize, u64)> = self
            .slots
            .iter()
            .enumerate()
            .skip(first)
            .map(|(i, s)| (i, s.load(Ordering::Relaxed)))
            .filter(|(_, us)| *us > 0)
            .collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        all.into_iter()
            .take(n)
            .map(|(i, us)| {
                let at_ns = ((i as u64 * SLOT_NS) as f64 - t0_ns as f64).max(0.0);
                (at_ns / 1e9, us as f64 / 1000.0)
            })
            .collect()
    }

    /// One event carrying `messages` timed messages (a storm's merged `gift` event carries
    /// several orders; it is timed from its last one's intended time).
    pub(super) fn record_delivery(&self, intended_ns: u64, messages: u64) {
        let now = self.now_ns();
        if self.measured(intended_ns) {
            let us = now.saturating_sub(intended_ns) / 1000;
            self.note_slot(intended_ns, us);
            let _ = lock(&self.latency).record(us.clamp(1, HIST_MAX_US));
        }
        self.received.fetch_add(messages, Ordering::Relaxed);
        self.last_delivery_ns.fetch_max(now, Ordering::Relaxed);
    }
}
