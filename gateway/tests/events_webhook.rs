//! The event webhook end to end on a standalone node: a real HTTP receiver on loopback gets
//! what a room did (created, members in and out, a seat, a gift settled through the ledger, a
//! kick, the room closed) in order, in signed batches, and a batch it refused is sent again
//! with the same event ids.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use gateway::GatewayConfig;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use shard::ShardConfig;
use shard::events::{EventsConfig, SIGNATURE_HEADER, TIMESTAMP_HEADER, signature};
use tokio::sync::mpsc;

#[path = "support/server.rs"]
mod server;
use server::Server;

const SECRET: &[u8] = b"test-secret-for-event-webhooks";
const ADMIN: &str = "events-admin";
const HOOK_SECRET: &str = "event-webhook-secret-0123";
const WAIT: Duration = Duration::from_secs(15);

/// One POST as the receiver got it, and the status it answered.
struct Post {
    timestamp: String,
    signature: String,
    body: Bytes,
    status: u16,
}

/// An HTTP receiver on a free loopback port that answers 500 to its first `fail_first` POSTs
/// and 200 after, and hands every POST to the test.
async fn receiver(fail_first: usize) -> (String, mpsc::Receiver<Post>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/chorus/events", listener.local_addr().unwrap());
    // Bounded: a test's POSTs are few; a full queue would block the receiver, not lose one.
    let (tx, rx) = mpsc::channel(1024);
    let seen = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (tx, seen) = (tx.clone(), seen.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (tx, seen) = (tx.clone(), seen.clone());
                    async move {
                        let header = |n: &str| {
                            req.headers()
                                .get(n)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_owned()
                        };
                        let (timestamp, signature) =
                            (header(TIMESTAMP_HEADER), header(SIGNATURE_HEADER));
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let status = if seen.fetch_add(1, Ordering::SeqCst) < fail_first {
                            500
                        } else {
                            200
                        };
                        let _ = tx
                            .send(Post {
                                timestamp,
                                signature,
                                body,
                                status,
                            })
                            .await;
                        let resp = hyper::Response::builder()
                            .status(status)
                            .body(Full::new(Bytes::new()))
                            .unwrap();
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (url, rx)
}

async fn start(url: &str, kinds: Option<&[String]>) -> Server {
    let shard = ShardConfig {
        events: Some(EventsConfig::new(url, HOOK_SECRET, kinds).unwrap()),
        ..ShardConfig::default()
    };
    Server::launch(SECRET, ADMIN, GatewayConfig::default(), shard).await
}

/// The events of each POST answered 200, in order, until `last` (a kind) arrived; every POST's
/// signature checked. Also returns the ids of the refused POSTs, in order.
async fn delivered_until(
    rx: &mut mpsc::Receiver<Post>,
    last: &str,
) -> (Vec<Value>, Vec<Vec<Value>>) {
    let mut events = Vec::new();
    let mut refused = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let post = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no {last} within {WAIT:?}; got {events:?}"))
            .unwrap();
        assert_eq!(
            post.signature,
            signature(HOOK_SECRET.as_bytes(), &post.timestamp, &post.body),
            "every batch is signed"
        );
        let body: Value = serde_json::from_slice(&post.body).unwrap();
        let batch = body["events"].as_array().unwrap().clone();
        if post.status != 200 {
            refused.push(batch.iter().map(|e| e["id"].clone()).collect());
            continue;
        }
        let done = batch.iter().any(|e| e["kind"] == last);
        events.extend(batch);
        if done {
            return (events, refused);
        }
    }
}

#[tokio::test]
async fn a_rooms_life_reaches_the_app_in_order_and_a_refused_batch_comes_again() {
    let (url, mut rx) = receiver(1).await;
    let s = start(&url, None).await;
    let grant = kit::admin::grant(s.admin, Some(ADMIN), "host", 100, "g1")
        .await
        .unwrap();
    assert_eq!(grant.status, 200, "{}", grant.body);
    let mut host = s.connect("host").await;
    let room = host
        .create_room(json!({"room": "hooks", "seats": 4}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut bob = s.connect("bob").await;
    bob.join(&room, false, None).await.unwrap();
    bob.request("seat.take", json!({"room": room, "seat": 1}))
        .await
        .unwrap();
    let req_id = "0190c5d2-0000-7000-8000-000000000001";
    host.request(
        "gift.send",
        json!({"room": room, "req_id": req_id, "gift": "rose", "to": ["bob"]}),
    )
    .await
    .unwrap();
    host.request("room.kick", json!({"room": room, "user": "bob"}))
        .await
        .unwrap();
    host.request("room.close", json!({"room": room}))
        .await
        .unwrap();

    let (events, refused) = delivered_until(&mut rx, "room.closed").await;
    // The refused first batch came again, whole, with the same ids.
    let [first_refused] = &refused[..] else {
        panic!("one refused batch: {refused:?}")
    };
    let resent: Vec<Value> = events
        .iter()
        .take(first_refused.len())
        .map(|e| e["id"].clone())
        .collect();
    assert_eq!(&resent, first_refused);
    for e in &events {
        assert_eq!(
            (e["room"].clone(), e["node"].is_string()),
            (json!("hooks"), true),
            "{e}"
        );
    }
    let seen: Vec<(String, Value)> = events
        .iter()
        .map(|e| (e["kind"].as_str().unwrap().to_owned(), e["data"].clone()))
        .collect();
    let kinds: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "room.created",
            "member.joined",
            "member.joined",
            "seat.changed",
            "gift.settled",
            "seat.changed",
            "moderation",
            "member.left",
            "room.closed",
        ],
        "{seen:?}"
    );
    assert_eq!(seen[0].1, json!({"by": "host"}));
    assert_eq!(
        (seen[1].1.clone(), seen[2].1.clone()),
        (json!({"user": "host"}), json!({"user": "bob"}))
    );
    assert_eq!(
        seen[3].1,
        json!({"index": 1, "user": "bob", "by": "bob", "cause": "self", "reason": null})
    );
    let gift = &seen[4].1;
    assert_eq!(
        (
            gift["from"].clone(),
            gift["to"].clone(),
            gift["gift"].clone(),
            gift["count"].clone(),
            gift["coins"].clone()
        ),
        (
            json!("host"),
            json!(["bob"]),
            json!("rose"),
            json!(1),
            json!(10)
        )
    );
    assert!(gift["order"].is_string());
    assert_eq!(
        (seen[5].1["user"].clone(), seen[5].1["reason"].clone()),
        (Value::Null, json!("kicked"))
    );
    assert_eq!(
        (seen[6].1["action"].clone(), seen[6].1["user"].clone()),
        (json!("kick"), json!("bob"))
    );
    assert_eq!(seen[7].1, json!({"user": "bob", "reason": "kicked"}));
    assert_eq!(seen[8].1, json!({"by": "host"}));
    s.stop().await;
}

#[tokio::test]
async fn only_the_kinds_asked_for_are_sent() {
    let (url, mut rx) = receiver(0).await;
    let kinds = ["room.created".to_owned(), "room.closed".to_owned()];
    let s = start(&url, Some(&kinds)).await;
    let mut host = s.connect("host").await;
    let room = host.create_room(json!({"room": "quiet"})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    host.chat(&room, "hello").await.unwrap();
    host.request("room.close", json!({"room": room}))
        .await
        .unwrap();
    let (events, _) = delivered_until(&mut rx, "room.closed").await;
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["room.created", "room.closed"]);
    s.stop().await;
}
