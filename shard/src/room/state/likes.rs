//! The room's like counter (`like.send`). A like adds to the durable total at once and to the
//! pending batch; the actor takes the batch at most once an interval and announces it as one
//! volatile `room.likes` to every member, written with the room's state before it goes out.

use protocol::UserId;
use protocol::client::{self, LikesEvent, MAX_RECENT_LIKERS};

use super::{Applied, Rejected, RoomState, rejected};
use protocol::ErrorCode;

/// Likes added since the last `room.likes`, and when that went out. Kept (boxed) from a
/// room's first like on: the pace needs the last announcement's time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct PendingLikes {
    /// How many.
    added: u64,
    /// Who added them, the latest first, each once.
    recent: Vec<UserId>,
    /// When the last `room.likes` went out (unix ms).
    announced_at: Option<u64>,
}

impl RoomState {
    /// `count` likes from member `user`: the total with them in it.
    ///
    /// # Errors
    /// `BAD_REQUEST` for a count outside 1..=100.
    pub fn like(&mut self, user: &UserId, count: Option<u32>) -> Result<u64, Rejected> {
        let n = client::like::checked_like_count(count)
            .map_err(|why| rejected(ErrorCode::BadRequest, why))?;
        let total = self.durable.likes.saturating_add(u64::from(n));
        self.durable.likes = total;
        let pending = self.likes.get_or_insert_with(Box::default);
        pending.added = pending.added.saturating_add(u64::from(n));
        pending.recent.retain(|u| u != user);
        pending.recent.insert(0, user.clone());
        pending.recent.truncate(MAX_RECENT_LIKERS);
        Ok(total)
    }

    /// Whether likes wait to be announced (the tests' view; the actor asks [`Self::likes_due`]).
    #[cfg(test)]
    pub(super) fn likes_pending(&self) -> bool {
        self.likes.as_ref().is_some_and(|l| l.added > 0)
    }

    /// When the waiting likes are due (unix ms): `interval_ms` after the last announcement (a
    /// time already past after a quiet spell: at once). `None` when none wait.
    pub fn likes_due(&self, interval_ms: u64) -> Option<u64> {
        let l = self.likes.as_ref().filter(|l| l.added > 0)?;
        Some(l.announced_at.map_or(0, |t| t.saturating_add(interval_ms)))
    }

    /// Takes the pending likes at `now` as the change that announces them: the total saved
    /// with the room's state, and one `room.likes` to every member. `None` when none wait.
    pub fn take_likes(&mut self, now: u64) -> Option<Applied> {
        let l = self.likes.as_mut().filter(|l| l.added > 0)?;
        l.announced_at = Some(now);
        let ev = LikesEvent {
            total: self.durable.likes,
            added: std::mem::take(&mut l.added),
            recent: std::mem::take(&mut l.recent),
        };
        let mut applied = Applied::changed();
        applied.broadcast.push(client::encode_event(
            "room.likes",
            Some(&self.id),
            None,
            &ev,
        ));
        Some(applied)
    }
}
