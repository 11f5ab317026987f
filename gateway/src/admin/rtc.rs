//! RTC provider webhooks on the admin port: `POST /rtc/webhook` (Chorus' own signed format) and
//! `POST /rtc/livekit` (LiveKit's). Neither takes the admin token, which providers cannot
//! send: each is authenticated by its signature, checked on the raw body before the body is
//! parsed. A verified event about a participant's audio goes to the room's owner as
//! [`RoomCmd::Rtc`] through the gateway's command path ([`Core::send_command`], with its
//! routing retries), on behalf of a session no client has; the owner applies it to the seats.
//!
//! Answers: 202 `{"accepted":true}` once routed, 200 `{"ignored":"<why>"}` for a LiveKit event
//! that is not about a participant's microphone (LiveKit must see 2xx for those), 401 for a
//! missing or bad signature, 400 for a bad body, 503 when the format is not configured, 404
//! on a node without the gateway role.

use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use http::{HeaderMap, Method, Request, StatusCode};
use hyper::body::Incoming;
use protocol::ids::{is_valid_id, is_valid_user_id};
use protocol::link::{RoomCmd, RtcEvent, RtcKind};
use protocol::{RoomId, SessionId, UserId};
use serde::Deserialize;
use serde_json::json;
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tracing::{debug, info, warn};

use super::{Admin, Resp, error, json_resp, read_body};
use crate::shared::Core;

mod livekit;

/// Path of Chorus' own webhook format.
pub(super) const CHORUS_PATH: &str = "/rtc/webhook";
/// Path of LiveKit's webhook format.
pub(super) const LIVEKIT_PATH: &str = "/rtc/livekit";
/// Header with the unix seconds a Chorus webhook was signed at.
pub(super) const TIMESTAMP_HEADER: &str = "x-chorus-timestamp";
/// Header with a Chorus webhook's signature, `v1=<hex>`.
pub(super) const SIGNATURE_HEADER: &str = "x-chorus-signature";
/// The version tag before the signature's hex.
const SIGNATURE_V1: &str = "v1=";
/// How old a Chorus webhook's timestamp may be: the replay window.
const MAX_AGE_SECS: u64 = 300;
/// How far a Chorus webhook's timestamp may lie ahead (the sender's clock drifts).
const MAX_AHEAD_SECS: u64 = 60;
/// Largest webhook body: LiveKit's events carry the room's and the participant's metadata
/// (each up to 64 000 bytes by LiveKit's default limit), more than the admin API's 64 KiB.
const MAX_BODY_BYTES: usize = 256 * 1024;
/// Longest provider event id accepted (the owner keeps ids to drop repeats).
const MAX_EVENT_ID_BYTES: usize = 128;
/// The session webhook commands are sent for: sessions are numbered from 1
/// (`Core::next_session`), so no client has this one and its replies reach nobody.
const RTC_SESSION: SessionId = 0;

/// Why a webhook is not taken.
#[derive(Debug, PartialEq)]
pub(super) enum Refused {
    /// 401: missing or bad signature, or a timestamp or token outside its window.
    Unauthorized(&'static str),
    /// 400: the body does not say what the format requires.
    BadRequest(String),
}

/// A verified event for one room's owner.
#[derive(Debug, PartialEq)]
struct Delivery {
    room: RoomId,
    user: UserId,
    event: RtcEvent,
}

/// What a verified body asks for.
#[derive(Debug, PartialEq)]
enum Parsed {
    /// Send it to the room.
    Deliver(Delivery),
    /// Nothing to do (200 with the reason).
    Ignored(String),
}

/// The webhook formats, as the metric's `format` label.
#[derive(Debug, Clone, Copy)]
enum Format {
    Chorus,
    Livekit,
}

impl Format {
    fn label(self) -> &'static str {
        match self {
            Self::Chorus => "chorus",
            Self::Livekit => "livekit",
        }
    }
}

