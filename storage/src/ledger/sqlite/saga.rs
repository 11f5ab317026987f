//! The gift saga's steps in SQL, each run inside the writer's group transaction: the one-job
//! hot path for a new gift, and `begin`, `debit`, `settle` and `void` for the saga driver.

use rusqlite::params;

use super::super::movement::{gift_effects, gift_sent};
use super::super::{
    BeginOutcome, DebitOutcome, GiftOrder, GiftOutcome, GiftResult, SagaState, SettleOutcome,
    VoidOutcome, VoidReason, day_of, now_ms,
};
use super::movements::insert_movements;
use super::payment::debt_of;
use super::rows::{add_coins, ensure_fence, load_saga, mark, tx_coins, tx_set_coins};
use super::schema::{BOARD_RECEIVERS, BOARD_SENDERS};
use super::tx::{LUCKY_PAID, PLATFORM_REVENUE, SQL_CREDIT_NEW, SQL_RANK_NEW, Tx, hot};
use super::{db, to_sql_fence};
use crate::{Result, StorageError};

pub(super) fn tx_send(c: &Tx<'_, '_>, order: &GiftOrder, fence: u64) -> Result<GiftOutcome> {
    ensure_fence(c, &order.room, fence, 0)?;
    if let Some(outcome) = tx_send_new(c, order, fence)? {
        return Ok(outcome);
    }
    // A retry: continue from the stored saga, answer with the first result.
    let Some(rec) = load_saga(c, order.gift_id)? else {
        return Err(StorageError::corrupt_msg(
            "a saga refused as a duplicate is missing",
        ));
    };
    order.same_request_as(&rec.order)?;
    ensure_fence(c, &order.room, fence, rec.fence)?;
    if let Some(first) = rec.result() {
        return Ok(GiftOutcome::Duplicate { first });
    }
    let mut settled_here = false;
    let first = match tx_debit(c, order, fence)? {
        DebitOutcome::Debited { .. } => {
            let settle = tx_settle(c, order, fence)?;
            // `false`: a racing finisher (the owner's recovery) settled it; the event is its.
            let Some((result, here)) = settle.settled(order.gift_id) else {
                return Err(StorageError::corrupt_msg(format!(
                    "settle after debit gave {settle:?}"
                )));
            };
            settled_here = here;
            result
        }
        DebitOutcome::InsufficientFunds { balance } => GiftResult::InsufficientFunds { balance },
        DebitOutcome::Voided => GiftResult::Voided,
        DebitOutcome::Missing => {
            return Err(StorageError::corrupt_msg(
                "saga vanished inside a transaction",
            ));
        }
    };
    if settled_here {
        // This retry finished a saga an earlier attempt left open: nobody published its
        // event, so it is owed, in the same transaction (the room's sweep publishes it).
        c.prepare_cached(
            "INSERT OR IGNORE INTO unpublished_gift (gift_id, room, marked_ms) VALUES (?1, ?2, ?3)",
        )
        .map_err(db)?
        .execute(params![
            order.gift_id.as_bytes().as_slice(),
            rec.order.room.as_str(),
            now_ms()
        ])
        .map_err(db)?;
    }
    Ok(GiftOutcome::Duplicate { first })
}

/// The hot path, for a gift id not booked yet: PENDING → DEBITED → SETTLED (or → VOIDED) inside
/// this one job, so the saga row is written once, in its final state. The row goes in first,
/// its unique gift id being the existence check (no lookup before it): `None` when the id is
/// booked already, before anything was written, and the caller continues that saga instead.
pub(super) fn tx_send_new(
    c: &Tx<'_, '_>,
    order: &GiftOrder,
    fence: u64,
) -> Result<Option<GiftOutcome>> {
    let sender = order.sender.as_str();
    let total = order.total();
    let balance = spendable(c, sender)?;
    // The saga row is the claim: its unique gift id makes a second debit or void impossible.
    if balance < total {
        let reason = Some(VoidReason::InsufficientFunds);
        if !insert_saga(c, order, SagaState::Voided, fence, reason, Some(balance))? {
            return Ok(None);
        }
        return Ok(Some(GiftOutcome::InsufficientFunds { balance }));
    }
    let debited = balance - total;
    let settled = debited
        .checked_add(order.prize())
        .ok_or_else(|| StorageError::backend_msg(format!("coins of {sender} would overflow")))?;
    if !insert_saga(c, order, SagaState::Settled, fence, None, Some(settled))? {
        return Ok(None);
    }
    tx_set_coins(c, sender, debited)?;
    insert_movements(c, &[gift_sent(order, debited)])?;
    let after = apply_effects(c, order, Some(debited))?;
    if after != settled {
        // The row above says `settled`: fail the job, so that none of it is kept.
        return Err(StorageError::corrupt_msg(format!(
            "gift settled at balance {after}, booked as {settled}"
        )));
    }
    Ok(Some(GiftOutcome::Settled {
        order_id: order.gift_id,
        balance: settled,
    }))
}

