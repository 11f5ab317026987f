//! `gift.send`, `gift.list`, `rank.get` and the `gift` event.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ids::{RoomId, UserId};

/// Most gifts of one kind in one order.
pub const MAX_GIFT_COUNT: u32 = 9_999;
/// Most recipients of one batch order: every seat of the largest room.
pub const MAX_GIFT_RECIPIENTS: usize = 20;

/// Longest `req_id` (and admin grant key), in bytes.
pub const MAX_REQ_ID_BYTES: usize = 128;

/// Whether `s` is an acceptable idempotency key: a `gift.send` `req_id` or an admin grant
/// `key`. Opaque to the server, it must be 1..=[`MAX_REQ_ID_BYTES`] bytes of printable ASCII
/// (`0x21..=0x7E`): no spaces, no control characters, nothing outside ASCII, so a key reads
/// the same in logs, URLs and every ledger engine. UUIDs, ULIDs and `prefix-counter` keys fit.
pub fn is_valid_req_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_REQ_ID_BYTES && s.bytes().all(|b| (0x21..=0x7E).contains(&b))
}

/// Who receives a gift: listed users, or everyone on a mic seat.
///
/// Read by a visitor of its own rather than `#[serde(untagged)]`, which buffers the value
/// (every id copied once more) before it tries each variant: this is on every gift's path.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum GiftTargets {
    /// These users.
    Users(Vec<UserId>),
    /// `"seats"`: every user seated when the order is taken.
    Seated(String),
}

impl<'de> Deserialize<'de> for GiftTargets {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Targets;
        impl<'de> serde::de::Visitor<'de> for Targets {
            type Value = GiftTargets;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of user ids or \"seats\"")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<GiftTargets, E> {
                Ok(GiftTargets::Seated(v.to_owned()))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<GiftTargets, A::Error> {
                // The hint is the client's word: bounded, the list's own length decides.
                let hint = seq.size_hint().unwrap_or(0).min(MAX_GIFT_RECIPIENTS);
                let mut users = Vec::with_capacity(hint);
                while let Some(u) = seq.next_element::<UserId>()? {
                    users.push(u);
                }
                Ok(GiftTargets::Users(users))
            }
        }
        d.deserialize_any(Targets)
    }
}

/// `gift.send` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GiftSend {
    /// The room.
    pub room: RoomId,
    /// The client's idempotency key; a retry with the same key returns the first result.
    /// Opaque; acceptable when [`is_valid_req_id`].
    pub req_id: String,
    /// Gift id from the catalog.
    pub gift: String,
    /// How many of the gift, to each recipient.
    #[serde(default = "one")]
    pub count: u32,
    /// Recipients.
    pub to: GiftTargets,
}

fn one() -> u32 {
    1
}

/// The `ok` of `gift.send`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GiftSent {
    /// The order id (stable for the same sender and req_id), as a hyphenated lowercase UUID
    /// on the wire.
    pub order: Uuid,
    /// The sender's balance after the order.
    pub balance: i64,
}

/// The `gift` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GiftEvent {
    /// The order id (as in [`GiftSent`]).
    pub order: Uuid,
    /// Sender.
    pub from: UserId,
    /// Recipients.
    pub to: Vec<UserId>,
    /// Gift id.
    pub gift: String,
    /// Count to each recipient.
    pub count: u32,
    /// Coins the sender paid in total.
    pub coins: i64,
    /// Lucky gifts only: the prize multiplier won (absent for normal gifts, 0 for no win).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lucky_multiplier: Option<u32>,
    /// The sender is a robot (present only then).
    #[serde(default, skip_serializing_if = "crate::client::is_false")]
    pub robot: bool,
    /// The sender's profile (absent when empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p: Option<crate::client::Profile>,
    /// The sender guards the room's owner (present only then).
    #[serde(default, skip_serializing_if = "crate::client::is_false")]
    pub guard: bool,
    /// The sender's VIP level (absent at 0).
    #[serde(default, skip_serializing_if = "crate::client::guard::is_zero")]
    pub vip: u8,
    /// The recipients' profiles by user (absent when none has one; recipients without a
    /// profile are left out).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub to_p: std::collections::BTreeMap<UserId, crate::client::Profile>,
    /// The combo streak this event belongs to, computed by the room (never by a client).
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub combo: Option<Combo>,
}

