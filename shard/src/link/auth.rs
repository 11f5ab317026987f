//! Who may open a link: a gateway proves on its hello that it knows the cluster's secret
//! (`CHORUS_CLUSTER_SECRET`), so that a process that can merely reach a shard's link port cannot
//! act as a gateway, and so as any user. The proof is an HMAC-SHA256 over the link version, the
//! gateway's id and the time it was made; a shard accepts it within [`HELLO_WINDOW`] of its own
//! clock, and once: a hello seen again (replayed) is refused. The link itself is not encrypted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use protocol::NodeId;
use protocol::link::{LinkAuth, LinkHello};
use sha2::Sha256;

/// How far a hello's time may be from the shard's clock, either way (clock skew between
/// machines, and a connect that took a while).
pub const HELLO_WINDOW: Duration = Duration::from_secs(300);
/// Shortest cluster secret accepted (bytes).
pub const MIN_SECRET_BYTES: usize = 16;

/// The secret every gateway proves on its links. Its `Debug` never shows it.
#[derive(Clone)]
pub struct LinkSecret(Arc<[u8]>);

impl std::fmt::Debug for LinkSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkSecret(..)")
    }
}

impl LinkSecret {
    /// The secret `bytes`.
    ///
    /// # Errors
    /// When shorter than [`MIN_SECRET_BYTES`].
    pub fn new(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "the cluster secret must be at least {MIN_SECRET_BYTES} bytes"
            ));
        }
        Ok(Self(bytes.into()))
    }

    /// The MAC of a hello of version `v` from `gateway` made at `at` (ms since the epoch).
    /// (HMAC takes a key of any length: it is always there.)
    fn mac(&self, v: u16, gateway: &NodeId, at: u64) -> Option<Hmac<Sha256>> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).ok()?;
        mac.update(format!("chorus-link\n{v}\n{gateway}\n{at}").as_bytes());
        Some(mac)
    }
}

/// The hello a gateway sends: with its proof when it has a secret.
pub fn hello(v: u16, gateway: &NodeId, secret: Option<&LinkSecret>) -> LinkHello {
    let auth = secret.and_then(|s| {
        let at = now_ms();
        let mac = s.mac(v, gateway, at)?;
        Some(LinkAuth {
            at,
            mac: hex::encode(mac.finalize().into_bytes()),
        })
    });
    LinkHello {
        v,
        gateway: gateway.clone(),
        auth,
    }
}

/// Why a hello was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// It carries no proof, and this shard has a secret.
    Missing,
    /// The MAC is not the secret's.
    Bad,
    /// Made further than [`HELLO_WINDOW`] from now.
    Stale,
    /// This very proof was accepted before.
    Replayed,
}

impl Refusal {
    /// A short name, for logs and the metric's label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Bad => "bad",
            Self::Stale => "stale",
            Self::Replayed => "replayed",
        }
    }
}

/// A shard's check of hellos: the secret, and the proofs accepted within the window.
#[derive(Debug, Default)]
pub struct HelloCheck {
    secret: Option<LinkSecret>,
    seen: Mutex<HashMap<Vec<u8>, u64>>,
}

impl HelloCheck {
    /// Checks hellos against `secret`; `None` accepts every hello (no cluster secret set).
    pub fn new(secret: Option<LinkSecret>) -> Self {
        Self {
            secret,
            seen: Mutex::default(),
        }
    }

    /// Whether hellos are checked at all.
    pub fn is_on(&self) -> bool {
        self.secret.is_some()
    }

