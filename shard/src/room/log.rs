//! The room's recent sequenced events, for resume: bounded by count and by age.
//!
//! The log may span epochs: a new owner seeds it with the history the previous owners wrote
//! through the fenced store, so a client whose gap is still retained resumes across a change
//! of owner without a resync.

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

#[derive(Debug)]
struct Entry {
    epoch: Epoch,
    seq: Seq,
    at: Instant,
    frame: Bytes,
}

/// Recent events, oldest first.
#[derive(Debug)]
pub(crate) struct EventLog {
    entries: VecDeque<Entry>,
    max_events: usize,
    max_age: Duration,
    /// Seeded from the room's stored history (it loaded), and no event dropped since: if that
    /// history was empty, every event the room ever stored is here.
    whole: bool,
}

impl EventLog {
    /// An empty log keeping at most `max_events` events no older than `max_age`.
    pub(crate) fn new(max_events: usize, max_age: Duration) -> Self {
        Self {
            entries: VecDeque::new(),
            max_events,
            max_age,
            whole: false,
        }
    }

    /// Marks the log as seeded from the room's whole stored history (it loaded); dropping
    /// any event later ends that.
    pub(crate) fn set_whole(&mut self) {
        self.whole = true;
    }

    /// Whether every event held is of `epoch` (none seeded from an earlier runtime).
    fn only_epoch(&self, epoch: Epoch) -> bool {
        self.entries.iter().all(|e| e.epoch == epoch)
    }

    /// Whether an event held names gift order `order` (its `gift` event, or a `gift.lucky` or
    /// `rocket.launch` naming it): the gift's event was published.
    pub(crate) fn names_order(&self, order: &uuid::Uuid) -> bool {
        let needle = format!("\"order\":\"{order}\"");
        let needle = needle.as_bytes();
        self.entries
            .iter()
            .any(|e| e.frame.windows(needle.len()).any(|w| w == needle))
    }

    /// Records event `(epoch, seq)` as sent at `now`.
    pub(crate) fn push(&mut self, epoch: Epoch, seq: Seq, frame: Bytes, now: Instant) {
        self.entries.push_back(Entry {
            epoch,
            seq,
            at: now,
            frame,
        });
        while self.entries.len() > self.max_events {
            self.whole = false;
            self.entries.pop_front();
        }
        self.expire(now);
    }

