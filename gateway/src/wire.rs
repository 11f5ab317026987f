//! Server → client text frames written straight to the socket, a batch per system call.
//!
//! tungstenite copies every frame into its write buffer, and that buffer keeps the capacity of
//! the largest batch ever written for the rest of the connection: a socket that once received a
//! room's member list holds kilobytes while it idles. For data frames the session therefore
//! writes the frame headers and the shared payloads as one vectored `sendmsg`: no copy, and no
//! buffer that outlives the write. tungstenite still reads, answers pings and closes; the
//! session flushes it before each batch so its bytes never interleave with ours.

use std::io::{self, IoSlice};

use smallvec::SmallVec;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Utf8Bytes;

/// Longest header of an unmasked server frame: 2 bytes plus an 8-byte extended length.
const MAX_HEADER: usize = 10;

/// The header of an unmasked, final text frame (RFC 6455 §5.2) carrying `len` bytes.
pub(crate) fn text_header(len: usize) -> ([u8; MAX_HEADER], usize) {
    let mut h = [0u8; MAX_HEADER];
    h[0] = 0x81; // FIN + opcode 1 (text)
    if len < 126 {
        h[1] = len as u8;
        (h, 2)
    } else if let Ok(len) = u16::try_from(len) {
        h[1] = 126;
        h[2..4].copy_from_slice(&len.to_be_bytes());
        (h, 4)
    } else {
        h[1] = 127;
        h[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        (h, 10)
    }
}

/// Writes `frames` as text frames with as few system calls as the socket allows, counting the
/// bytes written in `written`: if the write is abandoned (a time-out) with `written` above
/// zero, the stream may end inside a frame and must not carry another one.
pub(crate) async fn write_text_frames(
    stream: &mut TcpStream,
    frames: &[Utf8Bytes],
    written: &mut usize,
) -> io::Result<()> {
    // Inline for the usual small batch: a write allocates nothing.
    let headers: SmallVec<[([u8; MAX_HEADER], usize); 8]> =
        frames.iter().map(|f| text_header(f.len())).collect();
    let mut slices: SmallVec<[IoSlice<'_>; 16]> = SmallVec::with_capacity(frames.len() * 2);
    for ((h, n), f) in headers.iter().zip(frames) {
        slices.push(IoSlice::new(&h[..*n]));
        slices.push(IoSlice::new(f.as_bytes()));
    }
    let mut rest: &mut [IoSlice<'_>] = &mut slices;
    while !rest.is_empty() {
        let n = send_vectored(stream, rest).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        *written += n;
        IoSlice::advance_slices(&mut rest, n);
    }
    Ok(())
}

/// One `sendmsg` of `slices` once the socket is writable. `sendmsg` rather than tokio's
/// `writev`: the same bytes, but the call goes straight to the socket layer instead of through
/// the file layer (`vfs_writev`), which measured about a fifth of the kernel's send path.
async fn send_vectored(stream: &TcpStream, slices: &[IoSlice<'_>]) -> io::Result<usize> {
    loop {
        stream.writable().await?;
        match stream.try_io(Interest::WRITABLE, || {
            // A peer that went away is an error here, never a SIGPIPE, whatever the process
            // did with that signal.
            socket2::SockRef::from(stream).send_vectored_with_flags(slices, libc::MSG_NOSIGNAL)
        }) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::{Role, WebSocket};

    use super::*;

    /// Our frames are byte for byte what tungstenite writes for the same text message.
    #[test]
    fn frames_match_tungstenite_at_every_length_class() {
        for len in [0usize, 1, 125, 126, 127, 65_535, 65_536, 1 << 20] {
            let payload = "x".repeat(len);
            let mut ws = WebSocket::from_raw_socket(Cursor::new(Vec::new()), Role::Server, None);
            ws.send(Message::text(payload.clone())).unwrap();
            let theirs = ws.get_ref().get_ref().clone();
            let (h, n) = text_header(len);
            let mut ours = h[..n].to_vec();
            ours.extend_from_slice(payload.as_bytes());
            assert_eq!(ours, theirs, "frame of {len} bytes");
        }
    }

    /// A batch larger than one write of the socket still arrives whole and in order.
    #[tokio::test]
    async fn a_batch_arrives_whole_across_partial_writes() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut all = Vec::new();
            s.read_to_end(&mut all).await.unwrap();
            all
        });
        let mut stream = TcpStream::connect(addr).await.unwrap();
        // 64 frames of 100 KiB: several MiB, far more than one socket buffer takes at once.
        let frames: Vec<Utf8Bytes> = (0..64u8)
            .map(|i| Utf8Bytes::from(char::from(b'a' + i % 26).to_string().repeat(100 * 1024)))
            .collect();
        let mut written = 0;
        write_text_frames(&mut stream, &frames, &mut written)
            .await
            .unwrap();
        drop(stream);
        let got = reader.await.unwrap();
        let mut want = Vec::new();
        for f in &frames {
            let (h, n) = text_header(f.len());
            want.extend_from_slice(&h[..n]);
            want.extend_from_slice(f.as_bytes());
        }
        assert_eq!(got.len(), want.len());
        assert_eq!(written, want.len());
        assert!(got == want, "bytes differ");
    }
}
