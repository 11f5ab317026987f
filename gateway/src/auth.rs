//! HS256 JWT tokens: checked at the upgrade (header or `?token=`), minted by `chorus token`.

use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use protocol::UserId;
use protocol::client::Profile;
use protocol::ids::is_valid_user_id;
use serde::{Deserialize, Serialize};

/// How far a token's `nbf` or `iat` may lie in the future: clocks of token issuers drift.
const CLOCK_LEEWAY_SECS: u64 = 60;

/// The claims Chorus reads: `sub` is the user id, `exp` the expiry, `nbf` and `iat` (optional)
/// when it becomes valid and when it was issued, all in seconds since the epoch.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Claims {
    sub: String,
    exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nbf: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iat: Option<u64>,
    /// The audience `chorus token` writes when one is configured. Never read here: the
    /// validation checks it, in either of its forms (a string or a list).
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    aud: Option<String>,
    /// Optional profile claims: display name, avatar URL, region. A claim out of bounds is
    /// ignored (the token still holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    avatar: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    region: Option<String>,
}

impl Claims {
    /// The profile the claims carry, each field kept only when it is within bounds.
    fn profile(&self) -> Profile {
        let keep = |p: Profile| p.validate().is_ok();
        let name = self.name.clone().filter(|n| {
            keep(Profile {
                name: Some(n.clone()),
                ..Profile::default()
            })
        });
        let avatar = self.avatar.clone().filter(|a| {
            keep(Profile {
                avatar: Some(a.clone()),
                ..Profile::default()
            })
        });
        let region = self.region.clone().filter(|r| {
            keep(Profile {
                region: Some(r.clone()),
                ..Profile::default()
            })
        });
        Profile {
            name,
            avatar,
            region,
        }
    }
}

/// `p` behind an `Arc`; every empty profile (most tokens carry no profile claims) shares one,
/// so an idle connection holds no profile allocation of its own.
pub(crate) fn shared_profile(p: Profile) -> std::sync::Arc<Profile> {
    static EMPTY: std::sync::LazyLock<std::sync::Arc<Profile>> =
        std::sync::LazyLock::new(|| std::sync::Arc::new(Profile::default()));
    if p.is_empty() {
        EMPTY.clone()
    } else {
        std::sync::Arc::new(p)
    }
}

/// An authenticated user and when its token expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The user.
    pub user: UserId,
    /// Token expiry, seconds since the Unix epoch.
    pub exp: u64,
    /// The profile the token's claims carry (empty without profile claims); shared, so that a
    /// socket's task stays small.
    pub profile: std::sync::Arc<Profile>,
}

/// Why a token was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No token in the header or query.
    #[error("missing token")]
    Missing,
    /// Signature, format, algorithm or expiry check failed.
    #[error("invalid token: {0}")]
    Invalid(String),
    /// `sub` is not a usable user id.
    #[error("invalid user id in token")]
    BadSubject,
    /// `sub` is a robot's id (`bot:…`): robots run inside rooms and never connect, so no
    /// client may pass as one.
    #[error("robot user id in token")]
    RobotSubject,
}

/// Whether a token's `sub` may connect: a usable id that is not a robot's.
fn check_subject(sub: &str) -> Result<(), AuthError> {
    if !is_valid_user_id(sub) {
        return Err(AuthError::BadSubject);
    }
    if UserId::from(sub).is_robot() {
        return Err(AuthError::RobotSubject);
    }
    Ok(())
}

/// Checks and mints tokens with one shared secret.
#[derive(Clone)]
pub struct Authenticator {
    decoding: DecodingKey,
    encoding: EncodingKey,
    validation: Validation,
    /// The longest lifetime a token may have; `None`: no cap.
    max_lifetime: Option<Duration>,
    /// The audience tokens must name; `None`: `aud` is not checked.
    audience: Option<String>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authenticator(..)")
    }
}

