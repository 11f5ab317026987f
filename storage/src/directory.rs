//! The room directory: what `room.list` and `GET /admin/rooms` page through.
//!
//! Each room's owner publishes the room's summary ([`RoomEntry`]) at a bounded rate and
//! removes it when the room closes or stops; operators pin rooms ("directory pins", listed
//! first; not the placement pins of [`crate::membership`]).
//!
//! # Order, search and paging
//! A listing is the live pinned rooms (by score), then every other live room by score
//! (highest first, ties by room id, descending). A `region` filter lists the rooms whose
//! owner is in that region; global pins show in every listing, region pins only in their
//! region's. A `query` lists, in the order of the matched text, the rooms whose id, title,
//! or a word of whose title starts with it, case-insensitively (pinned matches first).
//!
//! Cursors are positions in the ranked (or search) order, so a page costs O(log n + limit)
//! in Redis whatever its depth; a room whose score changes between two pages may show twice
//! or be passed over, as in any live ranking.
//!
//! # Liveness
//! Every owner's node refreshes `alive` with each publish tick; entries whose node has not
//! for [`ListArgs::stale_ms`] are not listed, and [`DirectoryStore::sweep_dead`] removes
//! them. A node purges its own entries when it starts ([`DirectoryStore::purge_node`]).
//!
//! # Engines
//! - Redis (cluster): `dir:sum` (hash room → entry JSON), `dir:idx` (hash room → node, region
//!   and search tokens), `dir:z` and `dir:z:{region}` (sorted sets by score), `dir:lex`
//!   (lexicographic index of `token \0 room`), `dir:n:{node}` (rooms per node), `dir:alive`
//!   (node → last publish, unix ms), `dir:pins` (room → pin JSON).
//! - In process (standalone): the same structures in memory; directory pins also in SQLite
//!   (`<data_dir>/directory.db`) when opened with [`DirectoryStore::memory_with_pins_file`].

mod memory;
mod redis;

use std::collections::{HashMap, HashSet};

use protocol::client::RoomEntry;
use protocol::{NodeId, RoomId};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StorageError};

/// Most words of a title indexed for search.
const MAX_TITLE_WORDS: usize = 8;
/// Longest search token kept, in bytes (a longer title is searched by its first bytes).
const MAX_TOKEN_BYTES: usize = 64;
/// Candidates read per page beyond its size, for entries a page skips (pinned, dead).
const READ_AHEAD: usize = 8;
/// Reads of candidates per page before the page is returned short (with a cursor).
const MAX_ROUNDS: usize = 4;
/// Most directory pins at once.
pub const MAX_PINS: usize = 100;
/// The highest ranked position a cursor may name.
const MAX_POSITION: usize = 1 << 31;
/// Index entries a search reads at most, over all its pages: a search range is read from its
/// start to the cursor's position (Redis `ZRANGEBYLEX … LIMIT offset`), so a deep cursor, made
/// up or paged to, would cost in proportion. A search lists its best matches; deeper than
/// this it ends.
pub const MAX_SEARCH_DEPTH: usize = 2_000;

/// A change to publish for one room.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// Insert or replace the room's summary (its `pinned` is ignored).
    Put(RoomEntry),
    /// Remove the room, if `node` still owns its entry.
    Remove(RoomId),
}

/// Where a directory pin shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PinScope {
    /// In every listing.
    Global,
    /// In the listings of one region.
    Region,
}

/// An operator's directory pin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    /// Where it shows.
    pub scope: PinScope,
    /// The region of a region pin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Unix ms after which it no longer applies (`None`: until unpinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    /// When it was made (unix ms).
    #[serde(default)]
    pub at: u64,
}

impl Pin {
    /// Whether the pin applies at `now` to a listing of `region`.
    fn applies(&self, now: u64, region: Option<&str>) -> bool {
        if self.until.is_some_and(|u| u <= now) {
            return false;
        }
        match self.scope {
            PinScope::Global => true,
            PinScope::Region => region.is_some() && self.region.as_deref() == region,
        }
    }
}

/// One listing request.
#[derive(Debug, Clone, Default)]
pub struct ListArgs {
    /// Where the previous page ended.
    pub cursor: Option<String>,
    /// Rooms per page (at least 1).
    pub limit: usize,
    /// Only rooms whose owner is in this region.
    pub region: Option<String>,
    /// Search text (see the module docs).
    pub query: Option<String>,
    /// Now, unix ms.
    pub now_ms: u64,
    /// Entries of a node whose last publish is older than this are not listed.
    pub stale_ms: u64,
}

