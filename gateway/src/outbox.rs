//! The bounded per-socket queue of encoded frames. Overflow policy: Disconnect — a socket
//! whose queue passes its frame or byte bound is closed with 4000 (slow consumer), and the
//! client resumes with `since`.
//!
//! A plain `VecDeque` behind a short lock plus an `AtomicWaker`: an idle socket's queue holds no
//! allocation at all (a channel would keep a block of slots per connection).
//!
//! The outbox also carries the socket's liveness: when its peer was last heard and when its
//! token expires. One node-wide task ([`Outbox::beat`], driven by the gateway's heartbeat
//! loop) asks for pings and closes silent or expired sockets, so an idle socket's task holds
//! no timer of its own.

use std::collections::VecDeque;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::Poll;

use futures_util::task::AtomicWaker;
use protocol::error::close;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Utf8Bytes;

/// The origin of [`clock_ms`].
static CLOCK_ORIGIN: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Milliseconds since the Unix epoch (wall clock: token expiry, server time in `pong`).
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Milliseconds on the process's monotonic clock (tokio's, so paused-time tests see it move).
pub(crate) fn clock_ms() -> u64 {
    u64::try_from(CLOCK_ORIGIN.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[derive(Debug, Default)]
struct Queue {
    frames: Frames,
    bytes: usize,
}

/// The queued frames. A socket mostly holds one frame at a time (a room event, a reply), which
/// needs no allocation; only a burst takes a `VecDeque`, given back once it drains, so an idle
/// socket holds no memory here and a steady one allocates nothing per frame.
#[derive(Debug, Default)]
enum Frames {
    #[default]
    Empty,
    One(Utf8Bytes),
    Burst(VecDeque<Utf8Bytes>),
}

impl Frames {
    fn len(&self) -> usize {
        match self {
            Frames::Empty => 0,
            Frames::One(_) => 1,
            Frames::Burst(q) => q.len(),
        }
    }

    fn push_back(&mut self, frame: Utf8Bytes) {
        *self = match std::mem::take(self) {
            Frames::Empty => Frames::One(frame),
            Frames::One(first) => {
                let mut q = VecDeque::with_capacity(4);
                q.push_back(first);
                q.push_back(frame);
                Frames::Burst(q)
            }
            Frames::Burst(mut q) => {
                q.push_back(frame);
                Frames::Burst(q)
            }
        };
    }

    fn pop_front(&mut self) -> Option<Utf8Bytes> {
        match self {
            Frames::Empty => None,
            Frames::One(_) => match std::mem::take(self) {
                Frames::One(f) => Some(f),
                _ => None,
            },
            Frames::Burst(q) => {
                let f = q.pop_front();
                if q.is_empty() {
                    // Give the memory of a burst back: idle sockets must stay cheap.
                    *self = Frames::Empty;
                }
                f
            }
        }
    }
}

/// Why the server closes a socket from outside its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kick {
    /// The outbox overflowed: 4000.
    SlowConsumer = 1,
    /// The node is draining: 1001.
    GoingAway = 2,
    /// Nothing heard for two heartbeats: 4002.
    HeartbeatTimeout = 3,
    /// The token expired: 1008.
    TokenExpired = 4,
    /// The user's newer connections pushed this one over the per-user cap: 4001.
    TooManyConnections = 5,
    /// The platform suspended the user's account: 4003.
    Suspended = 6,
}

impl Kick {
    const ALL: [Kick; 6] = [
        Kick::SlowConsumer,
        Kick::GoingAway,
        Kick::HeartbeatTimeout,
        Kick::TokenExpired,
        Kick::TooManyConnections,
        Kick::Suspended,
    ];

    fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|k| *k as u8 == v)
    }

    /// The close code.
    pub(crate) const fn code(self) -> u16 {
        match self {
            Kick::SlowConsumer => close::SLOW_CONSUMER,
            Kick::GoingAway => close::GOING_AWAY,
            Kick::HeartbeatTimeout => close::HEARTBEAT_TIMEOUT,
            Kick::TokenExpired => close::POLICY,
            Kick::TooManyConnections => close::TOO_MANY_CONNECTIONS,
            Kick::Suspended => close::SUSPENDED,
        }
    }

    /// The close reason.
    pub(crate) const fn reason(self) -> &'static str {
        match self {
            Kick::SlowConsumer => "slow consumer",
            Kick::GoingAway => "server going away: reconnect elsewhere and resume",
            Kick::HeartbeatTimeout => "heartbeat timeout",
            Kick::TokenExpired => "token expired",
            Kick::TooManyConnections => "too many connections for this user",
            Kick::Suspended => "account suspended",
        }
    }
}

