//! The report store's Redis engine (see the parent module for the keys).

use std::sync::Arc;

use ::redis::Script;
use ::redis::aio::ConnectionManager;
use protocol::{RoomId, UserId};

use super::{NewReport, Page, Query, Report, Status, parse};
use crate::error::{Result, StorageError};
use crate::redis::{Redis, map_err};

const SEQ: &str = "chorus:{reports}:seq";
const DOC: &str = "chorus:{reports}:doc";
const RES: &str = "chorus:{reports}:res";
const ALL: &str = "chorus:{reports}:all";
const OPEN: &str = "chorus:{reports}:open";
const RESOLVED: &str = "chorus:{reports}:resolved";

fn room_key(r: &RoomId) -> String {
    format!("chorus:{{reports}}:room:{r}")
}
fn user_key(u: &UserId) -> String {
    format!("chorus:{{reports}}:user:{u}")
}
fn filing_key(key: &str) -> String {
    format!("chorus:{{reports}}:filing:{key}")
}
/// How long a filing key answers its id: far past any retry of the filing.
const FILING_TTL_SECS: u64 = 3_600;

/// FILE: `KEYS = [seq, doc, res, all, open, resolved, filing, room index, user index?]`,
/// `ARGV = [document, keep, filing ttl s]`. A filing key already set answers the id it holds
/// (a retry of a write that went through); else stores the report under the next id, marks
/// the filing, and drops the oldest past `keep` (at most 100 a call), with their index entries
/// in the two indexes touched; the id.
const FILE_LUA: &str = r"
local before = redis.call('GET', KEYS[7])
if before then return tonumber(before) end
local id = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[7], id, 'EX', ARGV[3])
redis.call('HSET', KEYS[2], id, ARGV[1])
redis.call('ZADD', KEYS[4], id, id)
redis.call('ZADD', KEYS[5], id, id)
redis.call('ZADD', KEYS[8], id, id)
if KEYS[9] then redis.call('ZADD', KEYS[9], id, id) end
local over = redis.call('ZCARD', KEYS[4]) - tonumber(ARGV[2])
if over > 0 then
  local old = redis.call('ZRANGE', KEYS[4], 0, math.min(over, 100) - 1)
  redis.call('ZREM', KEYS[4], unpack(old))
  redis.call('ZREM', KEYS[5], unpack(old))
  redis.call('ZREM', KEYS[6], unpack(old))
  redis.call('HDEL', KEYS[2], unpack(old))
  redis.call('HDEL', KEYS[3], unpack(old))
  local floor = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
  for i = 8, #KEYS do redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. floor) end
end
return id
";

/// RESOLVE: `KEYS = [doc, res, open, resolved]`, `ARGV = [id, resolution]`. 0: no such
/// report; 1: resolved before (unchanged); 2: resolved now.
const RESOLVE_LUA: &str = r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return 1 end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[1], ARGV[1])
return 2
";

/// Ids a list reads from an index per round trip.
const SCAN_BATCH: usize = 100;
/// Most ids a list reads before it answers with what it found (a filter that matches few).
const SCAN_MAX: usize = 2_000;

/// The Redis engine; cheap to clone.
#[derive(Clone)]
pub struct RedisReports {
    conn: ConnectionManager,
    scripts: Arc<(Script, Script)>,
    pub(super) keep: usize,
}

impl std::fmt::Debug for RedisReports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisReports")
    }
}

impl RedisReports {
    pub(super) fn new(redis: &Redis, keep: usize) -> Self {
        Self {
            conn: redis.conn(),
            scripts: Arc::new((Script::new(FILE_LUA), Script::new(RESOLVE_LUA))),
            keep,
        }
    }

    pub(super) async fn file(&self, r: &NewReport, key: &str, doc: &str) -> Result<u64> {
        let mut conn = self.conn.clone();
        let mut call = self.scripts.0.prepare_invoke();
        call.key(SEQ)
            .key(DOC)
            .key(RES)
            .key(ALL)
            .key(OPEN)
            .key(RESOLVED)
            .key(filing_key(key));
        call.key(room_key(&r.room));
        if let Some(u) = &r.user {
            call.key(user_key(u));
        }
        call.arg(doc).arg(self.keep).arg(FILING_TTL_SECS);
        call.invoke_async(&mut conn).await.map_err(map_err)
    }

