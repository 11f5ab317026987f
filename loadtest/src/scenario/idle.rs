//! Idle memory: the server's resident memory per joined connection. RSS (VmRSS, summed over
//! the target's pids; with no pid known, the `--admin` node's `process_resident_memory_bytes`)
//! is read before connecting, once the first half of the connections has joined, and once
//! every connection has: the whole delta divided by the connections is `rss_per_conn_bytes`,
//! and the second half's delta divided by its connections is
//! `rss_marginal_per_conn_bytes`, the cost of one more member. The two differ by what the
//! server spends once, whatever its connections (its threads' allocation caches, the rooms'
//! actors, tables grown to their size), shared out over the count measured. A few connections
//! join and leave before the first reading, so the code the connection path runs once is not
//! counted as the connections' memory (see `warm_up`).

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
    warm_up(target, p, &prefix).await?;
    let shared = Shared::new();
    let before = super::server_rss_kib(target).await;
    let half = conns / 2;
    let mut cs = Vec::with_capacity(conns);
    let mut middle = None;
    for (stage, users) in [&users[..half], &users[half..]].into_iter().enumerate() {
        let first = cs.len();
        cs.extend(connect_users(target, users, p, &shared).await?);
        join_all(
            &cs[first..],
            |i| format!("{prefix}-r{}", (first + i) % rooms),
            p.connect_concurrency,
        )
        .await?;
        if stage == 0 {
            middle = super::server_rss_kib(target).await;
        }
    }
    let after = super::server_rss_kib(target).await;
    let r = Report {
        connections: cs.len(),
        rooms,
        rss_before_kib: before,
        rss_after_kib: after,
        rss_per_conn_bytes: bytes_per_conn(before, after, conns),
        rss_marginal_per_conn_bytes: bytes_per_conn(middle, after, conns - half),
        closed: shared.closed.load(std::sync::atomic::Ordering::Relaxed),
        errors: shared.errors(),
        ..Report::default()
    };
    close_all(cs).await;
    Ok(r)
}

/// Connections that join and leave before the first reading.
const WARM_UP_CONNS: usize = 10;

/// Runs the connection path once before the first reading: what the server touches the first
/// time any client connects and joins (its code's pages, tables built on first use) is then
/// resident, so the readings count only what connections hold.
async fn warm_up(target: &Target, p: &Params, prefix: &str) -> anyhow::Result<()> {
    let users: Vec<String> = (0..WARM_UP_CONNS)
        .map(|i| format!("{prefix}-warm{i}"))
        .collect();
    let cs = connect_users(target, &users, p, &Shared::new()).await?;
    join_all(&cs, |_| format!("{prefix}-warm"), p.connect_concurrency).await?;
    close_all(cs).await;
    Ok(())
}

/// RSS growth from `from` to `to` KiB, in bytes per connection of `conns`.
fn bytes_per_conn(from: Option<u64>, to: Option<u64>, conns: usize) -> Option<f64> {
    let (from, to) = (from?, to?);
    (conns > 0).then(|| (to as f64 - from as f64) * 1024.0 / conns as f64)
}

#[cfg(test)]
mod tests {
    use super::bytes_per_conn;

    #[test]
    fn growth_is_shared_over_the_connections_it_came_with() {
        assert_eq!(bytes_per_conn(Some(1000), Some(1010), 5), Some(2048.0));
        // RSS may shrink between two reads (freed pages returned): a negative figure, not none.
        assert_eq!(bytes_per_conn(Some(1010), Some(1000), 10), Some(-1024.0));
        assert_eq!(bytes_per_conn(None, Some(1000), 10), None);
        assert_eq!(bytes_per_conn(Some(1000), None, 10), None);
        assert_eq!(bytes_per_conn(Some(1000), Some(1010), 0), None);
    }
}
