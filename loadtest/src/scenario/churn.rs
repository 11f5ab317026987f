//! Membership churn: `conns` connections over `rooms` rooms; at `rate` ops/s a random
//! connection joins (when out), switches room, leaves, takes a seat or leaves its seat. Reports
//! reply latency and errors by code (`SEAT_TAKEN`/`NO_FREE_SEAT` are normal answers here).

use std::cell::RefCell;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::{Params, Progress, common_report, connect_and_join, drain, pace, run_prefix};
use crate::load::{Shared, close_all};
use crate::report::Report;
use crate::target::Target;

/// Runs the churn.
///
/// # Errors
/// Connecting or joining failed.
pub async fn run(
    target: &Target,
    p: &Params,
    rate: f64,
    conns: usize,
    rooms: usize,
) -> anyhow::Result<Report> {
    let prefix = run_prefix("churn");
    let rooms = rooms.max(2);
    let users: Vec<String> = (0..conns).map(|i| format!("{prefix}-u{i}")).collect();
    let room_name = |k: usize| format!("{prefix}-r{k}");
    let shared = Shared::new();
    let cs = connect_and_join(target, &users, p, &shared, |i| room_name(i % rooms)).await?;
    // Where each connection is (as far as the generator asked; replies may say otherwise).
    let state: RefCell<Vec<Option<usize>>> =
        RefCell::new((0..conns).map(|i| Some(i % rooms)).collect());
    let rng = RefCell::new(StdRng::seed_from_u64(conns as u64 ^ rate.to_bits()));
    let total = super::schedule_len(rate, p.duration);
    let progress = Progress::start(p.progress, &target.name, total, &shared);
    let cpu_before = super::server_cpu(target).await;
    let (t0, _) = pace(&shared, rate, p.duration, |_, due| {
        let (c, op, d, join) = {
            let mut rng = rng.borrow_mut();
            let mut st = state.borrow_mut();
            let c = rng.random_range(0..conns);
            let roll: f64 = rng.random();
            match st[c] {
                None => {
                    let k = rng.random_range(0..rooms);
                    st[c] = Some(k);
                    (c, "room.join", room_name(k), true)
                }
                Some(k) if roll < 0.25 => {
                    let k2 = (k + 1 + rng.random_range(0..rooms - 1)) % rooms;
                    st[c] = Some(k2);
                    (c, "room.join", room_name(k2), true)
                }
                Some(k) if roll < 0.40 => {
                    st[c] = None;
                    (c, "room.leave", room_name(k), false)
                }
                Some(k) if roll < 0.75 => (c, "seat.take", room_name(k), false),
                Some(k) => (c, "seat.leave", room_name(k), false),
            }
        };
        let conn = &cs[c];
        async move {
            let _ = if join {
                conn.send_timed_join(&d, due).await
            } else {
                conn.send_timed(op, &json!({ "room": d }), due).await
            };
        }
    })
    .await;
    drain(&shared, p.drain, || 0).await;
    let cpu_after = super::server_cpu(target).await;
    progress.finish();
    let mut r = common_report(&shared, t0, 0, cpu_before, cpu_after);
    r.offered_per_sec = rate;
    r.duration_s = p.duration.as_secs_f64();
    r.connections = cs.len();
    r.rooms = rooms;
    close_all(cs).await;
    Ok(r)
}
