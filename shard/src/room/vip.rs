//! VIP protection for users who are not in the room. The room holds its members' lifetime
//! spend only, so before an admin's `room.ban` or `chat.mute` of someone absent the actor
//! reads theirs from the ledger; the pure rule then decides with it
//! ([`RoomState::absent_target`](super::state::RoomState::absent_target)).

use std::time::Duration;

use protocol::UserId;
use protocol::client::RoomOp;
use tracing::warn;

use super::RoomActor;
use super::state::TargetSpend;

/// Longest the actor waits for an absent target's spend (one key read). Past it the admin's
/// action is refused with `UNAVAILABLE` rather than the room held up any longer.
const SPEND_READ_TIMEOUT: Duration = Duration::from_secs(2);

impl RoomActor {
    /// The lifetime spend of the absent target of `user`'s `op`, when the rule needs it.
    /// A node without a ledger has no spend to read: nobody is protected there.
    pub(super) fn absent_spend(
        &self,
        user: &UserId,
        op: &RoomOp,
    ) -> impl Future<Output = TargetSpend> + Send + 'static {
        // Cloned only for a read: every other command passes through here too.
        let read = self
            .state
            .as_ref()
            .and_then(|s| s.absent_target(user, op))
            .zip(self.inner.ledger.as_ref())
            .map(|(t, l)| (t.clone(), l.clone(), self.room.clone()));
        async move {
            let Some((target, ledger, room)) = read else {
                return TargetSpend::NotRead;
            };
            let read = Box::pin(ledger.lifetime_spent(&target));
            match tokio::time::timeout(SPEND_READ_TIMEOUT, read).await {
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
