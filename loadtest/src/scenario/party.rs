//! A voice-room party: rooms whose members chat while gift bursts and seat changes hit them,
//! all at once, so that each kind of traffic is measured under the others. Per room:
//!
//! - `members` chatters, each sending `rate` timed chat messages per second (the chat's
//!   delivery and reply latency, and its losses, are the report's main figures);
//! - `gifters` funded senders: every `1 / bursts_per_sec` seconds one room (the rooms in turn)
//!   takes a burst of `burst_gifts` gifts at `burst_rate` gifts/s from its gifters, each to one
//!   of its chatters, as when a host calls for gifts (reply and event latency, settled gifts,
//!   balances and the ledger's conservation checked at the end);
//! - `seaters` taking a seat and leaving it in turn, `seat_rate` changes per second over all
//!   rooms (reply latency; `NO_FREE_SEAT` is an answer, not a failure);
//! - `listeners` leaving the room and joining it again in turn, `join_rate` changes per second
//!   over all rooms, as listeners come and go (reply latency; a rejoin takes the room's position
//!   from its reply, so the events it missed while away are not gaps);
//! - with `seat_requesters` (off by default), seat requests in apply mode: members asking for
//!   a seat, the room's owner approving each request it is shown and kicking the requester a
//!   while later, so that it asks again (see `party/requests.rs`; each op's reply latency apart).
//!
//! Each kind counts in a [`Shared`] of its own, over its own connections: a chatter counts the
//! chat it receives, a gifter the gift events. Every connection still checks every room event's
//! seq, so a gap anywhere is seen. The baseline server answers seat and membership changes
//! without their events, and knows no seat requests: a party runs against it (`--compare`)
//! without them only, and the seat requests' figures are Chorus' alone.

mod requests;

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;

use super::gifts::{check_balances, conserved, grant_all, has_rocket};
use super::{Params, Progress, common_report, connect_and_join, drain, pace, pace_by, run_prefix};
use crate::load::{Counted, Shared, close_all};
use crate::report::{Latency, Report};
use crate::target::Target;

/// The party's sizes and side traffic (the `party` command's flags); the scenario's rate is the
/// chat's, per chatter.
#[derive(Debug, Clone, Copy, PartialEq, clap::Args)]
pub struct Shape {
    /// Rooms.
    #[arg(long, default_value_t = 100)]
    pub rooms: usize,
    /// Chatters per room.
    #[arg(long, default_value_t = 10)]
    pub members: usize,
    /// Gift senders per room (funded through the admin API first).
    #[arg(long, default_value_t = 4)]
    pub gifters: usize,
    /// Seat changers per room (each takes a seat, then leaves it, in turn).
    #[arg(long, default_value_t = 4)]
    pub seaters: usize,
    /// Gift bursts per second over all rooms; each burst hits one room, the rooms in turn.
    #[arg(long, default_value_t = 2.0)]
    pub bursts_per_sec: f64,
    /// Gifts per burst.
    #[arg(long, default_value_t = 100)]
    pub burst_gifts: usize,
    /// Gifts per second within a burst.
    #[arg(long, default_value_t = 5000.0)]
    pub burst_rate: f64,
    /// Seat changes per second over all rooms.
    #[arg(long, default_value_t = 100.0)]
    pub seat_rate: f64,
    /// Listeners per room (each leaves the room, then joins it again, in turn).
    #[arg(long, default_value_t = 4)]
    pub listeners: usize,
    /// Leaves and rejoins per second over all rooms.
    #[arg(long, default_value_t = 100.0)]
    pub join_rate: f64,
    /// Seat requesters per room: with any, each room is created in apply mode by an owner
    /// that approves every `seat.request` and kicks the requester `--seat-hold-ms` later (its
    /// seat changers are made admins, who still take seats directly). 0, the default, leaves
    /// seat requests out and the rooms as before. Chorus only (the baseline has no seat
    /// requests).
    #[arg(long, default_value_t = 0)]
    pub seat_requesters: usize,
    /// Seat requests per second over all rooms, the requesters in turn.
    #[arg(long, default_value_t = 20.0)]
    pub seat_request_rate: f64,
    /// How long an approved requester keeps its seat before the owner kicks it, ms; shorter
    /// than the time between one requester's turns.
    #[arg(long, default_value_t = 1000)]
    pub seat_hold_ms: u64,
}

