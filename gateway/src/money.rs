//! Money at the gateway: `wallet.balance`, `gift.list`, `rank.get`, and the admin wallet API.
//! Gifts themselves go to the room's owner (the saga runs there); these are reads and
//! operator top-ups, answered straight from the ledger.

use std::sync::Arc;

use bytes::Bytes;
use protocol::client::{self, GiftInfo, Op, RankEntry, RankGet};
use protocol::{ErrorCode, RoomId, UserId};
use serde_json::json;
use shard::gifts::{Catalog, GiftKind};
use storage::ledger::{Board, Ledger, Period};
use storage::snapshot::SnapshotStore;
use tracing::warn;

/// Most entries a `rank.get` returns.
pub(crate) const MAX_RANK_LIMIT: u32 = 100;
/// Largest single grant, in coins: a typo guard for operators.
pub(crate) const MAX_GRANT_COINS: i64 = 1_000_000_000_000;

/// The gateway's view of money.
#[derive(Clone)]
pub struct Money {
    /// The ledger (`None`: money ops answer `UNAVAILABLE`).
    pub ledger: Option<Ledger>,
    /// The gift catalog.
    pub catalog: Arc<Catalog>,
    /// Leave robots out of `rank.get` (otherwise they are listed, marked `robot: true`).
    pub ranks_without_robots: bool,
    /// Most coins one coin seller may transfer per UTC day.
    pub transfer_daily_limit: i64,
    /// Coins credited on a user's first connection ever (0: none).
    pub signup_reward: i64,
    /// Users whose sign-up reward this process has seen credited.
    pub signed_up: crate::wallet::SignedUp,
    /// Coins `wallet.checkin` credits once per user per UTC day (0: the op is off).
    pub checkin_reward: i64,
    /// The room snapshots, read to tell whether a room exists: with them, `rank.get` of a room
    /// that has none answers `ROOM_NOT_FOUND` (`None`: every room has a board, maybe empty).
    pub rooms: Option<SnapshotStore>,
}

impl Money {
    /// No ledger: every money op answers `UNAVAILABLE`.
    pub fn disabled() -> Self {
        Self {
            ledger: None,
            catalog: Arc::new(Catalog::default_with_secret(Vec::new())),
            ranks_without_robots: false,
            transfer_daily_limit: crate::config::DEFAULT_TRANSFER_DAILY_LIMIT,
            signup_reward: 0,
            signed_up: crate::wallet::SignedUp::default(),
            checkin_reward: 0,
            rooms: None,
        }
    }
}

fn parse_board(s: &str) -> Option<Board> {
    match s {
        "senders" => Some(Board::Senders),
        "receivers" => Some(Board::Receivers),
        _ => None,
    }
}

fn parse_period(s: &str) -> Option<Period> {
    match s {
        "day" => Some(Period::Day),
        "week" => Some(Period::Week),
        "all" => Some(Period::All),
        _ => None,
    }
}

impl Money {
    /// The answer to `wallet.balance`, `gift.list` or `rank.get` when it needs no ledger read:
    /// the catalog, or `UNAVAILABLE` on a node without a ledger. `None`: ask [`Money::answer`].
    pub(crate) fn answer_now(&self, id: u64, op: &Op) -> Option<Bytes> {
        if let Op::GiftList(_) = op {
            let gifts: Vec<GiftInfo> = self
                .catalog
                .gifts
                .iter()
                .map(|g| GiftInfo {
                    id: g.id.clone(),
                    name: g.name.clone(),
                    price: g.price,
                    kind: match g.kind {
                        GiftKind::Normal => "normal".into(),
                        GiftKind::Lucky => "lucky".into(),
                    },
                    effect_level: g.effect_level,
                })
                .collect();
            return Some(client::encode_ok(id, &json!({ "gifts": gifts })));
        }
        if self.ledger.is_none() {
            let msg = format!("{} is not enabled on this node (no ledger)", op.name());
            return Some(client::encode_err(Some(id), ErrorCode::Unavailable, &msg));
        }
        None
    }

