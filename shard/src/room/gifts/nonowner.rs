//! TEST ONLY: the broken build of the chaos suite, a non-owner that recovers (and so voids)
//! sagas. Reached only with `ShardConfig::test_nonowner_void` on.

use std::sync::Arc;

use storage::ledger::{FenceInstall, RecoveryOutcome};
use tracing::warn;

use crate::Inner;

/// TEST ONLY, the broken build of the chaos suite ([`ShardConfig::test_nonowner_void`]):
/// recovers at once the open sagas of every room this node does not run, with the room's
/// current ledger fence, as if it were the owner. Never reached unless the switch is on.
///
/// [`ShardConfig::test_nonowner_void`]: crate::ShardConfig::test_nonowner_void
pub(super) async fn recovery(inner: &Arc<Inner>, ledger: &storage::ledger::Ledger) {
    let Ok(rooms) = ledger.rooms_with_open_sagas(0).await else {
        return;
    };
    for room in rooms {
        if inner.room_handle(&room).is_some() {
            continue;
        }
        // Fence 0 is always below the installed one: the answer names the current fence.
        let fence = match ledger.install_fence(&room, 0, inner.owner.owner_id()).await {
            Ok(FenceInstall::Stale { current }) => current,
            _ => continue,
        };
        let Ok(list) = ledger.pending_sagas(&room, 0).await else {
            continue;
        };
        warn!(%room, fence, sagas = list.len(), "TEST: recovering sagas of a room this node does not own.");
        for rec in list {
            let outcome = match ledger.recover(&rec.order, fence, true).await {
                Ok(RecoveryOutcome::Settled) => "settled",
                Ok(RecoveryOutcome::Voided) => "voided",
                _ => continue,
            };
            crate::audit::recover(
                &room,
                rec.order.gift_id,
                fence,
                inner.owner.owner_id(),
                outcome,
            );
        }
    }
}
