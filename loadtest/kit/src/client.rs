//! A typed Chorus client over tokio-tungstenite, built on the protocol types.
//!
//! One task drives it: `request` sends a frame and waits for its reply, keeping the events
//! that arrive meanwhile in a queue that `next_event` drains. The client tracks each room's
//! `(epoch, seq)` and counts gaps, so tests and the load generator can check delivery.

pub mod resume;

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use protocol::client::{ErrBody, ServerFrame, Since};
use protocol::{Epoch, ErrorCode, RoomId, Seq};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Pause between join attempts while a room's ownership moves.
const JOIN_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// How long a request waits for its reply by default.
pub const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// What can go wrong in the client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The upgrade was refused with this HTTP status.
    #[error("upgrade refused: HTTP {0}")]
    Refused(u16),
    /// The WebSocket failed.
    #[error("websocket: {0}")]
    Ws(#[from] tungstenite::Error),
    /// The server closed the connection (with this close frame, if any).
    #[error("closed by server: {0:?}")]
    Closed(Option<CloseFrame>),
    /// Nothing arrived in time.
    #[error("timed out")]
    Timeout,
    /// The server sent something that is not a protocol frame.
    #[error("bad frame from server: {0}")]
    BadFrame(String),
    /// A request was answered with an error.
    #[error("{}: {}", .0.code, .0.msg)]
    Server(ErrBody),
}

impl ClientError {
    /// The server error code, if this is an error reply.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Server(e) => Some(e.code),
            _ => None,
        }
    }
}

/// An event as received.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Event name.
    pub ev: String,
    /// The room, for room events.
    pub room: Option<RoomId>,
    /// Epoch, for sequenced events.
    pub epoch: Option<Epoch>,
    /// Seq, for sequenced events.
    pub seq: Option<Seq>,
    /// Payload.
    pub d: Value,
}

/// A reply as received.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplyFrame {
    /// The request id (None for undecodable frames).
    pub re: Option<u64>,
    /// The result.
    pub result: Result<Value, ErrBody>,
}

/// Anything the server sends.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A reply.
    Reply(ReplyFrame),
    /// An event.
    Event(Event),
}

/// Delivery bookkeeping per room: where the client is, and what went wrong.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Position {
    /// Last epoch seen.
    pub epoch: Epoch,
    /// Last seq seen.
    pub seq: Seq,
    /// Sequenced events whose seq skipped ahead (a gap).
    pub gaps: u64,
    /// Sequenced events at or below the last seq (duplicates).
    pub duplicates: u64,
    /// Epoch changes seen.
    pub epoch_changes: u64,
    /// A gap was seen and not yet repaired: `seq` stays at the last contiguous event, and a
    /// `room.join` with `since` from here fills the gap (or resyncs).
    pub gap_pending: bool,
}

/// Applies one sequenced event at `(epoch, seq)` to a room's bookkeeping.
fn track_position(p: &mut Position, epoch: Epoch, seq: Seq) {
    if epoch != p.epoch {
        if p.epoch != 0 {
            p.epoch_changes += 1;
            if seq != 1 {
                // A new epoch starts at seq 1: anything else means its first events were missed.
                p.gaps += 1;
                p.gap_pending = true;
                return;
            }
        }
        p.epoch = epoch;
        p.seq = seq;
        return;
    }
    if seq <= p.seq {
        p.duplicates += 1;
    } else if seq != p.seq + 1 {
        // Keep the last contiguous position: resuming from it fills the gap.
        p.gaps += 1;
        p.gap_pending = true;
    } else if !p.gap_pending {
        p.seq = seq;
    }
}

/// A connected client.
pub struct Client {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    events: VecDeque<Event>,
    /// Unmatched replies (e.g. to `send_raw` frames).
    replies: VecDeque<ReplyFrame>,
    positions: HashMap<RoomId, Position>,
    /// The session id from `hello`.
    pub session: String,
    /// The heartbeat interval from `hello`.
    pub heartbeat_ms: u64,
    /// Whether `hello` says the connection acknowledges its direct messages (`?im_ack=1`).
    pub im_ack: bool,
}

