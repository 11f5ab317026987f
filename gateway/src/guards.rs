//! Guards at the gateway: `guard.buy`, `guard.list` and `guard.plans`, answered from the
//! ledger; the plans on sale (configuration, validated at start-up); and a member's standing
//! (the guards they hold), read from the ledger when a connection opens and after a purchase,
//! kept with the user's local sessions (sent with their joins) and sent to the rooms they are
//! in (`RoomCmd::Standing`), where it becomes the `guard` badge.

use std::sync::Arc;

use bytes::Bytes;
use protocol::client::guard::{GUARD_LIST_DEFAULT, GUARD_LIST_MAX};
use protocol::client::{
    self, GuardBought, GuardBuy, GuardEntry, GuardList, GuardOp, GuardPage, GuardPlanInfo,
    is_valid_req_id,
};
use protocol::ids::is_valid_user_id;
use protocol::{ErrorCode, RoomId, SessionId, UserId};
use serde::Deserialize;
use storage::ledger::{
    BASIS_POINTS_PER_WHOLE, GuardOrder, GuardOutcome, Ledger, MAX_GUARD_REQ_ID_BYTES, now_ms,
};
use tracing::warn;

use crate::money::MAX_GRANT_COINS;
use crate::shared::Core;

/// Milliseconds in a day.
const DAY_MS: f64 = 86_400_000.0;
/// Most plans a configuration may offer.
pub const MAX_GUARD_PLANS: usize = 20;
/// Shortest plan: one second (test configurations use fractions of a day).
pub const MIN_GUARD_PLAN_MS: i64 = 1_000;
/// Longest plan: ten years.
pub const MAX_GUARD_PLAN_DAYS: f64 = 3_650.0;

/// A guard plan on sale: `days` (fractions allowed) for `price` coins.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardPlan {
    /// The plan's id, as `guard.buy` names it: 1..=32 of `[a-z0-9_-]`.
    pub id: String,
    /// How long one purchase lasts, in days.
    pub days: f64,
    /// Its price in coins.
    pub price: i64,
}

impl GuardPlan {
    /// The plan's length in ms (rounded).
    pub fn duration_ms(&self) -> i64 {
        // Bounded by `validate`: at most ten years of ms, well inside i64.
        #[allow(clippy::cast_possible_truncation, reason = "bounded by validate_plans")]
        let ms = (self.days * DAY_MS).round() as i64;
        ms
    }
}

/// The plans on sale by default: a week, a month and a year.
pub fn default_plans() -> Vec<GuardPlan> {
    [
        ("week", 7.0, 1_000),
        ("month", 30.0, 3_000),
        ("year", 365.0, 30_000),
    ]
    .into_iter()
    .map(|(id, days, price)| GuardPlan {
        id: id.into(),
        days,
        price,
    })
    .collect()
}

/// Checks the plans on sale.
///
/// # Errors
/// A message naming the first problem: too many plans, a bad or repeated id, a length
/// outside one second ..= ten years, a price outside 1 ..= 10^12 coins.
pub fn validate_plans(plans: &[GuardPlan]) -> Result<(), String> {
    if plans.len() > MAX_GUARD_PLANS {
        return Err(format!("at most {MAX_GUARD_PLANS} guard plans"));
    }
    for (i, p) in plans.iter().enumerate() {
        let id_ok = (1..=32).contains(&p.id.len())
            && p.id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !id_ok {
            return Err(format!("guard plan id {:?}: 1..=32 of [a-z0-9_-]", p.id));
        }
        if plans[..i].iter().any(|q| q.id == p.id) {
            return Err(format!("guard plan id {:?} appears twice", p.id));
        }
        if !p.days.is_finite() || p.days <= 0.0 || p.days > MAX_GUARD_PLAN_DAYS {
            return Err(format!("guard plan {:?}: days must be in (0, 3650]", p.id));
        }
        if p.duration_ms() < MIN_GUARD_PLAN_MS {
            return Err(format!("guard plan {:?}: at least one second", p.id));
        }
        if !(1..=MAX_GRANT_COINS).contains(&p.price) {
            return Err(format!("guard plan {:?}: price 1..=10^12 coins", p.id));
        }
    }
    Ok(())
}

