//! Publishing from a room: each sequenced event stored, then sent once per gateway; presence
//! on the volatile lane by the room's presence plan; replies; and the links to the gateways.

use std::collections::HashMap;

use bytes::Bytes;
use protocol::client::{self, MemberCount};
use protocol::link::{Audience, Command, Membership, Reply, ReplyError, RoomEvent, ToGateway};
use protocol::{NodeId, SessionId};
use smallvec::SmallVec;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::state::{Applied, Presence, PresencePlan, Rejected, RoomState, SessionRef};
use super::{NOT_PUBLISHED, OUTCOME_UNKNOWN, RoomActor};
use crate::metrics as m;

impl RoomActor {
    /// The gateways with members in the room, copied out so that sending may borrow the
    /// actor; inline for the usual one or two, so a published event allocates no list.
    pub(super) fn gateways(&self) -> SmallVec<[NodeId; 2]> {
        self.state
            .as_ref()
            .map(|s| s.gateways().cloned().collect())
            .unwrap_or_default()
    }

    /// Encodes each sequenced event once, records it for resume and sends one copy per
    /// gateway; then publishes presence on the volatile lane.
    ///
    /// `Err` when the change was not stored: in a cluster its events and state (one write) did
    /// not reach the fenced store, or the write was fenced; standalone, its state write was
    /// fenced. Nobody saw its events and no owner will replay them, so the command's sender
    /// must not be told it took effect. The runtime then stops without saving, and the next
    /// command starts a new one (a new epoch) from the last saved state, which agrees with the
    /// history. Members only ever see events a new owner can replay (docs/ARCHITECTURE.md, section 6:
    /// never a silent gap).
    pub(super) async fn publish(
        &mut self,
        applied: Applied,
        joiner: Option<&SessionRef>,
    ) -> Result<(), Rejected> {
        let Some(state) = &self.state else {
            return Ok(());
        };
        if self.lease.is_cancelled() {
            // An earlier write of this runtime failed or was fenced (or its lease is gone):
            // its change is in no history, so nothing after it may be written or broadcast,
            // or the members would see the next position with that one missing. The runtime
            // stops at its next turn; the next one starts a new epoch from the stored state.
            return Err(NOT_PUBLISHED);
        }
        self.due_stale |= applied.durable_changed || applied.rearm;
        let (gift_coins, durable_changed) = (
            super::directory::gift_coins(&applied),
            applied.durable_changed,
        );
        let now = Instant::now();
        let epoch = state.epoch();
        let mut frames: SmallVec<[Bytes; 2]> = SmallVec::with_capacity(applied.events.len());
        for (seq, ev) in &applied.events {
            let frame = ev.encode(&self.room, epoch, *seq);
            self.log.push(epoch, *seq, frame.clone(), now);
            frames.push(frame);
        }
        // What this change stored: with a fenced history (cluster) its events and its state
        // go in one write, all or none; standalone keeps no history, and saves the state alone.
        let written = if self.inner.config.durable_history {
            // Write-ahead: an event is in the fenced history before anyone sees it, so a new
            // owner can replay everything any client saw, from the state that holds it.
            let entries: SmallVec<[(protocol::Seq, &[u8]); 2]> = applied
                .events
                .iter()
                .zip(&frames)
                .map(|((seq, _), frame)| (*seq, &frame[..]))
                .collect();
            let durable = applied.durable_changed.then(|| state.durable());
            let closed = std::mem::take(&mut self.closing);
            let change = storage::snapshot::Change {
                entries: &entries,
                state: None,
                closed: &closed,
                more_waiting: self.more_waiting,
            };
            self.inner
                .snapshots
                .write_change(
                    &self.room,
                    self.fence,
                    change,
                    durable,
                    self.inner.config.history_events,
                )
                .await
        } else if applied.durable_changed {
            self.inner
                .snapshots
                .save(&self.room, self.fence, state.durable())
                .await
                .map(Some)
        } else {
            Ok(None)
        };
        match written {
            Ok(Some(w)) => self.saved = Some(w),
            Ok(None) => {}
            Err(storage::StorageError::Fenced { token }) => {
                // Someone else owns the room now: publish nothing, stop.
                metrics::counter!(m::FENCED_WRITES_REJECTED).increment(1);
                warn!(room = %self.room, token, "Room write fenced; stopping the runtime.");
                self.lease.cancel();
                return Err(NOT_PUBLISHED);
            }
            Err(e) if self.inner.config.durable_history => {
                // Broadcasting it anyway would show members an event no new owner can replay:
                // a silent gap for whoever resumes across that owner.
                metrics::counter!(m::HISTORY_WRITE_FAILURES).increment(1);
                warn!(room = %self.room, error = %e, "History write failed; stopping the runtime.");
                self.lease.cancel();
                // A write that went unanswered may still land: the command must not be sent
                // again for it, or a later owner would apply it twice.
                return Err(match e {
                    storage::StorageError::Unavailable { .. } => OUTCOME_UNKNOWN,
                    _ => NOT_PUBLISHED,
                });
            }
            Err(e) => {
                warn!(room = %self.room, error = %e, "Snapshot write failed.");
                metrics::counter!(m::SNAPSHOT_WRITE_FAILURES).increment(1);
                // The stop writes it again.
                self.saved = None;
            }
        }
        if !applied.events.is_empty() || !applied.broadcast.is_empty() {
            if let Some(hold) = self.inner.config.test_hold_before_broadcast {
                info!(room = %self.room, "Test hold before broadcast.");
                tokio::time::sleep(hold).await;
            }
            // The deadline before every side effect (ARCHITECTURE.md, section 4). The writes above
            // awaited, and the process may have been frozen meanwhile: past its deadline the
            // runtime broadcasts nothing. What it wrote is in the fenced history, from which a
            // new owner replays it to the members it evicts when they rejoin. Without a fenced
            // history (standalone: one process, in-process leases) no other node can own the
            // room, and withholding would only lose the event.
            if self.inner.config.durable_history && !self.inner.owner.proven(&self.valid) {
                metrics::counter!(m::BROADCASTS_WITHHELD).increment(1);
                warn!(room = %self.room, fence = self.fence, "Lease deadline passed while publishing; stopping.");
                self.lease.cancel();
                // In the fenced history: it happened, and reaches the members by replay. (A
                // volatile message is not sent at all: it promised no delivery.)
                return Ok(());
            }
        }
        let gws = self.gateways();
        for ((seq, _), frame) in applied.events.iter().zip(frames) {
            self.inner.hot.events_sequenced.increment(1);
            for gw in &gws {
                self.send_event(gw, Audience::All, frame.clone(), Some((epoch, *seq)))
                    .await;
            }
        }
        self.notify(&applied);
        for frame in applied.broadcast {
            for gw in &gws {
                self.send_event(gw, Audience::All, frame.clone(), None)
                    .await;
            }
        }
        for p in applied.presence {
            self.publish_presence(p, joiner).await;
        }
        for d in applied.direct {
            self.publish_direct(&d.to, d.frame).await;
        }
        for e in applied.evicted {
            let frame = super::room_left(&self.room, e.reason);
            let audience = Audience::Evict(vec![e.at.session]);
            self.send_event(&e.at.gateway, audience, frame, None).await;
        }
        if self.member_count() == 0 {
            self.idle_since = Instant::now();
        }
        self.list_note(gift_coins, durable_changed);
        Ok(())
    }

