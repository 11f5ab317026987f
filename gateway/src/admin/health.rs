//! `/healthz` (liveness: the process serves HTTP) and `/readyz` (readiness: the node can do
//! its job now). A load balancer sends traffic only to ready nodes; an orchestrator restarts
//! only nodes that are not live.

use std::time::Duration;

use http::StatusCode;
use serde_json::json;
use storage::redis::Redis;

use super::{Admin, Resp, json_resp};

/// Longest one readiness check may take: a check that hangs is a failed check.
const CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// What `/readyz` checks besides the ledger.
pub(crate) enum Readiness {
    /// Standalone: storage is embedded; ready while the ledger takes writes.
    Standalone,
    /// A cluster node: ready while Redis answers and the node routes by the ring that Redis
    /// holds now.
    Cluster(Redis),
}

/// `GET /readyz`: `200 {"ready":true}`, or `503 {"ready":false,"problems":[...]}`.
pub(super) async fn readyz(admin: &Admin) -> Resp {
    let mut problems: Vec<String> = Vec::new();
    if let Readiness::Cluster(redis) = &admin.ready {
        match tokio::time::timeout(CHECK_TIMEOUT, redis.ping()).await {
            Ok(Ok(())) => routing_check(admin, &mut problems).await,
            Ok(Err(e)) => problems.push(format!("redis: {e}")),
            Err(_) => problems.push("redis: no answer within 1 s".into()),
        }
    }
    // The gateway's ledger (wallets, gift lists) or, on a shard, the one it books gifts in.
    let ledger = match (&admin.core, &admin.shard) {
        (Some(core), _) => core.money.ledger.as_ref(),
        (None, Some(shard)) => shard.ledger(),
        (None, None) => None,
    };
    if let Some(ledger) = ledger {
        match tokio::time::timeout(CHECK_TIMEOUT, ledger.check_writable()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => problems.push(format!("ledger: {e}")),
            Err(_) => problems.push("ledger: no answer within 1 s".into()),
        }
    }
    if problems.is_empty() {
        json_resp(StatusCode::OK, &json!({ "ready": true }))
    } else {
        json_resp(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({ "ready": false, "problems": problems }),
        )
    }
}

/// Whether the node routes (gateway) or places (shard) rooms by the ring version Redis holds.
async fn routing_check(admin: &Admin, problems: &mut Vec<String>) {
    let Some(m) = &admin.membership else { return };
    let current = match tokio::time::timeout(CHECK_TIMEOUT, m.list()).await {
        Ok(Ok(view)) => view.version,
        Ok(Err(e)) => return problems.push(format!("ring: {e}")),
        Err(_) => return problems.push("ring: no answer within 1 s".into()),
    };
    let routing = match (&admin.core, &admin.shard) {
        (Some(core), _) => core.router.placement_version(),
        (None, Some(shard)) => shard.placement_version(),
        (None, None) => return,
    };
    if routing != Some(current) {
        let at = routing.map_or_else(|| "none".to_owned(), |v| v.to_string());
        problems.push(format!(
            "ring: routing by version {at}, the ring is at {current}"
        ));
    }
}
