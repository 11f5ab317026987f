//! The app boards' old buckets: each shard deletes, once at start and then hourly, the day rows
//! older than [`APP_BOARD_DAYS_KEPT`] days and the week rows of weeks that began before then
//! ([`storage::ledger::Ledger::prune_app_boards`]). A board is only ever read in today's and
//! this week's bucket, so the rows it deletes are history no read uses; the all-time rows stay.
//! Every shard of a cluster does it: the delete is idempotent and goes in small batches.

use std::sync::Arc;
use std::time::Duration;

use storage::ledger::{Ledger, day_of};
use tracing::{info, warn};

use crate::Inner;
use crate::room::now_ms;

/// Days of app-board day buckets kept, today's included (weeks: those begun within them).
pub(crate) const APP_BOARD_DAYS_KEPT: i64 = 35;
/// How often a shard prunes.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Prunes the app boards now and then every [`PRUNE_EVERY`], until shutdown.
pub(crate) async fn prune(inner: Arc<Inner>) {
    let Some(ledger) = inner.ledger.clone() else {
        return;
    };
    let mut tick = tokio::time::interval(PRUNE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = inner.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        prune_once(&ledger).await;
    }
}

async fn prune_once(ledger: &Ledger) {
    let today = day_of(i64::try_from(now_ms()).unwrap_or(i64::MAX));
    match ledger
        .prune_app_boards(today - APP_BOARD_DAYS_KEPT + 1)
        .await
    {
        Ok(0) => {}
        Ok(rows) => info!(rows, "Deleted app-board rows of old days and weeks."),
        Err(e) => warn!(error = %e, "Could not prune the app boards; next hour again."),
    }
}