/// The combo fields of a `gift` event: the same sender sending the same gift to the same
/// recipients within the room's combo window forms a streak. Orders are numbered from 1 in
/// their streak; an event of a gift storm merges several consecutive orders of one streak
/// (`merged` > 1), and its `count` and `coins` are then the sums over those orders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Combo {
    /// The number in the streak of the (last) order this event carries.
    pub combo: u32,
    /// How many orders this event carries (absent: 1); they are numbers
    /// `combo - merged + 1 ..= combo` of the streak.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub merged: u32,
    /// The streak's id: the order id of its first order.
    pub streak: Uuid,
    /// Gifts to each recipient in the streak so far (the sum of its orders' `count`).
    pub streak_count: u64,
    /// Coins paid in the streak so far (the sum of its orders' `coins`).
    pub streak_coins: i64,
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// The `gift.lucky` event: a big lucky win, announced to the room.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LuckyWinEvent {
    /// The order id (as in [`GiftSent`]).
    pub order: Uuid,
    /// The winner (the sender of the lucky gift).
    pub user: UserId,
    /// The multiplier won.
    pub multiplier: u32,
    /// Coins won.
    pub coins: i64,
}

/// One entry of the `gift.list` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GiftInfo {
    /// Gift id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Price in coins.
    pub price: i64,
    /// `normal` or `lucky`.
    pub kind: String,
    /// Animation tier.
    pub effect_level: u32,
}

/// One entry of a `rank.get` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankEntry {
    /// The user.
    pub user: UserId,
    /// Coins sent (senders) or gift value received (receivers).
    pub score: i64,
    /// The user is a robot (present only then).
    #[serde(default, skip_serializing_if = "crate::client::is_false")]
    pub robot: bool,
}

/// `gift.list` arguments (none).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GiftList {}

/// `rank.get` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankGet {
    /// `room` (absent: the room's board) or `app` (the app-wide board: no `room`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The room (room scope; absent at app scope).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room: Option<RoomId>,
    /// `senders` (contribution) or `receivers` (charm).
    pub board: String,
    /// `day`, `week` or `all`.
    #[serde(default = "all")]
    pub period: String,
    /// How many entries, at most 100.
    #[serde(default = "ten")]
    pub limit: u32,
}

fn all() -> String {
    "all".to_owned()
}

fn ten() -> u32 {
    10
}

#[cfg(test)]
mod req_id_tests {
    use super::*;

    #[test]
    fn uuids_and_printable_keys_are_accepted() {
        for ok in [
            "0190f1c2-7a1b-7c3d-9e4f-5a6b7c8d9e0f",
            "r1",
            "x",
            "robot-01HZX3Q4R5S6T7V8W9XAYBZC0D",
            "!~\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}",
        ] {
            assert!(is_valid_req_id(ok), "{ok:?}");
        }
        assert!(is_valid_req_id(&"a".repeat(MAX_REQ_ID_BYTES)));
    }

    #[test]
    fn empty_long_spaced_control_and_non_ascii_keys_are_refused() {
        for bad in [
            "",
            " ",
            "a b",
            " lead",
            "trail ",
            "tab\there",
            "nl\n",
            "nul\0",
            "del\u{7f}",
            "café",
            "\u{202e}rtl",
            "emoji-🎁",
        ] {
            assert!(!is_valid_req_id(bad), "{bad:?}");
        }
        assert!(!is_valid_req_id(&"a".repeat(MAX_REQ_ID_BYTES + 1)));
    }
}

#[cfg(test)]
mod rank_get_tests {
    use super::super::{Op, decode_request};

    fn rank_get(text: &str) -> super::RankGet {
        match decode_request(text).unwrap().op {
            Op::RankGet(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_app_board_names_no_room_and_a_room_board_keeps_its_shape() {
        let app = rank_get(r#"{"id":1,"op":"rank.get","d":{"scope":"app","board":"senders"}}"#);
        assert_eq!(
            (
                app.scope.as_deref(),
                app.room.as_ref(),
                app.period.as_str(),
                app.limit
            ),
            (Some("app"), None, "all", 10)
        );
        let req = decode_request(r#"{"id":1,"op":"rank.get","d":{"scope":"app","board":"x"}}"#);
        assert_eq!(req.unwrap().op.room(), None);
        let room = rank_get(r#"{"id":2,"op":"rank.get","d":{"room":"r1","board":"receivers"}}"#);
        assert_eq!(
            (room.scope, room.room.map(|r| r.to_string())),
            (None, Some("r1".to_owned()))
        );
        let null = rank_get(
            r#"{"id":3,"op":"rank.get","d":{"scope":null,"room":null,"board":"senders"}}"#,
        );
        assert_eq!((null.scope, null.room), (None, None));
    }
}
