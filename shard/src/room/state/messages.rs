//! The room's messages: chat lines (and taking one back), and the app's own (`custom`)
//! messages from members and from the app's backend. A chat mute silences both; slow mode
//! spaces a member's chat lines.

use std::borrow::Cow;

use protocol::client::{
    self, ChatEvent, ChatRecalled, ChatReply, ChatSend, CustomEvent, CustomSend,
    MAX_CHAT_TEXT_CHARS, MAX_MENTIONS, Profile, RECALL_WINDOW_MS, RECALLABLE_LINES,
};
use protocol::{ErrorCode, Seq, UserId};

use super::{Applied, Rejected, Role, RoomState, Sequenced, rejected};

/// A chat line the room remembers for `chat.recall`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ChatLine {
    seq: Seq,
    from: UserId,
    /// When it was sent (unix ms).
    at: u64,
    recalled: bool,
}

impl RoomState {
    /// `CHAT_MUTED` while a chat mute on `user` holds at `now`, or while the room's chat is
    /// muted and `user` is neither the owner nor an admin.
    fn check_not_muted(&self, user: &UserId, now: u64) -> Result<(), Rejected> {
        if self.durable.chat_muted && self.role(user) < Role::Admin {
            return Err(rejected(
                ErrorCode::ChatMuted,
                "the room's chat is muted for members",
            ));
        }
        match self.durable.mutes.get(user) {
            Some(m) if m.holds(now) => Err(Rejected {
                code: ErrorCode::ChatMuted,
                msg: Cow::Owned(match m.until {
                    Some(t) => format!("muted in this room's chat until {t} (unix ms)"),
                    None => "muted in this room's chat".to_owned(),
                }),
            }),
            _ => Ok(()),
        }
    }

    /// `SLOW_MODE` while the room is in slow mode and `user`, not staff, chatted less than
    /// its interval before `now`; else whether slow mode holds `user` (their line is then
    /// noted with [`Self::note_chat`]).
    fn check_slow_mode(&self, user: &UserId, now: u64) -> Result<bool, Rejected> {
        let every = u64::from(self.durable.slow_mode) * 1000;
        if every == 0 || self.role(user) >= Role::Admin {
            return Ok(false);
        }
        match self.last_chat.as_ref().and_then(|m| m.get(user)) {
            Some(&at) if now < at.saturating_add(every) => Err(Rejected {
                code: ErrorCode::SlowMode,
                msg: Cow::Owned(format!(
                    "slow mode: one line every {} s; the next at {} (unix ms)",
                    self.durable.slow_mode,
                    at + every
                )),
            }),
            _ => Ok(true),
        }
    }

    /// Records a chat line of `user`, whom slow mode holds, at `now`, forgetting the lines
    /// older than its interval.
    fn note_chat(&mut self, user: &UserId, now: u64) {
        let every = u64::from(self.durable.slow_mode) * 1000;
        let last = self.last_chat.get_or_insert_with(Box::default);
        last.retain(|_, at| now < at.saturating_add(every));
        last.insert(user.clone(), now);
    }

    /// A chat message from a member, mentioning members and answering a line when it says so.
    ///
    /// # Errors
    /// `CHAT_MUTED` while a chat mute holds; `SLOW_MODE` while the room's slow mode holds the
    /// sender back; `BAD_REQUEST` for empty or over-long text, or a mention of oneself, of
    /// someone not in the room, twice, or of more than [`MAX_MENTIONS`]; `NO_SUCH_MESSAGE`
    /// for a `reply_to` the room does not remember or that was taken back.
    pub fn chat(&mut self, user: &UserId, c: &ChatSend, now: u64) -> Result<Applied, Rejected> {
        self.check_not_muted(user, now)?;
        let held = self.check_slow_mode(user, now)?;
        let chars = c.text.chars().count();
        if chars == 0 || chars > MAX_CHAT_TEXT_CHARS {
            return Err(rejected(
                ErrorCode::BadRequest,
                "text must be 1..=500 characters",
            ));
        }
        if !protocol::text::is_clean(&c.text, true) {
            return Err(rejected(
                ErrorCode::BadRequest,
                "text may not hold control or bidi characters (newline and tab are fine)",
            ));
        }
        self.check_mentions(user, &c.mentions)?;
        if c.mention_all {
            self.require_staff(user, "only the owner or an admin mentions everyone")?;
        }
        let reply = c.reply_to.map(|seq| self.replied_line(seq)).transpose()?;
        if held {
            self.note_chat(user, now);
        }
        let mut applied = Applied::default();
        let badges = self.badges(user, now);
        self.push(
            &mut applied,
            Sequenced::Chat(ChatEvent {
                from: user.clone(),
                text: c.text.clone(),
                robot: user.is_robot(),
                p: self.profile_of(user).map(|p| Profile::clone(p)),
                guard: badges.guard,
                vip: badges.vip,
                mentions: c.mentions.clone(),
                reply,
                mention_all: c.mention_all,
            }),
        );
        let lines = &mut self.recent.get_or_insert_with(Box::default).lines;
        if lines.len() >= RECALLABLE_LINES {
            lines.pop_front();
        }
        lines.push_back(ChatLine {
            seq: self.seq,
            from: user.clone(),
            at: now,
            recalled: false,
        });
        Ok(applied)
    }

