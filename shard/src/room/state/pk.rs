//! PK: a timed gift battle between two teams of the room's seats. The staff starts one
//! ([`RoomState::pk_start`]); while it is on, each gift order's value to every recipient seated
//! on a team's seat, when the order's `gift` event goes out, is that team's score and its
//! sender's contribution to the team ([`RoomState::pk_score`]). It ends at its time (the room's
//! clock, [`RoomState::tick`]) or when the staff stops it, with the sequenced `pk.end`.
//!
//! The PK lives in the durable state, and every change of its score is a durable change of the
//! write that publishes the gift's event: a new owner of the room, after a crash too, goes on
//! from exactly the scores the members saw, and ends the PK at the same time.
//!
//! A PK between two rooms (`pk_link.rs`) is a PK whose red team is this whole room and whose
//! blue score is the other room's, read from the board both rooms write.

use std::collections::BTreeMap;

use protocol::client::{GiftEvent, PkEnd, PkScore, PkStart, PkStartEvent, PkStarted};
use protocol::{ErrorCode, UserId};
use serde::{Deserialize, Serialize};

use super::{Applied, RoomState, Sequenced, rejected};

/// Most senders a team remembers; past it the smallest contribution is dropped (the top
/// sender stays).
pub(super) const MAX_SENDERS: usize = 100;

/// The room's PKs: how many were started, and the one that is on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pks {
    /// PKs started in this room so far (the next is `started + 1`).
    pub started: u64,
    /// The PK that is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<Pk>,
    /// Invitations from other rooms to a PK between the rooms, pending (`pk_invite.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invites: Vec<protocol::client::PkInvited>,
}

/// A PK that is on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pk {
    /// The red team's seats.
    pub red_seats: Vec<u32>,
    /// The blue team's seats.
    pub blue_seats: Vec<u32>,
    /// When it ends (unix ms).
    pub ends_at: u64,
    /// The red team's score (coins).
    pub red: i64,
    /// The blue team's score (coins).
    pub blue: i64,
    /// Coins each sender gave the red team.
    #[serde(default)]
    pub red_from: BTreeMap<UserId, i64>,
    /// Coins each sender gave the blue team.
    #[serde(default)]
    pub blue_from: BTreeMap<UserId, i64>,
    /// The other room, in a PK between two rooms (then the teams' seats are empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vs: Option<super::pk_link::Versus>,
}

impl RoomState {
    /// The owner or an admin (`by`; `None`: the app's backend) starts a PK at `now`: the
    /// teams named, or the seats other than the host seat split in two halves (the first red).
    /// Sequences `pk.start`.
    ///
    /// # Errors
    /// `FORBIDDEN` for a member; `PK_ON` while one is on; `BAD_REQUEST` for a length out of
    /// 30..=3600 s, one team named without the other, a team empty, a seat named twice or not
    /// in the room, or fewer than two seats to split.
    pub fn pk_start(
        &mut self,
        by: Option<&UserId>,
        args: &PkStart,
        now: u64,
    ) -> Result<(PkStarted, Applied), super::Rejected> {
        if let Some(user) = by {
            self.require_staff(user, "only the owner or an admin starts a PK")?;
        }
        self.require_no_pk(super::pk_link::PK_ON)?;
        let seconds = args
            .checked_seconds()
            .map_err(|m| rejected(ErrorCode::BadRequest, m))?;
        let (red_seats, blue_seats) = self.pk_teams(args)?;
        let ends_at = now.saturating_add(u64::from(seconds) * 1000);
        let pks = self.durable.pk.get_or_insert_with(Box::default);
        pks.started += 1;
        let pk = pks.started;
        pks.on = Some(Pk {
            red_seats: red_seats.clone(),
            blue_seats: blue_seats.clone(),
            ends_at,
            red: 0,
            blue: 0,
            red_from: BTreeMap::new(),
            blue_from: BTreeMap::new(),
            vs: None,
        });
        let mut applied = Applied::changed();
        self.push(
            &mut applied,
            Sequenced::PkStart(PkStartEvent {
                pk,
                red_seats,
                blue_seats,
                ends_at,
                by: by.cloned(),
                vs: None,
            }),
        );
        Ok((PkStarted { pk, ends_at }, applied))
    }

    /// The teams of `pk.start`, checked, or the default split.
    fn pk_teams(&self, args: &PkStart) -> Result<(Vec<u32>, Vec<u32>), super::Rejected> {
        let seats = self.durable.seats.len() as u32;
        let bad = |m| Err(rejected(ErrorCode::BadRequest, m));
        match (&args.red, &args.blue) {
            (Some(red), Some(blue)) => {
                if red.is_empty() || blue.is_empty() {
                    return bad("each team needs at least one seat");
                }
                let mut all: Vec<u32> = red.iter().chain(blue).copied().collect();
                if all.iter().any(|s| *s >= seats) {
                    return bad("a team names a seat the room does not have");
                }
                all.sort_unstable();
                all.dedup();
                if all.len() != red.len() + blue.len() {
                    return bad("a seat is named twice");
                }
                Ok((red.clone(), blue.clone()))
            }
            (None, None) => {
                let first = u32::from(self.durable.host_seat);
                let open: Vec<u32> = (first..seats).collect();
                if open.len() < 2 {
                    return bad("a PK needs two seats to split");
                }
                let (red, blue) = open.split_at(open.len() / 2);
                Ok((red.to_vec(), blue.to_vec()))
            }
            _ => bad("name both teams (red and blue) or neither"),
        }
    }

