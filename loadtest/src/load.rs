//! Lean load connections: one reader task and one writer task per socket.
//!
//! [`crate::client::Client`] drives one socket from one task and waits for each reply; a load
//! generator must instead keep thousands of sockets reading while it sends on a schedule. A
//! [`Conn`] splits its socket: the writer task drains a bounded queue (feeding many frames,
//! flushing once), the reader task parses each frame into borrowed fields, tracks each room's
//! `(epoch, seq)`, records delivery latency into the run's [`Shared`] histograms and answers
//! waiting requests. Latency is measured against **intended** send times, which the sender
//! writes into the chat text (`t=<nanos since the run's start>`), so a stalled sender or server
//! cannot hide its delay (no coordinated omission).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use uuid::{NoContext, Timestamp, Uuid};

/// Frames one connection may have queued for its writer: enough to absorb a burst, bounded so
/// a stalled socket pushes back on the sender (whose intended times then show the delay).
const WRITER_QUEUE: usize = 256;
/// Frames the writer feeds before one flush.
const WRITE_BATCH: usize = 64;
/// The client's WebSocket read buffer: thousands of sockets live in one generator process.
const CLIENT_READ_BUFFER: usize = 8 * 1024;
/// Largest latency a histogram records, in microseconds (larger values are clamped).
const HIST_MAX_US: u64 = 120_000_000;
/// How long one connection keeps retrying upgrades refused with 503 (admission control).
const CONNECT_BUDGET: Duration = Duration::from_secs(30);
/// How long a request waits for its reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// The marker that starts a timed chat text: `t=<nanos since start>`.
pub const TIME_MARKER: &str = "t=";

/// A fresh latency histogram (microseconds, 3 significant digits).
///
/// # Panics
/// Never: the bounds are constants that hdrhistogram accepts.
#[allow(clippy::expect_used)]
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("constant histogram bounds are valid")
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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
            send_lag_max_ns: AtomicU64::new(0),
            latency: Mutex::new(new_histogram()),
            reply_latency: Mutex::new(new_histogram()),
            errors: Mutex::new(BTreeMap::new()),
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
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

    /// Records a reply latency sample (µs).
    pub fn record_reply_us(&self, us: u64) {
        let _ = lock(&self.reply_latency).record(us.clamp(1, HIST_MAX_US));
    }

    /// Notes `us` as a latency of a message scheduled at `intended_ns`.
    fn note_slot(&self, intended_ns: u64, us: u64) {
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

    fn record_delivery(&self, intended_ns: u64) {
        let now = self.now_ns();
        let us = now.saturating_sub(intended_ns) / 1000;
        self.note_slot(intended_ns, us);
        let _ = lock(&self.latency).record(us.clamp(1, HIST_MAX_US));
        self.received.fetch_add(1, Ordering::Relaxed);
        self.last_delivery_ns.fetch_max(now, Ordering::Relaxed);
    }
}

/// An error reply, or a client-side failure named like one (`CLOSED`, `TIMEOUT`, `SEND`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ReplyError {
    /// The wire code.
    pub code: String,
    /// The message.
    #[serde(default)]
    pub msg: String,
}

impl ReplyError {
    fn client(code: &str) -> Self {
        Self {
            code: code.to_owned(),
            msg: String::new(),
        }
    }
}

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.msg)
    }
}

impl std::error::Error for ReplyError {}

/// The parts of a `room.join` reply the generator uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Joined {
    /// Epoch now.
    pub epoch: u64,
    /// Seq now.
    pub seq: u64,
    /// Whether `since` could not be served.
    pub resync: bool,
}

struct Waiter {
    tx: oneshot::Sender<Result<Value, ReplyError>>,
    /// For `room.join`: the room whose position the reply sets (before later events).
    join_room: Option<String>,
}