/// One socket's queue, shared by everything that writes to the socket and by its writer.
#[derive(Debug)]
pub(crate) struct Outbox {
    queue: Mutex<Queue>,
    /// The socket's task, waiting in [`Outbox::recv`]: a push wakes it without a lock (its
    /// only waiter is the socket's own task).
    ready: AtomicWaker,
    max_frames: u32,
    max_bytes: u32,
    /// The [`Kick`] asked for, 0 while none; set once, because every push checks it.
    kick: AtomicU8,
    /// The heartbeat asked for a ping.
    ping: AtomicBool,
    /// [`clock_ms`] when the peer was last heard from.
    heard: AtomicU64,
    /// When the socket's token expires, seconds since the Unix epoch (`auth.refresh` moves it).
    expires: AtomicU64,
    /// `session.expiring` was sent for the current expiry (a refresh that moves it clears
    /// this). Sits in the padding after `ping`.
    warned: AtomicBool,
    /// The connection acknowledges its direct messages (`?im_ack=1`): one queued here stays
    /// owed until acknowledged (`social/im.rs`). In the padding too: it costs nothing.
    im_ack: bool,
}

/// What the socket's writer takes from its outbox.
#[derive(Debug, PartialEq)]
pub(crate) enum Outgoing {
    /// A frame to write.
    Frame(Utf8Bytes),
    /// Send a ping.
    Ping,
    /// Close the socket.
    Close(Kick),
}

impl Outbox {
    /// A queue of at most `max_frames` frames and `max_bytes` bytes, for a socket whose token
    /// expires at `expires` (seconds since the Unix epoch); its peer counts as heard now.
    pub(crate) fn new(max_frames: usize, max_bytes: usize, expires: u64) -> Self {
        Self {
            queue: Mutex::new(Queue::default()),
            ready: AtomicWaker::new(),
            max_frames: u32::try_from(max_frames.max(1)).unwrap_or(u32::MAX),
            max_bytes: u32::try_from(max_bytes).unwrap_or(u32::MAX),
            kick: AtomicU8::new(0),
            ping: AtomicBool::new(false),
            heard: AtomicU64::new(clock_ms()),
            expires: AtomicU64::new(expires),
            warned: AtomicBool::new(false),
            im_ack: false,
        }
    }

    /// This outbox, for a connection that acknowledges its direct messages when `on`.
    pub(crate) fn with_im_ack(mut self, on: bool) -> Self {
        self.im_ack = on;
        self
    }

    /// Whether the connection acknowledges its direct messages.
    pub(crate) fn im_ack(&self) -> bool {
        self.im_ack
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a frame; on overflow the socket is kicked with 4000 and the frame dropped.
    /// Returns whether the frame was queued.
    pub(crate) fn push(&self, frame: Utf8Bytes) -> bool {
        if self.kick.load(Ordering::Relaxed) != 0 {
            return false;
        }
        {
            let mut q = self.lock();
            if q.frames.len() >= self.max_frames as usize
                || q.bytes + frame.len() > self.max_bytes as usize
            {
                drop(q);
                self.kick(Kick::SlowConsumer);
                return false;
            }
            q.bytes += frame.len();
            q.frames.push_back(frame);
        }
        self.ready.wake();
        true
    }

    /// Takes the next frame without waiting.
    pub(crate) fn try_recv(&self) -> Option<Utf8Bytes> {
        let mut q = self.lock();
        let f = q.frames.pop_front()?;
        q.bytes -= f.len();
        Some(f)
    }

    /// Waits for the next frame, ping or order to close (only the socket's writer calls this).
    /// A close wins over queued frames (the client resumes with `since`), except a drain's,
    /// which goes after them; a ping goes before them, so a socket busy with a backlog still
    /// proves it is alive.
    pub(crate) fn recv(&self) -> impl Future<Output = Outgoing> + '_ {
        std::future::poll_fn(move |cx| {
            if let Some(out) = self.take_next() {
                return Poll::Ready(out);
            }
            self.ready.register(cx.waker());
            // A push between the look above and the registration woke nobody: look again.
            self.take_next().map_or(Poll::Pending, Poll::Ready)
        })
    }