impl Shape {
    /// Why these sizes cannot run, if they cannot.
    ///
    /// # Errors
    /// A count that must be positive is zero, a rate is not finite, or a burst lasts longer
    /// than the time between bursts (bursts would overlap).
    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.rooms > 0 && self.members > 0,
            "party needs --rooms and --members of at least 1"
        );
        anyhow::ensure!(
            self.gifters > 0 || self.burst_gifts == 0 || self.bursts_per_sec == 0.0,
            "gift bursts need --gifters of at least 1"
        );
        anyhow::ensure!(
            self.seaters > 0 || self.seat_rate == 0.0,
            "seat changes need --seaters of at least 1"
        );
        anyhow::ensure!(
            self.listeners > 0 || self.join_rate == 0.0,
            "leaves and rejoins need --listeners of at least 1"
        );
        for (name, v) in [
            ("--bursts-per-sec", self.bursts_per_sec),
            ("--burst-rate", self.burst_rate),
            ("--seat-rate", self.seat_rate),
            ("--join-rate", self.join_rate),
            ("--seat-request-rate", self.seat_request_rate),
        ] {
            anyhow::ensure!(v.is_finite() && v >= 0.0, "{name} must be ≥ 0, not {v}");
        }
        if self.bursts_per_sec > 0.0 && self.burst_gifts > 0 {
            anyhow::ensure!(self.burst_rate > 0.0, "--burst-rate must be > 0");
            anyhow::ensure!(
                self.burst_gifts as f64 / self.burst_rate <= 1.0 / self.bursts_per_sec,
                "a burst of {} gifts at {}/s lasts longer than the {:.3} s between bursts",
                self.burst_gifts,
                self.burst_rate,
                1.0 / self.bursts_per_sec
            );
        }
        if self.requests_seats() {
            let turn_s = (self.rooms * self.seat_requesters) as f64 / self.seat_request_rate;
            anyhow::ensure!(
                (self.seat_hold_ms as f64 / 1000.0) < turn_s,
                "--seat-hold-ms {} is not shorter than the {turn_s:.3} s between one \
                 requester's requests (it would ask again while seated)",
                self.seat_hold_ms
            );
        }
        Ok(())
    }

    /// Whether the party asks for seats in apply mode (Chorus only).
    pub fn requests_seats(&self) -> bool {
        self.seat_requesters > 0 && self.seat_request_rate > 0.0
    }

    /// Whether the party sends gifts (then it needs an admin API, and a baseline its ledger).
    pub fn sends_gifts(&self) -> bool {
        self.gifters > 0 && self.burst_gifts > 0 && self.bursts_per_sec > 0.0
    }

    /// Whether the party changes seats or members (which the baseline server answers without
    /// their events) or asks for seats (which it does not know).
    pub fn changes_seats_or_members(&self) -> bool {
        (self.seaters > 0 && self.seat_rate > 0.0)
            || (self.listeners > 0 && self.join_rate > 0.0)
            || self.requests_seats()
    }

    /// Gifts the bursts send in `duration`.
    fn gifts_in(&self, duration: Duration) -> u64 {
        if !self.sends_gifts() || self.burst_rate <= 0.0 {
            return 0;
        }
        super::schedule_len(self.bursts_per_sec, duration) * self.burst_gifts as u64
    }

    /// When gift `i` is due, in ns from the schedule's start: burst `i / burst_gifts` starts
    /// every `1 / bursts_per_sec` s, its gifts `1 / burst_rate` s apart.
    fn gift_offset_ns(&self, i: u64) -> u64 {
        let per_burst = self.burst_gifts.max(1) as u64;
        let (burst, within) = (i / per_burst, i % per_burst);
        let start = burst as f64 * 1e9 / self.bursts_per_sec;
        (start + within as f64 * 1e9 / self.burst_rate) as u64
    }

    /// The room of gift `i`'s burst, and the gifter (index within the room) and chatter it
    /// goes from and to: the rooms take bursts in turn, the room's gifters and chatters send
    /// and receive in turn.
    fn gift_route(&self, i: u64) -> (usize, usize, usize) {
        let per_burst = self.burst_gifts.max(1) as u64;
        let (burst, within) = (i / per_burst, i % per_burst);
        let room = (burst % self.rooms as u64) as usize;
        let gifter = (within % self.gifters.max(1) as u64) as usize;
        let chatter = (within % self.members as u64) as usize;
        (room, gifter, chatter)
    }
}

/// Change `i` over `n` connections that change in turn: the connection, and whether this is
/// the first of its pair (its even changes: a seat taken, a room left) or the second (its odd
/// ones: the seat left, the room joined again).
fn turn(i: u64, n: usize) -> (usize, bool) {
    let n = n.max(1) as u64;
    ((i % n) as usize, (i / n).is_multiple_of(2))
}

