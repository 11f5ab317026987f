//! How much hostile clients raise a well-behaved client's latency: a measurement, run by
//! hand against a release build, whose result is recorded in docs/BENCHMARKS-LOG.md:
//!
//! ```sh
//! cargo build --release -p gateway
//! CHORUS_BIN=$PWD/target/release/chorus cargo test --release -p loadtest --test it -- --ignored --nocapture hostile::
//! ```
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kit::client::{self, ClientError};
use kit::standalone::Server;
use protocol::RoomId;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

const SECRET: &str = "hostile-secret";
/// Chat messages per second from the publisher.
const RATE: u64 = 200;
/// Length of each phase.
const PHASE: Duration = Duration::from_secs(4);

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn p99(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get((v.len().saturating_sub(1)) * 99 / 100)
        .copied()
        .unwrap_or(0)
}

/// Publishes for one phase and returns the victim's latencies (µs).
async fn phase(url: &str, room: &RoomId, tag: &str) -> Vec<u64> {
    let token = |u: &str| kit::token(SECRET.as_bytes(), u).unwrap();
    let mut victim = client::connect(url, Some(&token(&format!("victim-{tag}"))))
        .await
        .unwrap();
    victim.join(room, false, None).await.unwrap();
    let mut publisher = client::connect(url, Some(&token(&format!("pub-{tag}"))))
        .await
        .unwrap();
    publisher.join(room, false, None).await.unwrap();
    let reader = tokio::spawn(async move {
        let mut lat = Vec::new();
        let end = Instant::now() + PHASE + Duration::from_secs(1);
        while Instant::now() < end {
            match victim.next_event(Duration::from_millis(200)).await {
                Ok(e) if e.ev == "chat" => {
                    if let Some(t) = e.d["text"].as_str().and_then(|t| t.strip_prefix("t=")) {
                        lat.push(now_us().saturating_sub(t.parse().unwrap_or(0)));
                    }
                }
                Ok(_) | Err(ClientError::Timeout) => {}
                Err(e) => panic!("victim: {e:?}"),
            }
        }
        lat
    });
    let start = Instant::now();
    let n = RATE * PHASE.as_secs();
    for i in 0..n {
        tokio::time::sleep_until(start + Duration::from_micros(i * 1_000_000 / RATE)).await;
        let _ = publisher
            .send(
                "chat.send",
                json!({"room": room, "text": format!("t={}", now_us())}),
            )
            .await;
        let _ = publisher.queued_events();
    }
    reader.await.unwrap()
}

async fn hostiles(
    url: String,
    ws: SocketAddr,
    room: RoomId,
    stop: tokio_util::sync::CancellationToken,
) {
    let token = |u: &str| kit::token(SECRET.as_bytes(), u).unwrap();
    // Half-open sockets: TCP connected, never finishing the handshake.
    let mut half_open = Vec::new();
    for _ in 0..50 {
        if let Ok(mut s) = tokio::net::TcpStream::connect(ws).await {
            let _ = s.write_all(b"GET /ws HTTP/1.1\r\nHost: x\r\n").await;
            half_open.push(s);
        }
    }
    // A member that never reads.
    let mut deaf = client::connect(&url, Some(&token("deaf"))).await.unwrap();
    deaf.join(&room, false, None).await.unwrap();
    let mut tasks = Vec::new();
    // A flooder and an oversize sender, reconnecting whenever they are closed.
    for kind in ["flood", "oversize"] {
        let url = url.clone();
        let t = token(kind);
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            while !stop.is_cancelled() {
                let Ok(mut c) = client::connect(&url, Some(&t)).await else {
                    continue;
                };
                for _ in 0..5_000 {
                    if stop.is_cancelled() {
                        break;
                    }
                    let r = if kind == "flood" {
                        c.send_raw(r#"{"id":1,"op":"ping"}"#).await
                    } else {
                        c.send_raw("x".repeat(100 * 1024)).await
                    };
                    if r.is_err() {
                        break;
                    }
                }
            }
        }));
    }
    stop.cancelled().await;
    for t in tasks {
        let _ = t.await;
    }
    drop(deaf);
    drop(half_open);
}

#[tokio::test]
#[ignore = "measurement: run by hand with a release build (see the file's doc); records a factor, asserts a generous bound"]
async fn hostile_clients_raise_a_victims_p99_by_a_bounded_factor() {
    let dir = tempfile::tempdir().unwrap();
    let node = Server::start(
        dir.path(),
        SECRET,
        "x",
        &["--rate-per-sec", "1000", "--rate-burst", "1000"],
        &[],
    )
    .await
    .unwrap();
    let (url, ws) = (node.url(), node.ws);
    let room = RoomId::from("victims");
    let quiet = p99(phase(&url, &room, "a").await);
    let stop = tokio_util::sync::CancellationToken::new();
    let h = tokio::spawn(hostiles(url.clone(), ws, room.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let noisy = p99(phase(&url, &room, "b").await);
    stop.cancel();
    let _ = h.await;
    let factor = noisy as f64 / quiet.max(1) as f64;
    eprintln!(
        "HOSTILE: victim p99 quiet {quiet} µs, with a flooder, an oversize sender, 50 half-open sockets and a deaf member {noisy} µs: factor {factor:.2}"
    );
    assert!(
        noisy < quiet.max(1_000) * 20,
        "hostile clients raised p99 from {quiet} to {noisy} µs"
    );
}
