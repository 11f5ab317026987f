//! `chorus admin wallets`: statements, coin sellers, host settlements and the ledger's totals
//! through the admin API (grants and balances are `chorus admin grant` and `wallet`).

use clap::Subcommand;
use serde_json::{Value, json};

use super::rooms::encode;

/// The wallet calls of `chorus admin wallets`.
#[derive(Debug, Clone, Subcommand)]
pub enum WalletsVerb {
    /// `GET /admin/wallets/{user}/history`: one page of the user's statement, newest first.
    History {
        /// User id.
        user: String,
        /// Only this kind of movement (e.g. `gift_sent`, `top_up`, `rocket_reward`).
        #[arg(long)]
        kind: Option<String>,
        /// The `next` cursor of the page before.
        #[arg(long)]
        cursor: Option<String>,
        /// Movements per page.
        #[arg(long)]
        limit: Option<u32>,
    },
    /// `GET /admin/sellers/{user}`: whether the user is a coin seller.
    Seller {
        /// User id.
        user: String,
    },
    /// `PUT /admin/sellers/{user}`: makes the user a coin seller.
    AddSeller {
        /// User id.
        user: String,
    },
    /// `DELETE /admin/sellers/{user}`: the user is no longer a coin seller.
    RemoveSeller {
        /// User id.
        user: String,
    },
    /// `POST /admin/settlements`: pays out a host's earnings, once per settlement id.
    Settle {
        /// Settlement id (the idempotency key: a retry gets the first result).
        settlement_id: String,
        /// User id of the host.
        user: String,
        /// Earnings settled.
        earnings: i64,
        /// The period it covers, free text (e.g. `2026-11`).
        #[arg(long, default_value = "")]
        period: String,
    },
    /// `GET /admin/ledger/totals`: the ledger's own audit (`conserved`).
    Totals,
}

impl WalletsVerb {
    /// The HTTP method, path and body of the call.
    pub fn request(&self) -> (&'static str, String, Option<Value>) {
        match self {
            Self::History {
                user,
                kind,
                cursor,
                limit,
            } => {
                let mut query = form_urlencoded::Serializer::new(String::new());
                if let Some(k) = kind {
                    query.append_pair("kind", k);
                }
                if let Some(c) = cursor {
                    query.append_pair("cursor", c);
                }
                if let Some(l) = limit {
                    query.append_pair("limit", &l.to_string());
                }
                let query = query.finish();
                let path = if query.is_empty() {
                    format!("/admin/wallets/{}/history", encode(user))
                } else {
                    format!("/admin/wallets/{}/history?{query}", encode(user))
                };
                ("GET", path, None)
            }
            Self::Seller { user } => ("GET", format!("/admin/sellers/{}", encode(user)), None),
            Self::AddSeller { user } => ("PUT", format!("/admin/sellers/{}", encode(user)), None),
            Self::RemoveSeller { user } => {
                ("DELETE", format!("/admin/sellers/{}", encode(user)), None)
            }
            Self::Settle {
                settlement_id,
                user,
                earnings,
                period,
            } => (
                "POST",
                "/admin/settlements".to_owned(),
                Some(json!({
                    "settlement_id": settlement_id,
                    "user": user,
                    "earnings": earnings,
                    "period": period,
                })),
            ),
            Self::Totals => ("GET", "/admin/ledger/totals".to_owned(), None),
        }
    }
}
