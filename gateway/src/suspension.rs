//! Account suspensions on a gateway: every current suspension in memory, so that a connect is
//! checked without a store read, and the closes that shut a suspended user out.
//!
//! A suspension reaches this gateway three ways: the admin call made here applies it at once;
//! one made on another gateway that holds the user's sockets sends a bus notice here
//! (`Notice::Suspended`); and every [`REFRESH`] the gateway reads the store's version and, when
//! it moved, every suspension, closing the sockets of anyone suspended now. The last is the
//! guarantee (bus notices can be lost); the first two make it immediate.
//!
//! A suspended user's socket is accepted and then closed with 4003 `account suspended`, rather
//! than refused at the upgrade: browsers do not show a refused upgrade's status, and a client
//! that sees 4003 knows not to reconnect.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use protocol::UserId;
use storage::suspensions::{Suspension, SuspensionStore};
use tracing::{info, warn};

use crate::outbox::{Kick, unix_ms};
use crate::shared::Core;

/// How often a gateway reads the store's version.
pub(crate) const REFRESH: Duration = Duration::from_secs(2);

/// The suspensions this gateway knows, with the store version they are of.
#[derive(Debug)]
pub(crate) struct Suspended {
    store: SuspensionStore,
    known: RwLock<Known>,
}

#[derive(Debug, Default)]
struct Known {
    /// `None` until first read.
    version: Option<u64>,
    by_user: HashMap<UserId, Suspension>,
}

impl Suspended {
    pub(crate) fn new(store: SuspensionStore) -> Self {
        Self {
            store,
            known: RwLock::new(Known::default()),
        }
    }

    pub(crate) fn store(&self) -> &SuspensionStore {
        &self.store
    }

    /// `user`'s suspension, if it holds now.
    pub(crate) fn of(&self, user: &UserId) -> Option<Suspension> {
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        if known.by_user.is_empty() {
            return None;
        }
        let now = unix_ms();
        known.by_user.get(user).filter(|s| s.holds_at(now)).cloned()
    }

    /// Every suspension that holds now, newest first, as the store has them (the admin API's
    /// reads: a change made through another gateway shows at once, not after a refresh).
    ///
    /// # Errors
    /// The store's, when it cannot be read.
    pub(crate) async fn stored(&self) -> storage::Result<Vec<(UserId, Suspension)>> {
        let now = unix_ms();
        let (_, all) = self.store.all().await?;
        let mut all: Vec<_> = all.into_iter().filter(|(_, s)| s.holds_at(now)).collect();
        all.sort_by(|a, b| b.1.at.cmp(&a.1.at).then_with(|| a.0.cmp(&b.0)));
        Ok(all)
    }

    /// Remembers `user`'s suspension (`None`: lifted) as this gateway learned it.
    fn set(&self, user: &UserId, s: Option<Suspension>) {
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        match s {
            Some(s) => known.by_user.insert(user.clone(), s),
            None => known.by_user.remove(user),
        };
    }

    /// Reads the store when its version moved; the users suspended now.
    async fn refresh(&self) -> storage::Result<Vec<UserId>> {
        let version = self.store.version().await?;
        let current = self
            .known
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .version;
        if current == Some(version) {
            return Ok(Vec::new());
        }
        let (version, all) = self.store.all().await?;
        let now = unix_ms();
        let suspended = all
            .iter()
            .filter(|(_, s)| s.holds_at(now))
            .map(|(u, _)| u.clone())
            .collect();
        *self.known.write().unwrap_or_else(PoisonError::into_inner) = Known {
            version: Some(version),
            by_user: all.into_iter().collect(),
        };
        Ok(suspended)
    }
}

impl Core {
    /// Applies `user`'s suspension here (`None`: lifted): remembered, and every socket the
    /// user holds on this gateway closed with 4003.
    pub(crate) fn apply_suspension(&self, user: &UserId, s: Option<Suspension>) {
        let holds = s.as_ref().is_some_and(|s| s.holds_at(unix_ms()));
        self.users.suspended.set(user, s);
        if holds {
            self.close_suspended(user);
        }
    }

    /// Closes `user`'s sockets on this gateway with 4003 `account suspended`.
    pub(crate) fn close_suspended(&self, user: &UserId) {
        for (session, out) in self.hub.sessions_of(user) {
            info!(%user, session, "Closing a suspended user's connection.");
            out.kick(Kick::Suspended);
        }
    }
}

/// Loads the suspensions before the gateway takes connections; with `follow` (a cluster
/// gateway, whose peers change the store too) then follows the store. A standalone node's own
/// admin API is the store's only writer and applies each change here, so it reads it once.
///
/// # Errors
/// The store cannot be read.
pub(crate) async fn start(core: &Arc<Core>, follow_store: bool) -> storage::Result<()> {
    core.users.suspended.refresh().await?;
    if follow_store {
        core.tracker.spawn(follow(core.clone()));
    }
    Ok(())
}

/// Every [`REFRESH`] until shutdown: reads the store when its version moved, and closes the
/// sockets of the users suspended now (a notice that never came, a socket opened meanwhile).
async fn follow(core: Arc<Core>) {
    loop {
        tokio::select! {
            () = core.shutdown.cancelled() => return,
            () = tokio::time::sleep(REFRESH) => {}
        }
        match core.users.suspended.refresh().await {
            Ok(users) => {
                for user in &users {
                    core.close_suspended(user);
                }
            }
            Err(e) => warn!(error = %e, "Could not read the account suspensions."),
        }
    }
}
