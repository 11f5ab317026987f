//! The production ledger engine on Scylla (being written).

use protocol::{RoomId, UserId};
use uuid::Uuid;

use super::{
    BeginOutcome, Board, DebitOutcome, EntryKind, FenceInstall, GiftOrder, GrantOutcome,
    SagaRecord, SettleOutcome, Totals, VoidOutcome, VoidReason,
};
use crate::{Result, StorageError};

/// The keyspace used when the URL names none.
pub const DEFAULT_KEYSPACE: &str = "chorus_ledger";

/// The Scylla engine.
#[derive(Clone)]
pub struct ScyllaLedger {}

fn todo_err() -> StorageError {
    StorageError::Unavailable("scylla ledger not built yet".into())
}

impl ScyllaLedger {
    /// Connects.
    ///
    /// # Errors
    /// Always, for now.
    pub async fn connect(_nodes: &[String], _keyspace: &str) -> Result<Self> {
        Err(todo_err())
    }
    pub(super) async fn grant(&self, _: &UserId, _: i64, _: &str) -> Result<GrantOutcome> {
        Err(todo_err())
    }
    pub(super) async fn balance(&self, _: &UserId) -> Result<i64> {
        Err(todo_err())
    }
    pub(super) async fn earnings(&self, _: &UserId) -> Result<i64> {
        Err(todo_err())
    }
    pub(super) async fn install_fence(&self, _: &RoomId, _: u64, _: &str) -> Result<FenceInstall> {
        Err(todo_err())
    }
    pub(super) async fn begin(&self, _: &GiftOrder, _: u64) -> Result<BeginOutcome> {
        Err(todo_err())
    }
    pub(super) async fn debit(&self, _: &GiftOrder, _: u64) -> Result<DebitOutcome> {
        Err(todo_err())
    }
    pub(super) async fn settle(&self, _: &GiftOrder, _: u64) -> Result<SettleOutcome> {
        Err(todo_err())
    }
    pub(super) async fn void(&self, _: &GiftOrder, _: u64, _: VoidReason) -> Result<VoidOutcome> {
        Err(todo_err())
    }
    pub(super) async fn touch(&self, _: &GiftOrder, _: u64) -> Result<Option<SagaRecord>> {
        Err(todo_err())
    }
    pub(super) async fn saga(&self, _: Uuid) -> Result<Option<SagaRecord>> {
        Err(todo_err())
    }
    pub(super) async fn wallet_entry(&self, _: &UserId, _: Uuid) -> Result<Option<EntryKind>> {
        Err(todo_err())
    }
    pub(super) async fn pending_sagas(&self, _: &RoomId, _: i64) -> Result<Vec<SagaRecord>> {
        Err(todo_err())
    }
    pub(super) async fn leaderboard(
        &self,
        _: &RoomId,
        _: Board,
        _: i64,
        _: usize,
    ) -> Result<Vec<(UserId, i64)>> {
        Err(todo_err())
    }
    pub(super) async fn audit_totals(&self) -> Result<Totals> {
        Err(todo_err())
    }
}
