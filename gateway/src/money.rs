//! Money at the gateway: `wallet.balance`, `gift.list`, `rank.get`, and the admin wallet API.
//! Gifts themselves go to the room's owner (the saga runs there); these are reads and
//! operator top-ups, answered straight from the ledger.

use std::sync::Arc;

use bytes::Bytes;
use protocol::client::{self, GiftInfo, Op, RankEntry, RankGet};
use protocol::{ErrorCode, RoomId, SessionId, UserId};
use serde_json::json;
use shard::gifts::{Catalog, GiftKind};
use storage::ledger::{Board, Ledger, Period};
use tracing::warn;

use crate::Core;
use crate::hub::text;

/// Most entries a `rank.get` returns.
const MAX_RANK_LIMIT: u32 = 100;
/// Largest single grant, in coins: a typo guard for operators.
pub(crate) const MAX_GRANT_COINS: i64 = 1_000_000_000_000;

/// The gateway's view of money.
#[derive(Clone)]
pub struct Money {
    /// The ledger (`None`: money ops answer `UNAVAILABLE`).
    pub ledger: Option<Ledger>,
    /// The gift catalog.
    pub catalog: Arc<Catalog>,
}

impl Money {
    /// No ledger: every money op answers `UNAVAILABLE`.
    pub fn disabled() -> Self {
        Self {
            ledger: None,
            catalog: Arc::new(Catalog::default_with_secret(Vec::new())),
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

impl Core {
    fn send_frame(&self, session: SessionId, frame: Bytes) {
        if let Some(t) = text(frame) {
            self.hub.send_to(session, t);
        }
    }

    /// `wallet.balance`, `gift.list` and `rank.get`, answered by the gateway itself.
    pub(crate) fn money_request(
        self: &Arc<Self>,
        session: SessionId,
        user: &UserId,
        id: u64,
        op: Op,
    ) {
        if let Op::GiftList(_) = op {
            let gifts: Vec<GiftInfo> = self
                .money
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
            self.send_frame(session, client::encode_ok(id, &json!({ "gifts": gifts })));
            return;
        }
        let Some(ledger) = self.money.ledger.clone() else {
            let msg = format!("{} is not enabled on this node (no ledger)", op.name());
            self.send_frame(
                session,
                client::encode_err(Some(id), ErrorCode::Unavailable, &msg),
            );
            return;
        };
        let core = self.clone();
        let user = user.clone();
        self.tracker.spawn(async move {
            let frame = match op {
                Op::WalletBalance(_) => {
                    match (ledger.balance(&user).await, ledger.earnings(&user).await) {
                        (Ok(balance), Ok(earnings)) => client::encode_ok(
                            id,
                            &json!({ "balance": balance, "earnings": earnings }),
                        ),
                        (Err(e), _) | (_, Err(e)) => {
                            warn!(error = %e, "Balance read failed.");
                            client::encode_err(
                                Some(id),
                                ErrorCode::Unavailable,
                                "ledger unavailable; retry",
                            )
                        }
                    }
                }
                Op::RankGet(r) => rank(&ledger, id, &r).await,
                _ => client::encode_err(Some(id), ErrorCode::Internal, "internal error"),
            };
            core.send_frame(session, frame);
        });
    }
}

async fn rank(ledger: &Ledger, id: u64, r: &RankGet) -> Bytes {
    let (Some(board), Some(period)) = (parse_board(&r.board), parse_period(&r.period)) else {
        return client::encode_err(
            Some(id),
            ErrorCode::BadRequest,
            "board is senders|receivers, period is day|week|all",
        );
    };
    let room: &RoomId = &r.room;
    let limit = r.limit.clamp(1, MAX_RANK_LIMIT) as usize;
    match ledger.leaderboard(room, board, period, limit).await {
        Ok(rows) => {
            let entries: Vec<RankEntry> = rows
                .into_iter()
                .map(|(user, score)| RankEntry { user, score })
                .collect();
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
