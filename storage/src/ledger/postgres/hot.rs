//! A new gift's hot path: its three steps in one transaction and three round trips, the
//! statements of each round trip pipelined (sent together, answered in order) by the driver.
//!
//! 1. The room's fence `FOR SHARE`, the saga's row (PENDING, `ON CONFLICT DO NOTHING`), the
//!    sender's account (created if missing, and locked) and the
//!    sender's debit (`coins >= total`, or no row).
//! 2. For a debit: the sender's DEBIT entry, the recipients' earnings, the leaderboards, the
//!    settlement, the prize, the movements, and the saga marked SETTLED.
//! 3. The commit.
//!
//! Everything in round trip 1 is decided only once it is answered: a refused fence or a gift
//! id already booked fails the transaction, which rolls back whatever the pipeline did, and
//! the caller then takes the step-by-step path ([`super::saga`]) for a retry. An insufficient
//! balance writes the void claim step by step (rare, and nothing to pipeline).

use deadpool_postgres::Transaction;

use super::super::movement::{gift_effects, gift_sent};
use super::super::{
    EntryKind, GiftOrder, GiftOutcome, SagaState, VoidReason, day_of, lucky_entry_id, now_ms,
};
use super::movements::{self, Columns};
use super::saga::{
    SQL_CREDIT, SQL_RANKS, coins, col, insert_entry, mark_by_id, rank_rows, sorted_recipients,
};
use super::schema::slot_of;
use super::{Fail, TxResult, from_sql_fence, to_sql_fence};
use crate::StorageError;

/// A statement's parameters.
type Params<'a> = [&'a (dyn tokio_postgres::types::ToSql + Sync)];

/// What the hot path found: the gift booked, or why the step-by-step path must run instead.
pub(super) enum Hot {
    /// Booked; commit.
    Done(GiftOutcome),
    /// The gift id is booked already: a retry (the transaction must be rolled back).
    Known,
}

const SQL_FENCE: &str = "SELECT fence FROM room_owner WHERE room = $1 FOR SHARE";
const SQL_NEW_SAGA: &str = "INSERT INTO gift_saga
   (gift_id, room, sender, order_json, state, fence, updated_ms)
 VALUES ($1, $2, $3, $4, 'PENDING', $5, $6) ON CONFLICT (gift_id) DO NOTHING";
const SQL_CREATE_ACCOUNTS: &str = "INSERT INTO account (user_id)
 SELECT u FROM unnest($1::TEXT[]) AS u ORDER BY u ON CONFLICT (user_id) DO NOTHING";
const SQL_LOCK_ACCOUNTS: &str =
    "SELECT user_id FROM account WHERE user_id = ANY($1) ORDER BY user_id FOR UPDATE";
// A sender who owes a debt (a refund of spent coins) cannot send: no row, insufficient funds.
const SQL_DEBIT: &str = "UPDATE account SET coins = coins - $2 WHERE user_id = $1 AND coins >= $2
   AND NOT EXISTS (SELECT 1 FROM debt WHERE user_id = $1)
 RETURNING coins";
const SQL_SETTLEMENT: &str =
    "INSERT INTO gift_settlement (gift_id, room, platform, lucky) VALUES ($1, $2, $3, $4)";
const SQL_PRIZE: &str = "UPDATE account SET coins = coins + $2 WHERE user_id = $1 RETURNING coins";
const SQL_ENTRY: &str =
    "INSERT INTO entry (user_id, entry_id, kind, amount, balance_after, created_ms)
 VALUES ($1, $2, $3, $4, $5, $6)";
const SQL_SETTLED: &str =
    "UPDATE gift_saga SET state = 'SETTLED', balance_after = $2, updated_ms = $3
 WHERE gift_id = $1";

