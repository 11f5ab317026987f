//! LiveKit's webhooks (`POST /rtc/livekit`), checked as LiveKit's own Go receiver
//! (`webhook.Receive` in livekit/protocol) checks them, and read as its `WebhookEvent`
//! (`livekit_webhook.proto`) in proto3 JSON, the way LiveKit's notifier sends it.

use std::collections::HashSet;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use protocol::ids::{is_valid_id, is_valid_user_id};
use protocol::link::{RtcEvent, RtcKind};
use protocol::{RoomId, UserId};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{Delivery, Parsed, Refused, check_event_id};

/// Leeway on a token's `exp` and `nbf`: the minute LiveKit's own receiver allows.
const LEEWAY_SECS: u64 = 60;
/// `TrackType.AUDIO`; proto3 JSON leaves a zero enum out, so a track without a type is audio.
const TRACK_AUDIO: (&str, i64) = ("AUDIO", 0);
/// `TrackSource.UNKNOWN` (custom publishers).
const SOURCE_UNKNOWN: (&str, i64) = ("UNKNOWN", 0);
/// `TrackSource.MICROPHONE`.
const SOURCE_MICROPHONE: (&str, i64) = ("MICROPHONE", 2);

/// The claims of a LiveKit webhook's token that Chorus reads (LiveKit's `auth.ClaimGrants`
/// and the registered ones); `exp` is required, as LiveKit's own receiver requires it.
#[derive(Deserialize)]
struct LivekitClaims {
    iss: String,
    exp: u64,
    #[serde(default)]
    nbf: Option<u64>,
    /// Base64 (standard, padded) of the body's SHA-256.
    sha256: String,
}

/// Checks a LiveKit webhook the way LiveKit's `webhook.Receive` does: the `Authorization`
/// header is an HS256 JWT signed with the API secret, issued by the API key, within its
/// `exp`/`nbf` (a minute's leeway), whose `sha256` claim is the body's hash.
pub(super) fn verify(
    api_key: &str,
    api_secret: &str,
    authorization: Option<&str>,
    body: &[u8],
    now: u64,
) -> Result<(), Refused> {
    let token = authorization.ok_or(Refused::Unauthorized("missing Authorization"))?;
    // LiveKit sends the bare token; a `Bearer ` prefix is taken too.
    let token = token.strip_prefix("Bearer ").unwrap_or(token).trim();
    let key = DecodingKey::from_secret(api_secret.as_bytes())
        .map_err(|_| Refused::Unauthorized("the LiveKit API secret is unusable"))?;
    let mut rules = Validation::new(Algorithm::HS256);
    // The times are checked below against `now`; presence is the claims type's.
    rules.validate_exp = false;
    rules.validate_nbf = false;
    rules.validate_aud = false;
    rules.required_spec_claims = HashSet::new();
    let claims = jsonwebtoken::decode::<LivekitClaims>(token, &key, &rules)
        .map_err(|e| {
            Refused::Unauthorized(match e.kind() {
                ErrorKind::InvalidSignature => "token not signed with the LiveKit API secret",
                ErrorKind::InvalidAlgorithm => "token not signed with HS256",
                ErrorKind::Json(_) => "token lacks iss, exp or sha256",
                _ => "malformed token",
            })
        })?
        .claims;
    if claims.iss != api_key {
        return Err(Refused::Unauthorized(
            "token not issued by the configured LiveKit API key",
        ));
    }
    if claims.exp.saturating_add(LEEWAY_SECS) < now {
        return Err(Refused::Unauthorized("token expired"));
    }
    if claims
        .nbf
        .is_some_and(|nbf| nbf > now.saturating_add(LEEWAY_SECS))
    {
        return Err(Refused::Unauthorized("token not valid yet"));
    }
    let hash = BASE64.encode(Sha256::digest(body));
    if !bool::from(claims.sha256.as_bytes().ct_eq(hash.as_bytes())) {
        return Err(Refused::Unauthorized(
            "body does not match the token's sha256",
        ));
    }
    Ok(())
}

