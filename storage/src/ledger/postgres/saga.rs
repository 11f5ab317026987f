//! The steps on PostgreSQL, each the body of one transaction: fences, grants, and the saga's
//! `begin`, `debit`, `settle`, `void` and `touch`, plus `send_gift`, which runs a new gift's
//! three steps in one transaction.
//!
//! Every step takes its locks in one order (room fence `FOR SHARE`, saga `FOR UPDATE`, then
//! accounts sorted by user id, then leaderboard rows in key order), so two steps never wait on
//! each other in a cycle; a deadlock the server still detects is retried by the runner.

use deadpool_postgres::Transaction;
use protocol::{RoomId, UserId};
use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use super::super::MovementKind;
use super::super::movement::{gift_effects, gift_sent, single};
use super::super::{
    BeginOutcome, DebitOutcome, EntryKind, FenceInstall, GiftOrder, GiftOutcome, GiftResult,
    GrantOutcome, SagaRecord, SagaState, SettleOutcome, VoidOutcome, VoidReason, day_of,
    grant_entry_id, lucky_entry_id, now_ms,
};
use super::batch::Booked;
use super::movements::insert_movements;
use super::schema::{BOARD_RECEIVERS, BOARD_SENDERS, slot_of};
use super::{
    Fail, PostgresLedger, SQL_SAGA, TxResult, from_sql_fence, saga_record, to_sql_fence, transact,
};
use crate::{Result, StorageError};

/// Column `i` of a row, a type mismatch or an unexpected NULL being `Corrupt` (not a panic).
pub(super) fn col<'a, T: FromSql<'a>>(row: &'a Row, i: usize) -> Result<T> {
    row.try_get(i)
        .map_err(|e| StorageError::corrupt(format!("ledger column {i}"), e))
}

impl PostgresLedger {
    pub(in crate::ledger) async fn grant_as(
        &self,
        user: &UserId,
        amount: i64,
        key: &str,
        line: MovementKind,
    ) -> Result<GrantOutcome> {
        let entry_id = grant_entry_id(key);
        transact!(self, |tx| grant_tx(&tx, user, amount, entry_id, key, line)
            .await)
    }

    pub(in crate::ledger) async fn install_fence(
        &self,
        room: &RoomId,
        fence: u64,
        owner: &str,
    ) -> Result<FenceInstall> {
        let f = to_sql_fence(fence)?;
        transact!(self, |tx| install_tx(&tx, room, f, owner).await)
    }

    pub(in crate::ledger) async fn send_gift(
        &self,
        order: &GiftOrder,
        fence: u64,
    ) -> Result<GiftOutcome> {
        match self.gifts.book(order, fence).await? {
            Booked::Done(outcome) => Ok(outcome),
            // A retry of a booked gift, or a batch whose locks waited too long: step by step,
            // from where its saga stands (if anywhere).
            Booked::Alone => transact!(self, |tx| send_tx(&tx, order, fence).await),
        }
    }

    pub(in crate::ledger) async fn begin(
        &self,
        order: &GiftOrder,
        fence: u64,
    ) -> Result<BeginOutcome> {
        transact!(self, |tx| begin_tx(&tx, order, fence).await)
    }

    pub(in crate::ledger) async fn debit(
        &self,
        order: &GiftOrder,
        fence: u64,
    ) -> Result<DebitOutcome> {
        transact!(self, |tx| debit_tx(&tx, order, fence).await)
    }

    pub(in crate::ledger) async fn settle(
        &self,
        order: &GiftOrder,
        fence: u64,
    ) -> Result<SettleOutcome> {
        transact!(self, |tx| settle_tx(&tx, order, fence).await)
    }

    pub(in crate::ledger) async fn void(
        &self,
        order: &GiftOrder,
        fence: u64,
        reason: VoidReason,
    ) -> Result<VoidOutcome> {
        transact!(self, |tx| void_tx(&tx, order, fence, reason).await)
    }

