//! Standalone connections end to end: rate limits and flood closes, token checks at the
//! upgrade and on expiry, the per-user connection cap, control characters, heartbeats, pings,
//! requests sharing one segment, and the shutdown close. A real server on loopback, real
//! WebSocket clients.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use kit::client::{self, Client, ClientError};
use protocol::{ErrorCode, RoomId};
use serde_json::json;
use tokio::time::Instant;

use crate::support::server;
use server::Server;

use crate::support::standalone;
use standalone::{SECRET, WAIT, code};

#[tokio::test]
async fn floods_are_rate_limited_then_closed_with_1008() {
    let s = Server::start_with(|g, _| {
        g.rate_per_sec = 5;
        g.rate_burst = 5;
        g.flood_close_after = 20;
    })
    .await;
    let mut watcher = s.connect("watcher").await;
    let mut talker = s.connect("talker").await;
    let room = RoomId::from("flood");
    watcher.join(&room, false, None).await.unwrap();
    talker.join(&room, false, None).await.unwrap();

    let mut flood = s.connect("flooder").await;
    for _ in 0..100 {
        if flood.send("ping", json!({})).await.is_err() {
            break;
        }
    }
    let mut limited = 0;
    let close = loop {
        match flood.next_reply(WAIT).await {
            Ok(r) => {
                if matches!(&r.result, Err(e) if e.code == ErrorCode::RateLimited) {
                    limited += 1;
                }
            }
            Err(ClientError::Closed(f)) => break f,
            Err(e) => panic!("unexpected {e:?}"),
        }
    };
    assert!(limited >= 1, "RATE_LIMITED came before the close");
    assert_eq!(close.map(|f| u16::from(f.code)), Some(1008));

    talker.chat(&room, "unaffected").await.unwrap();
    assert_eq!(
        watcher.next_event_named("chat", WAIT).await.unwrap().d["text"],
        "unaffected"
    );
    s.stop().await;
}

