//! A deploy, seen from the clients: `rooms` × `members` connections drop at once while each
//! room's publisher (which stays) sends `rate` messages; then every member reconnects and
//! rejoins with `since` = its last `(epoch, seq)`. Reports the time until all resumed, how many
//! joins answered `resync: true`, and the events lost (missed while away and not replayed).

use std::sync::atomic::Ordering;

use futures_util::StreamExt;
use tokio::time::Instant;

use super::{Params, connect_and_join, connect_users, drain, run_prefix};
use crate::load::{Conn, Shared, close_all};
use crate::report::Report;
use crate::target::Target;

/// Messages each publisher sends before the drop (to give every member a position).
const WARM: u64 = 3;
/// Messages each publisher sends after the resume (to check live delivery continues).
const AFTER: u64 = 3;

async fn publish(shared: &Shared, pubs: &[Conn], rooms: &[String], n: u64, msg_bytes: usize) {
    for _ in 0..n {
        for (c, room) in pubs.iter().zip(rooms) {
            let _ = c.send_chat(room, shared.now_ns(), msg_bytes).await;
        }
    }
}

/// Runs the drop and resume.
///
/// # Errors
/// Connecting or joining failed.
pub async fn run(
    target: &Target,
    p: &Params,
    rate: f64,
    rooms: usize,
    members: usize,
) -> anyhow::Result<Report> {
    let prefix = run_prefix("reconnect");
    let missed = rate.max(0.0).round() as u64;
    let room_names: Vec<String> = (0..rooms).map(|k| format!("{prefix}-r{k}")).collect();
    let pub_users: Vec<String> = (0..rooms).map(|k| format!("{prefix}-p{k}")).collect();
    let users: Vec<String> = (0..rooms * members)
        .map(|i| format!("{prefix}-u{i}"))
        .collect();
    let room_of = |i: usize| room_names[i / members.max(1)].clone();
    let shared = Shared::new();
    let pubs = connect_and_join(target, &pub_users, p, &shared, |k| room_names[k].clone()).await?;
    let conns = connect_and_join(target, &users, p, &shared, room_of).await?;
    let per_room = members as u64 + 1;

    // Warm up: every member gets a position.
    publish(&shared, &pubs, &room_names, WARM, p.msg_bytes).await;
    let warm_expected = WARM * rooms as u64 * per_room;
    drain(&shared, p.drain, || warm_expected).await;
    let positions: Vec<Option<(u64, u64)>> = conns
        .iter()
        .enumerate()
        .map(|(i, c)| c.position(&room_of(i)))
        .collect();

    // The drop: every member socket goes at once (no close frame, as in a crash or deploy).
    drop(conns);
    let ok_before = shared.ok.load(Ordering::Relaxed);
    publish(&shared, &pubs, &room_names, missed, p.msg_bytes).await;
    drain(&shared, p.drain, || 0).await;
    let missed_ok = shared.ok.load(Ordering::Relaxed) - ok_before;
    let missed_per_room = missed_ok / rooms.max(1) as u64;

    // The resume: reconnect and rejoin with `since`, all at once.
    let resume_shared = Shared::new();
    let t0 = Instant::now();
    let conns = connect_users(target, &users, p, &resume_shared).await?;
    let joins = futures_util::stream::iter(conns.iter().enumerate().map(|(i, c)| {
        let room = room_of(i);
        let since = positions[i];
        let rs = resume_shared.clone();
        async move {
            if let Some((e, s)) = since {
                c.set_position(&room, e, s);
            }
            let j = c.join(&room, since).await;
            rs.record_reply_us(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX));
            j
        }
    }))
    .buffer_unordered(p.connect_concurrency.max(1))
    .collect::<Vec<_>>()
    .await;
    let resume_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let mut resumed = 0;
    let mut resyncs = 0;
    for j in &joins {
        match j {
            Ok(j) => {
                resumed += 1;
                resyncs += u64::from(j.resync);
            }
            Err(e) => resume_shared.error(&e.code),
        }
    }
    let replayed: u64 = conns.iter().map(Conn::received).sum();
    let events_lost = (missed_per_room * conns.len() as u64).saturating_sub(replayed);

    // Live delivery after the resume.
    publish(&shared, &pubs, &room_names, AFTER, p.msg_bytes).await;
    let live_expected = replayed + AFTER * conns.len() as u64;
    drain(&resume_shared, p.drain, || live_expected).await;
    let live_received = resume_shared.received.load(Ordering::Relaxed);

    let mut r = Report {
        connections: users.len() + pubs.len(),
        rooms,
        sent: shared.sent.load(Ordering::Relaxed),
        accepted: shared.ok.load(Ordering::Relaxed),
        unanswered: shared.unanswered(),
        expected: live_expected,
        received: live_received,
        lost: live_expected.saturating_sub(live_received),
        gaps: resume_shared.gaps.load(Ordering::Relaxed),
        duplicates: resume_shared.duplicates.load(Ordering::Relaxed),
        closed: resume_shared.closed.load(Ordering::Relaxed),
        errors: resume_shared.errors(),
        resumed: Some(resumed),
        resume_ms: Some(resume_ms),
        resyncs: Some(resyncs),
        events_lost: Some(events_lost),
        ..Report::default()
    };
    r.reply = crate::report::Latency::from_hist(&resume_shared.reply_latency());
    close_all(conns).await;
    close_all(pubs).await;
    Ok(r)
}