    pub(in crate::ledger) async fn touch(
        &self,
        order: &GiftOrder,
        fence: u64,
    ) -> Result<Option<SagaRecord>> {
        transact!(self, |tx| touch_tx(&tx, order, fence).await)
    }
}

async fn grant_tx(
    tx: &Transaction<'_>,
    user: &UserId,
    amount: i64,
    entry_id: uuid::Uuid,
    key: &str,
    line: MovementKind,
) -> TxResult<GrantOutcome> {
    // The entry's key is the idempotency check: a second grant under it inserts nothing.
    let insert = tx
        .prepare_cached(
            "INSERT INTO entry (user_id, entry_id, kind, amount, created_ms)
             VALUES ($1, $2, 'GRANT', $3, $4) ON CONFLICT (user_id, entry_id) DO NOTHING",
        )
        .await?;
    let inserted = tx
        .execute(&insert, &[&user.as_str(), &entry_id, &amount, &now_ms()])
        .await?;
    if inserted == 0 {
        let row = tx
            .query_one(
                "SELECT kind, amount FROM entry WHERE user_id = $1 AND entry_id = $2",
                &[&user.as_str(), &entry_id],
            )
            .await?;
        let kind = EntryKind::parse(col(&row, 0)?)?;
        if kind != EntryKind::Grant {
            return Err(StorageError::corrupt_msg(format!("grant key holds a {kind:?}")).into());
        }
        return Ok(GrantOutcome {
            balance: coins(tx, user.as_str()).await?,
            applied: false,
            amount: col(&row, 1)?,
        });
    }
    let add = tx
        .prepare_cached(
            "INSERT INTO account (user_id, coins) VALUES ($1, $2)
             ON CONFLICT (user_id) DO UPDATE SET coins = account.coins + EXCLUDED.coins
             RETURNING coins",
        )
        .await?;
    let balance: i64 = col(&tx.query_one(&add, &[&user.as_str(), &amount]).await?, 0)?;
    let line = single(user, line, amount, Some(balance), None, key, now_ms());
    insert_movements(tx, &[line]).await?;
    Ok(GrantOutcome {
        balance,
        applied: true,
        amount,
    })
}

async fn install_tx(
    tx: &Transaction<'_>,
    room: &RoomId,
    fence: i64,
    owner: &str,
) -> TxResult<FenceInstall> {
    let current = tx
        .query_opt(
            "SELECT fence, owner FROM room_owner WHERE room = $1 FOR UPDATE",
            &[&room.as_str()],
        )
        .await?;
    if let Some(row) = current {
        let cur: i64 = col(&row, 0)?;
        let who: &str = col(&row, 1)?;
        if cur > fence || (cur == fence && who != owner) {
            return Ok(FenceInstall::Stale {
                current: from_sql_fence(cur)?,
            });
        }
        tx.execute(
            "UPDATE room_owner SET fence = $2, owner = $3, since_ms = $4 WHERE room = $1",
            &[&room.as_str(), &fence, &owner, &now_ms()],
        )
        .await?;
        return Ok(FenceInstall::Installed);
    }
    let inserted = tx
        .execute(
            "INSERT INTO room_owner (room, fence, owner, since_ms) VALUES ($1, $2, $3, $4)
             ON CONFLICT (room) DO NOTHING",
            &[&room.as_str(), &fence, &owner, &now_ms()],
        )
        .await?;
    if inserted == 0 {
        // Another node installed the room's first fence meanwhile: decide again on its row.
        return Err(Fail::Retry);
    }
    Ok(FenceInstall::First)
}

/// Fails with `Fenced` if `fence` is below the room's installed fence or `saga_fence`. The room
/// row is read `FOR SHARE`: an install waits for this transaction, and this one sees any
/// install that committed before it.
async fn ensure_fence(
    tx: &Transaction<'_>,
    room: &RoomId,
    fence: u64,
    saga_fence: u64,
) -> TxResult<()> {
    let stmt = tx
        .prepare_cached("SELECT fence FROM room_owner WHERE room = $1 FOR SHARE")
        .await?;
    let installed = match tx.query_opt(&stmt, &[&room.as_str()]).await? {
        Some(row) => from_sql_fence(col(&row, 0)?)?,
        None => 0,
    };
    if fence < installed.max(saga_fence) {
        return Err(StorageError::Fenced { token: fence }.into());
    }
    Ok(())
}

