//! The link client: one multiplexed TCP connection from this gateway to one shard, reconnected
//! with backoff. Commands go out through a bounded queue (Reject policy: a full or down link
//! makes the router retry elsewhere or answer `UNAVAILABLE`); everything the shard sends comes
//! back into the hub.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use protocol::NodeId;
use protocol::link::{self, Command, LINK_VERSION, LinkFrame, LinkHello};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_util::codec::Framed;
use tracing::{info, warn};

use crate::Core;

/// Commands queued to one shard before new ones are refused.
pub(crate) const LINK_OUTBOX: usize = 16 * 1024;
/// First reconnect delay; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// Longest reconnect delay.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Connect time-out.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The sending side of one shard link.
#[derive(Debug)]
pub(crate) struct ShardLink {
    pub(crate) node: NodeId,
    tx: mpsc::Sender<Command>,
    up: AtomicBool,
}

impl ShardLink {
    /// Queues a message; false when the link is down or full (the caller retries).
    pub(crate) fn send(&self, msg: Command) -> bool {
        self.up.load(Ordering::Relaxed) && self.tx.try_send(msg).is_ok()
    }

    /// Whether the connection is up.
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }
}

/// Starts the link to shard `node` at `addr`; it reconnects until the gateway shuts down.
pub(crate) fn start(core: &Arc<Core>, node: NodeId, addr: String) -> Arc<ShardLink> {
    let (tx, rx) = mpsc::channel(LINK_OUTBOX);
    let link = Arc::new(ShardLink {
        node: node.clone(),
        tx,
        up: AtomicBool::new(false),
    });
    core.tracker
        .spawn(run(core.clone(), link.clone(), addr, rx));
    link
}

async fn run(core: Arc<Core>, link: Arc<ShardLink>, addr: String, mut rx: mpsc::Receiver<Command>) {
    let mut backoff = MIN_BACKOFF;
    let shutdown = core.shutdown.clone();
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        let stream = tokio::select! {
            () = shutdown.cancelled() => return,
            s = timeout(CONNECT_TIMEOUT, TcpStream::connect(&addr)) => s,
        };
        match stream {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                backoff = MIN_BACKOFF;
                info!(shard = %link.node, %addr, "Shard link up.");
                serve(&core, &link, stream, &mut rx).await;
                link.up.store(false, Ordering::Relaxed);
                // Messages still queued were for the old connection: their pending requests
                // are retried or time out; drop them so nothing stale goes out later.
                while rx.try_recv().is_ok() {}
                let evicted = core.hub.evict_where(|_, via| *via == link.node);
                warn!(shard = %link.node, evicted, "Shard link down.");
            }
            Ok(Err(e)) => {
                warn!(shard = %link.node, %addr, error = %e, "Shard link connect failed.")
            }
            Err(_) => warn!(shard = %link.node, %addr, "Shard link connect timed out."),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn serve(
    core: &Arc<Core>,
    link: &Arc<ShardLink>,
    stream: TcpStream,
    rx: &mut mpsc::Receiver<Command>,
) {
    let mut framed = Framed::new(stream, shard::link::codec());
    let hello = LinkFrame::Hello(LinkHello {
        v: LINK_VERSION,
        gateway: core.node.clone(),
    });
    if framed.send(link::encode(&hello)).await.is_err() {
        return;
    }
    link.up.store(true, Ordering::Relaxed);
    let (mut sink, mut stream) = framed.split();
    // Polled in place: a fresh `cancelled()` per frame would register with (and leave) the
    // token's waiter list every time.
    let stopping = core.shutdown.cancelled();
    tokio::pin!(stopping);
    loop {
        tokio::select! {
            () = &mut stopping => return,
            msg = rx.recv() => {
                let Some(first) = msg else { return };
                if shard::link::write_batch(&mut sink, rx, first, LinkFrame::Command).await.is_err() {
                    return;
                }
            }
            frame = stream.next() => {
                let body = match frame {
                    Some(Ok(b)) => b,
                    Some(Err(e)) => {
                        warn!(shard = %link.node, error = %e, "Shard link read failed.");
                        return;
                    }
                    None => return,
                };
                match link::decode(body.freeze()) {
                    Ok(LinkFrame::ToGateway(msg)) => core.on_shard_message(&link.node, msg),
                    Ok(_) => {
                        warn!(shard = %link.node, "Unexpected frame kind from a shard.");
                        return;
                    }
                    Err(e) => {
                        warn!(shard = %link.node, error = %e, "Bad frame from a shard.");
                        return;
                    }
                }
            }
        }
    }
}
