//! Sends room commands to the shard that runs the room.
//!
//! Standalone mode has one in-process shard; the cluster routes by the ring over links.

use protocol::link::{Command, ToShard};
use shard::Shard;

/// Where room commands go.
#[derive(Clone)]
pub enum Router {
    /// The in-process shard of standalone mode.
    Local(Shard),
}

impl Router {
    /// Hands a command to the room's shard. Never waits.
    pub(crate) fn send(&self, cmd: Command) {
        match self {
            Self::Local(shard) => shard.dispatch(ToShard::Command(cmd)),
        }
    }
}
