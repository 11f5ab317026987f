//! What a new session reads from the stores, off the socket's path: the direct messages its
//! user is owed and the user's stored profile, in ONE task, and in none when the stores can
//! tell without a read that there is nothing (standalone: no pending message and no stored
//! profile for the user, and no profile claims to store); and the guards and lifetime spend
//! its rooms show as badges, queued for the batched standing read (`crate::standing`). A burst
//! of thousands of connects then holds one task per connect at most, and memory more tasks
//! would leave in the allocator's caches stays unspent.

use std::sync::Arc;

use protocol::SessionId;

use crate::auth::Identity;
use crate::shared::Core;

impl Core {
    /// A session of `who` opened (after its `hello`): its owed direct messages follow, then
    /// its stored profile reaches it when read; its standing is queued for the next batched
    /// read.
    pub(crate) fn connected(self: &Arc<Self>, session: SessionId, who: &Identity) {
        let social = self.social_connected(session, &who.user);
        self.refresh_standing_if_stale(session, &who.user);
        let profile = self.profile_read_needed(&who.user, &who.profile);
        if !social && !profile {
            return;
        }
        let core = self.clone();
        let user = who.user.clone();
        let claims = who.profile.clone();
        self.tracker.spawn(async move {
            if social {
                core.social_catch_up(session, &user).await;
            }
            if profile {
                core.apply_stored_profile(session, user, claims).await;
            }
        });
    }
}
