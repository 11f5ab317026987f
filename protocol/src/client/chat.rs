//! `chat.send` and the `chat` event.

use serde::{Deserialize, Serialize};

use crate::ids::{RoomId, Seq, UserId};

/// Longest chat message, in characters (Unicode scalar values).
pub const MAX_CHAT_TEXT_CHARS: usize = 500;

/// `chat.send` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatSend {
    /// The room.
    pub room: RoomId,
    /// The message, 1..=500 characters.
    pub text: String,
}

/// The `ok` of `chat.send`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatSent {
    /// The seq of the `chat` event this message became.
    pub seq: Seq,
}

/// The `chat` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatEvent {
    /// The sender.
    pub from: UserId,
    /// The message.
    pub text: String,
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
