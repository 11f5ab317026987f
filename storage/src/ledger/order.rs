//! The gift order: what the room actor decided, its arithmetic (totals, shares, earnings), its
//! validation ([`OrderError`]) and its stored JSON form.

use protocol::{RoomId, UserId};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{Result, StorageError};

/// Basis points in one whole: `share_bp = 10_000` gives the recipients everything.
pub const BASIS_POINTS_PER_WHOLE: u32 = 10_000;

/// A lucky gift's prize, decided by the room (the ledger only pays it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LuckyPrize {
    /// The multiplier shown to the room (display only).
    pub multiplier: u32,
    /// Coins credited to the sender, paid by the house.
    pub coins: i64,
}

/// One gift request, as the room actor decided it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GiftOrder {
    /// The idempotency key: [`gift_id`](super::gift_id)`(sender, req_id)`.
    pub gift_id: Uuid,
    /// The user who pays.
    pub sender: UserId,
    /// The room the gift was sent in (fences every saga transition).
    pub room: RoomId,
    /// The gift's catalogue id (boxed: a saga's future holds the order inline and is kept
    /// under 1,000 bytes, see `shard/src/room/gifts/saga.rs`).
    pub gift: Box<str>,
    /// How many of the gift, per recipient.
    pub count: u32,
    /// Price of one gift in coins.
    pub unit_price: i64,
    /// Who receives it; distinct users, at least one.
    pub recipients: Vec<UserId>,
    /// Recipients' share in basis points (0..=10_000); the house keeps the rest.
    pub share_bp: u32,
    /// The prize, if this was a lucky gift that won.
    pub lucky: Option<LuckyPrize>,
    /// When the room accepted the order (ms since epoch); picks the leaderboard day.
    pub created_ms: i64,
    /// A fingerprint of the client's request as sent (room, gift, count, targets), so that a
    /// request id reused for another gift is told from a retry; 0 on older orders (and
    /// matching anything). Eight bytes: it is compared only between requests of one sender
    /// with one request id.
    pub request: u64,
}

/// Why a gift order cannot be booked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    /// `count` is zero.
    #[error("count must be at least 1")]
    ZeroCount,
    /// `unit_price` is not positive.
    #[error("unit price must be positive")]
    NonPositivePrice,
    /// No recipients.
    #[error("at least one recipient is needed")]
    NoRecipients,
    /// A recipient appears twice.
    #[error("recipients must be distinct")]
    DuplicateRecipient,
    /// `share_bp` is above 10 000.
    #[error("share must be at most 10000 basis points")]
    ShareTooLarge,
    /// A lucky prize is negative.
    #[error("lucky prize must not be negative")]
    NegativePrize,
    /// The total does not fit in an i64.
    #[error("total overflows")]
    Overflow,
}

impl GiftOrder {
    /// `Reused` when the saga stored under this order's gift id was booked for another
    /// request: another room's (the gift id is the sender's request id, which a client may use
    /// in two rooms) or another gift. A retry of the stored request passes. The ledger checks
    /// this before the stored saga's fence, so such a request neither touches the saga nor
    /// looks like a newer owner's write to the room that sent it.
    ///
    /// # Errors
    /// `Reused`, naming the stored order's room.
    pub fn same_request_as(&self, stored: &GiftOrder) -> crate::Result<()> {
        let other_gift = self.request != 0 && stored.request != 0 && self.request != stored.request;
        if self.room != stored.room || other_gift {
            return Err(crate::StorageError::reused(format!(
                "gift {} in room {}",
                stored.gift_id, stored.room
            )));
        }
        Ok(())
    }

    /// Checks the order's numbers. The room actor should call this before booking and answer
    /// `BAD_REQUEST`; the ledger checks again and refuses an invalid order with `Invalid`.
    ///
    /// # Errors
    /// The first rule the order breaks.
    pub fn validate(&self) -> Result<(), OrderError> {
        if self.count == 0 {
            return Err(OrderError::ZeroCount);
        }
        if self.unit_price <= 0 {
            return Err(OrderError::NonPositivePrice);
        }
        if self.recipients.is_empty() {
            return Err(OrderError::NoRecipients);
        }
        if self.share_bp > BASIS_POINTS_PER_WHOLE {
            return Err(OrderError::ShareTooLarge);
        }
        if self.lucky.is_some_and(|l| l.coins < 0) {
            return Err(OrderError::NegativePrize);
        }
        if has_duplicates(&self.recipients) {
            return Err(OrderError::DuplicateRecipient);
        }
        self.checked_total().map(|_| ())
    }

