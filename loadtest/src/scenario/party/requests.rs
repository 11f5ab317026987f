//! The party's seat requests: rooms in apply mode, where members ask for a seat and the room's
//! owner answers. Per room:
//!
//! - a moderator, the room's owner: it creates the room (`seat_mode: "apply"`) before anyone
//!   else joins and makes the room's seat changers admins (in apply mode only the owner and
//!   admins take seats directly); then it approves every `seat.request` it is shown, as soon
//!   as it is shown it, and kicks each requester it seated `seat_hold_ms` later (`seat.kick`),
//!   so that the requester can ask again;
//! - `seat_requesters` members asking with `seat.request`, `seat_request_rate` requests per
//!   second over all rooms, the requesters in turn (one of each room, then the next, as the
//!   chat goes round). Once approved a requester reports its audio on (`mic.publishing`), as a
//!   client does, so the server's publish deadline never frees its seat first.
//!
//! The seat changers, as admins, are shown every request and how it ended (they do not
//! answer), and every member gets every `seat.update`: the seat requests add to the rooms'
//! traffic as they would live.
//!
//! Each of `seat.request`, `seat.approve` and `seat.kick` counts in a [`Shared`] of its own,
//! and so has its own reply latency: a request's from its intended send time, an approval's
//! from when its `seat.request` event reached the moderator, a kick's from when it was due. The
//! baseline server has no seat requests: these figures are Chorus' only.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::super::{Params, common_report, connect_and_join, connect_users, join_all, pace};
use super::Shape;
use crate::load::{Conn, Counted, Forward, Forwarded, Shared, close_all};
use crate::report::Report;
use crate::target::Target;

/// Events the reactor may fall behind by before a connection drops one (`FORWARD_FULL`).
const EVENTS_QUEUED: usize = 4096;
/// What a moderator hands on: the requests it is shown and the seats that change.
const MODERATOR_EVENTS: &[&str] = &["seat.request", "seat.update"];
/// What a requester hands on: how its request ended.
const REQUESTER_EVENTS: &[&str] = &["seat.request.update"];

/// The seat requests' connections and counters, ready to run.
pub(super) struct Requests {
    /// Room `k`'s owner.
    moderators: Vec<Conn>,
    /// Requester `i` is in room `i / per_room`.
    requesters: Vec<Conn>,
    per_room: usize,
    rooms: Vec<String>,
    /// The moderators' own counters: the room events they see (gaps).
    mods: Arc<Shared>,
    /// `seat.request`, sent by the requesters (their own counters).
    request: Arc<Shared>,
    /// `seat.approve`, sent by the moderators.
    approve: Arc<Shared>,
    /// `seat.kick`, sent by the moderators.
    kick: Arc<Shared>,
    /// `mic.publishing`, sent by the requesters once seated.
    publish: Arc<Shared>,
    events: Option<Events>,
}

/// Where the connections hand their events on.
struct Events {
    moderators: mpsc::Receiver<Forwarded>,
    requesters: mpsc::Receiver<Forwarded>,
}

/// The schedule's start and sends, as [`pace`] returns them.
pub(super) type Paced = (u64, u64);

