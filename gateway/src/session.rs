//! One task per socket: read loop, outbox writer, heartbeat, flood control and close codes.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use protocol::client::{self, Hello, Op, Pong};
use protocol::error::close;
use protocol::ids::is_valid_id;
use protocol::link::{LeaveReason, RoomCmd};
use protocol::{ErrorCode, RoomId, SessionId};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep_until, timeout};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};
use tracing::debug;

use crate::Core;
use crate::auth::Identity;
use crate::config::WRITE_BATCH_FRAMES;
use crate::hub::text;
use crate::metrics as m;
use crate::outbox::{Outbox, Outgoing};
use crate::wire;

/// How long the server waits for its close frame to be written.
const CLOSE_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// A token bucket: `rate` tokens per second, at most `burst`.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    rate: f64,
    burst: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: u32, burst: u32) -> Self {
        Self {
            tokens: f64::from(burst),
            rate: f64::from(rate),
            burst: f64::from(burst),
            at: Instant::now(),
        }
    }

    fn take(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Why the session ends, and the close frame to send.
struct Closing {
    code: u16,
    reason: &'static str,
    /// False when the stream may have stopped inside a frame: the connection just ends.
    with_frame: bool,
}

impl Closing {
    /// A close with its close frame.
    const fn new(code: u16, reason: &'static str) -> Self {
        Self {
            code,
            reason,
            with_frame: true,
        }
    }
}

/// Runs one authenticated socket until it closes.
///
/// A function returning an `async move` block, not an `async fn`: an `async fn` keeps its
/// arguments twice in its state (as arguments and as the locals they are moved into), and
/// this state is what every idle socket's task holds (the socket alone is ~300 bytes).
#[allow(
    clippy::manual_async_fn,
    reason = "an `async fn` would hold its arguments twice"
)]
pub(crate) fn run(
    core: Arc<Core>,
    mut ws: WebSocketStream<TcpStream>,
    who: Identity,
) -> impl Future<Output = ()> {
    async move {
        let session: SessionId = core.next_session();
        let outbox = Arc::new(Outbox::new(
            core.config.outbox_frames,
            core.config.outbox_bytes,
        ));
        core.hub.add(session, who.user.clone(), outbox.clone());
        metrics::gauge!(m::CONNECTIONS).increment(1.0);
        let hello = client::encode_event(
            "hello",
            None,
            None,
            &Hello {
                session: format!("{}-{session}", core.node),
                heartbeat_ms: core.config.heartbeat.as_millis() as u64,
                server: format!("chorus/{}", env!("CARGO_PKG_VERSION")),
            },
        );
        if let Some(t) = text(hello) {
            outbox.push(t);
        }
        let mut s = Session {
            core: core.clone(),
            session,
            who,
            outbox,
            bucket: Bucket::new(core.config.rate_per_sec, core.config.rate_burst),
            limited_in_a_row: 0,
        };
        let closing = s.serve(&mut ws).await;
        if let Some(c) = closing {
            metrics::counter!(m::CLOSES, "code" => c.code.to_string()).increment(1);
            debug!(
                session,
                code = c.code,
                reason = c.reason,
                with_frame = c.with_frame,
                "Closing connection."
            );
            let frame = CloseFrame {
                code: CloseCode::from(c.code),
                reason: Utf8Bytes::from_static(c.reason),
            };
            // The closing handshake: send our close, then read (and drop) what the client still
            // sends until its close arrives, so the kernel does not answer unread data with a
            // reset that could destroy our close frame before the client reads it. Boxed, like
            // every write below: it runs once, and inline its state would grow every idle task.
            let _ = Box::pin(timeout(CLOSE_WRITE_TIMEOUT, async {
                if c.with_frame && ws.close(Some(frame)).await.is_ok() {
                    while let Some(Ok(_)) = ws.next().await {}
                }
            }))
            .await;
        }
        if let Some(leave) = core.hub.remove(session) {
            core.send_leaves(vec![leave]);
        }
        metrics::gauge!(m::CONNECTIONS).decrement(1.0);
    }
}

