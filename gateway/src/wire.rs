//! Server → client text frames written straight to the socket, a batch per system call.
//!
//! tungstenite copies every frame into its write buffer, and that buffer keeps the capacity of
//! the largest batch ever written for the rest of the connection: a socket that once received a
//! room's member list holds kilobytes while it idles. For data frames the session therefore
//! writes the frames itself: a small batch (the usual one: a frame or a few) is copied into a
//! buffer on the stack and goes out with one `send`; a larger one goes out as one vectored
//! `sendmsg` of the frame headers and the shared payloads, without a copy. No buffer outlives
//! the write. tungstenite still reads, answers pings and closes; the session flushes it before a
//! batch when it may hold a pong, and holds its writes off while a batch is under way (`sock.rs`),
//! so its bytes never interleave with ours.

use std::io::{self, IoSlice};

use smallvec::SmallVec;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Utf8Bytes;

/// Longest header of an unmasked server frame: 2 bytes plus an 8-byte extended length.
const MAX_HEADER: usize = 10;

/// A batch of at most this many bytes is copied into one buffer and written with `send`.
const FLAT_MAX: usize = 2048;

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

/// Writes what the socket takes of `frames` now, without waiting, from byte `written` on (and
/// counts what it wrote there): `Ok(true)` once everything went out, `Ok(false)` when the
/// socket is full. Most batches go out whole at the first call, so the caller can skip a
/// future, a timer and a readiness wait. If the write is abandoned (a time-out) with `written`
/// above zero, the stream may end inside a frame and must not carry another one.
pub(crate) fn try_write_text_frames(
    stream: &TcpStream,
    frames: &[Utf8Bytes],
    written: &mut usize,
) -> io::Result<bool> {
    let total: usize = frames
        .iter()
        .map(|f| text_header(f.len()).1 + f.len())
        .sum();
    while *written < total {
        // tokio answers `WouldBlock` without a system call while it knows the socket is full.
        let sent = stream.try_io(Interest::WRITABLE, || {
            if total <= FLAT_MAX {
                send_flat(stream, frames, *written)
            } else {
                send_vectored(stream, frames, *written)
            }
        });
        match sent {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => *written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// One `send` of the batch's bytes from `skip` on, the frames copied into one buffer on the
/// stack (the batch is at most [`FLAT_MAX`] bytes): the kernel takes a plain buffer, the
/// cheapest way into the socket (measured against `sendmsg` of the headers and payloads).
fn send_flat(stream: &TcpStream, frames: &[Utf8Bytes], skip: usize) -> io::Result<usize> {
    let mut buf = [0u8; FLAT_MAX];
    let mut len = 0;
    for f in frames {
        let (h, n) = text_header(f.len());
        let end = len + n + f.len();
        let dst = buf.get_mut(len..end).ok_or(io::ErrorKind::InvalidInput)?;
        dst[..n].copy_from_slice(&h[..n]);
        dst[n..].copy_from_slice(f.as_bytes());
        len = end;
    }
    let rest = buf.get(skip..len).ok_or(io::ErrorKind::InvalidInput)?;
    // A peer that went away is an error here, never a SIGPIPE, whatever the process did with
    // that signal.
    socket2::SockRef::from(stream).send_with_flags(rest, libc::MSG_NOSIGNAL)
}

/// One `sendmsg` of the batch's headers and payloads from byte `skip` on, without copying
/// them: for batches too large for [`send_flat`]. `sendmsg` rather than tokio's `writev`: the
/// same bytes, but the call goes straight to the socket layer instead of through the file
/// layer (`vfs_writev`), which measured about a fifth of the kernel's send path.
fn send_vectored(stream: &TcpStream, frames: &[Utf8Bytes], skip: usize) -> io::Result<usize> {
    // Inline for a batch of up to eight frames: a write allocates nothing.
    let headers: SmallVec<[([u8; MAX_HEADER], usize); 8]> =
        frames.iter().map(|f| text_header(f.len())).collect();
    let mut slices: SmallVec<[IoSlice<'_>; 16]> = SmallVec::with_capacity(frames.len() * 2);
    for ((h, n), f) in headers.iter().zip(frames) {
        slices.push(IoSlice::new(&h[..*n]));
        slices.push(IoSlice::new(f.as_bytes()));
    }
    let mut rest: &mut [IoSlice<'_>] = &mut slices;
    IoSlice::advance_slices(&mut rest, skip);
    socket2::SockRef::from(stream).send_vectored_with_flags(rest, libc::MSG_NOSIGNAL)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::{Role, WebSocket};

    use super::*;

    /// Writes `frames` whole, waiting for the socket as needed (the session's blocked write,
    /// without its reading and time-outs).
    async fn write_text_frames(
        stream: &TcpStream,
        frames: &[Utf8Bytes],
        written: &mut usize,
    ) -> io::Result<()> {
        while !try_write_text_frames(stream, frames, written)? {
            stream.writable().await?;
        }
        Ok(())
    }

    /// Appends `frames` as the bytes a client should read for them.
    fn encode_into(frames: &[Utf8Bytes], out: &mut Vec<u8>) {
        for f in frames {
            let (h, n) = text_header(f.len());
            out.extend_from_slice(&h[..n]);
            out.extend_from_slice(f.as_bytes());
        }
    }

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

    /// Small batches go out as one copied buffer; when the socket fills in the middle of one,
    /// the rest follows from the right byte once the peer reads, and nothing is doubled.
    #[tokio::test]
    async fn small_batches_resume_mid_batch_when_the_socket_fills() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut peer, _) = listener.accept().await.unwrap();
        // Frames of distinct lengths and bytes, three to a batch: each batch is under
        // `FLAT_MAX`, and a misplaced or repeated byte shows in the comparison.
        let batch = |i: usize| -> Vec<Utf8Bytes> {
            (0..3)
                .map(|k| {
                    let c = char::from(b'a' + ((i * 3 + k) % 26) as u8);
                    Utf8Bytes::from(c.to_string().repeat(100 + (i * 7 + k * 131) % 500))
                })
                .collect()
        };
        let mut want = Vec::new();
        let mut stalled = None;
        // The peer reads nothing yet, so the socket fills well before 40 MB.
        for i in 0..20_000 {
            let frames = batch(i);
            assert!(frames.iter().map(|f| f.len() + 4).sum::<usize>() <= FLAT_MAX);
            encode_into(&frames, &mut want);
            let mut written = 0;
            if !try_write_text_frames(&stream, &frames, &mut written).unwrap() {
                stalled = Some((i, frames, written));
                break;
            }
        }
        let (i, frames, mut written) = stalled.expect("the socket never filled");
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            peer.read_to_end(&mut all).await.unwrap();
            all
        });
        write_text_frames(&stream, &frames, &mut written)
            .await
            .unwrap();
        for j in i + 1..i + 50 {
            let frames = batch(j);
            encode_into(&frames, &mut want);
            let mut written = 0;
            write_text_frames(&stream, &frames, &mut written)
                .await
                .unwrap();
        }
        drop(stream);
        let got = reader.await.unwrap();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "bytes differ");
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
        let stream = TcpStream::connect(addr).await.unwrap();
        // 64 frames of 100 KiB: several MiB, far more than one socket buffer takes at once.
        let frames: Vec<Utf8Bytes> = (0..64u8)
            .map(|i| Utf8Bytes::from(char::from(b'a' + i % 26).to_string().repeat(100 * 1024)))
            .collect();
        let mut written = 0;
        write_text_frames(&stream, &frames, &mut written)
            .await
            .unwrap();
        drop(stream);
        let got = reader.await.unwrap();
        let mut want = Vec::new();
        encode_into(&frames, &mut want);
        assert_eq!(got.len(), want.len());
        assert_eq!(written, want.len());
        assert!(got == want, "bytes differ");
    }
}
