//! A room's entry in the room directory: its summary, handed to the shard's
//! [`crate::directory::Publisher`] when it changed, and removed when the room closes or
//! stops here.
//!
//! # Score
//! `score = members + heat / GIFT_COINS_PER_POINT`, where `heat` is the coins of the gifts
//! settled in the room, each decayed by half every [`HEAT_HALF_LIFE`]: a room where 100 coins
//! were just sent ranks like one with ten more members, and the effect fades within the hour.
//! The heat lives in the runtime only (a new owner starts it at zero); the score is as of the
//! room's last change, or of its last refresh while the heat lasts (every [`HEAT_REFRESH`]).

use std::time::Duration;

use protocol::client::RoomEntry;
use tokio::time::Instant;

use super::RoomActor;
use super::state::{Applied, Sequenced};

/// Gift coins worth one point of score (one member).
const GIFT_COINS_PER_POINT: f64 = 10.0;
/// Recent gift value halves over this long.
const HEAT_HALF_LIFE: Duration = Duration::from_secs(600);
/// How often a room whose gifts still count refreshes its score: the gift value decays with
/// time, not with the room's events, and a quiet room (its members only talk on the mic)
/// would otherwise keep the score of its last change for as long as it stays quiet.
const HEAT_REFRESH: Duration = Duration::from_secs(5);

/// What the room last handed to the directory, to publish only changes.
#[derive(Debug, Default)]
pub(super) struct Listing {
    /// The cheap parts of the last summary: members, seated, flags and score (its bits, at
    /// 0.1 resolution); `None` when the room is not listed.
    last: Option<(u64, u32, u8, u64)>,
    /// Decayed gift coins, as of `heat_at`.
    heat: f64,
    heat_at: Option<Instant>,
}

impl Listing {
    /// The heat now, after adding `coins`.
    fn heat(&mut self, coins: i64, now: Instant) -> f64 {
        if let Some(at) = self.heat_at {
            let halves = now.duration_since(at).as_secs_f64() / HEAT_HALF_LIFE.as_secs_f64();
            self.heat *= 0.5f64.powf(halves);
        }
        self.heat += coins.max(0) as f64;
        if self.heat < 0.05 {
            self.heat = 0.0;
        }
        self.heat_at = Some(now);
        self.heat
    }
}

/// The coins of the gift events in `applied`.
pub(super) fn gift_coins(applied: &Applied) -> i64 {
    applied
        .events
        .iter()
        .map(|(_, ev)| match ev {
            Sequenced::Gift(g) => g.coins,
            _ => 0,
        })
        .sum()
}

impl RoomActor {
    /// Hands the room's summary to the directory when it changed (`durable`: the durable
    /// state changed, so title or lock may have). Builds the summary only then: a chat line
    /// costs a comparison of a few numbers.
    pub(super) fn list_note(&mut self, coins: i64, durable: bool) {
        let Some(state) = &self.state else { return };
        let d = state.durable();
        if d.closed {
            self.list_remove();
            return;
        }
        let heat = if coins > 0 || self.listing.heat > 0.0 {
            self.listing.heat(coins, Instant::now())
        } else {
            0.0
        };
        let members = state.member_count() as u64;
        let seated = state.seated();
        let score = ((members as f64 + heat / GIFT_COINS_PER_POINT) * 10.0).round() / 10.0;
        let robots = self.robots.is_some() || state.robot_count() > 0;
        let locked = d.password.is_some();
        let pk = state.pk_view(false).is_some();
        let flags = u8::from(robots) | (u8::from(locked) << 1) | (u8::from(pk) << 2);
        let key = (members, seated, flags, score.to_bits());
        if !durable && self.listing.last == Some(key) {
            return;
        }
        self.listing.last = Some(key);
        self.inner.directory.put(RoomEntry {
            room: self.room.clone(),
            title: d.title.clone(),
            owner: d.owner.clone(),
            members,
            seated,
            score,
            robots,
            locked,
            region: d.owner_region.as_deref().map(str::to_owned),
            pinned: false,
            pk,
        });
    }

    /// Records the owner's region from their profile (sent with creates and joins, and when
    /// it changes). A profile without a region clears it (the owner cleared theirs); a command
    /// that carries no profile says nothing about it.
    pub(super) async fn note_owner_region(&mut self, cmd: &protocol::link::Command) {
        let region = match (&cmd.cmd, &cmd.profile) {
            (protocol::link::RoomCmd::Profile(p), _) | (_, Some(p)) => p.region.as_deref(),
            (_, None) => return,
        };
        let Some(state) = self.state.as_mut() else {
            return;
        };
        if let Some(applied) = state.note_owner_region(&cmd.user, region) {
            // Not stored: the room goes on; the next owner's join records it again.
            let _ = self.publish(applied, None).await;
        }
    }

    /// When the listed score must be refreshed (its gift value decays), if it must.
    pub(super) fn list_refresh_due(&self) -> Option<Instant> {
        let at = self.listing.heat_at?;
        (self.listing.heat > 0.0).then(|| at + HEAT_REFRESH)
    }

    /// Refreshes the listed score as the gift value decays. The decay is taken first, so the
    /// next refresh is [`HEAT_REFRESH`] away even when nothing is listed (a closed room).
    pub(super) fn list_refresh(&mut self) {
        self.listing.heat(0, Instant::now());
        self.list_note(0, false);
    }

    /// Takes the room out of the directory (closed, or stopping here).
    pub(super) fn list_remove(&mut self) {
        if self.listing.last.take().is_some() {
            self.inner.directory.remove(&self.room);
        }
    }
}
