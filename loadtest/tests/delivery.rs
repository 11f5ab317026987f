//! Delivery guarantees with real processes: graceful drain of a gateway (1001 spread over a
//! window, clients resume elsewhere without losing an event), slow consumers (closed with
//! 4000, memory bounded, others unaffected), a close that does not wait for a blocked write,
//! and admission control (503 + Retry-After).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use futures_util::SinkExt;
use kit::client::{self, ClientError};
use kit::cluster::{Cluster, ClusterOptions};
use kit::node::{NODE_READY_TIMEOUT, wait_listening};
use kit::standalone::Server;
use protocol::RoomId;
use serde_json::json;
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(10);
/// How long a join retries while the room's ownership moves.
const JOIN_WITHIN: Duration = Duration::from_secs(20);

fn chats(events: &[kit::client::Event]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.ev == "chat")
        .map(|e| e.d["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn sigterm_on_a_gateway_spreads_1001_and_clients_resume_elsewhere_losing_nothing() {
    let cluster = Cluster::start(ClusterOptions {
        shards: 2,
        gateways: 2,
        env: vec![("CHORUS_DRAIN_WINDOW_MS".into(), "1000".into())],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let room = RoomId::from("drain");
    let mut p = cluster.connect(1, "publisher").await.unwrap();
    p.join_retrying(&room, None, JOIN_WITHIN).await.unwrap();
    let n = 20;
    let mut clients = Vec::new();
    for i in 0..n {
        let mut c = cluster.connect(0, &format!("c{i}")).await.unwrap();
        c.join_retrying(&room, None, JOIN_WITHIN).await.unwrap();
        clients.push(c);
    }
    // Each client waits for its close while the publisher keeps talking.
    let started = Instant::now();
    let mut waiters = Vec::new();
    for mut c in clients {
        waiters.push(tokio::spawn(async move {
            let close = c.closed(Duration::from_secs(15)).await.unwrap();
            let at = started.elapsed();
            let seen = chats(&c.queued_events());
            (c, close, at, seen)
        }));
    }
    let mut acked = Vec::new();
    for i in 0..10 {
        let t = format!("before {i}");
        p.chat(&room, &t).await.unwrap();
        acked.push(t);
    }
    cluster.gateways[0].node.terminate().unwrap();
    let publishing = tokio::spawn(async move {
        let mut acked = acked;
        for i in 0..60 {
            let t = format!("during {i}");
            p.chat(&room, &t).await.unwrap();
            acked.push(t);
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        acked
    });
    let mut closes = Vec::new();
    let mut resumed = Vec::new();
    for w in waiters {
        let (old, close, at, seen) = w.await.unwrap();
        assert_eq!(
            close.map(|f| u16::from(f.code)),
            Some(1001),
            "every client gets 1001"
        );
        closes.push(at);
        // Resume on the other gateway from the last event seen.
        let room = RoomId::from("drain");
        let since = old.since(&room).unwrap();
        let mut c = cluster
            .connect(1, &format!("r{}", resumed.len()))
            .await
            .unwrap();
        c.set_position(&room, since.epoch, since.seq);
        let j = c.join_retrying(&room, None, JOIN_WITHIN).await.unwrap();
        assert_eq!(j["resync"], false, "the gap is in the history");
        let mut texts = seen;
        texts.extend(chats(&c.queued_events()));
        resumed.push((c, texts));
    }
    let acked = publishing.await.unwrap();
    let spread = closes
        .iter()
        .max()
        .unwrap()
        .saturating_sub(*closes.iter().min().unwrap());
    assert!(
        spread >= Duration::from_millis(300),
        "closes not spread: {spread:?}"
    );
    // Catch up on what was sent after each resume, then compare with the acknowledged list.
    for (c, texts) in &mut resumed {
        let deadline = Instant::now() + WAIT;
        while texts.len() < acked.len() && Instant::now() < deadline {
            match c.next_event(Duration::from_millis(200)).await {
                Ok(e) if e.ev == "chat" => {
                    texts.push(e.d["text"].as_str().unwrap_or_default().to_owned())
                }
                Ok(_) | Err(ClientError::Timeout) => {}
                Err(e) => panic!("{e:?}"),
            }
        }
        assert_eq!(
            texts, &acked,
            "a resumed client lost, duplicated or reordered events"
        );
    }
    eprintln!(
        "DRAIN: {n} connections closed with 1001 over {} ms",
        spread.as_millis()
    );
}

async fn spawn_standalone(config: &std::path::Path, data: &std::path::Path) -> Server {
    let config = config.display().to_string();
    let args = ["--config", config.as_str()];
    Server::start(data, "delivery-secret", "delivery-admin", &args, &[])
        .await
        .unwrap()
}

#[tokio::test]
async fn a_client_that_never_reads_is_closed_4000_with_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("chorus.toml");
    std::fs::write(
        &config,
        "rate_per_sec = 100000\nrate_burst = 100000\noutbox_frames = 256\noutbox_bytes = 262144\nwrite_timeout_ms = 1000\n",
    )
    .unwrap();
    let server = spawn_standalone(&config, &dir.path().join("data")).await;
    let (node, admin) = (&server.node, server.admin);
    wait_listening(admin, NODE_READY_TIMEOUT).await.unwrap();
    let url = server.url();
    let token = |u: &str| server.token(u).unwrap();
    let room = RoomId::from("slow");
    let mut fast = client::connect(&url, Some(&token("fast"))).await.unwrap();
    fast.join(&room, false, None).await.unwrap();
    // The slow consumer joins, then never reads again.
    let mut slow = client::connect(&url, Some(&token("slow"))).await.unwrap();
    slow.join(&room, false, None).await.unwrap();
    let mut publisher = client::connect(&url, Some(&token("pub"))).await.unwrap();
    publisher.join(&room, false, None).await.unwrap();
    let rss_before = kit::procfs::rss_kib(node.pid()).unwrap();
    let text = "x".repeat(480);
    let total = 20_000u64;
    // The fast client reads all along.
    let fast_room = room.clone();
    let reader = tokio::spawn(async move {
        let mut got = 0;
        while got < total {
            let e = fast.next_event(WAIT).await.unwrap();
            if e.ev == "chat" {
                got += 1;
            }
        }
        fast.position(&fast_room).unwrap().clone()
    });
    // The publisher reads its own replies in small batches (it must not be slow itself).
    for _ in 0..total / 50 {
        let mut ids = Vec::new();
        for _ in 0..50 {
            ids.push(
                publisher
                    .send("chat.send", json!({"room": room, "text": text}))
                    .await
                    .unwrap(),
            );
        }
        for id in ids {
            publisher.reply_to(id, WAIT).await.unwrap();
        }
        let _ = publisher.queued_events();
    }
    // The fast client gets every event, in order, while the slow one is cut off.
    let p = reader.await.unwrap();
    assert_eq!((p.gaps, p.duplicates), (0, 0));
    let closed = "chorus_gateway_closes_total{code=\"4000\"}";
    assert!(
        kit::admin::wait_metric(admin, closed, 1.0, WAIT)
            .await
            .unwrap(),
        "the slow consumer was not closed with 4000"
    );
    let rss_after = kit::procfs::rss_kib(node.pid()).unwrap();
    // ~10 MB were published to the slow consumer; the node keeps at most its outbox bound.
    let grew = rss_after.saturating_sub(rss_before);
    eprintln!("SLOW CONSUMER: node RSS {rss_before} KiB -> {rss_after} KiB (+{grew} KiB)");
    assert!(grew < 16 * 1024, "node memory grew by {grew} KiB");
    // The slow client's socket was closed by the server.
    let closed = slow.closed(WAIT).await;
    assert!(closed.is_ok(), "slow consumer still open");
    let _ = slow;
    let _ = publisher.close().await;
    drop(server);
}

#[tokio::test]
async fn new_connections_beyond_the_admission_rate_get_503() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("chorus.toml");
    std::fs::write(&config, "admit_per_sec = 1\nadmit_burst = 3\n").unwrap();
    let server = spawn_standalone(&config, &dir.path().join("data")).await;
    let (ws, admin) = (server.ws, server.admin);
    wait_listening(admin, NODE_READY_TIMEOUT).await.unwrap();
    let url = server.url();
    let t = server.token("u").unwrap();
    // Upgrades with bad tokens are refused before admission: they spend none of its budget.
    for _ in 0..5 {
        match client::connect(&url, Some("not-a-token")).await {
            Err(ClientError::Refused(401)) => {}
            other => panic!("{:?}", other.map(|_| "connected")),
        }
    }
    let mut admitted = Vec::new();
    let mut refused = 0;
    for _ in 0..6 {
        match client::connect(&url, Some(&t)).await {
            Ok(c) => admitted.push(c),
            Err(ClientError::Refused(503)) => refused += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(
        admitted.len() >= 3 && refused >= 2,
        "admitted {}, refused {refused}",
        admitted.len()
    );
    // Raw check of the Retry-After header.
    let stream = tokio::net::TcpStream::connect(ws).await.unwrap();
    let req = format!(
        "GET /ws?token={t} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    let mut framed = tokio_util::codec::Framed::new(stream, tokio_util::codec::LinesCodec::new());
    framed.send(req.trim_end().to_owned()).await.unwrap();
    framed.send(String::new()).await.unwrap();
    let mut head = Vec::new();
    while let Some(Ok(line)) = futures_util::StreamExt::next(&mut framed).await {
        if line.trim().is_empty() {
            break;
        }
        head.push(line.to_ascii_lowercase());
    }
    assert!(head[0].contains("503"), "{head:?}");
    assert!(
        head.iter().any(|l| l.starts_with("retry-after")),
        "{head:?}"
    );
}

/// A client that joins `room` and then never reads again, on a socket with a 4 KiB receive
/// buffer: the server's writes to it block once its send buffer is full.
async fn stalled_member(
    server: &Server,
    user: &str,
    room: &RoomId,
) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    use futures_util::StreamExt;
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let stream = sock.connect(server.ws).await.unwrap();
    let url = format!("{}?token={}", server.url(), server.token(user).unwrap());
    let (mut ws, _) = tokio_tungstenite::client_async(url, stream).await.unwrap();
    let join = json!({"id": 1, "op": "room.join", "d": {"room": room}}).to_string();
    ws.send(tokio_tungstenite::tungstenite::Message::text(join))
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("no join reply")
            .unwrap()
            .unwrap();
        if msg.to_text().unwrap().starts_with(r#"{"re":1,"ok""#) {
            return ws;
        }
    }
}

#[tokio::test]
async fn a_close_does_not_wait_for_a_write_the_peer_does_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("chorus.toml");
    // Big outbox, long write time-out and heartbeat: neither the slow-consumer bound, the write
    // time-out nor silence ends the stalled connection during the test; only the kick of its
    // user's newer connection (one connection per user) does.
    std::fs::write(
        &config,
        "rate_per_sec = 100000\nrate_burst = 100000\noutbox_frames = 100000\n\
         outbox_bytes = 67108864\nwrite_timeout_ms = 60000\nmax_conns_per_user = 1\n\
         heartbeat_ms = 600000\n",
    )
    .unwrap();
    let server = spawn_standalone(&config, &dir.path().join("data")).await;
    wait_listening(server.admin, NODE_READY_TIMEOUT)
        .await
        .unwrap();
    let url = server.url();
    let room = RoomId::from("stall");
    let stalled = stalled_member(&server, "sam", &room).await;
    let mut publisher = client::connect(&url, Some(&server.token("pub").unwrap()))
        .await
        .unwrap();
    publisher.join(&room, false, None).await.unwrap();
    // ~6 MB for the stalled member: more than a loopback send buffer takes (4 MiB at most),
    // so the server's write to it blocks.
    let text = "x".repeat(480);
    for _ in 0..12_000 / 50 {
        let mut ids = Vec::new();
        for _ in 0..50 {
            ids.push(
                publisher
                    .send("chat.send", json!({"room": room, "text": text}))
                    .await
                    .unwrap(),
            );
        }
        for id in ids {
            publisher.reply_to(id, WAIT).await.unwrap();
        }
        let _ = publisher.queued_events();
    }
    // Sam connects again: the stalled connection is kicked (4001) while its write is blocked.
    let kicked_at = Instant::now();
    let _sam = client::connect(&url, Some(&server.token("sam").unwrap()))
        .await
        .unwrap();
    let closed = "chorus_gateway_closes_total{code=\"4001\"}";
    assert!(
        kit::admin::wait_metric(server.admin, closed, 1.0, Duration::from_secs(5))
            .await
            .unwrap(),
        "the kicked connection's close waited for its blocked write ({:?})",
        kicked_at.elapsed()
    );
    drop(stalled);
    drop(server);
}