/// Connects to `url` (e.g. `ws://127.0.0.1:8080/ws`) with `token` in the Authorization header
/// (or without any token when `None`), and waits for `hello`.
///
/// # Errors
/// [`ClientError::Refused`] with the HTTP status when the upgrade is refused.
pub async fn connect(url: &str, token: Option<&str>) -> Result<Client, ClientError> {
    let mut req = url.into_client_request()?;
    if let Some(t) = token {
        let v = format!("Bearer {t}")
            .parse()
            .map_err(|_| ClientError::BadFrame("token is not a header value".into()))?;
        req.headers_mut().insert("authorization", v);
    }
    let (ws, _) = match tokio_tungstenite::connect_async(req).await {
        Ok(ok) => ok,
        Err(tungstenite::Error::Http(resp)) => {
            return Err(ClientError::Refused(resp.status().as_u16()));
        }
        Err(e) => return Err(e.into()),
    };
    let mut c = Client {
        ws,
        next_id: 1,
        events: VecDeque::new(),
        replies: VecDeque::new(),
        positions: HashMap::new(),
        session: String::new(),
        heartbeat_ms: 0,
        im_ack: false,
    };
    let hello = c.next_event_named("hello", DEFAULT_REPLY_TIMEOUT).await?;
    c.session = hello.d["session"].as_str().unwrap_or_default().to_owned();
    c.heartbeat_ms = hello.d["heartbeat_ms"].as_u64().unwrap_or_default();
    c.im_ack = hello.d["im_ack"].as_bool().unwrap_or_default();
    Ok(c)
}

impl Client {
    /// Sends a raw text frame.
    ///
    /// # Errors
    /// The socket failed.
    pub async fn send_raw(&mut self, text: impl Into<String>) -> Result<(), ClientError> {
        self.ws.send(Message::Text(text.into().into())).await?;
        Ok(())
    }

    /// Sends a raw binary frame.
    ///
    /// # Errors
    /// The socket failed.
    pub async fn send_binary(&mut self, data: Vec<u8>) -> Result<(), ClientError> {
        self.ws.send(Message::Binary(data.into())).await?;
        Ok(())
    }

