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
    /// The message, 1..=500 characters; newline and tab allowed.
    pub text: String,
    /// Idempotency key (same rules as `gift.send`'s): a retry answers the first message.
    pub req_id: String,
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
