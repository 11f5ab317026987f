//! A client far behind its room: while the server's write to it waits for it, the frames it
//! sends are still read and handled. A real server on loopback, real WebSocket clients, the
//! slow one on a socket with a 4 KiB receive buffer that stops reading once it has joined.
//!
//! The write to it then stays blocked for the whole test (the write time-out is 120 s and the
//! outbox bound is out of reach), so the test does not depend on how fast anything runs: a
//! server that reads a socket only between writes never reads the slow client's chat, and the
//! test fails at its bound; one that reads during the write hands the chat to the room at once.
//! Once the client reads again its stream must be whole: the pong to the ping it sent while the
//! write was blocked came between our frames, never inside one.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use protocol::RoomId;
use serde_json::json;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use crate::support::server;
use server::Server;

use crate::support::standalone;
use standalone::WAIT;

/// How far behind the room the slow reader falls: ~5 MB of chat, more than a loopback send
/// buffer (4 MiB at most) and its own receive buffer hold, so the server's write to it waits.
const BEHIND_FRAMES: usize = 10_000;

/// How long the room may take to hear the slow reader's chat. Read during the write, it takes
/// milliseconds; read only after it, never (within the 120 s write time-out).
const HEARD_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_client_far_behind_its_room_still_has_its_frames_read() {
    let s = Server::start_with(|g, _| {
        (g.rate_per_sec, g.rate_burst) = (100_000, 100_000);
        // Room for the backlog: neither the slow-consumer bound, the write time-out nor the
        // heartbeat ends the slow reader during the test.
        (g.outbox_frames, g.outbox_bytes) = (1 << 20, 256 << 20);
        g.write_timeout = Duration::from_secs(120);
        g.heartbeat = Duration::from_secs(600);
    })
    .await;
    let room = RoomId::from("busy");
    let mut watcher = s.connect("watcher").await;
    watcher.join(&room, false, None).await.unwrap();
    // The watcher reads all along and reports every chat line's sender (room for all of them:
    // none is dropped).
    let (heard_tx, mut heard) = tokio::sync::mpsc::channel::<String>(2 * BEHIND_FRAMES);
    let watching = tokio::spawn(async move {
        while let Ok(e) = watcher.next_event(Duration::from_secs(60)).await {
            if e.ev == "chat" {
                let from = e.d["from"].as_str().unwrap_or_default().to_owned();
                let _ = heard_tx.try_send(from);
            }
        }
    });
    let mut slow = slow_member(&s, "slow", &room).await;
    let mut publisher = s.connect("pub").await;
    publisher.join(&room, false, None).await.unwrap();
    let text = "x".repeat(480);
    for _ in 0..BEHIND_FRAMES / 50 {
        let mut ids = Vec::new();
        for _ in 0..50 {
            let chat = json!({"room": room, "text": text});
            ids.push(publisher.send("chat.send", chat).await.unwrap());
        }
        for id in ids {
            publisher.reply_to(id, WAIT).await.unwrap();
        }
        let _ = publisher.queued_events();
    }
    // The watcher heard the whole flood: what it hears next is the slow reader.
    let deadline = Instant::now() + Duration::from_secs(60);
    for _ in 0..BEHIND_FRAMES {
        let from = tokio::time::timeout_at(deadline, heard.recv()).await;
        assert_eq!(from.unwrap().as_deref(), Some("pub"));
    }
    // A ping (its pong is held until the batch under way is out), then a chat line.
    let said = Instant::now();
    slow.send(Message::Ping(Default::default())).await.unwrap();
    let chat = json!({"id": 10, "op": "chat.send", "d": {"room": room, "text": "slow"}});
    slow.send(Message::text(chat.to_string())).await.unwrap();
    let from = tokio::time::timeout(HEARD_WITHIN, heard.recv()).await;
    assert!(
        from.is_ok(),
        "the room did not hear the slow reader within {HEARD_WITHIN:?}: its frames were not \
         read while the write to it was blocked"
    );
    assert_eq!(from.unwrap().as_deref(), Some("slow"));
    let took = said.elapsed();
    // Reading again, the slow reader gets its backlog whole: every frame parses (a pong
    // written inside one of them would break the stream), then the pong and the reply come.
    let (mut pong, mut replied, mut frames) = (false, false, 0usize);
    while !(pong && replied) {
        let msg = tokio::time::timeout(WAIT, slow.next()).await;
        let msg = msg.unwrap_or_else(|_| panic!("pong {pong}, reply {replied}, {frames} frames"));
        match msg.unwrap().unwrap() {
            Message::Pong(_) => pong = true,
            Message::Text(t) => {
                frames += 1;
                let v: serde_json::Value = serde_json::from_str(&t).unwrap();
                if v["re"] == 10 {
                    assert!(v["ok"].is_object(), "{v}");
                    replied = true;
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(frames > BEHIND_FRAMES, "{frames} frames");
    eprintln!("the room heard the slow reader {took:?} after it spoke");
    watching.abort();
    s.stop().await;
}

/// A client that joins `room` on a socket with a 4 KiB receive buffer, then reads nothing
/// until the test reads for it.
async fn slow_member(
    s: &Server,
    user: &str,
    room: &RoomId,
) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let addr = s
        .url
        .strip_prefix("ws://")
        .and_then(|a| a.strip_suffix("/ws"));
    let stream = sock.connect(addr.unwrap().parse().unwrap()).await.unwrap();
    let url = format!("{}?token={}", s.url, s.token(user));
    let (mut ws, _) = tokio_tungstenite::client_async(url, stream).await.unwrap();
    let join = json!({"id": 1, "op": "room.join", "d": {"room": room}});
    ws.send(Message::text(join.to_string())).await.unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next()).await;
        let msg = msg.unwrap().unwrap().unwrap();
        if msg.to_text().unwrap().starts_with(r#"{"re":1,"ok""#) {
            return ws;
        }
    }
}