struct Session {
    core: Arc<Core>,
    session: SessionId,
    who: Identity,
    outbox: Arc<Outbox>,
    bucket: Bucket,
    limited_in_a_row: u32,
}

impl Session {
    /// Serves the socket; returns the close frame to send, or `None` when the peer is gone.
    ///
    /// What an idle socket holds while it waits is this future's state, so it is kept small:
    /// one timer serves both the heartbeat and the token's expiry (no boxed `Interval` beside
    /// a second `Sleep`), and the writes, which need more state, are boxed while they run.
    async fn serve(&mut self, ws: &mut WebSocketStream<TcpStream>) -> Option<Closing> {
        let hb = self.core.config.heartbeat;
        let start = Instant::now();
        let mut next_ping = start + hb;
        let mut last_heard = start;
        let expires = start + Duration::from_secs(self.who.exp.saturating_sub(now_ms() / 1000));
        // Created once and polled in place; it fires at the next ping or at the expiry,
        // whichever comes first. Closing orders (slow consumer, drain) arrive through the
        // outbox itself, so an ordinary wake-up polls no cancellation token.
        let timer = sleep_until(next_ping.min(expires));
        tokio::pin!(timer);
        let outbox = self.outbox.clone();
        loop {
            tokio::select! {
                biased;
                out = outbox.recv() => match out {
                    Outgoing::Frame(frame) => {
                        if let Err(c) = self.write_batch(ws, frame).await {
                            return c;
                        }
                    }
                    Outgoing::Close(code) => {
                        let reason = match code {
                            close::SLOW_CONSUMER => "slow consumer",
                            close::GOING_AWAY => "server going away: reconnect elsewhere and resume",
                            _ => "closed by server",
                        };
                        return Some(Closing::new(code, reason));
                    }
                },
                msg = ws.next() => {
                    last_heard = Instant::now();
                    match msg {
                        None => return None,
                        Some(Ok(Message::Text(t))) => {
                            if let Some(c) = self.on_text(&t) {
                                return Some(c);
                            }
                        }
                        Some(Ok(Message::Binary(_))) => {
                            self.reply_err(None, ErrorCode::BadFrame, "binary frames are not supported");
                        }
                        Some(Ok(Message::Close(_))) => return None,
                        Some(Ok(_)) => {}
                        Some(Err(WsError::Capacity(_))) => {
                            return Some(Closing::new(close::TOO_BIG, "frame too large"));
                        }
                        Some(Err(e)) => {
                            debug!(session = self.session, error = %e, "Socket read failed.");
                            return None;
                        }
                    }
                }
                () = &mut timer => {
                    let due = timer.deadline();
                    if due >= next_ping {
                        // Pings keep their schedule (a late one is followed by the next at
                        // once, like `Interval`'s burst catch-up).
                        next_ping += hb;
                        if last_heard.elapsed() >= 2 * hb {
                            return Some(Closing::new(1000, "heartbeat timeout"));
                        }
                        if let Err(c) = self.write_flush(ws, Message::Ping(Default::default())).await {
                            return c;
                        }
                    }
                    if due >= expires {
                        return Some(Closing::new(close::POLICY, "token expired"));
                    }
                    timer.as_mut().reset(next_ping.min(expires));
                }
            }
        }
    }