impl Requests {
    /// Opens the rooms in apply mode, each created by its moderator, who joins it; then
    /// connects and joins the requesters. To run before anyone else joins the rooms (a join
    /// would create them in free mode).
    ///
    /// # Errors
    /// Connecting, creating or joining failed.
    pub(super) async fn open(
        target: &Target,
        p: &Params,
        shape: &Shape,
        prefix: &str,
        rooms: Vec<String>,
    ) -> anyhow::Result<Self> {
        let per_room = shape.seat_requesters;
        let seats =
            (shape.seaters + per_room).clamp(protocol::client::room::DEFAULT_SEATS as usize, 20);
        let mods = Shared::counting(Counted::NONE);
        let names: Vec<String> = (0..rooms.len()).map(|k| format!("{prefix}-m{k}")).collect();
        let moderators = connect_users(target, &names, p, &mods).await?;
        for (m, room) in moderators.iter().zip(&rooms) {
            let d = json!({ "room": room, "title": room, "seats": seats, "seat_mode": "apply" });
            m.request("room.create", d)
                .await
                .map_err(|e| anyhow::anyhow!("room.create {room} as {}: {e}", m.user))?;
        }
        join_all(&moderators, |k| rooms[k].clone(), p.connect_concurrency).await?;
        let request = Shared::counting(Counted::NONE);
        let names: Vec<String> = (0..rooms.len() * per_room)
            .map(|i| format!("{prefix}-q{i}"))
            .collect();
        let requesters =
            connect_and_join(target, &names, p, &request, |i| rooms[i / per_room].clone()).await?;
        let (mtx, mrx) = mpsc::channel(EVENTS_QUEUED);
        let (rtx, rrx) = mpsc::channel(EVENTS_QUEUED);
        for (k, m) in moderators.iter().enumerate() {
            m.forward(Forward::new(MODERATOR_EVENTS, k, mtx.clone()));
        }
        for (i, q) in requesters.iter().enumerate() {
            q.forward(Forward::new(REQUESTER_EVENTS, i, rtx.clone()));
        }
        Ok(Self {
            moderators,
            requesters,
            per_room,
            rooms,
            mods,
            request,
            approve: Shared::counting(Counted::NONE),
            kick: Shared::counting(Counted::NONE),
            publish: Shared::counting(Counted::NONE),
            events: Some(Events {
                moderators: mrx,
                requesters: rrx,
            }),
        })
    }

    /// Each room's owner makes `admins` admins, the same number of them in each room, in room
    /// order (they must have joined).
    ///
    /// # Errors
    /// A grant failed.
    pub(super) async fn grant_admins(&self, admins: &[String]) -> anyhow::Result<()> {
        let per_room = admins.len() / self.rooms.len().max(1);
        for (k, (m, room)) in self.moderators.iter().zip(&self.rooms).enumerate() {
            for a in admins.iter().skip(k * per_room).take(per_room) {
                let d = json!({ "room": room, "user": a, "admin": true });
                m.request("room.admin", d)
                    .await
                    .map_err(|e| anyhow::anyhow!("room.admin {a} in {room}: {e}"))?;
            }
        }
        Ok(())
    }

    /// Connections open for the seat requests.
    pub(super) fn connections(&self) -> usize {
        self.moderators.len() + self.requesters.len()
    }

    /// Sends the requests on their schedule while the moderators answer them; returns when the
    /// schedule has ended and every request has been answered, approved, kicked (or the drain
    /// ran out: `duration` + the hold + `drain` at most).
    pub(super) async fn run(
        &mut self,
        shape: &Shape,
        duration: Duration,
        drain: Duration,
    ) -> Paced {
        let Some(events) = self.events.take() else {
            return (self.request.now_ns(), 0);
        };
        let hold = Duration::from_millis(shape.seat_hold_ms);
        let stop = Instant::now() + duration + hold + drain;
        let done = AtomicBool::new(false);
        let me = &*self;
        // Requester order: one of each room, then the next of each (as the chat goes round).
        let order: Vec<usize> = (0..me.per_room)
            .flat_map(|m| (0..me.rooms.len()).map(move |k| k * me.per_room + m))
            .collect();
        let asking = async {
            let paced = pace(&me.request, shape.seat_request_rate, duration, |i, due| {
                let q = order[(i % order.len() as u64) as usize];
                let d = json!({ "room": me.rooms[q / me.per_room] });
                async move {
                    let _ = me.requesters[q].send_timed("seat.request", &d, due).await;
                }
            })
            .await;
            done.store(true, Ordering::Relaxed);
            paced
        };
        let (paced, ()) = tokio::join!(asking, me.react(events, hold, &done, stop));
        paced
    }

