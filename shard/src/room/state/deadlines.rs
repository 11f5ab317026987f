//! The room's clock: the earliest time anything in it falls due, and the tick that applies
//! everything due (seats not published in time, requests and invitations, chat mutes and
//! bans, RTC reports, away members, ended guard badges, the end of a PK).

use protocol::UserId;

use super::{Applied, RoomState, durable};

impl RoomState {
    /// The earliest time (unix ms) at which [`RoomState::tick`] has something to do.
    pub fn next_deadline(&self) -> Option<u64> {
        let d = &self.durable;
        let seats = d.seats.iter().filter_map(|s| s.publish_by);
        let requests = d.requests.iter().map(|r| r.expires_at);
        let invites = d.invites.iter().map(|i| {
            if i.expired {
                i.expires_at.saturating_add(durable::EXPIRED_INVITE_KEEP_MS)
            } else {
                i.expires_at
            }
        });
        let mutes = d.mutes.values().filter_map(|p| p.until);
        let bans = d.bans.values().filter_map(|p| p.until);
        let away = self.next_away_deadline();
        let guard = self.guard_ends.first().map(|(t, _)| *t);
        let pk = self.pk_deadline();
        let rtc = d
            .rtc
            .iter()
            .filter(|(u, _)| self.seat_of(u).is_none())
            .map(|(_, r)| r.at.saturating_add(self.rtc_keep_ms()));
        seats
            .chain(requests)
            .chain(invites)
            .chain(mutes)
            .chain(bans)
            .chain(rtc)
            .chain(away)
            .chain(guard)
            .chain(pk)
            .min()
    }

    /// Everything due at `now`: seats whose user did not publish in time are freed, requests
    /// and invitations expire, chat mutes and bans end, old RTC reports go, members whose
    /// grace window passed leave, guard badges that ended are shown gone, a PK at its time
    /// ends.
    pub fn tick(&mut self, now: u64) -> Applied {
        let mut applied = Applied::default();
        self.expire_away(&mut applied, now);
        self.expire_seats(&mut applied, now);
        self.expire_pending(&mut applied, now);
        self.expire_penalties(&mut applied, now);
        self.expire_guards(&mut applied, now);
        self.expire_pk(&mut applied, now);
        let keep = self.rtc_keep_ms();
        let seated: Vec<UserId> = self
            .durable
            .seats
            .iter()
            .filter_map(|s| s.user.clone())
            .collect();
        let before = self.durable.rtc.len();
        self.durable
            .rtc
            .retain(|u, r| seated.contains(u) || r.at.saturating_add(keep) > now);
        applied.durable_changed |= self.durable.rtc.len() != before;
        applied
    }

    fn rtc_keep_ms(&self) -> u64 {
        durable::RTC_KEEP_MS.max(self.rules.publish_deadline_ms)
    }
}
