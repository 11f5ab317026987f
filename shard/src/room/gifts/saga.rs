//! One gift's saga as a future: the ledger call with its retries, then the outcome for the
//! room actor; and the test-only crash points.

use std::future::Future;

use protocol::FencingToken;
use protocol::link::Command;
use storage::StorageError;
use storage::ledger::{GiftOrder, GiftOutcome};
use tracing::warn;
use uuid::Uuid;

use super::{GiftDone, InFlight, Opener, SAGA_ATTEMPTS, SAGA_RETRY_DELAY, lock};

/// One gift's saga: the ledger call (with retries), then its outcome with the command for the
/// reply. The room actor boxes one per gift, so a test keeps it within 1,000 bytes: glibc
/// serves larger requests (chunks of 1 KiB and more) from its large-block path, which first
/// merges every freed small block of the thread (`malloc_consolidate`) whenever its per-thread
/// cache cannot answer.
#[allow(
    clippy::manual_async_fn,
    reason = "as an `async fn` the same body's future takes 1,024 bytes, as a block 848"
)]
pub(super) fn saga(mut s: SagaStart) -> impl Future<Output = GiftDone> + Send {
    async move {
        let key = s.order.gift_id;
        let mut outcome = Ok(());
        if s.legacy.is_some() {
            // Boxed: a lookup only upgraded ledgers make, kept out of every gift's future.
            outcome = Box::pin(go_on_from_legacy(&mut s)).await;
        }
        let mut opened = false;
        if let (Ok(()), Some(opener)) = (&outcome, &s.open_in) {
            // Boxed: a cluster's write, kept out of every gift's future.
            match Box::pin(opener.open(s.order.gift_id)).await {
                Ok(now) => opened = now,
                Err(e) => outcome = Err(e),
            }
        }
        let outcome = match outcome {
            Err(e) => Err(e),
            Ok(()) if s.crash == Crash::AfterDebit => {
                crash_after_debit(&s.ledger, &s.order, s.fence).await
            }
            Ok(()) => send_with_retry(&s.ledger, &s.order, s.fence).await,
        };
        if s.crash == Crash::AfterSettle && matches!(outcome, Ok(GiftOutcome::Settled { .. })) {
            warn!(order = %s.order.gift_id, "TEST: aborting between settle and publish.");
            std::process::abort();
        }
        GiftDone {
            cmd: s.cmd,
            key,
            order: s.order,
            opened,
            outcome,
        }
    }
}

/// Takes the saga's order from the ledger when its request was booked before the upgrade to
/// time-ordered gift ids, under its legacy id: the retry goes on with that saga.
///
/// # Errors
/// `Reused` when that saga is another request's; the ledger's errors.
async fn go_on_from_legacy(s: &mut SagaStart) -> Result<(), StorageError> {
    if let Some(rec) = s.ledger.legacy_saga(s.legacy).await? {
        // Booked for another room (or gift): a reused request id, refused as one under the new
        // id is. That saga is its own room's owner's to move, under that room's fence.
        s.order.same_request_as(&rec.order)?;
        lock(&s.in_flight).insert(rec.order.gift_id);
        s.order = rec.order;
    }
    Ok(())
}

/// What a gift saga starts from.
pub(super) struct SagaStart {
    pub(super) cmd: Box<Command>,
    pub(super) order: GiftOrder,
    /// The request's legacy gift id, set only when the ledger may hold a saga under it; looked
    /// up before booking (see [`Ledger::legacy_saga`]; its own future is boxed).
    ///
    /// [`Ledger::legacy_saga`]: storage::ledger::Ledger::legacy_saga
    pub(super) legacy: Option<Uuid>,
    pub(super) ledger: storage::ledger::Ledger,
    pub(super) fence: FencingToken,
    pub(super) in_flight: InFlight,
    /// Where the gift is opened before its ledger call (the fenced store, cluster only).
    pub(super) open_in: Option<Opener>,
    pub(super) crash: Crash,
}

async fn send_with_retry(
    ledger: &storage::ledger::Ledger,
    order: &GiftOrder,
    fence: FencingToken,
) -> Result<GiftOutcome, StorageError> {
    let mut delay = SAGA_RETRY_DELAY;
    let mut attempt = 1;
    loop {
        match ledger.send_gift(order, fence).await {
            Err(e) if e.is_retryable() && attempt < SAGA_ATTEMPTS => {
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// TEST ONLY: begin and debit, then abort the process before settling.
async fn crash_after_debit(
    ledger: &storage::ledger::Ledger,
    order: &GiftOrder,
    fence: FencingToken,
) -> Result<GiftOutcome, StorageError> {
    ledger.begin(order, fence).await?;
    ledger.debit(order, fence).await?;
    warn!(order = %order.gift_id, "TEST: aborting between debit and settle.");
    std::process::abort();
}

/// TEST ONLY: where a saga aborts the process ([`crate::ShardConfig::test_crash_after_debit`]
/// and [`crate::ShardConfig::test_crash_after_settle`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Crash {
    No,
    AfterDebit,
    AfterSettle,
}
