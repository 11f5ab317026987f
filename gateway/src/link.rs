//! The link client: one multiplexed TCP connection from this gateway to one shard, reconnected
//! with backoff. Commands go out through a bounded queue (Reject policy: a full or down link
//! makes the router retry elsewhere or answer `UNAVAILABLE`); everything the shard sends comes
//! back into the hub.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use protocol::NodeId;
use protocol::link::{self, Command, LINK_VERSION, LinkFrame, ToGateway};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

/// Commands queued to one shard before new ones are refused.
pub(crate) const LINK_OUTBOX: usize = 16 * 1024;
/// First reconnect delay; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// Longest reconnect delay.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Connect time-out.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// What a link needs from its gateway: who it is, where the shard's messages go, and what to
/// do when the link goes down. The gateway's shared state implements it.
pub(crate) trait LinkOwner: Send + Sync + 'static {
    /// The gateway's node id, sent in the hello.
    fn node(&self) -> &NodeId;
    /// The cluster secret the hello proves, if any.
    fn link_secret(&self) -> Option<&shard::link::LinkSecret>;
    /// Stops the link when cancelled (a gateway: once its drain is over).
    fn link_stop(&self) -> &CancellationToken;
    /// A message from shard `from`.
    fn on_shard_message(&self, from: &NodeId, msg: ToGateway);
    /// The link to shard `shard` went down: its sessions must rejoin.
    fn on_link_down(&self, shard: &NodeId);
    /// Commands were queued to shard `shard` after its link went down (a sender that saw it
    /// up an instant before) and are dropped unsent: their requests must be answered.
    fn on_stranded(&self, shard: &NodeId);
}

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

/// Starts the link to shard `node` at `addr` on `tracker`; it reconnects until the owner's
/// shutdown.
pub(crate) fn start(
    owner: Arc<dyn LinkOwner>,
    tracker: &TaskTracker,
    node: NodeId,
    addr: String,
) -> Arc<ShardLink> {
    let (tx, rx) = mpsc::channel(LINK_OUTBOX);
    let link = Arc::new(ShardLink {
        node: node.clone(),
        tx,
        up: AtomicBool::new(false),
    });
    tracker.spawn(run(owner, link.clone(), addr, rx));
    link
}

async fn run(
    owner: Arc<dyn LinkOwner>,
    link: Arc<ShardLink>,
    addr: String,
    mut rx: mpsc::Receiver<Command>,
) {
    let mut backoff = MIN_BACKOFF;
    let shutdown = owner.link_stop().clone();
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
                serve(owner.as_ref(), &link, stream, &mut rx).await;
                link.up.store(false, Ordering::Relaxed);
                // Messages still queued were for the old connection: the owner answers their
                // pending requests (`on_link_down`); drop them so nothing stale goes out later.
                while rx.try_recv().is_ok() {}
                owner.on_link_down(&link.node);
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
        // A command queued after the drain above (its sender saw the link up an instant
        // before) would wait for a connection that may never come: drop it and answer its
        // request now, within one backoff, not at the end of the retry budget.
        if !rx.is_empty() {
            while rx.try_recv().is_ok() {}
            owner.on_stranded(&link.node);
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn serve(
    owner: &dyn LinkOwner,
    link: &Arc<ShardLink>,
    stream: TcpStream,
    rx: &mut mpsc::Receiver<Command>,
) {
    let mut framed = Framed::new(stream, shard::link::codec());
    let hello = LinkFrame::Hello(shard::link::hello(
        LINK_VERSION,
        owner.node(),
        owner.link_secret(),
    ));
    if framed.send(link::encode(&hello)).await.is_err() {
        return;
    }
    link.up.store(true, Ordering::Relaxed);
    let (mut sink, mut stream) = framed.split();
    // Polled in place: a fresh `cancelled()` per frame would register with (and leave) the
    // token's waiter list every time.
    let stopping = owner.link_stop().cancelled();
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
                    Ok(LinkFrame::ToGateway(msg)) => owner.on_shard_message(&link.node, msg),
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use protocol::link::RoomCmd;
    use protocol::{RoomId, UserId};

    use super::*;

    /// Records what the link tells its owner.
    struct Owner {
        node: NodeId,
        stop: CancellationToken,
        stranded: Mutex<Vec<NodeId>>,
        stranded_now: tokio::sync::Notify,
    }

    impl LinkOwner for Owner {
        fn node(&self) -> &NodeId {
            &self.node
        }
        fn link_secret(&self) -> Option<&shard::link::LinkSecret> {
            None
        }
        fn link_stop(&self) -> &CancellationToken {
            &self.stop
        }
        fn on_shard_message(&self, _: &NodeId, _: ToGateway) {}
        fn on_link_down(&self, _: &NodeId) {}
        fn on_stranded(&self, shard: &NodeId) {
            self.stranded
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(shard.clone());
            self.stranded_now.notify_one();
        }
    }

    fn command() -> Command {
        Command {
            req: 1,
            gateway: NodeId::from("g1"),
            session: 1,
            user: UserId::from("ann"),
            client_id: Some(7),
            room: RoomId::from("r1"),
            cmd: RoomCmd::Leave(protocol::link::LeaveReason::Switched),
            profile: None,
            standing: None,
        }
    }

    /// A command that reached a down link's queue (its sender saw the link up an instant
    /// before it went down) is dropped and its owner told within a backoff, though the shard
    /// never comes back.
    #[tokio::test]
    async fn a_command_queued_to_a_down_link_is_dropped_and_reported() {
        // A port nothing listens on: every connect is refused.
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let owner = Arc::new(Owner {
            node: NodeId::from("g1"),
            stop: CancellationToken::new(),
            stranded: Mutex::default(),
            stranded_now: tokio::sync::Notify::new(),
        });
        let tracker = TaskTracker::new();
        let link = start(owner.clone(), &tracker, NodeId::from("s1"), addr);
        assert!(!link.send(command()), "a down link refuses a command");
        // The race: queued past the `up` check.
        link.tx.try_send(command()).unwrap();
        timeout(Duration::from_secs(10), owner.stranded_now.notified())
            .await
            .expect("the stranded command is reported within a backoff");
        assert_eq!(*owner.stranded.lock().unwrap(), [NodeId::from("s1")]);
        assert_eq!(link.tx.capacity(), LINK_OUTBOX, "the queue is empty again");
        owner.stop.cancel();
        tracker.close();
        tracker.wait().await;
    }
}
