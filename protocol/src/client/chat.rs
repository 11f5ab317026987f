//! `chat.send` and the `chat` event; `chat.recall` and the `chat.recall` event.

use serde::{Deserialize, Serialize};

use crate::ids::{Epoch, RoomId, Seq, UserId};

/// Longest chat message, in characters (Unicode scalar values).
pub const MAX_CHAT_TEXT_CHARS: usize = 500;
/// Most members one chat line may mention.
pub const MAX_MENTIONS: usize = 10;

/// `chat.send` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatSend {
    /// The room.
    pub room: RoomId,
    /// The message, 1..=500 characters.
    pub text: String,
    /// Members the line mentions (extension): at most [`MAX_MENTIONS`], each once, members of
    /// the room now, not the sender.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mentions: Vec<UserId>,
    /// The line this one answers (extension): its seq in the room's current epoch, a line
    /// the room still remembers (as for `chat.recall`) and not taken back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<Seq>,
    /// The line mentions everyone in the room (extension; the owner or an admin only).
    #[serde(default, skip_serializing_if = "crate::client::is_false")]
    pub mention_all: bool,
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
    /// The members the line mentions (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mentions: Vec<UserId>,
    /// The line it answers (absent when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<ChatReply>,
    /// The staff mention everyone (present only then).
    #[serde(default, skip_serializing_if = "crate::client::is_false")]
    pub mention_all: bool,
}

/// The line a chat line answers: its seq (this epoch) and sender, so a client that holds the
/// line quotes it and one that does not still says whom it answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatReply {
    /// The answered line's seq.
    pub seq: Seq,
    /// Its sender.
    pub from: UserId,
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

/// `chat.pin` arguments: the chat line to pin (its seq in the room's current epoch), or `None`
/// (`null`) to unpin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatPin {
    /// The room.
    pub room: RoomId,
    /// The line; `None` (`null` or omitted): take the pinned line down.
    #[serde(default)]
    pub seq: Option<Seq>,
}

/// The room's pinned chat line, as the snapshot and the `chat.pin` event carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedLine {
    /// The line's seq, in `epoch`.
    pub seq: Seq,
    /// The epoch the line was sent in (a room that moved since is in a later one).
    pub epoch: Epoch,
    /// Its sender.
    pub from: UserId,
    /// Its text.
    pub text: String,
    /// Who pinned it.
    pub by: UserId,
    /// When it was pinned (unix ms).
    pub at: u64,
}

/// The `chat.pin` event: the line pinned now, or none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatPinned {
    /// Who changed it.
    pub by: UserId,
    /// The pinned line; `None` (`null`): none is pinned now.
    pub line: Option<PinnedLine>,
}