/// A protobuf enum in proto3 JSON: its name, or its number.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ProtoEnum {
    Number(i64),
    Name(String),
}

impl ProtoEnum {
    fn is(&self, (name, number): (&str, i64)) -> bool {
        match self {
            Self::Number(n) => *n == number,
            Self::Name(s) => s == name,
        }
    }
}

/// A protobuf `int64` in proto3 JSON: a string of digits (what LiveKit sends), or a number.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ProtoInt64 {
    Number(i64),
    Text(String),
}

/// The fields Chorus reads of LiveKit's `WebhookEvent` (`livekit_webhook.proto`) in proto3
/// JSON: camelCase names (the proto names are accepted too), zero values left out, unknown
/// fields ignored.
#[derive(Deserialize)]
struct LivekitEvent {
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    room: Option<LivekitRoom>,
    #[serde(default)]
    participant: Option<LivekitParticipant>,
    #[serde(default)]
    track: Option<LivekitTrack>,
    #[serde(default)]
    id: Option<String>,
    /// Unix seconds.
    #[serde(default, rename = "createdAt", alias = "created_at")]
    created_at: Option<ProtoInt64>,
}

#[derive(Deserialize)]
struct LivekitRoom {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
struct LivekitParticipant {
    #[serde(default)]
    identity: Option<String>,
}

#[derive(Deserialize)]
struct LivekitTrack {
    #[serde(default, rename = "type")]
    kind: Option<ProtoEnum>,
    #[serde(default)]
    source: Option<ProtoEnum>,
}

impl LivekitTrack {
    /// The microphone: source `MICROPHONE`, or an audio track of unknown source (a publisher
    /// that does not set one). Screen-share audio is not the microphone: its end must not
    /// count as the user's mic going quiet.
    fn is_microphone(&self) -> bool {
        let source_is = |v| self.source.as_ref().is_some_and(|s| s.is(v));
        if source_is(SOURCE_MICROPHONE) {
            return true;
        }
        let unknown_source = self.source.is_none() || source_is(SOURCE_UNKNOWN);
        unknown_source && self.kind.as_ref().is_none_or(|t| t.is(TRACK_AUDIO))
    }
}

/// The first 64 characters of what a sender named an event (echoed in the answer).
fn shown(name: &str) -> String {
    name.chars().take(64).collect()
}

/// Reads a verified body: the microphone's publish and unpublish and the participant's leaving
/// become a [`Delivery`]; every other event is [`Parsed::Ignored`] (LiveKit must see 2xx for
/// it); a body missing what its event needs is a bad request.
pub(super) fn parse(body: &[u8]) -> Result<Parsed, Refused> {
    let e: LivekitEvent =
        serde_json::from_slice(body).map_err(|e| Refused::BadRequest(format!("body: {e}")))?;
    let name = e.event.as_deref().unwrap_or_default();
    let kind = match name {
        "track_published" | "track_unpublished" => {
            let Some(track) = &e.track else {
                return Err(Refused::BadRequest(format!("{name} without a track")));
            };
            if !track.is_microphone() {
                return Ok(Parsed::Ignored(format!("{name}: not a microphone track")));
            }
            if name == "track_published" {
                RtcKind::Published
            } else {
                RtcKind::Unpublished
            }
        }
        "participant_left" | "participant_connection_aborted" => RtcKind::Left,
        "" => return Err(Refused::BadRequest("no event".into())),
        other => {
            return Ok(Parsed::Ignored(format!(
                "{}: not about a participant's audio",
                shown(other)
            )));
        }
    };
    let room = e.room.and_then(|r| r.name).unwrap_or_default();
    let user = e.participant.and_then(|p| p.identity).unwrap_or_default();
    if room.is_empty() {
        return Err(Refused::BadRequest(format!("{name} without room.name")));
    }
    if user.is_empty() {
        return Err(Refused::BadRequest(format!(
            "{name} without participant.identity"
        )));
    }
    // A LiveKit room or participant that Chorus cannot name is not one of Chorus' (an
    // ingress, a SIP caller): nothing to do, and nothing LiveKit should send again.
    if !is_valid_id(&room) {
        return Ok(Parsed::Ignored(format!(
            "{name}: room name is not a Chorus room id"
        )));
    }
    if !is_valid_user_id(&user) {
        return Ok(Parsed::Ignored(format!(
            "{name}: participant identity is not a Chorus user id"
        )));
    }
    let id = e.id.unwrap_or_default();
    check_event_id(&id)?;
    let secs = match e.created_at {
        Some(ProtoInt64::Number(n)) => Some(n),
        Some(ProtoInt64::Text(t)) => t.parse::<i64>().ok(),
        None => None,
    };
    let at_ms = secs
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .and_then(|s| s.checked_mul(1000))
        .ok_or_else(|| Refused::BadRequest("createdAt must be unix seconds above 0".into()))?;
    Ok(Parsed::Deliver(Delivery {
        room: RoomId::from(room),
        user: UserId::from(user),
        event: RtcEvent { id, kind, at_ms },
    }))
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::{Value, json};

    use super::*;

    const NOW: u64 = 1_700_000_000;
    const LK_KEY: &str = "APIkey123";
    const LK_SECRET: &str = "livekit-api-secret";

    fn unauthorized<T: std::fmt::Debug>(r: Result<T, Refused>) {
        assert!(matches!(r, Err(Refused::Unauthorized(_))), "{r:?}");
    }

    fn bad_request<T: std::fmt::Debug>(r: Result<T, Refused>) {
        assert!(matches!(r, Err(Refused::BadRequest(_))), "{r:?}");
    }

    /// A LiveKit webhook token for `body` with these claims over the default ones.
    fn lk_token(secret: &str, body: &[u8], claims: Value) -> String {
        let mut c = json!({
            "iss": LK_KEY,
            "nbf": NOW,
            "exp": NOW + 300,
            "sha256": BASE64.encode(Sha256::digest(body)),
        });
        for (k, v) in claims.as_object().unwrap() {
            if v.is_null() {
                c.as_object_mut().unwrap().remove(k);
            } else {
                c[k] = v.clone();
            }
        }
        let key = EncodingKey::from_secret(secret.as_bytes()).unwrap();
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &c, &key).unwrap()
    }

