//! Chorus storage: adapters to real engines. The only crate that names redis, scylla or sqlite.
//!
//! # Layout
//! - [`error`]: `StorageError` with a retry bit.
//! - [`lease`]: `LeaseStore` (claim / batched renew / release with fencing tokens), Redis and
//!   in-process engines.
//! - [`snapshot`]: durable room state, every write conditioned on the fencing token.
//! - [`membership`]: ring membership (live shards, weights, ring version) in Redis.
//! - [`directory`]: the room directory (`room.list`): summaries owners publish, directory pins.
//! - [`redis`]: connection setup and script loading.
//! - [`registry`]: user -> gateways and user -> room now, and the gateway bus.
//! - [`im`]: direct messages (kept until delivered, bounded per user) and block lists.
//! - [`pk_board`]: the scoreboard two rooms in a PK between them write and read.
//! - [`reports`]: the moderation queue (members' reports until a moderator resolves them).
//! - [`suspensions`]: accounts the platform shut out, until a time or until lifted.
//! - [`ledger`]: the money ledger contract and its SQLite, PostgreSQL and Scylla engines.
//! - [`profiles`], [`follows`]: users' stored profiles and who follows whom (Redis / SQLite).
//! - [`sqlite_cell`]: one SQLite connection shared by async callers without parking threads.
//! - [`key_set`]: which users may have rows in a standalone store (a connect skips the read
//!   for the others); also a bounded memo of users already handled.

pub mod directory;
pub mod error;
pub mod follows;
pub mod im;
pub mod key_set;
pub mod lease;
pub mod ledger;
pub mod membership;
pub mod pk_board;
pub mod profiles;
pub mod redis;
pub mod registry;
pub mod reports;
pub mod robots;
pub mod snapshot;
pub mod sqlite_cell;
pub mod suspensions;

pub use error::{Result, StorageError};
