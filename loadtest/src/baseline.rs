//! The baseline: a minimal room-broadcast server on the same stack as Chorus (tokio +
//! tokio-tungstenite, the same buffer sizes and write batching), with no auth, no routing, no
//! storage, no limits beyond bounded queues. Benchmarks report Chorus as a ratio to it.
//!
//! It understands just enough of the protocol for the scenarios: `hello` on open; `room.join`
//! (`{"epoch":1,"seq":S,"resync":..,"snapshot":{..}}`, one room per connection); `chat.send`
//! (one `chat` event per message, encoded once and shared by every member, then `{"seq":S}`);
//! `room.leave`, `seat.take`, `seat.leave` and `ping` answered `ok`; anything else
//! `UNKNOWN_OP`. A member whose queue is full misses the event (counted as loss by the
//! generator), as a slow consumer would.
//!
//! Started with a ledger ([`Options::ledger`]) it also serves `gift.send` (the `rose`, 10
//! coins to each receiver, `count` 1..=9,999): the gift is committed durably by
//! [`ledger::Ledger`], then one `gift` event is encoded once and shared by the room's members,
//! then the reply (`{"order","balance"}`, or `INSUFFICIENT_FUNDS`; a reused `req_id` gets its
//! order again and moves nothing). Users are the `sub` of an HS256 bearer token checked with
//! [`Options::jwt_secret`] (a socket without a valid one is refused with 401), and an admin
//! port ([`Options::admin`]) serves what `gifts` asks of Chorus' admin API: grants, wallets,
//! the ledger's totals, and `/metrics` with the frames and socket writes counted as Chorus
//! counts them. Recipients are not checked for membership; there are no seats, leaderboards
//! or lucky gifts.

pub mod admin;
pub mod bare;
pub mod ledger;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::Utf8Bytes;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use uuid::Uuid;

use ledger::{Gift, GiftOutcome, Ledger};

/// Per-connection outbound queue, in frames (Chorus' default outbox).
pub(crate) const OUTBOX_FRAMES: usize = 1024;
/// Frames fed before one flush (Chorus' `WRITE_BATCH_FRAMES`).
pub(crate) const WRITE_BATCH: usize = 64;
/// Read buffer (Chorus' default).
const READ_BUFFER: usize = 256;
/// Write buffer (Chorus' default).
const WRITE_BUFFER: usize = 16 * 1024;
/// Largest frame (Chorus' default).
const MAX_FRAME: usize = 64 * 1024;

#[derive(Default)]
struct Room {
    seq: u64,
    members: HashMap<u64, mpsc::Sender<Message>>,
}

/// The one gift the baseline sells.
pub const ROSE: &str = "rose";
/// Its price, per receiver (Chorus' default catalog).
pub const ROSE_PRICE: i64 = 10;
/// Most receivers of one gift (Chorus' limit).
const MAX_RECEIVERS: usize = 20;

/// How the baseline server runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// WebSocket listen address.
    pub addr: SocketAddr,
    /// The gift ledger's SQLite file; without it `gift.send` is `UNKNOWN_OP`.
    pub ledger: Option<PathBuf>,
    /// The admin port (grants, wallets, totals, `/metrics`).
    pub admin: Option<SocketAddr>,
    /// HS256 secret of the users' bearer tokens; without it users are named by connection.
    pub jwt_secret: Option<Vec<u8>>,
    /// Serve the bare protocol instead ([`bare`]: chat only, one task per connection, no
    /// ledger, tokens or admin port).
    pub bare: bool,
}

/// What the server shares between its connections.
#[derive(Default)]
pub struct State {
    rooms: Mutex<HashMap<String, Room>>,
    next_conn: AtomicU64,
    ledger: Option<Ledger>,
    jwt_secret: Option<Vec<u8>>,
    /// Frames written to sockets.
    frames_out: AtomicU64,
    /// The flushes (socket writes) that carried them.
    write_batches: AtomicU64,
}

impl State {
    fn rooms(&self) -> MutexGuard<'_, HashMap<String, Room>> {
        self.rooms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Binds `addr` and serves until the task is dropped.
///
/// # Errors
/// The address cannot be bound.
pub async fn bind(addr: SocketAddr) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    bind_with(Arc::new(State::default()), addr).await
}

async fn bind_with(
    state: Arc<State>,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    accept_each(state, addr, |stream, state| async move {
        let _ = serve(stream, state).await;
    })
    .await
}

/// Binds `addr` and runs `conn` on every accepted stream, each in a task of its own, until
/// the returned task is dropped.
async fn accept_each<F, Fut>(
    state: Arc<State>,
    addr: SocketAddr,
    conn: F,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)>
where
    F: Fn(TcpStream, Arc<State>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(conn(stream, Arc::clone(&state)));
        }
    });
    Ok((local, task))
}