/// A rate-limited request keeps its id in the answer, even one the server could not run, and
/// binary frames count against the rate like text ones: a flood of them is closed with 1008.
#[tokio::test]
async fn limited_answers_keep_their_id_and_binary_floods_close_with_1008() {
    let s = Server::start_with(|g, _| {
        g.rate_per_sec = 1;
        g.rate_burst = 2;
        g.flood_close_after = 5;
    })
    .await;
    let mut c = s.connect("c").await;
    // Seven: two in the burst, five limited, one short of the flood close.
    let ids: Vec<u64> = (100..107).collect();
    for id in &ids {
        c.send_raw(format!(r#"{{"id":{id},"op":"no.such.op"}}"#))
            .await
            .unwrap();
    }
    let mut limited = 0;
    for _ in &ids {
        let r = c.next_reply(WAIT).await.unwrap();
        assert!(r.re.is_some_and(|re| ids.contains(&re)), "{r:?}");
        if matches!(&r.result, Err(e) if e.code == ErrorCode::RateLimited) {
            limited += 1;
        }
    }
    assert!(limited >= 3, "{limited} of 7 limited");
    let mut b = s.connect("b").await;
    for _ in 0..30 {
        if b.send_binary(vec![1, 2, 3]).await.is_err() {
            break;
        }
    }
    let close = loop {
        match b.next_reply(WAIT).await {
            Ok(_) => {}
            Err(ClientError::Closed(f)) => break f,
            Err(e) => panic!("unexpected {e:?}"),
        }
    };
    assert_eq!(close.map(|f| u16::from(f.code)), Some(1008));
    s.stop().await;
}

#[tokio::test]
async fn upgrades_without_a_valid_token_are_refused_with_401() {
    let s = Server::start().await;
    let mut watcher = s.connect("watcher").await;
    let refused = |r: Result<Client, ClientError>| match r {
        Err(ClientError::Refused(status)) => status,
        Ok(_) => panic!("upgrade accepted"),
        Err(e) => panic!("unexpected {e:?}"),
    };
    assert_eq!(refused(client::connect(&s.url, None).await), 401);
    assert_eq!(refused(client::connect(&s.url, Some("garbage")).await), 401);
    let wrong = client::mint_token(b"another-secret", "eve", Duration::from_secs(60)).unwrap();
    assert_eq!(refused(client::connect(&s.url, Some(&wrong)).await), 401);
    let expired = client::mint_expired_token(SECRET, "eve", Duration::from_secs(60)).unwrap();
    assert_eq!(refused(client::connect(&s.url, Some(&expired)).await), 401);
    // ?token= works for browsers.
    let t = client::mint_token(SECRET, "browser", Duration::from_secs(60)).unwrap();
    let mut c = client::connect(&format!("{}?token={t}", s.url), None)
        .await
        .unwrap();
    c.request("ping", json!({})).await.unwrap();
    // The node is up.
    watcher.request("ping", json!({})).await.unwrap();
    s.stop().await;
}

/// Tokens from the future are refused; long-lived ones and ones naming an audience are core
/// tokens and connect, unless the server sets a lifetime cap or an audience.
#[tokio::test]
async fn tokens_from_the_future_or_living_past_a_set_cap_are_refused_with_401() {
    let open = Server::start().await;
    let capped = Server::start_with(|g, _| {
        g.max_token_lifetime = Some(Duration::from_secs(30 * 86_400));
        g.jwt_audience = Some("chorus".into());
    })
    .await;
    let refused = |r: Result<Client, ClientError>| match r {
        Err(ClientError::Refused(status)) => status,
        Ok(_) => panic!("upgrade accepted"),
        Err(e) => panic!("unexpected {e:?}"),
    };
    let now = jsonwebtoken::get_current_timestamp();
    let signed = |claims: serde_json::Value| {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(SECRET).unwrap(),
        )
        .unwrap()
    };
    // Valid only in an hour; issued in an hour: refused by both.
    for claims in [
        json!({"sub": "eve", "exp": now + 7200, "nbf": now + 3600}),
        json!({"sub": "eve", "exp": now + 7200, "iat": now + 3600}),
    ] {
        let t = signed(claims.clone());
        for s in [&open, &capped] {
            let r = client::connect(&s.url, Some(&t)).await;
            assert_eq!(refused(r), 401, "{claims}");
        }
    }
    // Living for 60 days, for ever, or naming another audience: core tokens, refused only by
    // the server with a 30-day cap and an audience of its own.
    for claims in [
        json!({"sub": "eve", "exp": now + 60 * 86_400}),
        json!({"sub": "eve", "exp": i64::MAX}),
        json!({"sub": "eve", "exp": now + 600, "aud": "elsewhere"}),
    ] {
        let t = signed(claims.clone());
        let mut eve = client::connect(&open.url, Some(&t)).await.unwrap();
        eve.request("ping", json!({})).await.unwrap();
        let r = client::connect(&capped.url, Some(&t)).await;
        assert_eq!(refused(r), 401, "{claims}");
    }
    let t = signed(json!({"sub": "eve", "exp": now + 600, "aud": ["x", "chorus"]}));
    client::connect(&capped.url, Some(&t)).await.unwrap();
    // A small clock skew is tolerated.
    let t = signed(json!({"sub": "ann", "exp": now + 600, "nbf": now + 20, "iat": now + 20}));
    let mut ann = client::connect(&open.url, Some(&t)).await.unwrap();
    ann.request("ping", json!({})).await.unwrap();
    open.stop().await;
    capped.stop().await;
}

#[tokio::test]
async fn a_users_connection_past_the_cap_closes_its_oldest_with_4001() {
    let s = Server::start_with(|g, _| g.max_conns_per_user = 2).await;
    let mut first = s.connect("ann").await;
    let mut second = s.connect("ann").await;
    let mut bob = s.connect("bob").await;
    let mut third = s.connect("ann").await;
    let close = first.closed(WAIT).await.unwrap();
    assert_eq!(close.map(|f| u16::from(f.code)), Some(4001));
    // The newer two, and other users, are served.
    for c in [&mut second, &mut third, &mut bob] {
        c.request("ping", json!({})).await.unwrap();
    }
    s.stop().await;
}

#[tokio::test]
async fn control_and_bidi_characters_are_refused_in_chat_and_titles() {
    let s = Server::start().await;
    let mut a = s.connect("alice").await;
    let err = a
        .request(
            "room.create",
            json!({"room": "clean", "title": "\u{202E}gnp.exe"}),
        )
        .await
        .unwrap_err();
    assert_eq!(code(err), ErrorCode::BadRequest);
    let room = a
        .create_room(json!({"room": "clean", "title": "clean"}))
        .await
        .unwrap();
    a.join(&room, false, None).await.unwrap();
    let err = a
        .request("chat.send", json!({"room": room, "text": "\u{1b}[2J gone"}))
        .await
        .unwrap_err();
    assert_eq!(code(err), ErrorCode::BadRequest);
    let ok = a
        .request(
            "chat.send",
            json!({"room": room, "text": "line one\nline two"}),
        )
        .await
        .unwrap();
    assert_eq!(ok["seq"], 1, "the refused message took no seq");
    s.stop().await;
}

/// Reads from `sock` until `buf` holds `n` bytes, by `deadline`.
async fn fill(sock: &mut tokio::net::TcpStream, buf: &mut Vec<u8>, n: usize, deadline: Instant) {
    let mut chunk = [0u8; 4096];
    while buf.len() < n {
        let read =
            tokio::time::timeout_at(deadline, tokio::io::AsyncReadExt::read(sock, &mut chunk))
                .await
                .expect("the server neither wrote nor closed in time")
                .unwrap();
        assert!(read > 0, "the connection ended without a close frame");
        buf.extend_from_slice(&chunk[..read]);
    }
}

/// Opens a WebSocket to the server at `url` by hand on a plain TCP socket, with `token`, then
/// only reads: it never writes again, so it never answers the server's pings (the kit's
/// client, through tungstenite, answers them whenever it reads). Returns the code of the close
/// frame the server sends, and when it arrived.
async fn silent_socket_closed(url: &str, token: &str) -> (u16, Instant) {
    use tokio::io::AsyncWriteExt;
    let deadline = Instant::now() + WAIT;
    let addr = url
        .strip_prefix("ws://")
        .and_then(|a| a.strip_suffix("/ws"))
        .unwrap();
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let upgrade = format!(
        "GET /ws?token={token} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Version: 13\r\n\r\n"
    );
    sock.write_all(upgrade.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let more = buf.len() + 1;
        fill(&mut sock, &mut buf, more, deadline).await;
    };
    assert!(
        buf.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&buf)
    );
    buf.drain(..head_end);
    // Frames from the server are unmasked: opcode, 7-bit length (126: 16 bits follow, 127: 64).
    loop {
        fill(&mut sock, &mut buf, 2, deadline).await;
        let (opcode, len7) = (buf[0] & 0x0f, usize::from(buf[1] & 0x7f));
        assert_eq!(buf[1] & 0x80, 0, "a masked frame from the server");
        let (header, len) = match len7 {
            126 => {
                fill(&mut sock, &mut buf, 4, deadline).await;
                (4, usize::from(u16::from_be_bytes([buf[2], buf[3]])))
            }
            127 => {
                fill(&mut sock, &mut buf, 10, deadline).await;
                let n = u64::from_be_bytes(buf[2..10].try_into().unwrap());
                (10, usize::try_from(n).unwrap())
            }
            n => (2, n),
        };
        fill(&mut sock, &mut buf, header + len, deadline).await;
        if opcode == 0x8 {
            let at = Instant::now();
            assert!(len >= 2, "a close frame without a code");
            return (u16::from_be_bytes([buf[header], buf[header + 1]]), at);
        }
        buf.drain(..header + len);
    }
}