    /// `BAD_REQUEST` unless `mentions` names at most [`MAX_MENTIONS`] members of the room, each
    /// once, none of them `user`.
    fn check_mentions(&self, user: &UserId, mentions: &[UserId]) -> Result<(), Rejected> {
        if mentions.len() > MAX_MENTIONS {
            return Err(rejected(
                ErrorCode::BadRequest,
                "a line may mention at most 10 members",
            ));
        }
        for (i, m) in mentions.iter().enumerate() {
            let why = if m == user {
                "a line may not mention its sender"
            } else if mentions[..i].contains(m) {
                "a member is mentioned twice"
            } else if !self.is_member(m) {
                "a mentioned user is not in the room"
            } else {
                continue;
            };
            return Err(rejected(ErrorCode::BadRequest, why));
        }
        Ok(())
    }

    /// The line at `seq` a chat line answers: one the room remembers and that was not taken
    /// back.
    fn replied_line(&self, seq: Seq) -> Result<ChatReply, Rejected> {
        self.unrecalled_sender(seq)
            .map(|from| ChatReply {
                seq,
                from: from.clone(),
            })
            .ok_or_else(|| {
                rejected(
                    ErrorCode::NoSuchMessage,
                    "reply_to: no such chat line in this room (only the last 64 of the current epoch, not taken back)",
                )
            })
    }

    /// A plain chat line (no mentions, no reply): the tests' shorthand for [`Self::chat`].
    #[cfg(test)]
    pub(super) fn chat_line(
        &mut self,
        user: &UserId,
        text: String,
        now: u64,
    ) -> Result<Applied, Rejected> {
        let c = ChatSend {
            room: self.id().clone(),
            text,
            mentions: Vec::new(),
            reply_to: None,
            mention_all: false,
        };
        self.chat(user, &c, now)
    }

    /// The sender of the chat line at `seq` of this epoch while the room remembers it, unless
    /// it was taken back.
    pub(super) fn unrecalled_sender(&self, seq: Seq) -> Option<&UserId> {
        self.recent
            .as_ref()
            .and_then(|r| r.lines.iter().find(|l| l.seq == seq && !l.recalled))
            .map(|l| &l.from)
    }

    /// The sender of the chat line at `seq` of this epoch, while the room remembers it.
    pub(super) fn line_sender(&self, seq: Seq) -> Option<&UserId> {
        self.recent
            .as_ref()
            .and_then(|r| r.lines.iter().find(|l| l.seq == seq))
            .map(|l| &l.from)
    }

    /// Takes back the chat line at `seq` of this epoch: its sender within
    /// [`RECALL_WINDOW_MS`], or the owner or an admin over the sender (as for a kick). A line
    /// recalled already is answered again with no new event.
    ///
    /// # Errors
    /// `NO_SUCH_MESSAGE` for a line the room does not remember (not a chat line, an earlier
    /// epoch's, older than the last [`RECALLABLE_LINES`]); `FORBIDDEN` for someone else's line
    /// without the rights over its sender, or one's own past the window.
    pub fn chat_recall(&mut self, user: &UserId, seq: Seq, now: u64) -> Result<Applied, Rejected> {
        let Some(line) = self
            .recent
            .as_ref()
            .and_then(|r| r.lines.iter().find(|l| l.seq == seq))
        else {
            return Err(rejected(
                ErrorCode::NoSuchMessage,
                "no such chat line in this room (only the last 64 of the current epoch)",
            ));
        };
        if line.recalled {
            return Ok(Applied::default());
        }
        let from = line.from.clone();
        if from == *user {
            if now > line.at.saturating_add(RECALL_WINDOW_MS) {
                return Err(rejected(
                    ErrorCode::Forbidden,
                    "a sender may recall a line within 2 minutes",
                ));
            }
        } else {
            self.require_over(user, &from)?;
        }
        if let Some(l) = self
            .recent
            .as_mut()
            .and_then(|r| r.lines.iter_mut().find(|l| l.seq == seq))
        {
            l.recalled = true;
        }
        let mut applied = Applied::default();
        self.push(
            &mut applied,
            Sequenced::ChatRecall(ChatRecalled {
                line: seq,
                from,
                by: user.clone(),
            }),
        );
        self.unpin_recalled(user, seq, &mut applied);
        Ok(applied)
    }

    /// An app-defined message: from member `from`, or from the app's backend (`None`, the
    /// admin API). Sequenced like chat, or volatile: then it goes to the members in the room
    /// now and is never stored or replayed.
    ///
    /// # Errors
    /// `CHAT_MUTED` while a chat mute on the sender holds; `BAD_REQUEST` for a bad `type` or
    /// `data` over its size.
    pub fn custom(
        &mut self,
        from: Option<&UserId>,
        c: &CustomSend,
        now: u64,
    ) -> Result<Applied, Rejected> {
        if let Some(user) = from {
            self.check_not_muted(user, now)?;
        }
        c.check()
            .map_err(|why| rejected(ErrorCode::BadRequest, why))?;
        let badges = from.map(|u| self.badges(u, now)).unwrap_or_default();
        let ev = CustomEvent {
            from: from.cloned(),
            system: from.is_none(),
            kind: c.kind.clone(),
            data: c.data.clone(),
            robot: from.is_some_and(UserId::is_robot),
            p: from
                .and_then(|u| self.profile_of(u))
                .map(|p| Profile::clone(p)),
            guard: badges.guard,
            vip: badges.vip,
        };
        let mut applied = Applied::default();
        if c.volatile {
            let frame = client::encode_event("custom", Some(&self.id), None, &ev);
            applied.broadcast.push(frame);
        } else {
            self.push(&mut applied, Sequenced::Custom(ev));
        }
        Ok(applied)
    }
}
