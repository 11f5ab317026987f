//! The bounded per-socket queue of encoded frames. Overflow policy: Disconnect — a socket
//! whose queue passes its frame or byte bound is closed with 4000 (slow consumer), and the
//! client resumes with `since`.

use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio_tungstenite::tungstenite::Utf8Bytes;
use tokio_util::sync::CancellationToken;

use protocol::error::close;

/// The sending side of one socket's queue, shared by everything that writes to the socket.
#[derive(Debug)]
pub(crate) struct Outbox {
    tx: mpsc::Sender<Utf8Bytes>,
    queued_bytes: AtomicUsize,
    max_bytes: usize,
    kick: CancellationToken,
    kick_code: AtomicU16,
}

/// The receiving side, owned by the socket's task.
#[derive(Debug)]
pub(crate) struct OutboxRx {
    pub(crate) rx: mpsc::Receiver<Utf8Bytes>,
}

impl Outbox {
    /// A queue of at most `max_frames` frames and `max_bytes` bytes.
    pub(crate) fn new(max_frames: usize, max_bytes: usize) -> (Self, OutboxRx) {
        let (tx, rx) = mpsc::channel(max_frames.max(1));
        (
            Self {
                tx,
                queued_bytes: AtomicUsize::new(0),
                max_bytes,
                kick: CancellationToken::new(),
                kick_code: AtomicU16::new(0),
            },
            OutboxRx { rx },
        )
    }

    /// Queues a frame; on overflow the socket is kicked with 4000 and the frame dropped.
    /// Returns whether the frame was queued.
    pub(crate) fn push(&self, frame: Utf8Bytes) -> bool {
        let len = frame.len();
        if self.queued_bytes.load(Ordering::Relaxed) + len > self.max_bytes {
            self.kick(close::SLOW_CONSUMER);
            return false;
        }
        match self.tx.try_send(frame) {
            Ok(()) => {
                self.queued_bytes.fetch_add(len, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Full(_)) => {
                self.kick(close::SLOW_CONSUMER);
                false
            }
            Err(TrySendError::Closed(_)) => false,
        }
    }

    /// Marks `len` bytes as taken off the queue by the writer.
    pub(crate) fn taken(&self, len: usize) {
        self.queued_bytes.fetch_sub(len, Ordering::Relaxed);
    }

    /// Asks the socket's task to close with `code` (the first code asked for wins).
    pub(crate) fn kick(&self, code: u16) {
        let _ = self
            .kick_code
            .compare_exchange(0, code, Ordering::Relaxed, Ordering::Relaxed);
        self.kick.cancel();
    }

    /// Cancelled when the socket must close.
    pub(crate) fn kicked(&self) -> &CancellationToken {
        &self.kick
    }

    /// The close code asked for by [`Outbox::kick`].
    pub(crate) fn kick_code(&self) -> u16 {
        self.kick_code.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_by_frames_kicks_with_4000() {
        let (o, _rx) = Outbox::new(2, 1 << 20);
        assert!(o.push("a".into()));
        assert!(o.push("b".into()));
        assert!(!o.kicked().is_cancelled());
        assert!(!o.push("c".into()));
        assert!(o.kicked().is_cancelled());
        assert_eq!(o.kick_code(), close::SLOW_CONSUMER);
    }

    #[test]
    fn overflow_by_bytes_kicks_and_taking_frees_room() {
        let (o, mut rx) = Outbox::new(100, 10);
        assert!(o.push("12345".into()));
        assert!(o.push("12345".into()));
        let f = rx.rx.try_recv().unwrap();
        o.taken(f.len());
        assert!(o.push("12345".into()));
        assert!(!o.kicked().is_cancelled());
        assert!(!o.push("1".into()));
        assert_eq!(o.kick_code(), close::SLOW_CONSUMER);
    }

    #[test]
    fn first_kick_code_wins() {
        let (o, _rx) = Outbox::new(1, 10);
        o.kick(1008);
        o.kick(4000);
        assert_eq!(o.kick_code(), 1008);
    }
}
