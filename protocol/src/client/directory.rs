//! `room.list`: the room directory, answered by the gateway (PROTOCOL.md, `room.list`).

use serde::{Deserialize, Serialize};

use crate::{RoomId, UserId};

/// Rooms a page holds when the request names no `limit`.
pub const ROOM_LIST_DEFAULT: u32 = 20;
/// Most rooms one page may hold.
pub const ROOM_LIST_MAX: u32 = 100;
/// Longest search text, in bytes.
pub const ROOM_QUERY_MAX_BYTES: usize = 64;
/// Longest cursor, in bytes (cursors are opaque and short).
pub const ROOM_CURSOR_MAX_BYTES: usize = 64;

/// `room.list` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct RoomList {
    /// Where the previous page ended (its reply's `cursor`); absent for the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Rooms per page, 1..=100 (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Only rooms whose owner is in this region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Search: a prefix of the room id, of the title, or of a word of the title (any case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
}

impl RoomList {
    /// The page size, clamped to 1..=[`ROOM_LIST_MAX`].
    pub fn page_size(&self) -> usize {
        self.limit
            .unwrap_or(ROOM_LIST_DEFAULT)
            .clamp(1, ROOM_LIST_MAX) as usize
    }

    /// Checks the bounds of the arguments.
    ///
    /// # Errors
    /// A message for the `BAD_REQUEST` reply.
    pub fn validate(&self) -> Result<(), &'static str> {
        if self.limit == Some(0) || self.limit.is_some_and(|l| l > ROOM_LIST_MAX) {
            return Err("limit: 1..=100");
        }
        if self
            .query
            .as_ref()
            .is_some_and(|q| q.len() > ROOM_QUERY_MAX_BYTES)
        {
            return Err("query: at most 64 bytes");
        }
        if self
            .cursor
            .as_ref()
            .is_some_and(|c| c.len() > ROOM_CURSOR_MAX_BYTES)
        {
            return Err("cursor: not one this server gave");
        }
        if let Some(r) = &self.region {
            let ok = (1..=super::profile::MAX_REGION_BYTES).contains(&r.len())
                && r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
            if !ok {
                return Err("region: 1..=16 of [A-Za-z0-9-]");
            }
        }
        Ok(())
    }
}

/// One room in the directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoomEntry {
    /// The room.
    pub room: RoomId,
    /// Its title.
    pub title: String,
    /// Its owner (host).
    pub owner: UserId,
    /// Members in it now (robots included).
    pub members: u64,
    /// Seats taken.
    pub seated: u32,
    /// Its rank: members plus recent gift value (ARCHITECTURE.md, the room directory).
    pub score: f64,
    /// A robot room (its robots are configured).
    #[serde(default)]
    pub robots: bool,
    /// Joining needs a password.
    #[serde(default)]
    pub locked: bool,
    /// The owner's region, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Pinned by an operator (listed first).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
    /// A PK is on in it (PROTOCOL.md section 16.5), for a client's "PK" tab or badge.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pk: bool,
}

/// The `ok` of `room.list`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RoomListPage {
    /// The rooms of this page, pinned ones first.
    pub rooms: Vec<RoomEntry>,
    /// Pass it back for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}
