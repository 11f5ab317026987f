//! Row helpers shared by the steps and the reads: saga rows, wallet entries, coin balances and
//! the room's fence check.

use protocol::RoomId;
use rusqlite::{Connection, OptionalExtension, Statement, params};
use uuid::Uuid;

use super::super::{EntryKind, GiftOrder, SagaRecord, SagaState, VoidReason, now_ms};
use super::tx::{SQL_COINS, SQL_SET_COINS, Tx, hot};
use super::{db, from_sql_fence, to_sql_fence};
use crate::{Result, StorageError};

/// The sender's wallet claim that a saga in `state` holds: none while PENDING, the debit once
/// DEBITED or SETTLED, the void claim once VOIDED.
pub(super) fn claim_of(state: SagaState) -> Option<EntryKind> {
    match state {
        SagaState::Pending => None,
        SagaState::Debited | SagaState::Settled => Some(EntryKind::Debit),
        SagaState::Voided => Some(EntryKind::Void),
    }
}

/// Fails with `Fenced` if `fence` is below the room's installed fence or the saga's own.
pub(super) fn ensure_fence(
    c: &Tx<'_, '_>,
    room: &RoomId,
    fence: u64,
    saga_fence: u64,
) -> Result<()> {
    let installed: Option<i64> = hot(&c.hot.fence)?
        .query_row([room.as_str()], |r| r.get(0))
        .optional()
        .map_err(db)?;
    let floor = match installed {
        Some(f) => from_sql_fence(f)?.max(saga_fence),
        None => saga_fence,
    };
    if fence < floor {
        return Err(StorageError::Fenced { token: fence });
    }
    Ok(())
}

/// `order_json, state, fence, reason, balance_after, updated_ms` of one saga row.
pub(super) type SagaRow = (String, String, i64, Option<String>, Option<i64>, i64);

/// The sagas whose gift ids `sql` lists for `(room, before)` (parameters ?1 and ?2), in its
/// order; an id without a saga is skipped.
pub(super) fn sagas_listed(
    c: &Connection,
    sql: &str,
    room: &RoomId,
    before: i64,
) -> Result<Vec<SagaRecord>> {
    let ids = c
        .prepare_cached(sql)
        .map_err(db)?
        .query_map(params![room.as_str(), before], |r| r.get::<_, Vec<u8>>(0))
        .map_err(db)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(db)?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let id = Uuid::from_slice(&id).map_err(|e| StorageError::corrupt("saga gift id", e))?;
        if let Some(rec) = load_saga(c, id)? {
            out.push(rec);
        }
    }
    Ok(out)
}