    fn lk_verify(token: &str, body: &[u8]) -> Result<(), Refused> {
        verify(LK_KEY, LK_SECRET, Some(token), body, NOW)
    }

    fn lk_body() -> Vec<u8> {
        // As LiveKit's protojson writes it: camelCase, int64 as strings, the AUDIO type (0)
        // left out.
        br#"{"event":"track_published","room":{"sid":"RM_x","name":"r1","emptyTimeout":300,"creationTime":"1699999990"},"participant":{"sid":"PA_x","identity":"u1","state":"ACTIVE","joinedAt":"1699999995"},"track":{"sid":"TR_x","source":"MICROPHONE","mimeType":"audio/opus"},"id":"EV_abc","createdAt":"1700000000"}"#.to_vec()
    }

    #[test]
    fn a_livekit_token_for_the_body_passes() {
        let body = lk_body();
        let token = lk_token(LK_SECRET, &body, json!({}));
        assert_eq!(lk_verify(&token, &body), Ok(()));
        assert_eq!(lk_verify(&format!("Bearer {token}"), &body), Ok(()));
        // LiveKit's hash of the empty body, as its Go receiver computes it.
        assert_eq!(
            BASE64.encode(Sha256::digest(b"")),
            "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
        );
        let token = lk_token(LK_SECRET, b"", json!({"nbf": null}));
        assert_eq!(lk_verify(&token, b""), Ok(()));
    }

