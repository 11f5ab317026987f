//! The directory in process (standalone): the Redis engine's structures in memory, with the
//! same order (score descending, then room id descending; search by token, then room id).
//! Directory pins, an operator's intent, are also written to SQLite (`<data_dir>/directory.db`)
//! when the store has a file, so they survive a restart; summaries are rebuilt by the rooms.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use protocol::client::RoomEntry;
use protocol::{NodeId, RoomId};
use rusqlite::Connection;

use crate::error::{Result, StorageError};

use super::{Pin, Source, Stored, Update, tokens};

/// A place in a ranked set: highest score first, then room id descending (Redis's
/// `ZREVRANGE` order).
#[derive(Debug, Clone, PartialEq)]
struct Ranked {
    score: f64,
    room: String,
}

impl Eq for Ranked {}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then_with(|| other.room.cmp(&self.room))
    }
}

#[derive(Debug, Default)]
struct State {
    /// room -> its entry and search tokens. Boxed: the table's spare places (up to half of
    /// it after it grows) then cost a pointer each, not a whole entry.
    entries: HashMap<String, Box<(Stored, Vec<String>)>>,
    ranked: HashMap<String, BTreeSet<Ranked>>,
    lex: BTreeSet<(String, String)>,
    by_node: HashMap<String, HashSet<String>>,
    alive: HashMap<String, u64>,
    pins: HashMap<RoomId, Pin>,
}

/// The in-process engine. Cheap to clone (shared state).
#[derive(Clone, Default)]
pub struct MemoryDirectory {
    state: Arc<Mutex<State>>,
    /// Where pins are kept across restarts (`None`: memory only).
    pins_db: Option<Arc<Mutex<Connection>>>,
}

impl std::fmt::Debug for MemoryDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryDirectory")
            .field("pins_db", &self.pins_db.is_some())
            .finish_non_exhaustive()
    }
}

/// The SQLite file of the pins in the data directory.
const DIRECTORY_DB_FILE: &str = "directory.db";

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS directory_pins (
    room TEXT PRIMARY KEY,
    pin TEXT NOT NULL
);";

fn backend<E: std::error::Error + Send + Sync + 'static>(e: E) -> StorageError {
    StorageError::backend("directory pins", e)
}

impl State {
    fn unindex(&mut self, room: &str) -> Option<Stored> {
        let (stored, toks) = *self.entries.remove(room)?;
        let key = Ranked {
            score: stored.entry.score,
            room: room.to_owned(),
        };
        for set in [String::new(), stored.region.clone()] {
            if let Some(s) = self.ranked.get_mut(&set) {
                s.remove(&key);
            }
        }
        for t in toks {
            self.lex.remove(&(t, room.to_owned()));
        }
        if let Some(s) = self.by_node.get_mut(&stored.node) {
            s.remove(room);
        }
        Some(stored)
    }

    fn put(&mut self, node: &str, e: &RoomEntry) {
        let room = e.room.as_str().to_owned();
        self.unindex(&room);
        let region = e.region.clone().unwrap_or_default();
        let key = Ranked {
            score: e.score,
            room: room.clone(),
        };
        self.ranked
            .entry(String::new())
            .or_default()
            .insert(key.clone());
        if !region.is_empty() {
            self.ranked.entry(region.clone()).or_default().insert(key);
        }
        let toks = tokens(&e.room, &e.title);
        for t in &toks {
            self.lex.insert((t.clone(), room.clone()));
        }
        self.by_node
            .entry(node.to_owned())
            .or_default()
            .insert(room.clone());
        let stored = Stored {
            entry: RoomEntry {
                pinned: false,
                ..e.clone()
            },
            node: node.to_owned(),
            region,
        };
        self.entries.insert(room, Box::new((stored, toks)));
    }

    fn remove(&mut self, node: &str, room: &str) -> bool {
        match self.entries.get(room) {
            Some(e) if node.is_empty() || e.0.node == node => {
                self.unindex(room);
                true
            }
            _ => false,
        }
    }
}

