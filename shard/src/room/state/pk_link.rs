//! A PK between two rooms: the app's backend matches two rooms and starts each room's side
//! ([`RoomState::pk_link_start`]). Each room is one side: every gift sent in the room scores
//! for it (its red score), and its blue score is the other room's, read from the board both
//! rooms' owners write (`storage::pk_board`), wherever each room runs.
//!
//! Its end has two steps, so that both rooms announce the same result:
//! 1. **This side closes**: at `ends_at`, when the staff or the app's backend stops it, or when
//!    the other side closed first (then as `stopped` when a stop closed the other). From then
//!    on no gift scores here, and the room reports its score as final.
//! 2. **It ends** (`pk.end`) once this room has reported its final score and read the other's
//!    final one: both rooms then hold the same two finals. When the other's final does not come
//!    within [`LINK_GRACE_MS`] of closing (that room is unloaded, or its node is down), it ends
//!    with the other's last score read.
//!
//! The actor does the board's I/O (`room/pk_sync.rs`): it asks [`RoomState::pk_side`] what to
//! write and hands the answer to [`RoomState::pk_their_side`].

use protocol::client::{GiftEvent, PkLink, PkStartEvent, PkStarted, PkVs};
use protocol::{ErrorCode, RoomId, UserId};
use serde::{Deserialize, Serialize};
use storage::pk_board::PkSide;

use super::pk::Pk;
use super::{Applied, RoomState, Sequenced, rejected};

/// How long a closed side waits for the other room's final score before it ends with the last
/// score read (ms).
pub const LINK_GRACE_MS: u64 = 5_000;

/// `PK_ON`'s message in the room the caller acts in.
pub(super) const PK_ON: &str = "a PK is already on in this room";

/// How far past the longest PK a match's end may be (ms): the backend's clock and the room's
/// may differ a little.
const END_SLACK_MS: u64 = 60_000;

/// The other side of a PK between two rooms, as this room keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versus {
    /// The match's id, the same in both rooms.
    pub link: String,
    /// The other room.
    pub room: RoomId,
    /// When this side closed (unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<u64>,
    /// Why it closed: `time` or `stopped`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who stopped it here (a member of the staff; absent: the app's backend, or the other
    /// room's stop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<UserId>,
    /// The other side's score read last is its final one.
    #[serde(default)]
    pub their_final: bool,
}

impl Versus {
    /// The other room as the events name it.
    pub fn view(&self) -> PkVs {
        PkVs {
            room: self.room.clone(),
            link: self.link.clone(),
        }
    }

    /// When the room's clock next has work for this PK: closing at `ends_at`, or the end of the
    /// grace once closed.
    pub(super) fn deadline(&self, ends_at: u64) -> u64 {
        self.closed_at
            .map_or(ends_at, |t| t.saturating_add(LINK_GRACE_MS))
    }

    fn stopped(&self) -> bool {
        self.reason.as_deref() == Some("stopped")
    }
}

impl RoomState {
    /// `PK_ON` (saying `what`) while a PK is on in this room.
    pub(super) fn require_no_pk(&self, what: &'static str) -> Result<(), super::Rejected> {
        match self.pk_on() {
            Some(_) => Err(rejected(ErrorCode::PkOn, what)),
            None => Ok(()),
        }
    }

    /// `BAD_REQUEST` when `other` is this room.
    pub(super) fn require_other_room(&self, other: &RoomId) -> Result<(), super::Rejected> {
        if *other == self.id {
            return Err(rejected(
                ErrorCode::BadRequest,
                "a room cannot PK against itself",
            ));
        }
        Ok(())
    }

    /// The PK that is on is one between two rooms.
    pub(super) fn pk_linked(&self) -> bool {
        self.pk_on().is_some_and(|p| p.vs.is_some())
    }

    /// The app's backend starts this room's side of a PK against `args.vs`, ending at
    /// `args.ends_at`. Sequences `pk.start` with `vs` and no teams.
    ///
    /// # Errors
    /// `PK_ON` while one is on; `BAD_REQUEST` for a bad match id, the room itself as the other,
    /// or an end in the past or past the longest PK.
    pub fn pk_link_start(
        &mut self,
        args: &PkLink,
        now: u64,
    ) -> Result<(PkStarted, Applied), super::Rejected> {
        self.require_no_pk(PK_ON)?;
        args.check()
            .map_err(|m| rejected(ErrorCode::BadRequest, m))?;
        self.require_other_room(&args.vs)?;
        let longest = u64::from(protocol::client::MAX_PK_SECONDS) * 1000 + END_SLACK_MS;
        if args.ends_at <= now || args.ends_at > now.saturating_add(longest) {
            return Err(rejected(
                ErrorCode::BadRequest,
                "the PK's end is in the past or too far ahead",
            ));
        }
        let vs = Versus {
            link: args.link.clone(),
            room: args.vs.clone(),
            closed_at: None,
            reason: None,
            by: None,
            their_final: false,
        };
        let view = vs.view();
        let pks = self.durable.pk.get_or_insert_with(Box::default);
        pks.started += 1;
        let pk = pks.started;
        pks.on = Some(Pk {
            red_seats: Vec::new(),
            blue_seats: Vec::new(),
            ends_at: args.ends_at,
            red: 0,
            blue: 0,
            red_from: Default::default(),
            blue_from: Default::default(),
            vs: Some(vs),
        });
        let mut applied = Applied::changed();
        self.push(
            &mut applied,
            Sequenced::PkStart(PkStartEvent {
                pk,
                red_seats: Vec::new(),
                blue_seats: Vec::new(),
                ends_at: args.ends_at,
                by: None,
                vs: Some(view),
            }),
        );
        Ok((
            PkStarted {
                pk,
                ends_at: args.ends_at,
            },
            applied,
        ))
    }

