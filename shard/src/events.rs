//! Room events for the app's backend (event webhooks): what rooms do (created, closed, members
//! in and out, seats, gifts settled, moderation), POSTed in signed batches to the operator's
//! URL by the node that runs the room; and the platform's moderation decisions (a report
//! resolved, an account suspended or reinstated), sent by the node whose admin API took them.
//!
//! A room never waits for the app: events go into one bounded queue per node (a full queue
//! drops, counted), and one task sends them in order, in batches, retrying a failed batch with
//! backoff before it gives up on it (counted). Delivery is at least once while the node lives:
//! a batch whose answer was lost is sent again, so the app dedupes by `id`; a node that dies
//! loses what it had not sent. The ledger stays the authority on money.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use protocol::{NodeId, RoomId};
use serde::Serialize;
use sha2::Sha256;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Events waiting to be sent, per node, before new ones are dropped.
pub const QUEUE: usize = 10_000;
/// Events per POST at most.
pub const BATCH: usize = 100;
/// At shutdown, how long the sender may spend on what is still queued (one try each).
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(3);
/// How long the sender waits for more events after the first of a batch.
const GATHER: Duration = Duration::from_millis(50);
/// Attempts per batch before it is dropped (about 31 s of backoff in all).
const ATTEMPTS: u32 = 6;
/// First retry delay; doubles per attempt.
const RETRY_FIRST: Duration = Duration::from_millis(1000);
/// Longest a POST may take.
const POST_TIMEOUT: Duration = Duration::from_secs(5);
/// The header with the unix time (seconds) the batch was signed at.
pub const TIMESTAMP_HEADER: &str = "x-chorus-timestamp";
/// The header with `v1=` and the lowercase hex HMAC-SHA256 of `"<timestamp>.<body>"`.
pub const SIGNATURE_HEADER: &str = "x-chorus-signature";

/// Every kind of event, as the webhook names them.
pub const KINDS: [&str; 19] = [
    "room.created",
    "room.closed",
    "room.opened",
    "member.joined",
    "member.left",
    "seat.changed",
    "gift.settled",
    "moderation",
    "room.attrs",
    "rocket.launched",
    "pk.ended",
    "message.custom",
    "chat.sent",
    "chat.recalled",
    "report.filed",
    "report.resolved",
    "user.suspended",
    "user.reinstated",
    "im.sent",
];

/// The kinds sent only when the operator lists them: one event per chat line or direct
/// message is a volume an app asks for (a moderation pipeline, a compliance log), not one it
/// gets by default.
pub const OPT_IN_KINDS: [&str; 2] = ["chat.sent", "im.sent"];

/// Where and how to send (`events_webhook_url`, `events_webhook_secret`,
/// `events_webhook_kinds`). Its `Debug` leaves the secret out.
#[derive(Clone, PartialEq, Eq)]
pub struct EventsConfig {
    /// An `http://` URL (TLS is a proxy's business: see README).
    pub url: http::Uri,
    /// The HMAC key of the signature.
    pub secret: Vec<u8>,
    /// The kinds sent; every kind but the [`OPT_IN_KINDS`] when `None`.
    pub kinds: Option<BTreeSet<String>>,
}

impl std::fmt::Debug for EventsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventsConfig")
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .field("kinds", &self.kinds)
            .finish()
    }
}

impl EventsConfig {
    /// Checks the URL (absolute `http://`), the secret (16 bytes at least) and the kinds.
    ///
    /// # Errors
    /// What is wrong, for the operator.
    pub fn new(url: &str, secret: &str, kinds: Option<&[String]>) -> Result<Self, String> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| format!("events_webhook_url: {e}"))?;
        if uri.scheme_str() != Some("http") || uri.host().is_none() {
            return Err("events_webhook_url must be an absolute http:// URL".into());
        }
        if secret.len() < 16 {
            return Err("events_webhook_secret must be 16 bytes at least".into());
        }
        let kinds = match kinds {
            None => None,
            Some(list) => {
                if let Some(bad) = list.iter().find(|k| !KINDS.contains(&k.as_str())) {
                    return Err(format!(
                        "events_webhook_kinds: unknown kind {bad:?} (known: {})",
                        KINDS.join(", ")
                    ));
                }
                Some(list.iter().cloned().collect())
            }
        };
        Ok(Self {
            url: uri,
            secret: secret.as_bytes().to_vec(),
            kinds,
        })
    }

    /// Whether events of `kind` are sent.
    pub fn wants(&self, kind: &str) -> bool {
        match &self.kinds {
            Some(k) => k.contains(kind),
            None => !OPT_IN_KINDS.contains(&kind),
        }
    }
}