    /// The owner or an admin (`by`; `None`: the app's backend) ends the PK that is on before
    /// its time (a PK between two rooms: closes this side, see `pk_link.rs`).
    ///
    /// # Errors
    /// `FORBIDDEN` for a member; `NO_PK` when none is on, or a PK between two rooms already
    /// closed here.
    pub fn pk_stop(&mut self, by: Option<&UserId>, now: u64) -> Result<Applied, super::Rejected> {
        if let Some(user) = by {
            self.require_staff(user, "only the owner or an admin stops a PK")?;
        }
        let mut applied = Applied::default();
        if self.pk_linked() {
            // Between two rooms: this side closes now, and the PK ends once the other room's
            // final score is read (`pk_link.rs`).
            if !self.close_link("stopped", by, now) {
                return Err(rejected(ErrorCode::NoPk, "the PK is already ending"));
            }
            applied.durable_changed = true;
            return Ok(applied);
        }
        if !self.pk_end(&mut applied, "stopped", by) {
            return Err(rejected(ErrorCode::NoPk, "no PK is on in this room"));
        }
        Ok(applied)
    }

    /// Ends the PK that is on at its time, if `now` is past it.
    pub(super) fn expire_pk(&mut self, applied: &mut Applied, now: u64) {
        if self.pk_linked() {
            self.expire_link(applied, now);
        } else if self.pk_ends_at().is_some_and(|t| t <= now) {
            self.pk_end(applied, "time", None);
        }
    }

    /// When the PK that is on ends (unix ms).
    pub(super) fn pk_ends_at(&self) -> Option<u64> {
        Some(self.pk_on()?.ends_at)
    }

    /// The PK that is on.
    pub(super) fn pk_on(&self) -> Option<&Pk> {
        self.durable.pk.as_ref()?.on.as_ref()
    }

    /// When the room's clock next has PK work: its end, or a PK between two rooms' next step.
    pub(super) fn pk_deadline(&self) -> Option<u64> {
        let on = self.pk_on()?;
        match &on.vs {
            Some(vs) => Some(vs.deadline(on.ends_at)),
            None => Some(on.ends_at),
        }
    }

    /// Ends the PK that is on, sequencing `pk.end`; false when none is on.
    pub(super) fn pk_end(
        &mut self,
        applied: &mut Applied,
        reason: &str,
        by: Option<&UserId>,
    ) -> bool {
        let Some(pks) = self.durable.pk.as_mut() else {
            return false;
        };
        let Some(on) = pks.on.take() else {
            return false;
        };
        let pk = pks.started;
        let winner = match on.red.cmp(&on.blue) {
            std::cmp::Ordering::Greater => "red",
            std::cmp::Ordering::Less => "blue",
            std::cmp::Ordering::Equal => "draw",
        };
        applied.durable_changed = true;
        self.push(
            applied,
            Sequenced::PkEnd(PkEnd {
                pk,
                red: on.red,
                blue: on.blue,
                winner: winner.into(),
                red_top: top_sender(&on.red_from),
                blue_top: top_sender(&on.blue_from),
                reason: reason.into(),
                by: by.cloned(),
                vs: on.vs.as_ref().map(super::pk_link::Versus::view),
            }),
        );
        true
    }

    /// Scores a `gift` event that goes out at `now`: its value to each recipient seated on a
    /// team's seat (its coins shared equally among its recipients) adds to that team's score
    /// and to the sender's contribution to it. True when a score moved (a durable change).
    pub(super) fn pk_score(&mut self, ev: &GiftEvent, now: u64) -> bool {
        let Some(ends_at) = self.pk_ends_at() else {
            return false;
        };
        if now >= ends_at || ev.to.is_empty() || ev.coins <= 0 {
            return false;
        }
        if self.pk_linked() {
            return self.pk_link_score(ev);
        }
        let each = ev.coins / ev.to.len() as i64;
        let seats: Vec<Option<u32>> = ev.to.iter().map(|u| self.seat_of(u)).collect();
        let Some(on) = self.durable.pk.as_mut().and_then(|p| p.on.as_mut()) else {
            return false;
        };
        let mut moved = false;
        for seat in seats.into_iter().flatten() {
            let (score, from) = if on.red_seats.contains(&seat) {
                (&mut on.red, &mut on.red_from)
            } else if on.blue_seats.contains(&seat) {
                (&mut on.blue, &mut on.blue_from)
            } else {
                continue;
            };
            *score = score.saturating_add(each);
            super::rocket::credit(from, &ev.from, each, MAX_SENDERS);
            moved = true;
        }
        moved
    }

    /// The PK that is on, for `pk.score` (without its teams) or a joiner's snapshot (with).
    pub fn pk_view(&self, with_teams: bool) -> Option<PkScore> {
        let pks = self.durable.pk.as_ref()?;
        let on = pks.on.as_ref()?;
        Some(PkScore {
            pk: pks.started,
            red: on.red,
            blue: on.blue,
            ends_at: on.ends_at,
            red_seats: with_teams.then(|| on.red_seats.clone()),
            blue_seats: with_teams.then(|| on.blue_seats.clone()),
            vs: on.vs.as_ref().map(super::pk_link::Versus::view),
        })
    }
}

/// The sender who gave a team the most coins (ties: the smaller user id), robots left out.
fn top_sender(from: &BTreeMap<UserId, i64>) -> Option<UserId> {
    from.iter()
        .filter(|(u, c)| !u.is_robot() && **c > 0)
        .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
        .map(|(u, _)| u.clone())
}