/// Runs the party.
///
/// # Errors
/// The sizes cannot run ([`Shape::check`]), the target has no admin API while gifts are to be
/// sent, or granting, connecting or joining failed.
pub async fn run(target: &Target, p: &Params, rate: f64, shape: Shape) -> anyhow::Result<Report> {
    shape.check()?;
    let gifts_total = shape.gifts_in(p.duration);
    let admin_addr = target.admin;
    let token = target.admin_token.clone();
    if gifts_total > 0 {
        anyhow::ensure!(
            admin_addr.is_some(),
            "party's gifts need --admin (or --spawn)"
        );
    }
    let prefix = run_prefix("party");
    let Shape {
        rooms,
        members,
        gifters,
        seaters,
        listeners,
        ..
    } = shape;
    let room_name = |k: usize| format!("{prefix}-r{k}");
    let named = |kind: &str, per_room: usize| -> Vec<String> {
        (0..rooms * per_room)
            .map(|i| format!("{prefix}-{kind}{i}"))
            .collect()
    };
    let (chatters, givers, changers, comers) = (
        named("c", members),
        named("g", gifters),
        named("s", seaters),
        named("l", listeners),
    );
    if let (Some(admin), true) = (admin_addr, gifts_total > 0) {
        grant_all(admin, token.as_deref(), &givers).await?;
    }
    // Apply-mode rooms are created by their owners before anyone else joins them.
    let mut asking = if shape.requests_seats() {
        let names = (0..rooms).map(room_name).collect();
        Some(requests::Requests::open(target, p, &shape, &prefix, names).await?)
    } else {
        None
    };

    let chat = Shared::counting(Counted::CHAT);
    let gift = Shared::counting(Counted::GIFT);
    let (seat, member) = (
        Shared::counting(Counted::NONE),
        Shared::counting(Counted::NONE),
    );
    // Connection i of a kind with `per_room` per room is in room i / per_room.
    let in_rooms = |per_room: usize| move |i: usize| room_name(i / per_room.max(1));
    let cc = connect_and_join(target, &chatters, p, &chat, in_rooms(members)).await?;
    let gc = connect_and_join(target, &givers, p, &gift, in_rooms(gifters)).await?;
    let sc = connect_and_join(target, &changers, p, &seat, in_rooms(seaters)).await?;
    if let Some(a) = &asking {
        // In apply mode only the owner and admins take seats directly.
        a.grant_admins(&changers).await?;
    }
    let lc = connect_and_join(target, &comers, p, &member, in_rooms(listeners)).await?;

    // The chat goes round the rooms, one member of each in turn (as `rooms` sends it).
    let senders: Vec<usize> = (0..members)
        .flat_map(|m| (0..rooms).map(move |k| k * members + m))
        .collect();
    let chat_rate = rate * senders.len() as f64;
    let total = super::schedule_len(chat_rate, p.duration);
    let progress = Progress::start(p.progress, &target.name, total, &chat);
    let writes_before = super::server_writes(target).await;
    let cpu_before = super::server_cpu(target).await;
    let msg_bytes = p.msg_bytes;
    let chatting = pace(&chat, chat_rate, p.duration, |i, due| {
        let c = senders[(i % senders.len() as u64) as usize];
        let (conn, room) = (&cc[c], room_name(c / members));
        async move {
            let _ = conn.send_chat(&room, due, msg_bytes).await;
        }
    });
    let gifting = pace_by(
        &gift,
        gifts_total,
        |i| shape.gift_offset_ns(i),
        p.duration,
        |i, due| {
            let (room, from, to) = shape.gift_route(i);
            let d = json!({
                "room": room_name(room),
                // At the intended send time, which the gift's events carry in their order id.
                "req_id": gift.v7_at(due).to_string(),
                "gift": "rose",
                "count": 1,
                "to": [chatters[room * members + to]],
            });
            let conn = &gc[room * gifters + from];
            async move {
                let _ = conn.send_timed("gift.send", &d, due).await;
            }
        },
    );
    let seating = pace(&seat, shape.seat_rate, p.duration, |i, due| {
        let (c, take) = turn(i, sc.len());
        let conn = &sc[c];
        let d = json!({ "room": in_rooms(seaters)(c) });
        async move {
            let op = if take { "seat.take" } else { "seat.leave" };
            let _ = conn.send_timed(op, &d, due).await;
        }
    });
    let coming = pace(&member, shape.join_rate, p.duration, |i, due| {
        let (c, leave) = turn(i, lc.len());
        let conn = &lc[c];
        let room = in_rooms(listeners)(c);
        async move {
            let _ = if leave {
                conn.send_timed("room.leave", &json!({ "room": room }), due)
                    .await
            } else {
                // The reply sets the room's position: what was sent meanwhile is not a gap.
                conn.send_timed_join(&room, due).await
            };
        }
    });
    let requesting = async {
        match asking.as_mut() {
            Some(a) => Some(a.run(&shape, p.duration, p.drain).await),
            None => None,
        }
    };
    let ((t_chat, _), (t_gift, _), (t_seat, _), (t_member, _), paced_requests) =
        tokio::join!(chatting, gifting, seating, coming, requesting);
    let m = members as u64;
    let g = gifters as u64;
    drain(&chat, p.drain, || chat.ok.load(Ordering::Relaxed) * m).await;
    drain(&gift, p.drain, || gift.ok.load(Ordering::Relaxed) * g).await;
    drain(&seat, p.drain, || 0).await;
    drain(&member, p.drain, || 0).await;
    let cpu_after = super::server_cpu(target).await;
    let writes_after = super::server_writes(target).await;
    progress.finish();

    let mut r = common_report(
        &chat,
        t_chat,
        chat.ok.load(Ordering::Relaxed) * m,
        None,
        None,
    );
    let settled = gift.ok.load(Ordering::Relaxed);
    let mut gifts = common_report(&gift, t_gift, settled * g, None, None);
    gifts.connections = gc.len();
    let seats = common_report(&seat, t_seat, 0, None, None);
    let comings = common_report(&member, t_member, 0, None, None);
    merge_sides(&mut r, &gifts, &seats, &comings);
    if let (Some(a), Some(paced)) = (&asking, paced_requests) {
        a.record(paced, &mut r);
    }
    // No CPU per delivery: the node also delivers what no connection counts here (the chat
    // to gifters, seat changers and listeners, the gift events to chatters, every seat and
    // membership event).
    if let Some(cpu) = super::CpuUse::between(cpu_before, cpu_after) {
        cpu.record(&mut r);
    }
    r.frames_per_write = super::frames_per_write(writes_before, writes_after);
    r.offered_per_sec = chat_rate;
    r.duration_s = p.duration.as_secs_f64();
    r.connections = cc.len() + gc.len() + sc.len() + lc.len();
    r.connections += asking.as_ref().map_or(0, requests::Requests::connections);
    r.rooms = rooms;
    if gifts_total > 0 {
        r.settled = Some(settled);
        if let Some(admin) = admin_addr {
            let (checked, mismatches) =
                check_balances(admin, token.as_deref(), &gc, has_rocket(&gift)).await;
            r.balances_checked = Some(checked);
            r.balance_mismatches = Some(mismatches);
            r.conserved = conserved(admin, token.as_deref()).await;
        }
    }
    for cs in [cc, gc, sc, lc] {
        close_all(cs).await;
    }
    if let Some(a) = asking {
        a.close().await;
    }
    Ok(r)
}