    /// Accepts `hello` at `now` (ms since the epoch), or says why not.
    ///
    /// # Errors
    /// The [`Refusal`].
    pub fn check(&self, hello: &LinkHello, now: u64) -> Result<(), Refusal> {
        let Some(secret) = &self.secret else {
            return Ok(());
        };
        let auth = hello.auth.as_ref().ok_or(Refusal::Missing)?;
        let given = hex::decode(&auth.mac).map_err(|_| Refusal::Bad)?;
        secret
            .mac(hello.v, &hello.gateway, auth.at)
            .ok_or(Refusal::Bad)?
            .verify_slice(&given)
            .map_err(|_| Refusal::Bad)?;
        let window = u64::try_from(HELLO_WINDOW.as_millis()).unwrap_or(u64::MAX);
        if auth.at.abs_diff(now) > window {
            return Err(Refusal::Stale);
        }
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        // Proofs older than the window are refused as stale anyway: forget them.
        seen.retain(|_, at| at.abs_diff(now) <= window);
        // Keyed by the MAC's bytes, not its text: hex has two cases, and a replay of a seen
        // proof spelled in the other case is the same proof.
        if seen.insert(given, auth.at).is_some() {
            return Err(Refusal::Replayed);
        }
        Ok(())
    }
}

/// Now, in ms since the Unix epoch (0 before it).
pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test code: a failed unwrap is a failed test"
    )]

    use super::*;

    fn secret(s: &str) -> LinkSecret {
        LinkSecret::new(s.as_bytes()).unwrap()
    }

    /// A hello made with the secret is accepted once; one without a proof, with another
    /// secret's, for another gateway or version, or made outside the window, is refused.
    #[test]
    fn a_hello_is_accepted_with_the_secrets_proof_once_and_within_the_window() {
        let check = HelloCheck::new(Some(secret("cluster-secret-0123")));
        let g1 = NodeId::from("g1");
        let now = now_ms();
        let good = hello(5, &g1, Some(&secret("cluster-secret-0123")));
        assert_eq!(check.check(&good, now), Ok(()));
        assert_eq!(check.check(&good, now), Err(Refusal::Replayed));
        // The same proof in capitals is the same proof.
        let mut shouted = good.clone();
        if let Some(a) = shouted.auth.as_mut() {
            a.mac = a.mac.to_uppercase();
        }
        assert_ne!(shouted, good);
        assert_eq!(check.check(&shouted, now), Err(Refusal::Replayed));
        assert_eq!(
            check.check(&hello(5, &g1, None), now),
            Err(Refusal::Missing)
        );
        let foreign = hello(5, &g1, Some(&secret("another-secret-4567")));
        assert_eq!(check.check(&foreign, now), Err(Refusal::Bad));
        // The proof covers the gateway's id and the version.
        let mut renamed = hello(5, &g1, Some(&secret("cluster-secret-0123")));
        renamed.gateway = NodeId::from("g2");
        assert_eq!(check.check(&renamed, now), Err(Refusal::Bad));
        let mut other_version = hello(5, &g1, Some(&secret("cluster-secret-0123")));
        other_version.v = 4;
        assert_eq!(check.check(&other_version, now), Err(Refusal::Bad));
        let window = HELLO_WINDOW.as_millis() as u64;
        let late = hello(5, &g1, Some(&secret("cluster-secret-0123")));
        assert_eq!(
            check.check(&late, now + window + 60_000),
            Err(Refusal::Stale)
        );
        let early = hello(5, &g1, Some(&secret("cluster-secret-0123")));
        assert_eq!(
            check.check(&early, now.saturating_sub(window + 60_000)),
            Err(Refusal::Stale)
        );
        let garbage = LinkHello {
            auth: Some(LinkAuth {
                at: now,
                mac: "not hex".into(),
            }),
            ..hello(5, &g1, None)
        };
        assert_eq!(check.check(&garbage, now), Err(Refusal::Bad));
    }

    /// Without a secret every hello is accepted (a node started without one, in tests and
    /// in process).
    #[test]
    fn without_a_secret_every_hello_is_accepted() {
        let check = HelloCheck::new(None);
        assert!(!check.is_on());
        assert_eq!(
            check.check(&hello(5, &NodeId::from("g1"), None), now_ms()),
            Ok(())
        );
    }

    #[test]
    fn a_short_secret_is_refused_and_never_shown() {
        assert!(LinkSecret::new(b"short").is_err());
        let s = secret("cluster-secret-0123");
        assert_eq!(format!("{s:?}"), "LinkSecret(..)");
    }
}
