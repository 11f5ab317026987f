//! The room's recent sequenced events, for resume: bounded by count and by age.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use protocol::client::Since;
use protocol::{Epoch, Seq};
use tokio::time::Instant;

/// What a resume request gets.
#[derive(Debug, PartialEq)]
pub(crate) enum Resume {
    /// Replay these frames, in order (possibly none: the client is up to date).
    Replay(Vec<Bytes>),
    /// The gap cannot be filled completely: send a fresh snapshot, replay nothing.
    Resync,
}

/// Recent events of one epoch.
#[derive(Debug)]
pub(crate) struct EventLog {
    epoch: Epoch,
    entries: VecDeque<(Seq, Instant, Bytes)>,
    max_events: usize,
    max_age: Duration,
}

impl EventLog {
    /// An empty log for `epoch`, keeping at most `max_events` events no older than `max_age`.
    pub(crate) fn new(epoch: Epoch, max_events: usize, max_age: Duration) -> Self {
        Self {
            epoch,
            entries: VecDeque::new(),
            max_events,
            max_age,
        }
    }

    /// Records event `seq` (which must follow the last one) as sent at `now`.
    pub(crate) fn push(&mut self, seq: Seq, frame: Bytes, now: Instant) {
        debug_assert!(self.entries.back().is_none_or(|(s, _, _)| *s + 1 == seq));
        self.entries.push_back((seq, now, frame));
        while self.entries.len() > self.max_events {
            self.entries.pop_front();
        }
        self.expire(now);
    }

    /// Drops events older than the age bound.
    pub(crate) fn expire(&mut self, now: Instant) {
        while let Some((_, at, _)) = self.entries.front() {
            if now.saturating_duration_since(*at) > self.max_age {
                self.entries.pop_front();
            } else {
                break;
            }
        }
    }

    /// What a client that last saw `since` needs, when the room is at `current` seq.
    /// Never a partial replay: either every missed event, or a resync.
    pub(crate) fn resume(&mut self, since: Since, current: Seq, now: Instant) -> Resume {
        self.expire(now);
        if since.epoch != self.epoch || since.seq > current {
            return Resume::Resync;
        }
        if since.seq == current {
            return Resume::Replay(Vec::new());
        }
        match self.entries.front() {
            Some((first, _, _)) if *first <= since.seq + 1 => Resume::Replay(
                self.entries
                    .iter()
                    .filter(|(s, _, _)| *s > since.seq)
                    .map(|(_, _, f)| f.clone())
                    .collect(),
            ),
            _ => Resume::Resync,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(seq: Seq) -> Bytes {
        Bytes::from(seq.to_string())
    }

    fn log_with(n: Seq, max: usize) -> (EventLog, Instant) {
        let now = Instant::now();
        let mut log = EventLog::new(3, max, Duration::from_secs(60));
        for s in 1..=n {
            log.push(s, frame(s), now);
        }
        (log, now)
    }

    #[test]
    fn replays_exactly_the_missed_events() {
        let (mut log, now) = log_with(10, 100);
        let r = log.resume(Since { epoch: 3, seq: 7 }, 10, now);
        assert_eq!(r, Resume::Replay(vec![frame(8), frame(9), frame(10)]));
        let r = log.resume(Since { epoch: 3, seq: 0 }, 10, now);
        assert_eq!(r, Resume::Replay((1..=10).map(frame).collect()));
        assert_eq!(
            log.resume(Since { epoch: 3, seq: 10 }, 10, now),
            Resume::Replay(vec![])
        );
    }

    #[test]
    fn resyncs_beyond_history_other_epoch_or_future_seq() {
        let (mut log, now) = log_with(10, 4);
        assert_eq!(log.entries.len(), 4);
        // Retained 7..=10: since 6 is fillable, since 5 is not.
        assert!(
            matches!(log.resume(Since { epoch: 3, seq: 6 }, 10, now), Resume::Replay(v) if v.len() == 4)
        );
        assert_eq!(
            log.resume(Since { epoch: 3, seq: 5 }, 10, now),
            Resume::Resync
        );
        assert_eq!(
            log.resume(Since { epoch: 2, seq: 9 }, 10, now),
            Resume::Resync
        );
        assert_eq!(
            log.resume(Since { epoch: 3, seq: 11 }, 10, now),
            Resume::Resync
        );
    }

    #[test]
    fn old_events_expire_by_age() {
        let now = Instant::now();
        let mut log = EventLog::new(1, 100, Duration::from_secs(5));
        log.push(1, frame(1), now);
        log.push(2, frame(2), now + Duration::from_secs(4));
        let later = now + Duration::from_secs(6);
        assert_eq!(
            log.resume(Since { epoch: 1, seq: 0 }, 2, later),
            Resume::Resync
        );
        assert_eq!(
            log.resume(Since { epoch: 1, seq: 1 }, 2, later),
            Resume::Replay(vec![frame(2)])
        );
    }
}