    fn checked_total(&self) -> Result<i64, OrderError> {
        let n = i64::try_from(self.recipients.len()).map_err(|_| OrderError::Overflow)?;
        self.per_recipient_checked()?
            .checked_mul(n)
            .ok_or(OrderError::Overflow)
    }

    fn per_recipient_checked(&self) -> Result<i64, OrderError> {
        self.unit_price
            .checked_mul(i64::from(self.count))
            .ok_or(OrderError::Overflow)
    }

    /// Coins debited from the sender: `unit_price × count × recipients` (0 if invalid).
    pub fn total(&self) -> i64 {
        self.checked_total().unwrap_or(0)
    }

    /// Coins each recipient's gift is worth: `unit_price × count` (their charm).
    pub fn per_recipient(&self) -> i64 {
        self.per_recipient_checked().unwrap_or(0)
    }

    /// Earnings credited to each recipient: `floor(per_recipient × share_bp / 10_000)`.
    pub fn earnings_per_recipient(&self) -> i64 {
        let wide = i128::from(self.per_recipient()) * i128::from(self.share_bp)
            / i128::from(BASIS_POINTS_PER_WHOLE);
        i64::try_from(wide).unwrap_or(0)
    }

    /// The house's revenue from this gift: total minus all recipients' earnings.
    pub fn platform_share(&self) -> i64 {
        let n = i64::try_from(self.recipients.len()).unwrap_or(0);
        self.total() - self.earnings_per_recipient() * n
    }

    /// The lucky prize in coins (0 when none).
    pub fn prize(&self) -> i64 {
        self.lucky.map_or(0, |l| l.coins)
    }

    /// The order as stored in a saga row (JSON; the gift id lives in its own column).
    pub(super) fn to_json(&self) -> Result<String> {
        let stored = StoredOrderRef {
            sender: &self.sender,
            room: &self.room,
            gift: &self.gift,
            count: self.count,
            unit_price: self.unit_price,
            recipients: &self.recipients,
            share_bp: self.share_bp,
            lucky: self.lucky,
            created_ms: self.created_ms,
            request: self.request,
        };
        // Sized for a typical order: one allocation, no regrowth.
        let mut out = Vec::with_capacity(STORED_ORDER_CAPACITY);
        serde_json::to_writer(&mut out, &stored)
            .map_err(|e| StorageError::corrupt("encode gift order", e))?;
        String::from_utf8(out).map_err(|e| StorageError::corrupt("encode gift order", e))
    }

    /// The order back from a saga row.
    pub(super) fn from_json(gift_id: Uuid, json: &str) -> Result<Self> {
        let s: StoredOrder = serde_json::from_str(json)
            .map_err(|e| StorageError::corrupt(format!("gift order {gift_id}"), e))?;
        Ok(Self {
            gift_id,
            sender: s.sender,
            room: s.room,
            gift: s.gift.into_boxed_str(),
            count: s.count,
            unit_price: s.unit_price,
            recipients: s.recipients,
            share_bp: s.share_bp,
            lucky: s.lucky,
            created_ms: s.created_ms,
            request: s.request,
        })
    }

    pub(super) fn checked(&self) -> Result<()> {
        self.validate()
            .map_err(|e| StorageError::invalid(format!("invalid gift order {}", self.gift_id), e))
    }
}

/// Recipients compared pairwise up to this many (no allocation on the gift path; a room
/// allows at most 20), through a hash set above it.
const PAIRWISE_DUPLICATE_CHECK_MAX: usize = 32;

fn has_duplicates(users: &[UserId]) -> bool {
    if users.len() <= PAIRWISE_DUPLICATE_CHECK_MAX {
        return (1..users.len()).any(|i| users[..i].contains(&users[i]));
    }
    let mut seen = std::collections::HashSet::with_capacity(users.len());
    !users.iter().all(|u| seen.insert(u.as_str()))
}

