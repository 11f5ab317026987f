//! What a new session reads from the stores, off the socket's path: the direct messages its
//! user is owed, the guards and lifetime spend its rooms show as badges (a node with a ledger
//! reads them for every user, in one ledger read on SQLite), and the user's stored profile, in
//! ONE task, and in none when the stores can tell without a read that there is nothing
//! (standalone: no pending message and no stored profile for the user, no profile claims to
//! store, and no ledger). A burst of thousands of connects then holds one task per connect at
//! most, and memory more tasks would leave in the allocator's caches stays unspent.

use std::sync::Arc;

use protocol::SessionId;

use crate::auth::Identity;
use crate::shared::Core;

impl Core {
    /// A session of `who` opened (after its `hello`): its owed direct messages follow, then
    /// its stored profile reaches it when read.
    pub(crate) fn connected(self: &Arc<Self>, session: SessionId, who: &Identity) {
        self.social_connected(session, &who.user);
        let social = self.social_reads_at_connect(&who.user);
        let profile = self.profile_read_needed(&who.user, &who.profile);
        let standing = self.standing_read_needed(session, &who.user);
        if !social && !profile && !standing {
            return;
        }
        let core = self.clone();
        let user = who.user.clone();
        let claims = who.profile.clone();
        self.tracker.spawn(async move {
            // The two reads go to different stores (Redis or the IM store; the ledger).
            let catch_up = async {
                if social {
                    core.social_catch_up(session, &user).await;
                }
            };
            let badges = async {
                if standing {
                    core.read_standing(&user).await;
                }
            };
            tokio::join!(catch_up, badges);
            if profile {
                core.apply_stored_profile(session, user, claims).await;
            }
        });
    }
}
