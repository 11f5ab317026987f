//! Direct messages between users: `im.send`, `im.history`, the block list, and the `im` event.
//! The gateway answers them itself (no room is involved).

use serde::{Deserialize, Serialize};

use super::Profile;
use crate::ids::UserId;

/// Longest direct message, in characters (Unicode scalar values).
pub const MAX_IM_TEXT_CHARS: usize = 500;
/// Messages an `im.history` page holds by default.
pub const DEFAULT_IM_HISTORY_LIMIT: u32 = 50;
/// Most messages one `im.history` page may hold.
pub const MAX_IM_HISTORY_LIMIT: u32 = 100;
/// Most ids one `im.ack` may carry: a backlog holds at most 200 messages (section 9).
pub const MAX_IM_ACK_IDS: usize = 200;
/// Users one user may block: a block list is read whole (`im.blocks`), so it stays small.
pub const MAX_BLOCKS: usize = 1_000;

/// `im.send` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImSend {
    /// The recipient.
    pub to: UserId,
    /// The message, 1..=500 characters; newline and tab allowed. For a typed message, what a
    /// client that does not know the type shows.
    pub text: String,
    /// Idempotency key (same rules as `gift.send`'s): a retry answers the first message.
    pub req_id: String,
    /// An app-defined message type (a room invitation, a picture, a gift card), as a custom
    /// message's: 1..=32 of `A-Z a-z 0-9 _ . : -`. Absent: a plain text message.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The typed message's JSON, at most 2048 bytes; only with `type`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

impl ImSend {
    /// Checks the message's type and data (the text is checked with the rest by the gateway).
    ///
    /// # Errors
    /// The rule broken, as a message for `BAD_REQUEST`.
    pub fn check_typed(&self) -> Result<(), &'static str> {
        if let Some(kind) = &self.kind
            && !super::custom::is_app_name(kind)
        {
            return Err("type must be 1..=32 characters of A-Z a-z 0-9 _ . : -");
        }
        match &self.data {
            None => Ok(()),
            Some(_) if self.kind.is_none() => Err("data needs a type"),
            Some(d) => super::custom::check_app_data(d),
        }
    }
}

/// The `ok` of `im.send`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImSent {
    /// The message id: unique, increasing with time.
    pub id: u64,
    /// When the server accepted it, unix ms.
    pub at: u64,
}

/// The `im` event, and one message of `im.history`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImMessage {
    /// The message id.
    pub id: u64,
    /// The sender.
    pub from: UserId,
    /// The recipient.
    pub to: UserId,
    /// The text.
    pub text: String,
    /// The app-defined type of a typed message (absent for plain text).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// A typed message's JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// When the server accepted it, unix ms.
    pub at: u64,
    /// The sender's profile when it sent the message (left out when empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p: Option<Profile>,
}

/// `im.history` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ImHistory {
    /// Only the conversation with this user (default: every conversation).
    #[serde(default)]
    pub with: Option<UserId>,
    /// Only messages with an id below this one (the `next` of the previous page).
    #[serde(default)]
    pub before: Option<u64>,
    /// Page size, 1..=100 (default 50).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// The `ok` of `im.history`: newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImPage {
    /// The messages, newest first.
    pub messages: Vec<ImMessage>,
    /// The `before` of the next (older) page; `null` when this page is the last.
    pub next: Option<u64>,
}

/// `im.block` and `im.unblock` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImUser {
    /// The user to block or unblock.
    pub user: UserId,
}

/// `im.ack` arguments: direct messages the client has (PROTOCOL.md section 13.7).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ImAck {
    /// The ids of the `im` events the client holds, 1..=200 of them.
    pub ids: Vec<u64>,
}

/// `im.blocks` arguments (none).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ImBlocks {}

/// The `ok` of `im.blocks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockList {
    /// The users the caller blocked, sorted.
    pub blocks: Vec<UserId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(kind: Option<&str>, data: Option<serde_json::Value>) -> ImSend {
        ImSend {
            to: UserId::from("bob"),
            text: "alice invites you to Late Night".into(),
            req_id: "r1".into(),
            kind: kind.map(str::to_owned),
            data,
        }
    }

    #[test]
    fn a_typed_messages_type_and_data_are_checked() {
        let invite = serde_json::json!({"room": "late-night"});
        assert!(send(None, None).check_typed().is_ok());
        assert!(
            send(Some("room.invite"), Some(invite.clone()))
                .check_typed()
                .is_ok()
        );
        assert!(send(Some("room.invite"), None).check_typed().is_ok());
        assert!(send(None, Some(invite)).check_typed().is_err());
        assert!(send(Some("no spaces"), None).check_typed().is_err());
        let big = serde_json::Value::String("x".repeat(2047));
        assert!(send(Some("pic"), Some(big)).check_typed().is_err());
        let unclean = serde_json::json!({"room": "r\u{202E}1"});
        assert!(
            send(Some("room.invite"), Some(unclean))
                .check_typed()
                .is_err()
        );
    }

    #[test]
    fn a_plain_message_reads_and_writes_as_before() {
        let plain: ImSend =
            serde_json::from_str(r#"{"to":"bob","text":"hi","req_id":"r1"}"#).unwrap();
        assert_eq!((plain.kind.as_deref(), plain.data.as_ref()), (None, None));
        let out = serde_json::to_string(&plain).unwrap();
        assert_eq!(out, r#"{"to":"bob","text":"hi","req_id":"r1"}"#);
    }
}
