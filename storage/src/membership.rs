//! Ring membership in Redis: live nodes, their weights and heartbeats, and the ring version.
//!
//! Every change of the ring (a node joins or changes its advertised addresses, a weight
//! changes, a node is removed) runs as one Lua script that writes, bumps the version with
//! `INCR` and publishes the new version on [`RING_CHANNEL`]. Heartbeats are not ring changes:
//! they only stamp Redis's own clock (`TIME`), so every reader compares heartbeats against the
//! same clock ([`RingView::now_ms`]). Pub/sub is a hint, not a log: a watcher re-reads
//! [`Membership::list`] on every message **and** periodically, since messages sent while it
//! was disconnected are lost.
//!
//! Keys share the `{ring}` hash tag so every script stays single-slot:
//! `chorus:{ring}:nodes` (id → JSON [`NodeSpec`]), `chorus:{ring}:weights` (id → weight),
//! `chorus:{ring}:heartbeats` (id → ms), `chorus:{ring}:version` (counter).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::ConnectionManager;
use ::redis::{Msg, Script};
use futures_util::{Stream, StreamExt};
use protocol::NodeId;
use protocol::ring::Ring;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StorageError};
use crate::redis::{CONNECT_TIMEOUT, Redis, map_err};

mod liveness;
pub use liveness::{HEARTBEAT_INTERVAL, RING_REFRESH, STALE_AFTER};

/// Pub/sub channel carrying the new ring version after every change.
pub const RING_CHANNEL: &str = "chorus:ring";

const NODES_KEY: &str = "chorus:{ring}:nodes";
const WEIGHTS_KEY: &str = "chorus:{ring}:weights";
const HEARTBEATS_KEY: &str = "chorus:{ring}:heartbeats";
const VERSION_KEY: &str = "chorus:{ring}:version";
const PINS_KEY: &str = "chorus:{ring}:pins";

/// Pins or unpins a room (`ARGV[2]` empty: unpin), bumps the version, publishes it.
const PIN_LUA: &str = r"
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
local v = redis.call('INCR', KEYS[2])
redis.call('PUBLISH', ARGV[3], v)
return v
";

/// Redis server time in ms, as a Lua expression prologue.
macro_rules! now_ms_lua {
    () => {
        "local t = redis.call('TIME')\nlocal now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    };
}

/// JOIN: `KEYS = [nodes, weights, heartbeats, version]`, `ARGV = [id, spec_json, weight,
/// channel]`. Stamps the heartbeat; bumps and publishes the version unless nothing changed.
const JOIN_LUA: &str = concat!(
    now_ms_lua!(),
    r"
local same = redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2]
  and redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[3]
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[1], now)
if same then return tonumber(redis.call('GET', KEYS[4]) or '0') end
local v = redis.call('INCR', KEYS[4])
redis.call('PUBLISH', ARGV[4], v)
return v
"
);

/// SET_WEIGHT: `KEYS = [nodes, weights, version]`, `ARGV = [id, weight, channel]`.
/// Returns -1 for an unknown node, else the (possibly unchanged) version.
const SET_WEIGHT_LUA: &str = r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -1 end
if redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then
  return tonumber(redis.call('GET', KEYS[3]) or '0')
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local v = redis.call('INCR', KEYS[3])
redis.call('PUBLISH', ARGV[3], v)
return v
";

/// REMOVE: `KEYS = [nodes, weights, heartbeats, version]`, `ARGV = [id, channel]`.
/// Returns the (possibly unchanged) version.
const REMOVE_LUA: &str = r"
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return tonumber(redis.call('GET', KEYS[4]) or '0')
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
local v = redis.call('INCR', KEYS[4])
redis.call('PUBLISH', ARGV[2], v)
return v
";

/// HEARTBEAT: `KEYS = [nodes, heartbeats]`, `ARGV = [id]`. Returns 1, or 0 for a non-member.
const HEARTBEAT_LUA: &str = concat!(
    now_ms_lua!(),
    r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], now)
return 1
"
);

/// What a node does in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeRole {
    /// Terminates client sockets; owns no rooms.
    Gateway,
    /// Owns rooms through leases; placed on the ring.
    Shard,
    /// Gateway and shard in one process; placed on the ring.
    Standalone,
}