/// `POST /rtc/webhook` and `POST /rtc/livekit`: no admin token, the signature instead.
pub(super) async fn serve(admin: &Admin, req: Request<Incoming>) -> Resp {
    let format = if req.uri().path() == CHORUS_PATH {
        Format::Chorus
    } else {
        Format::Livekit
    };
    if req.method() != Method::POST {
        return error(StatusCode::METHOD_NOT_ALLOWED, "use POST");
    }
    let Some(core) = &admin.core else {
        return error(
            StatusCode::NOT_FOUND,
            "RTC webhooks are served by gateway nodes",
        );
    };
    let cfg = &core.config;
    let configured = match format {
        Format::Chorus => cfg
            .rtc_webhook_secret
            .as_ref()
            .is_some_and(|s| !s.is_empty()),
        Format::Livekit => {
            cfg.livekit_api_key.as_ref().is_some_and(|k| !k.is_empty())
                && cfg
                    .livekit_api_secret
                    .as_ref()
                    .is_some_and(|s| !s.is_empty())
        }
    };
    if !configured {
        warn!(
            format = format.label(),
            "RTC webhook received, but its format is not configured."
        );
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            match format {
                Format::Chorus => "RTC webhooks are not configured (rtc_webhook_secret)",
                Format::Livekit => {
                    "LiveKit webhooks are not configured (livekit_api_key, livekit_api_secret)"
                }
            },
        );
    }
    let (parts, body) = req.into_parts();
    let body = match read_body(body, MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let now = unix_now();
    let h = &parts.headers;
    let result = match format {
        Format::Chorus => {
            let secret = cfg.rtc_webhook_secret.as_deref().unwrap_or_default();
            let ts = header(h, TIMESTAMP_HEADER);
            verify_chorus(
                secret.as_bytes(),
                ts,
                header(h, SIGNATURE_HEADER),
                &body,
                now,
            )
            .and_then(|()| parse_chorus(&body).map(Parsed::Deliver))
        }
        Format::Livekit => {
            let key = cfg.livekit_api_key.as_deref().unwrap_or_default();
            let secret = cfg.livekit_api_secret.as_deref().unwrap_or_default();
            let token = header(h, http::header::AUTHORIZATION.as_str());
            livekit::verify(key, secret, token, &body, now).and_then(|()| livekit::parse(&body))
        }
    };
    finish(core, format, result)
}

/// Routes an accepted event, and answers and counts every outcome.
fn finish(core: &Core, format: Format, result: Result<Parsed, Refused>) -> Resp {
    let (outcome, resp) = match result {
        Ok(Parsed::Deliver(d)) => {
            debug!(format = format.label(), room = %d.room, user = %d.user, id = %d.event.id,
                kind = ?d.event.kind, "RTC webhook accepted.");
            let cmd = RoomCmd::Rtc(d.event);
            core.send_command(RTC_SESSION, &d.user, None, d.room, cmd, None);
            let ok = json_resp(StatusCode::ACCEPTED, &json!({ "accepted": true }));
            ("accepted", ok)
        }
        Ok(Parsed::Ignored(why)) => {
            debug!(format = format.label(), why, "RTC webhook ignored.");
            (
                "ignored",
                json_resp(StatusCode::OK, &json!({ "ignored": why })),
            )
        }
        Err(Refused::Unauthorized(why)) => {
            info!(format = format.label(), why, "RTC webhook refused.");
            ("unauthorized", error(StatusCode::UNAUTHORIZED, why))
        }
        Err(Refused::BadRequest(why)) => {
            info!(format = format.label(), why, "RTC webhook with a bad body.");
            ("bad_request", error(StatusCode::BAD_REQUEST, &why))
        }
    };
    metrics::counter!(crate::metrics::RTC_WEBHOOKS, "format" => format.label(), "outcome" => outcome)
        .increment(1);
    resp
}

pub(super) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The `X-Chorus-Signature` value of `body` signed at `timestamp` (the header's exact text):
/// `v1=` and the lowercase hex of HMAC-SHA256(`secret`, `"<timestamp>.<body>"`).
fn chorus_signature(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    // HMAC takes a key of any length: this never fails.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return String::new();
    };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("{SIGNATURE_V1}{}", hex::encode(mac.finalize().into_bytes()))
}