    #[test]
    fn a_livekit_token_signed_with_another_secret_is_refused() {
        let body = lk_body();
        unauthorized(lk_verify(
            &lk_token("not-the-secret", &body, json!({})),
            &body,
        ));
        unauthorized(verify(LK_KEY, LK_SECRET, None, &body, NOW));
        unauthorized(lk_verify("not.a.token", &body));
        // Signed right but with HS512: only HS256 is LiveKit's.
        let key = EncodingKey::from_secret(LK_SECRET.as_bytes()).unwrap();
        let claims = json!({"iss": LK_KEY, "exp": NOW + 300, "sha256": BASE64.encode(Sha256::digest(&body))});
        let hs512 = jsonwebtoken::encode(&Header::new(Algorithm::HS512), &claims, &key).unwrap();
        unauthorized(lk_verify(&hs512, &body));
    }

    #[test]
    fn a_livekit_token_from_another_api_key_is_refused() {
        let body = lk_body();
        unauthorized(lk_verify(
            &lk_token(LK_SECRET, &body, json!({"iss": "other"})),
            &body,
        ));
        unauthorized(lk_verify(
            &lk_token(LK_SECRET, &body, json!({"iss": null})),
            &body,
        ));
    }

    #[test]
    fn a_livekit_body_that_does_not_match_the_token_hash_is_refused() {
        let body = lk_body();
        let token = lk_token(LK_SECRET, &body, json!({}));
        let tampered = String::from_utf8(body.clone()).unwrap().replace("u1", "u2");
        unauthorized(lk_verify(&token, tampered.as_bytes()));
        unauthorized(lk_verify(
            &lk_token(LK_SECRET, &body, json!({"sha256": null})),
            &body,
        ));
    }

    #[test]
    fn livekit_token_times_are_checked_with_a_minute_of_leeway() {
        let body = lk_body();
        let at = |claims| lk_verify(&lk_token(LK_SECRET, &body, claims), &body);
        assert_eq!(at(json!({"exp": NOW - 60})), Ok(()));
        unauthorized(at(json!({"exp": NOW - 61})));
        assert_eq!(at(json!({"nbf": NOW + 60})), Ok(()));
        unauthorized(at(json!({"nbf": NOW + 61})));
        // LiveKit always sets exp, and its own receiver requires it.
        unauthorized(at(json!({"exp": null})));
    }

    fn lk_parse(v: &Value) -> Result<Parsed, Refused> {
        parse(v.to_string().as_bytes())
    }

    fn lk_event(event: &str, track: Value) -> Value {
        json!({
            "event": event,
            "room": {"name": "r1"},
            "participant": {"identity": "u1"},
            "track": track,
            "id": "EV_abc",
            "createdAt": "1700000000",
        })
    }

    fn kind_of(p: Parsed) -> RtcKind {
        match p {
            Parsed::Deliver(d) => d.event.kind,
            Parsed::Ignored(why) => panic!("ignored: {why}"),
        }
    }

    #[test]
    fn livekit_microphone_events_become_rtc_events() {
        assert_eq!(
            parse(&lk_body()).unwrap(),
            Parsed::Deliver(Delivery {
                room: RoomId::from("r1"),
                user: UserId::from("u1"),
                event: RtcEvent {
                    id: "EV_abc".into(),
                    kind: RtcKind::Published,
                    at_ms: 1_700_000_000_000,
                },
            })
        );
        for track in [
            json!({"type": "AUDIO", "source": "MICROPHONE"}),
            json!({"type": 0, "source": 2}),
            json!({"type": "AUDIO"}),
            json!({"source": "MICROPHONE"}),
            json!({"type": "AUDIO", "source": "UNKNOWN"}),
            json!({}),
        ] {
            let published = lk_parse(&lk_event("track_published", track.clone())).unwrap();
            assert_eq!(kind_of(published), RtcKind::Published, "{track}");
            let gone = lk_parse(&lk_event("track_unpublished", track.clone())).unwrap();
            assert_eq!(kind_of(gone), RtcKind::Unpublished, "{track}");
        }
        for event in ["participant_left", "participant_connection_aborted"] {
            let left = lk_parse(&lk_event(event, Value::Null)).unwrap();
            assert_eq!(kind_of(left), RtcKind::Left);
        }
    }

