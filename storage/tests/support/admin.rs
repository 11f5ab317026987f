//! A plain Redis connection of the test's own, for admin commands (INFO, SCRIPT FLUSH, CONFIG
//! RESETSTAT) and for looking at what the stores wrote; shared by `lease.rs` and `snapshot.rs`.

use kit::redis::RedisServer;

/// A connection to `server`, apart from the stores'.
pub(crate) async fn admin(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}
