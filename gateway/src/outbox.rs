//! The bounded per-socket queue of encoded frames. Overflow policy: Disconnect — a socket
//! whose queue passes its frame or byte bound is closed with 4000 (slow consumer), and the
//! client resumes with `since`.
//!
//! A plain `VecDeque` behind a short lock plus a `Notify`: an idle socket's queue holds no
//! allocation at all (a channel would keep a block of slots per connection).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use protocol::error::close;
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::Utf8Bytes;

#[derive(Debug, Default)]
struct Queue {
    frames: VecDeque<Utf8Bytes>,
    bytes: usize,
}

/// One socket's queue, shared by everything that writes to the socket and by its writer.
#[derive(Debug)]
pub(crate) struct Outbox {
    queue: Mutex<Queue>,
    ready: Notify,
    max_frames: usize,
    max_bytes: usize,
    /// Set once the socket must close; a plain atomic, because every push checks it.
    kicked: AtomicBool,
    kick_code: AtomicU16,
}

/// What the socket's writer takes from its outbox.
#[derive(Debug, PartialEq)]
pub(crate) enum Outgoing {
    /// A frame to write.
    Frame(Utf8Bytes),
    /// Close the socket with this code.
    Close(u16),
}

impl Outbox {
    /// A queue of at most `max_frames` frames and `max_bytes` bytes.
    pub(crate) fn new(max_frames: usize, max_bytes: usize) -> Self {
        Self {
            queue: Mutex::new(Queue::default()),
            ready: Notify::new(),
            max_frames: max_frames.max(1),
            max_bytes,
            kicked: AtomicBool::new(false),
            kick_code: AtomicU16::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a frame; on overflow the socket is kicked with 4000 and the frame dropped.
    /// Returns whether the frame was queued.
    pub(crate) fn push(&self, frame: Utf8Bytes) -> bool {
        if self.kicked.load(Ordering::Relaxed) {
            return false;
        }
        {
            let mut q = self.lock();
            if q.frames.len() >= self.max_frames || q.bytes + frame.len() > self.max_bytes {
                drop(q);
                self.kick(close::SLOW_CONSUMER);
                return false;
            }
            q.bytes += frame.len();
            q.frames.push_back(frame);
        }
        self.ready.notify_one();
        true
    }

    /// Takes the next frame without waiting.
    pub(crate) fn try_recv(&self) -> Option<Utf8Bytes> {
        let mut q = self.lock();
        let f = q.frames.pop_front()?;
        q.bytes -= f.len();
        if q.frames.is_empty() {
            // Give the memory of a burst back: idle sockets must stay cheap.
            q.frames = VecDeque::new();
        }
        Some(f)
    }

    /// Waits for the next frame, or the order to close (only the socket's writer calls this).
    /// A close wins over queued frames: the client resumes with `since`.
    pub(crate) async fn recv(&self) -> Outgoing {
        loop {
            if self.kicked.load(Ordering::Acquire) {
                return Outgoing::Close(self.kick_code());
            }
            if let Some(f) = self.try_recv() {
                return Outgoing::Frame(f);
            }
            self.ready.notified().await;
        }
    }

    /// Asks the socket's task to close with `code` (the first code asked for wins).
    pub(crate) fn kick(&self, code: u16) {
        let _ = self
            .kick_code
            .compare_exchange(0, code, Ordering::Relaxed, Ordering::Relaxed);
        self.kicked.store(true, Ordering::Release);
        self.ready.notify_one();
    }

    /// Whether the socket was told to close.
    #[cfg(test)]
    pub(crate) fn is_kicked(&self) -> bool {
        self.kicked.load(Ordering::Relaxed)
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
        let o = Outbox::new(2, 1 << 20);
        assert!(o.push("a".into()));
        assert!(o.push("b".into()));
        assert!(!o.is_kicked());
        assert!(!o.push("c".into()));
        assert!(o.is_kicked());
        assert_eq!(o.kick_code(), close::SLOW_CONSUMER);
    }

    #[test]
    fn overflow_by_bytes_kicks_and_taking_frees_room() {
        let o = Outbox::new(100, 10);
        assert!(o.push("12345".into()));
        assert!(o.push("12345".into()));
        assert_eq!(o.try_recv().as_deref(), Some("12345"));
        assert!(o.push("12345".into()));
        assert!(!o.is_kicked());
        assert!(!o.push("1".into()));
        assert_eq!(o.kick_code(), close::SLOW_CONSUMER);
    }

    #[test]
    fn first_kick_code_wins() {
        let o = Outbox::new(1, 10);
        o.kick(1008);
        o.kick(4000);
        assert_eq!(o.kick_code(), 1008);
    }

    #[tokio::test]
    async fn recv_wakes_on_push_in_order() {
        let o = std::sync::Arc::new(Outbox::new(10, 1000));
        let o2 = o.clone();
        let t = tokio::spawn(async move { (o2.recv().await, o2.recv().await) });
        o.push("x".into());
        o.push("y".into());
        let (a, b) = t.await.unwrap();
        assert_eq!(
            (a, b),
            (Outgoing::Frame("x".into()), Outgoing::Frame("y".into()))
        );
    }

    #[tokio::test]
    async fn a_kick_wakes_the_writer_with_its_code() {
        let o = std::sync::Arc::new(Outbox::new(10, 1000));
        let o2 = o.clone();
        let t = tokio::spawn(async move { o2.recv().await });
        o.kick(1001);
        assert_eq!(t.await.unwrap(), Outgoing::Close(1001));
        assert!(!o.push("late".into()), "nothing is queued after a kick");
    }
}