/// One event as the app receives it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Unique (a UUIDv7): the same id twice is one event.
    pub id: String,
    /// One of [`KINDS`].
    pub kind: &'static str,
    /// When the room did it (unix ms).
    pub at: u64,
    /// The room; `None` (null) for an event about an account (`user.*`).
    pub room: Option<RoomId>,
    /// The node that ran the room, or whose admin API took the decision.
    pub node: NodeId,
    /// What happened (per kind; see the README, "Event webhooks").
    pub data: serde_json::Value,
}

/// The rooms' side: queues events for the sender.
#[derive(Debug, Clone)]
pub struct Notifier {
    config: std::sync::Arc<EventsConfig>,
    node: NodeId,
    tx: mpsc::Sender<Event>,
}

impl Notifier {
    /// Starts the sender on `tracker`; it stops at `shutdown` after one last try of what is
    /// queued.
    pub fn start(
        config: EventsConfig,
        node: NodeId,
        tracker: &tokio_util::task::TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        let config = std::sync::Arc::new(config);
        let (tx, rx) = mpsc::channel(QUEUE);
        tracker.spawn(send_loop(config.clone(), rx, shutdown));
        Self { config, node, tx }
    }

    /// Whether events of `kind` are sent (the room skips building the others).
    pub fn wants(&self, kind: &str) -> bool {
        self.config.wants(kind)
    }

    /// Queues an event of `kind` about `room`; dropped (and counted) when the queue is full.
    pub fn emit(&self, kind: &'static str, room: &RoomId, data: serde_json::Value) {
        self.queue(kind, Some(room.clone()), data);
    }

    /// Queues an event of `kind` about an account, in no room (`user.suspended`, …).
    pub fn emit_account(&self, kind: &'static str, data: serde_json::Value) {
        self.queue(kind, None, data);
    }

