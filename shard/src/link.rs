//! The link server: accepts gateway connections (one multiplexed TCP connection per
//! gateway-shard pair), hands their commands to rooms, and writes replies and events back
//! through one bounded outbox per gateway.
//!
//! Framing: a 4-byte big-endian length, then a body encoded by [`protocol::link::encode`].
//! The first frame from a gateway is a [`LinkHello`] with the link version and its proof of the
//! cluster's secret ([`LinkSecret`], [`HelloCheck`]).

mod auth;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Sink, SinkExt, StreamExt};
use protocol::link::{self, LINK_VERSION, LinkFrame, LinkHello, MAX_LINK_FRAME_BYTES, ToGateway};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::Shard;
use crate::metrics as m;
pub use auth::{HELLO_WINDOW, HelloCheck, LinkSecret, MIN_SECRET_BYTES, Refusal, hello};

/// Messages queued to one gateway before rooms wait for it (Block policy: the gateway's link
/// reader never waits on rooms, so this only slows rooms while that gateway catches up).
pub const GATEWAY_OUTBOX: usize = 16 * 1024;
/// Frames written before one flush.
pub const WRITE_BATCH: usize = 256;
/// How long a new link may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// The length-delimited codec both ends of a link use.
pub fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(MAX_LINK_FRAME_BYTES)
        .new_codec()
}

/// Writes `first` and whatever else is queued behind it (up to [`WRITE_BATCH`] frames) into
/// `sink`, then flushes once: both ends of a link write this way. `Err` when the connection
/// failed.
pub async fn write_batch<T, S>(
    sink: &mut S,
    rx: &mut mpsc::Receiver<T>,
    first: T,
    frame: impl Fn(T) -> LinkFrame,
) -> Result<(), S::Error>
where
    S: Sink<Bytes> + Unpin,
{
    // Let the tasks woken together with the one that queued `first` queue theirs before the
    // write: rooms answered by one Redis read, sessions read in one poll. Without it the
    // runtime runs this task right after the first of them (its LIFO slot) and every frame
    // goes out in a write of its own, each waking the peer process again.
    if yield_before_write() {
        tokio::task::yield_now().await;
    }
    let mut next = Some(first);
    let mut n = 0;
    while let Some(msg) = next.take() {
        sink.feed(link::encode(&frame(msg))).await?;
        n += 1;
        if n < WRITE_BATCH {
            next = rx.try_recv().ok();
        }
    }
    sink.flush().await
}

/// Whether link writers yield once before writing (on unless `CHORUS_LINK_YIELD=0`, the
/// switch that lets one binary be measured both ways).
fn yield_before_write() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("CHORUS_LINK_YIELD").map_or(true, |v| v != "0"))
}

/// How long a listener waits after an accept error that is not about one connection.
const ACCEPT_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// After a failed `accept` on the `listener` named: an error about one connection (it was
/// reset or aborted before it was taken) is passed over; any other (out of file descriptors,
/// out of memory) would fail again at once, so the loop waits (`ACCEPT_PAUSE`) rather than spin
/// and flood the log (one warning per pause at most), and counts it.
pub async fn accept_failed(e: &std::io::Error, listener: &'static str) {
    use std::io::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
    ) {
        return;
    }
    ::metrics::counter!(crate::metrics::ACCEPT_ERRORS, "listener" => listener).increment(1);
    warn!(listener, error = %e, "Accept failed; pausing accepts.");
    tokio::time::sleep(ACCEPT_PAUSE).await;
}

/// Accepts gateway links until `shutdown`, each only once its hello passes `check`.
pub async fn serve(
    shard: Shard,
    listener: TcpListener,
    check: HelloCheck,
    shutdown: CancellationToken,
) {
    let check = Arc::new(check);
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                let s = shard.clone();
                let stop = shutdown.clone();
                let check = check.clone();
                shard.inner.tracker.spawn(async move {
                    if let Err(e) = connection(s, stream, &check, stop).await {
                        warn!(%peer, error = %e, "Gateway link ended with an error.");
                    }
                });
            }
            Err(e) => accept_failed(&e, "link").await,
        }
    }
}

/// Writes what gateway-bound frames `rx` brings into `sink` until `finished` is cancelled
/// (or the queue or the connection closes), then what was queued by then (a room's last
/// handoff notice, queued just before its node stops), then closes the sink.
async fn write_until<S>(
    sink: &mut S,
    rx: &mut mpsc::Receiver<ToGateway>,
    finished: &CancellationToken,
) where
    S: Sink<Bytes> + Unpin,
{
    // Polled in place, not made per message (see the reader below).
    let finished = finished.cancelled();
    tokio::pin!(finished);
    loop {
        let first = tokio::select! {
            () = &mut finished => break,
            m = rx.recv() => match m { Some(m) => m, None => break },
        };
        metrics::gauge!(m::LINK_QUEUE_DEPTH).set(rx.len() as f64);
        if write_batch(sink, rx, first, LinkFrame::ToGateway)
            .await
            .is_err()
        {
            return;
        }
    }
    rx.close();
    while let Some(first) = rx.recv().await {
        if write_batch(sink, rx, first, LinkFrame::ToGateway)
            .await
            .is_err()
        {
            return;
        }
    }
    let _ = sink.close().await;
}

