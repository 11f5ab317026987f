//! The in-process standalone server the gateway's end-to-end tests start: `gateway::standalone`
//! on loopback port 0 with its data in a temp dir, and kit clients with test tokens. Each test
//! file adds its own starters (`impl Server` in the file) that choose the configuration.

use std::net::SocketAddr;
use std::time::Duration;

use gateway::GatewayConfig;
use gateway::standalone::{self, Running, StandaloneConfig};
use kit::client::{self, Client};
use shard::ShardConfig;

/// A standalone server running in the test process; stopped by [`Server::stop`].
pub(crate) struct Server {
    /// The running server (`None` once stopped).
    pub(crate) running: Option<Running>,
    /// Its WebSocket URL.
    pub(crate) url: String,
    /// Its admin address.
    pub(crate) admin: SocketAddr,
    /// Its data directory, removed on drop.
    pub(crate) dir: tempfile::TempDir,
    secret: Vec<u8>,
    admin_token: String,
    config: (GatewayConfig, ShardConfig),
}

impl Server {
    /// Starts a server with `gateway` and `shard`, checking client tokens signed with
    /// `secret` and admin calls bearing `admin_token`.
    pub(crate) async fn launch(
        secret: &[u8],
        admin_token: &str,
        gateway: GatewayConfig,
        shard: ShardConfig,
    ) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        Self::start_in(dir, secret, admin_token, (gateway, shard)).await
    }

    async fn start_in(
        dir: tempfile::TempDir,
        secret: &[u8],
        admin_token: &str,
        config: (GatewayConfig, ShardConfig),
    ) -> Server {
        let running = standalone::start(StandaloneConfig {
            ws_addr: "127.0.0.1:0".parse().expect("loopback address"),
            admin_addr: "127.0.0.1:0".parse().expect("loopback address"),
            data_dir: dir.path().to_owned(),
            jwt_secret: secret.to_vec(),
            admin_token: Some(admin_token.into()),
            gateway: config.0.clone(),
            shard: config.1.clone(),
            ledger: String::new(),
        })
        .await
        .expect("standalone server starts");
        Server {
            url: format!("ws://{}/ws", running.ws_addr),
            admin: running.admin_addr,
            running: Some(running),
            dir,
            secret: secret.to_vec(),
            admin_token: admin_token.to_owned(),
            config,
        }
    }

    /// Stops the server and starts it again on the same data directory (new ports).
    pub(crate) async fn relaunch(mut self) -> Server {
        if let Some(r) = self.running.take() {
            r.stop(Duration::from_secs(5)).await;
        }
        Self::start_in(self.dir, &self.secret, &self.admin_token, self.config).await
    }

    /// The admin API's view of `room` (`GET /admin/rooms/{room}`).
    async fn room_view(&self, room: &str) -> kit::admin::AdminResponse {
        kit::admin::get(
            self.admin,
            &format!("/admin/rooms/{room}"),
            Some(&self.admin_token),
        )
        .await
        .expect("admin call")
    }

    /// The fence of `room`'s running runtime (the admin API's room view), if it runs here.
    pub(crate) async fn room_fence(&self, room: &str) -> Option<u64> {
        let r = self.room_view(room).await;
        (r.status == 200).then(|| r.json()["fence"].as_u64().expect("a fence"))
    }

    /// Waits (at most `within`) until `room` runs nowhere: the admin API's room view answers
    /// 404 and no runtime of it is left on the node. Fails the test otherwise.
    pub(crate) async fn wait_unloaded(&self, room: &str, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let r = self.room_view(room).await;
            if r.status == 404 && r.json()["running_here"] != true {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{room} never unloaded: {} {}",
                r.status,
                r.body
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A token for `user` this server accepts ([`kit::token`]).
    pub(crate) fn token(&self, user: &str) -> String {
        kit::token(&self.secret, user).expect("token encodes")
    }

    /// Connects `user` with a fresh token.
    pub(crate) async fn connect(&self, user: &str) -> Client {
        let token = self.token(user);
        client::connect(&self.url, Some(&token))
            .await
            .expect("client connects")
    }

    /// Stops the server, giving its connections 5 s to drain.
    pub(crate) async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.stop(Duration::from_secs(5)).await;
        }
    }
}