    /// Scores a gift in a PK between two rooms: all its coins, for this room, until this side
    /// closes. True when the score moved.
    pub(super) fn pk_link_score(&mut self, ev: &GiftEvent) -> bool {
        let Some(on) = self.durable.pk.as_mut().and_then(|p| p.on.as_mut()) else {
            return false;
        };
        if on.vs.as_ref().is_none_or(|vs| vs.closed_at.is_some()) {
            return false;
        }
        on.red = on.red.saturating_add(ev.coins);
        super::rocket::credit(&mut on.red_from, &ev.from, ev.coins, super::pk::MAX_SENDERS);
        true
    }

    /// Closes this side of the PK between two rooms that is on (see the module); false when
    /// none is on or it is closed already.
    pub(super) fn close_link(&mut self, reason: &str, by: Option<&UserId>, now: u64) -> bool {
        let Some(vs) = self.link_mut() else {
            return false;
        };
        if vs.closed_at.is_some() {
            return false;
        }
        vs.closed_at = Some(now);
        vs.reason = Some(reason.into());
        vs.by = by.cloned();
        true
    }

    /// The room's clock for a PK between two rooms: this side closes at its time, and ends
    /// with the last score read when the other's final did not come within the grace.
    pub(super) fn expire_link(&mut self, applied: &mut Applied, now: u64) {
        let Some(on) = self.pk_on() else {
            return;
        };
        let Some(vs) = on.vs.as_ref() else {
            return;
        };
        match vs.closed_at {
            None if now >= on.ends_at => {
                self.close_link("time", None, now);
                applied.durable_changed = true;
            }
            Some(at) if now >= at.saturating_add(LINK_GRACE_MS) => self.finish_link(applied),
            _ => {}
        }
    }

    /// What this room writes to the board now, for the PK between two rooms that is on: the
    /// match, the other room, and this side (closed once closed or past its time: no gift
    /// scores after that).
    pub fn pk_side(&self, now: u64) -> Option<(String, RoomId, PkSide)> {
        let on = self.pk_on()?;
        let vs = on.vs.as_ref()?;
        Some((
            vs.link.clone(),
            vs.room.clone(),
            PkSide {
                score: on.red,
                closed: vs.closed_at.is_some() || now >= on.ends_at,
                stopped: vs.stopped(),
            },
        ))
    }

    /// The board's answer to this room's write of `wrote` for match `link`: the other side,
    /// if it wrote one. Its score becomes the blue score; its close closes this side; and
    /// once both finals are known (this room's written, the other's read) the PK ends. An
    /// answer for another match (one that ended since) changes nothing. Also answers whether
    /// the blue score moved (for `pk.score`).
    pub fn pk_their_side(
        &mut self,
        link: &str,
        wrote: PkSide,
        theirs: Option<PkSide>,
        now: u64,
    ) -> (Applied, bool) {
        let mut applied = Applied::default();
        let Some(theirs) = theirs else {
            return (applied, false);
        };
        let Some(on) = self.durable.pk.as_mut().and_then(|p| p.on.as_mut()) else {
            return (applied, false);
        };
        let Some(vs) = on.vs.as_mut().filter(|vs| vs.link == link) else {
            return (applied, false);
        };
        let mut moved = false;
        if !vs.their_final {
            moved = on.blue != theirs.score;
            on.blue = theirs.score;
            vs.their_final = theirs.closed;
        }
        if theirs.closed && vs.closed_at.is_none() {
            let reason = if theirs.stopped { "stopped" } else { "time" };
            self.close_link(reason, None, now);
            applied.durable_changed = true;
        }
        // Both finals: the one this room wrote (no gift scored here since) and the other's.
        if wrote.closed && theirs.closed {
            self.finish_link(&mut applied);
        }
        (applied, moved)
    }

    /// Ends the PK between two rooms with this side's reason and the scores it holds.
    fn finish_link(&mut self, applied: &mut Applied) {
        let Some(vs) = self.link_mut() else {
            return;
        };
        let reason = vs.reason.clone().unwrap_or_else(|| "time".into());
        let by = vs.by.clone();
        self.pk_end(applied, &reason, by.as_ref());
    }

    fn link_mut(&mut self) -> Option<&mut Versus> {
        self.durable.pk.as_mut()?.on.as_mut()?.vs.as_mut()
    }
}
