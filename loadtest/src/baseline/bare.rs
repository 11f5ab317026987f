//! The bare baseline (`baseline-server --bare`): the plainest room broadcast the scenarios
//! can drive on tokio-tungstenite, the ceiling Chorus' chat is held to. No tokens, no gift
//! ledger, no global lock on a message's path.
//!
//! - One task per connection: it reads the socket and writes the frames queued for it, and
//!   flushes once per wake-up (whatever was queued meanwhile goes in the same write).
//! - A room is an `Arc` the connection keeps from its join: a `chat.send` locks that room
//!   alone (to number the event and walk its members), never a map of rooms.
//! - A chat event is built once as one string around the sender's text, copied from the
//!   request as it came (already JSON), and shared by every member as `Utf8Bytes` (a
//!   reference count, no copy, no re-encode per member).
//! - Requests are parsed once into borrowed fields.
//!
//! It serves what `rooms` and `fanout` send: `room.join` (`{"epoch":1,"seq":S,"resync":..}`,
//! one room per connection), `chat.send` (`{"seq":S}` and one `chat` event to every member,
//! the sender too), `room.leave` and `ping`; anything else `UNKNOWN_OP`. A member whose queue
//! is full misses the event (the generator counts it lost), as a slow consumer would.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use super::{OUTBOX_FRAMES, WRITE_BATCH, ws_config};

/// One room: its last seq and its members' queues.
#[derive(Default)]
struct Room {
    inner: Mutex<Members>,
}

#[derive(Default)]
struct Members {
    seq: u64,
    queues: Vec<(u64, mpsc::Sender<Utf8Bytes>)>,
}

impl Room {
    fn lock(&self) -> MutexGuard<'_, Members> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The rooms by name (looked up only on join).
#[derive(Default)]
struct Rooms {
    by_name: Mutex<HashMap<String, Arc<Room>>>,
    next_conn: AtomicU64,
}

/// A request's fields, borrowed from the frame.
#[derive(Deserialize)]
struct Req<'a> {
    id: Option<u64>,
    #[serde(borrow)]
    op: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    d: Option<D<'a>>,
}

#[derive(Deserialize, Default)]
struct D<'a> {
    #[serde(borrow, default)]
    room: Option<Cow<'a, str>>,
    /// The chat text as it came (a JSON string), copied into the event unchanged.
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(default)]
    since: Option<Since>,
}

#[derive(Deserialize)]
struct Since {
    #[serde(default)]
    epoch: u64,
    #[serde(default)]
    seq: u64,
}

/// The room a connection joined: the room, and its name as JSON (quoted, escaped).
struct Joined {
    room: Arc<Room>,
    name: String,
    name_json: String,
}

/// Binds `addr` and serves the bare protocol until the task is dropped.
///
/// # Errors
/// The address cannot be bound.
pub async fn bind(addr: SocketAddr) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let rooms = Arc::new(Rooms::default());
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(serve(stream, Arc::clone(&rooms)));
        }
    });
    Ok((local, task))
}