    #[test]
    fn other_livekit_events_are_ignored() {
        for (event, track) in [
            ("room_started", Value::Null),
            ("room_finished", Value::Null),
            ("participant_joined", Value::Null),
            ("egress_started", Value::Null),
            ("ingress_ended", Value::Null),
            ("something_new", Value::Null),
            (
                "track_published",
                json!({"type": "VIDEO", "source": "CAMERA"}),
            ),
            ("track_published", json!({"type": 1})),
            (
                "track_unpublished",
                json!({"type": "VIDEO", "source": "SCREEN_SHARE"}),
            ),
            (
                "track_published",
                json!({"type": "AUDIO", "source": "SCREEN_SHARE_AUDIO"}),
            ),
            ("track_unpublished", json!({"source": 4})),
            ("track_published", json!({"type": "DATA"})),
        ] {
            let got = lk_parse(&lk_event(event, track.clone())).unwrap();
            assert!(
                matches!(got, Parsed::Ignored(_)),
                "{event} {track}: {got:?}"
            );
        }
        // A room started carries no participant: still ignored, not a bad request.
        let started = json!({"event": "room_started", "room": {"name": "r1"}, "id": "EV_1", "createdAt": "1"});
        assert!(matches!(lk_parse(&started), Ok(Parsed::Ignored(_))));
        // Participants Chorus cannot name (here an identity with spaces) are not Chorus users.
        let mut sip = lk_event("participant_left", Value::Null);
        sip["participant"]["identity"] = json!("sip caller 1");
        assert!(matches!(lk_parse(&sip), Ok(Parsed::Ignored(_))));
        let mut room = lk_event("participant_left", Value::Null);
        room["room"]["name"] = json!("a room");
        assert!(matches!(lk_parse(&room), Ok(Parsed::Ignored(_))));
    }

    #[test]
    fn livekit_created_at_is_read_as_a_string_or_a_number() {
        for at in [json!("1700000000"), json!(1_700_000_000)] {
            let mut e = lk_event("participant_left", Value::Null);
            e["createdAt"] = at.clone();
            let Ok(Parsed::Deliver(d)) = lk_parse(&e) else {
                panic!("{at}");
            };
            assert_eq!(d.event.at_ms, 1_700_000_000_000);
        }
        // The proto field name, which proto3 JSON readers take too.
        let mut e = lk_event("participant_left", Value::Null);
        e.as_object_mut().unwrap().remove("createdAt");
        e["created_at"] = json!("1700000001");
        let Ok(Parsed::Deliver(d)) = lk_parse(&e) else {
            panic!("created_at");
        };
        assert_eq!(d.event.at_ms, 1_700_000_001_000);
    }

    #[test]
    fn broken_livekit_events_are_bad_requests() {
        let with = |k: &str, v: Value| {
            let mut e = lk_event("track_published", json!({"source": "MICROPHONE"}));
            if v.is_null() {
                e.as_object_mut().unwrap().remove(k);
            } else {
                e[k] = v;
            }
            lk_parse(&e)
        };
        bad_request(with("createdAt", Value::Null));
        bad_request(with("createdAt", json!("soon")));
        bad_request(with("createdAt", json!(-5)));
        bad_request(with("createdAt", json!(1.5)));
        bad_request(with("id", Value::Null));
        bad_request(with("participant", Value::Null));
        bad_request(with("room", json!({"sid": "RM_x"})));
        bad_request(with("track", Value::Null));
        bad_request(with("event", Value::Null));
        bad_request(parse(b"{"));
        bad_request(parse(b"[]"));
    }
}