    fn take_next(&self) -> Option<Outgoing> {
        if let Some(kick) = self.kicked() {
            // A drain's 1001 goes after the frames queued before it (none is queued after a
            // kick): the last events and direct messages the client was sent reach it, since
            // a connection that does not acknowledge its direct messages counts one queued
            // as delivered. Every other close wins over the queue.
            if kick == Kick::GoingAway
                && let Some(f) = self.try_recv()
            {
                return Some(Outgoing::Frame(f));
            }
            return Some(Outgoing::Close(kick));
        }
        if self.ping.swap(false, Ordering::Relaxed) {
            return Some(Outgoing::Ping);
        }
        self.try_recv().map(Outgoing::Frame)
    }

    /// Asks the socket's task to close (the first kick asked for wins).
    pub(crate) fn kick(&self, kick: Kick) {
        let _ = self
            .kick
            .compare_exchange(0, kick as u8, Ordering::Release, Ordering::Relaxed);
        self.ready.wake();
    }

    /// The kick asked for, or `Pending` with the task woken when one is (only the socket's own
    /// task calls this, like `recv`).
    pub(crate) fn poll_kick(&self, cx: &mut std::task::Context<'_>) -> Poll<Kick> {
        if let Some(kick) = self.kicked() {
            return Poll::Ready(kick);
        }
        self.ready.register(cx.waker());
        self.kicked().map_or(Poll::Pending, Poll::Ready)
    }

    /// The kick asked for, if any.
    pub(crate) fn kicked(&self) -> Option<Kick> {
        Kick::from_u8(self.kick.load(Ordering::Acquire))
    }

    /// Notes that the peer was heard from (any frame, pongs included).
    pub(crate) fn heard(&self) {
        self.heard.store(clock_ms(), Ordering::Relaxed);
    }

    /// Moves the token's expiry to `exp` (seconds since the Unix epoch) unless it is already
    /// later; answers the expiry now. A move lets `session.expiring` be sent again.
    pub(crate) fn extend_expiry(&self, exp: u64) -> u64 {
        let before = self.expires.fetch_max(exp, Ordering::AcqRel);
        if exp > before {
            self.warned.store(false, Ordering::Release);
        }
        before.max(exp)
    }

    /// Queues `session.expiring` once when the token expires within `warn_secs` of
    /// `unix_secs`. Checked at connect and at a refresh as well as at every heartbeat tick,
    /// so a token already inside the window is warned at once, not a tick later.
    pub(crate) fn warn_if_expiring(&self, unix_secs: u64, warn_secs: u64) {
        let expires = self.expires.load(Ordering::Acquire);
        if unix_secs.saturating_add(warn_secs) >= expires
            && unix_secs < expires
            && !self.warned.swap(true, Ordering::AcqRel)
        {
            let frame = protocol::client::encode_event(
                "session.expiring",
                None,
                None,
                &protocol::client::Expiry { exp: expires },
            );
            if let Some(t) = crate::hub::text(frame) {
                self.push(t);
            }
        }
    }