async fn serve(stream: TcpStream, rooms: Arc<Rooms>) {
    let _ = stream.set_nodelay(true);
    let Ok(mut ws) = tokio_tungstenite::accept_async_with_config(stream, Some(ws_config())).await
    else {
        return;
    };
    let conn = rooms.next_conn.fetch_add(1, Ordering::Relaxed);
    let (tx, mut rx) = mpsc::channel::<Utf8Bytes>(OUTBOX_FRAMES);
    let hello = format!(
        r#"{{"ev":"hello","d":{{"session":"bare-{conn}","heartbeat_ms":0,"server":"bare"}}}}"#
    );
    let mut joined: Option<Joined> = None;
    let mut open = ws.send(Message::Text(hello.into())).await.is_ok();
    while open {
        tokio::select! {
            m = rx.recv() => match m {
                Some(f) => open = ws.feed(Message::Text(f)).await.is_ok(),
                None => break,
            },
            m = ws.next() => match m {
                Some(Ok(Message::Text(t))) => {
                    let reply = handle(&rooms, conn, &tx, &mut joined, t.as_str());
                    open = ws.feed(Message::Text(reply.into())).await.is_ok();
                }
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
        }
        // Whatever else is queued goes in the same write.
        open = open && drain_and_flush(&mut ws, &mut rx).await;
    }
    if let Some(j) = joined {
        leave(&j.room, conn);
    }
}

/// Feeds up to a write batch of queued frames, then flushes once; false when the socket is
/// gone.
async fn drain_and_flush(
    ws: &mut WebSocketStream<TcpStream>,
    rx: &mut mpsc::Receiver<Utf8Bytes>,
) -> bool {
    for _ in 1..WRITE_BATCH {
        let Ok(f) = rx.try_recv() else { break };
        if ws.feed(Message::Text(f)).await.is_err() {
            return false;
        }
    }
    ws.flush().await.is_ok()
}

fn leave(room: &Room, conn: u64) {
    let mut m = room.lock();
    if let Some(i) = m.queues.iter().position(|(c, _)| *c == conn) {
        m.queues.swap_remove(i);
    }
}

fn ok(id: u64, body: &str) -> String {
    format!(r#"{{"re":{id},"ok":{body}}}"#)
}

fn err(id: Option<u64>, code: &str) -> String {
    let re = id.map_or_else(|| "null".to_owned(), |i| i.to_string());
    format!(r#"{{"re":{re},"err":{{"code":"{code}","msg":"bare"}}}}"#)
}

/// Answers one request (and, for `chat.send`, sends its event to the room).
fn handle(
    rooms: &Rooms,
    conn: u64,
    tx: &mpsc::Sender<Utf8Bytes>,
    joined: &mut Option<Joined>,
    text: &str,
) -> String {
    let Ok(req) = serde_json::from_str::<Req<'_>>(text) else {
        return err(None, "BAD_FRAME");
    };
    let (Some(id), Some(op)) = (req.id, req.op) else {
        return err(req.id, "BAD_FRAME");
    };
    let d = req.d.unwrap_or_default();
    match op.as_ref() {
        "chat.send" => {
            let (Some(room), Some(text)) = (d.room, d.text) else {
                return err(Some(id), "BAD_FRAME");
            };
            let Some(j) = joined.as_ref().filter(|j| j.name == room) else {
                return err(Some(id), "NOT_IN_ROOM");
            };
            let text = text.get();
            let mut m = j.room.lock();
            m.seq += 1;
            let seq = m.seq;
            let mut ev = String::with_capacity(80 + j.name_json.len() + text.len());
            let _ = write!(
                ev,
                r#"{{"ev":"chat","room":{},"epoch":1,"seq":{seq},"d":{{"from":"c{conn}","text":{text}}}}}"#,
                j.name_json
            );
            // Encoded once; every member gets the same bytes.
            let frame = Utf8Bytes::from(ev);
            for (_, q) in &m.queues {
                let _ = q.try_send(frame.clone());
            }
            drop(m);
            ok(id, &format!(r#"{{"seq":{seq}}}"#))
        }
        "room.join" => {
            let Some(name) = d.room else {
                return err(Some(id), "BAD_FRAME");
            };
            if let Some(old) = joined.take() {
                leave(&old.room, conn);
            }
            let room = {
                let mut by_name = rooms
                    .by_name
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                Arc::clone(by_name.entry(name.clone().into_owned()).or_default())
            };
            let seq = {
                let mut m = room.lock();
                m.queues.push((conn, tx.clone()));
                m.seq
            };
            // No history: a resume is served only when nothing was missed.
            let resync = d.since.is_some_and(|s| s.epoch != 1 || s.seq != seq);
            let name_json = serde_json::to_string(name.as_ref()).unwrap_or_default();
            *joined = Some(Joined {
                room,
                name: name.into_owned(),
                name_json,
            });
            ok(
                id,
                &format!(r#"{{"epoch":1,"seq":{seq},"resync":{resync}}}"#),
            )
        }
        "room.leave" => {
            if let Some(old) = joined.take() {
                leave(&old.room, conn);
            }
            ok(id, "{}")
        }
        "ping" => ok(id, r#"{"t":0}"#),
        _ => err(Some(id), "UNKNOWN_OP"),
    }
}
