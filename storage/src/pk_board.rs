//! The scoreboard of PKs between two rooms: each room's owner writes its side of the match (its
//! score, whether its side is closed, whether a stop closed it) and reads the other room's, in
//! one call, about once a second while the match is on. The two rooms may be owned by different
//! shards, or move between shards during the match: the board is the one place both reach.
//!
//! A side only moves forward: its score never falls and a closed side stays closed, with the
//! score it closed at. So a stale owner of a room (one that lost the room's lease and has not
//! noticed yet) cannot take back what the room's real owner reported.
//!
//! # Engines
//! - Redis (cluster): one hash per match, `pk:{<link>}`, field = room, value
//!   `score:closed:stopped`; it expires `keep_ms` after its last write.
//! - In process (standalone): the same in memory; a match is forgotten `keep_ms` after its last
//!   write, when the next call comes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use ::redis::aio::ConnectionManager;
use protocol::RoomId;

use crate::error::Result;
use crate::redis::map_err;

/// One room's side of a match.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PkSide {
    /// The room's score (coins).
    pub score: i64,
    /// The room's side is closed: its score is final.
    pub closed: bool,
    /// A stop (not the time) closed it.
    pub stopped: bool,
}

impl PkSide {
    /// `self` written over what the board holds: the score never falls, a closed side keeps
    /// the score it closed at, and the flags stay once set.
    fn over(self, old: Self) -> Self {
        if old.closed {
            return old;
        }
        Self {
            score: self.score.max(old.score),
            closed: self.closed,
            stopped: self.stopped,
        }
    }
}

/// `exchange` on Redis: the same merge as [`PkSide::over`], then every other room's side.
/// ARGV: room, score, closed (0/1), stopped (0/1), keep (ms).
const EXCHANGE_LUA: &str = r"
local room, score, closed, stopped = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local old = redis.call('HGET', KEYS[1], room)
if old then
  local s, c, t = string.match(old, '^(%-?%d+):(%d):(%d)$')
  if c == '1' then
    score, closed, stopped = tonumber(s), '1', t
  elseif s and tonumber(s) > score then
    score = tonumber(s)
  end
end
redis.call('HSET', KEYS[1], room, string.format('%d:%s:%s', score, closed, stopped))
redis.call('PEXPIRE', KEYS[1], ARGV[5])
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  if all[i] ~= room then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
";

/// Matches in memory: match → (forgotten at, unix ms; room → side).
type Memory = Arc<Mutex<HashMap<String, (u64, HashMap<RoomId, PkSide>)>>>;

/// The board: one of the two engines, cheap to clone.
#[derive(Clone)]
pub enum PkBoard {
    /// Redis (cluster mode).
    Redis(ConnectionManager, Arc<::redis::Script>),
    /// In process (standalone mode).
    Memory(Memory),
}

impl std::fmt::Debug for PkBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Redis(..) => "PkBoard::Redis",
            Self::Memory(_) => "PkBoard::Memory",
        })
    }
}

/// The Redis key of match `link` (one hash slot per match).
fn key(link: &str) -> String {
    format!("pk:{{{link}}}")
}

impl PkBoard {
    /// A board on `redis`'s shared connection.
    pub fn redis(redis: &crate::redis::Redis) -> Self {
        Self::Redis(redis.conn(), Arc::new(::redis::Script::new(EXCHANGE_LUA)))
    }

    /// A board in this process.
    pub fn memory() -> Self {
        Self::Memory(Arc::default())
    }

    /// Writes `room`'s side of match `link` (merged over what the board holds: see
    /// [`PkSide`]) and answers the other room's side, if it wrote one. The match is kept
    /// `keep_ms` after this write.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn exchange(
        &self,
        link: &str,
        room: &RoomId,
        side: PkSide,
        keep_ms: u64,
        now_ms: u64,
    ) -> Result<Option<PkSide>> {
        match self {
            Self::Redis(conn, script) => {
                let mut conn = conn.clone();
                let others: Vec<(String, String)> = script
                    .key(key(link))
                    .arg(room.as_str())
                    .arg(side.score)
                    .arg(u8::from(side.closed))
                    .arg(u8::from(side.stopped))
                    .arg(keep_ms.max(1))
                    .invoke_async(&mut conn)
                    .await
                    .map_err(map_err)?;
                Ok(others.iter().find_map(|(_, v)| parse(v)))
            }
            Self::Memory(all) => {
                let mut all = all.lock().unwrap_or_else(PoisonError::into_inner);
                all.retain(|_, (until, _)| *until > now_ms);
                let (until, sides) = all.entry(link.to_owned()).or_default();
                *until = now_ms.saturating_add(keep_ms);
                let merged = sides.get(room).map_or(side, |old| side.over(*old));
                sides.insert(room.clone(), merged);
                Ok(sides.iter().find(|(r, _)| *r != room).map(|(_, s)| *s))
            }
        }
    }
}

/// A side as Redis holds it: `score:closed:stopped`.
fn parse(v: &str) -> Option<PkSide> {
    let mut parts = v.split(':');
    let score = parts.next()?.parse().ok()?;
    let closed = parts.next()? == "1";
    let stopped = parts.next()? == "1";
    Some(PkSide {
        score,
        closed,
        stopped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_only_moves_forward() {
        let open = |score| PkSide {
            score,
            closed: false,
            stopped: false,
        };
        assert_eq!(open(5).over(open(9)), open(9), "a score never falls");
        assert_eq!(open(12).over(open(9)), open(12));
        let closed = PkSide {
            score: 9,
            closed: true,
            stopped: true,
        };
        assert_eq!(
            open(20).over(closed),
            closed,
            "a closed side keeps its score"
        );
        assert_eq!(
            parse("-3:1:0").map(|s| (s.score, s.closed, s.stopped)),
            Some((-3, true, false))
        );
        assert_eq!(parse("x"), None);
    }
}
