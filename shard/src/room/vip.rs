//! VIP protection for users whose lifetime spend the room does not know: a user who is not in
//! the room, a member who joined before the gateway's read of their standing arrived (or whose
//! read failed), a seat holder adopted after an unplanned stop. Before an admin's moderation of
//! one (`room.ban`, `chat.mute`, `room.kick`, `seat.kick`, a seat mute, freeing their seat) the
//! actor reads their spend from the ledger; the pure rule then decides with it
//! ([`RoomState::spend_reads`](super::state::RoomState::spend_reads)).

use std::time::Duration;

use protocol::UserId;
use protocol::client::RoomOp;
use tracing::warn;

use super::RoomActor;
use super::state::TargetSpend;

/// Longest the actor waits for the targets' spend (one key read each). Past it the admin's
/// action is refused with `UNAVAILABLE` rather than the room held up any longer.
const SPEND_READ_TIMEOUT: Duration = Duration::from_secs(2);

impl RoomActor {
    /// The lifetime spend of the targets of `user`'s `op` whose spend the room does not know,
    /// when the rule needs it. A node without a ledger has no spend to read: nobody is
    /// protected there beyond what the room counted.
    pub(super) fn target_spend(
        &self,
        user: &UserId,
        op: &RoomOp,
    ) -> impl Future<Output = TargetSpend> + Send + 'static {
        // Nothing cloned unless a read is needed: every other command passes through here too.
        let read = self
            .inner
            .ledger
            .as_ref()
            .zip(self.state.as_ref())
            .map(|(l, s)| (l, s.spend_reads(user, op)))
            .filter(|(_, targets)| !targets.is_empty())
            .map(|(l, targets)| (targets, l.clone(), self.room.clone()));
        async move {
            let Some((targets, ledger, room)) = read else {
                return TargetSpend::NotRead;
            };
            let reads = async {
                let mut spent = Vec::with_capacity(targets.len());
                for t in targets {
                    let s = Box::pin(ledger.lifetime_spent(&t)).await?;
                    spent.push((t, s));
                }
                Ok::<_, storage::StorageError>(spent)
            };
            match tokio::time::timeout(SPEND_READ_TIMEOUT, reads).await {
                Ok(Ok(spent)) => TargetSpend::Read(spent),
                Ok(Err(e)) => {
                    warn!(%room, error = %e, "Could not read a VIP spend; refusing the admin's action.");
                    TargetSpend::Unreadable
                }
                Err(_) => {
                    warn!(%room, "A VIP spend read timed out; refusing the admin's action.");
                    TargetSpend::Unreadable
                }
            }
        }
    }
}
