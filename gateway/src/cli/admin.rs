//! `chorus admin`: the operator's calls to a node's admin API, each a verb that names its
//! HTTP method, path and body (the binary prints the JSON answer).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use super::{ReportsVerb, RoomsVerb, UsersVerb, WalletsVerb};

/// `chorus admin` flags.
#[derive(Debug, Clone, Args)]
pub struct AdminArgs {
    /// Admin address of any node.
    #[arg(long, env = "CHORUS_ADMIN_ADDR", default_value = "127.0.0.1:9090")]
    pub addr: SocketAddr,
    /// Bearer token (`CHORUS_ADMIN_TOKEN`).
    #[arg(long, env = "CHORUS_ADMIN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The call.
    #[command(subcommand)]
    pub verb: AdminVerb,
}

/// The admin calls.
#[derive(Debug, Clone, Subcommand)]
pub enum AdminVerb {
    /// `GET /admin/ring`.
    Ring,
    /// `GET /admin/nodes`.
    Nodes,
    /// `GET /admin/rooms/{id}`.
    Room {
        /// Room id.
        id: String,
    },
    /// `GET /admin/rooms/{id}/moderation`: bans, chat mutes and the audit list.
    Moderation {
        /// Room id.
        id: String,
    },
    /// `POST /admin/nodes`: join (or re-weight) a node.
    Join {
        /// Node id.
        id: String,
        /// Ring weight.
        #[arg(long, default_value_t = 1)]
        weight: u32,
        /// Link address (for a node not yet known).
        #[arg(long)]
        link_addr: Option<String>,
        /// Admin address (for a node not yet known).
        #[arg(long)]
        admin_addr: Option<String>,
    },
    /// `PUT /admin/nodes/{id}/weight`.
    Weight {
        /// Node id.
        id: String,
        /// New weight.
        weight: u32,
    },
    /// `POST /admin/nodes/{id}/drain`.
    Drain {
        /// Node id.
        id: String,
    },
    /// `DELETE /admin/nodes/{id}`.
    Remove {
        /// Node id.
        id: String,
    },
    /// `POST /admin/rooms/{id}/move`.
    Move {
        /// Room id.
        room: String,
        /// Target shard.
        to: String,
    },
    /// `GET /admin/rebalance`.
    Rebalance,
    /// `POST /admin/wallets/{user}/grant`.
    Grant {
        /// User id.
        user: String,
        /// Coins.
        amount: i64,
        /// Idempotency key.
        key: String,
    },
    /// `GET /admin/wallets/{user}`.
    Wallet {
        /// User id.
        user: String,
    },
    /// The room directory and its directory pins (`/admin/rooms`).
    Rooms {
        /// The call.
        #[command(subcommand)]
        verb: RoomsVerb,
    },
    /// Robot room configurations (`/admin/robots`).
    Robots {
        /// The call.
        #[command(subcommand)]
        verb: RobotsVerb,
    },
    /// The moderation queue: members' reports (`/admin/reports`).
    Reports {
        /// The call.
        #[command(subcommand)]
        verb: ReportsVerb,
    },
    /// User profiles (`/admin/users/{id}/profile`).
    Users {
        /// The call.
        #[command(subcommand)]
        verb: UsersVerb,
    },
    /// Statements, coin sellers, host settlements and the ledger's totals.
    Wallets {
        /// The call.
        #[command(subcommand)]
        verb: WalletsVerb,
    },
}

/// The robot room calls of `chorus admin robots`.
#[derive(Debug, Clone, Subcommand)]
pub enum RobotsVerb {
    /// `GET /admin/robots`: every configuration.
    List,
    /// `GET /admin/robots/{room}`.
    Get {
        /// Room id.
        room: String,
    },
    /// `POST /admin/robots`: a new configuration, read from a JSON file.
    Create {
        /// The configuration (JSON).
        file: PathBuf,
    },
    /// `PUT /admin/robots/{room}`: replaces a configuration with a JSON file's.
    Update {
        /// Room id.
        room: String,
        /// The configuration (JSON; its `room` may be left out).
        file: PathBuf,
    },
    /// `POST /admin/robots/{room}/enable`.
    Enable {
        /// Room id.
        room: String,
    },
    /// `POST /admin/robots/{room}/disable`.
    Disable {
        /// Room id.
        room: String,
    },
    /// `DELETE /admin/robots/{room}`.
    Delete {
        /// Room id.
        room: String,
    },
}

/// A JSON file's content, for a request body.
fn json_file(path: &Path) -> anyhow::Result<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("parsing {}: {e}", path.display()))
}

impl RobotsVerb {
    /// The HTTP method, path and body of the call (files are read here).
    ///
    /// # Errors
    /// A configuration file cannot be read or is not JSON.
    pub fn request(&self) -> anyhow::Result<(&'static str, String, Option<serde_json::Value>)> {
        Ok(match self {
            Self::List => ("GET", "/admin/robots".into(), None),
            Self::Get { room } => ("GET", format!("/admin/robots/{room}"), None),
            Self::Create { file } => ("POST", "/admin/robots".into(), Some(json_file(file)?)),
            Self::Update { room, file } => (
                "PUT",
                format!("/admin/robots/{room}"),
                Some(json_file(file)?),
            ),
            Self::Enable { room } => ("POST", format!("/admin/robots/{room}/enable"), None),
            Self::Disable { room } => ("POST", format!("/admin/robots/{room}/disable"), None),
            Self::Delete { room } => ("DELETE", format!("/admin/robots/{room}"), None),
        })
    }
}

impl AdminVerb {
    /// The HTTP method, path and body of the call.
    ///
    /// # Errors
    /// A file the call sends cannot be read or is not JSON.
    pub fn request(&self) -> anyhow::Result<(&'static str, String, Option<serde_json::Value>)> {
        use serde_json::json;
        Ok(match self {
            Self::Ring => ("GET", "/admin/ring".into(), None),
            Self::Nodes => ("GET", "/admin/nodes".into(), None),
            Self::Room { id } => ("GET", format!("/admin/rooms/{id}"), None),
            Self::Moderation { id } => ("GET", format!("/admin/rooms/{id}/moderation"), None),
            Self::Join {
                id,
                weight,
                link_addr,
                admin_addr,
            } => (
                "POST",
                "/admin/nodes".into(),
                Some(
                    json!({"id": id, "weight": weight, "link_addr": link_addr, "admin_addr": admin_addr}),
                ),
            ),
            Self::Weight { id, weight } => (
                "PUT",
                format!("/admin/nodes/{id}/weight"),
                Some(json!({ "weight": weight })),
            ),
            Self::Drain { id } => ("POST", format!("/admin/nodes/{id}/drain"), None),
            Self::Remove { id } => ("DELETE", format!("/admin/nodes/{id}"), None),
            Self::Move { room, to } => (
                "POST",
                format!("/admin/rooms/{room}/move"),
                Some(json!({ "to": to })),
            ),
            Self::Rebalance => ("GET", "/admin/rebalance".into(), None),
            Self::Grant { user, amount, key } => (
                "POST",
                format!("/admin/wallets/{}/grant", super::rooms::encode(user)),
                Some(json!({"amount": amount, "key": key})),
            ),
            Self::Wallet { user } => (
                "GET",
                format!("/admin/wallets/{}", super::rooms::encode(user)),
                None,
            ),
            Self::Robots { verb } => return verb.request(),
            Self::Users { verb } => verb.request(),
            Self::Reports { verb } => verb.request(),
            Self::Rooms { verb } => verb.request(),
            Self::Wallets { verb } => verb.request(),
        })
    }
}