/// The host's share of a price at `share_bp` basis points (rounded down, as a gift's).
fn host_share(price: i64, share_bp: u32) -> i64 {
    let share = i128::from(price) * i128::from(share_bp) / i128::from(BASIS_POINTS_PER_WHOLE);
    i64::try_from(share).unwrap_or(price).clamp(0, price)
}

fn unavailable(id: u64) -> Bytes {
    client::encode_err(
        Some(id),
        ErrorCode::Unavailable,
        "ledger unavailable; retry",
    )
}

/// The owner of `room`, from its stored snapshot (`None`: no such room).
async fn owner_of(core: &Core, room: &RoomId) -> Result<Option<UserId>, ()> {
    #[derive(Deserialize)]
    struct Owner {
        owner: UserId,
    }
    let Some(rooms) = &core.money.rooms else {
        return Ok(None);
    };
    match rooms.load(room).await {
        Ok(None) => Ok(None),
        Ok(Some(stored)) => serde_json::from_slice::<Owner>(&stored.bytes)
            .map(|o| Some(o.owner))
            .map_err(|e| warn!(%room, error = %e, "Unreadable room snapshot.")),
        Err(e) => {
            warn!(%room, error = %e, "Room snapshot read failed.");
            Err(())
        }
    }
}

impl Core {
    /// Answers a guard op of `user` off the socket's path.
    pub(crate) fn guard_request(
        self: &Arc<Self>,
        session: SessionId,
        user: &UserId,
        id: u64,
        op: GuardOp,
    ) {
        let core = self.clone();
        let user = user.clone();
        self.tracker.spawn(async move {
            let frame = core.guard_answer(&user, id, op).await;
            core.send_frame(session, frame);
        });
    }

    async fn guard_answer(self: &Arc<Self>, user: &UserId, id: u64, op: GuardOp) -> Bytes {
        if let GuardOp::Plans(_) = op {
            let plans: Vec<GuardPlanInfo> = self
                .config
                .guard_plans
                .iter()
                .map(|p| GuardPlanInfo {
                    id: p.id.clone(),
                    days: p.days,
                    price: p.price,
                })
                .collect();
            return client::encode_ok(id, &serde_json::json!({ "plans": plans }));
        }
        let Some(ledger) = self.money.ledger.clone() else {
            let msg = format!("{} is not enabled on this node (no ledger)", op.name());
            return client::encode_err(Some(id), ErrorCode::Unavailable, &msg);
        };
        match op {
            GuardOp::Buy(b) => self.guard_buy(&ledger, user, id, &b).await,
            GuardOp::List(l) => self.guard_list(&ledger, id, &l).await,
            GuardOp::Plans(_) => client::encode_err(Some(id), ErrorCode::Internal, "internal"),
        }
    }

    /// `guard.buy`: the arguments and plan checked, then one ledger booking; on success the
    /// buyer's standing is read again and reaches the rooms they are in.
    async fn guard_buy(
        self: &Arc<Self>,
        ledger: &Ledger,
        user: &UserId,
        id: u64,
        b: &GuardBuy,
    ) -> Bytes {
        let bad = |msg: &str| client::encode_err(Some(id), ErrorCode::BadRequest, msg);
        if !is_valid_user_id(b.host.as_str()) || b.host == *user {
            return bad("host: another user's id");
        }
        if !is_valid_req_id(&b.req_id) || b.req_id.len() > MAX_GUARD_REQ_ID_BYTES {
            return bad("req_id: 1..=64 bytes of printable ASCII (0x21..=0x7E)");
        }
        let Some(plan) = self.config.guard_plans.iter().find(|p| p.id == b.plan) else {
            return bad("plan: not on sale (see guard.plans)");
        };
        let order = GuardOrder {
            buyer: user.clone(),
            host: b.host.clone(),
            plan: plan.id.clone(),
            duration_ms: plan.duration_ms(),
            price: plan.price,
            host_share: host_share(plan.price, self.money.catalog.share_bp),
            req_id: b.req_id.clone(),
        };
        let refused = |code, msg: &str| client::encode_err(Some(id), code, msg);
        match ledger.buy_guard(&order).await {
            Ok(GuardOutcome::Bought {
                expires_ms,
                balance,
                applied,
            }) => {
                // Before the reply: a join the client sends next carries the new guard. The
                // user's other gateways read it again themselves.
                match crate::standing::standing_of(ledger, user).await {
                    Ok(s) => self.standing_applied(user, s),
                    Err(e) => warn!(%user, error = %e, "Could not read a user's guards."),
                }
                self.standing_changed_elsewhere(user);
                client::encode_ok(
                    id,
                    &GuardBought {
                        host: b.host.clone(),
                        plan: plan.id.clone(),
                        expires_at: expires_ms,
                        balance,
                        applied,
                    },
                )
            }
            Ok(GuardOutcome::InsufficientFunds { balance }) => refused(
                ErrorCode::InsufficientFunds,
                &format!("the plan costs {} coins; you have {balance}", plan.price),
            ),
            Ok(GuardOutcome::InDebt { debt }) => refused(
                ErrorCode::InsufficientFunds,
                &format!("you owe {debt} coins from a refunded top-up; top up first"),
            ),
            Ok(GuardOutcome::KeyReused) => refused(
                ErrorCode::IdempotencyConflict,
                "req_id was used for another guard purchase",
            ),
            Err(e) => {
                warn!(error = %e, %user, "Guard purchase failed.");
                unavailable(id)
            }
        }
    }