    /// Sends a request without waiting; returns its id.
    ///
    /// # Errors
    /// The socket failed.
    pub async fn send(&mut self, op: &str, d: Value) -> Result<u64, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let frame = json!({ "id": id, "op": op, "d": d });
        self.send_raw(frame.to_string()).await?;
        Ok(id)
    }

    /// Sends a request and waits for its reply; events that arrive meanwhile are queued.
    ///
    /// # Errors
    /// [`ClientError::Server`] for an error reply, or a transport error.
    pub async fn request(&mut self, op: &str, d: Value) -> Result<Value, ClientError> {
        let id = self.send(op, d).await?;
        self.reply_to(id, DEFAULT_REPLY_TIMEOUT).await
    }

    /// Waits for the reply to request `id`.
    ///
    /// # Errors
    /// As [`Client::request`].
    pub async fn reply_to(&mut self, id: u64, wait: Duration) -> Result<Value, ClientError> {
        let deadline = Instant::now() + wait;
        if let Some(i) = self.replies.iter().position(|r| r.re == Some(id))
            && let Some(r) = self.replies.remove(i)
        {
            return r.result.map_err(ClientError::Server);
        }
        loop {
            match self.recv_until(deadline).await? {
                Incoming::Reply(r) if r.re == Some(id) => {
                    return r.result.map_err(ClientError::Server);
                }
                Incoming::Reply(r) => self.replies.push_back(r),
                Incoming::Event(e) => self.events.push_back(e),
            }
        }
    }

    /// The next reply not yet taken (for raw frames).
    ///
    /// # Errors
    /// Transport errors and time-outs.
    pub async fn next_reply(&mut self, wait: Duration) -> Result<ReplyFrame, ClientError> {
        if let Some(r) = self.replies.pop_front() {
            return Ok(r);
        }
        let deadline = Instant::now() + wait;
        loop {
            match self.recv_until(deadline).await? {
                Incoming::Reply(r) => return Ok(r),
                Incoming::Event(e) => self.events.push_back(e),
            }
        }
    }

    /// The next event (queued first).
    ///
    /// # Errors
    /// Transport errors and time-outs.
    pub async fn next_event(&mut self, wait: Duration) -> Result<Event, ClientError> {
        if let Some(e) = self.events.pop_front() {
            return Ok(e);
        }
        let deadline = Instant::now() + wait;
        loop {
            match self.recv_until(deadline).await? {
                Incoming::Reply(r) => self.replies.push_back(r),
                Incoming::Event(e) => return Ok(e),
            }
        }
    }

    /// The next event named `name`; other events are dropped.
    ///
    /// # Errors
    /// Transport errors and time-outs.
    pub async fn next_event_named(
        &mut self,
        name: &str,
        wait: Duration,
    ) -> Result<Event, ClientError> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let e = self.next_event(left).await?;
            if e.ev == name {
                return Ok(e);
            }
        }
    }

    /// Every event received until a `chat` whose text is `text` (not included): after one's
    /// own chat, everything the room published before it has arrived (events come in order).
    ///
    /// # Errors
    /// Transport errors, and a time-out when the chat does not come within `wait`.
    pub async fn events_until_chat(
        &mut self,
        text: &str,
        wait: Duration,
    ) -> Result<Vec<Event>, ClientError> {
        let deadline = Instant::now() + wait;
        let mut out = Vec::new();
        loop {
            let e = self
                .next_event(deadline.saturating_duration_since(Instant::now()))
                .await?;
            if e.ev == "chat" && e.d["text"] == text {
                return Ok(out);
            }
            out.push(e);
        }
    }

    /// Every room of a `room.list` listing asked with `d`, page by page (at most 1,000 pages).
    ///
    /// # Errors
    /// Error replies and transport errors; `BadFrame` when the listing does not end.
    pub async fn room_list_all(&mut self, mut d: Value) -> Result<Vec<Value>, ClientError> {
        let mut out = Vec::new();
        for _ in 0..1000 {
            let page = self.request("room.list", d.clone()).await?;
            if let Some(rooms) = page["rooms"].as_array() {
                out.extend(rooms.iter().cloned());
            }
            match page.get("cursor").and_then(Value::as_str) {
                Some(cursor) => d["cursor"] = json!(cursor),
                None => return Ok(out),
            }
        }
        Err(ClientError::BadFrame("room.list never ended".into()))
    }

    /// Events received and not yet taken.
    pub fn queued_events(&mut self) -> Vec<Event> {
        self.events.drain(..).collect()
    }

    /// Waits until the server closes the connection; returns its close frame.
    ///
    /// # Errors
    /// [`ClientError::Timeout`] when the connection is still open after `wait`.
    pub async fn closed(&mut self, wait: Duration) -> Result<Option<CloseFrame>, ClientError> {
        let deadline = Instant::now() + wait;
        loop {
            match self.recv_until(deadline).await {
                Ok(Incoming::Event(e)) => self.events.push_back(e),
                Ok(Incoming::Reply(r)) => self.replies.push_back(r),
                Err(ClientError::Closed(f)) => return Ok(f),
                Err(ClientError::Ws(_)) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    /// Closes the connection from the client side.
    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }

    /// Closes the connection from the client side (code 1000) and waits for the server's
    /// answering close frame (`None` if the connection ended without one).
    ///
    /// # Errors
    /// [`ClientError::Timeout`] when no answer came within `wait`.
    pub async fn close_and_wait(
        mut self,
        wait: Duration,
    ) -> Result<Option<CloseFrame>, ClientError> {
        let normal = CloseFrame {
            code: tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode::Normal,
            reason: "".into(),
        };
        let _ = self.ws.close(Some(normal)).await;
        self.closed(wait).await
    }

    /// The delivery bookkeeping of `room`.
    pub fn position(&self, room: &RoomId) -> Option<&Position> {
        self.positions.get(room)
    }

    /// Where to resume `room` from.
    pub fn since(&self, room: &RoomId) -> Option<Since> {
        self.positions.get(room).map(|p| Since {
            epoch: p.epoch,
            seq: p.seq,
        })
    }

    /// Sets the position of `room` (from a join reply).
    pub fn set_position(&mut self, room: &RoomId, epoch: Epoch, seq: Seq) {
        let p = self.positions.entry(room.clone()).or_default();
        if p.epoch != epoch && p.epoch != 0 {
            p.epoch_changes += 1;
        }
        p.epoch = epoch;
        p.seq = seq;
        p.gap_pending = false;
    }

    fn track(&mut self, e: &Event) {
        let (Some(room), Some(epoch), Some(seq)) = (&e.room, e.epoch, e.seq) else {
            return;
        };
        let p = self.positions.entry(room.clone()).or_default();
        track_position(p, epoch, seq);
    }

    async fn recv_until(&mut self, deadline: Instant) -> Result<Incoming, ClientError> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = match timeout(left, self.ws.next()).await {
                Err(_) => return Err(ClientError::Timeout),
                Ok(None) => return Err(ClientError::Closed(None)),
                Ok(Some(Err(e))) => return Err(e.into()),
                Ok(Some(Ok(m))) => m,
            };
            let text = match msg {
                Message::Text(t) => t,
                Message::Close(f) => return Err(ClientError::Closed(f)),
                _ => continue,
            };
            let frame: ServerFrame = serde_json::from_str(&text)
                .map_err(|e| ClientError::BadFrame(format!("{e}: {text}")))?;
            return Ok(match frame {
                ServerFrame::Reply { re, ok, err } => Incoming::Reply(ReplyFrame {
                    re,
                    result: match (ok, err) {
                        (_, Some(e)) => Err(e),
                        (Some(v), None) => Ok(v),
                        (None, None) => Ok(Value::Null),
                    },
                }),
                ServerFrame::Event {
                    ev,
                    room,
                    epoch,
                    seq,
                    d,
                } => {
                    let e = Event {
                        ev,
                        room,
                        epoch,
                        seq,
                        d,
                    };
                    self.track(&e);
                    Incoming::Event(e)
                }
            });
        }
    }

    /// `room.create`; returns the room id.
    ///
    /// # Errors
    /// Error replies and transport errors.
    pub async fn create_room(&mut self, d: Value) -> Result<RoomId, ClientError> {
        let ok = self.request("room.create", d).await?;
        Ok(RoomId::from(ok["room"].as_str().unwrap_or_default()))
    }

    /// `room.join` (resuming from the tracked position when `resume`); returns the reply.
    ///
    /// # Errors
    /// Error replies and transport errors.
    pub async fn join(
        &mut self,
        room: &RoomId,
        resume: bool,
        password: Option<&str>,
    ) -> Result<Value, ClientError> {
        let mut d = json!({ "room": room });
        if resume && let Some(s) = self.since(room) {
            d["since"] = json!({ "epoch": s.epoch, "seq": s.seq });
        }
        if let Some(p) = password {
            d["password"] = json!(p);
        }
        let ok = self.request("room.join", d).await?;
        let epoch = ok["epoch"].as_u64().unwrap_or_default();
        let seq = ok["seq"].as_u64().unwrap_or_default();
        self.set_position(room, epoch, seq);
        Ok(ok)
    }

    /// `room.join` resuming from the tracked position, retrying while the room's ownership
    /// moves (`UNAVAILABLE`) for at most `within`.
    ///
    /// # Errors
    /// Other error replies, transport errors, and `UNAVAILABLE` past `within`.
    pub async fn join_retrying(
        &mut self,
        room: &RoomId,
        password: Option<&str>,
        within: Duration,
    ) -> Result<Value, ClientError> {
        let deadline = Instant::now() + within;
        loop {
            match self.join(room, true, password).await {
                Err(e) if e.code() == Some(ErrorCode::Unavailable) && Instant::now() < deadline => {
                    tokio::time::sleep(JOIN_RETRY_PAUSE).await;
                }
                other => return other,
            }
        }
    }

    /// `chat.send`; returns the seq.
    ///
    /// # Errors
    /// Error replies and transport errors.
    pub async fn chat(&mut self, room: &RoomId, text: &str) -> Result<Seq, ClientError> {
        let ok = self
            .request("chat.send", json!({ "room": room, "text": text }))
            .await?;
        Ok(ok["seq"].as_u64().unwrap_or_default())
    }
}