impl MemoryDirectory {
    /// A store whose pins live in `<data_dir>/directory.db` (read back now).
    pub(super) async fn with_pins_file(data_dir: &std::path::Path) -> Result<Self> {
        let dir = data_dir.to_owned();
        let (conn, pins) = tokio::task::spawn_blocking(move || -> Result<_> {
            std::fs::create_dir_all(&dir).map_err(backend)?;
            let conn = Connection::open(dir.join(DIRECTORY_DB_FILE)).map_err(backend)?;
            conn.busy_timeout(std::time::Duration::from_secs(5))
                .map_err(backend)?;
            conn.execute_batch(SCHEMA).map_err(backend)?;
            let mut pins = HashMap::new();
            {
                let mut q = conn
                    .prepare("SELECT room, pin FROM directory_pins")
                    .map_err(backend)?;
                let rows = q
                    .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                    .map_err(backend)?;
                for row in rows {
                    let (room, json) = row.map_err(backend)?;
                    // An unreadable pin is skipped, not fatal.
                    if let Ok(pin) = serde_json::from_str::<Pin>(&json) {
                        pins.insert(RoomId::from(room), pin);
                    }
                }
            }
            Ok((conn, pins))
        })
        .await
        .map_err(backend)??;
        let me = Self {
            state: Arc::default(),
            pins_db: Some(Arc::new(Mutex::new(conn))),
        };
        me.lock().pins = pins;
        Ok(me)
    }

    /// Writes (`Some`) or deletes `room`'s pin in the file, if the store has one.
    async fn persist(&self, room: &RoomId, pin: Option<&Pin>) -> Result<()> {
        let Some(db) = self.pins_db.clone() else {
            return Ok(());
        };
        let room = room.as_str().to_owned();
        let json = pin
            .map(serde_json::to_string)
            .transpose()
            .map_err(backend)?;
        tokio::task::spawn_blocking(move || {
            let conn = db.lock().unwrap_or_else(PoisonError::into_inner);
            match json {
                Some(j) => conn.execute(
                    "INSERT INTO directory_pins (room, pin) VALUES (?1, ?2)
                     ON CONFLICT(room) DO UPDATE SET pin = excluded.pin",
                    (room, j),
                ),
                None => conn.execute("DELETE FROM directory_pins WHERE room = ?1", [room]),
            }
            .map(|_| ())
            .map_err(backend)
        })
        .await
        .map_err(backend)?
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere; the maps are still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn publish(&self, node: &NodeId, now_ms: u64, updates: &[Update]) {
        let mut s = self.lock();
        s.alive.insert(node.as_str().to_owned(), now_ms);
        for u in updates {
            match u {
                Update::Put(e) => s.put(node.as_str(), e),
                Update::Remove(room) => {
                    s.remove(node.as_str(), room.as_str());
                }
            }
        }
    }

    pub(super) fn purge_node(&self, node: &str) -> usize {
        let mut s = self.lock();
        let rooms: Vec<String> = s
            .by_node
            .remove(node)
            .map(|r| r.into_iter().collect())
            .unwrap_or_default();
        rooms.iter().filter(|r| s.remove(node, r)).count()
    }

    pub(super) fn forget_node(&self, node: &str) -> usize {
        let n = self.purge_node(node);
        self.lock().alive.remove(node);
        n
    }

    pub(super) async fn pin(&self, room: &RoomId, pin: &Pin) -> Result<()> {
        self.persist(room, Some(pin)).await?;
        self.lock().pins.insert(room.clone(), pin.clone());
        Ok(())
    }

    pub(super) async fn unpin(&self, room: &RoomId) -> Result<bool> {
        self.persist(room, None).await?;
        Ok(self.lock().pins.remove(room).is_some())
    }

    pub(super) fn pins(&self) -> HashMap<RoomId, Pin> {
        self.lock().pins.clone()
    }

    pub(super) fn alive(&self) -> HashMap<String, u64> {
        self.lock().alive.clone()
    }

    pub(super) fn range(&self, source: &Source, offset: usize, count: usize) -> Vec<RoomId> {
        let s = self.lock();
        match source {
            Source::All | Source::Region(_) => {
                let key = match source {
                    Source::Region(r) => r.as_str(),
                    _ => "",
                };
                s.ranked
                    .get(key)
                    .map(|set| {
                        set.iter()
                            .skip(offset)
                            .take(count)
                            .map(|r| RoomId::from(r.room.as_str()))
                            .collect()
                    })
                    .unwrap_or_default()
            }
            Source::Lex(q) => s
                .lex
                .range((q.clone(), String::new())..)
                .take_while(|(t, _)| t.starts_with(q.as_str()))
                .skip(offset)
                .take(count)
                .map(|(_, r)| RoomId::from(r.as_str()))
                .collect(),
        }
    }

    pub(super) fn stored(&self, rooms: &[RoomId]) -> Vec<Option<Stored>> {
        let s = self.lock();
        rooms
            .iter()
            .map(|r| s.entries.get(r.as_str()).map(|e| e.0.clone()))
            .collect()
    }
}
