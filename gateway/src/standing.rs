//! A member's standing at the gateway: the guards a user holds and their lifetime gift spend,
//! read from the ledger when a connection opens (and again on a join once it is older than
//! [`STANDING_MAX_AGE_MS`]), kept with the user's local sessions (sent with their joins) and
//! sent to the rooms they are in (`RoomCmd::Standing`), where it becomes the `guard` and `vip`
//! badges.
//!
//! Reads are batched: a user asked for joins a queue, and one task at a time reads the whole
//! queue in one ledger call ([`Ledger::standings`]; one turn on SQLite's reader), so a burst of
//! thousands of connects costs one queued id per user, not one task and one reader turn each.

use std::sync::{Arc, Mutex, PoisonError};

use protocol::link::{HeldGuard, RoomCmd, Standing};
use protocol::{SessionId, UserId};
use storage::ledger::{Guard, Ledger, now_ms};
use tracing::warn;

use crate::shared::Core;

/// How long a session's standing is taken as fresh: a join reads it again (in the background)
/// only after this, so the ledger sees at most two reads per user per this long from joins.
/// Within a room the VIP level follows the member's gifts there without any read.
pub(crate) const STANDING_MAX_AGE_MS: u64 = 30_000;

/// Most users one batched read asks for; a longer queue is read in turns of this many.
const STANDING_BATCH: usize = 256;

/// The users whose standing is to be read, and whether a task is reading.
#[derive(Debug, Default)]
pub(crate) struct StandingQueue {
    state: Mutex<QueueState>,
}

#[derive(Debug, Default)]
struct QueueState {
    users: Vec<UserId>,
    reading: bool,
}

impl StandingQueue {
    /// Queues `user`; true when the caller must start the reading task (none runs).
    fn push(&self, user: UserId) -> bool {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.users.push(user);
        !std::mem::replace(&mut st.reading, true)
    }

    /// The next batch, at most [`STANDING_BATCH`] users, each once; empty (and the reader
    /// marked gone) when nothing is queued.
    fn next_batch(&self) -> Vec<UserId> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if st.users.is_empty() {
            st.reading = false;
            st.users = Vec::new();
            return Vec::new();
        }
        let take = st.users.len().min(STANDING_BATCH);
        let mut batch: Vec<UserId> = st.users.drain(..take).collect();
        batch.sort_unstable();
        batch.dedup();
        batch
    }
}

/// The standing of one user as the ledger returns it.
fn standing(guards: Vec<Guard>, spent: i64) -> Standing {
    Standing {
        guards: guards
            .into_iter()
            .map(|g| HeldGuard {
                host: g.host,
                until: u64::try_from(g.expires_ms).unwrap_or(0),
            })
            .collect(),
        spent,
    }
}

/// The standing of `user` from the ledger now: the guards they hold and their lifetime spend.
pub(crate) async fn standing_of(ledger: &Ledger, user: &UserId) -> storage::Result<Standing> {
    let (guards, spent) = ledger.standing(user, now_ms()).await?;
    Ok(standing(guards, spent))
}

impl Core {
    /// At connect and at each `room.join`: reads `user`'s standing again when `session`'s is
    /// older than [`STANDING_MAX_AGE_MS`] (the join goes on with the one held; a change follows
    /// it to the room).
    pub(crate) fn refresh_standing_if_stale(self: &Arc<Self>, session: SessionId, user: &UserId) {
        if self.standing_read_needed(session, user) {
            self.refresh_standing(user);
        }
    }

    /// Whether `session`'s standing must be read: there is a ledger, the user is no robot,
    /// and what the session holds is older than [`STANDING_MAX_AGE_MS`] (or absent).
    fn standing_read_needed(&self, session: SessionId, user: &UserId) -> bool {
        let now = u64::try_from(now_ms()).unwrap_or(0);
        self.money.ledger.is_some()
            && !user.is_robot()
            && self.hub.standing_stale(session, now, STANDING_MAX_AGE_MS)
    }

    /// Reads `user`'s standing from the ledger in the background (with the other users
    /// queued) and applies it when it differs from what their sessions hold.
    pub(crate) fn refresh_standing(self: &Arc<Self>, user: &UserId) {
        if self.money.ledger.is_none() || user.is_robot() {
            return;
        }
        if self.standing_queue.push(user.clone()) {
            let core = self.clone();
            self.tracker
                .spawn(async move { core.read_queued_standings().await });
        }
    }

    /// The reading task: reads the queue batch by batch until it is empty.
    async fn read_queued_standings(self: Arc<Self>) {
        let Some(ledger) = &self.money.ledger else {
            return;
        };
        loop {
            let users = self.standing_queue.next_batch();
            if users.is_empty() {
                return;
            }
            if let Some(gate) = &self.config.test_hold_standing_reads {
                // Closed: released for good.
                let _permit = gate.acquire().await;
            }
            match ledger.standings(&users, now_ms()).await {
                Ok(read) => {
                    for (user, (guards, spent)) in users.iter().zip(read) {
                        self.standing_applied(user, standing(guards, spent));
                    }
                }
                Err(e) => {
                    warn!(users = users.len(), error = %e, "Could not read users' guards.");
                }
            }
        }
    }

    /// Tells the other gateways holding `user`'s connections that their standing changed.
    pub(crate) fn standing_changed_elsewhere(self: &Arc<Self>, user: &UserId) {
        let core = self.clone();
        let user = user.clone();
        self.tracker.spawn(async move {
            let gateways = match core.gateways_of(&user).await {
                Ok(g) => g,
                Err(e) => {
                    warn!(%user, error = %e, "Registry unreachable; a guard shows on this gateway only.");
                    return;
                }
            };
            let notice = crate::social::Notice::Standing { user };
            for gw in gateways.iter().filter(|g| **g != core.node) {
                core.notify(gw, &notice).await;
            }
        });
    }

    /// `user`'s standing is now `s` on this gateway: their sessions send it with their joins
    /// from now on, and each room they are in hears it (`RoomCmd::Standing`).
    pub(crate) fn standing_applied(&self, user: &UserId, s: Standing) {
        let mut rooms = self.hub.set_standing(user, &s);
        rooms.sort_by(|a, b| a.1.cmp(&b.1));
        rooms.dedup_by(|a, b| a.1 == b.1);
        for (session, room) in rooms {
            let cmd = RoomCmd::Standing(s.clone());
            self.send_command(session, user, None, room, cmd, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_batches_dedupes_and_hands_over_the_reader() {
        let q = StandingQueue::default();
        let u = |s: &str| UserId::from(s);
        assert!(q.push(u("b")), "the first push starts the reader");
        assert!(!q.push(u("a")), "a reader runs");
        assert!(!q.push(u("b")));
        assert_eq!(q.next_batch(), vec![u("a"), u("b")]);
        assert!(q.next_batch().is_empty(), "drained: the reader stops");
        assert!(q.push(u("c")), "the next push starts a reader again");
        for i in 0..STANDING_BATCH + 3 {
            q.push(u(&format!("u{i}")));
        }
        assert_eq!(q.next_batch().len(), STANDING_BATCH);
        assert_eq!(q.next_batch().len(), 4, "the rest, c included");
        assert!(q.next_batch().is_empty());
    }
}
