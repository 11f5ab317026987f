//! Where a shard sends a gateway's replies and events: a bounded queue (a cluster link's
//! writer), or, in one process with its gateway (standalone), the gateway itself, called on
//! the room's own task. The direct form saves a delivery one task hand-off (room actor →
//! the gateway's link reader → the members' sockets becomes room actor → the sockets): on a
//! node given one core, each hand-off waits for the core again.

use std::sync::Arc;

use protocol::link::ToGateway;
use tokio::sync::mpsc;

/// A gateway that takes a message at once, on the caller's task. It must not block or wait:
/// it runs inside a room actor.
pub type DirectGateway = Arc<dyn Fn(ToGateway) + Send + Sync>;

/// One gateway's link, as a shard holds it.
#[derive(Clone)]
pub enum GatewayLink {
    /// A bounded queue; a full queue makes the room wait (Block policy: its reader never
    /// waits on rooms).
    Queue(mpsc::Sender<ToGateway>),
    /// An in-process gateway, called directly.
    Direct(DirectGateway),
}

impl std::fmt::Debug for GatewayLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Queue(_) => "GatewayLink::Queue",
            Self::Direct(_) => "GatewayLink::Direct",
        })
    }
}

/// The gateway is gone (its queue closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone;

impl GatewayLink {
    /// Hands `msg` to the gateway.
    ///
    /// # Errors
    /// [`Gone`] when the queue closed.
    pub async fn send(&self, msg: ToGateway) -> Result<(), Gone> {
        match self {
            Self::Queue(tx) => tx.send(msg).await.map_err(|_| Gone),
            Self::Direct(gw) => {
                gw(msg);
                Ok(())
            }
        }
    }

    /// Whether the gateway is gone.
    pub fn is_closed(&self) -> bool {
        match self {
            Self::Queue(tx) => tx.is_closed(),
            Self::Direct(_) => false,
        }
    }

    /// Whether this is the queue `tx` sends into.
    pub fn is_queue(&self, tx: &mpsc::Sender<ToGateway>) -> bool {
        matches!(self, Self::Queue(q) if q.same_channel(tx))
    }
}

impl From<mpsc::Sender<ToGateway>> for GatewayLink {
    fn from(tx: mpsc::Sender<ToGateway>) -> Self {
        Self::Queue(tx)
    }
}