/// The saga row, locked for this transaction.
async fn lock_saga(tx: &Transaction<'_>, gift_id: uuid::Uuid) -> TxResult<Option<SagaRecord>> {
    let stmt = tx.prepare_cached(&format!("{SQL_SAGA} FOR UPDATE")).await?;
    match tx.query_opt(&stmt, &[&gift_id]).await? {
        Some(row) => Ok(Some(saga_record(gift_id, &row, 0)?)),
        None => Ok(None),
    }
}

/// Creates the accounts of `users` that do not exist and locks them all, in user-id order.
async fn lock_accounts(tx: &Transaction<'_>, users: &[&str]) -> TxResult<()> {
    let mut sorted: Vec<&str> = users.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let create = tx
        .prepare_cached(
            "INSERT INTO account (user_id) SELECT u FROM unnest($1::TEXT[]) AS u ORDER BY u
             ON CONFLICT (user_id) DO NOTHING",
        )
        .await?;
    tx.execute(&create, &[&sorted]).await?;
    let lock = tx
        .prepare_cached(
            "SELECT user_id FROM account WHERE user_id = ANY($1) ORDER BY user_id FOR UPDATE",
        )
        .await?;
    tx.query(&lock, &[&sorted]).await?;
    Ok(())
}

pub(super) async fn coins(tx: &Transaction<'_>, user: &str) -> TxResult<i64> {
    let stmt = tx
        .prepare_cached("SELECT coins FROM account WHERE user_id = $1")
        .await?;
    Ok(match tx.query_opt(&stmt, &[&user]).await? {
        Some(row) => col(&row, 0)?,
        None => 0,
    })
}

