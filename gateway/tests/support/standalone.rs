//! What the standalone test files share: the server's start-up variants, a bare WebSocket and
//! the error code of a reply.

use std::time::Duration;

use gateway::GatewayConfig;
use kit::client::ClientError;
use protocol::ErrorCode;
use shard::ShardConfig;

use super::server::Server;

/// A bare client WebSocket.
pub(crate) type RawWs =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub(crate) const SECRET: &[u8] = b"test-secret-for-standalone";
pub(crate) const WAIT: Duration = Duration::from_secs(5);

impl Server {
    pub(crate) async fn start() -> Server {
        Self::start_with(|_, _| {}).await
    }

    pub(crate) async fn start_with(
        tune: impl FnOnce(&mut GatewayConfig, &mut ShardConfig),
    ) -> Server {
        let mut gateway = GatewayConfig {
            drain_window: Duration::from_millis(100),
            ..GatewayConfig::default()
        };
        let mut shard = ShardConfig::default();
        tune(&mut gateway, &mut shard);
        Server::launch(SECRET, "admin-token", gateway, shard).await
    }

    /// A node for tests that write many requests at once: no heartbeat pings between the
    /// frames they read, and a rate limit they never reach.
    pub(crate) async fn for_bursts() -> Server {
        Server::start_with(|g, _| {
            g.heartbeat = Duration::from_secs(600);
            (g.rate_per_sec, g.rate_burst) = (1000, 1000);
        })
        .await
    }

    /// A bare WebSocket for `user`, for tests that control how requests share a write.
    pub(crate) async fn raw(&self, user: &str) -> RawWs {
        let t = self.token(user);
        let (ws, _) = tokio_tungstenite::connect_async(format!("{}?token={t}", self.url))
            .await
            .unwrap();
        ws
    }
}

pub(crate) fn code(e: ClientError) -> ErrorCode {
    e.code()
        .unwrap_or_else(|| panic!("expected an error reply, got {e:?}"))
}