    /// The frame of event `(epoch, seq)`, while the log holds it.
    pub(crate) fn frame(&self, epoch: Epoch, seq: Seq) -> Option<&Bytes> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.epoch == epoch && e.seq == seq)
            .map(|e| &e.frame)
    }

    /// The text of the chat line at `(epoch, seq)`, as the room sent it, while the log holds
    /// it (`None` too when that event is not a chat line).
    pub(crate) fn chat_text(&self, epoch: Epoch, seq: Seq) -> Option<String> {
        #[derive(serde::Deserialize)]
        struct Frame {
            ev: String,
            d: Line,
        }
        #[derive(serde::Deserialize)]
        struct Line {
            text: String,
        }
        let f: Frame = serde_json::from_slice(self.frame(epoch, seq)?).ok()?;
        (f.ev == "chat").then_some(f.d.text)
    }

    /// Drops events older than the age bound.
    pub(crate) fn expire(&mut self, now: Instant) {
        while let Some(e) = self.entries.front() {
            if now.saturating_duration_since(e.at) > self.max_age {
                self.whole = false;
                self.entries.pop_front();
            } else {
                break;
            }
        }
    }

    /// What a client that last saw `since` needs, when the room is at `(epoch, seq)`.
    /// Never a partial replay: either every missed event, or a resync.
    pub(crate) fn resume(&mut self, since: Since, epoch: Epoch, seq: Seq, now: Instant) -> Resume {
        self.expire(now);
        if since.epoch == epoch && since.seq == seq {
            return Resume::Replay(Vec::new());
        }
        // The client saw this exact event: replay everything after it.
        if let Some(i) = self
            .entries
            .iter()
            .position(|e| e.epoch == since.epoch && e.seq == since.seq)
        {
            return Resume::Replay(
                self.entries
                    .iter()
                    .skip(i + 1)
                    .map(|e| e.frame.clone())
                    .collect(),
            );
        }
        // The event right after the client's is retained (e.g. the first of an epoch).
        if let Some(i) = self
            .entries
            .iter()
            .position(|e| e.epoch == since.epoch && e.seq == since.seq + 1)
        {
            return Resume::Replay(
                self.entries
                    .iter()
                    .skip(i)
                    .map(|e| e.frame.clone())
                    .collect(),
            );
        }
        // The client joined a runtime that published nothing (`(E, 0)`, E older than the
        // room's epoch), and the log still holds an event of an epoch before E: had epoch E
        // published anything, it would be retained (the log drops the oldest first, and a new
        // owner seeds it from the fenced history). What the client missed is every later event.
        if since.seq == 0
            && since.epoch < epoch
            && !self.entries.iter().any(|e| e.epoch == since.epoch)
            && self.entries.iter().any(|e| e.epoch < since.epoch)
        {
            return Resume::Replay(
                self.entries
                    .iter()
                    .filter(|e| e.epoch > since.epoch)
                    .map(|e| e.frame.clone())
                    .collect(),
            );
        }
        // The same when the room's stored history was empty (loaded, so no runtime before
        // this one ever published an event: a room moved before its first one), and this
        // runtime dropped none of its own: the client missed exactly this runtime's events.
        if since.seq == 0 && since.epoch < epoch && self.whole && self.only_epoch(epoch) {
            return Resume::Replay(self.entries.iter().map(|e| e.frame.clone()).collect());
        }
        Resume::Resync
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(epoch: Epoch, seq: Seq) -> Bytes {
        Bytes::from(format!("{epoch}:{seq}"))
    }

    fn log_with(epoch: Epoch, n: Seq, max: usize) -> (EventLog, Instant) {
        let now = Instant::now();
        let mut log = EventLog::new(max, Duration::from_secs(60));
        for s in 1..=n {
            log.push(epoch, s, frame(epoch, s), now);
        }
        (log, now)
    }

    fn since(epoch: Epoch, seq: Seq) -> Since {
        Since { epoch, seq }
    }

    #[test]
    fn replays_exactly_the_missed_events() {
        let (mut log, now) = log_with(3, 10, 100);
        let r = log.resume(since(3, 7), 3, 10, now);
        assert_eq!(
            r,
            Resume::Replay(vec![frame(3, 8), frame(3, 9), frame(3, 10)])
        );
        let r = log.resume(since(3, 0), 3, 10, now);
        assert_eq!(r, Resume::Replay((1..=10).map(|s| frame(3, s)).collect()));
        assert_eq!(log.resume(since(3, 10), 3, 10, now), Resume::Replay(vec![]));
    }

    #[test]
    fn resyncs_beyond_history_other_epoch_or_future_seq() {
        let (mut log, now) = log_with(3, 10, 4);
        // Retained 7..=10: since 6 is fillable, since 5 is not.
        assert!(matches!(log.resume(since(3, 6), 3, 10, now), Resume::Replay(v) if v.len() == 4));
        assert_eq!(log.resume(since(3, 5), 3, 10, now), Resume::Resync);
        assert_eq!(log.resume(since(2, 9), 3, 10, now), Resume::Resync);
        assert_eq!(log.resume(since(3, 11), 3, 10, now), Resume::Resync);
        assert_eq!(log.resume(since(3, 0), 3, 10, now), Resume::Resync);
    }

    #[test]
    fn replays_across_a_change_of_owner() {
        let (mut log, now) = log_with(3, 5, 100);
        // The new owner (epoch 7) continues after the history of epoch 3.
        log.push(7, 1, frame(7, 1), now);
        log.push(7, 2, frame(7, 2), now);
        let r = log.resume(since(3, 4), 7, 2, now);
        assert_eq!(
            r,
            Resume::Replay(vec![frame(3, 5), frame(7, 1), frame(7, 2)])
        );
        // A client that saw the last old event resumes into the new epoch.
        let r = log.resume(since(3, 5), 7, 2, now);
        assert_eq!(r, Resume::Replay(vec![frame(7, 1), frame(7, 2)]));
        // A client that saw an old event the history never got: resync, never a silent gap.
        assert_eq!(log.resume(since(3, 6), 7, 2, now), Resume::Resync);
    }

    #[test]
    fn resumes_from_an_epoch_that_published_nothing() {
        let (mut log, now) = log_with(3, 4, 100);
        for s in 1..=2 {
            log.push(7, s, frame(7, s), now);
        }
        // Epoch 5 ran between 3 and 7 and published nothing: its members missed 7's events.
        let r = log.resume(since(5, 0), 7, 2, now);
        assert_eq!(r, Resume::Replay(vec![frame(7, 1), frame(7, 2)]));
        // Nothing before epoch 5 retained: epoch 5's events may have been dropped. Resync.
        let (mut log, now) = log_with(7, 2, 100);
        assert_eq!(log.resume(since(5, 0), 7, 2, now), Resume::Resync);
        // A later epoch than the room's, or one that did publish: the other rules.
        let (mut log, now) = log_with(3, 4, 100);
        assert_eq!(log.resume(since(9, 0), 3, 4, now), Resume::Resync);
        assert_ne!(log.resume(since(3, 0), 3, 4, now), Resume::Resync);
    }

    /// A room moved before its first event: the new owner loaded an empty history, so the
    /// members of the epoch that published nothing missed exactly the new runtime's events.
    /// Not without the whole history (a failed load), nor once the log dropped one of them,
    /// nor when any loaded event came from an earlier runtime (that history may be trimmed).
    #[test]
    fn resumes_from_a_silent_epoch_when_the_history_was_empty() {
        let now = Instant::now();
        let mut log = EventLog::new(3, Duration::from_secs(60));
        log.set_whole();
        assert_eq!(log.resume(since(5, 0), 7, 0, now), Resume::Replay(vec![]));
        log.push(7, 1, frame(7, 1), now);
        assert_eq!(
            log.resume(since(5, 0), 7, 1, now),
            Resume::Replay(vec![frame(7, 1)])
        );
        // Dropped by the count bound: no longer whole.
        for s in 2..=4 {
            log.push(7, s, frame(7, s), now);
        }
        assert_eq!(log.resume(since(5, 0), 7, 4, now), Resume::Resync);
        // Not loaded: never whole.
        let mut unloaded = EventLog::new(3, Duration::from_secs(60));
        assert_eq!(unloaded.resume(since(5, 0), 7, 0, now), Resume::Resync);
        // Loaded with events of epoch 6 (none of 5, none before): 5's may have been trimmed.
        let mut loaded = EventLog::new(100, Duration::from_secs(60));
        loaded.push(6, 1, frame(6, 1), now);
        loaded.set_whole();
        assert_eq!(loaded.resume(since(5, 0), 7, 0, now), Resume::Resync);
    }

    #[test]
    fn names_an_order_its_events_carry() {
        let (mut log, now) = log_with(1, 3, 10);
        let order = uuid::Uuid::from_u128(7);
        assert!(!log.names_order(&order));
        let gift = format!(
            r#"{{"ev":"gift","room":"r","epoch":1,"seq":4,"d":{{"order":"{order}","from":"a"}}}}"#
        );
        log.push(1, 4, Bytes::from(gift), now);
        assert!(log.names_order(&order));
        assert!(!log.names_order(&uuid::Uuid::from_u128(8)));
    }

    #[test]
    fn old_events_expire_by_age() {
        let now = Instant::now();
        let mut log = EventLog::new(100, Duration::from_secs(5));
        log.push(1, 1, frame(1, 1), now);
        log.push(1, 2, frame(1, 2), now + Duration::from_secs(4));
        let later = now + Duration::from_secs(6);
        assert_eq!(log.resume(since(1, 0), 1, 2, later), Resume::Resync);
        assert_eq!(
            log.resume(since(1, 1), 1, 2, later),
            Resume::Replay(vec![frame(1, 2)])
        );
        assert_eq!(log.resume(since(1, 2), 1, 2, later), Resume::Replay(vec![]));
    }
}
