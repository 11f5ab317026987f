//! A TCP fault proxy for tests: listens on a free loopback port, forwards every connection to
//! a target, and injects network faults that the test (or the chaos driver) switches at run
//! time: delay, dropped connections, a blackhole and a half-open link.
//!
//! It stands between two real processes (a shard and Redis, a gateway and a shard), so the
//! fault hits the real client code: its time-outs, reconnects and retries. Like TCP itself it
//! never loses, reorders or alters bytes inside a connection: a blackhole holds them (the
//! peers see silence, then either the held bytes arrive late when the link heals, or their own
//! time-outs close the connection), and a drop closes the whole connection.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long the proxy waits to connect to its target before it drops the client's connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes read per step: one Redis reply or link frame fits most of the time.
const CHUNK: usize = 16 * 1024;

/// What the proxy does to the traffic it carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything at once.
    #[default]
    None,
    /// Hold every chunk this long before forwarding it (both directions, order kept).
    Delay(Duration),
    /// Accept connections and keep them open, but forward nothing either way until healed
    /// (the bytes wait, as in a partition where TCP retransmits): a peer that went silent
    /// without a reset, so only time-outs notice.
    Blackhole,
    /// Forward what the client sends, hold what the target answers until healed: the link
    /// looks alive to the target, and the client's requests go unanswered.
    HalfOpen,
    /// Close every connection at once and every new one as it comes (a "connection refused"
    /// that still completes the TCP handshake).
    Refuse,
}

/// Counters of a proxy, for tests and reports.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Bytes forwarded (both directions).
    pub forwarded: AtomicU64,
    /// Chunks held back by a blackhole or a half-open link (forwarded on heal).
    pub held: AtomicU64,
}

/// A running fault proxy; its accept loop and connections end on drop.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    target: watch::Sender<SocketAddr>,
    fault: watch::Sender<Fault>,
    /// Bumped by [`FaultProxy::drop_connections`]: every connection of an older generation ends.
    generation: watch::Sender<u64>,
    stats: Arc<ProxyStats>,
    accept: JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Connections watch the generation: a closed channel ends them too.
        self.generation.send_modify(|g| *g += 1);
    }
}