/// Checks a Chorus webhook's signature (constant time), then its timestamp against the replay
/// window around `now` (unix seconds).
pub(super) fn verify_chorus(
    secret: &[u8],
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: u64,
) -> Result<(), Refused> {
    let ts = timestamp.ok_or(Refused::Unauthorized("missing X-Chorus-Timestamp"))?;
    let given = signature.ok_or(Refused::Unauthorized("missing X-Chorus-Signature"))?;
    if !given.starts_with(SIGNATURE_V1) {
        return Err(Refused::Unauthorized(
            "X-Chorus-Signature must be v1=<hex HMAC-SHA256>",
        ));
    }
    let want = chorus_signature(secret, ts, body);
    if want.is_empty() || !bool::from(given.as_bytes().ct_eq(want.as_bytes())) {
        return Err(Refused::Unauthorized("bad signature"));
    }
    let ts: u64 = ts
        .parse()
        .map_err(|_| Refused::Unauthorized("X-Chorus-Timestamp must be unix seconds"))?;
    if ts.saturating_add(MAX_AGE_SECS) < now {
        return Err(Refused::Unauthorized(
            "X-Chorus-Timestamp is more than 300 s old",
        ));
    }
    if ts > now.saturating_add(MAX_AHEAD_SECS) {
        return Err(Refused::Unauthorized(
            "X-Chorus-Timestamp is more than 60 s ahead",
        ));
    }
    Ok(())
}

/// The body of `POST /rtc/webhook`; unknown fields are allowed (a sender may add some).
#[derive(Deserialize)]
struct ChorusBody {
    id: String,
    room: String,
    user: String,
    event: String,
    /// Unix ms.
    at: u64,
}

fn parse_chorus(body: &[u8]) -> Result<Delivery, Refused> {
    let b: ChorusBody =
        serde_json::from_slice(body).map_err(|e| Refused::BadRequest(format!("body: {e}")))?;
    let kind = match b.event.as_str() {
        "published" => RtcKind::Published,
        "unpublished" => RtcKind::Unpublished,
        "left" => RtcKind::Left,
        _ => {
            return Err(Refused::BadRequest(
                "event must be published, unpublished or left".into(),
            ));
        }
    };
    check_event_id(&b.id)?;
    if !is_valid_id(&b.room) {
        return Err(Refused::BadRequest(
            "room must be 1..=64 bytes of [A-Za-z0-9-_.:]".into(),
        ));
    }
    if !is_valid_user_id(&b.user) {
        return Err(Refused::BadRequest(
            "user must be 1..=64 bytes of [A-Za-z0-9-_.:@+|]".into(),
        ));
    }
    Ok(Delivery {
        room: RoomId::from(b.room),
        user: UserId::from(b.user),
        event: RtcEvent {
            id: b.id,
            kind,
            at_ms: b.at,
        },
    })
}

