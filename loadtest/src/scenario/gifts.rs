//! A gift storm: `rooms` × `members`, everyone funded through the admin API first, then
//! `gift.send` of one `rose` to the next member at `rate` gifts/s in total. Reports gifts
//! settled (ok replies) per second, the reply latency of `gift.send` and the delivery latency
//! of the `gift` events, then checks every sender's balance (grant − 10 × settled) and the
//! ledger's conservation. Request ids are UUIDv7 at the gift's intended send time, as
//! PROTOCOL.md recommends (time-ordered ids keep the ledger's saga index local); the order id
//! of each event begins with that time, which times the delivery. `--random-req-ids` sends
//! UUIDv4 ones (the events are then counted, not timed).
//!
//! The connections send in turn, room after room: a room takes `members` gifts in a row, so
//! its members get them in one burst, which the node writes in few socket writes.
//! `--interleave-rooms` sends each gift to another room than the one before, so every event
//! is a socket write of its own until the node falls behind (docs/BENCHMARKS-LOG.md, the gifts target).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use futures_util::StreamExt;
use serde_json::json;
use uuid::Uuid;

use super::{Params, Progress, common_report, connect_and_join, drain, pace, run_prefix};
use crate::admin;
use crate::load::{Conn, Shared, close_all};
use crate::report::Report;
use crate::target::Target;

/// Coins granted to each user before the storm.
pub const GRANT: i64 = 10_000_000;
/// The price of the gift sent (`rose`).
pub const ROSE_PRICE: i64 = 10;
/// Most statement pages of rocket rewards read per user in the balance check.
const REWARD_PAGES: usize = 100;
/// Admin calls in flight while granting and checking.
const ADMIN_CONCURRENCY: usize = 32;
/// Attempts at reading a balance between two equal reward totals (rewards still being paid),
/// 200 ms apart; a user whose rewards never settle is left unchecked.
const STABLE_READS: usize = 150;

/// How the storm's gifts are sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Order {
    /// Random (UUIDv4) request ids instead of time-ordered (UUIDv7) ones: each gift then
    /// writes one random page of the ledger's saga index (see `storage::ledger::gift_id`), and its
    /// events are counted, not timed.
    pub random_req_ids: bool,
    /// Consecutive gifts go to different rooms (gift i to room i % rooms) instead of a run of
    /// `members` gifts to each room in turn.
    pub interleave_rooms: bool,
}

/// The sender of gift `i` among `rooms` × `members` connections (room-major): the members of
/// one room in turn, or with `interleave` one member of each room in turn.
fn sender_of(i: u64, rooms: usize, members: usize, interleave: bool) -> usize {
    let n = (rooms * members) as u64;
    let i = i % n;
    if interleave {
        let room = (i % rooms as u64) as usize;
        let member = (i / rooms as u64) as usize;
        room * members + member
    } else {
        i as usize
    }
}

