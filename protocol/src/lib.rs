//! The Chorus contract: what every node and client shares.
//!
//! No tokio and no I/O here: only types, codecs and pure functions.
//!
//! # Layout
//! - [`ids`]: identifier newtypes (`UserId`, `RoomId`, `NodeId`) and number aliases.
//! - [`error`]: `ErrorCode` (UPPER_SNAKE on the wire) and close codes.
//! - [`client`]: client frames: request decoding, reply and event encoding, one file per
//!   message family under `client/`.
//! - [`link`]: gateway <-> shard messages.
//! - [`ring`]: placement of rooms on shards, identical on every node.
//! - [`text`]: which characters user text may hold.
#![deny(clippy::unwrap_used)]

pub mod client;
pub mod error;
mod fuzz;
pub mod ids;
pub mod link;
pub mod ring;
pub mod text;

pub use error::ErrorCode;
pub use ids::{Epoch, FencingToken, NodeId, RoomId, Seq, SessionId, UserId};
