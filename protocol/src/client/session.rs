//! `hello` (first frame on open) and `ping`.

use serde::{Deserialize, Serialize};

/// The first frame the server sends on a new connection (`ev:"hello"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// This connection's session id.
    pub session: String,
    /// How often the server pings; a connection silent for two intervals is closed.
    pub heartbeat_ms: u64,
    /// `chorus/<version>`.
    pub server: String,
    /// `true` when the connection asked to acknowledge its direct messages (`?im_ack=1`,
    /// PROTOCOL.md section 13.7); left out otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub im_ack: bool,
}

/// The `ok` of `ping`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pong {
    /// Server time in milliseconds since the Unix epoch.
    pub t: u64,
}
