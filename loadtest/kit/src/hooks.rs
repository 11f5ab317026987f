//! A webhook receiver for tests: an HTTP server on a free loopback port that records every
//! POST (its signature headers, body and the status it answered) for the test to read.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;

/// One POST as the receiver got it, and the status it answered.
#[derive(Debug, Clone)]
pub struct Post {
    /// The `x-chorus-timestamp` header.
    pub timestamp: String,
    /// The `x-chorus-signature` header.
    pub signature: String,
    /// The raw body.
    pub body: Bytes,
    /// The status answered.
    pub status: u16,
}

/// The receiver: its URL, and the POSTs it got, in order.
#[derive(Debug)]
pub struct Receiver {
    /// `http://127.0.0.1:<port>/chorus/events`.
    pub url: String,
    rx: mpsc::Receiver<Post>,
}

impl Receiver {
    /// Starts a receiver that answers 500 to its first `fail_first` POSTs and 200 after.
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub async fn start(fail_first: usize) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/chorus/events", listener.local_addr()?);
        // Bounded: a full queue makes the sender wait (its POST is not answered), never lose.
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
                            let timestamp = header("x-chorus-timestamp");
                            let signature = header("x-chorus-signature");
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(http_body_util::Collected::to_bytes)
                                .unwrap_or_default();
                            let status = if seen.fetch_add(1, Ordering::SeqCst) < fail_first {
                                500
                            } else {
                                200
                            };
                            let post = Post {
                                timestamp,
                                signature,
                                body,
                                status,
                            };
                            let _ = tx.send(post).await;
                            let mut resp = hyper::Response::new(Full::new(Bytes::new()));
                            *resp.status_mut() = hyper::StatusCode::from_u16(status)
                                .unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok(Self { url, rx })
    }

    /// The next POST, within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<Post> {
        tokio::time::timeout(wait, self.rx.recv())
            .await
            .ok()
            .flatten()
    }

    /// The events of each POST answered 200, in order, until one for which `last` holds
    /// arrived; `check` sees every POST first (e.g. to verify its signature). Also returns the
    /// event ids of each refused POST, in order. Panics (fails the test) when no such event
    /// comes within `wait`.
    pub async fn delivered_until(
        &mut self,
        last: impl Fn(&serde_json::Value) -> bool,
        wait: Duration,
        check: impl Fn(&Post),
    ) -> (Vec<serde_json::Value>, Vec<Vec<serde_json::Value>>) {
        let mut events = Vec::new();
        let mut refused = Vec::new();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(post) = self.next(left).await else {
                panic!("the last event awaited did not come within {wait:?}; got {events:?}")
            };
            check(&post);
            let body: serde_json::Value = serde_json::from_slice(&post.body).unwrap_or_default();
            let batch = body["events"].as_array().cloned().unwrap_or_default();
            if post.status != 200 {
                refused.push(batch.iter().map(|e| e["id"].clone()).collect());
                continue;
            }
            let done = batch.iter().any(&last);
            events.extend(batch);
            if done {
                return (events, refused);
            }
        }
    }
}