    /// Sends a volatile event to the listed members who are in the room now.
    async fn publish_direct(&mut self, to: &[protocol::UserId], frame: Bytes) {
        let sessions: Vec<SessionRef> = match &self.state {
            Some(state) => to.iter().filter_map(|u| state.member(u)).cloned().collect(),
            None => return,
        };
        for (gw, sessions) in by_gateway(sessions) {
            self.send_event(&gw, Audience::Only(sessions), frame.clone(), None)
                .await;
        }
    }

    pub(super) async fn publish_presence(&mut self, p: Presence, joiner: Option<&SessionRef>) {
        let Some(state) = &self.state else { return };
        let frame = p.encode(&self.room);
        debug!(room = %self.room, user = %p.user(), "Presence.");
        match state.presence_plan(&p, self.inner.config.presence_full_max) {
            PresencePlan::Everyone => {
                for gw in self.gateways() {
                    // Session ids are per gateway: exclude the joiner on its own gateway only.
                    let audience = match joiner {
                        Some(j) if j.gateway == gw => Audience::AllBut(j.session),
                        _ => Audience::All,
                    };
                    self.send_event(&gw, audience, frame.clone(), None).await;
                }
            }
            PresencePlan::Privileged(sessions) => {
                for (gw, sessions) in by_gateway(sessions) {
                    self.send_event(&gw, Audience::Only(sessions), frame.clone(), None)
                        .await;
                }
                // Listeners see the new count, coalesced.
                self.count_dirty |= p.counts();
            }
        }
    }

