//! `chorus admin users`: read and set a user's profile through the admin API.

use clap::Subcommand;
use serde_json::{Map, Value};

use super::rooms::encode;

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
        }
    }
}
