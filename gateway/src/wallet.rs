//! The wallet operations at the gateway (`wallet.history`, `wallet.transfer`,
//! `wallet.checkin`, the sign-up reward), answered from the ledger for the caller's own wallet; the admin API reads any user's through the same
//! calls.

use bytes::Bytes;
use protocol::client::{
    self, CheckedIn, MovementEntry, Transferred, WalletHistory, WalletHistoryPage, WalletOp,
    WalletTransfer, is_valid_req_id,
};
use protocol::ids::is_valid_user_id;
use protocol::{ErrorCode, UserId};
use storage::StorageError;
use storage::key_set::KeySet;
use storage::ledger::{
    HistoryPage, HistoryQuery, Ledger, MovementKind, TransferOrder, TransferOutcome, day_of, now_ms,
};

use crate::money::{MAX_GRANT_COINS, Money};
use tracing::warn;

/// A statement query from the wire's arguments.
///
/// # Errors
/// A message for an unknown kind.
pub(crate) fn history_query(h: &WalletHistory) -> Result<HistoryQuery, String> {
    let kind = match h.kind.as_deref() {
        None => None,
        Some(k) => {
            Some(MovementKind::from_name(k).ok_or_else(|| format!("unknown movement kind {k:?}"))?)
        }
    };
    Ok(HistoryQuery {
        cursor: h.cursor.clone(),
        limit: h.limit.map_or(0, |l| l as usize),
        kind,
    })
}

/// The wire form of a statement page.
pub(crate) fn page_of(page: HistoryPage) -> WalletHistoryPage {
    WalletHistoryPage {
        movements: page
            .movements
            .into_iter()
            .map(|m| MovementEntry {
                kind: m.kind.as_str().to_owned(),
                account: m.kind.account().as_str().to_owned(),
                amount: m.amount,
                balance_after: m.balance_after,
                counterparty: m.counterparty,
                key: m.key,
                at: m.at_ms,
            })
            .collect(),
        next: page.next,
    }
}

/// Answers a wallet op of `user`, with `money`'s limits and rewards.
pub(crate) async fn answer(
    money: &Money,
    ledger: &Ledger,
    user: &UserId,
    id: u64,
    op: WalletOp,
) -> Bytes {
    match op {
        WalletOp::Transfer(t) => transfer(ledger, money.transfer_daily_limit, user, id, &t).await,
        WalletOp::Checkin(_) => checkin(ledger, money.checkin_reward, user, id).await,
        WalletOp::History(h) => {
            let query = match history_query(&h) {
                Ok(q) => q,
                Err(msg) => return client::encode_err(Some(id), ErrorCode::BadRequest, &msg),
            };
            match ledger.history(user, &query).await {
                Ok(page) => client::encode_ok(id, &page_of(page)),
                Err(StorageError::Invalid { .. }) => {
                    client::encode_err(Some(id), ErrorCode::BadRequest, "bad cursor")
                }
                Err(e) => {
                    warn!(error = %e, "Statement read failed.");
                    client::encode_err(
                        Some(id),
                        ErrorCode::Unavailable,
                        "ledger unavailable; retry",
                    )
                }
            }
        }
    }
}