    pub(super) async fn get(&self, id: u64) -> Result<Option<Report>> {
        Ok(self.read(&[id]).await?.into_iter().next())
    }

    /// The reports of `ids` that exist, in the order given.
    async fn read(&self, ids: &[u64]) -> Result<Vec<Report>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn.clone();
        let (docs, res): (Vec<Option<String>>, Vec<Option<String>>) = ::redis::pipe()
            .cmd("HMGET")
            .arg(DOC)
            .arg(ids)
            .cmd("HMGET")
            .arg(RES)
            .arg(ids)
            .query_async(&mut conn)
            .await
            .map_err(map_err)?;
        let mut out = Vec::with_capacity(ids.len());
        for ((id, doc), res) in ids.iter().zip(docs).zip(res) {
            if let Some(doc) = doc {
                out.push(parse(*id, &doc, res.as_deref())?);
            }
        }
        Ok(out)
    }

    pub(super) async fn list(&self, q: &Query) -> Result<Page> {
        // Read the narrowest index, newest first, and check the rest of the filter per report.
        let index = match (&q.room, &q.user, q.status) {
            (Some(room), _, _) => room_key(room),
            (None, Some(u), _) => user_key(u),
            (None, None, Status::Open) => OPEN.to_owned(),
            (None, None, Status::Resolved) => RESOLVED.to_owned(),
            (None, None, Status::All) => ALL.to_owned(),
        };
        let mut conn = self.conn.clone();
        let mut reports = Vec::new();
        let mut below = q.before;
        let mut scanned = 0;
        loop {
            let max = below.map_or_else(|| "+inf".to_owned(), |b| format!("({b}"));
            let ids: Vec<u64> = ::redis::cmd("ZRANGE")
                .arg(&index)
                .arg(max)
                .arg("-inf")
                .arg("BYSCORE")
                .arg("REV")
                .arg("LIMIT")
                .arg(0)
                .arg(SCAN_BATCH)
                .query_async(&mut conn)
                .await
                .map_err(map_err)?;
            let Some(&last) = ids.last() else {
                return Ok(Page {
                    reports,
                    next: None,
                });
            };
            scanned += ids.len();
            let full_batch = ids.len() == SCAN_BATCH;
            let mut found = self.read(&ids).await?.into_iter().filter(|r| q.admits(r));
            for r in found.by_ref() {
                reports.push(r);
                if reports.len() == q.limit {
                    break;
                }
            }
            if reports.len() == q.limit {
                // A next page when this batch holds more, or the index may.
                let more = found.next().is_some() || full_batch;
                let next = reports.last().map(|r| r.id).filter(|_| more);
                return Ok(Page { reports, next });
            }
            below = Some(last);
            if !full_batch {
                return Ok(Page {
                    reports,
                    next: None,
                });
            }
            if scanned >= SCAN_MAX {
                // A sparse filter: answer what was found; the caller pages on from `last`.
                return Ok(Page {
                    reports,
                    next: Some(last),
                });
            }
        }
    }

    pub(super) async fn open_count(&self) -> Result<u64> {
        let mut conn = self.conn.clone();
        ::redis::cmd("ZCARD")
            .arg(OPEN)
            .query_async(&mut conn)
            .await
            .map_err(map_err)
    }

    pub(super) async fn resolve(&self, id: u64, res: &str) -> Result<bool> {
        let mut conn = self.conn.clone();
        let done: i64 = self
            .scripts
            .1
            .key(DOC)
            .key(RES)
            .key(OPEN)
            .key(RESOLVED)
            .arg(id)
            .arg(res)
            .invoke_async(&mut conn)
            .await
            .map_err(map_err)?;
        match done {
            0 | 1 => Ok(false),
            2 => Ok(true),
            n => Err(StorageError::corrupt_msg(format!(
                "reports: resolve answered {n}"
            ))),
        }
    }
}
