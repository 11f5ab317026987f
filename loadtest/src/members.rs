//! `chorus-loadtest member-list`: how long a new client waits for the first page of a big
//! room's member list. N members join one room; then, one at a time, a fresh client connects,
//! joins and asks `member.list`, timed from the start of its connect to the first page; the
//! page alone is timed too, and one full scan (every page) checks the count.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use serde::Serialize;
use serde_json::json;

use crate::load::{self, Shared, close_all};
use crate::scenario::{Params, connect_users, join_all, run_prefix};
use crate::target::Target;

/// What to measure.
#[derive(Debug, Clone)]
pub struct Options {
    /// Members in the room before the samples.
    pub members: usize,
    /// New clients timed, one after another.
    pub samples: usize,
    /// The page size asked for.
    pub limit: u32,
    /// Handshakes in flight while the members connect.
    pub connect_concurrency: usize,
}

/// Times in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct MembersReport {
    /// Members in the room (not counting the timed client).
    pub members: usize,
    /// Clients timed.
    pub samples: usize,
    /// Page size.
    pub limit: u32,
    /// Connect + join + first `member.list` page: median, 99th percentile, worst.
    pub connect_to_first_page_ms: [f64; 3],
    /// The first `member.list` page alone (request to reply).
    pub first_page_ms: [f64; 3],
    /// Every page of one full scan, in total.
    pub full_scan_ms: f64,
    /// Members the full scan listed (the room's count).
    pub full_scan_listed: usize,
}

/// Median, 99th percentile and worst of `v` (ms).
fn spread(mut v: Vec<f64>) -> [f64; 3] {
    v.sort_by(f64::total_cmp);
    let at = |p: f64| {
        v.get(((v.len().max(1) - 1) as f64 * p).round() as usize)
            .copied()
    };
    [
        at(0.5).unwrap_or_default(),
        at(0.99).unwrap_or_default(),
        v.last().copied().unwrap_or_default(),
    ]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs the measurement against `target`.
///
/// # Errors
/// Connecting, joining or a `member.list` failed, or the full scan missed members.
pub async fn run(target: &Target, o: &Options) -> anyhow::Result<MembersReport> {
    let prefix = run_prefix("members");
    let room = format!("{prefix}-big");
    let users: Vec<String> = (0..o.members).map(|i| format!("{prefix}-u{i}")).collect();
    let shared = Shared::new();
    let p = Params {
        connect_concurrency: o.connect_concurrency,
        ..Params::default()
    };
    let cs = connect_users(target, &users, &p, &shared).await?;
    join_all(&cs, |_| room.clone(), o.connect_concurrency).await?;
    let url = target
        .urls
        .first()
        .ok_or_else(|| anyhow::anyhow!("no URL"))?;
    let (mut total, mut page) = (Vec::new(), Vec::new());
    let mut scan = (0.0, 0);
    for i in 0..o.samples.max(1) {
        let user = format!("{prefix}-new{i}");
        let token = match &target.secret {
            Some(s) => Some(crate::client::mint_token(
                s,
                &user,
                Duration::from_secs(3600),
            )?),
            None => None,
        };
        let started = Instant::now();
        let c = load::connect(url, &user, token.as_deref(), Arc::clone(&shared)).await?;
        c.join(&room, None).await?;
        let asked = Instant::now();
        let first = c
            .request("member.list", json!({"room": room, "limit": o.limit}))
            .await?;
        total.push(ms(started.elapsed()));
        page.push(ms(asked.elapsed()));
        if i == 0 {
            // One full scan: every page, the members counted.
            let t = Instant::now();
            let mut listed = first["members"].as_array().map_or(0, Vec::len);
            let mut cursor = first["cursor"].as_str().map(str::to_owned);
            let pages_max = o.members / o.limit.max(1) as usize + 2;
            for _ in 0..pages_max {
                let Some(cur) = cursor.take() else { break };
                let next = c
                    .request(
                        "member.list",
                        json!({"room": room, "limit": o.limit, "cursor": cur}),
                    )
                    .await?;
                listed += next["members"].as_array().map_or(0, Vec::len);
                cursor = next["cursor"].as_str().map(str::to_owned);
            }
            scan = (ms(t.elapsed()) + page[0], listed);
            anyhow::ensure!(
                listed == o.members + 1,
                "the scan listed {listed} of {} members",
                o.members + 1
            );
        }
        c.request("room.leave", json!({"room": room})).await?;
        c.close().await;
    }
    close_all(cs).await;
    Ok(MembersReport {
        members: o.members,
        samples: total.len(),
        limit: o.limit,
        connect_to_first_page_ms: spread(total),
        first_page_ms: spread(page),
        full_scan_ms: scan.0,
        full_scan_listed: scan.1,
    })
}

/// The report as text.
pub fn text(r: &MembersReport) -> String {
    let [a, b, c] = r.connect_to_first_page_ms;
    let [d, e, f] = r.first_page_ms;
    format!(
        "member-list: {} members, {} samples, limit {}\n  connect→first page  p50 {a:.2} ms  p99 {b:.2} ms  max {c:.2} ms\n  first page alone    p50 {d:.2} ms  p99 {e:.2} ms  max {f:.2} ms\n  full scan           {:.2} ms for {} members\n",
        r.members, r.samples, r.limit, r.full_scan_ms, r.full_scan_listed
    )
}
