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
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};

/// Frames one connection may have queued for its writer: enough to absorb a burst, bounded so
/// a stalled socket pushes back on the sender (whose intended times then show the delay).
const WRITER_QUEUE: usize = 256;
/// Frames the writer feeds before one flush.
const WRITE_BATCH: usize = 64;
/// The client's WebSocket read buffer: thousands of sockets live in one generator process.
const CLIENT_READ_BUFFER: usize = 8 * 1024;
/// How long one connection keeps retrying upgrades refused with 503 (admission control).
const CONNECT_BUDGET: Duration = Duration::from_secs(30);
/// How long a request waits for its reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// The marker that starts a timed chat text: `t=<nanos since start>`.
pub const TIME_MARKER: &str = "t=";

mod economy;
mod forward;
mod shared;
pub use economy::{EconomyCounts, EconomyReport};
pub use forward::{Forward, Forwarded};
pub use shared::{Counted, SLOT_NS, Shared, new_histogram};
use shared::{HIST_MAX_US, lock};

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
    /// Timed request id → the [`Shared`] its reply counts in, when not the connection's own
    /// ([`Conn::send_timed_to`]).
    timed_to: HashMap<u64, Arc<Shared>>,
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
    /// The events the reader hands on, once set ([`Conn::forward`]).
    forward: Arc<OnceLock<Forward>>,
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
    let forward = Arc::new(OnceLock::new());
    let reader = {
        let inner = inner.clone();
        let shared = shared.clone();
        let forward = forward.clone();
        tokio::spawn(async move {
            while let Some(Ok(msg)) = stream.next().await {
                match msg {
                    Message::Text(t) => on_frame(&shared, &inner, &forward, t.as_str()),
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
        forward,
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
    /// The order's number in its combo streak.
    #[serde(default)]
    combo: Option<u64>,
    /// Orders a storm merged into this event (absent: 1).
    #[serde(default)]
    merged: Option<u64>,
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

fn on_frame(shared: &Arc<Shared>, inner: &Mutex<Inner>, forward: &OnceLock<Forward>, text: &str) {
    let Ok(f) = serde_json::from_str::<Lite<'_>>(text) else {
        shared.error("BAD_FRAME_FROM_SERVER");
        return;
    };
    if let Some(ev) = f.ev.as_deref() {
        if let Some(fw) = forward.get()
            && fw.wants(ev)
        {
            fw.send(shared, ev, f.room.as_deref(), f.d);
        }
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
    let sink = g.timed_to.remove(&re);
    if f.err.is_none() {
        g.ok += 1;
        if let (Some(room), Some(ok)) = (join_room, f.ok)
            && let Ok(j) = serde_json::from_str::<JoinLite>(ok.get())
        {
            g.pos.insert(room, (j.epoch, j.seq));
        }
    }
    drop(g);
    let shared: &Shared = sink.as_deref().unwrap_or(shared);
    if let Some(intended) = timed
        && shared.measured(intended)
    {
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
    match ev {
        "room.left" => {
            shared.room_left.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Volatile: no epoch or seq.
        "rocket.progress" => {
            if shared.counted.gift {
                shared.economy.progress();
            }
            return;
        }
        _ => {}
    }
    let (Some(room), Some(epoch), Some(seq)) = (f.room.as_deref(), f.epoch, f.seq) else {
        return;
    };
    // Parsed only where it is counted (a party's chat connections see gifts too).
    let gift = match ev {
        "gift" if shared.counted.gift => {
            f.d.and_then(|d| serde_json::from_str::<GiftD<'_>>(d.get()).ok())
        }
        _ => None,
    };
    // The orders a `gift` event carries: several when a storm merged them.
    let orders = gift.as_ref().and_then(|g| g.merged).unwrap_or(1).max(1);
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
        if ev == "chat" && shared.counted.chat {
            g.received += 1;
        } else if ev == "gift" && shared.counted.gift {
            g.received += orders;
        }
    }
    match ev {
        "chat" if shared.counted.chat => {
            let intended =
                f.d.and_then(|d| serde_json::from_str::<ChatD<'_>>(d.get()).ok())
                    .and_then(|d| d.text.as_deref().and_then(parse_marker));
            match intended {
                Some(t) => shared.record_delivery(t, 1),
                None => {
                    shared.received.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        "gift" if shared.counted.gift => {
            shared
                .economy
                .gift(gift.as_ref().and_then(|g| g.combo).unwrap_or(1), orders);
            let intended = gift
                .as_ref()
                .and_then(|d| d.order.as_deref().and_then(|o| shared.gift_intended_ns(o)));
            match intended {
                Some(t) => shared.record_delivery(t, orders),
                None => {
                    shared.received.fetch_add(orders, Ordering::Relaxed);
                    shared
                        .last_delivery_ns
                        .fetch_max(shared.now_ns(), Ordering::Relaxed);
                }
            }
        }
        "rocket.launch" if shared.counted.gift => {
            let due =
                f.d.and_then(|d| serde_json::from_str::<GiftD<'_>>(d.get()).ok())
                    .and_then(|d| d.order.as_deref().and_then(|o| shared.gift_intended_ns(o)));
            let latency_us = due.map(|t| shared.now_ns().saturating_sub(t) / 1000);
            shared.economy.launch(latency_us);
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

    /// Sends `op` without waiting, like [`Conn::send_timed`], but counts it and its reply
    /// (sent, ok or error, reply latency from `intended_ns` on `to`'s clock) in `to` rather
    /// than in the connection's own [`Shared`]: one connection's requests of different kinds
    /// then count apart. The connection's own `Shared` still counts its events (gaps).
    ///
    /// # Errors
    /// `SEND` when the connection is gone.
    pub async fn send_timed_to(
        &self,
        op: &str,
        d: &Value,
        intended_ns: u64,
        to: &Arc<Shared>,
    ) -> Result<(), ReplyError> {
        let id = self.next_id();
        {
            let mut g = lock(&self.inner);
            g.timed.insert(id, intended_ns);
            g.timed_to.insert(id, to.clone());
        }
        to.sent.fetch_add(1, Ordering::Relaxed);
        if self.tx.send(Self::frame(id, op, d)).await.is_err() {
            let mut g = lock(&self.inner);
            g.timed.remove(&id);
            g.timed_to.remove(&id);
            drop(g);
            to.error("SEND");
            return Err(ReplyError::client("SEND"));
        }
        Ok(())
    }

    /// Hands the events `forward` names on to its channel from now on; `false` (and no
    /// change) when this connection already hands events on.
    pub fn forward(&self, forward: Forward) -> bool {
        self.forward.set(forward).is_ok()
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
    use uuid::{NoContext, Timestamp, Uuid};

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

    /// A warm-up's deliveries count as received (a loss among them fails the run) but stay
    /// out of the latency figures, the worst stretches, and the rate and CPU figures' count.
    #[test]
    fn a_warm_ups_deliveries_are_received_but_not_measured() {
        let s = Shared::new();
        let from = 1;
        s.measure_from(from);
        // Both arrive at least 2 ms after they were due: a latency every figure would show.
        while s.now_ns() < 2_000_000 {
            std::hint::spin_loop();
        }
        s.record_delivery(from - 1, 3);
        assert!(s.latency().is_empty() && s.worst_slots(0, 5).is_empty());
        s.begin_measure();
        s.record_delivery(from, 2);
        assert_eq!(s.received.load(Ordering::Relaxed), 5);
        assert_eq!(s.received_before_measure(), 3);
        assert_eq!(s.latency().len(), 1);
        assert_eq!(s.worst_slots(0, 5).len(), 1);
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