/// Runs the storm.
///
/// # Errors
/// Granting, connecting or joining failed, or the target has no admin API.
pub async fn run(
    target: &Target,
    p: &Params,
    rate: f64,
    rooms: usize,
    members: usize,
    order: Order,
) -> anyhow::Result<Report> {
    let admin_addr = target
        .admin
        .ok_or_else(|| anyhow::anyhow!("gifts needs --admin (or --spawn)"))?;
    let token = target.admin_token.clone();
    let prefix = run_prefix("gifts");
    let members = members.max(2);
    let users: Vec<String> = (0..rooms * members)
        .map(|i| format!("{prefix}-u{i}"))
        .collect();
    let room_of = |i: usize| format!("{prefix}-r{}", i / members);

    grant_all(admin_addr, token.as_deref(), &users).await?;

    let shared = Shared::new();
    let conns = connect_and_join(target, &users, p, &shared, room_of).await?;
    let total = super::schedule_len(rate, p.duration);
    let progress = Progress::start(p.progress, &target.name, total, &shared);
    // Read first: the scrape's own work stays out of the CPU window.
    let writes_before = super::server_writes(target).await;
    let cpu_before = super::server_cpu(target).await;
    let (t0, _) = pace(&shared, rate, p.duration, |i, due| {
        // Every connection sends in turn; the recipient is the next member of its room.
        let s = sender_of(i, rooms, members, order.interleave_rooms);
        let room_idx = s / members;
        let to = room_idx * members + (s % members + 1) % members;
        let d = json!({
            "room": room_of(s),
            // At the intended send time, which the gift's events then carry in their order id.
            "req_id": if order.random_req_ids { Uuid::new_v4() } else { shared.v7_at(due) }.to_string(),
            "gift": "rose",
            "count": 1,
            "to": [users[to]],
        });
        let conn = &conns[s];
        async move {
            let _ = conn.send_timed("gift.send", &d, due).await;
        }
    })
    .await;
    let m = members as u64;
    let done = drain(&shared, p.drain, || shared.ok.load(Ordering::Relaxed) * m).await;
    let cpu_after = super::server_cpu(target).await;
    let writes_after = super::server_writes(target).await;
    progress.finish();
    let settled = shared.ok.load(Ordering::Relaxed);
    let mut r = common_report(&shared, t0, settled * m, cpu_before, cpu_after);
    r.frames_per_write = super::frames_per_write(writes_before, writes_after);
    r.offered_per_sec = rate;
    r.duration_s = p.duration.as_secs_f64();
    r.connections = conns.len();
    r.rooms = rooms;
    r.settled = Some(settled);
    if let (Some(ms), true) = (r.server_cpu_ms, settled > 0) {
        r.cpu_us_per_gift = Some(ms * 1000.0 / settled as f64);
    }
    if done > t0 {
        // Settled per second over the schedule plus the time its last replies took.
        let window = ((done - t0) as f64 / 1e9).max(p.duration.as_secs_f64());
        r.settled_per_sec = Some(settled as f64 / window);
    }

    let rockets = has_rocket(&shared);
    let (checked, mismatches) = check_balances(admin_addr, token.as_deref(), &conns, rockets).await;
    r.balances_checked = Some(checked);
    r.balance_mismatches = Some(mismatches);
    r.conserved = conserved(admin_addr, token.as_deref()).await;
    close_all(conns).await;
    Ok(r)
}

/// Whether the run's rooms have a rocket (its events reached a member): rewards may then be
/// in any member's balance.
pub(super) fn has_rocket(shared: &crate::load::Shared) -> bool {
    shared
        .economy
        .report()
        .is_some_and(|e| e.progress_events + e.launch_events > 0)
}

/// Grants each of `users` [`GRANT`] coins through the admin API, once (the grant key is the
/// user's).
///
/// # Errors
/// A grant failed.
pub(super) async fn grant_all(
    admin_addr: SocketAddr,
    token: Option<&str>,
    users: &[String],
) -> anyhow::Result<()> {
    let grants = futures_util::stream::iter(users.iter().map(|u| async move {
        let r = admin::grant(admin_addr, token, u, GRANT, &format!("{u}-grant")).await?;
        anyhow::ensure!(r.status == 200, "grant {u}: HTTP {} {}", r.status, r.body);
        Ok(())
    }))
    .buffer_unordered(ADMIN_CONCURRENCY)
    .collect::<Vec<anyhow::Result<()>>>()
    .await;
    grants.into_iter().collect()
}

