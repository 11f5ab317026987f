//! The TCP stream under a socket's tungstenite, with a hold on tungstenite's writes.
//!
//! The session writes its data frames straight to the TCP stream (`wire.rs`), and keeps reading
//! the client's frames through tungstenite while such a write waits for the client. But a
//! tungstenite read also writes: it flushes the pong it queued for a client's ping (or the
//! answer to a close) before it reads on. Were those bytes to land in the middle of one of our
//! frames, the stream would be broken; so while a batch of ours is under way the session reads
//! with [`Sock::hold`] on, which turns tungstenite's writes away as "would block". tungstenite
//! keeps the pong queued and reads on, and the session flushes it once the batch is out.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A socket's TCP stream, as tungstenite sees it.
#[derive(Debug)]
pub(crate) struct Sock {
    tcp: TcpStream,
    /// tungstenite may not write now (see the module doc).
    hold: bool,
}

impl Sock {
    pub(crate) fn new(tcp: TcpStream) -> Self {
        Self { tcp, hold: false }
    }

    /// The TCP stream, for the session's own writes.
    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Holds tungstenite's writes off (`true`) or lets them through again.
    pub(crate) fn hold(&mut self, on: bool) {
        self.hold = on;
    }
}

impl AsyncRead for Sock {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Sock {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        // Held: nothing is written and no waker is kept. tungstenite's adapter takes `Pending`
        // as "would block" and reads on; the session itself flushes tungstenite afterwards.
        if self.hold {
            return Poll::Pending;
        }
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.hold {
            return Poll::Pending;
        }
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test code: a failed unwrap is a failed test"
    )]

    use futures_util::{SinkExt, StreamExt};
    use tokio::net::TcpListener;
    use tokio_tungstenite::tungstenite::Message;

    use super::*;
    use crate::wire;

    /// A read with the hold on meets a ping and reads on without writing the pong; the pong
    /// goes out at the next flush, after the frame the session wrote meanwhile.
    #[tokio::test]
    async fn a_held_read_keeps_the_pong_until_our_frame_is_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let (ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp)
                .await
                .unwrap();
            ws
        });
        let (tcp, _) = listener.accept().await.unwrap();
        let mut server = tokio_tungstenite::accept_async(Sock::new(tcp))
            .await
            .unwrap();
        let mut client = client.await.unwrap();
        client.send(Message::Ping("p".into())).await.unwrap();
        client.send(Message::text("a")).await.unwrap();
        server.get_mut().hold(true);
        assert_eq!(
            server.next().await.unwrap().unwrap(),
            Message::Ping("p".into())
        );
        // tungstenite tries the pong before it reads "a": held, it keeps it and reads on.
        assert_eq!(server.next().await.unwrap().unwrap(), Message::text("a"));
        server.get_mut().hold(false);
        let mut written = 0;
        let ours = ["ours".into()];
        assert!(wire::try_write_text_frames(server.get_ref().tcp(), &ours, &mut written).unwrap());
        server.flush().await.unwrap();
        assert_eq!(client.next().await.unwrap().unwrap(), Message::text("ours"));
        assert_eq!(
            client.next().await.unwrap().unwrap(),
            Message::Pong("p".into())
        );
    }
}
