//! A write the socket could not take at once, run while the client's frames are still read.
//!
//! A client far behind its room keeps a write to it waiting for seconds; its own frames (its
//! requests, its pongs) are read and handled meanwhile, in order, their replies queued behind
//! the batch under way. Its task stays one task: one future polls the write, the write
//! time-out, the outbox's kick and the client's next frame. A close decided meanwhile (a kick,
//! a flood, the client's own close) stops the reading and gives the write
//! [`KICKED_WRITE_GRACE`] to finish, then the connection ends, without a close frame if the
//! write did not finish (the stream may stop inside a frame).

use std::ops::ControlFlow;
use std::task::{Context, Poll, ready};

use futures_util::SinkExt;
use protocol::error::close;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use super::{Batch, Closing, KICKED_WRITE_GRACE, Session, poll_message};
use crate::sock::Sock;
use crate::wire;

/// What is left of a write: a ping to hand to tungstenite, or a batch of our frames.
pub(super) struct Write {
    /// A ping for tungstenite to send (the heartbeat's).
    ping: bool,
    /// Our frames still to write (all of them sent: empty).
    frames: Batch,
    /// Bytes of `frames` written. Above zero, the stream is inside the batch: tungstenite may
    /// not write (see `sock.rs`), and a write given up here leaves no room for a close frame.
    written: usize,
}

impl Write {
    /// The heartbeat's ping.
    pub(super) fn ping() -> Self {
        Self {
            ping: true,
            frames: Batch::new(),
            written: 0,
        }
    }

    /// A batch of which `written` bytes went out already.
    pub(super) fn frames(frames: Batch, written: usize) -> Self {
        Self {
            ping: false,
            frames,
            written,
        }
    }

    /// Drives the write; `Err` when the socket failed. tungstenite's bytes (the ping, a pong it
    /// holds: `flush_owed`) go out whole before our frames start or after they end.
    fn poll(
        &mut self,
        ws: &mut WebSocketStream<Sock>,
        flush_owed: &mut bool,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), ()>> {
        if self.ping {
            ready!(ws.poll_ready_unpin(cx)).map_err(drop)?;
            ws.start_send_unpin(Message::Ping(Default::default()))
                .map_err(drop)?;
            self.ping = false;
            *flush_owed = true;
        }
        loop {
            if self.written == 0 && *flush_owed {
                ready!(ws.poll_flush_unpin(cx)).map_err(drop)?;
                *flush_owed = false;
            }
            if self.frames.is_empty() {
                return Poll::Ready(Ok(()));
            }
            let tcp = ws.get_ref().tcp();
            if wire::try_write_text_frames(tcp, &self.frames, &mut self.written).map_err(drop)? {
                // Whole: the stream is between frames again, and a pong queued meanwhile
                // may follow.
                self.frames.clear();
                self.written = 0;
            } else {
                ready!(tcp.poll_write_ready(cx)).map_err(drop)?;
            }
        }
    }
}

impl Session {
    /// Runs `w` under the write time-out while reading the client's frames; `Err` with how
    /// the connection ends (see the module doc).
    pub(super) async fn blocked(
        &mut self,
        ws: &mut WebSocketStream<Sock>,
        mut w: Box<Write>,
    ) -> Result<(), Option<Closing>> {
        let timer = tokio::time::sleep(self.core.config.write_timeout);
        tokio::pin!(timer);
        // A close decided while the write runs: the connection ends once the write does.
        let mut ending: Option<Option<Closing>> = None;
        // The timer was moved to the end of the grace.
        let mut graced = false;
        std::future::poll_fn(|cx| {
            loop {
                match w.poll(ws, &mut self.flush_owed, cx) {
                    Poll::Ready(Ok(())) => return Poll::Ready(ending.take().map_or(Ok(()), Err)),
                    Poll::Ready(Err(())) => return Poll::Ready(Err(None)),
                    Poll::Pending => {}
                }
                if timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(self.gave_up(&w, ending.take(), graced)));
                }
                if ending.is_some() {
                    return Poll::Pending;
                }
                let end = match self.outbox.poll_kick(cx) {
                    Poll::Ready(kick) => Some(Closing::new(kick.code(), kick.reason())),
                    Poll::Pending => match self.read_while(ws, &w, cx) {
                        Poll::Ready(end) => end,
                        Poll::Pending => return Poll::Pending,
                    },
                };
                ending = Some(end);
                let grace = Instant::now() + KICKED_WRITE_GRACE;
                if grace < timer.deadline() {
                    timer.as_mut().reset(grace);
                    graced = true;
                }
                // Round again: the write may be done, and the timer must see its new deadline.
            }
        })
        .await
    }

    /// Reads and handles the client's frames until none is ready (`Pending`) or one ends the
    /// connection (`Ready`, with the close: `None` when the client closed or is gone).
    fn read_while(
        &mut self,
        ws: &mut WebSocketStream<Sock>,
        w: &Write,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Closing>> {
        loop {
            // Inside a batch of ours, tungstenite's read may not write its pong.
            let hold = w.written > 0;
            ws.get_mut().hold(hold);
            let msg = poll_message(ws, &mut self.drained, cx);
            ws.get_mut().hold(false);
            let Poll::Ready(msg) = msg else {
                return Poll::Pending;
            };
            if let ControlFlow::Break(end) = self.on_message(msg) {
                return Poll::Ready(end);
            }
            // A frame's reply may have overflowed the outbox: that close is not put off.
            if let Some(kick) = self.outbox.kicked() {
                return Poll::Ready(Some(Closing::new(kick.code(), kick.reason())));
            }
        }
    }

    /// How the connection ends when the timer runs out on `w`: at the end of the grace given
    /// to a close decided meanwhile, that close (without a frame: the stream may stop inside
    /// one); else at the write time-out, 4000.
    fn gave_up(
        &mut self,
        w: &Write,
        ending: Option<Option<Closing>>,
        graced: bool,
    ) -> Option<Closing> {
        match ending {
            Some(Some(c)) if graced => Some(Closing {
                with_frame: false,
                ..c
            }),
            // The client closed (or is gone): its close is answered only if the stream is
            // between frames.
            Some(None) => {
                self.mid_frame = w.written > 0;
                None
            }
            _ => Some(Closing {
                code: close::SLOW_CONSUMER,
                reason: "slow consumer",
                // Once bytes of this batch went out the stream may end inside a frame, and no
                // close frame may follow (PROTOCOL.md: a slow consumer may see the connection
                // end without 4000).
                with_frame: w.written == 0,
            }),
        }
    }
}