#[derive(Default)]
struct Inner {
    waiters: HashMap<u64, Waiter>,
    /// Request id → intended send time (ns since start), for reply latency.
    timed: HashMap<u64, u64>,
    /// Timed `room.join` request id → its room (the reply sets the room's position).
    timed_join: HashMap<u64, String>,
    /// Room → (epoch, seq) last seen.
    pos: HashMap<String, (u64, u64)>,
    /// Replies ok to timed requests of this connection.
    ok: u64,
    /// Replayed or live timed events this connection received.
    received: u64,
    closed: bool,
}

/// One load connection (reader and writer tasks); tasks are aborted on drop.
pub struct Conn {
    /// The user id in the token.
    pub user: String,
    tx: mpsc::Sender<Message>,
    next_id: AtomicU64,
    inner: Arc<Mutex<Inner>>,
    shared: Arc<Shared>,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
    }
}

/// Connects to `url` as `user` (with `token` in the Authorization header when given).
///
/// # Errors
/// The upgrade failed.
pub async fn connect(
    url: &str,
    user: &str,
    token: Option<&str>,
    shared: Arc<Shared>,
) -> anyhow::Result<Conn> {
    let mut req = url.into_client_request()?;
    if let Some(t) = token {
        req.headers_mut()
            .insert("authorization", format!("Bearer {t}").parse()?);
    }
    let config = WebSocketConfig::default()
        .read_buffer_size(CLIENT_READ_BUFFER)
        .write_buffer_size(0);
    // A node's admission control answers 503 to a burst of new connections: retry with a
    // short backoff, as a client would (bounded in attempts and time).
    let deadline = Instant::now() + CONNECT_BUDGET;
    let mut attempt: u64 = 0;
    let ws = loop {
        let r = timeout(
            Duration::from_secs(20),
            tokio_tungstenite::connect_async_with_config(req.clone(), Some(config), true),
        )
        .await
        .map_err(|_| anyhow::anyhow!("connect to {url} timed out"))?;
        match r {
            Ok((ws, _)) => break ws,
            Err(tungstenite::Error::Http(resp))
                if resp.status().as_u16() == 503 && Instant::now() < deadline =>
            {
                shared.error("ADMISSION_RETRY");
                attempt += 1;
                let backoff = 50 * attempt.min(10) + (shared.now_ns() % 50_000_000) / 1_000_000;
                tokio::time::sleep(Duration::from_millis(backoff)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = mpsc::channel::<Message>(WRITER_QUEUE);
    let writer = tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let closing = matches!(first, Message::Close(_));
            if sink.feed(first).await.is_err() {
                return;
            }
            let mut n = 1;
            while n < WRITE_BATCH {
                match rx.try_recv() {
                    Ok(m) => {
                        if sink.feed(m).await.is_err() {
                            return;
                        }
                        n += 1;
                    }
                    Err(_) => break,
                }
            }
            if sink.flush().await.is_err() || closing {
                return;
            }
        }
    });
    let inner = Arc::new(Mutex::new(Inner::default()));
    let reader = {
        let inner = inner.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            while let Some(Ok(msg)) = stream.next().await {
                match msg {
                    Message::Text(t) => on_frame(&shared, &inner, t.as_str()),
                    Message::Close(_) => break,
                    _ => {}
                }
            }
            let waiters: Vec<Waiter> = {
                let mut g = lock(&inner);
                g.closed = true;
                g.waiters.drain().map(|(_, w)| w).collect()
            };
            for w in waiters {
                let _ = w.tx.send(Err(ReplyError::client("CLOSED")));
            }
            shared.closed.fetch_add(1, Ordering::Relaxed);
        })
    };
    Ok(Conn {
        user: user.to_owned(),
        tx,
        next_id: AtomicU64::new(1),
        inner,
        shared,
        reader,
        writer,
    })
}

#[derive(Deserialize)]
struct Lite<'a> {
    #[serde(borrow, default)]
    ev: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    room: Option<Cow<'a, str>>,
    #[serde(default)]
    epoch: Option<u64>,
    #[serde(default)]
    seq: Option<u64>,
    #[serde(default)]
    re: Option<u64>,
    #[serde(borrow, default)]
    ok: Option<&'a RawValue>,
    #[serde(default)]
    err: Option<ReplyError>,
    #[serde(borrow, default)]
    d: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ChatD<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