/// A running baseline server: its addresses, and the tasks that serve them (dropping this
/// does not stop them; abort them).
#[derive(Debug)]
pub struct Running {
    /// The WebSocket address.
    pub addr: SocketAddr,
    /// The admin address, when asked for.
    pub admin: Option<SocketAddr>,
    /// The WebSocket and admin accept loops.
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Starts the server with `opts`: opens the ledger, binds the WebSocket and admin ports.
///
/// # Errors
/// A port cannot be bound or the ledger cannot be opened.
pub async fn start(opts: Options) -> anyhow::Result<Running> {
    if opts.bare {
        anyhow::ensure!(
            opts.ledger.is_none() && opts.admin.is_none() && opts.jwt_secret.is_none(),
            "the bare baseline serves chat only: no ledger, admin port or tokens"
        );
        let (addr, task) = bare::bind(opts.addr).await?;
        return Ok(Running {
            addr,
            admin: None,
            tasks: vec![task],
        });
    }
    let ledger = match &opts.ledger {
        Some(path) => Some(Ledger::open(path)?),
        None => None,
    };
    let state = Arc::new(State {
        ledger,
        jwt_secret: opts.jwt_secret,
        ..State::default()
    });
    let (addr, ws) = bind_with(Arc::clone(&state), opts.addr).await?;
    let mut tasks = vec![ws];
    let admin = match opts.admin {
        Some(a) => {
            let (local, task) = admin::bind(state, a).await?;
            tasks.push(task);
            Some(local)
        }
        None => None,
    };
    Ok(Running { addr, admin, tasks })
}

/// Serves with `opts` forever (the `baseline-server` subcommand).
///
/// # Errors
/// A port cannot be bound or the ledger cannot be opened.
pub async fn run(opts: Options) -> anyhow::Result<()> {
    let running = start(opts).await?;
    // Harnesses that start the server on port 0 read these lines (admin first: the listening
    // line means ready).
    if let Some(a) = running.admin {
        eprintln!("baseline-server admin on http://{a}");
    }
    eprintln!("baseline-server listening on ws://{}/ws", running.addr);
    for t in running.tasks {
        let _ = t.await;
    }
    Ok(())
}

#[derive(Deserialize)]
struct Req<'a> {
    id: Option<u64>,
    #[serde(borrow)]
    op: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    d: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RoomD {
    room: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    since: Option<Value>,
}

#[derive(Deserialize)]
struct GiftD {
    room: String,
    req_id: String,
    gift: String,
    #[serde(default = "one")]
    count: u32,
    to: Vec<String>,
}

fn one() -> u32 {
    1
}

/// A `gift.send` that passed its checks, for the ledger.
struct GiftRequest {
    id: u64,
    room: String,
    count: u32,
    gift: Gift,
}

/// What a request needs: a reply now, or a gift for the ledger first.
enum Handled {
    Reply(Message),
    Gift(GiftRequest),
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
}

/// The user of a handshake's `Authorization: Bearer` token, checked with `secret`.
fn user_of(req: &Request, secret: &[u8]) -> Option<String> {
    let token = req
        .headers()
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?;
    let key = jsonwebtoken::DecodingKey::from_secret(secret).ok()?;
    let v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
    Some(
        jsonwebtoken::decode::<Claims>(token, &key, &v)
            .ok()?
            .claims
            .sub,
    )
}

/// The order id of `sender`'s `req_id`, derived as Chorus derives its gift ids: a UUIDv7
/// request's millisecond first (the generator times the events by it), the rest a hash.
pub fn order_id(sender: &str, req_id: &str) -> Uuid {
    let hashed = Uuid::new_v5(
        &Uuid::NAMESPACE_OID,
        format!("{sender}\0{req_id}").as_bytes(),
    );
    match Uuid::try_parse(req_id) {
        Ok(r) if r.get_version_num() == 7 => {
            let mut b = *hashed.as_bytes();
            b[..6].copy_from_slice(&r.as_bytes()[..6]);
            uuid::Builder::from_custom_bytes(b).into_uuid()
        }
        _ => hashed,
    }
}

fn reply_ok(id: u64, ok: &str) -> Message {
    Message::Text(format!(r#"{{"re":{id},"ok":{ok}}}"#).into())
}

fn reply_err(id: Option<u64>, code: &str) -> Message {
    let re = id.map_or_else(|| "null".to_owned(), |i| i.to_string());
    Message::Text(format!(r#"{{"re":{re},"err":{{"code":"{code}","msg":"baseline"}}}}"#).into())
}

/// The WebSocket configuration both baselines share (Chorus' defaults).
pub(crate) fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER)
        .max_message_size(Some(MAX_FRAME))
        .max_frame_size(Some(MAX_FRAME))
}

async fn serve(stream: TcpStream, state: Arc<State>) -> anyhow::Result<()> {
    let _ = stream.set_nodelay(true);
    let config = ws_config();
    let mut user = None;
    #[allow(
        clippy::result_large_err,
        reason = "tungstenite's handshake callback returns its own error response"
    )]
    let check = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let Some(secret) = &state.jwt_secret else {
            return Ok(resp);
        };
        match user_of(req, secret) {
            Some(u) => {
                user = Some(u);
                Ok(resp)
            }
            None => {
                let mut refused = ErrorResponse::new(Some("bad or missing token".into()));
                *refused.status_mut() =
                    tokio_tungstenite::tungstenite::http::StatusCode::UNAUTHORIZED;
                Err(refused)
            }
        }
    };
    let ws = tokio_tungstenite::accept_hdr_async_with_config(stream, check, Some(config)).await?;
    let conn = state.next_conn.fetch_add(1, Ordering::Relaxed);
    // Empty without a token: a chat socket then costs no more than before users existed.
    let user = user.unwrap_or_default();
    let (mut sink, mut source) = ws.split();
    let (tx, mut rx) = mpsc::channel::<Message>(OUTBOX_FRAMES);
    let counters = Arc::clone(&state);
    let writer = tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            if sink.feed(first).await.is_err() {
                return;
            }
            let mut n = 1;
            while n < WRITE_BATCH {
                let Ok(m) = rx.try_recv() else { break };
                if sink.feed(m).await.is_err() {
                    return;
                }
                n += 1;
            }
            if sink.flush().await.is_err() {
                return;
            }
            counters.frames_out.fetch_add(n as u64, Ordering::Relaxed);
            counters.write_batches.fetch_add(1, Ordering::Relaxed);
        }
    });
    let hello = format!(
        r#"{{"ev":"hello","d":{{"session":"baseline-{conn}","heartbeat_ms":0,"server":"baseline"}}}}"#
    );
    let _ = tx.send(Message::Text(hello.into())).await;
    let mut my_room: Option<String> = None;
    while let Some(Ok(msg)) = source.next().await {
        let text = match msg {
            Message::Text(t) => t,
            Message::Close(_) => break,
            Message::Binary(_) => {
                let _ = tx.send(reply_err(None, "BAD_FRAME")).await;
                continue;
            }
            _ => continue,
        };
        let reply = match handle(&state, conn, &user, &tx, &mut my_room, &text) {
            Handled::Reply(m) => m,
            Handled::Gift(g) => send_gift(&state, g).await,
        };
        if tx.send(reply).await.is_err() {
            break;
        }
    }
    if let Some(r) = my_room.take() {
        leave(&state, &r, conn);
    }
    drop(tx);
    let _ = writer.await;
    Ok(())
}