    pub(super) async fn publish_count(&mut self) {
        self.count_dirty = false;
        self.last_count = Instant::now();
        let count = self.member_count() as u64;
        let frame = client::encode_event(
            "member.count",
            Some(&self.room),
            None,
            &MemberCount { count },
        );
        for gw in self.gateways() {
            self.send_event(&gw, Audience::All, frame.clone(), None)
                .await;
        }
    }

    /// When the next `room.likes` may go out (None: no likes wait).
    pub(super) fn likes_due(&self) -> Option<Instant> {
        let every = self.inner.config.likes_interval.as_millis() as u64;
        self.state.as_ref()?.likes_due(every).map(super::instant_at)
    }

    /// Announces the likes that wait: the total is written with the room's state first, so a
    /// total any member saw survives a crash of this owner.
    pub(super) async fn publish_likes(&mut self) {
        let now = super::now_ms();
        let Some(applied) = self.state.as_mut().and_then(|s| s.take_likes(now)) else {
            return;
        };
        // A write that fails stops the runtime; the next owner goes on from the saved total.
        let _ = self.publish(applied, None).await;
    }

    /// Every member's session, grouped by gateway.
    pub(super) fn sessions_by_gateway(&self) -> HashMap<NodeId, Vec<SessionId>> {
        let members = self.state.as_ref().into_iter().flat_map(RoomState::members);
        by_gateway(members.map(|(_, at)| at.clone()))
    }

    pub(super) fn link(&mut self, gw: &NodeId) -> Option<crate::gateway_link::GatewayLink> {
        if let Some(tx) = self.gateways.get(gw)
            && !tx.is_closed()
        {
            return Some(tx.clone());
        }
        let tx = self.inner.link_to(gw)?;
        self.gateways.insert(gw.clone(), tx.clone());
        Some(tx)
    }

    /// Sends one room event to gateway `gw`; `position` for a sequenced one.
    pub(super) async fn send_event(
        &mut self,
        gw: &NodeId,
        audience: Audience,
        frame: Bytes,
        position: Option<(protocol::Epoch, protocol::Seq)>,
    ) {
        let Some(tx) = self.link(gw) else { return };
        let ev = ToGateway::Event(RoomEvent {
            room: self.room.clone(),
            audience,
            position,
            frame,
        });
        // Block policy: a gateway's link reader never waits on rooms, so this cannot deadlock.
        if tx.send(ev).await.is_err() {
            self.gateways.remove(gw);
        }
    }

    pub(super) async fn reply(
        &mut self,
        cmd: &Command,
        outcome: Result<Bytes, ReplyError>,
        membership: Option<Membership>,
    ) {
        let Some(tx) = self.link(&cmd.gateway) else {
            return;
        };
        let reply = ToGateway::Reply(Reply {
            req: cmd.req,
            session: cmd.session,
            user: cmd.user.clone(),
            client_id: cmd.client_id,
            room: self.room.clone(),
            membership,
            outcome,
        });
        if tx.send(reply).await.is_err() {
            self.gateways.remove(&cmd.gateway);
        }
    }
}

/// Sessions grouped by the gateway that holds them.
pub(super) fn by_gateway(
    sessions: impl IntoIterator<Item = SessionRef>,
) -> HashMap<NodeId, Vec<SessionId>> {
    let mut out: HashMap<NodeId, Vec<SessionId>> = HashMap::new();
    for at in sessions {
        out.entry(at.gateway).or_default().push(at.session);
    }
    out
}