fn check_event_id(id: &str) -> Result<(), Refused> {
    if id.is_empty() || id.len() > MAX_EVENT_ID_BYTES || id.chars().any(char::is_control) {
        return Err(Refused::BadRequest(
            "id must be 1..=128 bytes without control characters".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const SECRET: &[u8] = b"rtc-webhook-secret";
    const NOW: u64 = 1_700_000_000;

    fn chorus_body() -> Vec<u8> {
        br#"{"id":"evt-1","room":"r1","user":"u1","event":"published","at":1700000000123}"#.to_vec()
    }

    /// Checks `body` signed with `sig` at `ts`, at [`NOW`].
    fn verify(ts: u64, sig: &str, body: &[u8]) -> Result<(), Refused> {
        verify_chorus(SECRET, Some(&ts.to_string()), Some(sig), body, NOW)
    }

    fn signed(ts: u64, body: &[u8]) -> String {
        chorus_signature(SECRET, &ts.to_string(), body)
    }

    fn unauthorized<T: std::fmt::Debug>(r: Result<T, Refused>) {
        assert!(matches!(r, Err(Refused::Unauthorized(_))), "{r:?}");
    }

    fn bad_request<T: std::fmt::Debug>(r: Result<T, Refused>) {
        assert!(matches!(r, Err(Refused::BadRequest(_))), "{r:?}");
    }

    #[test]
    fn a_chorus_signature_is_v1_and_the_lowercase_hex_hmac_of_timestamp_dot_body() {
        // Computed independently: Python's hmac.new(b"key", b"1.{}", sha256).hexdigest().
        assert_eq!(
            chorus_signature(b"key", "1", b"{}"),
            "v1=1ba6b8171186efc613e8bcc0cbdab2748f24984d7c5a84faa2637afa0e40d224"
        );
    }

    #[test]
    fn a_good_chorus_signature_passes_across_the_window() {
        let body = chorus_body();
        assert_eq!(verify(NOW, &signed(NOW, &body), &body), Ok(()));
        let oldest = NOW - MAX_AGE_SECS;
        assert_eq!(verify(oldest, &signed(oldest, &body), &body), Ok(()));
        let furthest = NOW + MAX_AHEAD_SECS;
        assert_eq!(verify(furthest, &signed(furthest, &body), &body), Ok(()));
    }

    #[test]
    fn bad_chorus_signatures_are_refused() {
        let body = chorus_body();
        let good = signed(NOW, &body);
        unauthorized(verify(NOW, "v1=00", &body));
        unauthorized(verify(NOW, &good.to_uppercase(), &body));
        unauthorized(verify(NOW, good.trim_start_matches("v1="), &body));
        unauthorized(verify(NOW, &good.replacen("v1=", "v2=", 1), &body));
        let mut flipped = good.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
        unauthorized(verify(NOW, &String::from_utf8(flipped).unwrap(), &body));
        // Signed for another time: the timestamp is part of what is signed.
        unauthorized(verify(NOW, &signed(NOW - 1, &body), &body));
    }

    #[test]
    fn a_chorus_signature_made_with_another_secret_is_refused() {
        let body = chorus_body();
        let other = chorus_signature(b"another-secret", &NOW.to_string(), &body);
        unauthorized(verify(NOW, &other, &body));
    }

    #[test]
    fn stale_and_future_chorus_timestamps_are_refused_even_when_signed() {
        let body = chorus_body();
        let stale = NOW - MAX_AGE_SECS - 1;
        unauthorized(verify(stale, &signed(stale, &body), &body));
        let future = NOW + MAX_AHEAD_SECS + 1;
        unauthorized(verify(future, &signed(future, &body), &body));
        let sig = chorus_signature(SECRET, "soon", &body);
        unauthorized(verify_chorus(SECRET, Some("soon"), Some(&sig), &body, NOW));
    }

    #[test]
    fn a_tampered_chorus_body_is_refused() {
        let body = chorus_body();
        let sig = signed(NOW, &body);
        let tampered = String::from_utf8(body).unwrap().replace("u1", "u2");
        unauthorized(verify(NOW, &sig, tampered.as_bytes()));
    }

    #[test]
    fn missing_chorus_headers_are_refused() {
        let body = chorus_body();
        let sig = signed(NOW, &body);
        let ts = NOW.to_string();
        unauthorized(verify_chorus(SECRET, None, Some(&sig), &body, NOW));
        unauthorized(verify_chorus(SECRET, Some(&ts), None, &body, NOW));
    }

    #[test]
    fn a_chorus_body_becomes_an_rtc_event() {
        let d = parse_chorus(&chorus_body()).unwrap();
        assert_eq!(
            d,
            Delivery {
                room: RoomId::from("r1"),
                user: UserId::from("u1"),
                event: RtcEvent {
                    id: "evt-1".into(),
                    kind: RtcKind::Published,
                    at_ms: 1_700_000_000_123,
                },
            }
        );
        for (event, kind) in [
            ("unpublished", RtcKind::Unpublished),
            ("left", RtcKind::Left),
        ] {
            let body =
                json!({"id": "e", "room": "r1", "user": "u1", "event": event, "at": 1, "extra": 1});
            assert_eq!(
                parse_chorus(body.to_string().as_bytes())
                    .unwrap()
                    .event
                    .kind,
                kind
            );
        }
    }

    #[test]
    fn bad_chorus_bodies_are_bad_requests() {
        let good = json!({"id": "evt-1", "room": "r1", "user": "u1", "event": "left", "at": 1});
        let with = |k: &str, v: Value| {
            let mut b = good.clone();
            b[k] = v;
            parse_chorus(b.to_string().as_bytes())
        };
        bad_request(with("event", json!("muted")));
        bad_request(with("room", json!("has space")));
        bad_request(with("room", json!("")));
        bad_request(with("user", json!("x".repeat(65))));
        bad_request(with("id", json!("")));
        bad_request(with("id", json!("x".repeat(129))));
        bad_request(with("at", json!(-1)));
        bad_request(with("at", json!("1")));
        bad_request(with("room", Value::Null));
        bad_request(parse_chorus(b"not json"));
        let mut missing = good.clone();
        missing.as_object_mut().unwrap().remove("at");
        bad_request(parse_chorus(missing.to_string().as_bytes()));
    }
}
