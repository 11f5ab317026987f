//! The registry's Redis engine (see the parent module for the keys).

use std::sync::Arc;

use ::redis::Script;
use ::redis::aio::ConnectionManager;
use protocol::{NodeId, RoomId, UserId};

use super::{ALIVE_TTL, ENTRY_TTL, RoomEntry, SessionRef, Swapped};
use crate::error::{Result, StorageError};
use crate::redis::{Redis, load_scripts, map_err, ttl_ms};

const ALIVE_PREFIX: &str = "chorus:{reg}:alive:";
const CONNS_PREFIX: &str = "chorus:{reg}:conns:";
const ROOM_PREFIX: &str = "chorus:{reg}:room:";
const VER_KEY: &str = "chorus:{reg}:ver";
/// Users whose rooms one script call reads: a short hold of Redis each.
const ROOMS_OF_CHUNK: usize = 500;

/// Lua: whether `<gateway>|<incarnation>|…` names a live gateway (`ARGV[1]`: alive prefix).
macro_rules! alive_lua {
    () => {
        r"
local function alive(gw, inc)
  return gw ~= nil and redis.call('GET', ARGV[1] .. gw) == inc
end
"
    };
}

/// GATEWAYS: `KEYS = [conns]`, `ARGV = [alive prefix]`. The live gateways; dead fields go.
const GATEWAYS_LUA: &str = concat!(
    alive_lua!(),
    r"
local out, seen = {}, {}
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  local gw, inc = string.match(f, '^([^|]+)|([^|]+)|')
  if alive(gw, inc) then
    if not seen[gw] then seen[gw] = true; table.insert(out, gw) end
  else
    redis.call('HDEL', KEYS[1], f)
  end
end
return out
"
);

/// SET_ROOM: `KEYS = [room, ver]`, `ARGV = [alive prefix, room, gw, inc, session, ttl ms]`.
/// Returns `{ver, previous entry or ''}`; a previous entry of a dead gateway reads as ''.
const SET_ROOM_LUA: &str = concat!(
    alive_lua!(),
    r"
local v = redis.call('INCR', KEYS[2])
local old = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], v .. '|' .. ARGV[2] .. '|' .. ARGV[3] .. '|' .. ARGV[4] .. '|' .. ARGV[5], 'PX', ARGV[6])
if old then
  local gw, inc = string.match(old, '^[^|]+|[^|]+|([^|]+)|([^|]+)|')
  if not alive(gw, inc) then old = '' end
else
  old = ''
end
return {v, old}
"
);

/// CLEAR_ROOM: `KEYS = [room]`, `ARGV = [suffix '|room|gw|inc|session']`. Deletes the entry
/// only while it is that one.
const CLEAR_ROOM_LUA: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, -string.len(ARGV[1])) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

/// ROOMS: `KEYS = room keys`, `ARGV = [alive prefix]`. Each entry, or '' (none or dead; a
/// dead one is removed).
const ROOMS_LUA: &str = concat!(
    alive_lua!(),
    r"
local out = {}
for i, k in ipairs(KEYS) do
  local e = redis.call('GET', k)
  if e then
    local gw, inc = string.match(e, '^[^|]+|[^|]+|([^|]+)|([^|]+)|')
    if not alive(gw, inc) then
      redis.call('DEL', k)
      e = ''
    end
  end
  out[i] = e or ''
end
return out
"
);

/// GONE: `KEYS = [alive]`, `ARGV = [inc]`.
const GONE_LUA: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

/// The Redis engine; cheap to clone.
#[derive(Clone)]
pub struct RedisRegistry {
    conn: ConnectionManager,
    scripts: Arc<Scripts>,
}

struct Scripts {
    gateways: Script,
    set_room: Script,
    clear_room: Script,
    rooms: Script,
    gone: Script,
}

impl std::fmt::Debug for RedisRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisRegistry")
    }
}

fn field(at: &SessionRef) -> String {
    format!("{}|{}|{}", at.gateway, at.incarnation, at.session)
}

/// Reads `<ver>|<room>|<gw>|<inc>|<session>`.
fn parse_entry(s: &str) -> Result<RoomEntry> {
    let bad = || StorageError::corrupt_msg(format!("registry room entry {s:?}"));
    let mut it = s.split('|');
    let ver = it.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let room = it.next().ok_or_else(bad)?;
    let gateway = it.next().ok_or_else(bad)?;
    let incarnation = it.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let session = it.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    Ok(RoomEntry {
        room: RoomId::from(room),
        at: SessionRef {
            gateway: NodeId::from(gateway),
            incarnation,
            session,
        },
        ver,
    })
}

impl RedisRegistry {
    pub(super) fn new(redis: &Redis) -> Self {
        Self {
            conn: redis.conn(),
            scripts: Arc::new(Scripts {
                gateways: Script::new(GATEWAYS_LUA),
                set_room: Script::new(SET_ROOM_LUA),
                clear_room: Script::new(CLEAR_ROOM_LUA),
                rooms: Script::new(ROOMS_LUA),
                gone: Script::new(GONE_LUA),
            }),
        }
    }

