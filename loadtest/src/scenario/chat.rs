//! Chat fan-out: `fanout` (one room, many listeners, few publishers) and `rooms` (many rooms,
//! every member chatting). Every member (the sender too) should receive every message.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Params, Progress, common_report, connect_and_join, drain, pace, run_prefix};
use crate::load::{Conn, Shared, close_all};
use crate::report::Report;
use crate::target::Target;

/// One room with `listeners` listeners and `publishers` publishers sending `rate` msgs/s in
/// total.
///
/// # Errors
/// Connecting or joining failed.
pub async fn fanout(
    target: &Target,
    p: &Params,
    rate: f64,
    listeners: usize,
    publishers: usize,
) -> anyhow::Result<Report> {
    let prefix = run_prefix("fan");
    let room = format!("{prefix}-room");
    let publishers = publishers.max(1);
    let mut users: Vec<String> = (0..publishers).map(|i| format!("{prefix}-p{i}")).collect();
    users.extend((0..listeners).map(|i| format!("{prefix}-l{i}")));
    let shared = Shared::new();
    let conns = connect_and_join(target, &users, p, &shared, |_| room.clone()).await?;
    let members = conns.len() as u64;
    let senders: Vec<(usize, String)> = (0..publishers).map(|i| (i, room.clone())).collect();
    let mut r = drive(target, p, rate, &shared, &conns, &senders, members).await;
    r.connections = conns.len();
    r.rooms = 1;
    close_all(conns).await;
    Ok(r)
}

/// `rooms` rooms of `members` members, each member sending `rate` msgs/s.
///
/// # Errors
/// Connecting or joining failed.
pub async fn rooms(
    target: &Target,
    p: &Params,
    rate: f64,
    rooms: usize,
    members: usize,
) -> anyhow::Result<Report> {
    let prefix = run_prefix("rooms");
    let users: Vec<String> = (0..rooms * members)
        .map(|i| format!("{prefix}-u{i}"))
        .collect();
    let room_of = |i: usize| format!("{prefix}-r{}", i / members.max(1));
    let shared = Shared::new();
    let conns = connect_and_join(target, &users, p, &shared, room_of).await?;
    // Interleave senders across rooms so each room's messages are spread over time.
    let senders: Vec<(usize, String)> = (0..members)
        .flat_map(|m| (0..rooms).map(move |k| k * members + m))
        .map(|i| (i, room_of(i)))
        .collect();
    let total_rate = rate * senders.len() as f64;
    let mut r = drive(
        target,
        p,
        total_rate,
        &shared,
        &conns,
        &senders,
        members as u64,
    )
    .await;
    r.connections = conns.len();
    r.rooms = rooms;
    close_all(conns).await;
    Ok(r)
}

/// Sends `total_rate` msgs/s round-robin over `senders` (`(conn index, room)`); every accepted
/// message should reach `members` connections.
async fn drive(
    target: &Target,
    p: &Params,
    total_rate: f64,
    shared: &Arc<Shared>,
    conns: &[Conn],
    senders: &[(usize, String)],
    members: u64,
) -> Report {
    // A warm-up runs first, on the same schedule: what it sends is measured from where it
    // ends (set at the first send, from the schedule's own start), and so are the readings.
    let warmup_ns = u64::try_from(p.warmup.as_nanos()).unwrap_or(u64::MAX);
    let total = super::schedule_len(total_rate, p.warmup + p.duration);
    let progress = Progress::start(p.progress, &target.name, total, shared);
    let readings = async {
        if !p.warmup.is_zero() {
            tokio::time::sleep(p.warmup).await;
        }
        shared.begin_measure();
        // Read first: the scrape's own work stays out of the CPU window.
        let writes = super::server_writes(target).await;
        let cpu = super::server_cpu(target).await;
        (writes, cpu, super::own_cpu())
    };
    let msg_bytes = p.msg_bytes;
    let schedule = pace(shared, total_rate, p.warmup + p.duration, |i, due| {
        if i == 0 {
            shared.measure_from(due.saturating_add(warmup_ns));
        }
        let (c, room) = &senders[(i % senders.len() as u64) as usize];
        let conn = &conns[*c];
        async move {
            let _ = conn.send_chat(room, due, msg_bytes).await;
        }
    });
    // Without a warm-up the readings come before the first send, as they always did.
    let ((t0, _), (writes_before, cpu_before, own_before)) = if p.warmup.is_zero() {
        let before = readings.await;
        (schedule.await, before)
    } else {
        tokio::join!(schedule, readings)
    };
    let t0 = t0.saturating_add(warmup_ns);
    drain(shared, p.drain, || {
        shared.ok.load(Ordering::Relaxed) * members
    })
    .await;
    let own_after = super::own_cpu();
    let cpu_after = super::server_cpu(target).await;
    let writes_after = super::server_writes(target).await;
    progress.finish();
    let expected = shared.ok.load(Ordering::Relaxed) * members;
    let mut r = common_report(shared, t0, expected, cpu_before, cpu_after);
    r.generator_cores = super::CpuUse::between(own_before, own_after).and_then(|u| u.cores);
    r.frames_per_write = super::frames_per_write(writes_before, writes_after);
    r.offered_per_sec = total_rate;
    r.duration_s = p.duration.as_secs_f64();
    r
}