impl FaultProxy {
    /// Starts a proxy on a free 127.0.0.1 port forwarding to `target`, with no fault.
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub async fn start(target: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let (fault, fault_rx) = watch::channel(Fault::None);
        let (generation, gen_rx) = watch::channel(0u64);
        let (target, target_rx) = watch::channel(target);
        let stats = Arc::new(ProxyStats::default());
        let accept = tokio::spawn(accept_loop(
            listener,
            target_rx,
            fault_rx,
            gen_rx,
            stats.clone(),
        ));
        Ok(Self {
            addr,
            target,
            fault,
            generation,
            stats,
            accept,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the proxy forwards to.
    pub fn target(&self) -> SocketAddr {
        *self.target.borrow()
    }

    /// Forwards new connections to `target` from now on (a restarted process on a port it
    /// picked itself); open connections keep their peer.
    pub fn retarget(&self, target: SocketAddr) {
        self.target.send_replace(target);
    }

    /// A `redis://` URL through the proxy (when the target is a Redis server).
    pub fn redis_url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// The fault now in force.
    pub fn fault(&self) -> Fault {
        *self.fault.borrow()
    }

    /// Switches the fault for every connection, open and new. [`Fault::Refuse`] also closes
    /// the open ones.
    pub fn set_fault(&self, fault: Fault) {
        self.fault.send_replace(fault);
        if fault == Fault::Refuse {
            self.drop_connections();
        }
    }

    /// Heals the link: [`Fault::None`].
    pub fn heal(&self) {
        self.set_fault(Fault::None);
    }

    /// Closes every open connection now (both sides see the close); new ones are accepted as
    /// the current fault says.
    pub fn drop_connections(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    /// The proxy's counters.
    pub fn stats(&self) -> &ProxyStats {
        &self.stats
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: watch::Receiver<SocketAddr>,
    fault: watch::Receiver<Fault>,
    generation: watch::Receiver<u64>,
    stats: Arc<ProxyStats>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of descriptors and the like: back off a little rather than spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        stats.accepted.fetch_add(1, Ordering::Relaxed);
        if *fault.borrow() == Fault::Refuse {
            drop(client);
            continue;
        }
        tokio::spawn(carry(
            client,
            *target.borrow(),
            fault.clone(),
            generation.clone(),
            stats.clone(),
        ));
    }
}

/// Carries one connection until either side closes or the generation moves on.
async fn carry(
    client: TcpStream,
    target: SocketAddr,
    fault: watch::Receiver<Fault>,
    mut generation: watch::Receiver<u64>,
    stats: Arc<ProxyStats>,
) {
    let born = *generation.borrow_and_update();
    let server = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
        Ok(Ok(s)) => s,
        _ => return,
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pump(cr, sw, fault.clone(), Direction::Up, stats.clone());
    let down = pump(sr, cw, fault, Direction::Down, stats);
    tokio::select! {
        () = up => {}
        () = down => {}
        () = async {
            while generation.changed().await.is_ok() {
                if *generation.borrow() != born {
                    return;
                }
            }
        } => {}
    }
    // Both halves drop here: the client and the target see the connection close.
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Client to target.
    Up,
    /// Target to client.
    Down,
}

/// Copies `from` to `to` chunk by chunk, applying the fault in force as each chunk arrives:
/// a held chunk waits (and nothing more is read) until the fault changes.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut fault: watch::Receiver<Fault>,
    dir: Direction,
    stats: Arc<ProxyStats>,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut counted = false;
        let now = loop {
            let now = *fault.borrow_and_update();
            let hold = match now {
                Fault::Blackhole => true,
                Fault::HalfOpen => dir == Direction::Down,
                // The connection is being closed.
                Fault::Refuse => return,
                Fault::None | Fault::Delay(_) => false,
            };
            if !hold {
                break now;
            }
            if !counted {
                stats.held.fetch_add(1, Ordering::Relaxed);
                counted = true;
            }
            if fault.changed().await.is_err() {
                return;
            }
        };
        if let Fault::Delay(d) = now {
            tokio::time::sleep(d).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        stats.forwarded.fetch_add(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;
    use tokio::time::Instant;

    /// An echo server on a free port; it runs until the test ends.
    async fn echo() -> SocketAddr {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    /// Sends `msg` and reads the echo, within `wait`.
    async fn round_trip(s: &mut TcpStream, msg: &[u8], wait: Duration) -> io::Result<Vec<u8>> {
        s.write_all(msg).await?;
        let mut got = vec![0u8; msg.len()];
        tokio::time::timeout(wait, s.read_exact(&mut got))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no echo"))??;
        Ok(got)
    }

    /// Whether the peer closed `s` within `wait` (a read answers 0 or an error).
    async fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
        let mut b = [0u8; 16];
        matches!(
            tokio::time::timeout(wait, s.read(&mut b)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    const WAIT: Duration = Duration::from_secs(5);
    const QUIET: Duration = Duration::from_millis(300);

    #[tokio::test]
    async fn forwards_both_ways_without_a_fault() {
        let p = FaultProxy::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(round_trip(&mut s, b"hello", WAIT).await.unwrap(), b"hello");
        assert_eq!(p.stats().accepted.load(Ordering::Relaxed), 1);
        assert_eq!(p.stats().forwarded.load(Ordering::Relaxed), 10);
    }

    #[tokio::test]
    async fn delay_holds_each_chunk_and_keeps_order() {
        let p = FaultProxy::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        p.set_fault(Fault::Delay(Duration::from_millis(200)));
        let t = Instant::now();
        assert_eq!(round_trip(&mut s, b"abc", WAIT).await.unwrap(), b"abc");
        // Up and down: two delays at least.
        assert!(
            t.elapsed() >= Duration::from_millis(400),
            "{:?}",
            t.elapsed()
        );
        p.heal();
        assert_eq!(round_trip(&mut s, b"xyz", WAIT).await.unwrap(), b"xyz");
    }

    #[tokio::test]
    async fn blackhole_keeps_the_connection_and_answers_nothing_until_healed() {
        let p = FaultProxy::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        p.set_fault(Fault::Blackhole);
        s.write_all(b"held").await.unwrap();
        let mut got = [0u8; 4];
        let silent = tokio::time::timeout(QUIET, s.read_exact(&mut got)).await;
        assert!(silent.is_err(), "a blackhole answers nothing");
        assert!(p.stats().held.load(Ordering::Relaxed) >= 1);
        // New connections are accepted and just as silent.
        let mut s2 = TcpStream::connect(p.addr()).await.unwrap();
        let mut x = [0u8; 1];
        s2.write_all(b"x").await.unwrap();
        assert!(
            tokio::time::timeout(QUIET, s2.read_exact(&mut x))
                .await
                .is_err()
        );
        p.heal();
        // The held bytes arrive late, in order, and the link works again.
        tokio::time::timeout(WAIT, s.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"held");
        assert_eq!(round_trip(&mut s, b"back", WAIT).await.unwrap(), b"back");
    }

    #[tokio::test]
    async fn half_open_forwards_requests_and_drops_answers() {
        // A target that records what it received.
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let target = l.local_addr().unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(8);
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 64];
            while let Ok(n) = s.read(&mut buf).await {
                if n == 0 {
                    return;
                }
                let _ = tx.send(buf[..n].to_vec()).await;
                let _ = s.write_all(&buf[..n]).await;
            }
        });
        let p = FaultProxy::start(target).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        p.set_fault(Fault::HalfOpen);
        s.write_all(b"ping").await.unwrap();
        let got = tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, b"ping", "the request reached the target");
        let mut answer = [0u8; 4];
        let silent = tokio::time::timeout(QUIET, s.read_exact(&mut answer)).await;
        assert!(silent.is_err(), "the answer is held");
        p.heal();
        tokio::time::timeout(WAIT, s.read_exact(&mut answer))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&answer, b"ping");
    }

    #[tokio::test]
    async fn dropping_closes_open_connections_and_refuse_closes_new_ones() {
        let p = FaultProxy::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(round_trip(&mut s, b"1", WAIT).await.unwrap(), b"1");
        p.drop_connections();
        assert!(closed_within(&mut s, WAIT).await);
        // New connections still work after a drop.
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(round_trip(&mut s, b"2", WAIT).await.unwrap(), b"2");
        p.set_fault(Fault::Refuse);
        assert!(closed_within(&mut s, WAIT).await);
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert!(closed_within(&mut s, WAIT).await);
        p.heal();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(round_trip(&mut s, b"3", WAIT).await.unwrap(), b"3");
    }

    #[tokio::test]
    async fn dropping_the_proxy_closes_its_connections() {
        let p = FaultProxy::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(round_trip(&mut s, b"1", WAIT).await.unwrap(), b"1");
        drop(p);
        assert!(closed_within(&mut s, WAIT).await);
    }
}