/// Books a gift id not seen before (see the module docs).
pub(super) async fn send_new(tx: &Transaction<'_>, o: &GiftOrder, fence: u64) -> TxResult<Hot> {
    let (s_fence, s_saga, s_create, s_lock, s_debit) = tokio::try_join!(
        tx.prepare_cached(SQL_FENCE),
        tx.prepare_cached(SQL_NEW_SAGA),
        tx.prepare_cached(SQL_CREATE_ACCOUNTS),
        tx.prepare_cached(SQL_LOCK_ACCOUNTS),
        tx.prepare_cached(SQL_DEBIT),
    )?;
    let (room, sender, total) = (o.room.as_str(), o.sender.as_str(), o.total());
    let (json, f, now) = (o.to_json()?, to_sql_fence(fence)?, now_ms());
    // Only the sender's account is locked: recipients' earnings are rows of their own.
    let users: Vec<&str> = vec![sender];
    // Round trip 1.
    let p_fence: &Params<'_> = &[&room];
    let p_saga: &Params<'_> = &[&o.gift_id, &room, &sender, &json, &f, &now];
    let p_users: &Params<'_> = &[&users];
    let p_debit: &Params<'_> = &[&sender, &total];
    let (installed, inserted, created, locked, debited) = tokio::join!(
        tx.query_opt(&s_fence, p_fence),
        tx.execute(&s_saga, p_saga),
        tx.execute(&s_create, p_users),
        tx.query(&s_lock, p_users),
        tx.query_opt(&s_debit, p_debit),
    );
    if let Some(row) = installed? {
        let installed = from_sql_fence(col(&row, 0)?)?;
        if fence < installed {
            return Err(StorageError::Fenced { token: fence }.into());
        }
    }
    if inserted? == 0 {
        return Ok(Hot::Known);
    }
    created?;
    locked?;
    let Some(row) = debited? else {
        // Not enough coins: the void claim takes the key, so the gift can never be debited.
        let balance = coins(tx, sender).await?;
        insert_entry(tx, sender, o.gift_id, EntryKind::Void, total, Some(balance)).await?;
        let reason = Some(VoidReason::InsufficientFunds);
        mark_by_id(
            tx,
            o.gift_id,
            SagaState::Voided,
            fence,
            reason,
            Some(balance),
        )
        .await?;
        return Ok(Hot::Done(GiftOutcome::InsufficientFunds { balance }));
    };
    let after_debit: i64 = col(&row, 0)?;
    let prize = o.prize();
    let settled = after_debit
        .checked_add(prize)
        .ok_or_else(|| StorageError::backend_msg(format!("coins of {sender} would overflow")))?;
    settle_new(tx, o, after_debit, settled).await?;
    Ok(Hot::Done(GiftOutcome::Settled {
        order_id: o.gift_id,
        balance: settled,
    }))
}

/// Round trip 2: every write of a debited gift's settlement, pipelined.
async fn settle_new(
    tx: &Transaction<'_>,
    o: &GiftOrder,
    after_debit: i64,
    settled: i64,
) -> TxResult<()> {
    let (s_entry, s_credit, s_ranks, s_settlement, s_prize, s_settled, s_moves) = tokio::try_join!(
        tx.prepare_cached(SQL_ENTRY),
        tx.prepare_cached(SQL_CREDIT),
        tx.prepare_cached(SQL_RANKS),
        tx.prepare_cached(SQL_SETTLEMENT),
        tx.prepare_cached(SQL_PRIZE),
        tx.prepare_cached(SQL_SETTLED),
        tx.prepare_cached(movements::SQL_INSERT),
    )?;
    let mut lines = vec![gift_sent(o, after_debit)];
    lines.extend(gift_effects(o, settled));
    let m = Columns::of(&lines);
    let p_moves: &Params<'_> = &[
        &m.users,
        &m.kinds,
        &m.amounts,
        &m.after,
        &m.counterparties,
        &m.keys,
        &m.at,
    ];
    let (room, sender, total, prize, now) = (
        o.room.as_str(),
        o.sender.as_str(),
        o.total(),
        o.prize(),
        now_ms(),
    );
    let recipients = sorted_recipients(o);
    let slot = slot_of(o.gift_id);
    let (boards, users, totals) = rank_rows(o);
    let (debit, lucky) = (EntryKind::Debit.as_str(), EntryKind::Lucky.as_str());
    let lucky_id = lucky_entry_id(o.gift_id);
    let day = day_of(o.created_ms);
    let after = Some(after_debit);
    let (earned, platform, settled_after) = (
        o.earnings_per_recipient(),
        o.platform_share(),
        Some(settled),
    );
    let p_entry: &Params<'_> = &[&sender, &o.gift_id, &debit, &total, &after, &now];
    let p_credit: &Params<'_> = &[&recipients, &slot, &earned];
    let p_ranks: &Params<'_> = &[&room, &day, &slot, &boards, &users, &totals];
    let p_settlement: &Params<'_> = &[&o.gift_id, &room, &platform, &prize];
    let p_prize: &Params<'_> = &[&sender, &prize];
    let p_lucky: &Params<'_> = &[&sender, &lucky_id, &lucky, &prize, &settled_after, &now];
    let p_settled: &Params<'_> = &[&o.gift_id, &settled, &now];
    let (entry, credit, ranks, settlement, paid, prize_entry, marked, moves) = tokio::join!(
        tx.execute(&s_entry, p_entry),
        tx.execute(&s_credit, p_credit),
        tx.execute(&s_ranks, p_ranks),
        tx.execute(&s_settlement, p_settlement),
        async {
            if prize > 0 {
                tx.query_opt(&s_prize, p_prize).await
            } else {
                Ok(None)
            }
        },
        async {
            if prize > 0 {
                tx.execute(&s_entry, p_lucky).await
            } else {
                Ok(0)
            }
        },
        tx.execute(&s_settled, p_settled),
        tx.execute(&s_moves, p_moves),
    );
    entry?;
    moves?;
    credit?;
    ranks?;
    settlement?;
    if let Some(row) = paid? {
        let after: i64 = col(&row, 0)?;
        if after != settled {
            // The saga says `settled`: fail, so that none of it is kept.
            return Err(Fail::Store(StorageError::corrupt_msg(format!(
                "gift settled at balance {after}, booked as {settled}"
            ))));
        }
    }
    prize_entry?;
    marked?;
    Ok(())
}
