//! The room loop's timers, as one: each turn the loop arms a single sleep until the earliest
//! deadline of its timers that are on, and when it wakes runs every one that is due. One timer
//! per turn instead of one per kind keeps each turn's work (a command is a turn) and the
//! loop's future (which lives as long as the room) small.

use tokio::time::Instant;

/// When each of the room's timers is due (`None`: off this turn).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Timers {
    /// `member.count` is due (only while the count changed).
    pub(super) count: Option<Instant>,
    /// The next deadline of the durable state (publish deadline, expiries).
    pub(super) deadline: Option<Instant>,
    /// A held gift storm's flush.
    pub(super) storm: Option<Instant>,
    /// `rocket.progress` and `pk.score` (only while the rocket or a PK score moved).
    pub(super) rocket: Option<Instant>,
    /// `room.likes` (only while likes wait).
    pub(super) likes: Option<Instant>,
    /// The next robot action.
    pub(super) robot: Option<Instant>,
    /// The directory score's refresh (only while recent gifts count).
    pub(super) listing: Option<Instant>,
    /// The room unloads (only while it has no members).
    pub(super) idle: Option<Instant>,
}

impl Timers {
    /// The earliest deadline of the timers on, if any is.
    pub(super) fn next(&self) -> Option<Instant> {
        [
            self.count,
            self.deadline,
            self.storm,
            self.rocket,
            self.likes,
            self.robot,
            self.listing,
            self.idle,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The timers due at `now`, the others off.
    pub(super) fn due(&self, now: Instant) -> Self {
        let due = |t: Option<Instant>| t.filter(|t| *t <= now);
        Self {
            count: due(self.count),
            deadline: due(self.deadline),
            storm: due(self.storm),
            rocket: due(self.rocket),
            likes: due(self.likes),
            robot: due(self.robot),
            listing: due(self.listing),
            idle: due(self.idle),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_earliest_timer_on_is_next_and_only_those_passed_are_due() {
        let t0 = Instant::now();
        let at = |ms| Some(t0 + Duration::from_millis(ms));
        assert_eq!(Timers::default().next(), None);
        let timers = Timers {
            count: at(30),
            storm: at(10),
            idle: at(20),
            ..Timers::default()
        };
        assert_eq!(timers.next(), at(10));
        let due = timers.due(t0 + Duration::from_millis(20));
        assert_eq!(
            (due.storm, due.idle, due.count, due.deadline),
            (at(10), at(20), None, None)
        );
        assert_eq!(timers.due(t0).next(), None, "nothing due before its time");
    }
}
