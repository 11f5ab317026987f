//! `chorus admin reports`: the moderation queue through the admin API (list, show, resolve).

use clap::{Subcommand, ValueEnum};
use serde_json::{Map, Value};

use super::rooms::encode;

/// Which reports `chorus admin reports list` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportStatus {
    /// Not yet resolved.
    Open,
    /// Resolved.
    Resolved,
    /// Both.
    All,
}

/// The calls of `chorus admin reports`.
#[derive(Debug, Clone, Subcommand)]
pub enum ReportsVerb {
    /// `GET /admin/reports`: a page of reports, newest first.
    List {
        /// Which reports.
        #[arg(long, value_enum, default_value = "open")]
        status: ReportStatus,
        /// Only those filed in this room.
        #[arg(long)]
        room: Option<String>,
        /// Only those about this user.
        #[arg(long)]
        user: Option<String>,
        /// Only ids below this (a page's `next`).
        #[arg(long)]
        before: Option<u64>,
        /// Page length (1..=200).
        #[arg(long)]
        limit: Option<u32>,
    },
    /// `GET /admin/reports/{id}`.
    Show {
        /// Report id.
        id: u64,
    },
    /// `POST /admin/reports/{id}/resolve`: records the decision, once.
    Resolve {
        /// Report id.
        id: u64,
        /// The app's action code (`dismissed`, `warned`, `banned`, …).
        #[arg(long)]
        action: String,
        /// A note for other moderators.
        #[arg(long)]
        note: Option<String>,
        /// Who decided.
        #[arg(long)]
        by: Option<String>,
    },
}

impl ReportsVerb {
    /// The HTTP method, path and body of the call.
    pub fn request(&self) -> (&'static str, String, Option<Value>) {
        match self {
            Self::List {
                status,
                room,
                user,
                before,
                limit,
            } => {
                let status = match status {
                    ReportStatus::Open => "open",
                    ReportStatus::Resolved => "resolved",
                    ReportStatus::All => "all",
                };
                let mut path = format!("/admin/reports?status={status}");
                for (k, v) in [("room", room), ("user", user)] {
                    if let Some(v) = v {
                        path.push_str(&format!("&{k}={}", encode(v)));
                    }
                }
                if let Some(b) = before {
                    path.push_str(&format!("&before={b}"));
                }
                if let Some(l) = limit {
                    path.push_str(&format!("&limit={l}"));
                }
                ("GET", path, None)
            }
            Self::Show { id } => ("GET", format!("/admin/reports/{id}"), None),
            Self::Resolve {
                id,
                action,
                note,
                by,
            } => {
                let mut body = Map::new();
                body.insert("action".into(), Value::String(action.clone()));
                for (k, v) in [("note", note), ("by", by)] {
                    if let Some(v) = v {
                        body.insert(k.into(), Value::String(v.clone()));
                    }
                }
                (
                    "POST",
                    format!("/admin/reports/{id}/resolve"),
                    Some(Value::Object(body)),
                )
            }
        }
    }
}
