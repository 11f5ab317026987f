//! Durable room state through the snapshot store: JSON of [`Durable`], every write fenced.

use std::hash::{DefaultHasher, Hasher};

use protocol::{FencingToken, RoomId};
use storage::StorageError;
use storage::snapshot::{Change, Created, SnapshotStore};

use super::state::Durable;

/// A digest of the snapshot bytes a room last wrote: a room whose durable state is what it
/// last wrote has nothing to save when it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Written(u64);

impl Written {
    fn of(bytes: &[u8]) -> Self {
        // SipHash with fixed keys: the same bytes give the same digest within the process,
        // and two different snapshots share one with odds of 2^-64.
        let mut h = DefaultHasher::new();
        h.write(bytes);
        Self(h.finish())
    }
}

fn encode(durable: &Durable) -> Result<Vec<u8>, StorageError> {
    serde_json::to_vec(durable).map_err(|e| StorageError::corrupt("encode snapshot", e))
}

/// Reads and writes a room's durable state as JSON through the fenced snapshot store.
#[derive(Debug, Clone)]
pub(crate) struct Snapshots {
    store: SnapshotStore,
}

impl Snapshots {
    pub(crate) fn new(store: SnapshotStore) -> Self {
        Self { store }
    }

    /// The room's durable state and the fence that wrote it, if the room exists.
    pub(crate) async fn load(
        &self,
        room: &RoomId,
    ) -> Result<Option<(FencingToken, Durable)>, StorageError> {
        match self.store.load(room).await? {
            None => Ok(None),
            Some(stored) => serde_json::from_slice(&stored.bytes)
                .map(|d| Some((stored.fence, d)))
                .map_err(|e| StorageError::corrupt(format!("room {room} snapshot"), e)),
        }
    }

    /// Writes one change: its sequenced events to the fenced history, with `durable` the
    /// room's state, and the open gifts it closes, all or none (`change` carries the events,
    /// the gifts and whether more changes wait; its state is `durable`'s). Returns the digest
    /// of the state written, if any.
    pub(crate) async fn write_change(
        &self,
        room: &RoomId,
        fence: FencingToken,
        change: Change<'_>,
        durable: Option<&Durable>,
        max_len: usize,
    ) -> Result<Option<Written>, StorageError> {
        let bytes = durable.map(encode).transpose()?;
        let change = Change {
            state: bytes.as_deref(),
            ..change
        };
        self.store
            .write_change(room, fence, change, max_len)
            .await?;
        Ok(bytes.as_deref().map(Written::of))
    }

    /// The store itself, for what needs no encoding (open gifts, the fenced history).
    pub(crate) fn store(&self) -> &SnapshotStore {
        &self.store
    }

    /// Saves the room's durable state; fails with `Fenced` unless `fence` is the live lease's.
    /// Returns the digest of what it wrote.
    pub(crate) async fn save(
        &self,
        room: &RoomId,
        fence: FencingToken,
        durable: &Durable,
    ) -> Result<Written, StorageError> {
        let bytes = encode(durable)?;
        self.store.save(room, fence, &bytes).await?;
        Ok(Written::of(&bytes))
    }

    /// Creates the room with `durable` (its owner counted as its creator) unless the owner
    /// already created `max_owned` stored rooms (0: no cap). Returns the digest written, or
    /// `None` at the cap (nothing written).
    pub(crate) async fn create(
        &self,
        room: &RoomId,
        fence: FencingToken,
        durable: &Durable,
        max_owned: u32,
        now_ms: u64,
    ) -> Result<Option<Written>, StorageError> {
        let bytes = encode(durable)?;
        let created = self
            .store
            .create(room, fence, &bytes, &durable.owner, max_owned, now_ms)
            .await?;
        Ok((created == Created::Created).then(|| Written::of(&bytes)))
    }

    /// Whether `durable` is exactly what `last` wrote (no store access).
    pub(crate) fn unchanged(durable: &Durable, last: Option<Written>) -> bool {
        last.is_some() && encode(durable).ok().map(|b| Written::of(&b)) == last
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test code: a failed unwrap is a failed test"
    )]

    use super::*;
    use protocol::UserId;

    #[test]
    fn only_the_state_last_written_counts_as_unchanged() {
        let d = Durable::new(UserId::from("alice"), "t".into(), 4, None).unwrap();
        let w = Written::of(&encode(&d).unwrap());
        assert!(Snapshots::unchanged(&d, Some(w)));
        // A failed (or no) write: always save again.
        assert!(!Snapshots::unchanged(&d, None));
        let mut seated = d.clone();
        seated.seats[1].user = Some(UserId::from("bob"));
        assert!(!Snapshots::unchanged(&seated, Some(w)));
        let mut renamed = d.clone();
        renamed.title = "u".into();
        assert!(!Snapshots::unchanged(&renamed, Some(w)));
    }
}
