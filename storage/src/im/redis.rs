//! The direct-message store's Redis engine (see the parent module for the keys).

use std::sync::Arc;

use ::redis::Script;
use ::redis::aio::ConnectionManager;
use protocol::UserId;

use super::{Blocked, IDS_PER_MS, KEEP_FOR, KEEP_PER_USER, Outgoing, REQ_ID_TTL, Sent, Stored};
use crate::error::{Result, StorageError};
use crate::redis::{Redis, load_scripts, map_err, ttl_ms};

const SEQ_KEY: &str = "chorus:{im}:seq";

fn log_key(u: &UserId) -> String {
    format!("chorus:{{im}}:log:{u}")
}
fn pending_key(u: &UserId) -> String {
    format!("chorus:{{im}}:pending:{u}")
}
fn blocks_key(u: &UserId) -> String {
    format!("chorus:{{im}}:blocks:{u}")
}
/// A sender's request id: the user's id is length-prefixed, since both may hold `:` (`ann` with
/// `x:1` and `ann:x` with `1` must not share a key).
fn req_key(u: &UserId, req_id: &str) -> String {
    format!("chorus:{{im}}:req:{}:{u}:{req_id}", u.as_str().len())
}

/// SEND: `KEYS = [seq, log from, log to, pending to, blocks to, blocks from, req]`,
/// `ARGV = [from, to, body, req record, keep count, keep ms, req ttl ms, ids per ms]`.
/// Returns `{'repeat', 'id|at|record'}`, `{'blocked_by'}`, `{'blocking'}` or
/// `{'new', id, at, json}`.
const SEND_LUA: &str = r#"
local r = redis.call('GET', KEYS[7])
if r then return {'repeat', r} end
if redis.call('SISMEMBER', KEYS[5], ARGV[1]) == 1 then return {'blocked_by'} end
if redis.call('SISMEMBER', KEYS[6], ARGV[2]) == 1 then return {'blocking'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local per = tonumber(ARGV[8])
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
local id = math.max(now * per, last + 1)
local ids = string.format('%.0f', id)
local ats = string.format('%.0f', math.floor(id / per))
redis.call('SET', KEYS[1], ids)
local msg = '{"id":' .. ids .. ',"at":' .. ats .. ',' .. ARGV[3] .. '}'
local floor = string.format('%.0f', (now - tonumber(ARGV[6])) * per)
for _, k in ipairs({KEYS[2], KEYS[3]}) do
  redis.call('ZADD', k, ids, msg)
  redis.call('ZREMRANGEBYRANK', k, 0, -(tonumber(ARGV[5]) + 1))
  redis.call('ZREMRANGEBYSCORE', k, '-inf', '(' .. floor)
  redis.call('PEXPIRE', k, ARGV[6])
end
redis.call('ZADD', KEYS[4], ids, ids)
local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if oldest[2] then redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. oldest[2]) end
redis.call('PEXPIRE', KEYS[4], ARGV[6])
redis.call('SET', KEYS[7], ids .. '|' .. ats .. '|' .. ARGV[4], 'PX', ARGV[7])
return {'new', ids, ats, msg}
"#;

/// UNDELIVERED: `KEYS = [pending, log]`. The pending messages, oldest first, as
/// `{id, json, …}`; ids whose message was trimmed go.
const UNDELIVERED_LUA: &str = r"
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local m = redis.call('ZRANGEBYSCORE', KEYS[2], id, id)
  if m[1] then
    table.insert(out, id)
    table.insert(out, m[1])
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
";

/// BLOCK: `KEYS = [blocks]`, `ARGV = [other, max]`. 1 done, 0 list full.
const BLOCK_LUA: &str = r"
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 1 end
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('SADD', KEYS[1], ARGV[1])
return 1
";

/// What a stored request record (`id|at|record`) answers a send whose record is `record`.
fn judge(first: &str, record: &str) -> Result<Sent> {
    let mut it = first.splitn(3, '|');
    let id = it.next().and_then(|v| v.parse().ok());
    let at = it.next().and_then(|v| v.parse().ok());
    match (id, at, it.next()) {
        (Some(id), Some(at), Some(rest)) if rest == record => Ok(Sent::Repeated { id, at }),
        (Some(_), Some(_), Some(_)) => Ok(Sent::Conflict),
        _ => Err(corrupt("req record")),
    }
}

/// The Redis engine; cheap to clone.
#[derive(Clone)]
pub struct RedisIm {
    conn: ConnectionManager,
    scripts: Arc<Scripts>,
}

struct Scripts {
    send: Script,
    undelivered: Script,
    block: Script,
}

impl std::fmt::Debug for RedisIm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisIm")
    }
}

fn corrupt(what: &str) -> StorageError {
    StorageError::corrupt_msg(format!("im store: {what}"))
}

impl RedisIm {
    pub(super) fn new(redis: &Redis) -> Self {
        Self {
            conn: redis.conn(),
            scripts: Arc::new(Scripts {
                send: Script::new(SEND_LUA),
                undelivered: Script::new(UNDELIVERED_LUA),
                block: Script::new(BLOCK_LUA),
            }),
        }
    }