/// `wallet.transfer`: the arguments checked, then one ledger booking.
async fn transfer(
    ledger: &Ledger,
    daily_limit: i64,
    user: &UserId,
    id: u64,
    t: &WalletTransfer,
) -> Bytes {
    let bad = |msg: &str| client::encode_err(Some(id), ErrorCode::BadRequest, msg);
    if !is_valid_user_id(t.to.as_str()) || t.to == *user {
        return bad("to: another user's id");
    }
    if t.amount <= 0 || t.amount > MAX_GRANT_COINS {
        return bad("amount: 1..=10^12 coins");
    }
    if !is_valid_req_id(&t.req_id) {
        return bad("req_id: 1..=128 bytes of printable ASCII (0x21..=0x7E)");
    }
    let order = TransferOrder {
        from: user.clone(),
        to: t.to.clone(),
        amount: t.amount,
        req_id: t.req_id.clone(),
        daily_limit,
        day: day_of(now_ms()),
    };
    let refused = |code, msg: &str| client::encode_err(Some(id), code, msg);
    match ledger.transfer(&order).await {
        Ok(TransferOutcome::Done { balance, applied }) => {
            client::encode_ok(id, &Transferred { balance, applied })
        }
        Ok(TransferOutcome::NotSeller) => {
            refused(ErrorCode::NotASeller, "only coin sellers may transfer")
        }
        Ok(TransferOutcome::InsufficientFunds { balance }) => refused(
            ErrorCode::InsufficientFunds,
            &format!("your balance is {balance} coins"),
        ),
        Ok(TransferOutcome::DailyLimit { remaining }) => refused(
            ErrorCode::QuotaExceeded,
            &format!("daily transfer limit: {remaining} coins left today (UTC)"),
        ),
        Ok(TransferOutcome::KeyReused) => refused(
            ErrorCode::IdempotencyConflict,
            "req_id already used for another transfer",
        ),
        Err(StorageError::Invalid { .. }) => bad("not a valid transfer"),
        Err(e) => {
            warn!(error = %e, "Transfer failed.");
            refused(
                ErrorCode::Unavailable,
                "ledger unavailable; retry with the same req_id",
            )
        }
    }
}

/// `wallet.checkin`: today's reward, once per user per UTC day (the day is the key).
async fn checkin(ledger: &Ledger, reward: i64, user: &UserId, id: u64) -> Bytes {
    if reward <= 0 {
        return client::encode_err(
            Some(id),
            ErrorCode::BadRequest,
            "daily check-in is not enabled on this server",
        );
    }
    let period = format!("checkin:{}", day_of(now_ms()));
    match ledger.reward(user, reward, &period).await {
        Ok(out) => client::encode_ok(
            id,
            &CheckedIn {
                reward,
                applied: out.applied,
                balance: out.balance,
            },
        ),
        Err(e) => {
            warn!(error = %e, "Check-in failed.");
            client::encode_err(
                Some(id),
                ErrorCode::Unavailable,
                "ledger unavailable; retry",
            )
        }
    }
}

/// Most users [`SignedUp`] remembers; past it, it starts afresh.
const SIGNED_UP_MAX: usize = 100_000;

/// The users whose sign-up reward this process has credited, found credited, or is crediting:
/// their next connections make no ledger call. Bounded: when full it starts afresh, which
/// costs each forgotten user one more (idempotent) call. It keeps an 8-byte hash of each id
/// (a [`KeySet`]); a collision, about one lookup in 2^64 / 100,000, leaves a user's reward
/// to a later process (the reward's key still credits it once).
#[derive(Debug, Clone, Default)]
pub struct SignedUp(KeySet);

impl SignedUp {
    /// Whether `user` still needs the ledger call; if so, it is claimed for this one.
    fn claim(&self, user: &UserId) -> bool {
        self.0.insert_new(user.as_str(), SIGNED_UP_MAX)
    }

    /// A failed call: the user's next connection tries again.
    fn release(&self, user: &UserId) {
        self.0.remove(user.as_str());
    }
}

impl Money {
    /// Credits the sign-up reward in the background, once per user ever (by key: concurrent
    /// first connections, also through other gateways, credit once). One idempotent ledger
    /// call per user per process while a reward is configured ([`SignedUp`]); nothing
    /// otherwise.
    pub(crate) fn reward_signup(&self, tracker: &tokio_util::task::TaskTracker, user: &UserId) {
        let (Some(ledger), reward) = (self.ledger.clone(), self.signup_reward) else {
            return;
        };
        if reward <= 0 || user.is_robot() || !self.signed_up.claim(user) {
            return;
        }
        let (user, signed_up) = (user.clone(), self.signed_up.clone());
        tracker.spawn(async move {
            metrics::counter!(SIGNUP_CALLS).increment(1);
            if let Err(e) = ledger.reward(&user, reward, "signup").await {
                signed_up.release(&user);
                warn!(error = %e, %user, "Sign-up reward failed; the next connection retries.");
            }
        });
    }
}

/// Ledger calls made for sign-up rewards (one per user per process while they succeed).
pub(crate) const SIGNUP_CALLS: &str = "chorus_signup_reward_calls_total";