pub(super) async fn insert_entry(
    tx: &Transaction<'_>,
    user: &str,
    entry_id: uuid::Uuid,
    kind: EntryKind,
    amount: i64,
    balance_after: Option<i64>,
) -> TxResult<()> {
    // No ON CONFLICT: a second claim under a key is refused by the primary key, loudly.
    let stmt = tx
        .prepare_cached(
            "INSERT INTO entry (user_id, entry_id, kind, amount, balance_after, created_ms)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .await?;
    tx.execute(
        &stmt,
        &[
            &user,
            &entry_id,
            &kind.as_str(),
            &amount,
            &balance_after,
            &now_ms(),
        ],
    )
    .await?;
    Ok(())
}

async fn mark(
    tx: &Transaction<'_>,
    rec: &SagaRecord,
    state: SagaState,
    fence: u64,
    reason: Option<VoidReason>,
    balance_after: Option<i64>,
) -> TxResult<()> {
    mark_by_id(tx, rec.order.gift_id, state, fence, reason, balance_after).await
}

/// Moves saga `gift_id` to `state`, raising its fence to `fence`.
pub(super) async fn mark_by_id(
    tx: &Transaction<'_>,
    gift_id: uuid::Uuid,
    state: SagaState,
    fence: u64,
    reason: Option<VoidReason>,
    balance_after: Option<i64>,
) -> TxResult<()> {
    let stmt = tx
        .prepare_cached(
            "UPDATE gift_saga SET state = $1, fence = GREATEST(fence, $2), reason = $3,
               balance_after = COALESCE($4, balance_after), updated_ms = $5
             WHERE gift_id = $6",
        )
        .await?;
    tx.execute(
        &stmt,
        &[
            &state.as_str(),
            &to_sql_fence(fence)?,
            &reason.map(VoidReason::as_str),
            &balance_after,
            &now_ms(),
            &gift_id,
        ],
    )
    .await?;
    Ok(())
}

async fn send_tx(tx: &Transaction<'_>, order: &GiftOrder, fence: u64) -> TxResult<GiftOutcome> {
    let duplicate = match begin_tx(tx, order, fence).await? {
        BeginOutcome::Started => false,
        BeginOutcome::Existing(rec) => {
            if let Some(first) = rec.result() {
                return Ok(GiftOutcome::Duplicate { first });
            }
            true
        }
    };
    // Every account the gift touches, locked once in order (the stored order's, for a retry).
    let Some(rec) = lock_saga(tx, order.gift_id).await? else {
        return Err(StorageError::corrupt_msg("saga vanished inside a transaction").into());
    };
    lock_accounts(tx, &[rec.order.sender.as_str()]).await?;
    let mut settled_here = false;
    let result = match debit_tx(tx, order, fence).await? {
        DebitOutcome::Debited { .. } => {
            let settle = settle_tx(tx, order, fence).await?;
            // `false`: a racing finisher (the owner's recovery) settled it; the event is its.
            let Some((result, here)) = settle.settled(order.gift_id) else {
                return Err(StorageError::corrupt_msg(format!(
                    "settle after debit gave {settle:?}"
                ))
                .into());
            };
            settled_here = here;
            result
        }
        DebitOutcome::InsufficientFunds { balance } => GiftResult::InsufficientFunds { balance },
        DebitOutcome::Voided => GiftResult::Voided,
        DebitOutcome::Missing => {
            return Err(StorageError::corrupt_msg("saga vanished inside a transaction").into());
        }
    };
    if duplicate && settled_here {
        // This retry finished a saga an earlier attempt left open: nobody published its
        // event, so it is owed, in the same transaction (the room's sweep publishes it).
        let owe = tx
            .prepare_cached(
                "INSERT INTO unpublished_gift (gift_id, room, marked_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (gift_id) DO NOTHING",
            )
            .await?;
        tx.execute(&owe, &[&order.gift_id, &rec.order.room.as_str(), &now_ms()])
            .await?;
    }
    Ok(if duplicate {
        GiftOutcome::Duplicate { first: result }
    } else {
        GiftOutcome::first(result)
    })
}

async fn begin_tx(tx: &Transaction<'_>, order: &GiftOrder, fence: u64) -> TxResult<BeginOutcome> {
    ensure_fence(tx, &order.room, fence, 0).await?;
    // The unique gift id is the existence check: a second begin inserts nothing.
    let stmt = tx
        .prepare_cached(
            "INSERT INTO gift_saga
               (gift_id, room, sender, order_json, state, fence, updated_ms)
             VALUES ($1, $2, $3, $4, 'PENDING', $5, $6) ON CONFLICT (gift_id) DO NOTHING",
        )
        .await?;
    let inserted = tx
        .execute(
            &stmt,
            &[
                &order.gift_id,
                &order.room.as_str(),
                &order.sender.as_str(),
                &order.to_json()?,
                &to_sql_fence(fence)?,
                &now_ms(),
            ],
        )
        .await?;
    if inserted == 1 {
        return Ok(BeginOutcome::Started);
    }
    let Some(rec) = lock_saga(tx, order.gift_id).await? else {
        return Err(StorageError::corrupt_msg("a saga refused as a duplicate is missing").into());
    };
    order.same_request_as(&rec.order)?;
    ensure_fence(tx, &rec.order.room, fence, rec.fence).await?;
    Ok(BeginOutcome::Existing(rec))
}

async fn debit_tx(tx: &Transaction<'_>, order: &GiftOrder, fence: u64) -> TxResult<DebitOutcome> {
    let Some(rec) = lock_saga(tx, order.gift_id).await? else {
        return Ok(DebitOutcome::Missing);
    };
    // The amounts come from the stored order, never from the caller's copy.
    let o = &rec.order;
    ensure_fence(tx, &o.room, fence, rec.fence).await?;
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
        SagaState::Pending => {}
    }
    let sender = o.sender.as_str();
    lock_accounts(tx, &[sender]).await?;
    let total = o.total();
    let take = tx
        .prepare_cached(
            "UPDATE account SET coins = coins - $2 WHERE user_id = $1 AND coins >= $2
               AND NOT EXISTS (SELECT 1 FROM debt WHERE user_id = $1)
             RETURNING coins",
        )
        .await?;
    let Some(row) = tx.query_opt(&take, &[&sender, &total]).await? else {
        // Not enough coins: the void claim takes the key, so this gift can never be debited.
        // A sender in debt has nothing to spend (balance 0), as every engine answers.
        let balance = if super::payment::debt_of(tx, sender).await? > 0 {
            0
        } else {
            coins(tx, sender).await?
        };
        insert_entry(tx, sender, o.gift_id, EntryKind::Void, total, Some(balance)).await?;
        let reason = Some(VoidReason::InsufficientFunds);
        mark(tx, &rec, SagaState::Voided, fence, reason, Some(balance)).await?;
        return Ok(DebitOutcome::InsufficientFunds { balance });
    };
    let after: i64 = col(&row, 0)?;
    insert_entry(tx, sender, o.gift_id, EntryKind::Debit, total, Some(after)).await?;
    insert_movements(tx, &[gift_sent(o, after)]).await?;
    mark(tx, &rec, SagaState::Debited, fence, None, Some(after)).await?;
    Ok(DebitOutcome::Debited { balance: after })
}