    /// Answers what the connections hand on until the schedule is `done` and nothing is left
    /// to answer, or until `stop`.
    async fn react(&self, mut ev: Events, hold: Duration, done: &AtomicBool, stop: Instant) {
        // Seated requesters to kick, (when, room, user), in the order they were seated.
        let mut kicks: VecDeque<(Instant, usize, String)> = VecDeque::new();
        let mut seen = Seen::default();
        loop {
            let next_kick = kicks.front().map(|k| k.0);
            tokio::select! {
                Some(f) = ev.moderators.recv() => match f.ev.as_str() {
                    "seat.request" => {
                        seen.requests += 1;
                        if let Some(user) = f.d["user"].as_str() {
                            let d = json!({ "room": self.rooms[f.tag], "user": user });
                            let at = ns_on(&self.approve, f.at);
                            let m = &self.moderators[f.tag];
                            let _ = m.send_timed_to("seat.approve", &d, at, &self.approve).await;
                        }
                    }
                    "seat.update" if f.d["reason"] == "approved" => {
                        seen.approved += 1;
                        // Moderator k is in room k only.
                        if let Some(user) = f.d["user"].as_str() {
                            kicks.push_back((f.at + hold, f.tag, user.to_owned()));
                        }
                    }
                    _ => {}
                },
                Some(f) = ev.requesters.recv() => {
                    if f.d["state"] == "approved" {
                        seen.seated += 1;
                        let d = json!({ "room": self.rooms[f.tag / self.per_room], "on": true });
                        let at = ns_on(&self.publish, f.at);
                        let q = &self.requesters[f.tag];
                        let _ = q.send_timed_to("mic.publishing", &d, at, &self.publish).await;
                    }
                }
                () = tokio::time::sleep_until(next_kick.unwrap_or(stop)), if next_kick.is_some() => {
                    if let Some((due, k, user)) = kicks.pop_front() {
                        let d = json!({ "room": self.rooms[k], "user": user });
                        let at = ns_on(&self.kick, due);
                        let _ = self.moderators[k].send_timed_to("seat.kick", &d, at, &self.kick).await;
                    }
                }
                () = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
            let settled = done.load(Ordering::Relaxed) && kicks.is_empty() && self.settled(&seen);
            if settled || Instant::now() >= stop {
                return;
            }
        }
    }

    /// Whether every request sent has been answered, every request shown approved (or
    /// refused), every approval seen through, and every kick and audio report answered.
    fn settled(&self, seen: &Seen) -> bool {
        let ok = |s: &Shared| s.ok.load(Ordering::Relaxed);
        [&self.request, &self.approve, &self.kick, &self.publish]
            .iter()
            .all(|s| s.unanswered() == 0)
            && seen.requests >= ok(&self.request)
            && seen.approved >= ok(&self.approve)
            && seen.seated >= ok(&self.approve)
    }

    /// Folds the seat requests' counts into `r` (as the party's other side traffic: see
    /// [`super::add_counts`]) and sets their reply latencies and the approvals and kicks that
    /// went through; `t0` is the schedule's start on the requests' clock.
    pub(super) fn record(&self, (t0, _): Paced, r: &mut Report) {
        let start = self.request.start + Duration::from_nanos(t0);
        let side = |s: &Shared| common_report(s, ns_on(s, start), 0, None, None);
        let (request, approve, kick) = (side(&self.request), side(&self.approve), side(&self.kick));
        let (publish, mods) = (side(&self.publish), side(&self.mods));
        super::add_counts(r, &[&request, &approve, &kick, &publish, &mods]);
        let sent = |s: &Report| (s.sent > 0).then(|| s.reply.clone());
        r.seat_request_reply = sent(&request);
        r.seat_approve_reply = sent(&approve);
        r.seat_kick_reply = sent(&kick);
        r.seats_approved = Some(approve.accepted);
        r.seats_kicked = Some(kick.accepted);
    }

    /// Closes every connection.
    pub(super) async fn close(self) {
        close_all(self.moderators).await;
        close_all(self.requesters).await;
    }
}

/// What the reactor has been shown so far.
#[derive(Debug, Default)]
struct Seen {
    /// `seat.request` events (moderators).
    requests: u64,
    /// `seat.update` events with reason `approved` (moderators).
    approved: u64,
    /// `seat.request.update` events with state `approved` (requesters).
    seated: u64,
}

/// `at` in nanoseconds on `shared`'s clock (0 before its start).
fn ns_on(shared: &Shared, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(shared.start).as_nanos()).unwrap_or(u64::MAX)
}