/// One page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    /// The rooms, pinned first.
    pub rooms: Vec<RoomEntry>,
    /// The next page's cursor; `None` on the last page.
    pub cursor: Option<String>,
}

/// A stored entry: the summary and who owns it.
#[derive(Debug, Clone)]
struct Stored {
    entry: RoomEntry,
    node: String,
    region: String,
}

/// What a listing walks after the pins.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    /// Every room by score.
    All,
    /// One region's rooms by score.
    Region(String),
    /// Search matches in the order of the matched text.
    Lex(String),
}

/// Where a page starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cursor {
    /// In the pins, after this many.
    Pins(usize),
    /// In the ranked or search order, at this position.
    Ranked(usize),
}

impl Cursor {
    fn parse(s: Option<&str>) -> Result<Self> {
        let Some(s) = s else {
            return Ok(Self::Pins(0));
        };
        let bad = || StorageError::invalid_msg("cursor: not one this server gave");
        let (kind, n) = s.split_at_checked(1).ok_or_else(bad)?;
        let n: usize = n.parse().map_err(|_| bad())?;
        match kind {
            "p" if n <= MAX_PINS => Ok(Self::Pins(n)),
            // Past any directory's length: a position no page ever gave, which an engine's
            // range arithmetic must not see.
            "r" if n <= MAX_POSITION => Ok(Self::Ranked(n)),
            _ => Err(bad()),
        }
    }

    fn encode(self) -> String {
        match self {
            Self::Pins(n) => format!("p{n}"),
            Self::Ranked(n) => format!("r{n}"),
        }
    }
}

/// The search tokens of a room: its id, its title and its title's words, lower case.
pub fn tokens(room: &RoomId, title: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |t: &str| {
        let t = token(t);
        if !t.is_empty() && !out.contains(&t) {
            out.push(t);
        }
    };
    add(room.as_str());
    add(title.trim());
    for w in title.split_whitespace().take(MAX_TITLE_WORDS) {
        add(w);
    }
    out
}

/// Text made a search token: lower case, without control characters, at most
/// [`MAX_TOKEN_BYTES`].
fn token(s: &str) -> String {
    let mut t = String::with_capacity(s.len().min(MAX_TOKEN_BYTES));
    for c in s
        .chars()
        .filter(|c| !c.is_control())
        .flat_map(char::to_lowercase)
    {
        if t.len() + c.len_utf8() > MAX_TOKEN_BYTES {
            break;
        }
        t.push(c);
    }
    t
}

/// The normalized search text; `None` when it is empty.
fn normalize_query(q: Option<&str>) -> Option<String> {
    q.map(|q| token(q.trim())).filter(|q| !q.is_empty())
}

/// Whether `entry` matches the normalized `query`.
fn matches(entry: &RoomEntry, query: &str) -> bool {
    tokens(&entry.room, &entry.title)
        .iter()
        .any(|t| t.starts_with(query))
}

/// The room directory store: one of two engines, cheap to clone.
#[derive(Clone)]
pub enum DirectoryStore {
    /// Redis (cluster mode).
    Redis(redis::RedisDirectory),
    /// In process (standalone mode).
    Memory(memory::MemoryDirectory),
}

impl std::fmt::Debug for DirectoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Redis(_) => "DirectoryStore::Redis",
            Self::Memory(_) => "DirectoryStore::Memory",
        })
    }
}

impl DirectoryStore {
    /// A store on `redis`'s shared connection.
    pub fn redis(redis: &crate::redis::Redis) -> Self {
        Self::Redis(redis::RedisDirectory::new(redis.conn()))
    }

