//! One task per socket: read loop, outbox writer, heartbeat, flood control and close codes.

mod blocked;

use std::ops::ControlFlow;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use protocol::client::{self, Hello, Op, Pong};
use protocol::error::close;
use protocol::ids::is_valid_id;
use protocol::link::RoomCmd;
use protocol::{ErrorCode, RoomId, SessionId, UserId};
use smallvec::SmallVec;
use tokio::time::timeout;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};
use tracing::debug;

use crate::auth::Identity;
use crate::config::WRITE_BATCH_FRAMES;
use crate::hub::text;
use crate::metrics as m;
use crate::outbox::{Kick, Outbox, Outgoing, clock_ms, unix_ms};
use crate::shared::Core;
use crate::sock::Sock;
use crate::wire;
use blocked::Write;

/// Frames of a batch kept inline (no allocation) before the batch spills to the heap.
const BATCH_INLINE: usize = 8;
/// A batch of frames for one write.
type Batch = SmallVec<[Utf8Bytes; BATCH_INLINE]>;
/// What one turn of a socket's loop leaves to do.
enum Step {
    /// Nothing: wait for the next frame either way.
    Go,
    /// End the connection, with this close (`None`: the peer is gone).
    End(Option<Closing>),
    /// A write the socket could not take at once (see `blocked.rs`). Boxed, so that only a
    /// socket that waits for its client holds the write's state; inline, it would grow every
    /// idle socket's task.
    Wait(Box<Write>),
}

/// How long a blocked write may still run once the socket is to be closed: enough for a peer
/// that reads to take a batch, far shorter than the write time-out a peer that does not
/// read would otherwise hold the close for.
const KICKED_WRITE_GRACE: Duration = Duration::from_secs(1);

/// How long the server waits for its close frame to be written.
const CLOSE_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// A token bucket: `rate` tokens per second, at most `burst` (both from the gateway's
/// config, passed to each [`Bucket::take`]: every idle socket holds one, so it is 16 bytes).
#[derive(Debug)]
struct Bucket {
    tokens: f32,
    /// [`clock_ms`] at the last take.
    at_ms: u64,
}

impl Bucket {
    fn new(burst: u32) -> Self {
        Self {
            tokens: burst as f32,
            at_ms: clock_ms(),
        }
    }

