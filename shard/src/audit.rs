//! Audit lines for offline checkers (the chaos suite, `chorus-loadtest chaos`): one `info`
//! line on the `chorus::audit` target per ownership step of a room and per saga recovery,
//! with `key=value` fields whose values hold no spaces. Rare events only (a room's start and
//! stop, a recovered saga): nothing per command.
//!
//! - `serve room=R fence=F owner=O`: the runtime of R starts serving with fence F, after the
//!   fence is installed in the ledger and the snapshot store.
//! - `stop room=R fence=F owner=O why=W`: that runtime stopped.
//! - `recover room=R gift=G fence=F owner=O outcome=settled|voided`: a saga recovery wrote.

use protocol::RoomId;
use tracing::info;
use uuid::Uuid;

/// The tracing target of audit lines.
pub(crate) const TARGET: &str = "chorus::audit";

pub(crate) fn serve(room: &RoomId, fence: u64, owner: &str) {
    info!(target: TARGET, %room, fence, owner, "serve");
}

pub(crate) fn stop(room: &RoomId, fence: u64, owner: &str, why: &str) {
    info!(target: TARGET, %room, fence, owner, why, "stop");
}

pub(crate) fn recover(room: &RoomId, gift: Uuid, fence: u64, owner: &str, outcome: &str) {
    info!(target: TARGET, %room, %gift, fence, owner, outcome, "recover");
}