impl Authenticator {
    /// An authenticator for HS256 tokens signed with `secret`.
    ///
    /// # Errors
    /// [`AuthError::Invalid`] for an empty secret.
    pub fn new(secret: &[u8]) -> Result<Self, AuthError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        validation.required_spec_claims = ["exp", "sub"].iter().map(|s| (*s).to_owned()).collect();
        // Without a configured audience, a token's `aud` is not checked: any HS256 token
        // with `sub` and `exp` is a client token (PROTOCOL.md section 1).
        validation.validate_aud = false;
        let bad = |e: jsonwebtoken::errors::Error| AuthError::Invalid(format!("secret: {e}"));
        Ok(Self {
            decoding: DecodingKey::from_secret(secret).map_err(bad)?,
            encoding: EncodingKey::from_secret(secret).map_err(bad)?,
            validation,
            max_lifetime: None,
            audience: None,
        })
    }

    /// The longest lifetime a token may have (`exp` minus `iat`, or minus now without `iat`);
    /// `None`: no cap (the default).
    pub fn with_max_lifetime(mut self, max: Option<Duration>) -> Self {
        self.max_lifetime = max;
        self
    }

    /// The audience every token must name in `aud` (and that minted tokens carry); `None`:
    /// `aud` is not checked (the default).
    pub fn with_audience(mut self, audience: Option<String>) -> Self {
        match &audience {
            Some(a) => {
                self.validation.set_audience(&[a]);
                self.validation.validate_aud = true;
                self.validation
                    .required_spec_claims
                    .insert("aud".to_owned());
            }
            None => {
                self.validation.validate_aud = false;
                self.validation.required_spec_claims.remove("aud");
            }
        }
        self.audience = audience;
        self
    }

    /// Checks a token.
    ///
    /// # Errors
    /// [`AuthError::Invalid`] for a bad signature or format, an expired token, one whose `nbf`
    /// or `iat` lies more than a minute ahead, or one whose lifetime is above the cap;
    /// [`AuthError::BadSubject`] for an unusable `sub`; [`AuthError::RobotSubject`] for a
    /// robot's (`bot:…`).
    pub fn verify(&self, token: &str) -> Result<Identity, AuthError> {
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|e| AuthError::Invalid(e.to_string()))?;
        self.check_times(&data.claims, jsonwebtoken::get_current_timestamp())?;
        check_subject(&data.claims.sub)?;
        Ok(Identity {
            profile: shared_profile(data.claims.profile()),
            user: UserId::from(data.claims.sub),
            exp: data.claims.exp,
        })
    }

    /// The time rules the signature check leaves: not valid yet, issued in the future, or
    /// living longer than the cap.
    fn check_times(&self, c: &Claims, now: u64) -> Result<(), AuthError> {
        let ahead = now.saturating_add(CLOCK_LEEWAY_SECS);
        if c.nbf.is_some_and(|nbf| nbf > ahead) {
            return Err(AuthError::Invalid("token not valid yet (nbf)".into()));
        }
        if c.iat.is_some_and(|iat| iat > ahead) {
            return Err(AuthError::Invalid(
                "token issued in the future (iat)".into(),
            ));
        }
        let from = c.iat.unwrap_or(now).min(now);
        if let Some(max) = self.max_lifetime
            && c.exp.saturating_sub(from) > max.as_secs()
        {
            return Err(AuthError::Invalid(format!(
                "token lifetime above {} s",
                max.as_secs()
            )));
        }
        Ok(())
    }

    /// Mints a token for `user` valid for `ttl`.
    ///
    /// # Errors
    /// [`AuthError::BadSubject`] for an unusable user id, [`AuthError::RobotSubject`] for a
    /// robot's, and [`AuthError::Invalid`] for a `ttl` above the lifetime cap (such tokens
    /// would be refused).
    pub fn mint(&self, user: &str, ttl: Duration) -> Result<String, AuthError> {
        check_subject(user)?;
        if let Some(max) = self.max_lifetime
            && ttl > max
        {
            return Err(AuthError::Invalid(format!(
                "ttl above the token lifetime cap of {} s",
                max.as_secs()
            )));
        }
        let now = jsonwebtoken::get_current_timestamp();
        let claims = Claims {
            sub: user.to_owned(),
            exp: now + ttl.as_secs(),
            nbf: None,
            iat: Some(now),
            aud: self.audience.clone(),
            name: None,
            avatar: None,
            region: None,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| AuthError::Invalid(e.to_string()))
    }
}