    pub(super) async fn preload(&self) -> Result<()> {
        let s = &self.scripts;
        let all = [&s.gateways, &s.set_room, &s.clear_room, &s.rooms, &s.gone];
        load_scripts(&self.conn, &all).await
    }

    pub(super) async fn keep_alive(&self, gateway: &NodeId, incarnation: u64) -> Result<()> {
        let mut conn = self.conn.clone();
        ::redis::cmd("SET")
            .arg(format!("{ALIVE_PREFIX}{gateway}"))
            .arg(incarnation.to_string())
            .arg("PX")
            .arg(ttl_ms(ALIVE_TTL))
            .query_async::<()>(&mut conn)
            .await
            .map_err(map_err)
    }

    pub(super) async fn gone(&self, gateway: &NodeId, incarnation: u64) -> Result<()> {
        let mut conn = self.conn.clone();
        self.scripts
            .gone
            .key(format!("{ALIVE_PREFIX}{gateway}"))
            .arg(incarnation.to_string())
            .invoke_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(map_err)
    }

    pub(super) async fn add_connection(&self, user: &UserId, at: &SessionRef) -> Result<()> {
        let mut conn = self.conn.clone();
        let key = format!("{CONNS_PREFIX}{user}");
        ::redis::pipe()
            .hset(&key, field(at), 1)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&key)
            .arg(ttl_ms(ENTRY_TTL))
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(map_err)
    }

    pub(super) async fn remove_connection(&self, user: &UserId, at: &SessionRef) -> Result<()> {
        let mut conn = self.conn.clone();
        ::redis::cmd("HDEL")
            .arg(format!("{CONNS_PREFIX}{user}"))
            .arg(field(at))
            .query_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(map_err)
    }

    pub(super) async fn clear_room_of(&self, user: &UserId, at: &SessionRef) -> Result<()> {
        let mut conn = self.conn.clone();
        let suffix = format!("|{}", field(at));
        self.scripts
            .clear_room
            .key(format!("{ROOM_PREFIX}{user}"))
            .arg(suffix)
            .invoke_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(map_err)
    }

    pub(super) async fn gateways_of(&self, user: &UserId) -> Result<Vec<NodeId>> {
        let mut conn = self.conn.clone();
        let ids: Vec<String> = self
            .scripts
            .gateways
            .key(format!("{CONNS_PREFIX}{user}"))
            .arg(ALIVE_PREFIX)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        let mut out: Vec<NodeId> = ids.into_iter().map(NodeId::from).collect();
        out.sort();
        Ok(out)
    }

    pub(super) async fn set_room(
        &self,
        user: &UserId,
        room: &RoomId,
        at: &SessionRef,
    ) -> Result<Swapped> {
        let mut conn = self.conn.clone();
        let (ver, old): (u64, String) = self
            .scripts
            .set_room
            .key(format!("{ROOM_PREFIX}{user}"))
            .key(VER_KEY)
            .arg(ALIVE_PREFIX)
            .arg(room.as_str())
            .arg(at.gateway.as_str())
            .arg(at.incarnation.to_string())
            .arg(at.session)
            .arg(ttl_ms(ENTRY_TTL))
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        let previous = if old.is_empty() {
            None
        } else {
            Some(parse_entry(&old)?)
        };
        Ok(Swapped { ver, previous })
    }

    pub(super) async fn clear_room(
        &self,
        user: &UserId,
        room: &RoomId,
        at: &SessionRef,
    ) -> Result<()> {
        let mut conn = self.conn.clone();
        self.scripts
            .clear_room
            .key(format!("{ROOM_PREFIX}{user}"))
            .arg(format!("|{room}|{}", field(at)))
            .invoke_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(map_err)
    }

    pub(super) async fn rooms_of(&self, users: &[UserId]) -> Result<Vec<(UserId, RoomEntry)>> {
        let mut out = Vec::new();
        let mut conn = self.conn.clone();
        // A script holds Redis while it runs: a list as long as a user may follow (5,000) goes
        // in several short calls, so other clients' commands run between them.
        for chunk in users.chunks(ROOMS_OF_CHUNK) {
            let mut call = self.scripts.rooms.prepare_invoke();
            for u in chunk {
                call.key(format!("{ROOM_PREFIX}{u}"));
            }
            call.arg(ALIVE_PREFIX);
            let entries: Vec<String> = call.invoke_async(&mut conn).await.map_err(map_err)?;
            for (u, e) in chunk.iter().zip(entries) {
                if !e.is_empty() {
                    out.push((u.clone(), parse_entry(&e)?));
                }
            }
        }
        Ok(out)
    }

    pub(super) async fn publish(&self, gateway: &NodeId, payload: &[u8]) -> Result<u64> {
        let mut conn = self.conn.clone();
        super::bus::publish(&mut conn, gateway, payload).await
    }
}
