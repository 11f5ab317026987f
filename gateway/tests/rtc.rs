//! RTC provider webhooks end to end on a standalone server: signed events on the admin port
//! reach the room's owner (the shard counts the command), refused ones reach nothing, and no
//! admin token is involved. One test per server, so the process-wide metrics it reads are its
//! own.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use gateway::GatewayConfig;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use protocol::RoomId;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use shard::ShardConfig;

use crate::support::server;
use crate::support::webhook;
use server::Server;
use webhook::{chorus_headers, now, send};

const SECRET: &[u8] = b"rtc-test-secret";
const ADMIN: &str = "rtc-admin";
const WEBHOOK_SECRET: &str = "rtc-webhook-secret";
const LK_KEY: &str = "APIrtcTest";
const LK_SECRET: &str = "livekit-secret-for-tests";
const WAIT: Duration = Duration::from_secs(5);
/// Commands the shard's rooms handled.
const ROOM_COMMANDS: &str = "chorus_shard_room_commands_total";

impl Server {
    /// A server with both webhook formats configured, or none.
    async fn start_rtc(configured: bool) -> Server {
        let mut gateway = GatewayConfig {
            drain_window: Duration::from_millis(100),
            ..GatewayConfig::default()
        };
        if configured {
            gateway.rtc_webhook_secret = Some(WEBHOOK_SECRET.into());
            gateway.livekit_api_key = Some(LK_KEY.into());
            gateway.livekit_api_secret = Some(LK_SECRET.into());
        }
        Server::launch(SECRET, ADMIN, gateway, ShardConfig::default()).await
    }

    /// `method path` with `headers` and the raw `body`: the status and the JSON answer.
    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: &str,
    ) -> (u16, Value) {
        send(self.admin, method, path, headers, body).await
    }

    async fn webhooks(&self, format: &str, outcome: &str) -> f64 {
        let name =
            format!("chorus_rtc_webhooks_total{{format=\"{format}\",outcome=\"{outcome}\"}}");
        kit::admin::metric(self.admin, &name).await.unwrap()
    }

    async fn room_commands(&self) -> f64 {
        kit::admin::metric(self.admin, ROOM_COMMANDS).await.unwrap()
    }
}

/// The headers LiveKit's notifier sends with `body`: a bare HS256 token in `Authorization`.
fn livekit_headers(secret: &str, body: &str) -> Vec<(&'static str, String)> {
    let claims = json!({
        "iss": LK_KEY,
        "nbf": now(),
        "exp": now() + 300,
        "sha256": BASE64.encode(Sha256::digest(body.as_bytes())),
    });
    let key = EncodingKey::from_secret(secret.as_bytes()).unwrap();
    let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &key).unwrap();
    vec![
        ("authorization", token),
        ("content-type", "application/webhook+json".into()),
    ]
}

