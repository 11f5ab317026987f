//! Chorus gateway: terminates WebSockets, authenticates, routes room commands to the shard
//! that owns the room, and fans room events out to its sockets. Hosts the `chorus` binary.
//!
//! # Layout
//! - [`config`]: limits and timings with their reasons.
//! - [`auth`]: HS256 tokens (checked at the upgrade, minted by `chorus token`).
//! - `server`: the accept loop and the upgrade check; `session`: one task per socket;
//!   `outbox`: the bounded per-socket queue (slow consumer -> 4000).
//! - `hub`: local sessions, room fan-out, and what shards send back.
//! - [`router`]: room -> shard.
//! - `admin`: the admin HTTP port.
//! - [`standalone`]: gateway + in-process shard + embedded storage in one process.
//! - [`signal`]: SIGTERM/SIGINT -> cancel the root token.

mod admin;
pub mod auth;
pub mod cli;
pub mod config;
mod hub;
pub mod metrics;
mod outbox;
pub mod router;
mod server;
mod session;
pub mod signal;
pub mod standalone;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::StatusCode;
use protocol::client::{self, Op};
use protocol::link::{Command, RoomCmd, ToGateway};
use protocol::{ErrorCode, NodeId, RoomId, SessionId, UserId};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use admin::prometheus;
pub use config::GatewayConfig;

use hub::{Hub, PendingLeave, text};

/// Everything a gateway's tasks share.
pub(crate) struct Core {
    pub(crate) node: NodeId,
    pub(crate) config: GatewayConfig,
    pub(crate) hub: Hub,
    pub(crate) router: router::Router,
    pub(crate) auth: auth::Authenticator,
    pub(crate) shutdown: CancellationToken,
    pub(crate) tracker: TaskTracker,
    next_session: AtomicU64,
    next_req: AtomicU64,
}

impl Core {
    pub(crate) fn new(
        node: NodeId,
        config: GatewayConfig,
        router: router::Router,
        auth: auth::Authenticator,
        shutdown: CancellationToken,
        tracker: TaskTracker,
    ) -> Self {
        Self {
            node,
            config,
            hub: Hub::default(),
            router,
            auth,
            shutdown,
            tracker,
            next_session: AtomicU64::new(1),
            next_req: AtomicU64::new(1),
        }
    }

    pub(crate) fn next_session(&self) -> SessionId {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends a room command on behalf of a session.
    pub(crate) fn send_command(
        &self,
        session: SessionId,
        user: &UserId,
        client_id: Option<u64>,
        room: RoomId,
        cmd: RoomCmd,
    ) {
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        self.router.send(Command {
            req,
            gateway: self.node.clone(),
            session,
            user: user.clone(),
            client_id,
            room,
            cmd,
        });
    }

    /// Sends the leaves the gateway makes on its own (switch, disconnect).
    pub(crate) fn send_leaves(&self, leaves: Vec<PendingLeave>) {
        for l in leaves {
            self.send_command(l.session, &l.user, None, l.room, RoomCmd::Leave(l.reason));
        }
    }

    /// Applies messages from one shard link until it closes.
    pub(crate) async fn link_reader(self: Arc<Self>, mut rx: mpsc::Receiver<ToGateway>) {
        loop {
            let msg = tokio::select! {
                () = self.shutdown.cancelled() => return,
                m = rx.recv() => m,
            };
            let Some(msg) = msg else { return };
            let leaves = self.hub.apply(msg);
            self.send_leaves(leaves);
        }
    }

    /// `wallet.balance` and `gift.list`, answered by the gateway itself.
    pub(crate) fn money_request(&self, session: SessionId, _user: &UserId, id: u64, op: Op) {
        let frame = client::encode_err(
            Some(id),
            ErrorCode::Unavailable,
            &format!("{} is not enabled on this node", op.name()),
        );
        if let Some(t) = text(frame) {
            self.hub.send_to(session, t);
        }
    }

    /// `POST /admin/wallets/{user}/grant`.
    pub(crate) async fn admin_grant(
        &self,
        _user: &str,
        _body: &Bytes,
    ) -> http::Response<http_body_util::Full<Bytes>> {
        admin::error(
            StatusCode::NOT_IMPLEMENTED,
            "wallets are not enabled on this node",
        )
    }
}
