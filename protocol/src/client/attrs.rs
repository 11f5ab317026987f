//! `room.attrs` and its event: the room's app-defined attributes, a small key-value map the
//! room keeps (durable, in the join snapshot) for what the app's clients share as state: a
//! theme, the song playing, a game's board, a PK score.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{RoomId, UserId};

/// Attributes a room holds at most.
pub const MAX_ROOM_ATTRS: usize = 20;
/// Longest value, in bytes of its JSON encoding.
pub const MAX_ATTR_VALUE_BYTES: usize = 1024;
/// Most bytes a room's attributes take in all (keys and encoded values).
pub const MAX_ATTRS_BYTES: usize = 8192;

/// `room.attrs` arguments (and the body of the admin API's attribute call, without `room`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoomAttrs {
    /// The room.
    pub room: RoomId,
    /// Keys to set, with their values (any JSON).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, Value>,
    /// Keys to remove.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

impl RoomAttrs {
    /// Checks the keys (each an app name, none both set and removed) and each value's size.
    ///
    /// # Errors
    /// The rule broken, as a message for `BAD_REQUEST`.
    pub fn check(&self) -> Result<(), &'static str> {
        if self.set.is_empty() && self.remove.is_empty() {
            return Err("set or remove at least one attribute");
        }
        let keys = self.set.keys().chain(&self.remove);
        if !keys.into_iter().all(|k| super::custom::is_app_name(k)) {
            return Err("an attribute key is 1..=32 characters of A-Z a-z 0-9 _ . : -");
        }
        if self.remove.iter().any(|k| self.set.contains_key(k)) {
            return Err("a key is both set and removed");
        }
        if self
            .set
            .values()
            .any(|v| encoded_len(v) > MAX_ATTR_VALUE_BYTES)
        {
            return Err("an attribute value is at most 1024 bytes of JSON");
        }
        if !self.set.values().all(crate::text::is_clean_json) {
            return Err(super::custom::UNCLEAN_DATA);
        }
        Ok(())
    }
}

/// The size `v` takes encoded (compact JSON).
pub fn encoded_len(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(usize::MAX, |b| b.len())
}

/// The `room.attrs` event: what changed, and who changed it (absent: the app's backend).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttrsEvent {
    /// Who changed them; `null` for the app's backend.
    pub by: Option<UserId>,
    /// Keys set to a new value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, Value>,
    /// Keys removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn attrs(set: Value, remove: &[&str]) -> RoomAttrs {
        RoomAttrs {
            room: RoomId::from("r1"),
            set: serde_json::from_value(set).unwrap_or_default(),
            remove: remove.iter().map(|k| (*k).to_owned()).collect(),
        }
    }

    #[test]
    fn keys_values_and_overlaps_are_checked() {
        assert!(
            attrs(json!({"theme": "night", "pk.score": [3, 1]}), &["song"])
                .check()
                .is_ok()
        );
        assert!(attrs(json!({}), &[]).check().is_err(), "nothing to do");
        assert!(attrs(json!({"bad key": 1}), &[]).check().is_err());
        assert!(attrs(json!({}), &["no/slash"]).check().is_err());
        assert!(
            attrs(json!({"a": 1}), &["a"]).check().is_err(),
            "set and removed"
        );
        assert!(attrs(json!({"big": "x".repeat(1022)}), &[]).check().is_ok());
        assert!(
            attrs(json!({"big": "x".repeat(1023)}), &[])
                .check()
                .is_err()
        );
        assert!(
            attrs(json!({"song": {"title": "\u{202E}evil"}}), &[])
                .check()
                .is_err()
        );
    }
}
