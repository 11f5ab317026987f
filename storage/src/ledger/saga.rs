//! The gift saga driver: runs `begin → debit → settle` through the step functions, and the
//! owner-only recovery of sagas left PENDING or DEBITED by a crash or a lost lease.
//!
//! Two rules are structural here: only the owner moves a saga, and only the wallet entry proves
//! a debit. A non-owner returns `Released` before any read or
//! write; an owner voids only through the void claim, which loses to a debit that already holds
//! the key; a fencing conflict is returned as `Fenced` (stop, the new owner will finish), never
//! turned into a terminal state.

use protocol::RoomId;
use tracing::{debug, warn};

use super::decision::{RecoveryAction, decide_recovery};
use super::{
    BeginOutcome, DebitOutcome, GiftOrder, GiftOutcome, GiftResult, Ledger, RecoveryOutcome,
    SagaState, SettleOutcome, VoidOutcome, VoidReason,
};
use crate::{Result, StorageError};

/// How many times `recover_room` retries one saga after a retryable error (`Conflict`,
/// `Unavailable`) before leaving it for the next sweep; each retry is a fresh read.
pub const RECOVERY_ATTEMPTS_PER_SAGA: u32 = 3;

/// Books a gift through the step functions (the Scylla path; SQLite books the same steps in one
/// transaction). A retry of a known gift id continues from the saga's state and answers
/// `Duplicate`.
///
/// # Errors
/// `Fenced`, or a retryable engine error: the caller retries with the same order.
pub async fn drive(ledger: &Ledger, order: &GiftOrder, fence: u64) -> Result<GiftOutcome> {
    let duplicate = match ledger.begin(order, fence).await? {
        BeginOutcome::Started => false,
        BeginOutcome::Existing(record) => {
            if let Some(first) = record.result() {
                return Ok(GiftOutcome::Duplicate { first });
            }
            true
        }
    };
    // Whether this call settled the saga: only then is the event its to owe.
    let mut settled_here = false;
    let result = match ledger.debit(order, fence).await? {
        DebitOutcome::Debited { .. } => {
            let settle = ledger.settle(order, fence).await?;
            let Some((result, here)) = settle.settled(order.gift_id) else {
                return Err(match settle {
                    SettleOutcome::NotDebited(state) => unexpected(order, state),
                    _ => missing(order),
                });
            };
            settled_here = here;
            result
        }
        DebitOutcome::InsufficientFunds { balance } => GiftResult::InsufficientFunds { balance },
        DebitOutcome::Voided => GiftResult::Voided,
        DebitOutcome::Missing => return Err(missing(order)),
    };
    if duplicate && settled_here {
        // This retry finished a saga an earlier attempt left open: nobody published its
        // event, so it is owed (the room's sweep publishes it). Here it is a write of its
        // own after the settle: a crash between the two loses the event, not a coin. A saga
        // that a racing finisher (the owner's recovery) settled is that one's to publish.
        ledger.mark_unpublished(order.gift_id).await?;
    }
    Ok(if duplicate {
        GiftOutcome::Duplicate { first: result }
    } else {
        GiftOutcome::first(result)
    })
}

/// Resolves one saga (see [`Ledger::recover`]).
///
/// # Errors
/// `Fenced` (no longer the owner), `Corrupt` (saga and wallet disagree), retryable engine errors.
pub async fn recover(
    ledger: &Ledger,
    order: &GiftOrder,
    fence: u64,
    is_owner: bool,
) -> Result<RecoveryOutcome> {
    if !is_owner {
        // Lesson 4: a non-owner never reads-then-writes a saga; the owner resolves it.
        debug!(gift = %order.gift_id, room = %order.room, "Not the owner: released saga.");
        return Ok(RecoveryOutcome::Released);
    }
    // Touch first: raises the saga's fence so an earlier owner's in-flight steps fail.
    let Some(record) = ledger.touch(order, fence).await? else {
        return Ok(RecoveryOutcome::Missing);
    };
    let entry = ledger.wallet_entry(&order.sender, order.gift_id).await?;
    match decide_recovery(is_owner, record.state, entry) {
        RecoveryAction::Release => Ok(RecoveryOutcome::Released),
        RecoveryAction::Done => Ok(RecoveryOutcome::AlreadyTerminal(record.state)),
        RecoveryAction::RollForward => roll_forward(ledger, order, fence).await,
        RecoveryAction::VoidClaim | RecoveryAction::MarkVoided => {
            match ledger.void(order, fence, VoidReason::Recovered).await? {
                VoidOutcome::Voided => Ok(RecoveryOutcome::Voided),
                // The debit won the key after all: roll forward, never refund.
                VoidOutcome::Debited => roll_forward(ledger, order, fence).await,
                VoidOutcome::Missing => Ok(RecoveryOutcome::Missing),
            }
        }
        RecoveryAction::Inconsistent => {
            warn!(gift = %order.gift_id, state = record.state.as_str(), ?entry, "Saga and wallet disagree.");
            Err(StorageError::corrupt_msg(format!(
                "saga {} is {} but wallet entry is {entry:?}",
                order.gift_id,
                record.state.as_str()
            )))
        }
    }
}

