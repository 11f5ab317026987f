//! The gift catalog and lucky-gift outcomes.
//!
//! A lucky order's outcome is derived from a server secret and the order id alone
//! (HMAC-SHA256), so it can be audited afterwards: anyone holding the secret recomputes the
//! draw for an order id and gets the same multiplier.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Draws are made in parts per million.
pub const PPM: u32 = 1_000_000;
/// Default recipients' share of a gift's price, in basis points: 50 % to the recipients,
/// 50 % to the platform.
pub const DEFAULT_SHARE_BP: u32 = 5_000;
/// Wins at or above this multiplier raise a `gift.lucky` room event.
pub const DEFAULT_BIG_WIN_MULTIPLIER: u32 = 10;
/// Highest return-to-player accepted at start-up: above it the house loses money on average.
pub const MAX_RTP: f64 = 0.98;

/// How a gift behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GiftKind {
    /// Plain gift.
    Normal,
    /// Each order draws a prize from the lucky table.
    Lucky,
}

/// One catalog entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GiftDef {
    /// Stable id used in `gift.send`.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Price of one gift in coins.
    pub price: i64,
    /// Normal or lucky.
    pub kind: GiftKind,
    /// Client animation tier (0 = none).
    pub effect_level: u32,
}

/// One row of the lucky prize table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prize {
    /// Coins won = price paid × multiplier.
    pub multiplier: u32,
    /// Probability in parts per million.
    pub ppm: u32,
}

/// The catalog, the revenue split and the lucky table.
#[derive(Debug, Clone, PartialEq)]
pub struct Catalog {
    /// Gifts by id.
    pub gifts: Vec<GiftDef>,
    /// Recipients' share in basis points.
    pub share_bp: u32,
    /// Lucky prize table.
    pub prizes: Vec<Prize>,
    /// Secret of the lucky draws.
    pub lucky_secret: Vec<u8>,
    /// Wins at or above this multiplier raise a room event.
    pub big_win_multiplier: u32,
}

/// Why a catalog is refused at start-up.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CatalogError {
    /// Something is malformed.
    #[error("invalid gift catalog: {0}")]
    Invalid(String),
    /// The lucky table pays out too much.
    #[error("lucky table return-to-player {rtp:.4} is above {max}")]
    RtpTooHigh {
        /// The computed return-to-player.
        rtp: f64,
        /// The limit.
        max: f64,
    },
}

impl Catalog {
    /// The default catalog: `rose` (10), `heart` (50), `rocket` (1000) and the lucky `clover`
    /// (20), with a lucky table of 85 % return-to-player.
    pub fn default_with_secret(lucky_secret: Vec<u8>) -> Self {
        let g = |id: &str, name: &str, price, kind, effect_level| GiftDef {
            id: id.into(),
            name: name.into(),
            price,
            kind,
            effect_level,
        };
        Self {
            gifts: vec![
                g("rose", "Rose", 10, GiftKind::Normal, 0),
                g("heart", "Heart", 50, GiftKind::Normal, 1),
                g("rocket", "Rocket", 1000, GiftKind::Normal, 3),
                g("clover", "Lucky Clover", 20, GiftKind::Lucky, 1),
            ],
            share_bp: DEFAULT_SHARE_BP,
            prizes: vec![
                Prize {
                    multiplier: 1,
                    ppm: 250_000,
                },
                Prize {
                    multiplier: 2,
                    ppm: 100_000,
                },
                Prize {
                    multiplier: 5,
                    ppm: 30_000,
                },
                Prize {
                    multiplier: 10,
                    ppm: 10_000,
                },
                Prize {
                    multiplier: 50,
                    ppm: 2_000,
                },
                Prize {
                    multiplier: 500,
                    ppm: 100,
                },
            ],
            lucky_secret,
            big_win_multiplier: DEFAULT_BIG_WIN_MULTIPLIER,
        }
    }

    /// Expected coins returned per coin spent on lucky gifts.
    pub fn rtp(&self) -> f64 {
        self.prizes
            .iter()
            .map(|p| f64::from(p.multiplier) * f64::from(p.ppm) / f64::from(PPM))
            .sum()
    }