fn leave(state: &State, room: &str, conn: u64) {
    let mut rooms = state.rooms();
    if let Some(r) = rooms.get_mut(room) {
        r.members.remove(&conn);
    }
}

/// Commits a gift, then (when it settled now) sends its event to the room; the reply.
async fn send_gift(state: &State, g: GiftRequest) -> Message {
    let Some(ledger) = &state.ledger else {
        return reply_err(Some(g.id), "UNKNOWN_OP");
    };
    let order = order_id(&g.gift.sender, &g.gift.req_id);
    let balance = match ledger.send_gift(g.gift).await {
        Ok((GiftOutcome::Settled { balance }, gift)) => {
            let total = gift.total().unwrap_or_default();
            let mut rooms = state.rooms();
            if let Some(room) = rooms.get_mut(&g.room) {
                room.seq += 1;
                let ev = serde_json::json!({
                    "ev": "gift", "room": g.room, "epoch": 1, "seq": room.seq,
                    "d": { "order": order, "from": gift.sender, "to": gift.receivers,
                           "gift": ROSE, "count": g.count, "coins": total },
                });
                // Encode once; every member gets the same bytes.
                let frame = Utf8Bytes::from(ev.to_string());
                for m in room.members.values() {
                    let _ = m.try_send(Message::Text(frame.clone()));
                }
            }
            balance
        }
        Ok((GiftOutcome::Duplicate { balance }, _)) => balance,
        Ok((GiftOutcome::InsufficientFunds { .. }, _)) => {
            return reply_err(Some(g.id), "INSUFFICIENT_FUNDS");
        }
        Err(ledger::Error::BadAmount) => return reply_err(Some(g.id), "BAD_REQUEST"),
        Err(_) => return reply_err(Some(g.id), "INTERNAL"),
    };
    reply_ok(
        g.id,
        &format!(r#"{{"order":"{order}","balance":{balance}}}"#),
    )
}

/// Checks a `gift.send`; the gift for the ledger, or the error reply.
fn gift_request(
    id: u64,
    sender: String,
    my_room: Option<&str>,
    d: Option<&RawValue>,
) -> Result<GiftRequest, Message> {
    let d = d
        .and_then(|d| serde_json::from_str::<GiftD>(d.get()).ok())
        .ok_or_else(|| reply_err(Some(id), "BAD_FRAME"))?;
    if my_room != Some(d.room.as_str()) {
        return Err(reply_err(Some(id), "NOT_IN_ROOM"));
    }
    let fits = d.gift == ROSE
        && (1..=9_999).contains(&d.count)
        && !d.req_id.is_empty()
        && d.req_id.len() <= 128
        && !d.to.is_empty()
        && d.to.len() <= MAX_RECEIVERS;
    if !fits {
        return Err(reply_err(Some(id), "BAD_REQUEST"));
    }
    Ok(GiftRequest {
        id,
        room: d.room,
        count: d.count,
        gift: Gift {
            req_id: d.req_id,
            sender,
            receivers: d.to,
            coins_each: ROSE_PRICE * i64::from(d.count),
        },
    })
}

fn handle(
    state: &State,
    conn: u64,
    user: &str,
    tx: &mpsc::Sender<Message>,
    my_room: &mut Option<String>,
    text: &str,
) -> Handled {
    let Ok(req) = serde_json::from_str::<Req<'_>>(text) else {
        return Handled::Reply(reply_err(None, "BAD_FRAME"));
    };
    let (Some(id), Some(op)) = (req.id, req.op) else {
        return Handled::Reply(reply_err(req.id, "BAD_FRAME"));
    };
    if op == "gift.send" && state.ledger.is_some() {
        // Named by connection when the server checks no tokens.
        let sender = if user.is_empty() {
            format!("c{conn}")
        } else {
            user.to_owned()
        };
        return match gift_request(id, sender, my_room.as_deref(), req.d) {
            Ok(g) => Handled::Gift(g),
            Err(m) => Handled::Reply(m),
        };
    }
    Handled::Reply(handle_room(state, conn, tx, my_room, id, &op, req.d))
}