/// The sender's coins for a gift's check: none while they owe a debt (see the ledger's
/// `payment` module), so a gift is refused as insufficient funds until it is covered.
fn spendable(c: &Tx<'_, '_>, sender: &str) -> Result<i64> {
    let coins = tx_coins(c, sender)?;
    if coins > 0 && debt_of(c, sender)? > 0 {
        return Ok(0);
    }
    Ok(coins)
}

pub(super) fn insert_saga(
    c: &Tx<'_, '_>,
    order: &GiftOrder,
    state: SagaState,
    fence: u64,
    reason: Option<VoidReason>,
    balance_after: Option<i64>,
) -> Result<bool> {
    let inserted = hot(&c.hot.new_saga)?
        .execute(params![
            order.gift_id.as_bytes().as_slice(),
            order.room.as_str(),
            order.to_json()?,
            state.as_str(),
            to_sql_fence(fence)?,
            reason.map(VoidReason::as_str),
            balance_after,
            now_ms()
        ])
        .map_err(db)?;
    Ok(inserted == 1)
}

pub(super) fn tx_begin(c: &Tx<'_, '_>, order: &GiftOrder, fence: u64) -> Result<BeginOutcome> {
    if let Some(rec) = load_saga(c, order.gift_id)? {
        order.same_request_as(&rec.order)?;
        ensure_fence(c, &order.room, fence, rec.fence)?;
        return Ok(BeginOutcome::Existing(rec));
    }
    ensure_fence(c, &order.room, fence, 0)?;
    if !insert_saga(c, order, SagaState::Pending, fence, None, None)? {
        return Err(StorageError::corrupt_msg(
            "a saga appeared inside a transaction",
        ));
    }
    Ok(BeginOutcome::Started)
}

pub(super) fn tx_debit(c: &Tx<'_, '_>, order: &GiftOrder, fence: u64) -> Result<DebitOutcome> {
    let Some(rec) = load_saga(c, order.gift_id)? else {
        return Ok(DebitOutcome::Missing);
    };
    // The amounts come from the stored order, never from the caller's copy.
    let order = &rec.order.clone();
    ensure_fence(c, &order.room, fence, rec.fence)?;
    match rec.state {
        SagaState::Debited | SagaState::Settled => {
            return Ok(DebitOutcome::Debited {
                balance: rec.balance_after.unwrap_or(0),
            });
        }
        SagaState::Voided => {
            return Ok(match rec.result() {
                Some(GiftResult::InsufficientFunds { balance }) => {
                    DebitOutcome::InsufficientFunds { balance }
                }
                _ => DebitOutcome::Voided,
            });
        }
        // PENDING: no claim yet (a claim and its state change commit together).
        SagaState::Pending => {}
    }
    let sender = order.sender.as_str();
    let balance = spendable(c, sender)?;
    let total = order.total();
    if balance < total {
        mark(
            c,
            order.gift_id,
            SagaState::Voided,
            fence,
            Some(VoidReason::InsufficientFunds),
            Some(balance),
        )?;
        return Ok(DebitOutcome::InsufficientFunds { balance });
    }
    let after = tx_set_coins(c, sender, balance - total)?;
    insert_movements(c, &[gift_sent(order, after)])?;
    mark(
        c,
        order.gift_id,
        SagaState::Debited,
        fence,
        None,
        Some(after),
    )?;
    Ok(DebitOutcome::Debited { balance: after })
}

