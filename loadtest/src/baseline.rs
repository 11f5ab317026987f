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

use std::collections::HashMap;
use std::net::SocketAddr;
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
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

/// Per-connection outbound queue, in frames (Chorus' default outbox).
const OUTBOX_FRAMES: usize = 1024;
/// Frames fed before one flush (Chorus' `WRITE_BATCH_FRAMES`).
const WRITE_BATCH: usize = 64;
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

#[derive(Default)]
struct State {
    rooms: Mutex<HashMap<String, Room>>,
    next_conn: AtomicU64,
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
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let state = Arc::new(State::default());
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let _ = serve(stream, state).await;
            });
        }
    });
    Ok((local, task))
}

/// Serves on `addr` forever (the `baseline-server` subcommand).
///
/// # Errors
/// The address cannot be bound.
pub async fn run(addr: SocketAddr) -> std::io::Result<()> {
    let (local, task) = bind(addr).await?;
    eprintln!("baseline-server listening on ws://{local}/ws");
    let _ = task.await;
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

fn reply_ok(id: u64, ok: &str) -> Message {
    Message::Text(format!(r#"{{"re":{id},"ok":{ok}}}"#).into())
}

fn reply_err(id: Option<u64>, code: &str) -> Message {
    let re = id.map_or_else(|| "null".to_owned(), |i| i.to_string());
    Message::Text(format!(r#"{{"re":{re},"err":{{"code":"{code}","msg":"baseline"}}}}"#).into())
}

async fn serve(stream: TcpStream, state: Arc<State>) -> anyhow::Result<()> {
    let _ = stream.set_nodelay(true);
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER)
        .max_message_size(Some(MAX_FRAME))
        .max_frame_size(Some(MAX_FRAME));
    let ws = tokio_tungstenite::accept_async_with_config(stream, Some(config)).await?;
    let conn = state.next_conn.fetch_add(1, Ordering::Relaxed);
    let (mut sink, mut source) = ws.split();
    let (tx, mut rx) = mpsc::channel::<Message>(OUTBOX_FRAMES);
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
        let reply = handle(&state, conn, &tx, &mut my_room, &text);
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

fn handle(
    state: &State,
    conn: u64,
    tx: &mpsc::Sender<Message>,
    my_room: &mut Option<String>,
    text: &str,
) -> Message {
    let Ok(req) = serde_json::from_str::<Req<'_>>(text) else {
        return reply_err(None, "BAD_FRAME");
    };
    let (Some(id), Some(op)) = (req.id, req.op) else {
        return reply_err(req.id, "BAD_FRAME");
    };
    let d = || {
        req.d
            .and_then(|d| serde_json::from_str::<RoomD>(d.get()).ok())
    };
    match op.as_ref() {
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