    fn take(&mut self, now_ms: u64, rate: u32, burst: u32) -> bool {
        let dt = now_ms.saturating_sub(self.at_ms) as f32 / 1000.0;
        self.at_ms = now_ms;
        self.tokens = (self.tokens + dt * rate as f32).min(burst as f32);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
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
/// The session is registered here, before the returned future first runs, and the future
/// captures only the session and the socket: this state is what every idle socket's task
/// holds (the socket alone is ~300 bytes), so nothing in it is kept twice (an `async fn`
/// would keep its arguments beside the locals they are moved into).
pub(crate) fn run(
    core: Arc<Core>,
    mut ws: WebSocketStream<Sock>,
    who: Identity,
    im_ack: bool,
) -> impl Future<Output = ()> {
    let session: SessionId = core.next_session();
    // Before the hub knows the session: a direct message for it waits for its backlog.
    core.social_opening(session);
    let outbox = Arc::new(
        Outbox::new(core.config.outbox_frames, core.config.outbox_bytes, who.exp)
            .with_im_ack(im_ack),
    );
    let hello = client::encode_event(
        "hello",
        None,
        None,
        &Hello {
            session: format!("{}-{session}", core.node),
            heartbeat_ms: core.config.heartbeat.as_millis() as u64,
            server: format!("chorus/{}", env!("CARGO_PKG_VERSION")),
            im_ack,
        },
    );
    // Queued before the hub knows the session, so nothing the hub sends (a token expiry
    // warning, a direct message) can come before it.
    if let Some(t) = text(hello) {
        outbox.push(t);
    }
    // A token that expires within the warning time is warned now, not at the next tick.
    outbox.warn_if_expiring(unix_ms() / 1000, core.config.expiry_warning.as_secs());
    let cap = core.config.max_conns_per_user;
    for old in core.hub.add(
        session,
        who.user.clone(),
        outbox.clone(),
        who.profile.clone(),
        cap,
    ) {
        old.kick(Kick::TooManyConnections);
    }
    // Upgraded as the node began to drain, and registered after the drain took its list of
    // sockets: closed like them (checked after `add`, so one of the two always sees it).
    if core.shutdown.is_cancelled() {
        outbox.kick(Kick::GoingAway);
    }
    // A suspended user is closed after `hello` (checked after `add`, so a suspension applied
    // meanwhile closes this socket either here or there).
    if core.users.suspended.of(&who.user).is_some() {
        outbox.kick(Kick::Suspended);
    }
    metrics::gauge!(m::CONNECTIONS).increment(1.0);
    // After `hello`: the direct messages the user is owed, the stored profile, and the guards
    // and lifetime spend the user's rooms show as badges, in one task.
    core.connected(session, &who);
    // The sign-up reward, credited on the user's first connection ever (once: by key).
    core.money.reward_signup(&core.tracker, &who.user);
    let mut s = Session {
        bucket: Bucket::new(core.config.rate_burst),
        core,
        session,
        user: who.user,
        outbox,
        limited_in_a_row: 0,
        drained: false,
        flush_owed: false,
        mid_frame: false,
    };
    async move {
        let closing = s.serve(&mut ws).await;
        // `None`: the client closed (or went away); its close is answered after the clean-up
        // below, so a client that waits for the answer finds the server done with it.
        let by_client = closing.is_none();
        if let Some(c) = closing {
            metrics::counter!(m::CLOSES, "code" => c.code.to_string()).increment(1);
            debug!(
                session = s.session,
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
        if let Some(mut leave) = s.core.hub.remove(s.session) {
            // A suspended user leaves their room at once: no grace window to come back in.
            if s.outbox.kicked() == Some(Kick::Suspended) {
                leave.reason = protocol::link::LeaveReason::Left;
            }
            s.core.send_leaves(vec![leave]);
        }
        s.core.social_disconnected(s.session, &s.user);
        metrics::gauge!(m::CONNECTIONS).decrement(1.0);
        if by_client && !s.mid_frame {
            // The close frame the protocol library queued in answer to the client's (a clean
            // close for the client, not a dropped connection); an error means it went away.
            let _ = Box::pin(timeout(CLOSE_WRITE_TIMEOUT, ws.flush())).await;
        }
    }
}

struct Session {
    core: Arc<Core>,
    session: SessionId,
    user: UserId,
    outbox: Arc<Outbox>,
    bucket: Bucket,
    limited_in_a_row: u32,
    /// tungstenite's last answer was `Pending` (see `next_message`). Sits in the padding after
    /// `limited_in_a_row`: it costs an idle socket nothing.
    drained: bool,
    /// tungstenite may hold bytes of its own: the pong it queued for a client's ping (its read
    /// flushes it, unless the socket buffer was full or a batch of ours was under way), or a
    /// ping we gave it. The next batch flushes tungstenite first, and a blocked write after
    /// its own frames. Also in the padding.
    flush_owed: bool,
    /// A write was given up inside a frame of ours: nothing more may be written to the stream,
    /// not even the answer to the client's close. Also in the padding.
    mid_frame: bool,
}

impl Session {
    /// Serves the socket; returns the close frame to send, or `None` when the peer is gone.
    ///
    /// What an idle socket holds while it waits is this future's state, so it is kept small:
    /// it holds no timer. The gateway's heartbeat task asks for pings and closes silent or
    /// expired sockets through the outbox (see `Core::heartbeat`), as do slow-consumer and
    /// drain closes; the writes, which need more state, are boxed while they run.
    async fn serve(&mut self, ws: &mut WebSocketStream<Sock>) -> Option<Closing> {
        loop {
            let step = tokio::select! {
                biased;
                out = self.outbox.recv() => match out {
                    Outgoing::Frame(frame) => self.write_batch(ws, frame),
                    Outgoing::Ping => Step::Wait(Box::new(Write::ping())),
                    Outgoing::Close(kick) => Step::End(Some(Closing::new(kick.code(), kick.reason()))),
                },
                msg = next_message(ws, &mut self.drained) => match self.on_message(msg) {
                    ControlFlow::Continue(()) => Step::Go,
                    ControlFlow::Break(c) => Step::End(c),
                },
            };
            match step {
                Step::Go => {}
                Step::End(c) => return c,
                Step::Wait(write) => {
                    // Boxed like the write: only a socket that waits for its client pays. The
                    // client's frames are read and handled meanwhile.
                    if let Err(c) = Box::pin(self.blocked(ws, write)).await {
                        return c;
                    }
                }
            }
        }
    }

    /// Handles what the client sent (or that it went away); `Break` ends the connection with
    /// that close (`None`: the client closed or is gone).
    fn on_message(
        &mut self,
        msg: Option<Result<Message, WsError>>,
    ) -> ControlFlow<Option<Closing>> {
        self.outbox.heard();
        let closing = match msg {
            None | Some(Ok(Message::Close(_))) => return ControlFlow::Break(None),
            Some(Ok(Message::Text(t))) => self.on_text(&t),
            // Binary frames are refused, but they count against the request rate like any
            // other frame, so they cannot flood the connection past its limits either.
            Some(Ok(Message::Binary(_))) => match self.take_token() {
                Ok(true) => {
                    self.reply_err(None, ErrorCode::BadFrame, "binary frames are not supported");
                    None
                }
                Ok(false) => {
                    self.reply_err(None, ErrorCode::RateLimited, "too many requests; slow down");
                    None
                }
                Err(close) => Some(close),
            },
            Some(Ok(Message::Ping(_))) => {
                self.flush_owed = true;
                None
            }
            Some(Ok(_)) => None,
            Some(Err(WsError::Capacity(_))) => {
                Some(Closing::new(close::TOO_BIG, "frame too large"))
            }
            // RFC 6455: answer a broken frame with its close code, then close.
            Some(Err(WsError::Utf8(_))) => {
                Some(Closing::new(close::INVALID_DATA, "text is not UTF-8"))
            }
            Some(Err(WsError::Protocol(_))) => {
                Some(Closing::new(close::PROTOCOL_ERROR, "protocol error"))
            }
            Some(Err(e)) => {
                debug!(session = self.session, error = %e, "Socket read failed.");
                return ControlFlow::Break(None);
            }
        };
        match closing {
            Some(c) => ControlFlow::Break(Some(c)),
            None => ControlFlow::Continue(()),
        }
    }

    /// Writes `first` and whatever else is queued (up to a batch) in one system call.
    ///
    /// The batch is tried at once, without waiting (the socket almost always takes it whole);
    /// only a batch the socket cannot take yet, or one behind bytes tungstenite may hold, waits,
    /// under the write time-out, as a boxed [`Step::Wait`].
    fn write_batch(&mut self, ws: &WebSocketStream<Sock>, first: Utf8Bytes) -> Step {
        let mut frames = Batch::new();
        frames.push(first);
        while frames.len() < WRITE_BATCH_FRAMES {
            match self.outbox.try_recv() {
                Some(frame) => frames.push(frame),
                None => break,
            }
        }
        self.core.hot.frames_out.increment(frames.len() as u64);
        self.core.hot.write_batches.increment(1);
        // tungstenite holds bytes of its own only after a client's ping (the pong it queued
        // while reading); everything the session sends through it is flushed at once. Asking
        // it to flush costs a waker registration, so it is asked only then, and first, so our
        // frames never interleave with its bytes.
        if self.flush_owed {
            return Step::Wait(Box::new(Write::frames(frames, 0)));
        }
        let mut written = 0usize;
        match wire::try_write_text_frames(ws.get_ref().tcp(), &frames, &mut written) {
            Ok(true) => Step::Go,
            Ok(false) => Step::Wait(Box::new(Write::frames(frames, written))),
            Err(_) => Step::End(None),
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

    /// Takes a token of the request rate for one frame the client sent (text or binary).
    /// `Ok(false)`: over the rate, answer `RATE_LIMITED`; `Err`: too many of those in a row,
    /// close with 1008.
    fn take_token(&mut self) -> Result<bool, Closing> {
        let cfg = &self.core.config;
        if self
            .bucket
            .take(clock_ms(), cfg.rate_per_sec, cfg.rate_burst)
        {
            self.limited_in_a_row = 0;
            return Ok(true);
        }
        self.limited_in_a_row += 1;
        if self.limited_in_a_row > cfg.flood_close_after {
            return Err(Closing::new(close::POLICY, "flood"));
        }
        Ok(false)
    }

    /// Handles one text frame; returns a close when the connection must end.
    fn on_text(&mut self, t: &str) -> Option<Closing> {
        self.core.hot.requests.increment(1);
        match self.take_token() {
            Ok(true) => {}
            Ok(false) => {
                let id = match client::decode_request(t) {
                    Ok(r) => Some(r.id),
                    Err(e) => e.id,
                };
                self.reply_err(id, ErrorCode::RateLimited, "too many requests; slow down");
                return None;
            }
            Err(close) => return Some(close),
        }
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
        match req.op {
            Op::Ping => self.reply_ok(id, &Pong { t: unix_ms() }),
            Op::WalletBalance(_) | Op::Wallet(_) | Op::GiftList(_) | Op::RankGet(_) => {
                self.core
                    .money_request(self.session, &self.user, id, req.op);
            }
            Op::Im(op) => self.core.im_request(self.session, &self.user, id, op),
            Op::Guard(op) => self.core.guard_request(self.session, &self.user, id, op),
            Op::User(op) => {
                self.core
                    .user_request(self.session, &self.user, &self.outbox, id, op);
            }
            Op::RoomList(req) => self.core.room_list(self.session, id, req),
            Op::Room(
                op @ (client::RoomOp::PkInvite(_)
                | client::RoomOp::PkAccept(_)
                | client::RoomOp::PkDecline(_)),
            ) => {
                // Two rooms' steps, carried by this gateway (`pk.rs`).
                self.core.pk_request(self.session, &self.user, id, op);
            }
            Op::Room(op) => {
                if let client::RoomOp::Join(_) = op {
                    self.core
                        .refresh_standing_if_stale(self.session, &self.user);
                }
                // Only `room.create` may leave its room out: the server names the room.
                let room = room.unwrap_or_else(new_room_id);
                let cmd = RoomCmd::Op(op);
                self.core
                    .send_command(self.session, &self.user, Some(id), room, cmd, None);
            }
        }
        None
    }
}

fn new_room_id() -> RoomId {
    RoomId::from(format!("r-{:012x}", rand::random::<u64>() >> 16))
}

/// The client's next frame. Once tungstenite has answered `Pending` (its read of the socket
/// returned `WouldBlock`, so no whole frame waits in its buffer), it is asked again only when
/// the socket is readable: otherwise every frame the outbox wakes this socket for would also
/// run tungstenite's read path to its `WouldBlock`. After a frame it is asked straight away,
/// because more frames may wait in its buffer while the socket has nothing more (tokio forgets
/// readiness after a short read). A pong tungstenite could not flush (a full socket buffer) goes
/// out with the next batch's flush or the next read.
fn next_message<'a>(
    ws: &'a mut WebSocketStream<Sock>,
    drained: &'a mut bool,
) -> impl Future<Output = Option<Result<Message, WsError>>> + 'a {
    std::future::poll_fn(move |cx| poll_message(ws, drained, cx))
}

/// One poll of [`next_message`].
fn poll_message(
    ws: &mut WebSocketStream<Sock>,
    drained: &mut bool,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Message, WsError>>> {
    if *drained && ws.get_ref().tcp().poll_read_ready(cx).is_pending() {
        return Poll::Pending;
    }
    let next = ws.poll_next_unpin(cx);
    *drained = next.is_pending();
    next
}

#[cfg(test)]
mod tests {
    use super::Bucket;

    #[test]
    fn the_bucket_allows_its_burst_then_refills_at_its_rate() {
        let mut b = Bucket::new(3);
        let t0 = b.at_ms;
        assert!((0..3).all(|_| b.take(t0, 10, 3)));
        assert!(!b.take(t0, 10, 3));
        // 10 per second: one token back after 100 ms, never more than the burst.
        assert!(b.take(t0 + 100, 10, 3));
        assert!(!b.take(t0 + 100, 10, 3));
        assert!((0..3).all(|_| b.take(t0 + 60_000, 10, 3)));
        assert!(!b.take(t0 + 60_000, 10, 3));
    }
}