pub(super) fn tx_settle(c: &Tx<'_, '_>, order: &GiftOrder, fence: u64) -> Result<SettleOutcome> {
    let Some(rec) = load_saga(c, order.gift_id)? else {
        return Ok(SettleOutcome::Missing);
    };
    ensure_fence(c, &order.room, fence, rec.fence)?;
    match rec.state {
        SagaState::Settled => {
            return Ok(SettleOutcome::AlreadySettled {
                balance: rec.balance_after.unwrap_or(0),
            });
        }
        SagaState::Pending | SagaState::Voided => return Ok(SettleOutcome::NotDebited(rec.state)),
        SagaState::Debited => {}
    }
    // Effects come from the stored order, never from the caller's copy.
    let o = &rec.order;
    let balance = apply_effects(c, o, None)?;
    mark(c, o.gift_id, SagaState::Settled, fence, None, Some(balance))?;
    Ok(SettleOutcome::Settled { balance })
}

/// Credits recipients' earnings, the house and the prize, and records the settled facts the
/// leaderboards read. Returns the sender's coins afterwards (`known_balance` saves a read).
pub(super) fn apply_effects(
    c: &Tx<'_, '_>,
    o: &GiftOrder,
    known_balance: Option<i64>,
) -> Result<i64> {
    let earned = o.earnings_per_recipient();
    let day = day_of(o.created_ms);
    let mut credit = hot(&c.hot.credit)?;
    let mut fact = hot(&c.hot.fact)?;
    let mut rank = hot(&c.hot.rank)?;
    let mut add_rank = |board: i64, user: &str, amount: i64| -> Result<()> {
        let row = params![o.room.as_str(), board, day, user, amount];
        if rank.execute(row).map_err(db)? == 0 {
            c.prepare_cached(SQL_RANK_NEW)
                .map_err(db)?
                .execute(row)
                .map_err(db)?;
        }
        Ok(())
    };
    add_rank(BOARD_SENDERS, o.sender.as_str(), o.total())?;
    for r in &o.recipients {
        let row = params![r.as_str(), earned];
        if credit.execute(row).map_err(db)? == 0 {
            c.prepare_cached(SQL_CREDIT_NEW)
                .map_err(db)?
                .execute(row)
                .map_err(db)?;
        }
        add_rank(BOARD_RECEIVERS, r.as_str(), o.per_recipient())?;
        fact.execute(params![
            o.gift_id.as_bytes().as_slice(),
            r.as_str(),
            o.room.as_str(),
            day,
            o.sender.as_str(),
            o.per_recipient(),
            earned
        ])
        .map_err(db)?;
    }
    super::app_rank::add_app_ranks(c, o)?;
    c.add_house(PLATFORM_REVENUE, o.platform_share())?;
    let prize = o.prize();
    let after = if prize > 0 {
        // Credited once: the saga moves to SETTLED in this same transaction.
        let after = add_coins(c, o.sender.as_str(), prize)?;
        c.add_house(LUCKY_PAID, prize)?;
        after
    } else {
        match known_balance {
            Some(b) => b,
            None => tx_coins(c, o.sender.as_str())?,
        }
    };
    insert_movements(c, &gift_effects(o, after))?;
    Ok(after)
}

pub(super) fn tx_void(
    c: &Tx<'_, '_>,
    order: &GiftOrder,
    fence: u64,
    reason: VoidReason,
) -> Result<VoidOutcome> {
    let Some(rec) = load_saga(c, order.gift_id)? else {
        return Ok(VoidOutcome::Missing);
    };
    let order = &rec.order.clone();
    ensure_fence(c, &order.room, fence, rec.fence)?;
    match rec.state {
        SagaState::Debited | SagaState::Settled => return Ok(VoidOutcome::Debited),
        SagaState::Voided => return Ok(VoidOutcome::Voided),
        SagaState::Pending => {}
    }
    // PENDING: nothing claimed the gift yet; the VOIDED state is the void claim.
    mark(
        c,
        order.gift_id,
        SagaState::Voided,
        fence,
        Some(reason),
        None,
    )?;
    Ok(VoidOutcome::Voided)
}