/// The part of a `gift` event's `d` the reader times it by.
#[derive(Deserialize)]
struct GiftD<'a> {
    #[serde(borrow, default)]
    order: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct JoinLite {
    #[serde(default)]
    epoch: u64,
    #[serde(default)]
    seq: u64,
}

/// The intended send time carried by a timed text, if any.
pub fn parse_marker(text: &str) -> Option<u64> {
    let rest = text.strip_prefix(TIME_MARKER)?;
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// A timed chat text of `len` bytes (at least the marker): `t=<ns> xxxx…`.
pub fn timed_text(intended_ns: u64, len: usize) -> String {
    let mut s = format!("{TIME_MARKER}{intended_ns} ");
    while s.len() < len {
        s.push('x');
    }
    s
}

fn on_frame(shared: &Shared, inner: &Mutex<Inner>, text: &str) {
    let Ok(f) = serde_json::from_str::<Lite<'_>>(text) else {
        shared.error("BAD_FRAME_FROM_SERVER");
        return;
    };
    if let Some(ev) = f.ev.as_deref() {
        on_event(shared, inner, ev, &f);
        return;
    }
    let Some(re) = f.re else {
        if let Some(e) = f.err {
            shared.error(&e.code);
        }
        return;
    };
    let mut g = lock(inner);
    if let Some(w) = g.waiters.remove(&re) {
        let result = match (f.err, f.ok) {
            (Some(e), _) => Err(e),
            (None, Some(ok)) => {
                if let Some(room) = &w.join_room
                    && let Ok(j) = serde_json::from_str::<JoinLite>(ok.get())
                {
                    g.pos.insert(room.clone(), (j.epoch, j.seq));
                }
                Ok(serde_json::from_str(ok.get()).unwrap_or(Value::Null))
            }
            (None, None) => Ok(Value::Null),
        };
        drop(g);
        let _ = w.tx.send(result);
        return;
    }
    let timed = g.timed.remove(&re);
    let join_room = g.timed_join.remove(&re);
    if f.err.is_none() {
        g.ok += 1;
        if let (Some(room), Some(ok)) = (join_room, f.ok)
            && let Ok(j) = serde_json::from_str::<JoinLite>(ok.get())
        {
            g.pos.insert(room, (j.epoch, j.seq));
        }
    }
    drop(g);
    if let Some(intended) = timed {
        let us = shared.now_ns().saturating_sub(intended) / 1000;
        shared.note_slot(intended, us);
        let _ = lock(&shared.reply_latency).record(us.clamp(1, HIST_MAX_US));
    }
    match f.err {
        Some(e) => {
            shared.failed.fetch_add(1, Ordering::Relaxed);
            shared.error(&e.code);
        }
        None => {
            shared.ok.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn on_event(shared: &Shared, inner: &Mutex<Inner>, ev: &str, f: &Lite<'_>) {
    if ev == "room.left" {
        shared.room_left.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let (Some(room), Some(epoch), Some(seq)) = (f.room.as_deref(), f.epoch, f.seq) else {
        return;
    };
    {
        let mut g = lock(inner);
        match g.pos.get_mut(room) {
            None => {
                g.pos.insert(room.to_owned(), (epoch, seq));
            }
            Some(p) if p.0 != epoch => {
                shared.epoch_changes.fetch_add(1, Ordering::Relaxed);
                *p = (epoch, seq);
            }
            Some(p) if seq <= p.1 => {
                shared.duplicates.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Some(p) => {
                if seq > p.1 + 1 {
                    shared.gaps.fetch_add(seq - p.1 - 1, Ordering::Relaxed);
                }
                p.1 = seq;
            }
        }
        if (ev == "chat" && shared.counted.chat) || (ev == "gift" && shared.counted.gift) {
            g.received += 1;
        }
    }
    match ev {
        "chat" if shared.counted.chat => {
            let intended =
                f.d.and_then(|d| serde_json::from_str::<ChatD<'_>>(d.get()).ok())
                    .and_then(|d| d.text.as_deref().and_then(parse_marker));
            match intended {
                Some(t) => shared.record_delivery(t),
                None => {
                    shared.received.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        "gift" if shared.counted.gift => {
            let intended =
                f.d.and_then(|d| serde_json::from_str::<GiftD<'_>>(d.get()).ok())
                    .and_then(|d| d.order.as_deref().and_then(|o| shared.gift_intended_ns(o)));
            match intended {
                Some(t) => shared.record_delivery(t),
                None => {
                    shared.received.fetch_add(1, Ordering::Relaxed);
                    shared
                        .last_delivery_ns
                        .fetch_max(shared.now_ns(), Ordering::Relaxed);
                }
            }
        }
        _ => {}
    }
}

impl Conn {
    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn frame(id: u64, op: &str, d: &Value) -> Message {
        Message::Text(format!(r#"{{"id":{id},"op":"{op}","d":{d}}}"#).into())
    }

    /// Sends a request and waits for its reply.
    ///
    /// # Errors
    /// The error reply, or `CLOSED`/`TIMEOUT`/`SEND`.
    pub async fn request(&self, op: &str, d: Value) -> Result<Value, ReplyError> {
        self.request_inner(op, d, None).await
    }

    async fn request_inner(
        &self,
        op: &str,
        d: Value,
        join_room: Option<String>,
    ) -> Result<Value, ReplyError> {
        let id = self.next_id();
        let (tx, rx) = oneshot::channel();
        {
            let mut g = lock(&self.inner);
            if g.closed {
                return Err(ReplyError::client("CLOSED"));
            }
            g.waiters.insert(id, Waiter { tx, join_room });
        }
        if self.tx.send(Self::frame(id, op, &d)).await.is_err() {
            lock(&self.inner).waiters.remove(&id);
            return Err(ReplyError::client("SEND"));
        }
        match timeout(REPLY_TIMEOUT, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(ReplyError::client("CLOSED")),
            Err(_) => {
                lock(&self.inner).waiters.remove(&id);
                Err(ReplyError::client("TIMEOUT"))
            }
        }
    }

    /// `room.join` (resuming from `since` when given); the reader sets the room's position
    /// from the reply before it handles any later event.
    ///
    /// # Errors
    /// As [`Conn::request`].
    pub async fn join(&self, room: &str, since: Option<(u64, u64)>) -> Result<Joined, ReplyError> {
        let mut d = serde_json::json!({ "room": room });
        if let Some((epoch, seq)) = since {
            d["since"] = serde_json::json!({ "epoch": epoch, "seq": seq });
        }
        let ok = self
            .request_inner("room.join", d, Some(room.to_owned()))
            .await?;
        Ok(Joined {
            epoch: ok["epoch"].as_u64().unwrap_or_default(),
            seq: ok["seq"].as_u64().unwrap_or_default(),
            resync: ok["resync"].as_bool().unwrap_or_default(),
        })
    }

    /// Sends `op` without waiting; the reply is counted in [`Shared`] and its latency measured
    /// from `intended_ns`. Waits when the writer queue is full (the delay shows in latency).
    ///
    /// # Errors
    /// `SEND` when the connection is gone.
    pub async fn send_timed(
        &self,
        op: &str,
        d: &Value,
        intended_ns: u64,
    ) -> Result<(), ReplyError> {
        let id = self.next_id();
        lock(&self.inner).timed.insert(id, intended_ns);
        self.shared.sent.fetch_add(1, Ordering::Relaxed);
        if self.tx.send(Self::frame(id, op, d)).await.is_err() {
            lock(&self.inner).timed.remove(&id);
            self.shared.error("SEND");
            return Err(ReplyError::client("SEND"));
        }
        Ok(())
    }

    /// Sends `room.join` for `room` without waiting, like [`Conn::send_timed`]; the reply sets
    /// the room's tracked position.
    ///
    /// # Errors
    /// `SEND` when the connection is gone.
    pub async fn send_timed_join(&self, room: &str, intended_ns: u64) -> Result<(), ReplyError> {
        let id = self.next_id();
        {
            let mut g = lock(&self.inner);
            g.timed.insert(id, intended_ns);
            g.timed_join.insert(id, room.to_owned());
        }
        self.shared.sent.fetch_add(1, Ordering::Relaxed);
        let frame = Self::frame(id, "room.join", &serde_json::json!({ "room": room }));
        if self.tx.send(frame).await.is_err() {
            let mut g = lock(&self.inner);
            g.timed.remove(&id);
            g.timed_join.remove(&id);
            drop(g);
            self.shared.error("SEND");
            return Err(ReplyError::client("SEND"));
        }
        Ok(())
    }

    /// Sends a pre-built text frame body (`{"room":..,"text":..}` style `d` already encoded)
    /// for `chat.send`; cheaper than building a `Value` per message.
    ///
    /// # Errors
    /// `SEND` when the connection is gone.
    pub async fn send_chat(
        &self,
        room: &str,
        intended_ns: u64,
        len: usize,
    ) -> Result<(), ReplyError> {
        let id = self.next_id();
        lock(&self.inner).timed.insert(id, intended_ns);
        self.shared.sent.fetch_add(1, Ordering::Relaxed);
        let text = timed_text(intended_ns, len);
        let frame =
            format!(r#"{{"id":{id},"op":"chat.send","d":{{"room":"{room}","text":"{text}"}}}}"#);
        if self.tx.send(Message::Text(frame.into())).await.is_err() {
            lock(&self.inner).timed.remove(&id);
            self.shared.error("SEND");
            return Err(ReplyError::client("SEND"));
        }
        Ok(())
    }

    /// Sets `room`'s tracked position (e.g. to the position a resumed connection had).
    pub fn set_position(&self, room: &str, epoch: u64, seq: u64) {
        lock(&self.inner).pos.insert(room.to_owned(), (epoch, seq));
    }

    /// `room`'s tracked `(epoch, seq)`.
    pub fn position(&self, room: &str) -> Option<(u64, u64)> {
        lock(&self.inner).pos.get(room).copied()
    }

    /// Replies `ok` to this connection's timed requests.
    pub fn ok_count(&self) -> u64 {
        lock(&self.inner).ok
    }

    /// Chat and gift events this connection received.
    pub fn received(&self) -> u64 {
        lock(&self.inner).received
    }

    /// Timed requests still waiting for their reply.
    pub fn in_flight(&self) -> usize {
        lock(&self.inner).timed.len()
    }

    /// Whether the reader ended.
    pub fn is_closed(&self) -> bool {
        lock(&self.inner).closed
    }

    /// Asks for a clean close and waits (bounded) for the writer to send it.
    pub async fn close(self) {
        if self.tx.try_send(Message::Close(None)).is_ok() {
            let _ = timeout(Duration::from_secs(2), async {
                while !self.writer.is_finished() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await;
        }
    }
}

/// Connects every `(user, url, token)` with at most `concurrency` handshakes in flight; the
/// result keeps the input order.
///
/// # Errors
/// The first failed connection.
pub async fn connect_many(
    specs: Vec<(String, String, Option<String>)>,
    concurrency: usize,
    shared: &Arc<Shared>,
) -> anyhow::Result<Vec<Conn>> {
    let futs = specs.into_iter().map(|(user, url, token)| {
        let shared = shared.clone();
        async move { connect(&url, &user, token.as_deref(), shared).await }
    });
    futures_util::stream::iter(futs)
        .buffered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// Closes every connection cleanly (bounded), concurrently.
pub async fn close_all(conns: Vec<Conn>) {
    let futs = conns.into_iter().map(Conn::close);
    futures_util::stream::iter(futs)
        .buffer_unordered(512)
        .collect::<Vec<_>>()
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request is unanswered until its reply, `ok` or error, comes; a failed send never gets
    /// one.
    #[test]
    fn requests_are_unanswered_until_a_reply_of_either_kind() {
        let s = Shared::new();
        s.sent.fetch_add(4, Ordering::Relaxed);
        assert_eq!(s.unanswered(), 4);
        s.ok.fetch_add(2, Ordering::Relaxed);
        s.failed.fetch_add(1, Ordering::Relaxed);
        assert_eq!(s.unanswered(), 1);
        s.ok.fetch_add(1, Ordering::Relaxed);
        assert_eq!(s.unanswered(), 0);
    }

    /// The worst stretches come worst first, timed from the schedule's start; stretches
    /// before it (connecting, joining) and empty ones are left out.
    #[test]
    fn the_worst_stretches_are_listed_worst_first_from_the_schedules_start() {
        let s = Shared::new();
        let t0 = 2 * SLOT_NS + SLOT_NS / 2;
        s.note_slot(SLOT_NS, 900_000); // before the schedule: not listed
        s.note_slot(3 * SLOT_NS + 1, 5_000);
        s.note_slot(3 * SLOT_NS + 2, 80_000); // the same stretch: its worst counts
        s.note_slot(7 * SLOT_NS, 20_000);
        s.note_slot(9 * SLOT_NS, 1_000);
        let worst = s.worst_slots(t0, 2);
        assert_eq!(worst.len(), 2);
        assert!((worst[0].0 - 0.05).abs() < 1e-9 && (worst[0].1 - 80.0).abs() < 1e-9);
        assert!((worst[1].0 - 0.45).abs() < 1e-9 && (worst[1].1 - 20.0).abs() < 1e-9);
        // The stretch the schedule starts in is timed from its start, never before it.
        s.note_slot(t0 + 1, 500_000);
        let first = s.worst_slots(t0, 1);
        assert!(
            first[0].0 == 0.0 && (first[0].1 - 500.0).abs() < 1e-9,
            "{first:?}"
        );
        // Past the kept stretches: counted in the histograms only, never a panic.
        s.note_slot(u64::MAX, 1);
    }

    /// The order id the server makes from a UUIDv7 `req_id` (PROTOCOL.md, `gift.send`): its
    /// 48-bit millisecond timestamp, then the rest of a hash, as version 8.
    fn order_of(req_id: Uuid) -> Uuid {
        let mut bytes = *Uuid::new_v5(&Uuid::NAMESPACE_OID, b"any sender").as_bytes();
        bytes[..6].copy_from_slice(&req_id.as_bytes()[..6]);
        Uuid::new_v8(bytes)
    }

    #[test]
    fn a_gifts_intended_send_time_comes_back_from_its_order_id_rounded_down_to_its_ms() {
        let s = Shared::new();
        for intended in [0, 1, 999_999, 1_000_000, 2_345_678_901, 3_600_000_000_000] {
            let req_id = s.v7_at(intended);
            assert_eq!(req_id.get_version_num(), 7);
            let got = s
                .gift_intended_ns(&order_of(req_id).to_string())
                .unwrap_or_else(|| panic!("no time for {intended}"));
            assert!(
                got <= intended && intended - got < 1_000_000,
                "{intended} -> {got}"
            );
        }
        // Not a time-ordered order id, or one from before the run: not timed.
        let req_id = s.v7_at(5_000_000);
        assert_eq!(s.gift_intended_ns(&req_id.to_string()), None);
        assert_eq!(s.gift_intended_ns(&Uuid::new_v4().to_string()), None);
        assert_eq!(s.gift_intended_ns("not an id"), None);
        let old = Uuid::new_v7(Timestamp::from_unix(NoContext, 1_000_000, 0));
        assert_eq!(s.gift_intended_ns(&order_of(old).to_string()), None);
    }
}
