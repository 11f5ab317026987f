//! Host settlements: an operator settles part of a host's gift earnings for payout outside
//! Chorus. The settled earnings leave the host's earnings for a settlement record (with the
//! payout at the exchange rate of the day), once per settlement id, and only if the earnings
//! cover them.

use protocol::UserId;
use uuid::Uuid;

/// UUIDv5 namespace of settlement keys (Scylla's earnings rows): `v5(ns, settlement id)`.
pub const SETTLEMENT_ID_NAMESPACE: Uuid =
    Uuid::from_u128(0x51c0_7e3a_2d84_4b19_9f06_c3e1_a7d2_48b0);

/// The earnings-row key of a settlement.
pub fn settlement_key(id: &str) -> Uuid {
    Uuid::new_v5(&SETTLEMENT_ID_NAMESPACE, id.as_bytes())
}

/// A settlement to book.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettlementOrder {
    /// The operator's settlement id: the idempotency key.
    pub id: String,
    /// The host.
    pub user: UserId,
    /// Earnings settled (positive).
    pub amount: i64,
    /// What is paid out for them, in the payout's minor units (at the configured rate).
    pub payout: i64,
    /// The period it covers, as the operator names it (e.g. `2026-11`).
    pub period: String,
}

/// What a settlement did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettlementOutcome {
    /// Booked now (`applied`) or by an earlier call with the same id.
    Settled {
        /// The host's earnings afterwards (today's, for a repeat).
        earnings: i64,
        /// The payout recorded.
        payout: i64,
        /// False for a repeat.
        applied: bool,
    },
    /// The host's earnings do not cover it; nothing moved.
    InsufficientEarnings {
        /// The host's earnings.
        earnings: i64,
    },
    /// The id is booked for another host or amount; nothing moved.
    KeyReused,
}
