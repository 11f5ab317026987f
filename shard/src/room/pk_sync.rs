//! A PK between two rooms at run time: while one is on, the room writes its side to the board
//! and reads the other room's, once per `rocket_progress_ms`, one exchange at a time, and hands
//! each answer to its rule (`state/pk_link.rs`). The exchange runs in a task, so the room goes
//! on serving while the board answers; a new runtime of the room (a move, a restart) starts
//! its own exchanges from the PK in its durable state.

use std::time::Duration;

use protocol::RoomId;
use storage::StorageError;
use storage::pk_board::PkSide;
use tracing::warn;

use super::{RoomActor, RoomMsg, now_ms};

/// How long the board keeps a match after its last write (ms): past the grace of any side.
const KEEP_MS: u64 = 3_600_000;

/// The board's answer to one exchange ([`RoomMsg::PkBoard`]).
#[derive(Debug)]
pub(crate) struct PkAnswer {
    link: String,
    wrote: PkSide,
    theirs: Result<Option<PkSide>, StorageError>,
}

impl RoomActor {
    /// Starts the room's exchanges with the board, unless they run already or no PK between
    /// two rooms is on.
    pub(super) fn pk_sync_start(&mut self) {
        if !self.rocket.pk_syncing {
            self.pk_exchange();
        }
    }

    /// One exchange: writes the room's side as it is now; the answer comes back to the room
    /// as [`RoomMsg::PkBoard`]. Ends the exchanges when no PK between two rooms is on.
    pub(super) fn pk_exchange(&mut self) {
        let now = now_ms();
        let Some((link, _, side)) = self.state.as_ref().and_then(|s| s.pk_side(now)) else {
            self.rocket.pk_syncing = false;
            return;
        };
        self.rocket.pk_syncing = true;
        let board = self.inner.pk_board.clone();
        let room: RoomId = self.room.clone();
        let weak = self.self_tx.clone();
        self.inner.tracker.spawn(async move {
            let theirs = board.exchange(&link, &room, side, KEEP_MS, now).await;
            let answer = PkAnswer {
                link,
                wrote: side,
                theirs,
            };
            if let Some(tx) = weak.upgrade() {
                let _ = tx.send(Box::new(RoomMsg::PkBoard(Box::new(answer)))).await;
            }
        });
    }

    /// The board answered: the rule takes the other side (a score, a close, the end), and the
    /// next exchange comes after the progress interval while the PK is on.
    pub(super) async fn pk_answer(&mut self, answer: PkAnswer) {
        let Some(state) = self.state.as_mut() else {
            return;
        };
        let now = now_ms();
        let outcome = if answer.theirs.is_ok() {
            "ok"
        } else {
            "failed"
        };
        metrics::counter!(crate::metrics::PK_EXCHANGES, "outcome" => outcome).increment(1);
        match answer.theirs {
            Ok(theirs) => {
                let (applied, moved) = state.pk_their_side(&answer.link, answer.wrote, theirs, now);
                self.rocket.pk_dirty |= moved;
                if applied.durable_changed || !applied.events.is_empty() {
                    // A change that could not be stored stops the runtime; the next goes on.
                    let _ = self.publish(applied, None).await;
                }
            }
            Err(e) => {
                warn!(room = %self.room, error = %e, "Could not exchange a PK's scores with the other room.");
            }
        }
        if self.state.as_ref().and_then(|s| s.pk_side(now)).is_none() {
            self.rocket.pk_syncing = false;
            return;
        }
        let every = Duration::from_millis(self.inner.config.rocket.progress_interval_ms.max(1));
        let weak = self.self_tx.clone();
        let shutdown = self.inner.shutdown.clone();
        self.inner.tracker.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = shutdown.cancelled() => return,
            }
            if let Some(tx) = weak.upgrade() {
                let _ = tx.send(Box::new(RoomMsg::PkSync)).await;
            }
        });
    }
}
