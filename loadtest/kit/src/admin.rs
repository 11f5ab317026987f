//! The admin HTTP client of the project (hyper): tests, the load generator, `chorus admin`
//! and the nodes' calls to each other's admin ports all use it.
//!
//! [`call`] sends one request and answers an [`AdminResponse`] (status and body); [`get`] and
//! [`post`] are its common shapes; [`grant`], [`wallet`] and [`ledger_totals`] are the money
//! calls tests and the gifts scenario make; [`profile`] and [`set_profile`] the user calls;
//! [`metric`] and its siblings read `/metrics`
//! ([`metric_in`] reads a page already fetched).

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// An admin call's answer.
#[derive(Debug, Clone)]
pub struct AdminResponse {
    /// HTTP status.
    pub status: u16,
    /// The body, as text.
    pub body: String,
}

impl AdminResponse {
    /// The body parsed as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// This answer when its status is 2xx.
    ///
    /// # Errors
    /// Any other status, with the body.
    pub fn success(self) -> anyhow::Result<Self> {
        anyhow::ensure!(self.is_success(), "HTTP {}: {}", self.status, self.body);
        Ok(self)
    }
}

/// Sends one admin request to `addr`.
///
/// # Errors
/// Connection or protocol failures.
pub async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<serde_json::Value>,
) -> anyhow::Result<AdminResponse> {
    let stream = TcpStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    if !body.is_empty() {
        req = req.header("content-type", "application/json");
    }
    let resp = sender.send_request(req.body(Full::new(body))?).await?;
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await?.to_bytes();
    Ok(AdminResponse {
        status,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    })
}

/// `GET path` with the bearer token.
///
/// # Errors
/// Connection or protocol failures.
pub async fn get(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> anyhow::Result<AdminResponse> {
    call(addr, "GET", path, token, None).await
}

/// `POST path` with a JSON `body` and the bearer token.
///
/// # Errors
/// Connection or protocol failures.
pub async fn post(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    body: serde_json::Value,
) -> anyhow::Result<AdminResponse> {
    call(addr, "POST", path, token, Some(body)).await
}

/// `GET /admin/users/{user}/profile`: the profile shown, the user's own fields and the token
/// claims.
///
/// # Errors
/// Connection or protocol failures (a refusal is an answer: see its status).
pub async fn profile(
    addr: SocketAddr,
    token: Option<&str>,
    user: &str,
) -> anyhow::Result<AdminResponse> {
    get(addr, &format!("/admin/users/{user}/profile"), token).await
}

/// `PUT /admin/users/{user}/profile`: sets the fields of `update` (an empty string clears).
///
/// # Errors
/// Connection or protocol failures (a refusal is an answer: see its status).
pub async fn set_profile(
    addr: SocketAddr,
    token: Option<&str>,
    user: &str,
    update: serde_json::Value,
) -> anyhow::Result<AdminResponse> {
    let path = format!("/admin/users/{user}/profile");
    call(addr, "PUT", &path, token, Some(update)).await
}

/// `POST /admin/wallets/{user}/grant`: grants `user` `amount` coins once per `key`.
///
/// # Errors
/// Connection or protocol failures (a refusal is an answer: see its status).
pub async fn grant(
    addr: SocketAddr,
    token: Option<&str>,
    user: &str,
    amount: i64,
    key: &str,
) -> anyhow::Result<AdminResponse> {
    let body = serde_json::json!({ "amount": amount, "key": key });
    post(addr, &format!("/admin/wallets/{user}/grant"), token, body).await
}

/// `GET /admin/wallets/{user}`: `user`'s balance and earnings.
///
/// # Errors
/// Connection or protocol failures.
pub async fn wallet(
    addr: SocketAddr,
    token: Option<&str>,
    user: &str,
) -> anyhow::Result<AdminResponse> {
    get(addr, &format!("/admin/wallets/{user}"), token).await
}

/// The coins of every `kind` movement in `user`'s statement (`GET
/// /admin/wallets/{user}/history?kind=`), over at most `max_pages` pages.
///
/// # Errors
/// Connection or protocol failures, an error answer, or more pages than `max_pages`.
pub async fn movements_total(
    addr: SocketAddr,
    token: Option<&str>,
    user: &str,
    kind: &str,
    max_pages: usize,
) -> anyhow::Result<i64> {
    let mut total = 0i64;
    let mut cursor: Option<String> = None;
    for _ in 0..max_pages {
        let mut path = format!("/admin/wallets/{user}/history?kind={kind}&limit=100");
        if let Some(c) = &cursor {
            path.push_str("&cursor=");
            path.extend(form_urlencoded::byte_serialize(c.as_bytes()));
        }
        let r = get(addr, &path, token).await?;
        anyhow::ensure!(r.status == 200, "{path}: HTTP {} {}", r.status, r.body);
        let page = r.json();
        for m in page["movements"].as_array().into_iter().flatten() {
            total = total.saturating_add(m["amount"].as_i64().unwrap_or(0));
        }
        match page["next"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return Ok(total),
        }
    }
    anyhow::bail!("{user}'s {kind} movements run past {max_pages} pages")
}

/// `GET /admin/ledger/totals`: the ledger's own audit (`conserved`).
///
/// # Errors
/// Connection or protocol failures.
pub async fn ledger_totals(addr: SocketAddr, token: Option<&str>) -> anyhow::Result<AdminResponse> {
    get(addr, "/admin/ledger/totals", token).await
}

/// One sample of the node's `/metrics` (Prometheus text): the value of the first line that
/// starts with `name_and_labels` (e.g. `chorus_gateway_closes_total{code="4000"}`), 0 when the
/// node has not recorded it.
///
/// # Errors
/// Connection or protocol failures.
pub async fn metric(addr: SocketAddr, name_and_labels: &str) -> anyhow::Result<f64> {
    Ok(metric_if_present(addr, name_and_labels)
        .await?
        .unwrap_or(0.0))
}

/// Polls [`metric`] until it reaches `at_least` or `within` runs out: whether it reached it.
///
/// # Errors
/// Connection or protocol failures.
pub async fn wait_metric(
    addr: SocketAddr,
    name_and_labels: &str,
    at_least: f64,
    within: std::time::Duration,
) -> anyhow::Result<bool> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if metric(addr, name_and_labels).await? >= at_least {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Like [`metric`], but `None` when the node does not serve the metric at all.
///
/// # Errors
/// Connection or protocol failures.
pub async fn metric_if_present(
    addr: SocketAddr,
    name_and_labels: &str,
) -> anyhow::Result<Option<f64>> {
    let body = get(addr, "/metrics", None).await?.body;
    Ok(metric_in(&body, name_and_labels))
}

/// The value of `name_and_labels` in a `/metrics` page already fetched (`body`), matched as
/// [`metric`] does; `None` when the page does not have it. Reads several metrics off one
/// sample of the page.
pub fn metric_in(body: &str, name_and_labels: &str) -> Option<f64> {
    body.lines()
        .find(|l| {
            l.strip_prefix(name_and_labels)
                .is_some_and(|rest| rest.starts_with([' ', '{']) || name_and_labels.ends_with('}'))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
