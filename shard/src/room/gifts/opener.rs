//! Opening a runtime's gifts in the fenced store before their ledger calls, many in one write.

use std::sync::Arc;

use protocol::{FencingToken, RoomId};
use storage::StorageError;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::Inner;

/// Opens a runtime's gifts in the fenced store before their ledger calls, many in one write:
/// a saga hands its gift id over and waits, and the opener's task opens every id waiting in
/// one call ([`SnapshotStore::open_batch`](storage::snapshot::SnapshotStore::open_batch)), as the
/// ledger's writer groups commits. A lone gift goes at once; gifts that come while a write is
/// out go together in the next. The task ends with the runtime's last saga.
#[derive(Clone, Debug)]
pub(crate) struct Opener {
    tx: mpsc::Sender<OpenRequest>,
}

/// A gift to open, and where its answer goes.
type OpenRequest = (Uuid, oneshot::Sender<Result<bool, StorageError>>);

/// Gift ids waiting for an [`Opener`]'s write before senders wait too.
const OPEN_QUEUE: usize = 1024;
/// Most gift ids one open write carries.
const OPEN_BATCH_MAX: usize = 256;

impl Opener {
    pub(super) fn start(inner: &Arc<Inner>, room: RoomId, fence: FencingToken) -> Self {
        let (tx, mut rx) = mpsc::channel(OPEN_QUEUE);
        let snapshots = inner.snapshots.clone();
        inner.tracker.spawn(async move {
            let mut waiting: Vec<OpenRequest> = Vec::with_capacity(OPEN_BATCH_MAX);
            while rx.recv_many(&mut waiting, OPEN_BATCH_MAX).await > 0 {
                let ids: Vec<Uuid> = waiting.iter().map(|(id, _)| *id).collect();
                match snapshots.store().open_batch(&room, fence, &ids).await {
                    Ok(added) => {
                        for ((_, answer), added) in waiting.drain(..).zip(added) {
                            let _ = answer.send(Ok(added));
                        }
                    }
                    Err(e) => {
                        for (_, answer) in waiting.drain(..) {
                            let _ = answer.send(Err(e.clone()));
                        }
                    }
                }
            }
        });
        Self { tx }
    }

    /// Opens `gift`: true when this call opened it (see [`SnapshotStore::open_batch`]).
    ///
    /// [`SnapshotStore::open_batch`]: storage::snapshot::SnapshotStore::open_batch
    pub(super) async fn open(&self, gift: Uuid) -> Result<bool, StorageError> {
        let gone = || StorageError::unavailable_msg("the room's opener stopped");
        let (answer, answered) = oneshot::channel();
        self.tx.send((gift, answer)).await.map_err(|_| gone())?;
        answered.await.map_err(|_| gone())?
    }
}
