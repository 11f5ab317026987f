//! The pinned chat line (`chat.pin`): the staff put one line above the chat for everyone,
//! newcomers included (it is in the snapshot), until they take it down or pin another. It is
//! durable (it outlives a move), holds the line's text as members saw it, and comes down by
//! itself when its line is taken back.

use protocol::client::{ChatPinned, PinnedLine};
use protocol::{ErrorCode, Seq, UserId};

use super::{Applied, Rejected, RoomState, Sequenced, SessionRef, rejected};

impl RoomState {
    /// Pins the chat line at `seq` of this epoch (`text`: the line as the room sent it, which
    /// the actor reads from its resume log), or takes the pinned line down (`seq` `None`).
    /// Pinning the line already pinned, or unpinning with none, changes nothing.
    ///
    /// # Errors
    /// `NOT_IN_ROOM`; `FORBIDDEN` unless the owner or an admin; `NO_SUCH_MESSAGE` for a line
    /// the room does not remember (as `chat.recall`'s), one taken back, or one whose text the
    /// log no longer holds.
    pub fn chat_pin(
        &mut self,
        user: &UserId,
        at: &SessionRef,
        seq: Option<Seq>,
        text: Option<String>,
        now: u64,
    ) -> Result<Applied, Rejected> {
        self.check_member(user, at)?;
        self.require_staff(user, "only the owner or an admin may pin a line")?;
        let line = match seq {
            None => None,
            Some(seq) => {
                let from = self.unrecalled_sender(seq);
                let (Some(from), Some(text)) = (from, text) else {
                    return Err(rejected(
                        ErrorCode::NoSuchMessage,
                        "no such chat line to pin (only the last 64 of the current epoch, not taken back)",
                    ));
                };
                Some(PinnedLine {
                    seq,
                    epoch: self.epoch,
                    from: from.clone(),
                    text,
                    by: user.clone(),
                    at: now,
                })
            }
        };
        let same = match (&self.durable.pinned, &line) {
            (None, None) => true,
            (Some(p), Some(l)) => (p.epoch, p.seq) == (l.epoch, l.seq),
            _ => false,
        };
        let mut applied = Applied::default();
        if !same {
            self.set_pinned(user, line, &mut applied);
        }
        Ok(applied)
    }

    /// Takes the pinned line down when it is the line at `seq` of this epoch (a recall).
    pub(super) fn unpin_recalled(&mut self, by: &UserId, seq: Seq, applied: &mut Applied) {
        let pinned = self.durable.pinned.as_ref();
        if pinned.is_some_and(|p| (p.epoch, p.seq) == (self.epoch, seq)) {
            self.set_pinned(by, None, applied);
        }
    }

    fn set_pinned(&mut self, by: &UserId, line: Option<PinnedLine>, applied: &mut Applied) {
        self.durable.pinned = line.clone().map(Box::new);
        applied.durable_changed = true;
        let ev = ChatPinned {
            by: by.clone(),
            line,
        };
        self.push(applied, Sequenced::ChatPin(ev));
    }
}