async fn connection(
    shard: Shard,
    stream: TcpStream,
    check: &HelloCheck,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let mut framed = Framed::new(stream, codec());
    let hello = match timeout(HELLO_TIMEOUT, framed.next()).await {
        Ok(Some(Ok(body))) => link::decode(body.freeze()).map_err(|e| e.to_string())?,
        _ => return Err("no hello".into()),
    };
    let LinkFrame::Hello(hello) = hello else {
        return Err("first frame is not a hello".into());
    };
    if hello.v != LINK_VERSION {
        return Err(format!(
            "link version {}, this shard speaks {LINK_VERSION}",
            hello.v
        ));
    }
    if let Err(why) = check.check(&hello, auth::now_ms()) {
        metrics::counter!(m::LINKS_REFUSED, "reason" => why.as_str()).increment(1);
        return Err(format!(
            "hello of {:?} refused: {} proof of the cluster secret",
            hello.gateway,
            why.as_str()
        ));
    }
    let LinkHello { gateway, .. } = hello;
    info!(%gateway, "Gateway link up.");
    let (tx, mut rx) = mpsc::channel::<ToGateway>(GATEWAY_OUTBOX);
    shard.attach_gateway(gateway.clone(), tx.clone());
    let (mut sink, mut stream) = framed.split();
    let done = CancellationToken::new();
    let writer_done = done.clone();
    let gw = gateway.clone();
    let writer = shard.inner.tracker.spawn(async move {
        write_until(&mut sink, &mut rx, &writer_done).await;
        drop(gw);
    });
    // Polled in place: a fresh `cancelled()` per frame would register with (and leave) the
    // token's waiter list every time.
    let stopping = shutdown.cancelled();
    tokio::pin!(stopping);
    let result = loop {
        let next = tokio::select! {
            () = &mut stopping => break Ok(()),
            n = stream.next() => n,
        };
        match next {
            None => break Ok(()),
            Some(Err(e)) => break Err(e.to_string()),
            Some(Ok(body)) => match link::decode(body.freeze()) {
                Ok(LinkFrame::Command(cmd)) => shard.dispatch(cmd),
                Ok(_) => break Err("unexpected frame kind from a gateway".into()),
                Err(e) => break Err(e.to_string()),
            },
        }
    };
    done.cancel();
    let _ = writer.await;
    shard.gateway_gone(&gateway, &tx);
    info!(%gateway, "Gateway link down.");
    result
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use super::*;

    /// A sink that records how many frames each flush wrote.
    #[derive(Default)]
    struct Flushes {
        fed: usize,
        writes: Vec<usize>,
    }

    impl Sink<Bytes> for Flushes {
        type Error = std::convert::Infallible;

        fn poll_ready(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn start_send(mut self: Pin<&mut Self>, _: Bytes) -> Result<(), Self::Error> {
            self.fed += 1;
            Ok(())
        }

        fn poll_flush(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Result<(), Self::Error>> {
            if self.fed > 0 {
                let n = std::mem::take(&mut self.fed);
                self.writes.push(n);
            }
            Poll::Ready(Ok(()))
        }

        fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            self.poll_flush(cx)
        }
    }

    /// Frames queued before the link is told to finish (a node that stops once its last room
    /// queued its handoff notice) are still written: the writer stops only with an empty queue.
    #[tokio::test]
    async fn frames_queued_before_the_link_finishes_are_written() {
        // The writer picks between "finished" and "a frame" at random when both are ready:
        // enough rounds that a writer which may drop the queue does so.
        for _ in 0..32 {
            let (tx, mut rx) = mpsc::channel::<ToGateway>(16);
            for i in 0..3 {
                let moved = protocol::link::RoomEvent {
                    room: protocol::RoomId::from(format!("r{i}").as_str()),
                    audience: protocol::link::Audience::Moved {
                        sessions: Vec::new(),
                        to: protocol::NodeId::from("s2"),
                    },
                    position: Some((1, 1)),
                    frame: Bytes::new(),
                };
                tx.send(ToGateway::Event(moved)).await.unwrap();
            }
            let finished = CancellationToken::new();
            finished.cancel();
            let mut sink = Flushes::default();
            write_until(&mut sink, &mut rx, &finished).await;
            assert_eq!(sink.writes.iter().sum::<usize>(), 3, "{:?}", sink.writes);
        }
    }

    /// Frames queued by tasks woken together (rooms answered by one Redis read) go out in one
    /// write, though the first of them wakes the writer, which the runtime then runs next.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn frames_queued_by_tasks_woken_together_go_out_in_one_write() {
        const TASKS: usize = 4;
        let (tx, mut rx) = mpsc::channel::<usize>(16);
        let writer = tokio::spawn(async move {
            let mut sink = Flushes::default();
            let mut got = 0;
            while got < TASKS {
                let Some(first) = rx.recv().await else { break };
                let before: usize = sink.writes.iter().sum();
                let hello = |i: usize| {
                    LinkFrame::Hello(LinkHello {
                        v: u16::try_from(i).unwrap_or(0),
                        gateway: "g".into(),
                        auth: None,
                    })
                };
                write_batch(&mut sink, &mut rx, first, hello).await.unwrap();
                got += sink.writes.iter().sum::<usize>() - before;
            }
            sink.writes
        });
        let gate = Arc::new(tokio::sync::Barrier::new(TASKS + 1));
        let producers: Vec<_> = (0..TASKS)
            .map(|i| {
                let (tx, gate) = (tx.clone(), gate.clone());
                tokio::spawn(async move {
                    gate.wait().await;
                    tx.send(i).await.unwrap();
                })
            })
            .collect();
        // One wake-up releases every producer at once.
        tokio::spawn(async move { gate.wait().await })
            .await
            .unwrap();
        for p in producers {
            p.await.unwrap();
        }
        let writes = tokio::time::timeout(Duration::from_secs(10), writer)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(writes, [TASKS]);
    }
}