/// Bytes reserved for an order's JSON: an order with a few recipients fits.
const STORED_ORDER_CAPACITY: usize = 256;

/// [`StoredOrder`] borrowed from a [`GiftOrder`], for writing: the same fields in the same
/// order, so the same JSON, without copying the ids first.
#[derive(Serialize)]
struct StoredOrderRef<'a> {
    sender: &'a UserId,
    room: &'a RoomId,
    gift: &'a str,
    count: u32,
    unit_price: i64,
    recipients: &'a [UserId],
    share_bp: u32,
    lucky: Option<LuckyPrize>,
    created_ms: i64,
    #[serde(skip_serializing_if = "is_zero")]
    request: u64,
}

#[derive(Serialize, Deserialize)]
struct StoredOrder {
    sender: UserId,
    room: RoomId,
    gift: String,
    count: u32,
    unit_price: i64,
    recipients: Vec<UserId>,
    share_bp: u32,
    lucky: Option<LuckyPrize>,
    created_ms: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    request: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// An order for tests: `n` recipients `r0..`, from `s` in `room`.
#[cfg(test)]
pub(super) fn sample(unit: i64, count: u32, n: usize, share_bp: u32) -> GiftOrder {
    GiftOrder {
        gift_id: super::gift_id(&UserId::from("s"), "r1"),
        sender: "s".into(),
        room: "room".into(),
        gift: "rose".into(),
        count,
        unit_price: unit,
        recipients: (0..n).map(|i| UserId::from(format!("r{i}"))).collect(),
        share_bp,
        lucky: None,
        created_ms: 0,
        request: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(unit: i64, count: u32, n: usize, share_bp: u32) -> GiftOrder {
        sample(unit, count, n, share_bp)
    }

    #[test]
    fn amounts_split_every_coin() {
        let o = order(7, 3, 3, 3_333);
        assert_eq!(o.total(), 63);
        assert_eq!(o.per_recipient(), 21);
        assert_eq!(o.earnings_per_recipient(), 6); // floor(21 * 0.3333)
        assert_eq!(o.platform_share(), 63 - 18);
        assert!(o.validate().is_ok());
    }

    #[test]
    fn validation_rejects_bad_orders() {
        assert_eq!(order(1, 0, 1, 0).validate(), Err(OrderError::ZeroCount));
        assert_eq!(
            order(0, 1, 1, 0).validate(),
            Err(OrderError::NonPositivePrice)
        );
        assert_eq!(order(1, 1, 0, 0).validate(), Err(OrderError::NoRecipients));
        assert_eq!(
            order(1, 1, 1, 10_001).validate(),
            Err(OrderError::ShareTooLarge)
        );
        assert_eq!(
            order(i64::MAX, 2, 1, 0).validate(),
            Err(OrderError::Overflow)
        );
        let mut o = order(1, 1, 2, 0);
        o.recipients[1] = o.recipients[0].clone();
        assert_eq!(o.validate(), Err(OrderError::DuplicateRecipient));
        // Both ways of looking: pairwise for few recipients, a set for many.
        for n in [3, PAIRWISE_DUPLICATE_CHECK_MAX + 5] {
            let mut o = order(1, 1, n, 0);
            assert!(o.validate().is_ok());
            o.recipients[n - 1] = o.recipients[1].clone();
            assert_eq!(o.validate(), Err(OrderError::DuplicateRecipient));
        }
    }

    #[test]
    fn order_json_round_trips() {
        let mut o = order(5, 2, 2, 5_000);
        o.lucky = Some(LuckyPrize {
            multiplier: 10,
            coins: 100,
        });
        let json = o.to_json().unwrap();
        assert_eq!(GiftOrder::from_json(o.gift_id, &json).unwrap(), o);
        // The borrowed writer's bytes are the owned form's: rows written before read the same.
        let owned = StoredOrder {
            sender: o.sender.clone(),
            room: o.room.clone(),
            gift: o.gift.to_string(),
            count: o.count,
            unit_price: o.unit_price,
            recipients: o.recipients.clone(),
            share_bp: o.share_bp,
            lucky: o.lucky,
            created_ms: o.created_ms,
            request: o.request,
        };
        assert_eq!(json, serde_json::to_string(&owned).unwrap());
    }
}