#[tokio::test]
async fn silent_connections_are_closed_after_two_heartbeats() {
    const HEARTBEAT: Duration = Duration::from_millis(500);
    let s = Server::start_with(|g, _| g.heartbeat = HEARTBEAT).await;
    let mut listener = s.connect("listener").await;
    assert_eq!(listener.heartbeat_ms, 500);
    // The clock starts before the quiet socket connects, so before the server first hears it.
    // The server closes a peer silent for two heartbeats, checked 8 times per heartbeat: the
    // close comes at least 2 heartbeats after (less 10 ms for the server's whole-millisecond
    // clock), and well before a third.
    let started = Instant::now();
    let token = s.token("quiet");
    // Meanwhile the listener reads (answering the server's pings) and is sent nothing.
    let (code, closed_at) = tokio::select! {
        closed = silent_socket_closed(&s.url, &token) => closed,
        heard = listener.next_event(WAIT) => panic!("the listener got {heard:?} first"),
    };
    let silent_for = closed_at - started;
    assert!(
        silent_for >= 2 * HEARTBEAT - Duration::from_millis(10),
        "closed after {silent_for:?} of silence"
    );
    assert!(
        silent_for < 3 * HEARTBEAT,
        "closed only after {silent_for:?} of silence"
    );
    assert_eq!(code, 4002, "a time-out, not a normal close");
    // The listener, connected longer than that, is still served.
    listener.request("ping", json!({})).await.unwrap();
    s.stop().await;
}