    /// The answer to `wallet.balance` or `rank.get` from the ledger.
    pub(crate) async fn answer(&self, user: &UserId, id: u64, op: Op) -> Bytes {
        let Some(ledger) = &self.ledger else {
            return client::encode_err(Some(id), ErrorCode::Unavailable, "no ledger on this node");
        };
        match op {
            Op::WalletBalance(_) => match (ledger.balance(user).await, ledger.earnings(user).await)
            {
                (Ok(balance), Ok(earnings)) => {
                    client::encode_ok(id, &client::Balance { balance, earnings })
                }
                (Err(e), _) | (_, Err(e)) => {
                    warn!(error = %e, "Balance read failed.");
                    client::encode_err(
                        Some(id),
                        ErrorCode::Unavailable,
                        "ledger unavailable; retry",
                    )
                }
            },
            Op::RankGet(r) => {
                rank(
                    ledger,
                    self.rooms.as_ref(),
                    id,
                    &r,
                    self.ranks_without_robots,
                )
                .await
            }
            Op::Wallet(op) => crate::wallet::answer(self, ledger, user, id, op).await,
            _ => client::encode_err(Some(id), ErrorCode::Internal, "internal error"),
        }
    }
}

/// Most robots a room's board may hold above the entries asked for, when robots are left out.
const ROBOT_ROWS_SKIPPED: usize = 20;

/// Whether `room` exists, by its snapshot; `None` (no store): taken as existing. The error
/// answer when the store cannot be read.
async fn room_exists(rooms: Option<&SnapshotStore>, id: u64, room: &RoomId) -> Result<bool, Bytes> {
    let Some(rooms) = rooms else {
        return Ok(true);
    };
    match rooms.exists(room).await {
        Ok(found) => Ok(found),
        Err(e) => {
            warn!(error = %e, %room, "Room snapshot read failed.");
            Err(client::encode_err(
                Some(id),
                ErrorCode::Unavailable,
                "room store unavailable; retry",
            ))
        }
    }
}

/// A `rank.get`'s board and period, or the `BAD_REQUEST` answer to request `id`.
pub(crate) fn board_and_period(id: u64, r: &RankGet) -> Result<(Board, Period), Bytes> {
    match (parse_board(&r.board), parse_period(&r.period)) {
        (Some(board), Some(period)) => Ok((board, period)),
        _ => Err(client::encode_err(
            Some(id),
            ErrorCode::BadRequest,
            "board is senders|receivers, period is day|week|all",
        )),
    }
}

/// A board's rows as `rank.get` entries (robots marked).
pub(crate) fn rank_entries(rows: impl IntoIterator<Item = (UserId, i64)>) -> Vec<RankEntry> {
    rows.into_iter()
        .map(|(user, score)| RankEntry {
            robot: user.is_robot(),
            user,
            score,
        })
        .collect()
}

/// `rank.get`: the scope (an app board is answered by [`crate::app_rank`]), the arguments
/// checked, then the room's existence (with `rooms`), then the board.
async fn rank(
    ledger: &Ledger,
    rooms: Option<&SnapshotStore>,
    id: u64,
    r: &RankGet,
    without_robots: bool,
) -> Bytes {
    match r.scope.as_deref() {
        None | Some("room") => {}
        Some("app") => return crate::app_rank::rank(ledger, id, r, without_robots).await,
        Some(_) => {
            return client::encode_err(Some(id), ErrorCode::BadRequest, "scope is room|app");
        }
    }
    let Some(room) = r.room.as_ref() else {
        return client::encode_err(Some(id), ErrorCode::BadRequest, "a room board needs a room");
    };
    let (board, period) = match board_and_period(id, r) {
        Ok(bp) => bp,
        Err(answer) => return answer,
    };
    match room_exists(rooms, id, room).await {
        Ok(true) => {}
        Ok(false) => return client::encode_err(Some(id), ErrorCode::RoomNotFound, "no such room"),
        Err(answer) => return answer,
    }
    let limit = r.limit.clamp(1, MAX_RANK_LIMIT) as usize;
    let rows = if without_robots {
        limit + ROBOT_ROWS_SKIPPED
    } else {
        limit
    };
    match ledger.leaderboard(room, board, period, rows).await {
        Ok(rows) => {
            let rows = rows
                .into_iter()
                .filter(|(user, _)| !(without_robots && user.is_robot()))
                .take(limit);
            let entries = rank_entries(rows);
            client::encode_ok(
                id,
                &json!({ "room": room, "board": r.board, "period": r.period, "entries": entries }),
            )
        }
        Err(e) => {
            warn!(error = %e, "Leaderboard read failed.");
            client::encode_err(
                Some(id),
                ErrorCode::Unavailable,
                "ledger unavailable; retry",
            )
        }
    }
}
