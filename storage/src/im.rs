//! Direct messages: every message kept in its sender's and its recipient's log (bounded per
//! user: the last [`KEEP_PER_USER`], none older than [`KEEP_FOR`]), the recipient's messages
//! not yet delivered (the gateway marks one delivered when it queued it to a connection that
//! does not acknowledge, or when a client acknowledged it), idempotency by the sender's
//! `req_id`, and block lists.
//!
//! A message is stored as the JSON of the client's `im` event `d` (`{"id","at",…}`): the
//! backlog, history and live delivery send those bytes as they are. Ids are unique and grow
//! with time: `at_ms * 1024 + n`, never below the previous id.
//!
//! # Engines
//! - Redis (cluster mode): keys under the `{im}` hash tag: `chorus:{im}:seq`,
//!   `chorus:{im}:log:<user>` (sorted set, score = id, member = JSON),
//!   `chorus:{im}:pending:<user>` (sorted set of undelivered ids), `chorus:{im}:blocks:<user>`
//!   (set), `chorus:{im}:req:<user>:<req_id>` (the first answer, kept [`REQ_ID_TTL`]).
//! - SQLite (standalone mode): `<data_dir>/im.db`.

mod redis;
mod sqlite;

use std::path::Path;
use std::time::Duration;

use protocol::UserId;
use serde::Serialize;

pub use redis::RedisIm;
pub use sqlite::SqliteIm;

use crate::error::Result;

/// Messages kept per user (sent and received together).
pub const KEEP_PER_USER: usize = 200;
/// Longest a message is kept.
pub const KEEP_FOR: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long a `req_id` answers retries with its first message.
pub const REQ_ID_TTL: Duration = Duration::from_secs(24 * 3600);
/// The SQLite file in the data directory.
pub const IM_DB_FILE: &str = "im.db";
/// Ids per millisecond: an id is `at_ms * IDS_PER_MS + n`.
pub const IDS_PER_MS: u64 = 1024;

/// A message to store.
#[derive(Debug, Clone)]
pub struct Outgoing<'a> {
    /// The sender.
    pub from: &'a UserId,
    /// The recipient.
    pub to: &'a UserId,
    /// The text (already checked).
    pub text: &'a str,
    /// A typed message's app-defined type (already checked).
    pub kind: Option<&'a str>,
    /// A typed message's data, as JSON (already checked).
    pub data_json: Option<&'a str>,
    /// The sender's idempotency key.
    pub req_id: &'a str,
    /// The sender's profile JSON (an object), when not empty.
    pub profile_json: Option<&'a str>,
    /// Sent by the app's backend (the admin API) as `from`, not by a client: the `im` event
    /// says `"system":true`.
    pub system: bool,
}

/// A stored message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Its id.
    pub id: u64,
    /// When it was accepted, unix ms.
    pub at: u64,
    /// The `im` event's `d`, as JSON.
    pub json: String,
}

/// What [`ImStore::send`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// Stored now: deliver it.
    New(Stored),
    /// The `req_id` was used before for this same message: its first `(id, at)`; deliver
    /// nothing.
    Repeated {
        /// The first message's id.
        id: u64,
        /// The first message's time.
        at: u64,
    },
    /// The `req_id` was used before for another message: nothing was stored.
    Conflict,
    /// The recipient blocked the sender: nothing was stored.
    BlockedByRecipient,
    /// The sender blocked the recipient: nothing was stored.
    BlockedBySender,
}

/// What [`ImStore::block`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocked {
    /// The user is blocked (now or already).
    Done,
    /// The list holds its maximum already.
    ListFull,
}

/// The JSON fragment `"from":…,"to":…,"text":…[,"p":…]` of a message (without braces).
/// The wall clock in unix milliseconds (message ids and times come from it).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The lowest message id still kept at `now_ms`: ids are times ([`IDS_PER_MS`] a
/// millisecond), so anything below is older than [`KEEP_FOR`]. Reads stop there, whatever an
/// engine has not yet deleted.
pub(crate) fn oldest_kept_id(now_ms: u64) -> u64 {
    let keep = u64::try_from(KEEP_FOR.as_millis()).unwrap_or(u64::MAX);
    now_ms.saturating_sub(keep).saturating_mul(IDS_PER_MS)
}

