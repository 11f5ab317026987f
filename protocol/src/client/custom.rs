//! `custom.send` and the `custom` event: app-defined room messages (likes, danmaku, game moves,
//! notices from the app's own backend) that the room carries without reading their `data`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{RoomId, Seq, UserId};

/// Longest `type`, in bytes.
pub const MAX_CUSTOM_TYPE_BYTES: usize = 32;
/// Longest `data`, in bytes of its JSON encoding.
pub const MAX_CUSTOM_DATA_BYTES: usize = 2048;

/// `custom.send` arguments (and the body of the admin API's room message).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomSend {
    /// The room.
    pub room: RoomId,
    /// The app's name for the message, 1..=32 bytes of `A-Z a-z 0-9 _ . : -`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Any JSON value, at most 2,048 bytes encoded; absent for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Volatile: sent to the members in the room now, never sequenced, stored or replayed.
    #[serde(default, skip_serializing_if = "crate::client::is_false")]
    pub volatile: bool,
}

/// Why app-defined JSON with a control or bidi character in a string is refused.
pub const UNCLEAN_DATA: &str =
    "data may not hold control or bidi characters in its strings (newline and tab are fine)";

/// Checks app-defined message data (a custom message's, a typed direct message's): at most
/// [`MAX_CUSTOM_DATA_BYTES`] of JSON, and clean strings ([`crate::text::is_clean_json`]).
///
/// # Errors
/// The rule broken, as a message for `BAD_REQUEST`.
pub fn check_app_data(data: &serde_json::Value) -> Result<(), &'static str> {
    let size = serde_json::to_vec(data).map_or(usize::MAX, |v| v.len());
    if size > MAX_CUSTOM_DATA_BYTES {
        Err("data must be at most 2048 bytes of JSON")
    } else if !crate::text::is_clean_json(data) {
        Err(UNCLEAN_DATA)
    } else {
        Ok(())
    }
}

/// Whether `s` is an app-defined name: a custom message's `type`, a room attribute's key.
pub fn is_app_name(s: &str) -> bool {
    (1..=MAX_CUSTOM_TYPE_BYTES).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

impl CustomSend {
    /// Checks `type` and the size of `data`; the reason when they break the rules.
    ///
    /// # Errors
    /// The rule broken, as a message for `BAD_REQUEST`.
    pub fn check(&self) -> Result<(), &'static str> {
        if !is_app_name(&self.kind) {
            return Err("type must be 1..=32 characters of A-Z a-z 0-9 _ . : -");
        }
        self.data.as_ref().map_or(Ok(()), check_app_data)
    }
}

/// The `ok` of `custom.send`: the seq of the `custom` event, absent for a volatile message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomSent {
    /// The seq of the sequenced `custom` event this message became.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<Seq>,
}

/// The `custom` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomEvent {
    /// The sender; absent for a message from the app's backend (`system`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<UserId>,
    /// Sent by the app's backend through the admin API (present only then).
    #[serde(default, skip_serializing_if = "crate::client::is_false")]
    pub system: bool,
    /// The app's name for the message.
    #[serde(rename = "type")]
    pub kind: String,
    /// The app's data, as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
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
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn send(kind: &str, data: Option<Value>) -> CustomSend {
        CustomSend {
            room: RoomId::from("r1"),
            kind: kind.into(),
            data,
            volatile: false,
        }
    }

    #[test]
    fn type_and_data_size_are_checked() {
        assert!(send("like", None).check().is_ok());
        assert!(
            send("game.move:v2-x_1", Some(json!({"a": [1, 2]})))
                .check()
                .is_ok()
        );
        for bad in ["", "has space", "ünï", "slash/no", &"x".repeat(33)] {
            assert!(send(bad, None).check().is_err(), "{bad:?}");
        }
        assert!(send(&"x".repeat(32), None).check().is_ok());
        // 2,048 bytes encoded pass, one more does not: a string of n bytes encodes as n + 2.
        assert!(send("t", Some(json!("a".repeat(2046)))).check().is_ok());
        assert!(send("t", Some(json!("a".repeat(2047)))).check().is_err());
        // Strings in data follow the chat's rule: lines are fine, control and bidi are not.
        assert!(send("t", Some(json!({"text": "a\nb"}))).check().is_ok());
        let err = send("t", Some(json!({"text": ["\u{1b}[2J"]}))).check();
        assert_eq!(err, Err(UNCLEAN_DATA));
    }
}
