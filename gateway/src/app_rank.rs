//! `rank.get` at app scope: the app-wide boards of top senders and top receivers, answered by
//! the gateway from the ledger's per-bucket totals (a read of `limit` rows per board, however
//! many gifts the app has seen).

use bytes::Bytes;
use protocol::ErrorCode;
use protocol::client::{self, RankGet};
use serde_json::json;
use storage::ledger::Ledger;
use tracing::warn;

use crate::money::{MAX_RANK_LIMIT, board_and_period, rank_entries};

/// `rank.get` with `scope: "app"`: the arguments checked (no room; board and period), then
/// the board. Robots are listed (marked) unless `without_robots`.
pub(crate) async fn rank(ledger: &Ledger, id: u64, r: &RankGet, without_robots: bool) -> Bytes {
    if r.room.is_some() {
        return client::encode_err(
            Some(id),
            ErrorCode::BadRequest,
            "an app board has no room (leave room out, or use scope room)",
        );
    }
    let (board, period) = match board_and_period(id, r) {
        Ok(bp) => bp,
        Err(answer) => return answer,
    };
    let limit = r.limit.clamp(1, MAX_RANK_LIMIT) as usize;
    match ledger
        .app_leaderboard(board, period, limit, !without_robots)
        .await
    {
        Ok(rows) => {
            let entries = rank_entries(rows);
            client::encode_ok(
                id,
                &json!({ "scope": "app", "board": r.board, "period": r.period, "entries": entries }),
            )
        }
        Err(e) => {
            warn!(error = %e, "App leaderboard read failed.");
            client::encode_err(
                Some(id),
                ErrorCode::Unavailable,
                "ledger unavailable; retry",
            )
        }
    }
}