async fn roll_forward(ledger: &Ledger, order: &GiftOrder, fence: u64) -> Result<RecoveryOutcome> {
    // `debit` is idempotent: with the DEBIT entry present it only marks the saga DEBITED.
    match ledger.debit(order, fence).await? {
        DebitOutcome::Debited { .. } => {}
        DebitOutcome::InsufficientFunds { .. } | DebitOutcome::Voided => {
            return Ok(RecoveryOutcome::Voided);
        }
        DebitOutcome::Missing => return Ok(RecoveryOutcome::Missing),
    }
    match ledger.settle(order, fence).await? {
        SettleOutcome::Settled { .. } => Ok(RecoveryOutcome::Settled),
        // A retry settled it since this recovery looked (and owes its event): not this
        // recovery's to publish.
        SettleOutcome::AlreadySettled { .. } => {
            Ok(RecoveryOutcome::AlreadyTerminal(SagaState::Settled))
        }
        SettleOutcome::NotDebited(state) => Err(unexpected(order, state)),
        SettleOutcome::Missing => Ok(RecoveryOutcome::Missing),
    }
}

/// What one recovery sweep of a room did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Sagas settled (debit found).
    pub settled: u32,
    /// Sagas voided (no debit; the void claim won).
    pub voided: u32,
    /// Sagas left alone because this node is not the owner.
    pub released: u32,
    /// Sagas left for the next sweep after retryable errors or inconsistencies.
    pub deferred: u32,
}

/// Recovers every saga of `room` that has not moved for `min_age_ms`. Only the owner acts; a
/// non-owner reports how many it released and writes nothing.
///
/// # Errors
/// `Fenced` as soon as a transition is fenced (this node lost the room: stop the sweep);
/// engine errors listing the pending sagas.
pub async fn recover_room(
    ledger: &Ledger,
    room: &RoomId,
    fence: u64,
    is_owner: bool,
    min_age_ms: i64,
) -> Result<RecoveryReport> {
    let mut report = RecoveryReport::default();
    for record in ledger.pending_sagas(room, min_age_ms).await? {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match recover(ledger, &record.order, fence, is_owner).await {
                Ok(RecoveryOutcome::Released) => report.released += 1,
                Ok(RecoveryOutcome::Settled) => report.settled += 1,
                Ok(RecoveryOutcome::Voided) => report.voided += 1,
                Ok(RecoveryOutcome::AlreadyTerminal(_) | RecoveryOutcome::Missing) => {}
                Err(e @ StorageError::Fenced { .. }) => return Err(e),
                Err(e) if e.is_retryable() && attempt < RECOVERY_ATTEMPTS_PER_SAGA => continue,
                Err(e) => {
                    warn!(gift = %record.order.gift_id, %room, error = %e, "Saga recovery deferred.");
                    report.deferred += 1;
                }
            }
            break;
        }
    }
    Ok(report)
}

fn missing(order: &GiftOrder) -> StorageError {
    StorageError::Conflict(format!("saga {} disappeared", order.gift_id))
}

fn unexpected(order: &GiftOrder, state: SagaState) -> StorageError {
    StorageError::Conflict(format!(
        "saga {} is {} after its debit",
        order.gift_id,
        state.as_str()
    ))
}