pub(super) fn load_saga(c: &Connection, gift_id: Uuid) -> Result<Option<SagaRecord>> {
    let row: Option<SagaRow> = c
        .prepare_cached(
            "SELECT order_json, state, fence, reason, balance_after, updated_ms
             FROM gift_saga WHERE gift_id = ?1",
        )
        .map_err(db)?
        .query_row([gift_id.as_bytes().as_slice()], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .optional()
        .map_err(db)?;
    let Some((json, state, fence, reason, balance_after, updated_ms)) = row else {
        return Ok(None);
    };
    Ok(Some(SagaRecord {
        order: GiftOrder::from_json(gift_id, &json)?,
        state: SagaState::parse(&state)?,
        fence: from_sql_fence(fence)?,
        reason: reason.as_deref().map(VoidReason::parse).transpose()?,
        balance_after,
        updated_ms,
    }))
}

pub(super) fn mark(
    c: &Connection,
    gift_id: Uuid,
    state: SagaState,
    fence: u64,
    reason: Option<VoidReason>,
    balance_after: Option<i64>,
) -> Result<()> {
    c.prepare_cached(
        "UPDATE gift_saga SET state = ?1, fence = MAX(fence, ?2), reason = ?3,
           balance_after = COALESCE(?4, balance_after), updated_ms = ?5
         WHERE gift_id = ?6",
    )
    .map_err(db)?
    .execute(params![
        state.as_str(),
        to_sql_fence(fence)?,
        reason.map(VoidReason::as_str),
        balance_after,
        now_ms(),
        gift_id.as_bytes().as_slice()
    ])
    .map_err(db)?;
    Ok(())
}

pub(super) fn entry_kind(c: &Connection, user: &str, entry_id: Uuid) -> Result<Option<EntryKind>> {
    let kind: Option<String> = c
        .prepare_cached("SELECT kind FROM entry WHERE user = ?1 AND entry_id = ?2")
        .map_err(db)?
        .query_row(params![user, entry_id.as_bytes().as_slice()], |r| r.get(0))
        .optional()
        .map_err(db)?;
    kind.as_deref().map(EntryKind::parse).transpose()
}

/// The amount of entry `entry_id` of `user` (0 when there is none).
pub(super) fn entry_amount(c: &Connection, user: &str, entry_id: Uuid) -> Result<i64> {
    let amount: Option<i64> = c
        .prepare_cached("SELECT amount FROM entry WHERE user = ?1 AND entry_id = ?2")
        .map_err(db)?
        .query_row(params![user, entry_id.as_bytes().as_slice()], |r| r.get(0))
        .optional()
        .map_err(db)?;
    Ok(amount.unwrap_or(0))
}

pub(super) fn insert_entry(
    c: &Connection,
    user: &str,
    entry_id: Uuid,
    kind: EntryKind,
    amount: i64,
    balance_after: Option<i64>,
) -> Result<()> {
    c.prepare_cached(
        "INSERT INTO entry (user, entry_id, kind, amount, balance_after, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .map_err(db)?
    .execute(params![
        user,
        entry_id.as_bytes().as_slice(),
        kind.as_str(),
        amount,
        balance_after,
        now_ms()
    ])
    .map_err(db)?;
    Ok(())
}

pub(super) fn coins(c: &Connection, user: &str) -> Result<i64> {
    read_coins(&mut *c.prepare_cached(SQL_COINS).map_err(db)?, user)
}

/// [`coins`] on the writer's held statement.
pub(super) fn tx_coins(c: &Tx<'_, '_>, user: &str) -> Result<i64> {
    read_coins(&mut *hot(&c.hot.coins)?, user)
}

pub(super) fn read_coins(stmt: &mut Statement<'_>, user: &str) -> Result<i64> {
    stmt.query_row([user], |r| r.get(0))
        .optional()
        .map_err(db)
        .map(|v| v.unwrap_or(0))
}

/// Adds `delta` to the user's coins and returns the new balance (the CHECK keeps it >= 0).
pub(super) fn add_coins(c: &Connection, user: &str, delta: i64) -> Result<i64> {
    let now = coins(c, user)?;
    let after = now
        .checked_add(delta)
        .ok_or_else(|| StorageError::backend_msg(format!("coins of {user} would overflow")))?;
    set_coins(c, user, after)
}

/// Sets the user's coins to `value` (creating the account) and returns it.
///
/// A read and a plain write rather than one `UPDATE … RETURNING`: SQLite runs `RETURNING`
/// through a trigger and a temporary table, so the statement also copies the account's page
/// into a statement journal; together about a fifth of the writer's allocations per gift.
pub(super) fn set_coins(c: &Connection, user: &str, value: i64) -> Result<i64> {
    let updated = c
        .prepare_cached(SQL_SET_COINS)
        .map_err(db)?
        .execute(params![user, value])
        .map_err(db)?;
    create_account(c, updated, user, value)
}

/// [`set_coins`] on the writer's held statement.
pub(super) fn tx_set_coins(c: &Tx<'_, '_>, user: &str, value: i64) -> Result<i64> {
    let updated = hot(&c.hot.set_coins)?
        .execute(params![user, value])
        .map_err(db)?;
    create_account(c, updated, user, value)
}

/// After an update of `user`'s coins to `value` that changed `updated` rows: creates the
/// account when there was none.
pub(super) fn create_account(
    c: &Connection,
    updated: usize,
    user: &str,
    value: i64,
) -> Result<i64> {
    if updated == 0 {
        c.prepare_cached("INSERT INTO account (user, coins) VALUES (?1, ?2)")
            .map_err(db)?
            .execute(params![user, value])
            .map_err(db)?;
    }
    Ok(value)
}

pub(super) fn house(c: &Connection, name: &str) -> Result<i64> {
    c.prepare_cached("SELECT amount FROM house WHERE name = ?1")
        .map_err(db)?
        .query_row([name], |r| r.get(0))
        .optional()
        .map_err(db)
        .map(|v| v.unwrap_or(0))
}
