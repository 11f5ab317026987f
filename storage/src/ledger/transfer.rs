//! Coin transfers from sellers: operators mark users as coin sellers, and a seller moves coins
//! to a user in one booking (both sides and both statement lines), idempotent by the seller's
//! request id, within a daily limit.

use protocol::UserId;
use uuid::Uuid;

use crate::{Result, StorageError};

/// UUIDv5 namespace of transfer ids: `v5(ns, seller ‖ 0x00 ‖ req_id)`. Fixed forever: changing
/// it would let a retried transfer move coins twice.
pub const TRANSFER_ID_NAMESPACE: Uuid = Uuid::from_u128(0x3f7a_1c2e_9b40_4d51_8e6f_2a9c_0d13_77b4);

/// The id of a seller's transfer request.
pub fn transfer_id(from: &UserId, req_id: &str) -> Uuid {
    let mut name = Vec::with_capacity(from.as_str().len() + 1 + req_id.len());
    name.extend_from_slice(from.as_str().as_bytes());
    name.push(0);
    name.extend_from_slice(req_id.as_bytes());
    Uuid::new_v5(&TRANSFER_ID_NAMESPACE, &name)
}

/// A transfer to book.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferOrder {
    /// The seller.
    pub from: UserId,
    /// The receiver.
    pub to: UserId,
    /// Coins moved (positive).
    pub amount: i64,
    /// The seller's request id (idempotency key).
    pub req_id: String,
    /// Most coins the seller may transfer per UTC day (this one included).
    pub daily_limit: i64,
    /// The UTC day the transfer counts against.
    pub day: i64,
}

impl TransferOrder {
    /// Its id ([`transfer_id`]).
    pub fn id(&self) -> Uuid {
        transfer_id(&self.from, &self.req_id)
    }

    /// Checks the order's shape.
    ///
    /// # Errors
    /// `Invalid` for a non-positive amount or a transfer to oneself.
    pub fn checked(&self) -> Result<()> {
        if self.amount <= 0 {
            return Err(StorageError::invalid_msg(
                "transfer amount must be positive",
            ));
        }
        if self.from == self.to {
            return Err(StorageError::invalid_msg("a transfer to oneself"));
        }
        Ok(())
    }
}

/// What a transfer did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferOutcome {
    /// Booked, now (`applied`) or by an earlier attempt with the same request id.
    Done {
        /// The seller's coins right after the transfer.
        balance: i64,
        /// False for a retry (nothing moved this time).
        applied: bool,
    },
    /// The sender is not a coin seller; nothing moved.
    NotSeller,
    /// The seller's coins do not cover it; nothing moved.
    InsufficientFunds {
        /// The seller's coins.
        balance: i64,
    },
    /// It would take the seller's transfers of the day past the daily limit; nothing moved.
    DailyLimit {
        /// Coins the seller may still transfer today.
        remaining: i64,
    },
    /// The request id was used for another transfer (receiver or amount); nothing moved.
    KeyReused,
}
