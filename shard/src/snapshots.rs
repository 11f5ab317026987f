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