    /// Loads the Redis script into Redis' script cache (nothing to do in process): a shard's
    /// first publish sends every room's write in one pipeline, and each would find it missing.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn preload(&self) -> Result<()> {
        match self {
            Self::Redis(r) => r.preload().await,
            Self::Memory(_) => Ok(()),
        }
    }

    /// An in-process store (pins in memory only).
    pub fn memory() -> Self {
        Self::Memory(memory::MemoryDirectory::default())
    }

    /// An in-process store whose directory pins are kept in `<data_dir>/directory.db`, so
    /// they survive a restart (standalone).
    ///
    /// # Errors
    /// `Backend` when the directory or the database cannot be opened.
    pub async fn memory_with_pins_file(data_dir: &std::path::Path) -> Result<Self> {
        Ok(Self::Memory(
            memory::MemoryDirectory::with_pins_file(data_dir).await?,
        ))
    }

    /// Applies `updates` for rooms owned by `node` and records that `node` is alive at
    /// `now_ms`, in one round trip (one Redis pipeline).
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn publish(&self, node: &NodeId, now_ms: u64, updates: &[Update]) -> Result<()> {
        match self {
            Self::Redis(r) => r.publish(node, now_ms, updates).await,
            Self::Memory(m) => {
                m.publish(node, now_ms, updates);
                Ok(())
            }
        }
    }

    /// Removes every entry `node` owns; how many.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn purge_node(&self, node: &NodeId) -> Result<usize> {
        match self {
            Self::Redis(r) => r.purge_node(node.as_str()).await,
            Self::Memory(m) => Ok(m.purge_node(node.as_str())),
        }
    }

    /// Removes the entries of every node that has not published for `stale_ms`; how many.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn sweep_dead(&self, now_ms: u64, stale_ms: u64) -> Result<usize> {
        let alive = self.alive().await?;
        let mut removed = 0;
        for (node, at) in alive {
            if at.saturating_add(stale_ms) < now_ms {
                removed += match self {
                    Self::Redis(r) => r.forget_node(&node).await?,
                    Self::Memory(m) => m.forget_node(&node),
                };
            }
        }
        Ok(removed)
    }

    /// Pins `room` (replacing its pin).
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn pin(&self, room: &RoomId, pin: &Pin) -> Result<()> {
        match self {
            Self::Redis(r) => r.pin(room, pin).await,
            Self::Memory(m) => m.pin(room, pin).await,
        }
    }

    /// Removes `room`'s pin; whether it had one.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn unpin(&self, room: &RoomId) -> Result<bool> {
        match self {
            Self::Redis(r) => r.unpin(room).await,
            Self::Memory(m) => m.unpin(room).await,
        }
    }

    /// Every pin (expired ones included until unpinned).
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn pins(&self) -> Result<HashMap<RoomId, Pin>> {
        match self {
            Self::Redis(r) => r.pins().await,
            Self::Memory(m) => Ok(m.pins()),
        }
    }

    async fn alive(&self) -> Result<HashMap<String, u64>> {
        match self {
            Self::Redis(r) => r.alive().await,
            Self::Memory(m) => Ok(m.alive()),
        }
    }

    async fn range(&self, source: &Source, offset: usize, count: usize) -> Result<Vec<RoomId>> {
        match self {
            Self::Redis(r) => r.range(source, offset, count).await,
            Self::Memory(m) => Ok(m.range(source, offset, count)),
        }
    }

    async fn stored(&self, rooms: &[RoomId]) -> Result<Vec<Option<Stored>>> {
        match self {
            Self::Redis(r) => r.stored(rooms).await,
            Self::Memory(m) => Ok(m.stored(rooms)),
        }
    }

    /// One page of the directory (see the module docs for the order).
    ///
    /// # Errors
    /// `Invalid` for a cursor this store did not give; `Unavailable` / `Backend` when the
    /// engine fails.
    pub async fn list(&self, args: &ListArgs) -> Result<Page> {
        let limit = args.limit.max(1);
        let mut cursor = Cursor::parse(args.cursor.as_deref())?;
        let query = normalize_query(args.query.as_deref());
        let region = args.region.as_deref();
        let (alive, pins) = match self {
            Self::Redis(r) => r.meta().await?,
            Self::Memory(m) => (m.alive(), m.pins()),
        };
        let live = |node: &str| {
            alive
                .get(node)
                .is_some_and(|at| at.saturating_add(args.stale_ms) >= args.now_ms)
        };
        // The pins that apply to this listing, live and matching, by score.
        let pinned_ids: Vec<RoomId> = pins
            .iter()
            .filter(|(_, p)| p.applies(args.now_ms, region))
            .map(|(r, _)| r.clone())
            .collect();
        let mut pinned: Vec<RoomEntry> = Vec::new();
        if !pinned_ids.is_empty() {
            for s in self.stored(&pinned_ids).await?.into_iter().flatten() {
                if live(&s.node) && query.as_deref().is_none_or(|q| matches(&s.entry, q)) {
                    pinned.push(RoomEntry {
                        pinned: true,
                        ..s.entry
                    });
                }
            }
        }
        pinned.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| b.room.as_str().cmp(a.room.as_str()))
        });
        let skip: HashSet<RoomId> = pinned.iter().map(|e| e.room.clone()).collect();
        let mut page = Page::default();
        if let Cursor::Pins(done) = cursor {
            page.rooms.extend(pinned.into_iter().skip(done).take(limit));
            cursor = if page.rooms.len() == limit {
                Cursor::Pins(done + limit)
            } else {
                Cursor::Ranked(0)
            };
            if page.rooms.len() == limit {
                page.cursor = Some(cursor.encode());
                return Ok(page);
            }
        }
        let Cursor::Ranked(mut offset) = cursor else {
            return Ok(page);
        };
        let source = match (&query, region) {
            (Some(q), _) => Source::Lex(q.clone()),
            (None, Some(r)) => Source::Region(r.to_owned()),
            (None, None) => Source::All,
        };
        let depth = match &source {
            Source::Lex(_) => MAX_SEARCH_DEPTH,
            _ => MAX_POSITION,
        };
        let mut seen: HashSet<RoomId> = HashSet::new();
        for _ in 0..MAX_ROUNDS {
            let want = limit - page.rooms.len();
            let batch =
                (want + skip.len().min(limit) + READ_AHEAD).min(depth.saturating_sub(offset));
            if batch == 0 {
                // A search that reached its depth ends here.
                return Ok(page);
            }
            let ids = self.range(&source, offset, batch).await?;
            let exhausted = ids.len() < batch;
            let stored = self.stored(&ids).await?;
            for (id, s) in ids.iter().zip(stored) {
                if page.rooms.len() == limit {
                    page.cursor = Some(Cursor::Ranked(offset).encode());
                    return Ok(page);
                }
                offset += 1;
                let Some(s) = s else { continue };
                let region_ok = match (&source, region) {
                    (Source::Lex(_), Some(r)) => s.region == r,
                    _ => true,
                };
                if region_ok && live(&s.node) && !skip.contains(id) && seen.insert(id.clone()) {
                    page.rooms.push(s.entry);
                }
            }
            if exhausted {
                return Ok(page);
            }
            if page.rooms.len() == limit {
                break;
            }
        }
        page.cursor = Some(Cursor::Ranked(offset).encode());
        Ok(page)
    }
}