    /// Checks the catalog: ids unique, prices positive, share within 0..=100 %, the lucky
    /// table's probabilities at most 100 % and its return-to-player at most [`MAX_RTP`].
    ///
    /// # Errors
    /// [`CatalogError`] naming the first problem.
    pub fn validate(&self) -> Result<(), CatalogError> {
        let bad = |m: String| Err(CatalogError::Invalid(m));
        let mut ids = std::collections::HashSet::new();
        for g in &self.gifts {
            if !ids.insert(g.id.as_str()) {
                return bad(format!("duplicate gift id {}", g.id));
            }
            if g.price <= 0 {
                return bad(format!("gift {} has a non-positive price", g.id));
            }
        }
        if self.share_bp > 10_000 {
            return bad("share_bp above 10000".into());
        }
        let total: u64 = self.prizes.iter().map(|p| u64::from(p.ppm)).sum();
        if total > u64::from(PPM) {
            return bad(format!("lucky probabilities add up to {total} ppm"));
        }
        let has_lucky = self.gifts.iter().any(|g| g.kind == GiftKind::Lucky);
        if has_lucky && self.lucky_secret.is_empty() {
            return bad("lucky gifts need a lucky secret".into());
        }
        let rtp = self.rtp();
        if rtp > MAX_RTP {
            return Err(CatalogError::RtpTooHigh { rtp, max: MAX_RTP });
        }
        Ok(())
    }

    /// The gift with id `id`.
    pub fn get(&self, id: &str) -> Option<&GiftDef> {
        self.gifts.iter().find(|g| g.id == id)
    }

    /// The draw of an order: a number in `0..PPM` derived from the secret and the order id.
    pub fn draw(&self, order_id: &[u8]) -> u32 {
        // HMAC accepts keys of any length; an empty key still yields a valid MAC.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.lucky_secret) else {
            return PPM;
        };
        mac.update(order_id);
        let out = mac.finalize().into_bytes();
        let mut first = [0u8; 8];
        first.copy_from_slice(&out[..8]);
        (u64::from_be_bytes(first) % u64::from(PPM)) as u32
    }

    /// The multiplier an order wins (0 for none).
    pub fn lucky_multiplier(&self, order_id: &[u8]) -> u32 {
        let mut at = self.draw(order_id);
        for p in &self.prizes {
            if at < p.ppm {
                return p.multiplier;
            }
            at -= p.ppm;
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_catalog_is_valid_with_85_percent_rtp() {
        let c = Catalog::default_with_secret(b"s".to_vec());
        c.validate().unwrap();
        assert!((c.rtp() - 0.85).abs() < 1e-9);
        assert_eq!(c.get("rose").unwrap().price, 10);
        assert!(c.gifts.iter().any(|g| g.kind == GiftKind::Lucky));
    }

    #[test]
    fn generous_tables_and_bad_entries_are_refused() {
        let mut c = Catalog::default_with_secret(b"s".to_vec());
        c.prizes.push(Prize {
            multiplier: 100,
            ppm: 10_000,
        });
        assert!(matches!(c.validate(), Err(CatalogError::RtpTooHigh { .. })));
        let mut c = Catalog::default_with_secret(b"s".to_vec());
        c.gifts[1].id = "rose".into();
        assert!(c.validate().is_err());
        let mut c = Catalog::default_with_secret(Vec::new());
        assert!(c.validate().is_err(), "lucky without a secret");
        c.lucky_secret = b"x".to_vec();
        c.share_bp = 10_001;
        assert!(c.validate().is_err());
    }

    #[test]
    fn draws_are_deterministic_auditable_and_match_the_table() {
        let c = Catalog::default_with_secret(b"audit-secret".to_vec());
        let id = b"order-123";
        assert_eq!(c.lucky_multiplier(id), c.lucky_multiplier(id));
        let other = Catalog::default_with_secret(b"other".to_vec());
        let n = 200_000u32;
        let (mut paid, mut won, mut differ) = (0f64, 0f64, 0);
        for i in 0..n {
            let id = i.to_be_bytes();
            let m = c.lucky_multiplier(&id);
            if m != other.lucky_multiplier(&id) {
                differ += 1;
            }
            paid += 1.0;
            won += f64::from(m);
        }
        let rtp = won / paid;
        assert!((rtp - 0.85).abs() < 0.05, "empirical rtp {rtp}");
        assert!(differ > 1000, "the secret matters");
    }
}
