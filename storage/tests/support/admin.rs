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

/// `calls` of `cmdstat_<cmd>` in INFO commandstats (0 when the command never ran).
pub(crate) async fn command_calls(conn: &mut redis::aio::MultiplexedConnection, cmd: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let prefix = format!("cmdstat_{cmd}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}
