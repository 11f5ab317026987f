//! HS256 JWT tokens: checked at the upgrade (header or `?token=`), minted by `chorus token`.

use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use protocol::UserId;
use protocol::ids::is_valid_id;
use serde::{Deserialize, Serialize};

/// The claims Chorus reads: `sub` is the user id, `exp` the expiry (seconds since the epoch).
#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    exp: u64,
}

/// An authenticated user and when its token expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The user.
    pub user: UserId,
    /// Token expiry, seconds since the Unix epoch.
    pub exp: u64,
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
}

/// Checks and mints tokens with one shared secret.
#[derive(Clone)]
pub struct Authenticator {
    decoding: DecodingKey,
    encoding: EncodingKey,
    validation: Validation,
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
        let bad = |e: jsonwebtoken::errors::Error| AuthError::Invalid(format!("secret: {e}"));
        Ok(Self {
            decoding: DecodingKey::from_secret(secret).map_err(bad)?,
            encoding: EncodingKey::from_secret(secret).map_err(bad)?,
            validation,
        })
    }

    /// Checks a token.
    ///
    /// # Errors
    /// [`AuthError::Invalid`] for a bad signature, format or an expired token;
    /// [`AuthError::BadSubject`] for an unusable `sub`.
    pub fn verify(&self, token: &str) -> Result<Identity, AuthError> {
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|e| AuthError::Invalid(e.to_string()))?;
        if !is_valid_id(&data.claims.sub) {
            return Err(AuthError::BadSubject);
        }
        Ok(Identity {
            user: UserId::from(data.claims.sub),
            exp: data.claims.exp,
        })
    }

    /// Mints a token for `user` valid for `ttl`.
    ///
    /// # Errors
    /// [`AuthError::BadSubject`] for an unusable user id.
    pub fn mint(&self, user: &str, ttl: Duration) -> Result<String, AuthError> {
        if !is_valid_id(user) {
            return Err(AuthError::BadSubject);
        }
        let claims = Claims {
            sub: user.to_owned(),
            exp: jsonwebtoken::get_current_timestamp() + ttl.as_secs(),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| AuthError::Invalid(e.to_string()))
    }
}

/// Finds the token in an upgrade request: `Authorization: Bearer <t>` or `?token=<t>`.
pub fn token_from_request<B>(req: &http::Request<B>) -> Option<String> {
    if let Some(h) = req.headers().get(http::header::AUTHORIZATION)
        && let Some(t) = h.to_str().ok().and_then(|v| v.strip_prefix("Bearer "))
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
    fn expired_tokens_are_refused() {
        let a = Authenticator::new(b"secret").unwrap();
        let claims = Claims {
            sub: "u1".into(),
            exp: jsonwebtoken::get_current_timestamp() - 10,
        };
        let t = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &a.encoding).unwrap();
        assert!(matches!(a.verify(&t), Err(AuthError::Invalid(_))));
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