    /// Writes `first` and whatever else is queued (up to a batch) in one vectored write.
    async fn write_batch(
        &self,
        ws: &mut WebSocketStream<TcpStream>,
        first: Utf8Bytes,
    ) -> Result<(), Option<Closing>> {
        let wt = self.core.config.write_timeout;
        let mut written = 0usize;
        let write = async {
            // tungstenite may hold bytes of its own (a pong it queued while reading): they go
            // first, so our frames never interleave with them.
            ws.flush().await.map_err(|_| ())?;
            let mut frames = Vec::new();
            frames.push(first);
            while frames.len() < WRITE_BATCH_FRAMES {
                match self.outbox.try_recv() {
                    Some(frame) => frames.push(frame),
                    None => break,
                }
            }
            metrics::counter!(m::FRAMES_OUT).increment(frames.len() as u64);
            wire::write_text_frames(ws.get_mut(), &frames, &mut written)
                .await
                .map_err(|_| ())
        };
        let outcome = Box::pin(timeout(wt, write)).await;
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(())) => Err(None),
            Err(_) => Err(Some(Closing {
                code: close::SLOW_CONSUMER,
                reason: "slow consumer",
                // Once bytes of this batch went out the stream may end inside a frame, and
                // no close frame may follow (PROTOCOL.md: a slow consumer may see the
                // connection end without 4000).
                with_frame: written == 0,
            })),
        }
    }

    async fn write_flush(
        &self,
        ws: &mut WebSocketStream<TcpStream>,
        msg: Message,
    ) -> Result<(), Option<Closing>> {
        match Box::pin(timeout(self.core.config.write_timeout, ws.send(msg))).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(None),
            Err(_) => Err(Some(Closing::new(close::SLOW_CONSUMER, "slow consumer"))),
        }
    }

    fn reply_err(&self, id: Option<u64>, code: ErrorCode, msg: &str) {
        metrics::counter!(m::ERRORS, "code" => code.as_str()).increment(1);
        if let Some(t) = text(client::encode_err(id, code, msg)) {
            self.outbox.push(t);
        }
    }

    fn reply_ok<T: serde::Serialize>(&self, id: u64, ok: &T) {
        if let Some(t) = text(client::encode_ok(id, ok)) {
            self.outbox.push(t);
        }
    }

    /// Handles one text frame; returns a close when the connection must end.
    fn on_text(&mut self, t: &str) -> Option<Closing> {
        metrics::counter!(m::REQUESTS).increment(1);
        if !self.bucket.take(Instant::now()) {
            self.limited_in_a_row += 1;
            if self.limited_in_a_row > self.core.config.flood_close_after {
                return Some(Closing::new(close::POLICY, "flood"));
            }
            let id = client::decode_request(t).ok().map(|r| r.id);
            self.reply_err(id, ErrorCode::RateLimited, "too many requests; slow down");
            return None;
        }
        self.limited_in_a_row = 0;
        let req = match client::decode_request(t) {
            Ok(r) => r,
            Err(e) => {
                self.reply_err(e.id, e.code, &e.msg);
                return None;
            }
        };
        let id = req.id;
        let room = req.op.room().cloned();
        if let Some(r) = &room
            && !is_valid_id(r.as_str())
        {
            self.reply_err(
                Some(id),
                ErrorCode::BadRequest,
                "room ids are 1..=64 of [A-Za-z0-9-_.:]",
            );
            return None;
        }
        let cmd = match req.op {
            Op::Ping => {
                self.reply_ok(id, &Pong { t: now_ms() });
                return None;
            }
            Op::WalletBalance(_) | Op::GiftList(_) | Op::RankGet(_) => {
                self.core
                    .money_request(self.session, &self.who.user, id, req.op);
                return None;
            }
            Op::RoomCreate(c) => {
                let room = c.room.clone().unwrap_or_else(new_room_id);
                self.core.send_command(
                    self.session,
                    &self.who.user,
                    Some(id),
                    room,
                    RoomCmd::Create(c),
                );
                return None;
            }
            Op::RoomJoin(j) => RoomCmd::Join(j),
            Op::RoomLeave(_) => RoomCmd::Leave(LeaveReason::Left),
            Op::ChatSend(c) => RoomCmd::Chat(c),
            Op::SeatTake(s) => RoomCmd::SeatTake(s),
            Op::SeatLeave(_) => RoomCmd::SeatLeave,
            Op::GiftSend(g) => RoomCmd::Gift(g),
        };
        if let Some(room) = room {
            self.core
                .send_command(self.session, &self.who.user, Some(id), room, cmd);
        }
        None
    }
}

fn new_room_id() -> RoomId {
    RoomId::from(format!("r-{:012x}", rand::random::<u64>() >> 16))
}