async fn settle_tx(tx: &Transaction<'_>, order: &GiftOrder, fence: u64) -> TxResult<SettleOutcome> {
    let Some(rec) = lock_saga(tx, order.gift_id).await? else {
        return Ok(SettleOutcome::Missing);
    };
    let o = &rec.order;
    ensure_fence(tx, &o.room, fence, rec.fence).await?;
    match rec.state {
        SagaState::Settled => {
            return Ok(SettleOutcome::AlreadySettled {
                balance: rec.balance_after.unwrap_or(0),
            });
        }
        SagaState::Pending | SagaState::Voided => return Ok(SettleOutcome::NotDebited(rec.state)),
        SagaState::Debited => {}
    }
    lock_accounts(tx, &[o.sender.as_str()]).await?;
    let recipients = sorted_recipients(o);
    let credit = tx.prepare_cached(SQL_CREDIT).await?;
    let slot = slot_of(o.gift_id);
    tx.execute(&credit, &[&recipients, &slot, &o.earnings_per_recipient()])
        .await?;
    add_ranks(tx, o).await?;
    let prize = o.prize();
    let settlement = tx
        .prepare_cached(
            "INSERT INTO gift_settlement (gift_id, room, platform, lucky, app_ranked)
             VALUES ($1, $2, $3, $4, TRUE)",
        )
        .await?;
    tx.execute(
        &settlement,
        &[&o.gift_id, &o.room.as_str(), &o.platform_share(), &prize],
    )
    .await?;
    let balance = if prize > 0 {
        let pay = tx
            .prepare_cached(
                "UPDATE account SET coins = coins + $2 WHERE user_id = $1 RETURNING coins",
            )
            .await?;
        let after: i64 = col(&tx.query_one(&pay, &[&o.sender.as_str(), &prize]).await?, 0)?;
        let lucky = lucky_entry_id(o.gift_id);
        insert_entry(
            tx,
            o.sender.as_str(),
            lucky,
            EntryKind::Lucky,
            prize,
            Some(after),
        )
        .await?;
        after
    } else {
        coins(tx, o.sender.as_str()).await?
    };
    insert_movements(tx, &gift_effects(o, balance)).await?;
    // Last: a popular host's app-board rows stay locked until the commit.
    super::app_rank::add_app_ranks(tx, o).await?;
    mark(tx, &rec, SagaState::Settled, fence, None, Some(balance)).await?;
    Ok(SettleOutcome::Settled { balance })
}

/// Credits `$3` earnings to each of the users `$1` (in order), in slot `$2`.
pub(super) const SQL_CREDIT: &str = "INSERT INTO earning (user_id, slot, amount)
 SELECT u, $2, $3 FROM unnest($1::TEXT[]) WITH ORDINALITY AS x(u, n) ORDER BY n
 ON CONFLICT (user_id, slot) DO UPDATE SET amount = earning.amount + EXCLUDED.amount";

