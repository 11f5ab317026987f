//! Top-ups from a payment provider: a paid product credits coins once per payment id, and a
//! refund takes them back; coins already spent become a debt.
//!
//! # Debt
//! A refund takes the payment's coins from the user's coins; what the coins no longer cover
//! (the user spent them) is recorded as the user's debt, never as a negative balance. The
//! next top-ups cover it before anything reaches the coins; coins from elsewhere (grants,
//! transfers, rewards) reach the coins but cannot be spent on gifts or guards while the debt
//! stands (a gift is refused as if the balance were 0). Conservation counts it: `coins + earnings + platform_revenue - lucky_paid
//! == granted + topped_up - refunded + debt`.

use protocol::UserId;

/// A provider's "payment succeeded" notification, its product priced in coins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payment {
    /// The provider's payment id: the idempotency key.
    pub id: String,
    /// Who paid.
    pub user: UserId,
    /// The product bought.
    pub product: String,
    /// Coins the product is worth (from the price list).
    pub coins: i64,
}

/// What a top-up did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopUpOutcome {
    /// Credited, now (`applied`) or by an earlier notification of the same payment.
    Credited {
        /// The user's coins after the top-up (today's, for a repeat).
        balance: i64,
        /// False for a repeat: nothing was credited this time.
        applied: bool,
        /// Coins of this top-up that covered a debt instead of reaching the coins.
        debt_paid: i64,
    },
    /// The payment id is booked for another user or another number of coins: nothing moved.
    KeyReused,
}

/// What a refund did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefundOutcome {
    /// Refunded, now (`applied`) or by an earlier notification.
    Refunded {
        /// The user's coins after the refund (today's, for a repeat).
        balance: i64,
        /// The user's debt after it (today's, for a repeat).
        debt: i64,
        /// False for a repeat.
        applied: bool,
    },
    /// No top-up with this payment id is booked.
    Unknown,
}

/// UUIDv5 namespace of payment entry ids (Scylla's wallet keys): `v5(ns, "topup:" ‖ id)` and
/// `v5(ns, "refund:" ‖ id)`. Fixed forever.
pub const PAYMENT_ID_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0x9d2e_44a1_0c6b_4f3e_a1d8_57c0_e2b9_1f65);

/// The wallet key of a payment's top-up (`refund: false`) or refund.
pub fn payment_entry_id(id: &str, refund: bool) -> uuid::Uuid {
    let tag = if refund { "refund:" } else { "topup:" };
    uuid::Uuid::new_v5(&PAYMENT_ID_NAMESPACE, format!("{tag}{id}").as_bytes())
}
