//! A look at an HTTP request's head before the WebSocket handshake, so that what is not an
//! upgrade gets a proper status instead of a dropped connection: `426 Upgrade Required` for a
//! plain HTTP request, `400` for something that is not an HTTP/1.1 GET, `431` for a head over
//! the size limit. The bytes are only peeked: the handshake reads them again.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Longest request head accepted (request line and headers).
pub(crate) const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most bytes read and dropped after a refusal before the connection is closed.
const LINGER_BYTES: usize = 64 * 1024;
/// First pause before looking again at a head that has not fully arrived; doubled each time.
const FIRST_PAUSE: Duration = Duration::from_millis(5);
/// Longest pause between looks.
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// Why a connection is answered without a handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not an HTTP/1.1 GET request.
    BadRequest,
    /// An HTTP request that does not ask to upgrade to a WebSocket.
    UpgradeRequired,
    /// The head is larger than [`MAX_HEAD_BYTES`].
    HeadTooLarge,
}

impl Refusal {
    /// The HTTP response for it.
    fn response(self) -> &'static [u8] {
        match self {
            Self::BadRequest => {
                b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: 24\r\n\r\nnot an HTTP/1.1 request\n"
            }
            Self::UpgradeRequired => {
                b"HTTP/1.1 426 Upgrade Required\r\nUpgrade: websocket\r\nConnection: Upgrade, close\r\nContent-Type: text/plain\r\nContent-Length: 54\r\n\r\nthis is a WebSocket endpoint: open a WebSocket to /ws\n"
            }
            Self::HeadTooLarge => {
                b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: 30\r\n\r\nrequest head over 16384 bytes\n"
            }
        }
    }

    /// The label it is counted under.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::BadRequest => "bad_request",
            Self::UpgradeRequired => "not_upgrade",
            Self::HeadTooLarge => "head_too_large",
        }
    }
}

/// What a well-formed request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wants {
    /// The WebSocket upgrade (the handshake checks the rest).
    Upgrade,
    /// One of the pages the client port serves (`crate::web`), by a plain GET.
    Page,
}

/// What the head says, once it has arrived: what the request wants, or the refusal. `None`
/// when the peer closed or the head never completed before `deadline` (such connections are
/// dropped, as the handshake's time-out drops them).
pub(crate) async fn look(stream: &TcpStream, deadline: Instant) -> Option<Result<Wants, Refusal>> {
    let mut buf = vec![0u8; MAX_HEAD_BYTES + 1];
    let mut pause = FIRST_PAUSE;
    loop {
        let n = tokio::time::timeout_at(deadline, stream.peek(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        // The head ends at a blank line; like the handshake's parser, take bare line feeds.
        let end = [find(&buf[..n], b"\r\n\r\n"), find(&buf[..n], b"\n\n")]
            .into_iter()
            .flatten()
            .min();
        if let Some(end) = end {
            let head = &buf[..end];
            return Some(match judge(head) {
                Err(Refusal::UpgradeRequired) if wants_page(head) => Ok(Wants::Page),
                judged => judged.map(|()| Wants::Upgrade),
            });
        }
        if n > MAX_HEAD_BYTES {
            return Some(Err(Refusal::HeadTooLarge));
        }
        if Instant::now() + pause > deadline {
            return None;
        }
        // Part of the head is here: wait a little for the rest (a peek sees the same bytes
        // again at once, so looking without a pause would spin).
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// Answers `refusal` and closes the connection. The request was only peeked, so it is read
/// and dropped after the answer (a lingering close, bounded in bytes and time): a socket
/// closed with unread bytes resets the connection, and the reset can cost the client the
/// answer it has not read yet.
pub(crate) async fn refuse(stream: TcpStream, refusal: Refusal) {
    answer(stream, refusal.response(), Duration::from_secs(1)).await;
}

/// Writes `response` and closes with the same lingering close, all within `within`.
pub(crate) async fn answer(mut stream: TcpStream, response: &[u8], within: Duration) {
    let _ = tokio::time::timeout(within, async {
        let _ = stream.write_all(response).await;
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 4096];
        let mut left = LINGER_BYTES;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Whether a plain GET asks for one of the client port's pages.
fn wants_page(head: &[u8]) -> bool {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    std::str::from_utf8(line)
        .ok()
        .and_then(|l| l.split(' ').nth(1))
        .is_some_and(crate::web::is_client_port_page)
}

/// Judges a complete head (without its blank line).
fn judge(head: &[u8]) -> Result<(), Refusal> {
    let Ok(text) = std::str::from_utf8(head) else {
        return Err(Refusal::BadRequest);
    };
    let mut lines = text.split('\n').map(|l| l.trim_end_matches('\r'));
    let request = lines.next().unwrap_or_default();
    let mut parts = request.split(' ');
    let (method, _path, version) = (parts.next(), parts.next(), parts.next());
    if method != Some("GET") || version != Some("HTTP/1.1") || parts.next().is_some() {
        return Err(Refusal::BadRequest);
    }
    let upgrade = lines.any(|l| {
        l.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("upgrade")
                && value
                    .split(',')
                    .any(|v| v.trim().eq_ignore_ascii_case("websocket"))
        })
    });
    if upgrade {
        Ok(())
    } else {
        Err(Refusal::UpgradeRequired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_judged_by_method_version_and_upgrade() {
        let ok =
            b"GET /ws?token=x HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: WebSocket";
        assert_eq!(judge(ok), Ok(()));
        let plain = b"GET /ws HTTP/1.1\r\nHost: a";
        assert_eq!(judge(plain), Err(Refusal::UpgradeRequired));
        let bare = b"GET /ws HTTP/1.1\nUpgrade: websocket";
        assert_eq!(judge(bare), Ok(()), "bare line feeds");
        for bad in [
            &b"POST /ws HTTP/1.1\r\nUpgrade: websocket"[..],
            b"GET /ws HTTP/1.0\r\nUpgrade: websocket",
            b"\x16\x03\x01garbage",
            b"GET /ws HTTP/1.1 extra\r\nUpgrade: websocket",
        ] {
            assert_eq!(judge(bad), Err(Refusal::BadRequest), "{bad:?}");
        }
    }

    #[test]
    fn plain_gets_of_the_pages_are_told_from_other_plain_requests() {
        for page in ["/", "/demo.js", "/chorus.css", "/demo/token?user=a"] {
            let head = format!("GET {page} HTTP/1.1\r\nHost: a");
            assert_eq!(judge(head.as_bytes()), Err(Refusal::UpgradeRequired));
            assert!(wants_page(head.as_bytes()), "{page}");
        }
        for other in ["/ws", "/dashboard", "/metrics", "/demo/token/x"] {
            let head = format!("GET {other} HTTP/1.1\r\nHost: a");
            assert!(!wants_page(head.as_bytes()), "{other}");
        }
    }

    #[test]
    fn responses_say_their_length_right() {
        for r in [
            Refusal::BadRequest,
            Refusal::UpgradeRequired,
            Refusal::HeadTooLarge,
        ] {
            let text = std::str::from_utf8(r.response()).unwrap_or_default();
            let (head, body) = text.split_once("\r\n\r\n").unwrap_or_default();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|v| v.parse().ok())
                .unwrap_or(usize::MAX);
            assert_eq!(len, body.len(), "{head}");
        }
    }
}
