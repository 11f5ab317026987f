//! Guards: a user buys a guard of a host for a plan's duration, paid from their coins once per
//! request id. The price is split like a gift's: the host earns `host_share` into their
//! earnings, the platform keeps the rest (counted in the audit's `platform_revenue`). Buying
//! again extends the guard from the later of now and its current expiry. A guard's expiry is
//! enforced by time: reads take `now` and leave out guards that have ended.

use protocol::UserId;
use uuid::Uuid;

use super::MovementKind;
use super::movement::{NewMovement, single};
use crate::{Result, StorageError};

/// UUIDv5 namespace of guard purchase ids: `v5(ns, buyer ‖ 0x00 ‖ req_id)`. Fixed forever:
/// changing it would let a retried purchase be paid twice.
pub const GUARD_ID_NAMESPACE: Uuid = Uuid::from_u128(0x9d2e_6b71_04c3_4f8a_b5e2_71c0_3a9f_d614);

/// Longest request id of a purchase, in bytes.
pub const MAX_GUARD_REQ_ID_BYTES: usize = 64;

/// The id of a buyer's guard purchase request.
pub fn guard_id(buyer: &UserId, req_id: &str) -> Uuid {
    let mut name = Vec::with_capacity(buyer.as_str().len() + 1 + req_id.len());
    name.extend_from_slice(buyer.as_str().as_bytes());
    name.push(0);
    name.extend_from_slice(req_id.as_bytes());
    Uuid::new_v5(&GUARD_ID_NAMESPACE, &name)
}

/// A guard purchase to book.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardOrder {
    /// Who pays.
    pub buyer: UserId,
    /// Whose guard they become.
    pub host: UserId,
    /// The plan's name (recorded; a retry naming another plan is a reused key).
    pub plan: String,
    /// How long the purchase adds (ms, positive).
    pub duration_ms: i64,
    /// Coins debited (positive).
    pub price: i64,
    /// What the host earns of the price (`0..=price`); the platform keeps the rest.
    pub host_share: i64,
    /// The buyer's request id (idempotency key).
    pub req_id: String,
}

impl GuardOrder {
    /// Its id ([`guard_id`]).
    pub fn id(&self) -> Uuid {
        guard_id(&self.buyer, &self.req_id)
    }

    /// What the platform keeps.
    pub fn platform_share(&self) -> i64 {
        self.price - self.host_share
    }

    /// Checks the order's shape.
    ///
    /// # Errors
    /// `Invalid` for a guard of oneself, a non-positive price or duration, a host share
    /// outside `0..=price`, or a request id that is empty or too long.
    pub fn checked(&self) -> Result<()> {
        if self.buyer == self.host {
            return Err(StorageError::invalid_msg("a guard of oneself"));
        }
        if self.price <= 0 || self.duration_ms <= 0 {
            return Err(StorageError::invalid_msg(
                "a guard needs a positive price and duration",
            ));
        }
        if !(0..=self.price).contains(&self.host_share) {
            return Err(StorageError::invalid_msg(
                "a guard's host share must be within its price",
            ));
        }
        if self.req_id.is_empty() || self.req_id.len() > MAX_GUARD_REQ_ID_BYTES {
            return Err(StorageError::invalid_msg(
                "a guard's req_id must be 1..=64 bytes",
            ));
        }
        Ok(())
    }
}

/// What a guard purchase did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardOutcome {
    /// Booked, now (`applied`) or by an earlier call with the same request id.
    Bought {
        /// When the guard ends now (ms since the Unix epoch).
        expires_ms: i64,
        /// The buyer's coins now.
        balance: i64,
        /// False for a repeat (nothing moved this time).
        applied: bool,
    },
    /// The buyer's coins do not cover the price; nothing moved.
    InsufficientFunds {
        /// The buyer's coins.
        balance: i64,
    },
    /// The buyer owes a debt (a refunded top-up they had spent); nothing moved.
    InDebt {
        /// The debt.
        debt: i64,
    },
    /// The request id was used for another purchase (host, plan or price); nothing moved.
    KeyReused,
}

/// One guard in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guard {
    /// The guard (who bought it).
    pub buyer: UserId,
    /// The host guarded.
    pub host: UserId,
    /// When it ends (ms since the Unix epoch).
    pub expires_ms: i64,
}

/// Most guards a listing returns (a host's or a buyer's).
pub const MAX_GUARDS_LISTED: usize = 500;

/// The expiry after a purchase of `duration_ms` at `now_ms` on a guard ending at `current`
/// (none, or in the past: from now; in the future: from then).
pub(super) fn extended(current: Option<i64>, now_ms: i64, duration_ms: i64) -> i64 {
    current
        .unwrap_or(i64::MIN)
        .max(now_ms)
        .saturating_add(duration_ms)
}

/// The expiry of a guard from its purchases `(at_ms, duration_ms)`, folded in time order with
/// [`extended`] (the engines that keep purchases rather than a running expiry: Scylla).
pub(super) fn folded(purchases: &mut [(i64, i64)]) -> Option<i64> {
    purchases.sort_unstable();
    purchases
        .iter()
        .fold(None, |e, &(at, d)| Some(extended(e, at, d)))
}

/// A purchase's statement lines, under its request id: the buyer's (`balance`: their coins
/// after it) and, when the host earns a share, the host's.
pub(super) fn lines(o: &GuardOrder, balance: i64, at_ms: i64) -> Vec<NewMovement> {
    let mut out = vec![single(
        &o.buyer,
        MovementKind::Guard,
        -o.price,
        Some(balance),
        Some(o.host.as_str()),
        &o.req_id,
        at_ms,
    )];
    if o.host_share > 0 {
        out.push(single(
            &o.host,
            MovementKind::GuardIncome,
            o.host_share,
            None,
            Some(o.buyer.as_str()),
            &o.req_id,
            at_ms,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_purchase_extends_from_the_later_of_now_and_the_expiry() {
        assert_eq!(extended(None, 1_000, 500), 1_500);
        assert_eq!(extended(Some(900), 1_000, 500), 1_500, "expired: from now");
        assert_eq!(
            extended(Some(1_200), 1_000, 500),
            1_700,
            "running: from its end"
        );
        assert_eq!(extended(Some(i64::MAX - 1), 0, 10), i64::MAX);
    }

    #[test]
    fn purchases_fold_in_time_order() {
        assert_eq!(folded(&mut []), None);
        // Bought at 0 for 100, at 50 for 100 (→ 200), at 500 for 10 (expired: 510).
        assert_eq!(folded(&mut [(500, 10), (0, 100), (50, 100)]), Some(510));
        assert_eq!(folded(&mut [(0, 100), (50, 100)]), Some(200));
    }

    #[test]
    fn bad_orders_are_refused() {
        let ok = GuardOrder {
            buyer: UserId::new("a"),
            host: UserId::new("h"),
            plan: "week".into(),
            duration_ms: 1,
            price: 10,
            host_share: 5,
            req_id: "r".into(),
        };
        assert!(ok.checked().is_ok());
        let mut o = ok.clone();
        o.host = o.buyer.clone();
        assert!(o.checked().is_err());
        let mut o = ok.clone();
        o.price = 0;
        assert!(o.checked().is_err());
        let mut o = ok.clone();
        o.host_share = 11;
        assert!(o.checked().is_err());
        let mut o = ok;
        o.req_id = "x".repeat(65);
        assert!(o.checked().is_err());
    }
}
