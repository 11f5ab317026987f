//! The admin port against clients that hold connections open: idle sockets, headers that never
//! finish and bodies that trickle are closed within the deadline, a connection kept busy with
//! cheap requests is closed when its lifetime ends, and connections past the cap are closed at
//! once, so the admin port cannot starve the node of file descriptors or lock out its probes.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::net::SocketAddr;
use std::time::Duration;

use kit::standalone::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};

/// The admin port's header and body deadline (10 s) plus room for a slow host.
const CLOSED_WITHIN: Duration = Duration::from_secs(16);
/// Admin connections the node keeps open at once.
const CAP: usize = 256;

async fn node(dir: &std::path::Path) -> Server {
    Server::start(dir, "admin-port-secret", "admin-port-token", &[], &[])
        .await
        .unwrap()
}

/// Reads until the node closes the connection; returns what it sent first.
async fn read_until_closed(mut s: TcpStream, within: Duration) -> Result<String, &'static str> {
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 1024];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    timeout(within, read).await.map_err(|_| "still open")?;
    Ok(String::from_utf8_lossy(&got).into_owned())
}

#[tokio::test]
async fn idle_sockets_unfinished_headers_and_trickling_bodies_are_closed_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let server = node(dir.path()).await;
    let addr = server.admin;
    let started = Instant::now();
    let idle = TcpStream::connect(addr).await.unwrap();
    let mut headers = TcpStream::connect(addr).await.unwrap();
    headers
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: chorus\r\n")
        .await
        .unwrap();
    let mut body = TcpStream::connect(addr).await.unwrap();
    let head = "POST /admin/wallets/alice/grant HTTP/1.1\r\nHost: chorus\r\n\
                Authorization: Bearer admin-port-token\r\nContent-Length: 100\r\n\r\n{\"amount\"";
    body.write_all(head.as_bytes()).await.unwrap();
    // A keep-alive connection that finished one request and then idles.
    let mut kept = TcpStream::connect(addr).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: chorus\r\n\r\n")
        .await
        .unwrap();
    let (idle, headers, body, kept) = tokio::join!(
        read_until_closed(idle, CLOSED_WITHIN),
        read_until_closed(headers, CLOSED_WITHIN),
        read_until_closed(body, CLOSED_WITHIN),
        read_until_closed(kept, CLOSED_WITHIN),
    );
    assert_eq!(idle.unwrap(), "", "an idle socket is closed without a word");
    assert!(
        !headers.unwrap().starts_with("HTTP/1.1 2"),
        "no answer to half a request"
    );
    let body = body.unwrap();
    assert!(
        body.starts_with("HTTP/1.1 408"),
        "a trickling body gets 408: {body}"
    );
    let kept = kept.unwrap();
    assert!(
        kept.starts_with("HTTP/1.1 200"),
        "the finished request was answered: {kept}"
    );
    // Not closed before the deadline: the node is patient with a slow but honest client.
    assert!(
        started.elapsed() >= Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
    // The node still answers.
    let r = kit::admin::get(addr, "/healthz", None).await.unwrap();
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_at_once_and_the_port_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let server = node(dir.path()).await;
    let addr: SocketAddr = server.admin;
    let mut held = Vec::with_capacity(CAP);
    for _ in 0..CAP {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    // A request on one held connection proves the node has accepted them all (it accepts in
    // order), so the next connection is the first one past the cap.
    let probe = held.last_mut().unwrap();
    probe
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: chorus\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let n = timeout(Duration::from_secs(5), probe.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let extra = TcpStream::connect(addr).await.unwrap();
    let answer = read_until_closed(extra, Duration::from_secs(3)).await;
    assert_eq!(
        answer,
        Ok(String::new()),
        "past the cap: closed at once, unread"
    );
    drop(held);
    // Closed connections free their places: the port answers again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(r) = kit::admin::get(addr, "/healthz", None).await
            && r.status == 200
        {
            break;
        }
        assert!(Instant::now() < deadline, "the admin port never recovered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A keep-alive connection that sends a cheap request every 2 s (so it never idles) is closed
/// when its 20 s lifetime ends, after its last request was answered.
#[tokio::test]
async fn a_connection_kept_busy_is_closed_at_the_end_of_its_lifetime() {
    let dir = tempfile::tempdir().unwrap();
    let server = node(dir.path()).await;
    let mut s = TcpStream::connect(server.admin).await.unwrap();
    let started = Instant::now();
    let mut answered = 0;
    let closed_after = loop {
        assert!(started.elapsed() < Duration::from_secs(40), "never closed");
        if s.write_all(b"GET /healthz HTTP/1.1\r\nHost: chorus\r\n\r\n")
            .await
            .is_err()
        {
            break started.elapsed();
        }
        let mut buf = [0u8; 256];
        match timeout(Duration::from_secs(5), s.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => break started.elapsed(),
            Ok(Ok(n)) => {
                assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
                answered += 1;
            }
            Err(_) => panic!("no answer within 5 s"),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    assert!(
        answered >= 8,
        "{answered} requests answered before the close"
    );
    assert!(
        closed_after >= Duration::from_secs(18) && closed_after < Duration::from_secs(30),
        "closed after {closed_after:?}"
    );
}

/// A body too large is `413`; a body whose framing is broken (a chunk size that is not hex) is
/// `400`, not taken for a large one.
#[tokio::test]
async fn a_broken_body_is_400_and_a_large_one_413() {
    let dir = tempfile::tempdir().unwrap();
    let server = node(dir.path()).await;
    let head = "POST /admin/wallets/alice/grant HTTP/1.1\r\nHost: chorus\r\n\
                Authorization: Bearer admin-port-token\r\n";
    let mut broken = TcpStream::connect(server.admin).await.unwrap();
    broken
        .write_all(format!("{head}Transfer-Encoding: chunked\r\n\r\nzz\r\n").as_bytes())
        .await
        .unwrap();
    let answer = read_until_closed(broken, CLOSED_WITHIN).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let mut large = TcpStream::connect(server.admin).await.unwrap();
    // One byte over the 64 KiB bound: the node reads it all, so its close resets nothing.
    let big = "x".repeat(64 * 1024 + 1);
    large
        .write_all(format!("{head}Content-Length: {}\r\n\r\n{big}", big.len()).as_bytes())
        .await
        .unwrap();
    let answer = read_until_closed(large, CLOSED_WITHIN).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}