/// Adds totals `$6` of users `$5` on boards `$4` (rows in that order) to room `$1`'s
/// leaderboards of day `$2`, in slot `$3`.
pub(super) const SQL_RANKS: &str = "INSERT INTO gift_rank (room, board, day, user_id, slot, total)
 SELECT $1, b, $2, u, $3, t FROM unnest($4::SMALLINT[], $5::TEXT[], $6::BIGINT[])
   WITH ORDINALITY AS x(b, u, t, n) ORDER BY n
 ON CONFLICT (room, board, day, user_id, slot)
 DO UPDATE SET total = gift_rank.total + EXCLUDED.total";

/// A gift's recipients sorted by user id: the order their earnings rows are locked in.
pub(super) fn sorted_recipients(o: &GiftOrder) -> Vec<&str> {
    let mut users: Vec<&str> = o.recipients.iter().map(UserId::as_str).collect();
    users.sort_unstable();
    users
}

/// A settled gift's leaderboard rows, in key order: boards, users and amounts.
pub(super) fn rank_rows(o: &GiftOrder) -> (Vec<i16>, Vec<&str>, Vec<i64>) {
    let mut rows: Vec<(i16, &str, i64)> = Vec::with_capacity(o.recipients.len() + 1);
    rows.push((BOARD_SENDERS, o.sender.as_str(), o.total()));
    for r in &o.recipients {
        rows.push((BOARD_RECEIVERS, r.as_str(), o.per_recipient()));
    }
    rows.sort_unstable();
    (
        rows.iter().map(|r| r.0).collect(),
        rows.iter().map(|r| r.1).collect(),
        rows.iter().map(|r| r.2).collect(),
    )
}

/// Adds a settled gift to its room's leaderboards, rows in key order.
async fn add_ranks(tx: &Transaction<'_>, o: &GiftOrder) -> TxResult<()> {
    let (boards, users, totals) = rank_rows(o);
    let stmt = tx.prepare_cached(SQL_RANKS).await?;
    tx.execute(
        &stmt,
        &[
            &o.room.as_str(),
            &day_of(o.created_ms),
            &slot_of(o.gift_id),
            &boards,
            &users,
            &totals,
        ],
    )
    .await?;
    Ok(())
}

async fn void_tx(
    tx: &Transaction<'_>,
    order: &GiftOrder,
    fence: u64,
    reason: VoidReason,
) -> TxResult<VoidOutcome> {
    let Some(rec) = lock_saga(tx, order.gift_id).await? else {
        return Ok(VoidOutcome::Missing);
    };
    let o = &rec.order;
    ensure_fence(tx, &o.room, fence, rec.fence).await?;
    match rec.state {
        SagaState::Debited | SagaState::Settled => return Ok(VoidOutcome::Debited),
        SagaState::Voided => return Ok(VoidOutcome::Voided),
        SagaState::Pending => {}
    }
    // The void claim takes the debit's key in the sender's wallet.
    let sender = o.sender.as_str();
    insert_entry(tx, sender, o.gift_id, EntryKind::Void, o.total(), None).await?;
    mark(tx, &rec, SagaState::Voided, fence, Some(reason), None).await?;
    Ok(VoidOutcome::Voided)
}

async fn touch_tx(
    tx: &Transaction<'_>,
    order: &GiftOrder,
    fence: u64,
) -> TxResult<Option<SagaRecord>> {
    let Some(mut rec) = lock_saga(tx, order.gift_id).await? else {
        return Ok(None);
    };
    ensure_fence(tx, &rec.order.room, fence, rec.fence).await?;
    if fence > rec.fence {
        tx.execute(
            "UPDATE gift_saga SET fence = $1 WHERE gift_id = $2",
            &[&to_sql_fence(fence)?, &order.gift_id],
        )
        .await?;
        rec.fence = fence;
    }
    Ok(Some(rec))
}