/// Finds the token in an upgrade request: `Authorization: Bearer <t>` or `?token=<t>`.
pub fn token_from_request<B>(req: &http::Request<B>) -> Option<String> {
    // The scheme is case-insensitive (RFC 9110, section 11.1).
    if let Some(h) = req.headers().get(http::header::AUTHORIZATION)
        && let Some((scheme, t)) = h.to_str().ok().and_then(|v| v.split_once(' '))
        && scheme.eq_ignore_ascii_case("bearer")
    {
        return Some(t.trim().to_owned());
    }
    req.uri().query().and_then(|q| {
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == "token")
            .map(|(_, v)| v.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mint_then_verify_round_trips() {
        let a = Authenticator::new(b"secret").unwrap();
        let t = a.mint("u1", Duration::from_secs(60)).unwrap();
        assert_eq!(a.verify(&t).unwrap().user, UserId::from("u1"));
        let other = Authenticator::new(b"other").unwrap();
        assert!(other.verify(&t).is_err());
        assert!(a.verify("garbage").is_err());
        assert!(a.mint("bad user", Duration::from_secs(1)).is_err());
    }

    #[test]
    fn robot_subjects_are_refused_and_never_minted() {
        let a = Authenticator::new(b"secret").unwrap();
        let claims = Claims {
            sub: "bot:amy".into(),
            exp: jsonwebtoken::get_current_timestamp() + 60,
            nbf: None,
            iat: None,
            ..Claims::default()
        };
        let t = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &a.encoding).unwrap();
        assert!(matches!(a.verify(&t), Err(AuthError::RobotSubject)));
        assert!(matches!(
            a.mint("bot:amy", Duration::from_secs(60)),
            Err(AuthError::RobotSubject)
        ));
        // Only the prefix marks a robot.
        let t = a.mint("robot:amy", Duration::from_secs(60)).unwrap();
        assert_eq!(a.verify(&t).unwrap().user, UserId::from("robot:amy"));
    }

    #[test]
    fn profile_claims_are_read_and_out_of_bounds_ones_ignored() {
        let a = Authenticator::new(b"secret").unwrap();
        let claims = Claims {
            sub: "u1".into(),
            exp: jsonwebtoken::get_current_timestamp() + 60,
            name: Some("Ann".into()),
            avatar: Some("ftp://nope".into()),
            region: Some("eu".into()),
            ..Claims::default()
        };
        let t = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &a.encoding).unwrap();
        let p = a.verify(&t).unwrap().profile;
        assert_eq!(p.name.as_deref(), Some("Ann"));
        assert_eq!(p.avatar, None);
        assert_eq!(p.region.as_deref(), Some("eu"));
    }

    /// Without a configured audience `aud` is not checked (any core token is a client token);
    /// with one, a token must name it, and minted tokens do (PROTOCOL.md section 1).
    #[test]
    fn an_audience_is_checked_only_when_configured() {
        let a = Authenticator::new(b"secret").unwrap();
        let exp = jsonwebtoken::get_current_timestamp() + 60;
        let with_aud = |aud: serde_json::Value| {
            let claims = serde_json::json!({"sub": "u1", "exp": exp, "aud": aud});
            jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &a.encoding).unwrap()
        };
        let plain = a.mint("u1", Duration::from_secs(60)).unwrap();
        assert!(a.verify(&with_aud("other-service".into())).is_ok());
        assert!(a.verify(&plain).is_ok());
        let strict = a.clone().with_audience(Some("chorus".into()));
        assert!(strict.verify(&with_aud("chorus".into())).is_ok());
        assert!(
            strict
                .verify(&with_aud(serde_json::json!(["x", "chorus"])))
                .is_ok()
        );
        assert!(strict.verify(&with_aud("other-service".into())).is_err());
        assert!(strict.verify(&plain).is_err());
        let minted = strict.mint("u1", Duration::from_secs(60)).unwrap();
        assert!(strict.verify(&minted).is_ok());
    }

    /// The scheme of `Authorization` is matched in any case.
    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        let req = |h: &str| {
            http::Request::builder()
                .uri("/ws")
                .header(http::header::AUTHORIZATION, h)
                .body(())
                .unwrap()
        };
        for h in ["Bearer t1", "bearer t1", "BEARER  t1"] {
            assert_eq!(token_from_request(&req(h)).as_deref(), Some("t1"), "{h}");
        }
        assert_eq!(token_from_request(&req("Basic t1")), None);
    }

    #[test]
    fn expired_tokens_are_refused() {
        let a = Authenticator::new(b"secret").unwrap();
        let claims = Claims {
            sub: "u1".into(),
            exp: jsonwebtoken::get_current_timestamp() - 10,
            nbf: None,
            iat: None,
            ..Claims::default()
        };
        let t = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &a.encoding).unwrap();
        assert!(matches!(a.verify(&t), Err(AuthError::Invalid(_))));
    }

    #[test]
    fn tokens_from_the_future_or_living_too_long_are_refused() {
        let a = Authenticator::new(b"secret")
            .unwrap()
            .with_max_lifetime(Some(Duration::from_secs(3600)));
        let now = jsonwebtoken::get_current_timestamp();
        let token = |exp: u64, nbf: Option<u64>, iat: Option<u64>| {
            let claims = Claims {
                sub: "u1".into(),
                exp,
                nbf,
                iat,
                ..Claims::default()
            };
            jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &a.encoding).unwrap()
        };
        let ok = |t: String| a.verify(&t).is_ok();
        // Within the clock leeway, and the usual shapes.
        assert!(ok(token(now + 600, Some(now + 30), Some(now + 30))));
        assert!(ok(token(now + 600, Some(now - 600), Some(now - 600))));
        assert!(ok(token(now + 3600, None, None)));
        // Not valid yet, issued in the future.
        assert!(!ok(token(now + 600, Some(now + 120), None)));
        assert!(!ok(token(now + 600, None, Some(now + 120))));
        // No cap unless one is set: a token good for ten years is a core token.
        let uncapped = Authenticator::new(b"secret").unwrap();
        assert!(
            uncapped
                .verify(&token(now + 10 * 365 * 86_400, None, None))
                .is_ok()
        );
        // A lifetime above the cap, counted from iat or, without it, from now.
        assert!(!ok(token(now + 3600 + 60, None, None)));
        assert!(!ok(token(now + 600, None, Some(now - 3600))));
        assert!(!ok(token(i64::MAX as u64, None, None)));
        // Minting above the cap is refused too: the token would be.
        assert!(a.mint("u1", Duration::from_secs(3601)).is_err());
        assert!(ok(a.mint("u1", Duration::from_secs(3600)).unwrap()));
    }

    #[test]
    fn token_is_found_in_header_or_query() {
        let r = http::Request::builder()
            .uri("/ws?x=1&token=abc")
            .body(())
            .unwrap();
        assert_eq!(token_from_request(&r).as_deref(), Some("abc"));
        let r = http::Request::builder()
            .uri("/ws")
            .header("authorization", "Bearer xyz")
            .body(())
            .unwrap();
        assert_eq!(token_from_request(&r).as_deref(), Some("xyz"));
        let r = http::Request::builder().uri("/ws").body(()).unwrap();
        assert_eq!(token_from_request(&r), None);
    }
}
