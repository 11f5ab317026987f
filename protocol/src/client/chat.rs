//! `chat.send` and the `chat` event; `chat.recall` and the `chat.recall` event.

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

/// How long a sender may recall their own chat line, in ms.
pub const RECALL_WINDOW_MS: u64 = 120_000;
/// How many of its latest chat lines a room remembers for `chat.recall`.
pub const RECALLABLE_LINES: usize = 64;

/// `chat.recall` arguments: the line is named by its seq in the room's current epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatRecall {
    /// The room.
    pub room: RoomId,
    /// The seq of the `chat` event to recall.
    pub seq: Seq,
}

/// The `chat.recall` event: a chat line was taken back (clients hide it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatRecalled {
    /// The seq of the `chat` event recalled (in the same epoch as this event); named apart
    /// from the event's own `seq`.
    pub line: Seq,
    /// Who sent the line.
    pub from: UserId,
    /// Who recalled it: the sender, the owner or an admin.
    pub by: UserId,
}
