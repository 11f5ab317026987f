//! Users, answered by the gateway: profiles (`user.update`, `user.get`), follows
//! (`follow.add`, `follow.remove`, `follow.counts`, `follow.list`), token refresh
//! (`auth.refresh`) and the `session.expiring` event.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{DecodeError, Profile, args};
use crate::ids::{RoomId, UserId};

/// Most users one `user.get` may name.
pub const MAX_USER_GET: usize = 100;
/// Most users one user may follow.
pub const MAX_FOLLOWING: u32 = 5_000;
/// Entries of a `follow.list` page when the request gives no `limit`.
pub const DEFAULT_FOLLOW_PAGE: u32 = 50;
/// Most entries of one `follow.list` page.
pub const MAX_FOLLOW_PAGE: u32 = 100;

/// `user.get` arguments: the users whose profiles to answer (1..=100 ids).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserGet {
    /// The users.
    pub users: Vec<UserId>,
}

/// The `ok` of `user.get`: each named user's profile (`{}` for a user with none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profiles {
    /// Profile by user id.
    pub profiles: BTreeMap<UserId, Profile>,
}

/// The `ok` of `user.update`: the user's profile after the update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileOk {
    /// The profile.
    pub p: Profile,
}

/// `auth.refresh` arguments: a new token for the same user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthRefresh {
    /// The token (HS256 JWT, as at the upgrade).
    pub token: String,
}

/// The `ok` of `auth.refresh` and the `d` of `session.expiring`: when the connection's token
/// expires, seconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expiry {
    /// Expiry, seconds since the Unix epoch.
    pub exp: u64,
}

/// `follow.add` / `follow.remove` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowUser {
    /// The user followed or unfollowed.
    pub user: UserId,
}

/// `follow.counts` arguments: whose counts (the caller's when absent).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FollowCountsGet {
    /// The user.
    #[serde(default)]
    pub user: Option<UserId>,
}

/// `follow.rooms` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FollowRoomsGet {
    /// Most rooms to answer (1..=50; default 20).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// Most rooms one `follow.rooms` answers.
pub const MAX_FOLLOW_ROOMS: u32 = 50;
/// Rooms a `follow.rooms` answers when the request gives no `limit`.
pub const DEFAULT_FOLLOW_ROOMS: u32 = 20;

/// One room of a `follow.rooms` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowedRoom {
    /// The room.
    pub room: RoomId,
    /// The followed users in it now.
    pub users: Vec<UserId>,
}

/// The `ok` of `follow.rooms`: rooms with the most followed users first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowedRooms {
    /// The rooms.
    pub rooms: Vec<FollowedRoom>,
}

/// The `ok` of `follow.counts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowCounts {
    /// Users this user follows.
    pub following: u64,
    /// Users following this user.
    pub followers: u64,
}

/// Which side of a user's follows a `follow.list` pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FollowDir {
    /// Users the user follows.
    Following,
    /// Users following the user.
    Followers,
}

/// `follow.list` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowList {
    /// Whose follows (the caller's when absent).
    #[serde(default)]
    pub user: Option<UserId>,
    /// Which side.
    pub dir: FollowDir,
    /// The `next` of the previous page; the newest first when absent.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Entries, 1..=100 (default 50).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// One entry of a `follow.list` page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowEntry {
    /// The other user.
    pub user: UserId,
    /// When the follow was made, milliseconds since the Unix epoch.
    pub at: u64,
    /// The other user's profile, so a list needs no second lookup (left out when empty).
    #[serde(default, skip_serializing_if = "Profile::is_empty")]
    pub p: Profile,
}

/// The `ok` of `follow.list`: newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowPage {
    /// The entries.
    pub users: Vec<FollowEntry>,
    /// The cursor of the next page; absent on the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// The user operations the gateway answers itself.
#[derive(Debug, Clone, PartialEq)]
pub enum UserOp {
    /// `user.update`: change one's own profile (an empty string clears a field).
    Update(Profile),
    /// `user.get`: profiles of up to 100 users.
    Get(UserGet),
    /// `auth.refresh`: extend the connection with a new token.
    Refresh(AuthRefresh),
    /// `follow.add`.
    FollowAdd(FollowUser),
    /// `follow.remove`.
    FollowRemove(FollowUser),
    /// `follow.counts`.
    FollowCounts(FollowCountsGet),
    /// `follow.list`.
    FollowList(FollowList),
    /// `follow.rooms`: the rooms the users one follows are in now.
    FollowRooms(FollowRoomsGet),
}

impl UserOp {
    /// The op's wire name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Update(_) => "user.update",
            Self::Get(_) => "user.get",
            Self::Refresh(_) => "auth.refresh",
            Self::FollowAdd(_) => "follow.add",
            Self::FollowRemove(_) => "follow.remove",
            Self::FollowCounts(_) => "follow.counts",
            Self::FollowList(_) => "follow.list",
            Self::FollowRooms(_) => "follow.rooms",
        }
    }

    /// Decodes `d` for the user op called `name`; `None` when no user op has that name.
    pub(super) fn decode(
        name: &str,
        id: u64,
        d: Option<&RawValue>,
    ) -> Option<Result<Self, DecodeError>> {
        Some(match name {
            "user.update" => args(id, name, d).map(Self::Update),
            "user.get" => args(id, name, d).map(Self::Get),
            "auth.refresh" => args(id, name, d).map(Self::Refresh),
            "follow.add" => args(id, name, d).map(Self::FollowAdd),
            "follow.remove" => args(id, name, d).map(Self::FollowRemove),
            "follow.counts" => args(id, name, d).map(Self::FollowCounts),
            "follow.list" => args(id, name, d).map(Self::FollowList),
            "follow.rooms" => args(id, name, d).map(Self::FollowRooms),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Op, decode_request};

    #[test]
    fn user_ops_decode_with_their_arguments() {
        let r = decode_request(r#"{"id":1,"op":"user.update","d":{"name":"Ann","region":""}}"#)
            .unwrap();
        assert_eq!(
            r.op,
            Op::User(UserOp::Update(Profile {
                name: Some("Ann".into()),
                region: Some(String::new()),
                ..Profile::default()
            }))
        );
        let r = decode_request(r#"{"id":2,"op":"follow.list","d":{"dir":"followers"}}"#).unwrap();
        let Op::User(UserOp::FollowList(l)) = r.op else {
            panic!("not follow.list");
        };
        assert_eq!((l.dir, l.user, l.limit), (FollowDir::Followers, None, None));
        let bad = decode_request(r#"{"id":3,"op":"follow.list","d":{"dir":"sideways"}}"#);
        assert_eq!(bad.unwrap_err().code, crate::ErrorCode::BadFrame);
        let r = decode_request(r#"{"id":4,"op":"follow.counts"}"#).unwrap();
        assert_eq!(r.op.name(), "follow.counts");
        assert_eq!(r.op.room(), None);
    }
}
