//! `chorus admin users`: read and set a user's profile, suspend or reinstate an account, and
//! send a user a direct message from the app's account, through the admin API.

use clap::Subcommand;
use serde_json::{Map, Value};

use super::rooms::{encode, parse_json};

/// The user calls of `chorus admin users`.
#[derive(Debug, Clone, Subcommand)]
pub enum UsersVerb {
    /// `GET /admin/users/{id}/profile`: the profile shown, the user's own fields and the
    /// token claims.
    Get {
        /// User id.
        id: String,
    },
    /// `PUT /admin/users/{id}/profile`: sets the fields given (an empty value clears one).
    Set {
        /// User id.
        id: String,
        /// Display name.
        #[arg(long)]
        name: Option<String>,
        /// Avatar URL.
        #[arg(long)]
        avatar: Option<String>,
        /// Region code.
        #[arg(long)]
        region: Option<String>,
    },
    /// `PUT /admin/users/{id}/suspension`: shut the account out (its sockets close with 4003).
    Suspend {
        /// User id.
        id: String,
        /// For this long (e.g. `24h`, `7days`); absent: until reinstated.
        #[arg(long = "for", value_parser = humantime::parse_duration)]
        ttl: Option<std::time::Duration>,
        /// Why (for operators).
        #[arg(long)]
        reason: Option<String>,
        /// Who decided.
        #[arg(long)]
        by: Option<String>,
    },
    /// `DELETE /admin/users/{id}/suspension`: lift the suspension.
    Reinstate {
        /// User id.
        id: String,
    },
    /// `GET /admin/users/{id}/suspension`.
    Suspension {
        /// User id.
        id: String,
    },
    /// `GET /admin/suspensions`: every suspension that holds now.
    Suspended,
    /// `GET /admin/users/{id}/messages`: one page of the user's direct messages, newest first.
    Messages {
        /// User id.
        id: String,
        /// Only the conversation with this user.
        #[arg(long)]
        with: Option<String>,
        /// Only messages older than this id (the previous page's `next`).
        #[arg(long)]
        before: Option<u64>,
        /// At most this many (1..=100; 50 by default).
        #[arg(long)]
        limit: Option<u32>,
    },
    /// `POST /admin/users/{id}/messages`: a direct message from the app's own account,
    /// marked `system`.
    Message {
        /// The recipient.
        id: String,
        /// The app's account it comes from (e.g. `official`).
        #[arg(long)]
        from: String,
        /// The text (what a client that does not know the type shows).
        #[arg(long)]
        text: String,
        /// The idempotency key: the same key again sends nothing new.
        #[arg(long = "req-id")]
        req_id: String,
        /// A typed message's type (e.g. `reward`).
        #[arg(long = "type")]
        kind: Option<String>,
        /// Its data, as JSON.
        #[arg(long, value_parser = parse_json, requires = "kind")]
        data: Option<Value>,
    },
}

impl UsersVerb {
    /// The HTTP method, path and body of the call.
    pub fn request(&self) -> (&'static str, String, Option<Value>) {
        match self {
            Self::Get { id } => ("GET", format!("/admin/users/{}/profile", encode(id)), None),
            Self::Set {
                id,
                name,
                avatar,
                region,
            } => {
                let mut body = Map::new();
                for (k, v) in [("name", name), ("avatar", avatar), ("region", region)] {
                    if let Some(v) = v {
                        body.insert(k.into(), Value::String(v.clone()));
                    }
                }
                (
                    "PUT",
                    format!("/admin/users/{}/profile", encode(id)),
                    Some(Value::Object(body)),
                )
            }
            Self::Suspend {
                id,
                ttl,
                reason,
                by,
            } => {
                let mut body = Map::new();
                if let Some(d) = ttl {
                    // At least a second: the API counts whole seconds from 1.
                    body.insert("seconds".into(), Value::from(d.as_secs().max(1)));
                }
                for (k, v) in [("reason", reason), ("by", by)] {
                    if let Some(v) = v {
                        body.insert(k.into(), Value::String(v.clone()));
                    }
                }
                (
                    "PUT",
                    format!("/admin/users/{}/suspension", encode(id)),
                    Some(Value::Object(body)),
                )
            }
            Self::Reinstate { id } => (
                "DELETE",
                format!("/admin/users/{}/suspension", encode(id)),
                None,
            ),
            Self::Suspension { id } => (
                "GET",
                format!("/admin/users/{}/suspension", encode(id)),
                None,
            ),
            Self::Suspended => ("GET", "/admin/suspensions".into(), None),
            Self::Messages {
                id,
                with,
                before,
                limit,
            } => {
                let mut q = form_urlencoded::Serializer::new(String::new());
                if let Some(w) = with {
                    q.append_pair("with", w);
                }
                if let Some(b) = before {
                    q.append_pair("before", &b.to_string());
                }
                if let Some(l) = limit {
                    q.append_pair("limit", &l.to_string());
                }
                let q = q.finish();
                let sep = if q.is_empty() { "" } else { "?" };
                (
                    "GET",
                    format!("/admin/users/{}/messages{sep}{q}", encode(id)),
                    None,
                )
            }
            Self::Message {
                id,
                from,
                text,
                req_id,
                kind,
                data,
            } => {
                let mut body = Map::new();
                for (k, v) in [("from", from), ("text", text), ("req_id", req_id)] {
                    body.insert(k.into(), Value::String(v.clone()));
                }
                if let Some(k) = kind {
                    body.insert("type".into(), Value::String(k.clone()));
                }
                if let Some(d) = data {
                    body.insert("data".into(), d.clone());
                }
                (
                    "POST",
                    format!("/admin/users/{}/messages", encode(id)),
                    Some(Value::Object(body)),
                )
            }
        }
    }
}