pub(crate) fn body_fragment(m: &Outgoing<'_>) -> String {
    #[derive(Serialize)]
    struct Body<'a> {
        from: &'a UserId,
        to: &'a UserId,
        text: &'a str,
        #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
        kind: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<&'a serde_json::value::RawValue>,
        #[serde(skip_serializing_if = "Option::is_none")]
        p: Option<&'a serde_json::value::RawValue>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        system: bool,
    }
    fn raw(j: Option<&str>) -> Option<&serde_json::value::RawValue> {
        j.and_then(|j| serde_json::from_str(j).ok())
    }
    let json = serde_json::to_string(&Body {
        from: m.from,
        to: m.to,
        text: m.text,
        kind: m.kind,
        data: raw(m.data_json),
        p: raw(m.profile_json),
        system: m.system,
    })
    .unwrap_or_else(|_| "{}".to_owned());
    json.strip_prefix('{')
        .and_then(|j| j.strip_suffix('}'))
        .unwrap_or_default()
        .to_owned()
}

/// The `req_id` record: what a retry must match to count as the same message. The recipient
/// ends at the first `|`: a `|` of its own (user ids may hold one) is written as U+001F, which
/// neither an id nor a message's text may hold, so no two messages share a record (and ids
/// without a `|` keep the records stored before user ids could hold one). A typed message's
/// type and data follow, each after a U+001E, which neither the text, a type nor JSON text
/// holds; a plain message's record is as it always was. A system message's ends with a
/// U+001D, so the app's message never matches a client's under the same key.
pub(crate) fn req_record(m: &Outgoing<'_>) -> String {
    let mut r = format!("{}|{}", m.to.as_str().replace('|', "\u{1f}"), m.text);
    if let Some(kind) = m.kind {
        r.push('\u{1e}');
        r.push_str(kind);
        r.push('\u{1e}');
        r.push_str(m.data_json.unwrap_or_default());
    }
    if m.system {
        r.push('\u{1d}');
    }
    r
}

#[cfg(test)]
mod record_tests {
    use super::*;

    fn plain(to: &UserId, text: &'static str) -> String {
        req_record(&Outgoing {
            from: to,
            to,
            text,
            kind: None,
            data_json: None,
            req_id: "r",
            profile_json: None,
            system: false,
        })
    }

    #[test]
    fn a_bar_in_the_recipient_cannot_make_two_messages_one_record() {
        let a = plain(&UserId::from("auth0|7"), "hi");
        let b = plain(&UserId::from("auth0"), "7|hi");
        assert_ne!(a, b);
        // Unchanged for ids without a `|`.
        assert_eq!(plain(&UserId::from("bob"), "a|b"), "bob|a|b");
    }

