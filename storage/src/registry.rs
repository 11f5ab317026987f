//! The user registry: which gateways hold a user's connections now, and which room the user is
//! in now (room, gateway, session). Entries belong to a session and go away with it; a dead
//! gateway's entries are ignored by every lookup and removed by the lookups that meet them.
//!
//! # Engines
//! - Redis (cluster mode). A gateway picks a random *incarnation* id at start and keeps
//!   `chorus:{reg}:alive:<gateway>` = incarnation alive with a short TTL ([`ALIVE_TTL`],
//!   refreshed every [`ALIVE_REFRESH`]). Every entry names its gateway and incarnation, and an
//!   entry counts only while that key holds its incarnation: a gateway killed with SIGKILL
//!   stops owning entries within [`ALIVE_TTL`], and one restarted under the same id never owns
//!   its previous life's entries. Keys: `chorus:{reg}:conns:<user>` (hash, one field
//!   `<gateway>|<incarnation>|<session>` per connection), `chorus:{reg}:room:<user>`
//!   (`<ver>|<room>|<gateway>|<incarnation>|<session>`), `chorus:{reg}:ver` (counter). Every
//!   key shares the `{reg}` hash tag, so each script touches one slot.
//! - In-process (standalone mode: one gateway, which is alive while the process is).

mod bus;
mod redis;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use protocol::{NodeId, RoomId, SessionId, UserId};

pub use bus::{BusFeed, bus_channel};
pub use redis::RedisRegistry;

use crate::error::Result;

/// How long a gateway's liveness key lives without a refresh: a SIGKILLed gateway's entries
/// stop counting within this time.
pub const ALIVE_TTL: Duration = Duration::from_secs(6);
/// How often a gateway refreshes its liveness key: three refreshes per TTL, so one slow
/// Redis round trip never lets a live gateway lapse.
pub const ALIVE_REFRESH: Duration = Duration::from_secs(2);
/// How long a user's entries live without a write: entries of users that never come back are
/// removed by Redis eventually even when no lookup meets them.
pub const ENTRY_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// One connection: its gateway, the gateway's incarnation, the session on that gateway.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionRef {
    /// The gateway holding the connection.
    pub gateway: NodeId,
    /// The gateway's incarnation (picked at its start).
    pub incarnation: u64,
    /// The session on that gateway.
    pub session: SessionId,
}

/// Where a user is now: a room, through one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomEntry {
    /// The room.
    pub room: RoomId,
    /// The connection in it.
    pub at: SessionRef,
    /// The entry's version: increases with every [`Registry::set_room`] of any user.
    pub ver: u64,
}

/// What [`Registry::set_room`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swapped {
    /// The version of the new entry.
    pub ver: u64,
    /// The entry it replaced, when that one's gateway is alive.
    pub previous: Option<RoomEntry>,
}

/// The registry: one of the two engines, cheap to clone.
#[derive(Clone, Debug)]
pub enum Registry {
    /// Redis (cluster mode).
    Redis(RedisRegistry),
    /// In-process (standalone mode).
    InProcess(Arc<Mutex<LocalRegistry>>),
}

/// The in-process engine's state.
#[derive(Debug, Default)]
pub struct LocalRegistry {
    conns: HashMap<UserId, Vec<SessionRef>>,
    /// Boxed: a hash table keeps spare places (up to half of it after it grows), and every
    /// joined user holds an entry; a spare place then costs a pointer, not a whole entry.
    rooms: HashMap<UserId, Box<RoomEntry>>,
    ver: u64,
}

impl Registry {
    /// An empty in-process registry.
    pub fn in_process() -> Self {
        Self::InProcess(Arc::default())
    }

    /// A registry on `redis`.
    pub fn redis(redis: &crate::redis::Redis) -> Self {
        Self::Redis(RedisRegistry::new(redis))
    }

