//! Chorus gateway: terminates WebSockets, authenticates, routes room commands to the shard
//! that owns the room, and fans room events out to its sockets. Hosts the `chorus` binary.
//!
//! # Layout
//! - [`config`]: limits and timings with their reasons.
//! - [`auth`]: HS256 tokens (checked at the upgrade, minted by `chorus token`).
//! - `server`: the accept loop and the upgrade check (`admission`: new connections per second);
//!   `session`: one task per socket; `outbox`: the bounded per-socket queue (slow consumer ->
//!   4000); `wire`: batched socket writes; `sock`: the TCP stream under tungstenite, whose
//!   writes a read can hold off while a batch of ours is under way.
//! - `shared`: what the gateway's tasks share (`Core`): commands waiting for replies with their
//!   routing retries, the heartbeat and the drain.
//! - `hub`: local sessions, room fan-out, and what shards send back.
//! - [`router`]: room -> shard; `link`: the link client to one shard.
//! - [`money`]: `wallet.balance`, `gift.list` and `rank.get`, answered from the ledger.
//! - `app_rank`: `rank.get` at app scope (the app-wide boards), answered from the ledger.
//! - `social`: the user registry, the gateway bus, direct messages and one room per user
//!   across gateways.
//! - `users`: profiles, follows and `auth.refresh`, answered from the user stores.
//! - `wallet`: `wallet.history` (a page of the caller's statement), answered from the ledger.
//! - [`node`]: the roles of the binary (gateway, shard with its admin port), each started by
//!   one function; [`standalone`] composes gateway and shard in one process.
//! - `admin`: the admin HTTP port (`/healthz`, `/readyz`, `/metrics`, `/admin/*`).
//! - [`signal`]: SIGTERM/SIGINT -> cancel the root token.
//! - `web`: the demo room (client port) and the operator dashboard (admin port), built into
//!   the binary.

mod admin;
mod admission;
mod app_rank;
pub mod auth;
pub mod cli;
pub mod config;
mod connect;
mod directory;
pub mod guards;
mod hub;
mod link;
pub mod metrics;
pub mod money;
pub mod node;
mod outbox;
mod pk;
pub mod router;
mod server;
mod session;
mod shared;
pub mod signal;
mod social;
mod sock;
pub mod standalone;
mod standing;
mod suspension;
mod users;
mod wallet;
mod web;
mod wire;

pub use admin::prometheus;
pub use config::GatewayConfig;