    pub(super) async fn preload(&self) -> Result<()> {
        let s = &self.scripts;
        load_scripts(&self.conn, &[&s.send, &s.undelivered, &s.block]).await
    }

    pub(super) async fn send(&self, m: &Outgoing<'_>) -> Result<Sent> {
        let mut conn = self.conn.clone();
        let record = super::req_record(m);
        let reply: Vec<String> = self
            .scripts
            .send
            .key(SEQ_KEY)
            .key(log_key(m.from))
            .key(log_key(m.to))
            .key(pending_key(m.to))
            .key(blocks_key(m.to))
            .key(blocks_key(m.from))
            .key(req_key(m.from, m.req_id))
            .arg(m.from.as_str())
            .arg(m.to.as_str())
            .arg(super::body_fragment(m))
            .arg(&record)
            .arg(KEEP_PER_USER)
            .arg(ttl_ms(KEEP_FOR))
            .arg(ttl_ms(REQ_ID_TTL))
            .arg(IDS_PER_MS)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        match reply.first().map(String::as_str) {
            Some("blocked_by") => Ok(Sent::BlockedByRecipient),
            Some("blocking") => Ok(Sent::BlockedBySender),
            Some("repeat") => {
                let first = reply.get(1).ok_or_else(|| corrupt("req record"))?;
                judge(first, &record)
            }
            Some("new") => {
                let num = |i: usize| reply.get(i).and_then(|v| v.parse::<u64>().ok());
                match (num(1), num(2), reply.get(3)) {
                    (Some(id), Some(at), Some(json)) => Ok(Sent::New(Stored {
                        id,
                        at,
                        json: json.clone(),
                    })),
                    _ => Err(corrupt("send reply")),
                }
            }
            _ => Err(corrupt("send reply")),
        }
    }

    pub(super) async fn repeat(&self, m: &Outgoing<'_>) -> Result<Option<Sent>> {
        let mut conn = self.conn.clone();
        let first: Option<String> = ::redis::cmd("GET")
            .arg(req_key(m.from, m.req_id))
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        let record = super::req_record(m);
        first.map(|f| judge(&f, &record)).transpose()
    }

    pub(super) async fn undelivered(&self, user: &UserId) -> Result<Vec<(u64, String)>> {
        let mut conn = self.conn.clone();
        let flat: Vec<String> = self
            .scripts
            .undelivered
            .key(pending_key(user))
            .key(log_key(user))
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        let mut out = Vec::with_capacity(flat.len() / 2);
        // A log key lives 7 days past its last write, so older messages may still be there.
        let floor = super::oldest_kept_id(super::now_ms());
        for pair in flat.chunks(2) {
            if let [id, json] = pair {
                let id: u64 = id.parse().map_err(|_| corrupt("pending id"))?;
                if id >= floor {
                    out.push((id, json.clone()));
                }
            }
        }
        Ok(out)
    }

    pub(super) async fn delivered(&self, user: &UserId, ids: &[u64]) -> Result<()> {
        let mut conn = self.conn.clone();
        ::redis::cmd("ZREM")
            .arg(pending_key(user))
            .arg(ids)
            .query_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(map_err)
    }

    pub(super) async fn history(&self, user: &UserId, before: Option<u64>) -> Result<Vec<String>> {
        let mut conn = self.conn.clone();
        let max = before.map_or_else(|| "+inf".to_owned(), |b| format!("({b}"));
        ::redis::cmd("ZRANGE")
            .arg(log_key(user))
            .arg(max)
            .arg(super::oldest_kept_id(super::now_ms()))
            .arg("BYSCORE")
            .arg("REV")
            .query_async(&mut conn)
            .await
            .map_err(map_err)
    }

    pub(super) async fn block(&self, user: &UserId, other: &UserId, max: usize) -> Result<Blocked> {
        let mut conn = self.conn.clone();
        let done: i64 = self
            .scripts
            .block
            .key(blocks_key(user))
            .arg(other.as_str())
            .arg(max)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        Ok(if done == 1 {
            Blocked::Done
        } else {
            Blocked::ListFull
        })
    }

    pub(super) async fn unblock(&self, user: &UserId, other: &UserId) -> Result<bool> {
        let mut conn = self.conn.clone();
        let n: i64 = ::redis::cmd("SREM")
            .arg(blocks_key(user))
            .arg(other.as_str())
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        Ok(n > 0)
    }

    pub(super) async fn blocks(&self, user: &UserId) -> Result<Vec<UserId>> {
        let mut conn = self.conn.clone();
        let all: Vec<String> = ::redis::cmd("SMEMBERS")
            .arg(blocks_key(user))
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        Ok(all.into_iter().map(UserId::from).collect())
    }
}

#[cfg(test)]
mod tests {
    use protocol::UserId;

    use super::req_key;

    #[test]
    fn request_keys_of_ids_with_colons_do_not_meet() {
        assert_ne!(
            req_key(&UserId::from("ann"), "x:1"),
            req_key(&UserId::from("ann:x"), "1")
        );
        assert_eq!(
            req_key(&UserId::from("ann"), "k"),
            "chorus:{im}:req:3:ann:k"
        );
    }
}