    /// Loads the Redis scripts into Redis' script cache (nothing to do in process). A gateway
    /// does it before it takes connections: otherwise a burst of connects and joins finds the
    /// scripts missing, and each call in flight loads them itself.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn preload(&self) -> Result<()> {
        match self {
            Self::Redis(r) => r.preload().await,
            Self::InProcess(_) => Ok(()),
        }
    }

    /// Marks `gateway` (incarnation `incarnation`) alive for [`ALIVE_TTL`]; a gateway calls it
    /// every [`ALIVE_REFRESH`].
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn keep_alive(&self, gateway: &NodeId, incarnation: u64) -> Result<()> {
        match self {
            Self::Redis(r) => r.keep_alive(gateway, incarnation).await,
            Self::InProcess(_) => Ok(()),
        }
    }

    /// Marks `gateway` dead now (a clean stop), if it is still this incarnation.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn gone(&self, gateway: &NodeId, incarnation: u64) -> Result<()> {
        match self {
            Self::Redis(r) => r.gone(gateway, incarnation).await,
            Self::InProcess(_) => Ok(()),
        }
    }

    /// Records that `user` holds connection `at`.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn add_connection(&self, user: &UserId, at: &SessionRef) -> Result<()> {
        match self {
            Self::Redis(r) => r.add_connection(user, at).await,
            Self::InProcess(l) => {
                let mut l = l.lock().unwrap_or_else(PoisonError::into_inner);
                l.conns.entry(user.clone()).or_default().push(at.clone());
                Ok(())
            }
        }
    }

    /// Forgets connection `at` of `user`, and the user's room entry if it is this connection's.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn remove_connection(&self, user: &UserId, at: &SessionRef) -> Result<()> {
        match self {
            Self::Redis(r) => r.remove_connection(user, at).await,
            Self::InProcess(l) => {
                let mut l = l.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(list) = l.conns.get_mut(user) {
                    list.retain(|c| c != at);
                    if list.is_empty() {
                        l.conns.remove(user);
                    }
                }
                Ok(())
            }
        }
    }

    /// Removes `user`'s room entry if it is still connection `at`'s, whatever the room (a
    /// closed connection's, once the rooms' grace window has passed).
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn clear_room_of(&self, user: &UserId, at: &SessionRef) -> Result<()> {
        match self {
            Self::Redis(r) => r.clear_room_of(user, at).await,
            Self::InProcess(l) => {
                let mut l = l.lock().unwrap_or_else(PoisonError::into_inner);
                if l.rooms.get(user).is_some_and(|e| e.at == *at) {
                    l.rooms.remove(user);
                }
                Ok(())
            }
        }
    }

    /// The live gateways holding connections of `user` (dead entries are removed on the way).
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn gateways_of(&self, user: &UserId) -> Result<Vec<NodeId>> {
        match self {
            Self::Redis(r) => r.gateways_of(user).await,
            Self::InProcess(l) => {
                let l = l.lock().unwrap_or_else(PoisonError::into_inner);
                let mut out: Vec<NodeId> = l
                    .conns
                    .get(user)
                    .into_iter()
                    .flatten()
                    .map(|c| c.gateway.clone())
                    .collect();
                out.sort();
                out.dedup();
                Ok(out)
            }
        }
    }

    /// Records that `user` is now in `room` through `at`, atomically returning the entry it
    /// replaced (when that one's gateway is alive). Of two calls for one user, the later one's
    /// entry stays and it is the one told about the earlier.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn set_room(&self, user: &UserId, room: &RoomId, at: &SessionRef) -> Result<Swapped> {
        match self {
            Self::Redis(r) => r.set_room(user, room, at).await,
            Self::InProcess(l) => {
                let mut l = l.lock().unwrap_or_else(PoisonError::into_inner);
                l.ver += 1;
                let ver = l.ver;
                let entry = RoomEntry {
                    room: room.clone(),
                    at: at.clone(),
                    ver,
                };
                let previous = l.rooms.insert(user.clone(), Box::new(entry));
                Ok(Swapped {
                    ver,
                    previous: previous.map(|e| *e),
                })
            }
        }
    }

    /// Forgets `user`'s room entry if it is still `at`'s in `room` (compare-and-delete: a later
    /// join elsewhere keeps its entry).
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn clear_room(&self, user: &UserId, room: &RoomId, at: &SessionRef) -> Result<()> {
        match self {
            Self::Redis(r) => r.clear_room(user, room, at).await,
            Self::InProcess(l) => {
                let mut l = l.lock().unwrap_or_else(PoisonError::into_inner);
                if l.rooms
                    .get(user)
                    .is_some_and(|e| e.at == *at && e.room == *room)
                {
                    l.rooms.remove(user);
                }
                Ok(())
            }
        }
    }

    /// The rooms the given users are in now (users in none are left out), in input order.
    /// For "rooms where people I follow are now".
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn rooms_of(&self, users: &[UserId]) -> Result<Vec<(UserId, RoomEntry)>> {
        match self {
            Self::Redis(r) => r.rooms_of(users).await,
            Self::InProcess(l) => {
                let l = l.lock().unwrap_or_else(PoisonError::into_inner);
                Ok(users
                    .iter()
                    .filter_map(|u| l.rooms.get(u).map(|e| (u.clone(), RoomEntry::clone(e))))
                    .collect())
            }
        }
    }
}

impl Registry {
    /// Publishes `payload` on `gateway`'s bus channel (Redis only; the in-process engine has
    /// one gateway, which delivers to itself).
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached; `Backend` on the in-process engine.
    pub async fn publish(&self, gateway: &NodeId, payload: &[u8]) -> Result<()> {
        match self {
            Self::Redis(r) => r.publish(gateway, payload).await.map(drop),
            Self::InProcess(_) => Err(crate::StorageError::backend_msg(
                "the in-process registry has no bus",
            )),
        }
    }
}

/// A fresh incarnation id for a gateway start: random, so a restart under the same node id
/// never owns its previous life's entries.
pub fn new_incarnation() -> u64 {
    rand::random::<u64>() >> 1
}