#[tokio::test]
async fn client_pings_are_answered_in_order_with_data_frames_intact() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let s = Server::start().await;
    let t = client::mint_token(SECRET, "pinger", Duration::from_secs(60)).unwrap();
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}?token={t}", s.url))
        .await
        .unwrap();
    // Pings between requests: tungstenite queues each pong while the server reads, and the
    // server's own (vectored) data writes must neither lose nor split them.
    for i in 0..3u64 {
        ws.send(Message::Ping(format!("p{i}").into_bytes().into()))
            .await
            .unwrap();
        let req = json!({"id": i + 1, "op": "ping", "d": {}}).to_string();
        ws.send(Message::text(req)).await.unwrap();
    }
    let (mut pongs, mut replies) = (Vec::new(), Vec::new());
    while pongs.len() < 3 || replies.len() < 3 {
        match tokio::time::timeout(WAIT, ws.next()).await.unwrap() {
            Some(Ok(Message::Pong(p))) => pongs.push(String::from_utf8(p.to_vec()).unwrap()),
            Some(Ok(Message::Text(t))) => {
                let v: serde_json::Value = serde_json::from_str(&t).unwrap();
                if let Some(re) = v.get("re") {
                    replies.push(re.as_u64().unwrap());
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(pongs, ["p0", "p1", "p2"]);
    assert_eq!(replies, [1, 2, 3]);
    s.stop().await;
}

/// Many requests in one TCP write: the server reads them all, though after the first read the
/// rest wait in tungstenite's buffer and the socket has nothing more to say (the session only
/// polls tungstenite once the socket is readable, which must count buffered frames).
#[tokio::test]
async fn requests_written_in_one_segment_are_all_answered() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    // No server pings during the test: a ping's pong would make the socket readable and hide
    // frames stuck in tungstenite's buffer.
    let s = Server::start_with(|g, _| g.heartbeat = Duration::from_secs(600)).await;
    let t = client::mint_token(SECRET, "pipeliner", Duration::from_secs(60)).unwrap();
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}?token={t}", s.url))
        .await
        .unwrap();
    const N: u64 = 50;
    // `feed` only buffers: the one `flush` writes all 50 frames (~1.7 KB) with one write.
    for i in 1..=N {
        let req = json!({"id": i, "op": "ping", "d": {}}).to_string();
        ws.feed(Message::text(req)).await.unwrap();
    }
    ws.flush().await.unwrap();
    let mut replies = Vec::new();
    while replies.len() < N as usize {
        match tokio::time::timeout(WAIT, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                let v: serde_json::Value = serde_json::from_str(&t).unwrap();
                if let Some(re) = v.get("re") {
                    replies.push(re.as_u64().unwrap());
                }
            }
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => {}
            Ok(other) => panic!("unexpected {other:?}"),
            Err(_) => panic!("only {} of {N} replies: {replies:?}", replies.len()),
        }
    }
    assert_eq!(replies, (1..=N).collect::<Vec<_>>());
    s.stop().await;
}

#[tokio::test]
async fn a_connection_whose_token_expires_is_closed_with_1008() {
    let s = Server::start_with(|g, _| g.heartbeat = Duration::from_millis(300)).await;
    // Expires at the next whole second or the one after: the client keeps answering pings
    // while it waits, so only the expiry can close it.
    let t = client::mint_token(SECRET, "brief", Duration::from_secs(1)).unwrap();
    let mut c = client::connect(&s.url, Some(&t)).await.unwrap();
    let close = c.closed(WAIT).await.unwrap();
    assert_eq!(close.map(|f| u16::from(f.code)), Some(1008));
    // A connection with a long token is still served.
    let mut other = s.connect("steady").await;
    other.request("ping", json!({})).await.unwrap();
    s.stop().await;
}

#[tokio::test]
async fn hello_comes_first_and_shutdown_sends_1001() {
    let s = Server::start().await;
    let mut c = s.connect("alice").await;
    assert!(!c.session.is_empty());
    let token = s.running.as_ref().unwrap().shutdown_token();
    token.cancel();
    let close = c.closed(WAIT).await.unwrap();
    assert_eq!(close.map(|f| u16::from(f.code)), Some(1001));
    s.stop().await;
}

/// A handshake under way when the node starts to drain is refused with 503: a socket opened
/// then would come after the drain's closes and stay open, unserved, until the process ends.
#[tokio::test]
async fn an_upgrade_finished_after_the_drain_began_is_refused_with_503() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = Server::start().await;
    let addr = s
        .url
        .strip_prefix("ws://")
        .and_then(|a| a.strip_suffix("/ws"))
        .unwrap()
        .to_owned();
    let token = s.token("late");
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    // Half a request head: accepted, its handshake waits for the rest.
    sock.write_all(b"GET /ws?token=").await.unwrap();
    // Connections are accepted in order: once a later one is open, this one was accepted
    // (the drain does not reset it; an unaccepted one would be).
    let _witness = s.connect("witness").await;
    s.running.as_ref().unwrap().shutdown_token().cancel();
    let rest = format!(
        "{token} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Version: 13\r\n\r\n"
    );
    sock.write_all(rest.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let deadline = Instant::now() + WAIT;
    // Up to the end of the answer's head, or of the connection.
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let mut chunk = [0u8; 1024];
        match tokio::time::timeout_at(deadline, sock.read(&mut chunk))
            .await
            .expect("no answer to the upgrade")
        {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 503"), "answered: {head:?}");
    s.stop().await;
}