#[tokio::test]
async fn signed_webhooks_reach_the_room_and_refused_ones_reach_nothing() {
    let s = Server::start_rtc(true).await;
    let mut owner = s.connect("owner").await;
    let room = owner
        .create_room(json!({"room": "r1", "title": "voice", "seats": 4}))
        .await
        .unwrap();
    assert_eq!(room, RoomId::from("r1"));
    owner.join(&room, false, None).await.unwrap();
    let base = s.room_commands().await;

    // Our own format, signed: routed to the room (no admin token anywhere).
    let body = json!({"id": "evt-1", "room": "r1", "user": "u1", "event": "published", "at": now() * 1000}).to_string();
    let (status, answer) = s
        .send(
            "POST",
            "/rtc/webhook",
            &chorus_headers(WEBHOOK_SECRET, now(), &body),
            &body,
        )
        .await;
    assert_eq!((status, &answer), (202, &json!({"accepted": true})));
    assert!(
        kit::admin::wait_metric(s.admin, ROOM_COMMANDS, base + 1.0, WAIT)
            .await
            .unwrap()
    );

    // Refused before anything is parsed or routed: 401 with the admin error shape.
    let mut bad_sig = chorus_headers(WEBHOOK_SECRET, now(), &body);
    bad_sig[1].1 = format!("v1={}", "0".repeat(64));
    let wrong_secret = chorus_headers("not-the-secret", now(), &body);
    let stale = chorus_headers(WEBHOOK_SECRET, now() - 301, &body);
    let future = chorus_headers(WEBHOOK_SECRET, now() + 120, &body);
    let no_signature = vec![chorus_headers(WEBHOOK_SECRET, now(), &body)[0].clone()];
    // The admin token is no signature.
    let admin_token = vec![("authorization", format!("Bearer {ADMIN}"))];
    let refused = [
        bad_sig,
        wrong_secret,
        stale,
        future,
        no_signature,
        admin_token,
    ];
    for headers in &refused {
        let (status, answer) = s.send("POST", "/rtc/webhook", headers, &body).await;
        assert_eq!(status, 401, "{headers:?}: {answer}");
        assert!(answer["error"].is_string(), "{answer}");
    }
    // Signed, but tampered with on the way.
    let headers = chorus_headers(WEBHOOK_SECRET, now(), &body);
    let tampered = body.replace("u1", "u2");
    let (status, _) = s.send("POST", "/rtc/webhook", &headers, &tampered).await;
    assert_eq!(status, 401);

    // Signed, but not a body of the format: 400.
    let odd =
        json!({"id": "evt-2", "room": "r1", "user": "u1", "event": "muted", "at": 1}).to_string();
    let (status, answer) = s
        .send(
            "POST",
            "/rtc/webhook",
            &chorus_headers(WEBHOOK_SECRET, now(), &odd),
            &odd,
        )
        .await;
    assert_eq!(status, 400, "{answer}");

    // LiveKit's format, as its notifier sends it (the AUDIO type is left out by protojson).
    let lk = json!({
        "event": "track_published",
        "room": {"sid": "RM_1", "name": "r1", "emptyTimeout": 300},
        "participant": {"sid": "PA_1", "identity": "u1", "state": "ACTIVE", "joinedAt": "1700000000"},
        "track": {"sid": "TR_1", "source": "MICROPHONE", "mimeType": "audio/opus"},
        "id": "EV_1",
        "createdAt": now().to_string(),
    })
    .to_string();
    let (status, answer) = s
        .send(
            "POST",
            "/rtc/livekit",
            &livekit_headers(LK_SECRET, &lk),
            &lk,
        )
        .await;
    assert_eq!((status, &answer), (202, &json!({"accepted": true})));
    assert!(
        kit::admin::wait_metric(s.admin, ROOM_COMMANDS, base + 2.0, WAIT)
            .await
            .unwrap()
    );
    let started =
        json!({"event": "room_started", "room": {"name": "r1"}, "id": "EV_2", "createdAt": now()})
            .to_string();
    let (status, answer) = s
        .send(
            "POST",
            "/rtc/livekit",
            &livekit_headers(LK_SECRET, &started),
            &started,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["ignored"]
            .as_str()
            .unwrap()
            .starts_with("room_started")
    );
    let (status, _) = s
        .send("POST", "/rtc/livekit", &livekit_headers("wrong", &lk), &lk)
        .await;
    assert_eq!(status, 401);
    let (status, _) = s.send("POST", "/rtc/livekit", &[], &lk).await;
    assert_eq!(status, 401);
    let (status, _) = s.send("GET", "/rtc/webhook", &[], "").await;
    assert_eq!(status, 405);

    // Only the two accepted events reached the room. The owner's chat is the barrier: the
    // room runs its commands in the order they were handed to it, and a refused call had
    // been answered (so had handed over anything it routed) before the chat was sent; once
    // the chat is answered, the count holds every command routed before it.
    owner.chat(&room, "barrier").await.unwrap();
    assert_eq!(
        s.room_commands().await,
        base + 3.0,
        "two webhooks and the chat"
    );
    assert_eq!(s.webhooks("chorus", "accepted").await, 1.0);
    assert_eq!(s.webhooks("chorus", "unauthorized").await, 7.0);
    assert_eq!(s.webhooks("chorus", "bad_request").await, 1.0);
    assert_eq!(s.webhooks("livekit", "accepted").await, 1.0);
    assert_eq!(s.webhooks("livekit", "ignored").await, 1.0);
    assert_eq!(s.webhooks("livekit", "unauthorized").await, 2.0);
    s.stop().await;
}

#[tokio::test]
async fn webhooks_answer_503_where_they_are_not_configured() {
    let s = Server::start_rtc(false).await;
    let body =
        json!({"id": "evt-1", "room": "r1", "user": "u1", "event": "left", "at": 1}).to_string();
    let headers = chorus_headers(WEBHOOK_SECRET, now(), &body);
    let (status, answer) = s.send("POST", "/rtc/webhook", &headers, &body).await;
    assert_eq!(status, 503, "{answer}");
    let (status, answer) = s
        .send(
            "POST",
            "/rtc/livekit",
            &livekit_headers(LK_SECRET, &body),
            &body,
        )
        .await;
    assert_eq!(status, 503, "{answer}");
    s.stop().await;
}