    /// `guard.list`: the host's guards in force now, latest expiry first.
    async fn guard_list(&self, ledger: &Ledger, id: u64, l: &GuardList) -> Bytes {
        let bad = |msg: &str| client::encode_err(Some(id), ErrorCode::BadRequest, msg);
        let limit = l.limit.unwrap_or(GUARD_LIST_DEFAULT);
        if !(1..=GUARD_LIST_MAX).contains(&limit) {
            return bad("limit must be 1..=200");
        }
        let host = match (&l.host, &l.room) {
            (Some(h), None) if is_valid_user_id(h.as_str()) => h.clone(),
            (None, Some(room)) => match owner_of(self, room).await {
                Ok(Some(owner)) => owner,
                Ok(None) => {
                    return client::encode_err(Some(id), ErrorCode::RoomNotFound, "no such room");
                }
                Err(()) => {
                    return client::encode_err(
                        Some(id),
                        ErrorCode::Unavailable,
                        "room store unavailable; retry",
                    );
                }
            },
            _ => return bad("name exactly one of host and room"),
        };
        match ledger.guards_of_host(&host, now_ms()).await {
            Ok(guards) => client::encode_ok(
                id,
                &GuardPage {
                    guards: guards
                        .into_iter()
                        .take(limit as usize)
                        .map(|g| GuardEntry {
                            user: g.buyer,
                            expires_at: g.expires_ms,
                        })
                        .collect(),
                    host,
                },
            ),
            Err(e) => {
                warn!(error = %e, "Guard list read failed.");
                unavailable(id)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_validated() {
        assert!(validate_plans(&default_plans()).is_ok());
        let plan = |id: &str, days: f64, price: i64| GuardPlan {
            id: id.into(),
            days,
            price,
        };
        let bad = |plans: Vec<GuardPlan>| validate_plans(&plans).unwrap_err();
        assert!(bad(vec![plan("Week", 7.0, 1)]).contains("[a-z0-9_-]"));
        assert!(bad(vec![plan("w", 7.0, 1), plan("w", 1.0, 1)]).contains("twice"));
        assert!(bad(vec![plan("w", 0.0, 1)]).contains("days"));
        assert!(bad(vec![plan("w", f64::NAN, 1)]).contains("days"));
        assert!(bad(vec![plan("w", 4000.0, 1)]).contains("days"));
        assert!(bad(vec![plan("w", 0.000_001, 1)]).contains("one second"));
        assert!(bad(vec![plan("w", 7.0, 0)]).contains("price"));
        assert!(
            validate_plans(&[plan("short", 0.000_05, 1)]).is_ok(),
            "4.32 s"
        );
        assert_eq!(plan("d", 1.0, 1).duration_ms(), 86_400_000);
        assert_eq!(host_share(1_000, 5_000), 500);
        assert_eq!(host_share(999, 5_000), 499);
        assert_eq!(host_share(1_000, 10_000), 1_000);
        assert_eq!(host_share(i64::MAX, 10_000), i64::MAX);
    }
}