    /// One heartbeat check at `now` ([`clock_ms`]) and `unix_secs`: closes the socket if its
    /// token expired or its peer has been silent for `silence_ms`, else asks for a ping when
    /// `ping` is set; within `warn_secs` of the expiry, queues `session.expiring` once.
    /// Returns the kick it made.
    pub(crate) fn beat(
        &self,
        now: u64,
        unix_secs: u64,
        silence_ms: u64,
        ping: bool,
        warn_secs: u64,
    ) -> Option<Kick> {
        self.warn_if_expiring(unix_secs, warn_secs);
        let expires = self.expires.load(Ordering::Acquire);
        let kick = if unix_secs >= expires {
            Some(Kick::TokenExpired)
        } else if now.saturating_sub(self.heard.load(Ordering::Relaxed)) >= silence_ms {
            Some(Kick::HeartbeatTimeout)
        } else {
            None
        };
        if let Some(k) = kick {
            self.kick(k);
        } else if ping {
            self.ping.store(true, Ordering::Relaxed);
            self.ready.wake();
        }
        kick
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token that expires in an hour.
    fn later() -> u64 {
        unix_ms() / 1000 + 3600
    }

    #[test]
    fn overflow_by_frames_kicks_with_4000() {
        let o = Outbox::new(2, 1 << 20, later());
        assert!(o.push("a".into()));
        assert!(o.push("b".into()));
        assert_eq!(o.kicked(), None);
        assert!(!o.push("c".into()));
        assert_eq!(o.kicked(), Some(Kick::SlowConsumer));
        assert_eq!(Kick::SlowConsumer.code(), close::SLOW_CONSUMER);
    }

    #[test]
    fn overflow_by_bytes_kicks_and_taking_frees_room() {
        let o = Outbox::new(100, 10, later());
        assert!(o.push("12345".into()));
        assert!(o.push("12345".into()));
        assert_eq!(o.try_recv().as_deref(), Some("12345"));
        assert!(o.push("12345".into()));
        assert_eq!(o.kicked(), None);
        assert!(!o.push("1".into()));
        assert_eq!(o.kicked(), Some(Kick::SlowConsumer));
    }

    #[test]
    fn frames_leave_in_order_through_single_frames_bursts_and_drains() {
        let o = Outbox::new(100, 1 << 20, later());
        let mut next = 0u32;
        let mut want = 0u32;
        // Queue depths 1, 2, 5, 1, 3: each is pushed, then drained, with a push in between.
        for depth in [1u32, 2, 5, 1, 3] {
            for _ in 0..depth {
                assert!(o.push(next.to_string().into()));
                next += 1;
            }
            assert_eq!(o.try_recv().as_deref(), Some(want.to_string().as_str()));
            want += 1;
            assert!(o.push(next.to_string().into()));
            next += 1;
            while let Some(f) = o.try_recv() {
                assert_eq!(f.as_str(), want.to_string());
                want += 1;
            }
            assert!(
                matches!(o.lock().frames, Frames::Empty),
                "a drained queue holds nothing"
            );
            assert_eq!(o.lock().bytes, 0);
        }
        assert_eq!(want, next);
    }

    /// The outbox lives in its own `Arc` allocation: with the `Arc`'s two counters it stays
    /// in the allocator's 128-byte class, so a connection pays nothing for the inline frame.
    #[test]
    fn an_outbox_fits_the_128_byte_class() {
        assert!(std::mem::size_of::<Outbox>() + 16 <= 128);
    }

    #[test]
    fn first_kick_wins() {
        let o = Outbox::new(1, 10, later());
        o.kick(Kick::TokenExpired);
        o.kick(Kick::SlowConsumer);
        assert_eq!(o.kicked(), Some(Kick::TokenExpired));
        assert_eq!(Kick::TokenExpired.code(), close::POLICY);
    }

    #[test]
    fn kicks_round_trip_through_their_byte() {
        for k in Kick::ALL {
            assert_eq!(Kick::from_u8(k as u8), Some(k));
        }
        assert_eq!(Kick::from_u8(0), None);
    }

    #[tokio::test]
    async fn recv_wakes_on_push_in_order() {
        let o = std::sync::Arc::new(Outbox::new(10, 1000, later()));
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

    /// A drain's close goes after the frames queued before it; a slow consumer's (or any
    /// other) close goes before them, and nothing is queued after a kick.
    #[tokio::test]
    async fn a_drain_close_follows_the_queue_and_other_closes_do_not() {
        let o = Outbox::new(10, 1000, later());
        o.push("dm".into());
        o.push("chat".into());
        o.kick(Kick::GoingAway);
        assert!(!o.push("late".into()));
        assert_eq!(o.recv().await, Outgoing::Frame("dm".into()));
        assert_eq!(o.recv().await, Outgoing::Frame("chat".into()));
        assert_eq!(o.recv().await, Outgoing::Close(Kick::GoingAway));
        for kick in [
            Kick::SlowConsumer,
            Kick::HeartbeatTimeout,
            Kick::TokenExpired,
            Kick::TooManyConnections,
        ] {
            let o = Outbox::new(10, 1000, later());
            o.push("x".into());
            o.kick(kick);
            assert_eq!(o.recv().await, Outgoing::Close(kick));
        }
    }

    #[tokio::test]
    async fn a_kick_wakes_the_writer_with_its_code() {
        let o = std::sync::Arc::new(Outbox::new(10, 1000, later()));
        let o2 = o.clone();
        let t = tokio::spawn(async move { o2.recv().await });
        o.kick(Kick::GoingAway);
        assert_eq!(t.await.unwrap(), Outgoing::Close(Kick::GoingAway));
        assert!(!o.push("late".into()), "nothing is queued after a kick");
    }

    #[tokio::test]
    async fn a_beat_asks_for_one_ping_ahead_of_queued_frames() {
        let o = Outbox::new(10, 1000, later());
        o.push("x".into());
        let now = clock_ms();
        assert_eq!(o.beat(now, later() - 3600, 1000, true, 0), None);
        assert_eq!(o.recv().await, Outgoing::Ping);
        assert_eq!(o.recv().await, Outgoing::Frame("x".into()));
        // A beat outside the socket's ping slot only checks.
        assert_eq!(o.beat(now, later() - 3600, 1000, false, 0), None);
        assert_eq!(o.try_recv(), None);
        assert!(!o.ping.load(Ordering::Relaxed));
    }

    #[test]
    fn a_silent_peer_is_closed_and_hearing_from_it_resets_the_clock() {
        let o = Outbox::new(10, 1000, later());
        let unix = later() - 3600;
        let t0 = o.heard.load(Ordering::Relaxed);
        assert_eq!(o.beat(t0 + 999, unix, 1000, true, 0), None);
        o.heard.store(t0 + 500, Ordering::Relaxed);
        assert_eq!(o.beat(t0 + 1499, unix, 1000, true, 0), None);
        assert_eq!(
            o.beat(t0 + 1500, unix, 1000, true, 0),
            Some(Kick::HeartbeatTimeout)
        );
        assert_eq!(o.kicked(), Some(Kick::HeartbeatTimeout));
        assert_eq!(Kick::HeartbeatTimeout.code(), close::HEARTBEAT_TIMEOUT);
    }

    #[test]
    fn an_expired_token_closes_with_1008() {
        let exp = later();
        let o = Outbox::new(10, 1000, exp);
        assert_eq!(o.beat(clock_ms(), exp - 1, 1000, false, 0), None);
        assert_eq!(
            o.try_recv(),
            None,
            "a warning time of 0 sends no session.expiring"
        );
        assert_eq!(
            o.beat(clock_ms(), exp, 1000, false, 0),
            Some(Kick::TokenExpired)
        );
    }

    #[test]
    fn session_expiring_goes_once_per_expiry_and_a_refresh_moves_the_close() {
        let exp = later();
        let o = Outbox::new(10, 1000, exp);
        let now = clock_ms();
        assert_eq!(o.beat(now, exp - 61, 1000, false, 60), None);
        assert_eq!(o.try_recv(), None, "not yet inside the warning time");
        assert_eq!(o.beat(now, exp - 60, 1000, false, 60), None);
        let warned = o.try_recv().expect("session.expiring queued");
        assert!(
            warned.as_str().contains(r#""ev":"session.expiring""#),
            "{warned}"
        );
        assert!(
            warned.as_str().contains(&format!(r#""exp":{exp}"#)),
            "{warned}"
        );
        assert_eq!(o.beat(now, exp - 30, 1000, false, 60), None);
        assert_eq!(o.try_recv(), None, "once");
        // A refresh: an earlier expiry changes nothing, a later one moves the close and
        // lets the warning come again before it.
        assert_eq!(o.extend_expiry(exp - 100), exp);
        assert_eq!(o.extend_expiry(exp + 100), exp + 100);
        assert_eq!(
            o.beat(now, exp, 1000, false, 60),
            None,
            "not closed at the old expiry"
        );
        assert_eq!(o.try_recv(), None);
        assert_eq!(o.beat(now, exp + 40, 1000, false, 60), None);
        assert!(o.try_recv().is_some(), "warned again for the new expiry");
        assert_eq!(
            o.beat(now, exp + 100, 1000, false, 60),
            Some(Kick::TokenExpired)
        );
    }
}