/// Folds the gift bursts', the seat changes' and the comings and goings' reports into the
/// chat's ([`add_counts`]) and sets their latencies beside the chat's.
fn merge_sides(r: &mut Report, gifts: &Report, seats: &Report, members: &Report) {
    add_counts(r, &[gifts, seats, members]);
    let sent = |s: &Report, l: &Latency| (s.sent > 0).then(|| l.clone());
    r.gift_reply = sent(gifts, &gifts.reply);
    r.gift_events = sent(gifts, &gifts.latency);
    r.economy = gifts.economy.clone();
    if let Some(e) = &mut r.economy {
        // Only the givers' connections count gift and rocket events.
        e.members = gifts.connections;
    }
    r.seat_reply = sent(seats, &seats.reply);
    r.join_reply = sent(members, &members.reply);
}

/// Adds the side traffic's counts to the chat's report: their requests, deliveries, losses,
/// gaps, closes and errors add up; the worst stretches are the worst of all.
fn add_counts(r: &mut Report, sides: &[&Report]) {
    for s in sides {
        r.sent += s.sent;
        r.accepted += s.accepted;
        r.unanswered += s.unanswered;
        r.expected += s.expected;
        r.received += s.received;
        r.lost += s.lost;
        r.gaps += s.gaps;
        r.duplicates += s.duplicates;
        r.closed += s.closed;
        r.delivered_per_sec += s.delivered_per_sec;
        r.send_lag_max_ms = r.send_lag_max_ms.max(s.send_lag_max_ms);
        for (code, n) in &s.errors {
            *r.errors.entry(code.clone()).or_default() += n;
        }
        r.worst_100ms.extend(s.worst_100ms.iter().copied());
    }
    r.worst_100ms.sort_by(|a, b| b.1.total_cmp(&a.1));
    r.worst_100ms.truncate(super::WORST_SLOTS_REPORTED);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Shape, turn};

    fn shape() -> Shape {
        Shape {
            rooms: 3,
            members: 4,
            gifters: 2,
            seaters: 2,
            bursts_per_sec: 2.0,
            burst_gifts: 5,
            burst_rate: 1_000.0,
            seat_rate: 10.0,
            listeners: 1,
            join_rate: 4.0,
            seat_requesters: 0,
            seat_request_rate: 20.0,
            seat_hold_ms: 1000,
        }
    }

    #[test]
    fn bursts_start_on_their_beat_and_their_gifts_follow_at_the_burst_rate() {
        let s = shape();
        assert_eq!(s.gifts_in(Duration::from_secs(3)), 6 * 5);
        let at: Vec<u64> = (0..7).map(|i| s.gift_offset_ns(i)).collect();
        // Burst 0: 0, 1, 2, 3, 4 ms; burst 1 at 500 ms.
        assert_eq!(
            at,
            [
                0,
                1_000_000,
                2_000_000,
                3_000_000,
                4_000_000,
                500_000_000,
                501_000_000
            ]
        );
        assert!((1..40).all(|i| s.gift_offset_ns(i) >= s.gift_offset_ns(i - 1)));
    }

    #[test]
    fn each_burst_hits_one_room_and_the_rooms_take_turns() {
        let s = shape();
        let rooms: Vec<usize> = (0..20).map(|i| s.gift_route(i).0).collect();
        assert_eq!(&rooms[..5], &[0; 5]);
        assert_eq!(&rooms[5..10], &[1; 5]);
        assert_eq!(&rooms[15..20], &[0; 5], "round the 3 rooms and back");
        let (_, from, to) = s.gift_route(3);
        assert!(from < s.gifters && to < s.members);
        assert_ne!(s.gift_route(0).1, s.gift_route(1).1, "gifters take turns");
    }

    #[test]
    fn every_changer_takes_then_leaves_in_turn() {
        let ops: Vec<(usize, bool)> = (0..6).map(|i| turn(i, 3)).collect();
        assert_eq!(
            ops,
            [
                (0, true),
                (1, true),
                (2, true),
                (0, false),
                (1, false),
                (2, false)
            ]
        );
    }

    #[test]
    fn shapes_that_cannot_run_are_refused() {
        assert!(shape().check().is_ok());
        let overlapping = Shape {
            burst_gifts: 600,
            ..shape()
        };
        assert!(overlapping.check().is_err(), "600 gifts at 1000/s > 0.5 s");
        let no_gifters = Shape {
            gifters: 0,
            ..shape()
        };
        assert!(no_gifters.check().is_err());
        let quiet = Shape {
            gifters: 0,
            bursts_per_sec: 0.0,
            seaters: 0,
            seat_rate: 0.0,
            listeners: 0,
            join_rate: 0.0,
            ..shape()
        };
        assert!(quiet.check().is_ok(), "chat alone");
        assert!(!quiet.changes_seats_or_members() && !quiet.sends_gifts());
        let no_listeners = Shape {
            listeners: 0,
            ..shape()
        };
        assert!(no_listeners.check().is_err());
        assert!(
            Shape {
                seat_rate: f64::NAN,
                ..shape()
            }
            .check()
            .is_err()
        );
    }

    /// Seat requests are off unless there are requesters; with them the baseline cannot run
    /// the party, and a requester must be kicked before its next turn: 3 rooms × 2 requesters
    /// at 4 requests/s ask every 1.5 s each.
    #[test]
    fn seat_requests_need_requesters_and_a_hold_shorter_than_a_turn() {
        let quiet = Shape {
            seaters: 0,
            seat_rate: 0.0,
            listeners: 0,
            join_rate: 0.0,
            ..shape()
        };
        assert!(!quiet.requests_seats() && !quiet.changes_seats_or_members());
        let asking = Shape {
            seat_requesters: 2,
            seat_request_rate: 4.0,
            seat_hold_ms: 1_400,
            ..quiet
        };
        assert!(asking.check().is_ok());
        assert!(asking.requests_seats() && asking.changes_seats_or_members());
        let too_long = Shape {
            seat_hold_ms: 1_500,
            ..asking
        };
        assert!(too_long.check().is_err());
        let idle = Shape {
            seat_request_rate: 0.0,
            ..too_long
        };
        assert!(idle.check().is_ok() && !idle.requests_seats());
    }
}
