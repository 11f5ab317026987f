//! The directory in Redis: one script writes or removes a room's entry with its indexes, so
//! a reader never sees an entry without its index (or the reverse).

use std::collections::HashMap;

use ::redis::Script;
use ::redis::aio::ConnectionManager;
use protocol::client::RoomEntry;
use protocol::{NodeId, RoomId};

use super::{Pin, Source, Stored, Update, index_line, parse_index};
use crate::error::{Result, StorageError};
use crate::redis::{load_scripts, map_err, query_scripted_pipeline};

const SUM: &str = "dir:sum";
const IDX: &str = "dir:idx";
const ALL: &str = "dir:z";
const LEX: &str = "dir:lex";
const ALIVE: &str = "dir:alive";
const PINS: &str = "dir:pins";
/// Rooms removed per round trip when a node's entries are purged.
const PURGE_CHUNK: usize = 500;
/// Round trips one purge may take (500,000 rooms).
const PURGE_ROUNDS: usize = 1000;

/// `ARGV`: mode (`put` | `del`), room, node, then for `put`: index line, entry JSON, score.
/// `del` removes the entry only if `node` owns it (any owner when `node` is empty). The
/// index line is `node \x1f region \x1f token...`; a put whose line did not change only
/// moves the score.
const WRITE_LUA: &str = r"
local sep = '\031'
local room = ARGV[2]
local node = ARGV[3]
local function split(s)
  local out = {}
  local start = 1
  while true do
    local i = string.find(s, sep, start, true)
    if not i then
      out[#out + 1] = string.sub(s, start)
      return out
    end
    out[#out + 1] = string.sub(s, start, i - 1)
    start = i + 1
  end
end
local function unindex(p)
  redis.call('ZREM', 'dir:z', room)
  if p[2] ~= '' then redis.call('ZREM', 'dir:z:' .. p[2], room) end
  for i = 3, #p do redis.call('ZREM', 'dir:lex', p[i] .. '\0' .. room) end
  redis.call('SREM', 'dir:n:' .. p[1], room)
end
local old = redis.call('HGET', 'dir:idx', room)
if ARGV[1] == 'put' then
  local line = ARGV[4]
  local p = split(line)
  local changed = (not old) or old ~= line
  if old and changed then unindex(split(old)) end
  redis.call('HSET', 'dir:sum', room, ARGV[5])
  redis.call('ZADD', 'dir:z', ARGV[6], room)
  if p[2] ~= '' then redis.call('ZADD', 'dir:z:' .. p[2], ARGV[6], room) end
  if changed then
    redis.call('HSET', 'dir:idx', room, line)
    for i = 3, #p do redis.call('ZADD', 'dir:lex', 0, p[i] .. '\0' .. room) end
    redis.call('SADD', 'dir:n:' .. p[1], room)
  end
  return 1
end
if not old then return 0 end
local p = split(old)
if node ~= '' and p[1] ~= node then return 0 end
unindex(p)
redis.call('HDEL', 'dir:sum', room)
redis.call('HDEL', 'dir:idx', room)
return 1
";

/// The Redis engine.
#[derive(Clone)]
pub struct RedisDirectory {
    conn: ConnectionManager,
    write: Script,
}

fn corrupt(e: serde_json::Error) -> StorageError {
    StorageError::corrupt("directory entry", e)
}

fn node_key(node: &str) -> String {
    format!("dir:n:{node}")
}

impl RedisDirectory {
    pub(super) fn new(conn: ConnectionManager) -> Self {
        Self {
            conn,
            write: Script::new(WRITE_LUA),
        }
    }

    pub(super) async fn preload(&self) -> Result<()> {
        load_scripts(&self.conn, &[&self.write]).await
    }

    pub(super) async fn publish(
        &self,
        node: &NodeId,
        now_ms: u64,
        updates: &[Update],
    ) -> Result<()> {
        let mut pipe = ::redis::pipe();
        // Alive first: an entry is never listed before its node counts as alive.
        pipe.cmd("HSET")
            .arg(ALIVE)
            .arg(node.as_str())
            .arg(now_ms)
            .ignore();
        for u in updates {
            let mut call = self.write.prepare_invoke();
            match u {
                Update::Put(e) => {
                    let json = serde_json::to_string(&RoomEntry {
                        pinned: false,
                        ..e.clone()
                    })
                    .map_err(corrupt)?;
                    call.arg("put")
                        .arg(e.room.as_str())
                        .arg(node.as_str())
                        .arg(index_line(node.as_str(), e))
                        .arg(json)
                        .arg(e.score);
                }
                Update::Remove(room) => {
                    call.arg("del").arg(room.as_str()).arg(node.as_str());
                }
            }
            pipe.invoke_script(&call).ignore();
        }
        let mut conn = self.conn.clone();
        query_scripted_pipeline::<()>(&mut conn, &self.write, &pipe).await
    }

    pub(super) async fn purge_node(&self, node: &str) -> Result<usize> {
        let mut removed = 0;
        for _ in 0..PURGE_ROUNDS {
            let mut conn = self.conn.clone();
            let rooms: Vec<String> = ::redis::cmd("SPOP")
                .arg(node_key(node))
                .arg(PURGE_CHUNK)
                .query_async(&mut conn)
                .await
                .map_err(map_err)?;
            if rooms.is_empty() {
                break;
            }
            // Only the entries this node still owns: a room that moved on stays.
            let mut pipe = ::redis::pipe();
            for room in &rooms {
                let mut call = self.write.prepare_invoke();
                call.arg("del").arg(room).arg(node);
                pipe.invoke_script(&call);
            }
            let done: Vec<i64> = query_scripted_pipeline(&mut conn, &self.write, &pipe).await?;
            removed += done.iter().filter(|d| **d == 1).count();
        }
        Ok(removed)
    }

    pub(super) async fn forget_node(&self, node: &str) -> Result<usize> {
        let removed = self.purge_node(node).await?;
        let mut conn = self.conn.clone();
        ::redis::cmd("HDEL")
            .arg(ALIVE)
            .arg(node)
            .query_async::<()>(&mut conn)
            .await
            .map_err(map_err)?;
        Ok(removed)
    }

    pub(super) async fn pin(&self, room: &RoomId, pin: &Pin) -> Result<()> {
        let json = serde_json::to_string(pin).map_err(corrupt)?;
        let mut conn = self.conn.clone();
        ::redis::cmd("HSET")
            .arg(PINS)
            .arg(room.as_str())
            .arg(json)
            .query_async::<()>(&mut conn)
            .await
            .map_err(map_err)
    }

    pub(super) async fn unpin(&self, room: &RoomId) -> Result<bool> {
        let mut conn = self.conn.clone();
        let n: i64 = ::redis::cmd("HDEL")
            .arg(PINS)
            .arg(room.as_str())
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        Ok(n == 1)
    }

    pub(super) async fn pins(&self) -> Result<HashMap<RoomId, Pin>> {
        Ok(self.meta().await?.1)
    }

    pub(super) async fn alive(&self) -> Result<HashMap<String, u64>> {
        Ok(self.meta().await?.0)
    }

    /// Alive nodes and pins, in one round trip.
    pub(super) async fn meta(&self) -> Result<(HashMap<String, u64>, HashMap<RoomId, Pin>)> {
        let mut conn = self.conn.clone();
        let (alive, pins): (HashMap<String, u64>, HashMap<String, String>) = ::redis::pipe()
            .cmd("HGETALL")
            .arg(ALIVE)
            .cmd("HGETALL")
            .arg(PINS)
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        let mut out = HashMap::with_capacity(pins.len());
        for (room, json) in pins {
            // An unreadable pin is skipped, not fatal: listing goes on without it.
            if let Ok(pin) = serde_json::from_str::<Pin>(&json) {
                out.insert(RoomId::from(room), pin);
            }
        }
        Ok((alive, out))
    }

    pub(super) async fn range(
        &self,
        source: &Source,
        offset: usize,
        count: usize,
    ) -> Result<Vec<RoomId>> {
        let mut conn = self.conn.clone();
        let ids: Vec<String> = match source {
            Source::All | Source::Region(_) => {
                let key = match source {
                    Source::Region(r) => format!("dir:z:{r}"),
                    _ => ALL.to_owned(),
                };
                ::redis::cmd("ZREVRANGE")
                    .arg(key)
                    .arg(offset)
                    .arg(offset + count.max(1) - 1)
                    .query_async(&mut conn)
                    .await
                    .map_err(map_err)?
            }
            Source::Lex(q) => {
                let mut lo = Vec::with_capacity(q.len() + 1);
                lo.push(b'[');
                lo.extend_from_slice(q.as_bytes());
                let mut hi = Vec::with_capacity(q.len() + 2);
                hi.push(b'(');
                hi.extend_from_slice(q.as_bytes());
                // No UTF-8 text holds 0xff: every member starting with the query is below.
                hi.push(0xff);
                let members: Vec<Vec<u8>> = ::redis::cmd("ZRANGEBYLEX")
                    .arg(LEX)
                    .arg(lo)
                    .arg(hi)
                    .arg("LIMIT")
                    .arg(offset)
                    .arg(count)
                    .query_async(&mut conn)
                    .await
                    .map_err(map_err)?;
                members
                    .iter()
                    .filter_map(|m| {
                        let at = m.iter().position(|b| *b == 0)?;
                        String::from_utf8(m[at + 1..].to_vec()).ok()
                    })
                    .collect()
            }
        };
        Ok(ids.into_iter().map(RoomId::from).collect())
    }

    pub(super) async fn stored(&self, rooms: &[RoomId]) -> Result<Vec<Option<Stored>>> {
        if rooms.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn.clone();
        let keys: Vec<&str> = rooms.iter().map(RoomId::as_str).collect();
        let (sums, idxs): (Vec<Option<String>>, Vec<Option<String>>) = ::redis::pipe()
            .cmd("HMGET")
            .arg(SUM)
            .arg(&keys)
            .cmd("HMGET")
            .arg(IDX)
            .arg(&keys)
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        Ok(sums
            .into_iter()
            .zip(idxs)
            .map(|(sum, idx)| {
                let (sum, idx) = (sum?, idx?);
                let entry: RoomEntry = serde_json::from_str(&sum).ok()?;
                let (node, region) = parse_index(&idx);
                Some(Stored {
                    entry,
                    node: node.to_owned(),
                    region: region.to_owned(),
                })
            })
            .collect())
    }
}
