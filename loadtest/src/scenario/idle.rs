//! Idle memory: the server's resident memory per joined connection. RSS (VmRSS, summed over
//! the target's pids; with no pid known, the `--admin` node's `process_resident_memory_bytes`)
//! is read before connecting and again once every connection has joined; the delta divided by
//! the connections is the figure.

use super::{Params, connect_users, join_all, run_prefix};
use crate::load::{Shared, close_all};
use crate::report::Report;
use crate::target::Target;

/// Runs the idle measurement.
///
/// # Errors
/// The server's pid is unknown, or connecting or joining failed.
pub async fn run(
    target: &Target,
    p: &Params,
    conns: usize,
    rooms: usize,
) -> anyhow::Result<Report> {
    anyhow::ensure!(
        !target.pids.is_empty() || target.admin.is_some(),
        "idle needs the server's pid (--server-pid, or let the harness spawn it) or its --admin"
    );
    let prefix = run_prefix("idle");
    let rooms = rooms.max(1);
    let users: Vec<String> = (0..conns).map(|i| format!("{prefix}-u{i}")).collect();
    let before = super::server_rss_kib(target).await;
    let shared = Shared::new();
    let cs = connect_users(target, &users, p, &shared).await?;
    join_all(
        &cs,
        |i| format!("{prefix}-r{}", i % rooms),
        p.connect_concurrency,
    )
    .await?;
    let after = super::server_rss_kib(target).await;
    let mut r = Report {
        connections: cs.len(),
        rooms,
        rss_before_kib: before,
        rss_after_kib: after,
        closed: shared.closed.load(std::sync::atomic::Ordering::Relaxed),
        errors: shared.errors(),
        ..Report::default()
    };
    if let (Some(b), Some(a)) = (before, after)
        && conns > 0
    {
        r.rss_per_conn_bytes = Some((a as f64 - b as f64) * 1024.0 / conns as f64);
    }
    close_all(cs).await;
    Ok(r)
}