/// Checks every sender's balance: the grant minus what its settled gifts cost (plus, with
/// `rockets`, the rocket rewards its statement shows). A gift still
/// unanswered when the drain ended (a server far behind) may settle before or during the
/// check, so it may or may not be paid for; it is counted in `unanswered`, not here. Returns
/// `(wallets checked, mismatches)`.
pub(super) async fn check_balances(
    admin_addr: SocketAddr,
    token: Option<&str>,
    conns: &[Conn],
    rockets: bool,
) -> (u64, u64) {
    let expected: Vec<(String, u64, u64)> = conns
        .iter()
        .map(|c| (c.user.clone(), c.ok_count(), c.in_flight() as u64))
        .collect();
    let checks = futures_util::stream::iter(expected.into_iter().map(|(u, ok, open)| async move {
        // Rocket rewards (a node running the room economy) add to the balance; a node
        // without a statement (the baseline) has none to add. Launches filled late in the
        // storm are still being paid after the gifts drained: the balance is read between two
        // equal reward totals, so that no reward lands between the two reads compared.
        let rewards = || async {
            if rockets {
                admin::movements_total(admin_addr, token, &u, "rocket_reward", REWARD_PAGES)
                    .await
                    .ok()
            } else {
                Some(0)
            }
        };
        let mut before = rewards().await?;
        for _ in 0..STABLE_READS {
            let r = admin::wallet(admin_addr, token, &u).await.ok()?;
            let balance = r.json()["balance"].as_i64()?;
            let after = rewards().await?;
            if after == before {
                return Some(balance_fits(balance - after, ok, open));
            }
            before = after;
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        None
    }))
    .buffer_unordered(ADMIN_CONCURRENCY)
    .collect::<Vec<Option<bool>>>()
    .await;
    let checked = checks.iter().filter(|c| c.is_some()).count() as u64;
    let mismatches = checks.iter().filter(|c| **c == Some(false)).count() as u64;
    (checked, mismatches)
}

/// The ledger's own audit: `GET /admin/ledger/totals` → `conserved`.
pub(super) async fn conserved(admin_addr: SocketAddr, token: Option<&str>) -> Option<bool> {
    admin::ledger_totals(admin_addr, token)
        .await
        .ok()
        .and_then(|t| t.json()["conserved"].as_bool())
}

/// Whether a sender's `balance` fits its gifts: the grant less the price of each of its `ok`
/// gifts and of any number of its `unanswered` ones, none of the gifts answered with an error.
fn balance_fits(balance: i64, ok: u64, unanswered: u64) -> bool {
    let price =
        |gifts: u64| i64::try_from(gifts).map_or(i64::MAX, |g| g.saturating_mul(ROSE_PRICE));
    let most = GRANT.saturating_sub(price(ok));
    let least = most.saturating_sub(price(unanswered));
    (least..=most).contains(&balance) && (most - balance) % ROSE_PRICE == 0
}

#[cfg(test)]
mod tests {
    use super::{GRANT, ROSE_PRICE, balance_fits, sender_of};

    #[test]
    fn a_balance_fits_its_settled_gifts_and_any_of_its_unanswered_ones() {
        let after = |gifts: i64| GRANT - ROSE_PRICE * gifts;
        assert!(balance_fits(after(3), 3, 0));
        assert!(
            !balance_fits(after(4), 3, 0),
            "a gift paid for but not answered ok"
        );
        assert!(!balance_fits(after(2), 3, 0), "a settled gift not paid for");
        // Two unanswered: none, one or both may have settled by the check.
        for paid in 3..=5 {
            assert!(balance_fits(after(paid), 3, 2), "{paid} paid");
        }
        assert!(!balance_fits(after(6), 3, 2), "more paid than sent");
        assert!(!balance_fits(after(2), 3, 2));
        assert!(
            !balance_fits(after(3) - 1, 3, 2),
            "not a whole number of gifts"
        );
    }

    #[test]
    fn both_orders_send_from_every_connection_once_per_round() {
        for interleave in [false, true] {
            let mut seen: Vec<usize> = (0..12).map(|i| sender_of(i, 3, 4, interleave)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..12).collect::<Vec<_>>(), "interleave {interleave}");
            assert_eq!(
                sender_of(12, 3, 4, interleave),
                sender_of(0, 3, 4, interleave)
            );
        }
    }

    #[test]
    fn interleaved_gifts_change_room_every_time_and_runs_do_not() {
        let room = |s: usize| s / 4;
        let runs: Vec<usize> = (0..8).map(|i| room(sender_of(i, 3, 4, false))).collect();
        assert_eq!(runs, [0, 0, 0, 0, 1, 1, 1, 1]);
        let spread: Vec<usize> = (0..6).map(|i| room(sender_of(i, 3, 4, true))).collect();
        assert_eq!(spread, [0, 1, 2, 0, 1, 2]);
    }
}