impl NodeRole {
    /// Whether nodes of this role own rooms (and so are placed on the ring).
    pub fn owns_rooms(self) -> bool {
        matches!(self, Self::Shard | Self::Standalone)
    }
}

/// What a node advertises when it joins.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// The node's id.
    pub id: NodeId,
    /// The node's role.
    pub role: NodeRole,
    /// Where gateways reach its link listener (`host:port`).
    pub link_addr: String,
    /// Where its admin API listens (`host:port`).
    pub admin_addr: String,
}

/// One member as read back from Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node's id.
    pub id: NodeId,
    /// The node's role.
    pub role: NodeRole,
    /// Where gateways reach its link listener.
    pub link_addr: String,
    /// Where its admin API listens.
    pub admin_addr: String,
    /// Its ring weight (0 = draining: owns nothing).
    pub weight: u32,
    /// Its last heartbeat, in Redis server time (ms since the Unix epoch).
    pub last_heartbeat_ms: u64,
}

/// A consistent read of the whole membership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingView {
    /// The ring version (bumped on every change; 0 before the first).
    pub version: u64,
    /// Redis server time at the read (ms), to judge heartbeats on Redis's clock.
    pub now_ms: u64,
    /// Members, sorted by id.
    pub nodes: Vec<NodeInfo>,
    /// Rooms pinned to a node by an operator (`POST /admin/rooms/{id}/move`).
    pub pins: HashMap<String, NodeId>,
}

impl RingView {
    /// The placement ring of the room-owning members (weights as stored).
    pub fn ring(&self, vnodes_per_weight: u32) -> Ring {
        let members: Vec<(NodeId, u32)> = self
            .nodes
            .iter()
            .filter(|n| n.role.owns_rooms())
            .map(|n| (n.id.clone(), n.weight))
            .collect();
        Ring::new(self.version, &members, vnodes_per_weight)
    }

    /// Members whose last heartbeat is older than `max_age` (candidates for removal).
    pub fn stale(&self, max_age: Duration) -> Vec<&NodeInfo> {
        let max_age_ms = u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX);
        self.nodes
            .iter()
            .filter(|n| self.now_ms.saturating_sub(n.last_heartbeat_ms) > max_age_ms)
            .collect()
    }

    /// The member with id `id`.
    pub fn get(&self, id: &NodeId) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.id == *id)
    }
}

/// Ring membership in Redis; cheap to clone.
#[derive(Clone)]
pub struct Membership {
    redis: Redis,
    conn: ConnectionManager,
    scripts: Arc<Scripts>,
}

struct Scripts {
    pin: Script,
    join: Script,
    set_weight: Script,
    remove: Script,
    heartbeat: Script,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership").finish_non_exhaustive()
    }
}

impl Membership {
    /// Membership on `redis`.
    pub fn new(redis: &Redis) -> Self {
        Self {
            redis: redis.clone(),
            conn: redis.conn(),
            scripts: Arc::new(Scripts {
                pin: Script::new(PIN_LUA),
                join: Script::new(JOIN_LUA),
                set_weight: Script::new(SET_WEIGHT_LUA),
                remove: Script::new(REMOVE_LUA),
                heartbeat: Script::new(HEARTBEAT_LUA),
            }),
        }
    }

