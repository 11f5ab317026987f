//! `like.send` and the `room.likes` event: a room's like counter. Members tap hearts; the
//! room adds them to one total and tells everyone what was added, at most once an interval,
//! so a burst of taps in a big room costs one event per member per interval, not one per tap.

use serde::{Deserialize, Serialize};

use crate::ids::{RoomId, UserId};

/// Most likes one `like.send` may carry (a client batches a burst of taps).
pub const MAX_LIKES_PER_SEND: u32 = 100;
/// Most likers a `room.likes` event names.
pub const MAX_RECENT_LIKERS: usize = 5;

/// `like.send` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LikeSend {
    /// The room.
    pub room: RoomId,
    /// How many likes, 1..=100 (1 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
}

impl LikeSend {
    /// The count, checked ([`checked_like_count`]).
    ///
    /// # Errors
    /// The rule broken, as a message for `BAD_REQUEST`.
    pub fn checked_count(&self) -> Result<u32, &'static str> {
        checked_like_count(self.count)
    }
}

/// A `like.send` count, checked: 1 when absent, else 1..=100.
///
/// # Errors
/// The rule broken, as a message for `BAD_REQUEST`.
pub fn checked_like_count(count: Option<u32>) -> Result<u32, &'static str> {
    match count.unwrap_or(1) {
        n @ 1..=MAX_LIKES_PER_SEND => Ok(n),
        _ => Err("count must be 1..=100"),
    }
}

/// The `ok` of `like.send`: the room's total with these likes in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LikeSent {
    /// The room's like total.
    pub total: u64,
}

/// The `room.likes` event (volatile): the likes added since the last one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LikesEvent {
    /// The room's like total.
    pub total: u64,
    /// Likes added since the last `room.likes` (what to animate).
    pub added: u64,
    /// Who added them, the latest first, each once, at most five.
    pub recent: Vec<UserId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_defaults_to_one_and_is_bounded() {
        let send = |count| LikeSend {
            room: RoomId::from("r1"),
            count,
        };
        assert_eq!(send(None).checked_count(), Ok(1));
        assert_eq!(send(Some(100)).checked_count(), Ok(100));
        assert!(send(Some(0)).checked_count().is_err());
        assert!(send(Some(101)).checked_count().is_err());
    }
}
