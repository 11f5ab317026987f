//! Durable room state through the snapshot store: JSON of [`Durable`], every write fenced.

use protocol::{FencingToken, RoomId};
use storage::StorageError;
use storage::snapshot::SnapshotStore;

use crate::room::state::Durable;

/// Reads and writes room snapshots.
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
                .map_err(|e| StorageError::Corrupt(format!("room {room} snapshot: {e}"))),
        }
    }

    /// Appends a sequenced event to the fenced history.
    pub(crate) async fn append_history(
        &self,
        room: &RoomId,
        fence: FencingToken,
        seq: protocol::Seq,
        frame: &[u8],
        max_len: usize,
    ) -> Result<(), StorageError> {
        self.store
            .append_history(room, fence, seq, frame, max_len)
            .await
    }

    /// The fenced history, oldest first.
    pub(crate) async fn load_history(
        &self,
        room: &RoomId,
    ) -> Result<Vec<storage::snapshot::HistoryEntry>, StorageError> {
        self.store.load_history(room).await
    }

    /// Saves the room's durable state; fails with `Fenced` unless `fence` is the live lease's.
    pub(crate) async fn save(
        &self,
        room: &RoomId,
        fence: FencingToken,
        durable: &Durable,
    ) -> Result<(), StorageError> {
        let bytes = serde_json::to_vec(durable)
            .map_err(|e| StorageError::Corrupt(format!("encode snapshot: {e}")))?;
        self.store.save(room, fence, &bytes).await
    }
}
