//! Plain GETs on the client port that are not upgrades but pages (`crate::web`): the demo
//! room's files, and `/demo/token?user=<id>`, which mints a client token for any user name
//! when the node runs with the demo flag (standalone `--demo`; off by default, never on in a
//! cluster) and grants the user demo coins once. Each answer closes its connection.

use std::time::Duration;

use protocol::UserId;
use protocol::ids::is_valid_user_id;
use serde_json::json;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::{info, warn};

use super::head;
use crate::shared::Core;
use crate::web;

/// How long a demo token lives; the page fetches a new one on `session.expiring`.
pub(crate) const DEMO_TOKEN_TTL: Duration = Duration::from_secs(3600);
/// Coins a demo user gets on their first token (once per user: the grant's key is the name).
pub(crate) const DEMO_COINS: i64 = 1000;
/// Longest a page answer may take to write (a slow link reading ~60 KB).
const WRITE_WITHIN: Duration = Duration::from_secs(10);

/// Answers one page request and closes the connection.
pub(crate) async fn serve(core: &Core, stream: TcpStream, deadline: Instant) {
    let target = request_target(&stream, deadline).await.unwrap_or_default();
    let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
    let response = if path == web::DEMO_TOKEN_PATH {
        let (status, body) = demo_token(core, query).await;
        http_response(status, "application/json", body.to_string().as_bytes())
    } else if let Some(asset) = web::demo_asset(path) {
        http_response(200, asset.content_type, asset.body)
    } else {
        http_response(404, "text/plain", b"not found\n")
    };
    metrics::counter!("chorus_web_requests_total", "port" => "client").increment(1);
    head::answer(stream, &response, WRITE_WITHIN).await;
}

/// The request line's target (path and query), read from the peeked head.
async fn request_target(stream: &TcpStream, deadline: Instant) -> Option<String> {
    let mut buf = vec![0u8; head::MAX_HEAD_BYTES + 1];
    let n = tokio::time::timeout_at(deadline, stream.peek(&mut buf))
        .await
        .ok()?
        .ok()?;
    let line = buf[..n].split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    line.split(' ').nth(1).map(str::to_owned)
}

/// `/demo/token?user=<id>`: `(status, JSON body)`.
async fn demo_token(core: &Core, query: &str) -> (u16, serde_json::Value) {
    if !core.config.demo_tokens {
        return (
            404,
            json!({ "error": "demo tokens are off: start a standalone node with --demo to mint them here" }),
        );
    }
    // Decoded: the demo page sends `encodeURIComponent(name)`, and `:` is valid in a name.
    let user = crate::admin::query_value(Some(query), "user");
    let user = user.as_str();
    if !is_valid_user_id(user) || user.starts_with("bot:") {
        return (
            400,
            json!({ "error": "user names are 1..=64 of [A-Za-z0-9-_.:@+|] and not bot:…" }),
        );
    }
    let token = match core.auth.mint(user, DEMO_TOKEN_TTL) {
        Ok(t) => t,
        Err(e) => return (400, json!({ "error": e.to_string() })),
    };
    // Demo coins through the ledger, once per user (the key makes a second grant a no-op).
    let mut coins = None;
    if let Some(ledger) = &core.money.ledger {
        match ledger
            .grant(
                &UserId::from(user),
                DEMO_COINS,
                &format!("demo-welcome-{user}"),
            )
            .await
        {
            Ok(_) => coins = Some(DEMO_COINS),
            Err(e) => warn!(error = %e, user, "Demo grant failed."),
        }
    }
    info!(user, "Minted a demo token (demo mode).");
    metrics::counter!("chorus_demo_tokens_total").increment(1);
    let exp = jsonwebtoken::get_current_timestamp() + DEMO_TOKEN_TTL.as_secs();
    (
        200,
        json!({ "user": user, "token": token, "exp": exp, "welcome_coins": coins }),
    )
}

fn http_response(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        _ => "Not Found",
    };
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in web::PAGE_HEADERS {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}
