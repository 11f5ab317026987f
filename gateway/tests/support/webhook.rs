//! Signing and sending RTC webhooks for the end-to-end tests, computed here independently of
//! the server's own verifier.

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use sha2::Sha256;
use tokio::net::TcpStream;

/// `method path` to `addr` with `headers` and the raw `body`: the status and the JSON answer.
pub(crate) async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &str,
) -> (u16, Value) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The Chorus headers of `body` signed with `secret` at `ts`, computed here independently.
pub(crate) fn chorus_headers(secret: &str, ts: u64, body: &str) -> Vec<(&'static str, String)> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{ts}.{body}").as_bytes());
    let sig = hex::encode(mac.finalize().into_bytes());
    vec![
        ("x-chorus-timestamp", ts.to_string()),
        ("x-chorus-signature", format!("v1={sig}")),
        ("content-type", "application/json".into()),
    ]
}
