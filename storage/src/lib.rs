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
//! - [`ledger`]: the money ledger contract and its SQLite and Scylla engines.

pub mod directory;
pub mod error;
pub mod lease;
pub mod ledger;
pub mod membership;
pub mod redis;
pub mod robots;
pub mod snapshot;

pub use error::{Result, StorageError};
