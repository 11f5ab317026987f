//! The room's messages: chat lines, and the app's own (`custom`) messages from members and
//! from the app's backend. A chat mute silences both.

use std::borrow::Cow;

use protocol::client::{self, ChatEvent, CustomEvent, CustomSend, MAX_CHAT_TEXT_CHARS, Profile};
use protocol::{ErrorCode, UserId};

use super::{Applied, Rejected, Role, RoomState, Sequenced, rejected};

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
    /// its interval before `now`.
    fn check_slow_mode(&self, user: &UserId, now: u64) -> Result<(), Rejected> {
        let every = u64::from(self.durable.slow_mode) * 1000;
        if every == 0 || self.role(user) >= Role::Admin {
            return Ok(());
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
            _ => Ok(()),
        }
    }

    /// Records a chat line of `user` at `now` for the slow mode (while it is on, and for
    /// members who are not staff), forgetting the lines older than its interval.
    fn note_chat(&mut self, user: &UserId, now: u64) {
        let every = u64::from(self.durable.slow_mode) * 1000;
        if every == 0 || self.role(user) >= Role::Admin {
            return;
        }
        let last = self.last_chat.get_or_insert_with(Box::default);
        last.retain(|_, at| now < at.saturating_add(every));
        last.insert(user.clone(), now);
    }

    /// A chat message from a member.
    ///
    /// # Errors
    /// `CHAT_MUTED` while a chat mute holds; `SLOW_MODE` while the room's slow mode holds the
    /// sender back; `BAD_REQUEST` for empty or over-long text.
    pub fn chat(&mut self, user: &UserId, text: String, now: u64) -> Result<Applied, Rejected> {
        self.check_not_muted(user, now)?;
        self.check_slow_mode(user, now)?;
        let chars = text.chars().count();
        if chars == 0 || chars > MAX_CHAT_TEXT_CHARS {
            return Err(rejected(
                ErrorCode::BadRequest,
                "text must be 1..=500 characters",
            ));
        }
        if !protocol::text::is_clean(&text, true) {
            return Err(rejected(
                ErrorCode::BadRequest,
                "text may not hold control or bidi characters (newline and tab are fine)",
            ));
        }
        self.note_chat(user, now);
        let mut applied = Applied::default();
        let badges = self.badges(user, now);
        self.push(
            &mut applied,
            Sequenced::Chat(ChatEvent {
                from: user.clone(),
                text,
                robot: user.is_robot(),
                p: self.profile_of(user).map(|p| Profile::clone(p)),
                guard: badges.guard,
                vip: badges.vip,
            }),
        );
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
