//! How a room's runtime ends: it stops taking commands, hands its state, in-flight gifts and
//! members on (a handoff, an idle unload, a lost lease or shutdown), and forgets a gateway
//! that went away.

use super::*;

impl RoomActor {
    pub(super) async fn stop(
        &mut self,
        stop: Stop,
        mut rx: mpsc::Receiver<Box<RoomMsg>>,
        generation: u64,
    ) {
        let handoff_started = Instant::now();
        self.stop_robots();
        self.list_remove();
        if let Stop::Handoff(_) = &stop {
            // Gifts whose saga is running finish here, so their events reach the members.
            self.finish_in_flight_gifts(&mut rx).await;
        }
        // Gift orders a storm held back: their merged events go out now, or are owed.
        self.end_storm(stop == Stop::LeaseLost || self.lease.is_cancelled())
            .await;
        // A write of this runtime failed, was fenced or withheld its broadcast (the lease is
        // cancelled): the stored state and the history may hold what members never saw, so
        // no handoff at the last position and no final save; the members rejoin on their own,
        // from their own positions, as after a lost lease (a shutdown stays a shutdown, for
        // the commands that raced with it).
        let broken = self.lease.is_cancelled();
        let stop = match stop {
            Stop::Handoff(_) | Stop::Idle if broken => {
                warn!(room = %self.room, ?stop, "A write of this runtime did not hold: stopping as with a lost lease.");
                if let Stop::Handoff(_) = &stop {
                    self.inner.rebalance.done(&self.room);
                }
                Stop::LeaseLost
            }
            other => other,
        };
        // The sagas still running finish on their own task; their senders get answers there.
        self.sagas.finish_without_room(&self.inner, &self.in_flight);
        self.inner.unregister(&self.room, generation);
        rx.close();
        // Commands that raced with the stop go to a fresh runtime (which claims the lease
        // again, or answers UNAVAILABLE with the new owner), except when the node stops.
        let mut pending = std::mem::take(&mut self.deferred);
        while let Some(msg) = rx.recv().await {
            match *msg {
                RoomMsg::Command(cmd) => pending.push(cmd),
                // A settled gift's event this runtime will not publish now: the next one does.
                RoomMsg::GiftRecovered(order) => {
                    gifts::owe_event(&self.inner, &self.room, order.gift_id).await;
                }
                RoomMsg::GatewayGone(_)
                | RoomMsg::Sweep
                | RoomMsg::Handoff(_)
                | RoomMsg::Inspect(_)
                | RoomMsg::Robots(_)
                | RoomMsg::RocketPaid(_)
                | RoomMsg::PkSync
                | RoomMsg::PkBoard(_)
                | RoomMsg::Expire(_) => {}
            }
        }
        // Save and release first: the new owner can claim the moment the gateways ask it.
        // (Not after a write that did not hold: a node shutting down then only forgets.)
        if stop != Stop::LeaseLost && !broken {
            if let (Stop::Handoff(_), Some(state)) = (&stop, self.state.as_mut()) {
                // The members go with the room: the new owner keeps them (away) until they
                // rejoin, so a planned move shows no presence.
                let roster = state.roster();
                state.set_roster(roster);
            }
            if let Some(state) = &self.state {
                if Snapshots::unchanged(state.durable(), self.saved) {
                    // Every change was written as it happened: nothing to save, and the new
                    // owner (or the next load) reads the same state.
                    metrics::counter!(m::SNAPSHOT_WRITES_SKIPPED).increment(1);
                } else if let Err(e) = self
                    .inner
                    .snapshots
                    .save(&self.room, self.fence, state.durable())
                    .await
                {
                    warn!(room = %self.room, error = %e, "Final snapshot write failed.");
                }
            }
            self.inner.owner.release(&self.room, self.fence).await;
            // Members were here: the room counts as joined until now (retention).
            self.touch_on_stop().await;
        } else {
            self.inner.owner.forget(&self.room, self.fence);
        }
        if let Stop::Handoff(to) = &stop {
            // The gateways rejoin their sessions at the new owner from the last event they
            // delivered: clients keep their place and see no room.left.
            // The position of the last event every member was sent: the gateways resume from
            // it at the new owner.
            let position = self.state.as_ref().map(|s| (s.epoch(), s.seq()));
            let by_gw = self.sessions_by_gateway();
            for (gw, sessions) in by_gw {
                let audience = Audience::Moved {
                    sessions,
                    to: to.clone(),
                };
                self.send_event(&gw, audience, Bytes::new(), position).await;
            }
        } else if self.member_count() > 0 {
            let frame = room_left(&self.room, "unavailable");
            let by_gw = self.sessions_by_gateway();
            for (gw, sessions) in by_gw {
                self.send_event(&gw, Audience::Evict(sessions), frame.clone(), None)
                    .await;
            }
        }
        for cmd in pending {
            match &stop {
                Stop::Shutdown => {
                    let err = ReplyError::new(ErrorCode::Unavailable, "node is shutting down");
                    self.inner.reply_direct(&cmd, Err(err), None).await;
                }
                Stop::Handoff(to) => {
                    let err = ReplyError {
                        code: ErrorCode::Unavailable,
                        msg: "room moved; retry".into(),
                        owner_hint: Some(to.clone()),
                        outcome_unknown: false,
                    };
                    self.inner.reply_direct(&cmd, Err(err), None).await;
                }
                _ => self.inner.dispatch_command(cmd),
            }
        }
        if let Stop::Handoff(to) = &stop {
            let took = handoff_started.elapsed();
            metrics::histogram!(m::HANDOFF_SECONDS).record(took.as_secs_f64());
            self.inner.rebalance.done(&self.room);
            info!(room = %self.room, to = %to, took_ms = took.as_millis() as u64, "Room handed off.");
        } else {
            // A handoff sent to this runtime as it stopped for another reason ends here, now
            // that the room is released and its members told.
            self.inner.rebalance.dropped(&self.room, generation);
        }
    }

    /// Waits (bounded) for the gift sagas this runtime started, publishing their outcomes;
    /// commands that arrive meanwhile are kept for the stop.
    async fn finish_in_flight_gifts(&mut self, rx: &mut mpsc::Receiver<Box<RoomMsg>>) {
        let deadline = Instant::now() + HANDOFF_GIFT_WAIT;
        while !self.sagas.is_empty() {
            tokio::select! {
                () = sleep_until(deadline) => return,
                Some(done) = self.sagas.next() => self.gift_done(done).await,
                m = rx.recv() => {
                    let Some(m) = m else { return };
                    match *m {
                        RoomMsg::Command(cmd) => self.deferred.push(cmd),
                        RoomMsg::GiftRecovered(order) => self.gift_recovered(order).await,
                        _ => {}
                    }
                }
            }
        }
    }

    /// Takes every member connected through gateway `gw` out of the room.
    pub(super) async fn gateway_gone(&mut self, gw: &NodeId) {
        let Some(state) = self.state.as_mut() else {
            return;
        };
        let gone: Vec<(UserId, SessionRef)> = state
            .members()
            .filter(|(_, at)| at.gateway == *gw)
            .map(|(u, at)| (u.clone(), at.clone()))
            .collect();
        for (user, at) in gone {
            let Some(state) = self.state.as_mut() else {
                return;
            };
            if let Ok(applied) = state.disconnect(&user, &at, now_ms())
                && self.publish(applied, None).await.is_err()
            {
                break;
            }
        }
        self.gateways.remove(gw);
    }
}