    #[test]
    fn a_typed_messages_record_holds_its_type_and_data() {
        let bob = UserId::from("bob");
        let typed = |kind, data| {
            req_record(&Outgoing {
                from: &bob,
                to: &bob,
                text: "hi",
                kind: Some(kind),
                data_json: data,
                req_id: "r",
                profile_json: None,
                system: false,
            })
        };
        let a = typed("room.invite", Some(r#"{"room":"a"}"#));
        assert_ne!(a, typed("room.invite", Some(r#"{"room":"b"}"#)));
        assert_ne!(a, typed("pic", Some(r#"{"room":"a"}"#)));
        assert_ne!(typed("pic", None), plain(&bob, "hi"));
    }

    #[test]
    fn the_apps_message_never_shares_a_record_with_a_clients() {
        let (bob, ann) = (UserId::from("bob"), UserId::from("ann"));
        let sent = |system| {
            req_record(&Outgoing {
                from: &ann,
                to: &bob,
                text: "hi",
                kind: None,
                data_json: None,
                req_id: "r",
                profile_json: None,
                system,
            })
        };
        assert_ne!(sent(true), sent(false));
    }
}

/// The direct-message store: one of the two engines, cheap to clone.
#[derive(Clone, Debug)]
pub enum ImStore {
    /// Redis (cluster mode).
    Redis(RedisIm),
    /// SQLite (standalone mode).
    Sqlite(SqliteIm),
}

impl ImStore {
    /// A store on `redis`.
    pub fn redis(redis: &crate::redis::Redis) -> Self {
        Self::Redis(RedisIm::new(redis))
    }

    /// Loads the Redis scripts into Redis' script cache (nothing to do on SQLite): every
    /// cluster connection reads its backlog through one, and a burst of connects would each
    /// load it.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached.
    pub async fn preload(&self) -> Result<()> {
        match self {
            Self::Redis(r) => r.preload().await,
            Self::Sqlite(_) => Ok(()),
        }
    }

    /// A store in `<data_dir>/im.db`.
    ///
    /// # Errors
    /// `Backend` when the directory or the database cannot be opened.
    pub async fn sqlite(data_dir: &Path) -> Result<Self> {
        SqliteIm::open(data_dir).await.map(Self::Sqlite)
    }

    /// Stores a message (or recognises a retry, or refuses a blocked one), atomically.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn send(&self, m: &Outgoing<'_>) -> Result<Sent> {
        match self {
            Self::Redis(r) => r.send(m).await,
            Self::Sqlite(s) => s.send(m).await,
        }
    }

    /// What `m`'s `req_id` answers when its sender used it within [`REQ_ID_TTL`]: the first
    /// message's [`Sent::Repeated`] (same recipient and text) or [`Sent::Conflict`]; `None`
    /// when the key is new. Stores nothing: a retry is recognised without spending the
    /// sender's rate (the gateway asks only when that is spent).
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn repeat(&self, m: &Outgoing<'_>) -> Result<Option<Sent>> {
        match self {
            Self::Redis(r) => r.repeat(m).await,
            Self::Sqlite(s) => s.repeat(m).await,
        }
    }

    /// Whether `user` may be owed messages: false only when certainly not (the standalone
    /// store, which sees every message stored), so a connect can skip the read.
    pub fn may_owe(&self, user: &UserId) -> bool {
        match self {
            Self::Redis(_) => true,
            Self::Sqlite(s) => s.may_owe(user),
        }
    }

    /// `user`'s messages not yet delivered, oldest first, as JSON.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn undelivered(&self, user: &UserId) -> Result<Vec<(u64, String)>> {
        match self {
            Self::Redis(r) => r.undelivered(user).await,
            Self::Sqlite(s) => s.undelivered(user).await,
        }
    }

    /// Marks messages `ids` to `user` delivered.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn delivered(&self, user: &UserId, ids: &[u64]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        match self {
            Self::Redis(r) => r.delivered(user, ids).await,
            Self::Sqlite(s) => s.delivered(user, ids).await,
        }
    }

    /// `user`'s messages (sent and received) with an id below `before`, newest first: every
    /// kept one, for the caller to filter and page (at most [`KEEP_PER_USER`]).
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn history(&self, user: &UserId, before: Option<u64>) -> Result<Vec<String>> {
        match self {
            Self::Redis(r) => r.history(user, before).await,
            Self::Sqlite(s) => s.history(user, before).await,
        }
    }

    /// Adds `other` to `user`'s block list (at most `max` entries).
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn block(&self, user: &UserId, other: &UserId, max: usize) -> Result<Blocked> {
        match self {
            Self::Redis(r) => r.block(user, other, max).await,
            Self::Sqlite(s) => s.block(user, other, max).await,
        }
    }

    /// Removes `other` from `user`'s block list; whether it was there.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn unblock(&self, user: &UserId, other: &UserId) -> Result<bool> {
        match self {
            Self::Redis(r) => r.unblock(user, other).await,
            Self::Sqlite(s) => s.unblock(user, other).await,
        }
    }

    /// `user`'s block list, sorted.
    ///
    /// # Errors
    /// `Unavailable` / `Backend` when the engine fails.
    pub async fn blocks(&self, user: &UserId) -> Result<Vec<UserId>> {
        let mut all = match self {
            Self::Redis(r) => r.blocks(user).await?,
            Self::Sqlite(s) => s.blocks(user).await?,
        };
        all.sort();
        Ok(all)
    }
}