    fn queue(&self, kind: &'static str, room: Option<RoomId>, data: serde_json::Value) {
        if !self.wants(kind) {
            return;
        }
        let ev = Event {
            id: uuid::Uuid::now_v7().to_string(),
            kind,
            at: unix_ms(),
            room,
            node: self.node.clone(),
            data,
        };
        if self.tx.try_send(ev).is_err() {
            metrics::counter!(crate::metrics::EVENTS_WEBHOOK_DROPPED, "why" => "queue_full")
                .increment(1);
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `v1=` and the lowercase hex HMAC-SHA256 of `"<timestamp>.<body>"` under `secret`.
pub fn signature(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    // HMAC takes a key of any length: this never fails.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return String::new();
    };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Sends queued events in order, a batch at a time, until `shutdown` (then one last try of
/// what is queued, without retries).
async fn send_loop(
    config: std::sync::Arc<EventsConfig>,
    mut rx: mpsc::Receiver<Event>,
    shutdown: CancellationToken,
) {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    loop {
        let first = tokio::select! {
            ev = rx.recv() => ev,
            () = shutdown.cancelled() => None,
        };
        let Some(first) = first else { break };
        let mut batch = vec![first];
        let gather = tokio::time::sleep(GATHER);
        tokio::pin!(gather);
        while batch.len() < BATCH {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Some(ev) => batch.push(ev),
                    None => break,
                },
                () = &mut gather => break,
            }
        }
        deliver(&client, &config, &batch, &shutdown).await;
    }
    // Shutting down: what is queued gets one try, within a bound (a node must stop even when
    // the app does not answer).
    rx.close();
    let mut rest = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        rest.push(ev);
    }
    let flush = async {
        for chunk in rest.chunks(BATCH) {
            if post(&client, &config, chunk).await.is_err() {
                break;
            }
        }
    };
    if tokio::time::timeout(SHUTDOWN_FLUSH, flush).await.is_err() {
        debug!("Event webhook: queued events left unsent at shutdown.");
    }
}

/// Sends one batch, retrying with backoff; drops it (counted) after [`ATTEMPTS`] or at
/// shutdown.
async fn deliver(
    client: &Client<HttpConnector, Full<Bytes>>,
    config: &EventsConfig,
    batch: &[Event],
    shutdown: &CancellationToken,
) {
    let mut delay = RETRY_FIRST;
    for attempt in 1..=ATTEMPTS {
        match post(client, config, batch).await {
            Ok(()) => {
                metrics::counter!(crate::metrics::EVENTS_WEBHOOK_SENT)
                    .increment(batch.len() as u64);
                return;
            }
            Err(why) => {
                debug!(attempt, events = batch.len(), why, "Event webhook failed.");
                metrics::counter!(crate::metrics::EVENTS_WEBHOOK_FAILURES).increment(1);
            }
        }
        if attempt == ATTEMPTS {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shutdown.cancelled() => break,
        }
        delay *= 2;
    }
    warn!(
        events = batch.len(),
        "Event webhook batch dropped after its retries."
    );
    metrics::counter!(crate::metrics::EVENTS_WEBHOOK_DROPPED, "why" => "undelivered")
        .increment(batch.len() as u64);
}

/// One POST of `batch`: `Ok` on a 2xx answer.
async fn post(
    client: &Client<HttpConnector, Full<Bytes>>,
    config: &EventsConfig,
    batch: &[Event],
) -> Result<(), String> {
    #[derive(Serialize)]
    struct Body<'a> {
        events: &'a [Event],
    }
    let body = serde_json::to_vec(&Body { events: batch }).map_err(|e| e.to_string())?;
    let ts = (unix_ms() / 1000).to_string();
    let sig = signature(&config.secret, &ts, &body);
    let req = http::Request::post(config.url.clone())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(TIMESTAMP_HEADER, ts)
        .header(SIGNATURE_HEADER, sig)
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(POST_TIMEOUT, client.request(req)).await {
        Ok(Ok(resp)) if resp.status().is_success() => Ok(()),
        Ok(Ok(resp)) => Err(format!("answered {}", resp.status())),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_wants_an_http_url_a_long_secret_and_known_kinds() {
        let ok = EventsConfig::new("http://app.internal:8080/chorus", "0123456789abcdef", None);
        assert!(ok.is_ok_and(|c| c.wants("gift.settled")
            && c.wants("member.left")
            && c.wants("rocket.launched")
            && !c.wants("chat.sent")));
        let chat = ["chat.sent".to_owned()];
        let c = EventsConfig::new("http://a/h", "0123456789abcdef", Some(&chat))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(c.wants("chat.sent") && !c.wants("gift.settled"));
        for (url, secret) in [
            ("https://app.example/hook", "0123456789abcdef"),
            ("/relative", "0123456789abcdef"),
            ("http://app:8080/", "short"),
        ] {
            assert!(
                EventsConfig::new(url, secret, None).is_err(),
                "{url} {secret}"
            );
        }
        let some = ["gift.settled".to_owned()];
        let c = EventsConfig::new("http://a/h", "0123456789abcdef", Some(&some))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(c.wants("gift.settled") && !c.wants("member.joined"));
        assert!(
            !format!("{c:?}").contains("0123456789abcdef"),
            "the secret stays out of logs"
        );
        let bad = ["gift".to_owned()];
        assert!(EventsConfig::new("http://a/h", "0123456789abcdef", Some(&bad)).is_err());
    }

    #[test]
    fn the_signature_is_the_hmac_of_the_timestamp_dot_the_body() {
        // Python: hmac.new(b"Jefe", b'1700000000.{"events":[]}', hashlib.sha256).hexdigest()
        assert_eq!(
            signature(b"Jefe", "1700000000", br#"{"events":[]}"#),
            "v1=a110c986da302c5f37accf36f899e479e3fefc1bf8e4d6b0c91b30f3838ed197"
        );
    }
}