/// The index line of an entry: node, region and tokens, separated by `\x1f`.
fn index_line(node: &str, entry: &RoomEntry) -> String {
    let mut line = String::with_capacity(64);
    line.push_str(node);
    line.push('\x1f');
    line.push_str(entry.region.as_deref().unwrap_or(""));
    for t in tokens(&entry.room, &entry.title) {
        line.push('\x1f');
        line.push_str(&t);
    }
    line
}

/// Node and region of an index line.
fn parse_index(line: &str) -> (&str, &str) {
    let mut parts = line.split('\x1f');
    let node = parts.next().unwrap_or("");
    let region = parts.next().unwrap_or("");
    (node, region)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_cover_id_title_and_words_in_lower_case() {
        let t = tokens(&RoomId::from("Room-7"), "  Late Night  Jazz ");
        assert_eq!(t, ["room-7", "late night  jazz", "late", "night", "jazz"]);
    }

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        for c in [Cursor::Pins(3), Cursor::Ranked(120)] {
            assert_eq!(Cursor::parse(Some(&c.encode())).unwrap(), c);
        }
        assert!(Cursor::parse(Some("x1")).is_err());
        assert!(Cursor::parse(Some("r9223372036854775807")).is_err());
        assert!(Cursor::parse(Some("r18446744073709551615")).is_err());
        assert!(Cursor::parse(Some("p101")).is_err());
        assert_eq!(
            Cursor::parse(Some("r2147483648")).unwrap(),
            Cursor::Ranked(1 << 31)
        );
        assert!(Cursor::parse(Some("r")).is_err());
        assert!(Cursor::parse(Some("")).is_err());
        assert_eq!(Cursor::parse(None).unwrap(), Cursor::Pins(0));
    }

    #[test]
    fn index_lines_parse_back() {
        let e = RoomEntry {
            room: RoomId::from("r1"),
            title: "Hi there".into(),
            owner: "u1".into(),
            members: 1,
            seated: 0,
            score: 1.0,
            robots: false,
            locked: false,
            region: Some("eu".into()),
            pinned: false,
            pk: false,
        };
        let line = index_line("n1", &e);
        assert_eq!(parse_index(&line), ("n1", "eu"));
    }
}