fn handle_room(
    state: &State,
    conn: u64,
    tx: &mpsc::Sender<Message>,
    my_room: &mut Option<String>,
    id: u64,
    op: &str,
    d: Option<&RawValue>,
) -> Message {
    let d = || d.and_then(|d| serde_json::from_str::<RoomD>(d.get()).ok());
    match op {
        "ping" => reply_ok(id, r#"{"t":0}"#),
        "room.join" => {
            let Some(d) = d() else {
                return reply_err(Some(id), "BAD_FRAME");
            };
            if let Some(old) = my_room.take()
                && old != d.room
            {
                leave(state, &old, conn);
            }
            let mut rooms = state.rooms();
            let room = rooms.entry(d.room.clone()).or_default();
            room.members.insert(conn, tx.clone());
            let seq = room.seq;
            let members = room.members.len();
            drop(rooms);
            // No history: a resume is served only when nothing was missed.
            let resync = d
                .since
                .as_ref()
                .is_some_and(|s| s["epoch"].as_u64() != Some(1) || s["seq"].as_u64() != Some(seq));
            let ok = format!(
                r#"{{"snapshot":{{"room":"{}","owner":"","seats":[],"members":{members},"epoch":1,"seq":{seq}}},"epoch":1,"seq":{seq},"resync":{resync}}}"#,
                d.room
            );
            *my_room = Some(d.room);
            reply_ok(id, &ok)
        }
        "chat.send" => {
            let Some(d) = d() else {
                return reply_err(Some(id), "BAD_FRAME");
            };
            let Some(text) = d.text else {
                return reply_err(Some(id), "BAD_FRAME");
            };
            if my_room.as_deref() != Some(d.room.as_str()) {
                return reply_err(Some(id), "NOT_IN_ROOM");
            }
            let mut rooms = state.rooms();
            let Some(room) = rooms.get_mut(&d.room) else {
                return reply_err(Some(id), "ROOM_NOT_FOUND");
            };
            room.seq += 1;
            let seq = room.seq;
            // Encode once; every member gets the same bytes.
            let ev = serde_json::json!({
                "ev": "chat", "room": d.room, "epoch": 1, "seq": seq,
                "d": { "from": format!("c{conn}"), "text": text },
            });
            let frame = Utf8Bytes::from(ev.to_string());
            for m in room.members.values() {
                let _ = m.try_send(Message::Text(frame.clone()));
            }
            drop(rooms);
            reply_ok(id, &format!(r#"{{"seq":{seq}}}"#))
        }
        "room.leave" => {
            if let Some(r) = my_room.take() {
                leave(state, &r, conn);
            }
            reply_ok(id, "{}")
        }
        "seat.take" => reply_ok(id, r#"{"seat":0}"#),
        "seat.leave" => reply_ok(id, "{}"),
        _ => reply_err(Some(id), "UNKNOWN_OP"),
    }
}