    /// Adds (or updates) `node` with `weight` and stamps its heartbeat; returns the ring
    /// version after the change (unchanged if the node re-joined with the same spec and weight).
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn join(&self, node: &NodeSpec, weight: u32) -> Result<u64> {
        let spec = serde_json::to_string(node)
            .map_err(|e| StorageError::backend("encode node spec", e))?;
        let mut conn = self.conn.clone();
        self.scripts
            .join
            .key(NODES_KEY)
            .key(WEIGHTS_KEY)
            .key(HEARTBEATS_KEY)
            .key(VERSION_KEY)
            .arg(node.id.as_str())
            .arg(spec)
            .arg(weight)
            .arg(RING_CHANNEL)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)
    }

    /// Sets a member's weight; returns the ring version after the change.
    ///
    /// # Errors
    /// `Conflict` when `node` is not a member; `Unavailable` when Redis cannot be reached.
    pub async fn set_weight(&self, node: &NodeId, weight: u32) -> Result<u64> {
        let mut conn = self.conn.clone();
        let v: i64 = self
            .scripts
            .set_weight
            .key(NODES_KEY)
            .key(WEIGHTS_KEY)
            .key(VERSION_KEY)
            .arg(node.as_str())
            .arg(weight)
            .arg(RING_CHANNEL)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        u64::try_from(v).map_err(|_| StorageError::Conflict(format!("{node} is not a member")))
    }

    /// Removes a member; returns the ring version after the change (unchanged if it was not
    /// a member).
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn remove(&self, node: &NodeId) -> Result<u64> {
        let mut conn = self.conn.clone();
        self.scripts
            .remove
            .key(NODES_KEY)
            .key(WEIGHTS_KEY)
            .key(HEARTBEATS_KEY)
            .key(VERSION_KEY)
            .arg(node.as_str())
            .arg(RING_CHANNEL)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)
    }

    /// Pins `room` to `node` (an operator's move), or unpins it with `None`; returns the ring
    /// version after the change. Every node routes a pinned room to its pin while the pinned
    /// node is live.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn pin(&self, room: &str, node: Option<&NodeId>) -> Result<u64> {
        let mut conn = self.conn.clone();
        self.scripts
            .pin
            .key(PINS_KEY)
            .key(VERSION_KEY)
            .arg(room)
            .arg(node.map_or("", NodeId::as_str))
            .arg(RING_CHANNEL)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)
    }

    /// Stamps `node`'s heartbeat with Redis's clock; `false` when it is no longer a member
    /// (it was removed: it must re-join before owning rooms again).
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn heartbeat(&self, node: &NodeId) -> Result<bool> {
        let mut conn = self.conn.clone();
        let ok: i64 = self
            .scripts
            .heartbeat
            .key(NODES_KEY)
            .key(HEARTBEATS_KEY)
            .arg(node.as_str())
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        Ok(ok == 1)
    }

    /// The whole membership, read atomically (one `MULTI`/`EXEC` round trip).
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached; `Corrupt` for an unreadable member.
    pub async fn list(&self) -> Result<RingView> {
        type Reply = (
            Option<u64>,
            (u64, u64),
            HashMap<String, String>,
            HashMap<String, u32>,
            HashMap<String, u64>,
            HashMap<String, String>,
        );
        let mut conn = self.conn.clone();
        let (version, (secs, micros), specs, weights, beats, pins): Reply = ::redis::pipe()
            .atomic()
            .get(VERSION_KEY)
            .cmd("TIME")
            .hgetall(NODES_KEY)
            .hgetall(WEIGHTS_KEY)
            .hgetall(HEARTBEATS_KEY)
            .hgetall(PINS_KEY)
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        let mut nodes = Vec::with_capacity(specs.len());
        for (id, json) in specs {
            let spec: NodeSpec = serde_json::from_str(&json)
                .map_err(|e| StorageError::corrupt(format!("member {id}"), e))?;
            nodes.push(NodeInfo {
                weight: weights.get(&id).copied().unwrap_or(0),
                last_heartbeat_ms: beats.get(&id).copied().unwrap_or(0),
                id: spec.id,
                role: spec.role,
                link_addr: spec.link_addr,
                admin_addr: spec.admin_addr,
            });
        }
        nodes.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(RingView {
            version: version.unwrap_or(0),
            now_ms: secs.saturating_mul(1_000).saturating_add(micros / 1_000),
            nodes,
            pins: pins
                .into_iter()
                .map(|(r, n)| (r, NodeId::from(n)))
                .collect(),
        })
    }

    /// Subscribes to ring changes on a dedicated pub/sub connection.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached within [`CONNECT_TIMEOUT`].
    pub async fn watch(&self) -> Result<RingWatch> {
        let subscribe = async {
            let mut pubsub = self.redis.client().get_async_pubsub().await?;
            pubsub.subscribe(RING_CHANNEL).await?;
            Ok::<_, ::redis::RedisError>(pubsub)
        };
        let pubsub = tokio::time::timeout(CONNECT_TIMEOUT, subscribe)
            .await
            .map_err(|_| StorageError::unavailable_msg("subscribing to the ring channel"))?
            .map_err(map_err)?;
        Ok(RingWatch {
            messages: Box::pin(pubsub.into_on_message()),
        })
    }
}

