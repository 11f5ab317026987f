//! The WebSocket accept loop: `/ws` only, token checked before the upgrade (401 without a
//! valid one), then one session task per socket.

mod head;
mod page;

pub(crate) use page::DEMO_COINS;

use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::Either;

use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tracing::{debug, info};

use crate::auth::{Identity, token_from_request};
use crate::config::HANDSHAKE_TIMEOUT;
use crate::metrics as m;
use crate::shared::Core;
use crate::sock::Sock;

/// Accepts connections until shutdown.
pub(crate) async fn serve(core: Arc<Core>, listener: TcpListener) {
    let shutdown = core.shutdown.clone();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, _peer)) => {
                let _ = stream.set_nodelay(true);
                core.tracker.spawn(connection(core.clone(), stream));
            }
            Err(e) => shard::link::accept_failed(&e, "WebSocket").await,
        }
    }
    info!("WebSocket listener stopped.");
}

fn refuse(status: u16, body: &str) -> ErrorResponse {
    let mut r = ErrorResponse::new(Some(body.to_owned()));
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_REQUEST);
    r
}

/// Seconds a refused client is asked to wait (`Retry-After`).
const RETRY_AFTER_SECS: u32 = 1;

/// A 503 with `Retry-After`: the node takes no new connection now.
fn retry_later(body: &str) -> ErrorResponse {
    let mut r = refuse(503, body);
    r.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from(RETRY_AFTER_SECS),
    );
    r
}

/// Serves one accepted TCP connection: the upgrade, then the socket's session.
///
/// This future is the socket's task for as long as the socket lives, so it is kept small: the
/// handshake is boxed, because its state (tungstenite's handshake machine, the upgrade check,
/// its timer) is large and needed only until the upgrade, and the session follows it through
/// `then`, in the same slot (an `async` block would keep the stream and the core as captures
/// for the socket's whole life).
fn connection(core: Arc<Core>, stream: TcpStream) -> impl Future<Output = ()> {
    Box::pin(upgrade(core, stream)).then(|upgraded| match upgraded {
        Some((core, ws, who, im_ack)) => Either::Left(crate::session::run(core, ws, who, im_ack)),
        None => Either::Right(std::future::ready(())),
    })
}

/// An upgraded socket: the core handed back, the WebSocket, who it authenticated as, and
/// whether it acknowledges its direct messages (`?im_ack=1`).
type Upgraded = (Arc<Core>, WebSocketStream<Sock>, Identity, bool);

/// Checks the upgrade request and completes the WebSocket handshake; `None` when refused or
/// failed.
async fn upgrade(core: Arc<Core>, stream: TcpStream) -> Option<Upgraded> {
    let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
    match head::look(&stream, deadline).await? {
        Ok(head::Wants::Upgrade) => {}
        Ok(head::Wants::Page) => {
            page::serve(&core, stream, deadline).await;
            return None;
        }
        Err(refusal) => {
            metrics::counter!(m::UPGRADES_REFUSED, "reason" => refusal.label()).increment(1);
            head::refuse(stream, refusal).await;
            return None;
        }
    }
    let mut who: Option<Identity> = None;
    let mut im_ack = false;
    let auth = &core.auth;
    let admission = &core.admission;
    let shutdown = &core.shutdown;
    // The callback's signature is tungstenite's; its error type is an HTTP response.
    #[allow(clippy::result_large_err)]
    let check = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        if req.uri().path() != "/ws" {
            metrics::counter!(m::UPGRADES_REFUSED, "reason" => "path").increment(1);
            return Err(refuse(404, "not found: the WebSocket endpoint is /ws"));
        }
        let Some(token) = token_from_request(req) else {
            metrics::counter!(m::UPGRADES_REFUSED, "reason" => "auth").increment(1);
            return Err(refuse(401, "unauthorized: missing token"));
        };
        match auth.verify(&token) {
            // A draining node takes no new sockets, not even one whose handshake began
            // before the drain: it would come after the drain's closes and stay open.
            Ok(_) if shutdown.is_cancelled() => {
                metrics::counter!(m::UPGRADES_REFUSED, "reason" => "draining").increment(1);
                Err(retry_later("server going away: connect to another gateway"))
            }
            // Admission after the token: upgrades with bad tokens, refused for one HMAC
            // each, do not spend the budget of the users whose tokens are good.
            Ok(_) if !admission.admit() => {
                metrics::counter!(m::UPGRADES_REFUSED, "reason" => "admission").increment(1);
                Err(retry_later("too many new connections; retry later"))
            }
            Ok(id) => {
                who = Some(id);
                im_ack = crate::social::im::asks_to_ack(req.uri().query());
                Ok(resp)
            }
            Err(e) => {
                metrics::counter!(m::UPGRADES_REFUSED, "reason" => "auth").increment(1);
                debug!(error = %e, "Refusing upgrade.");
                Err(refuse(401, "unauthorized: invalid or expired token"))
            }
        }
    };
    let cfg = &core.config;
    let ws_config = WebSocketConfig::default()
        .read_buffer_size(cfg.read_buffer_bytes)
        .write_buffer_size(cfg.write_buffer_bytes)
        .max_write_buffer_size(cfg.write_buffer_bytes + cfg.max_frame_bytes * 4)
        .max_message_size(Some(cfg.max_frame_bytes))
        .max_frame_size(Some(cfg.max_frame_bytes));
    let handshake =
        tokio_tungstenite::accept_hdr_async_with_config(Sock::new(stream), check, Some(ws_config));
    let ws = match tokio::time::timeout_at(deadline, handshake).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            debug!(error = %e, "Handshake failed.");
            return None;
        }
        Err(_) => {
            debug!("Handshake timed out.");
            return None;
        }
    };
    let who = who?;
    Some((core, ws, who, im_ack))
}

/// The most an idle socket's connection future may take. tokio allocates a task as its header,
/// scheduler handle, id, this future (wrapped for the task tracker) and trailer, aligned to 128
/// bytes: up to 528 bytes of future (release build) it is a 640-byte allocation, a byte more
/// makes it 768 (measured for the idle-connection target, docs/BENCHMARKS-LOG.md). Unoptimized
/// builds lay the same future out 8 bytes larger, so the bound checked there is 536: growth
/// shows in both.
#[cfg(test)]
const MAX_CONNECTION_FUTURE_BYTES: usize = if cfg!(debug_assertions) { 536 } else { 528 };

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `f` returns, without calling it.
    fn returned_size<A, B, R>(_f: &impl FnOnce(A, B) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    #[test]
    fn an_idle_sockets_task_stays_in_the_640_byte_allocation() {
        let size = returned_size(&connection);
        assert!(
            size <= MAX_CONNECTION_FUTURE_BYTES,
            "the connection future is {size} bytes: every idle socket would cost 128 more"
        );
    }
}