/// Mints an HS256 token for `user` with `secret`, valid for `ttl`.
///
/// # Errors
/// Encoding failed.
pub fn mint_token(
    secret: &[u8],
    user: &str,
    ttl: Duration,
) -> Result<String, jsonwebtoken::errors::Error> {
    #[derive(serde::Serialize)]
    struct Claims<'a> {
        sub: &'a str,
        exp: u64,
    }
    let exp = jsonwebtoken::get_current_timestamp() + ttl.as_secs();
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &Claims { sub: user, exp },
        &jsonwebtoken::EncodingKey::from_secret(secret)?,
    )
}

/// How long the tokens of [`token`] live: longer than any test.
pub const TEST_TOKEN_TTL: Duration = Duration::from_secs(600);

/// A client token for `user` signed with `secret`, valid for [`TEST_TOKEN_TTL`]: the token
/// tests connect with.
///
/// # Errors
/// Encoding failed.
pub fn token(secret: &[u8], user: &str) -> Result<String, jsonwebtoken::errors::Error> {
    mint_token(secret, user, TEST_TOKEN_TTL)
}

/// Mints a token that expired `ago` ago (for tests of refusal).
///
/// # Errors
/// Encoding failed.
pub fn mint_expired_token(
    secret: &[u8],
    user: &str,
    ago: Duration,
) -> Result<String, jsonwebtoken::errors::Error> {
    #[derive(serde::Serialize)]
    struct Claims<'a> {
        sub: &'a str,
        exp: u64,
    }
    let exp = jsonwebtoken::get_current_timestamp().saturating_sub(ago.as_secs());
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &Claims { sub: user, exp },
        &jsonwebtoken::EncodingKey::from_secret(secret)?,
    )
}