/// A subscription to [`RING_CHANNEL`].
pub struct RingWatch {
    messages: Pin<Box<dyn Stream<Item = Msg> + Send>>,
}

impl std::fmt::Debug for RingWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingWatch").finish_non_exhaustive()
    }
}

impl RingWatch {
    /// Waits for the next change; returns the version it announced (0 if unreadable: re-read
    /// anyway), or `None` when the connection is gone (subscribe again, and re-read).
    pub async fn changed(&mut self) -> Option<u64> {
        let msg = self.messages.next().await?;
        Some(msg.get_payload::<u64>().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use kit::redis::RedisServer;

    use super::*;

    fn spec(id: &str, role: NodeRole) -> NodeSpec {
        NodeSpec {
            id: NodeId::from(id),
            role,
            link_addr: format!("127.0.0.1:7{id}"),
            admin_addr: format!("127.0.0.1:8{id}"),
        }
    }

    /// Bound on waiting for a pub/sub message that was already published.
    const MESSAGE_WAIT: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn join_weight_heartbeat_remove_and_watch() {
        let server = RedisServer::start().await.unwrap();
        let redis = Redis::connect(&server.url()).await.unwrap();
        let m = Membership::new(&redis);
        let mut watch = m.watch().await.unwrap();

        assert_eq!(m.list().await.unwrap().version, 0);
        let v1 = m.join(&spec("1", NodeRole::Shard), 1).await.unwrap();
        assert_eq!(v1, 1);
        let next = tokio::time::timeout(MESSAGE_WAIT, watch.changed());
        assert_eq!(next.await.unwrap(), Some(1));
        // Re-joining unchanged is not a change.
        assert_eq!(m.join(&spec("1", NodeRole::Shard), 1).await.unwrap(), 1);
        let v2 = m.join(&spec("2", NodeRole::Shard), 1).await.unwrap();
        let v3 = m.join(&spec("g", NodeRole::Gateway), 0).await.unwrap();
        assert_eq!((v2, v3), (2, 3));

        let view = m.list().await.unwrap();
        assert_eq!(view.version, 3);
        assert_eq!(view.nodes.len(), 3);
        let s1 = view.get(&NodeId::from("1")).unwrap();
        assert_eq!(s1.link_addr, "127.0.0.1:71");
        assert!(s1.last_heartbeat_ms > 0 && s1.last_heartbeat_ms <= view.now_ms);
        assert!(view.stale(Duration::from_secs(60)).is_empty());
        let ring = view.ring(protocol::ring::DEFAULT_VNODES_PER_WEIGHT);
        assert_eq!(ring.version(), 3);
        assert_eq!(ring.nodes().len(), 2, "gateways are not on the ring");

        assert_eq!(m.set_weight(&NodeId::from("2"), 3).await.unwrap(), 4);
        assert_eq!(m.set_weight(&NodeId::from("2"), 3).await.unwrap(), 4);
        assert!(matches!(
            m.set_weight(&NodeId::from("nope"), 1).await,
            Err(StorageError::Conflict(_))
        ));
        assert!(m.heartbeat(&NodeId::from("1")).await.unwrap());
        assert!(!m.heartbeat(&NodeId::from("nope")).await.unwrap());

        assert_eq!(m.remove(&NodeId::from("1")).await.unwrap(), 5);
        assert_eq!(m.remove(&NodeId::from("1")).await.unwrap(), 5);
        assert!(!m.heartbeat(&NodeId::from("1")).await.unwrap());
        let view = m.list().await.unwrap();
        assert_eq!(view.version, 5);
        assert_eq!(view.get(&NodeId::from("2")).unwrap().weight, 3);
        assert!(view.get(&NodeId::from("1")).is_none());

        // Every change was published, in order.
        let mut seen = Vec::new();
        for _ in 2..=5 {
            let next = tokio::time::timeout(MESSAGE_WAIT, watch.changed());
            seen.push(next.await.unwrap().unwrap());
        }
        assert_eq!(seen, vec![2, 3, 4, 5]);
    }
}
