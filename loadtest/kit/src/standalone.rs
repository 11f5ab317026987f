//! A standalone `chorus` node process started for a test: its addresses, its secrets, and
//! shorthands to connect clients and call its admin API. Killed on drop.

use std::io;
use std::net::SocketAddr;
use std::path::Path;

use crate::admin::{self, AdminResponse};
use crate::client::{self, Client};
use crate::node::Node;

/// A running `chorus standalone` process on ports the OS picked (see [`Node::spawn_standalone`]).
#[derive(Debug)]
pub struct Server {
    /// The process (kill, pause, wait for its exit, read its log).
    pub node: Node,
    /// Its WebSocket address.
    pub ws: SocketAddr,
    /// Its admin address.
    pub admin: SocketAddr,
    secret: Vec<u8>,
    admin_token: String,
}

impl Server {
    /// Starts `chorus standalone` with its data in `data_dir`, checking client tokens signed
    /// with `secret` and admin calls bearing `admin_token`, with `args` and `env` added, and
    /// waits until it serves.
    ///
    /// # Errors
    /// When the binary cannot be started or does not get ready in time.
    pub async fn start(
        data_dir: &Path,
        secret: &str,
        admin_token: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> io::Result<Self> {
        let mut all_env = vec![
            ("CHORUS_JWT_SECRET", secret),
            ("CHORUS_ADMIN_TOKEN", admin_token),
        ];
        all_env.extend_from_slice(env);
        let (node, ws, admin) = Node::spawn_standalone(data_dir, args, all_env).await?;
        Ok(Self {
            node,
            ws,
            admin,
            secret: secret.as_bytes().to_vec(),
            admin_token: admin_token.to_owned(),
        })
    }

    /// The WebSocket URL clients connect to.
    pub fn url(&self) -> String {
        format!("ws://{}/ws", self.ws)
    }

    /// A token for `user` this node accepts ([`client::token`]).
    ///
    /// # Errors
    /// Encoding failed.
    pub fn token(&self, user: &str) -> Result<String, jsonwebtoken::errors::Error> {
        client::token(&self.secret, user)
    }

    /// Connects `user` with a fresh token.
    ///
    /// # Errors
    /// Token or connection failures.
    pub async fn connect(&self, user: &str) -> anyhow::Result<Client> {
        let token = self.token(user)?;
        Ok(client::connect(&self.url(), Some(&token)).await?)
    }

    /// The admin token this node requires.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// An admin call with the node's admin token.
    ///
    /// # Errors
    /// Connection or protocol failures.
    pub async fn admin_call(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<AdminResponse> {
        admin::call(self.admin, method, path, Some(&self.admin_token), body).await
    }

    /// A metric sample of the node ([`admin::metric`]).
    ///
    /// # Errors
    /// Connection or protocol failures.
    pub async fn metric(&self, name_and_labels: &str) -> anyhow::Result<f64> {
        admin::metric(self.admin, name_and_labels).await
    }
}