/// Rooms named by `name(i)` for `i` in `0..rooms`, created concurrently by `owners` (owner `o`
/// creates `o`, `o + n`, … with `n` owners), then every room whose index is not a multiple
/// of ten closed by its owner: a directory with churn behind it. Returns the owners.
///
/// # Errors
/// The first error reply or transport error.
pub async fn create_rooms_close_nine_in_ten(
    owners: Vec<Client>,
    rooms: usize,
    name: fn(usize) -> String,
) -> Result<Vec<Client>, ClientError> {
    let n = owners.len().max(1);
    let mut tasks = Vec::new();
    for (o, mut c) in owners.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            for i in (o..rooms).step_by(n) {
                c.create_room(json!({"room": name(i), "title": format!("Room {i}"), "seats": 4}))
                    .await?;
            }
            for i in (o..rooms).step_by(n).filter(|i| i % 10 != 0) {
                let room = RoomId::from(name(i));
                c.join(&room, false, None).await?;
                c.request("room.close", json!({ "room": room })).await?;
            }
            Ok::<_, ClientError>(c)
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        match t.await {
            Ok(r) => out.push(r?),
            Err(e) => return Err(ClientError::BadFrame(format!("owner task: {e}"))),
        }
    }
    Ok(out)
}

/// The moderations of `user` on `seat` in `room` that VIP protection covers, as `(op, d)`:
/// seat mute, seat kick, chat mute, room kick, room ban (mutes and bans for 60 s). A test
/// that an admin is refused each one of a protected VIP walks them all.
#[must_use]
pub fn vip_covered_moderations(room: &RoomId, user: &str, seat: u32) -> [(&'static str, Value); 5] {
    [
        (
            "seat.mute",
            json!({"room": room, "seat": seat, "muted": true}),
        ),
        ("seat.kick", json!({"room": room, "user": user})),
        (
            "chat.mute",
            json!({"room": room, "user": user, "seconds": 60}),
        ),
        ("room.kick", json!({"room": room, "user": user})),
        (
            "room.ban",
            json!({"room": room, "user": user, "seconds": 60}),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_gaps_and_duplicates_and_hold_at_the_last_contiguous_event() {
        let mut p = Position::default();
        track_position(&mut p, 4, 1);
        track_position(&mut p, 4, 2);
        assert_eq!((p.epoch, p.seq, p.gaps), (4, 2, 0));
        track_position(&mut p, 4, 2);
        assert_eq!(p.duplicates, 1);
        track_position(&mut p, 4, 5);
        assert_eq!((p.seq, p.gaps, p.gap_pending), (2, 1, true));
        track_position(&mut p, 4, 3);
        assert_eq!(p.seq, 2, "no advance while a gap is pending");
        let mut q = Position::default();
        track_position(&mut q, 4, 7);
        track_position(&mut q, 9, 1);
        assert_eq!((q.epoch, q.seq, q.epoch_changes, q.gaps), (9, 1, 1, 0));
        track_position(&mut q, 11, 3);
        assert_eq!(
            (q.epoch, q.gaps, q.gap_pending),
            (9, 1, true),
            "a new epoch must start at 1"
        );
    }
}
