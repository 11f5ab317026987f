//! The gateway bus: typed notices one gateway sends another over Redis pub/sub (each gateway
//! listens on its own channel), and the listener that re-subscribes after a lost connection.
//!
//! Pub/sub loses what is published while a gateway is not subscribed. Nothing here depends on
//! it: a direct message stays stored until delivered (after a re-subscribe the gateway sends
//! its sessions what they are owed), a missed "switched" leaves a user in two rooms only until
//! their next join, and a missed profile reaches the rooms with the next join.

use std::sync::Arc;
use std::time::Duration;

use protocol::client::Profile;
use protocol::{RoomId, SessionId, UserId};
use serde::{Deserialize, Serialize};
use storage::redis::Redis;
use storage::registry::BusFeed;
use tracing::{debug, info, warn};

use crate::shared::Core;

/// First pause before subscribing again after a lost bus connection; doubles per failure.
const RESUBSCRIBE_MIN_DELAY: Duration = Duration::from_millis(100);
/// Longest pause between subscription attempts.
const RESUBSCRIBE_MAX_DELAY: Duration = Duration::from_secs(2);

/// A notice from one gateway to another.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub(crate) enum Notice {
    /// Deliver direct message `msg` (the `im` event's `d`) to `user`'s sessions here;
    /// `inbox`: `user` is its recipient (mark it delivered once a session got it).
    Im {
        user: UserId,
        id: u64,
        inbox: bool,
        msg: String,
    },
    /// Take `session` (of this gateway's incarnation `incarnation`) out of `room`, if its
    /// registry entry there is still version `ver`: its user joined another room elsewhere.
    /// `user` names the session's user, so that a session that closed meanwhile (its member
    /// still away in the room's grace window) can be taken out all the same.
    Switched {
        incarnation: u64,
        session: SessionId,
        room: RoomId,
        ver: u64,
        #[serde(default)]
        user: Option<UserId>,
    },
    /// `user`'s profile is now `profile`.
    Profile { user: UserId, profile: Profile },
    /// `user`'s standing changed (a guard bought): read it again from the ledger.
    Standing { user: UserId },
    /// `user` was suspended: their sockets here close with 4003. (A lift needs no notice: a
    /// suspended user has no sockets; gateways learn it from the store.)
    Suspended {
        user: UserId,
        suspension: storage::suspensions::Suspension,
    },
}

/// Listens on this gateway's channel (starting with `feed`, opened before the gateway took
/// connections) until shutdown, subscribing again (with backoff) after every lost
/// connection; after a re-subscribe, sends local sessions the messages they are owed (what was
/// published meanwhile is lost).
pub(super) async fn listen(core: Arc<Core>, redis: Redis, feed: BusFeed) {
    let mut delay = RESUBSCRIBE_MIN_DELAY;
    let mut feed = Some(feed);
    loop {
        let mut current = match feed.take() {
            Some(f) => f,
            None => match BusFeed::open(&redis, &core.node).await {
                Ok(f) => {
                    info!("Subscribed to the gateway bus again; resending owed direct messages.");
                    super::im::catch_up_everyone(&core).await;
                    delay = RESUBSCRIBE_MIN_DELAY;
                    f
                }
                Err(e) => {
                    warn!(error = %e, "Could not subscribe to the gateway bus; retrying.");
                    tokio::select! {
                        () = core.shutdown.cancelled() => return,
                        () = tokio::time::sleep(delay) => {}
                    }
                    delay = (delay * 2).min(RESUBSCRIBE_MAX_DELAY);
                    continue;
                }
            },
        };
        loop {
            let next = tokio::select! {
                () = core.shutdown.cancelled() => return,
                n = current.next() => n,
            };
            let Some(bytes) = next else { break };
            match serde_json::from_slice::<Notice>(&bytes) {
                Ok(n) => core.apply_notice(n),
                Err(e) => debug!(error = %e, "Dropping an unreadable bus notice."),
            }
        }
        warn!("Gateway bus connection lost; subscribing again.");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_read_back_as_written() {
        let notices = [
            Notice::Im {
                user: UserId::from("bob"),
                id: 1_849_753_380_158_464,
                inbox: true,
                msg: r#"{"id":1849753380158464,"text":"hi"}"#.to_owned(),
            },
            Notice::Switched {
                incarnation: u64::MAX >> 1,
                session: 7,
                room: RoomId::from("r1"),
                ver: 42,
                user: Some(UserId::from("ann")),
            },
            Notice::Profile {
                user: UserId::from("ann"),
                profile: Profile {
                    name: Some("Ann".into()),
                    ..Profile::default()
                },
            },
        ];
        for n in notices {
            let bytes = protocol::client::to_json(&n);
            let back: Notice = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(format!("{back:?}"), format!("{n:?}"));
        }
    }
}
