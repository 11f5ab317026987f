//! The moderation queue's admin calls: list members' reports (by status, room or reported
//! user, newest first, in pages), read one, and resolve one. Every node reads the same store
//! (Redis in a cluster, the node's SQLite file standalone). What a resolution does to the user
//! (a warning, a ban) is the app's: these calls record the decision; the room calls
//! (`/admin/rooms/{id}/…`) and the user calls act. A resolution goes to the event webhook as
//! `report.resolved` from the node that took it. Every node keeps the gauge
//! `chorus_reports_open` at the queue's backlog, for alerts.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use protocol::client::custom::is_app_name;
use protocol::client::report::{Words, check_words};
use protocol::ids::{is_valid_id, is_valid_user_id};
use protocol::{RoomId, UserId};
use serde::Deserialize;
use serde_json::json;
use shard::events::Notifier;
use storage::reports::{MAX_PAGE, Query, ReportStore, Resolution, Resolved, Status};

use super::{Admin, Resp, error, json_resp, query_pairs};

/// The gauge of the queue's backlog (open reports), the same queue-wide figure on every node.
pub(crate) const REPORTS_OPEN: &str = "chorus_reports_open";
/// How often a node reads the backlog for [`REPORTS_OPEN`].
const BACKLOG_EVERY: Duration = Duration::from_secs(5);

/// Keeps [`REPORTS_OPEN`] at the queue's backlog until `shutdown`: read every
/// [`BACKLOG_EVERY`] (one count: Redis `ZCARD`, or SQLite over the index of open reports),
/// and by every list this node serves. A failed read leaves the last value.
pub(crate) async fn watch_backlog(
    store: ReportStore,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut every = tokio::time::interval(BACKLOG_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        match store.open_count().await {
            Ok(n) => set_backlog(n),
            Err(e) => tracing::debug!(error = %e, "Could not read the reports' backlog."),
        }
    }
}

#[expect(
    clippy::cast_precision_loss,
    reason = "a gauge is an f64; a backlog past 2^53 is not a concern"
)]
fn set_backlog(open: u64) {
    metrics::gauge!(REPORTS_OPEN).set(open as f64);
}

fn unavailable(e: &storage::StorageError) -> Resp {
    error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
}

fn bad(msg: &str) -> Resp {
    error(StatusCode::BAD_REQUEST, msg)
}

fn no_report() -> Resp {
    error(StatusCode::NOT_FOUND, "no such report")
}

/// Serves `/admin/reports[/…]`; `rest` is the path after `reports`.
pub(super) async fn serve(
    admin: &Admin,
    method: &Method,
    rest: &[&str],
    query: Option<&str>,
    body: &Bytes,
) -> Resp {
    let store = &admin.reports;
    match (method, rest) {
        (&Method::GET, []) => list(store, query).await,
        (&Method::GET, [id]) => match id.parse() {
            Ok(id) => get(store, id).await,
            Err(_) => no_report(),
        },
        (&Method::POST, [id, "resolve"]) => match id.parse() {
            Ok(id) => resolve(store, admin.events.as_ref(), id, body).await,
            Err(_) => no_report(),
        },
        _ => error(StatusCode::NOT_FOUND, "no such admin call"),
    }
}

/// The `chorus_admin_calls_total` verb of a reports call (`rest` as in [`serve`]).
pub(super) fn verb_of(method: &Method, rest: &[&str]) -> &'static str {
    match (method, rest) {
        (&Method::GET, []) => "reports_list",
        (&Method::GET, [_]) => "reports_get",
        (&Method::POST, [_, "resolve"]) => "reports_resolve",
        _ => "other",
    }
}

/// The list's query: `status`, `room`, `user`, `before`, `limit`.
fn parse_query(query: Option<&str>) -> Result<Query, &'static str> {
    let mut q = Query::default();
    for (k, v) in query_pairs(query) {
        match k.as_str() {
            "status" => {
                q.status = match v.as_str() {
                    "open" => Status::Open,
                    "resolved" => Status::Resolved,
                    "all" => Status::All,
                    _ => return Err("status: open, resolved or all"),
                }
            }
            "room" if is_valid_id(&v) => q.room = Some(RoomId::from(v.as_str())),
            "room" => return Err("room: not a room id"),
            "user" if is_valid_user_id(&v) => q.user = Some(UserId::from(v.as_str())),
            "user" => return Err("user: not a user id"),
            "before" => q.before = Some(v.parse().map_err(|_| "before: a report id")?),
            "limit" => match v.parse() {
                Ok(l @ 1..=MAX_PAGE) => q.limit = l,
                _ => return Err("limit: 1..=200"),
            },
            _ => {}
        }
    }
    Ok(q)
}

async fn list(store: &ReportStore, query: Option<&str>) -> Resp {
    let q = match parse_query(query) {
        Ok(q) => q,
        Err(msg) => return bad(msg),
    };
    // The page, and the queue's backlog whatever the filter (a moderator's "N open").
    match tokio::try_join!(store.list(&q), store.open_count()) {
        Ok((page, open)) => {
            set_backlog(open);
            let mut v = json!(page);
            v["open"] = open.into();
            json_resp(StatusCode::OK, &v)
        }
        Err(e) => unavailable(&e),
    }
}

async fn get(store: &ReportStore, id: u64) -> Resp {
    match store.get(id).await {
        Ok(Some(r)) => json_resp(StatusCode::OK, &json!(r)),
        Ok(None) => no_report(),
        Err(e) => unavailable(&e),
    }
}

/// `POST /admin/reports/{id}/resolve` body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResolveBody {
    action: String,
    #[serde(default)]
    note: Option<String>,
    #[serde(default)]
    by: Option<String>,
}

impl ResolveBody {
    fn check(&self) -> Result<(), &'static str> {
        if !is_app_name(&self.action) {
            return Err("action must be 1..=32 characters of A-Z a-z 0-9 _ . : -");
        }
        if self.by.as_deref().is_some_and(|b| !is_app_name(b)) {
            return Err("by must be 1..=32 characters of A-Z a-z 0-9 _ . : -");
        }
        if let Some(n) = &self.note {
            check_words(n).map_err(|w| match w {
                Words::TooLong => "note must be at most 500 characters",
                Words::Unclean => {
                    "note may not hold control or bidi characters (newline and tab are fine)"
                }
            })?;
        }
        Ok(())
    }
}

async fn resolve(store: &ReportStore, events: Option<&Notifier>, id: u64, body: &Bytes) -> Resp {
    let b: ResolveBody = match serde_json::from_slice(body) {
        Ok(b) => b,
        Err(e) => return bad(&format!("body: {e}")),
    };
    if let Err(msg) = b.check() {
        return bad(msg);
    }
    let res = Resolution {
        action: b.action,
        note: b.note,
        by: b.by,
        at: crate::outbox::unix_ms(),
    };
    match store.resolve(id, &res).await {
        Ok(Resolved::Now(r)) => {
            tracing::info!(report = id, action = %res.action, by = ?res.by, "Report resolved.");
            let answer = json!(r);
            if let Some(n) = events {
                n.emit("report.resolved", &r.filed.room, answer.clone());
            }
            json_resp(StatusCode::OK, &answer)
        }
        Ok(Resolved::Already(r)) => json_resp(
            StatusCode::CONFLICT,
            &json!({ "error": "report already resolved", "report": r }),
        ),
        Ok(Resolved::Missing) => no_report(),
        Err(e) => unavailable(&e),
    }
}
