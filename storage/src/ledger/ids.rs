//! Gift and wallet-entry ids: pure functions of a request's `(sender, req_id)` or of a key, so
//! that a retry finds what its first attempt wrote.

use protocol::UserId;
use uuid::Uuid;

/// UUIDv5 namespace of gift ids: `v5(ns, sender ‖ 0x00 ‖ req_id)`, all of a gift id or (for a
/// UUIDv7 `req_id`) its last 80 bits ([`gift_id`]). Fixed forever: changing it would let a
/// client retry debit twice.
pub const GIFT_ID_NAMESPACE: Uuid = Uuid::from_u128(0x6c1e_0d55_8f0b_4c2e_9a57_3b7e_1f00_91a1);
/// UUIDv5 namespace of top-up entry ids: `v5(ns, key)`.
pub const GRANT_ID_NAMESPACE: Uuid = Uuid::from_u128(0x0b9a_52c4_77d1_4f86_b1e0_5d2a_c4f3_6e02);
/// UUIDv5 namespace of lucky-prize entry ids: `v5(ns, gift_id)` (one prize per gift).
pub const LUCKY_ID_NAMESPACE: Uuid = Uuid::from_u128(0x93f4_1d7e_2c68_4a0b_8e35_c7a9_0d1b_5f43);

/// The gift id of a client request: the idempotency key of the whole saga.
///
/// `v5(ns, sender ‖ 0x00 ‖ req_id)`, except for a `req_id` that is a UUIDv7 (time-ordered):
/// then a UUIDv8 whose first 48 bits are the `req_id`'s millisecond timestamp and whose other
/// bits are the v5's. The ids of such requests sort by time, so the ledger appends them to its
/// saga index instead of writing one random page of it per gift (docs/BENCHMARKS-LOG.md: two thirds fewer WAL writes per gift).
/// Either form is a pure function of `(sender, req_id)`: a retry finds its first saga.
pub fn gift_id(sender: &UserId, req_id: &str) -> Uuid {
    gift_ids(sender, req_id).id
}

/// The id versions before the time-ordered form gave a request whose id is now time-ordered
/// (`None` when [`gift_id`] is the v5 form): a saga booked before the upgrade is kept under it,
/// and a retry across the upgrade must find that saga, not book a second one.
pub fn legacy_gift_id(sender: &UserId, req_id: &str) -> Option<Uuid> {
    gift_ids(sender, req_id).legacy
}

/// A request's [`gift_id`] and [`legacy_gift_id`], from one parse and one hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GiftIds {
    /// The id its saga is booked under.
    pub id: Uuid,
    /// The id a version before time-ordered ids gave it, when that differs.
    pub legacy: Option<Uuid>,
}

/// Both ids of a request (see [`GiftIds`]).
pub fn gift_ids(sender: &UserId, req_id: &str) -> GiftIds {
    let v5 = v5_gift_id(sender, req_id);
    match time_prefix(req_id) {
        Some(prefix) => {
            let mut bytes = *v5.as_bytes();
            bytes[..TIME_PREFIX_BYTES].copy_from_slice(&prefix);
            GiftIds {
                id: Uuid::new_v8(bytes),
                legacy: Some(v5),
            }
        }
        None => GiftIds {
            id: v5,
            legacy: None,
        },
    }
}

/// Bytes of a UUIDv7's big-endian millisecond timestamp.
const TIME_PREFIX_BYTES: usize = 6;
/// The version number of a time-ordered UUID (RFC 9562).
const UUID_V7: usize = 7;

fn v5_gift_id(sender: &UserId, req_id: &str) -> Uuid {
    let mut name = Vec::with_capacity(sender.as_str().len() + 1 + req_id.len());
    name.extend_from_slice(sender.as_str().as_bytes());
    name.push(0);
    name.extend_from_slice(req_id.as_bytes());
    Uuid::new_v5(&GIFT_ID_NAMESPACE, &name)
}

/// The timestamp bytes of a `req_id` that is a UUIDv7 (in any of its text forms: a different
/// spelling is a different `req_id`, and the hashed rest of the id tells them apart).
fn time_prefix(req_id: &str) -> Option<[u8; TIME_PREFIX_BYTES]> {
    let id = Uuid::try_parse(req_id).ok()?;
    if id.get_version_num() != UUID_V7 {
        return None;
    }
    let mut prefix = [0; TIME_PREFIX_BYTES];
    prefix.copy_from_slice(&id.as_bytes()[..TIME_PREFIX_BYTES]);
    Some(prefix)
}

/// The wallet entry id of a top-up key.
pub fn grant_entry_id(key: &str) -> Uuid {
    Uuid::new_v5(&GRANT_ID_NAMESPACE, key.as_bytes())
}

/// The wallet entry id of a gift's lucky prize.
pub fn lucky_entry_id(gift_id: Uuid) -> Uuid {
    Uuid::new_v5(&LUCKY_ID_NAMESPACE, gift_id.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_ordered_requests_get_time_ordered_ids_and_others_keep_theirs() {
        let alice = UserId::from("alice");
        // Two UUIDv7 request ids a millisecond apart, the later one with smaller random bits.
        let early = "0190f1a2-b3c4-7d5e-8f60-ffffffffffff";
        let late = "0190f1a2-b3c5-7000-8000-000000000000";
        let (a, b) = (gift_id(&alice, early), gift_id(&alice, late));
        assert_eq!(a.get_version_num(), 8);
        assert_eq!(
            a.as_bytes()[..6],
            Uuid::parse_str(early).unwrap().as_bytes()[..6]
        );
        assert!(a < b, "ids sort by the request's time");
        assert_ne!(
            gift_id(&"bob".into(), early),
            a,
            "the sender is in the hashed part"
        );
        assert_eq!(
            legacy_gift_id(&alice, early),
            Some(v5_gift_id(&alice, early))
        );
        // Any other request id (a UUIDv4, a free string) keeps the v5 id, and has no legacy id.
        for other in [
            "9b2f6c1e-4d3a-4b5c-8d7e-0f1a2b3c4d5e",
            "q1",
            "0190f1a2-b3c4",
        ] {
            assert_eq!(gift_id(&alice, other), v5_gift_id(&alice, other));
            assert_eq!(gift_id(&alice, other).get_version_num(), 5);
            assert_eq!(legacy_gift_id(&alice, other), None);
        }
        // The v5 form is the one clients are told of (the order id of a gift), fixed forever.
        assert_eq!(
            gift_id(&alice, "q1"),
            Uuid::new_v5(&GIFT_ID_NAMESPACE, b"alice\0q1")
        );
    }

    #[test]
    fn gift_id_separates_sender_and_request() {
        let a = gift_id(&"ab".into(), "c");
        let b = gift_id(&"a".into(), "bc");
        assert_ne!(a, b);
        assert_eq!(a, gift_id(&"ab".into(), "c"));
    }
}
