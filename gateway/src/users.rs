//! The user operations the gateway answers itself, from the user stores: profiles
//! (`user.update`, `user.get`, the profile loaded at connect), follows (`follow.*`) and token
//! refresh (`auth.refresh`). A profile change reaches the user's sessions here and the rooms
//! they are in through `Core::profile_changed`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use protocol::client::{
    self, AuthRefresh, Expiry, FollowCounts, FollowDir, FollowEntry, FollowList, FollowPage,
    FollowRoomsGet, FollowedRoom, FollowedRooms, Profile, ProfileOk, Profiles, UserGet, UserOp,
    user::{
        DEFAULT_FOLLOW_PAGE, DEFAULT_FOLLOW_ROOMS, MAX_FOLLOW_PAGE, MAX_FOLLOW_ROOMS,
        MAX_FOLLOWING, MAX_USER_GET,
    },
};
use protocol::ids::is_valid_user_id;
use protocol::link::RoomCmd;
use protocol::{ErrorCode, SessionId, UserId};
use serde_json::json;
use storage::StorageError;
use storage::follows::{Cursor, FollowStore, Followed, Side};
use storage::profiles::ProfileStore;
use tracing::warn;

use crate::outbox::{Outbox, clock_ms, unix_ms};
use crate::shared::Core;

/// Shortest time between two `user.update`s of one user on one gateway: each change goes to
/// the room the user is in, to be heard by every member, so a client looping on `user.update`
/// must not become a flood of room events. A person edits a profile far less often.
pub(crate) const PROFILE_CHANGE_INTERVAL: Duration = Duration::from_secs(1);
/// Users remembered by the change gate before those outside the interval are swept.
const GATE_SWEEP_AT: usize = 4096;

/// How long a user's `follow.rooms` answer is reused on this gateway: each fresh answer reads
/// up to 5,000 registry entries (in a cluster, Redis scripts), so a client looping on it must
/// not become that many reads a second. Where people are is a second old at most.
const FOLLOW_ROOMS_FRESH_MS: u64 = 1_000;

/// A user's whole `follow.rooms` answer and when it was read ([`clock_ms`]).
type FollowedAt = (u64, Arc<Vec<FollowedRoom>>);

/// The stores behind the user operations.
#[derive(Debug)]
pub(crate) struct Users {
    /// Stored profiles.
    pub(crate) profiles: ProfileStore,
    /// Who follows whom.
    pub(crate) follows: FollowStore,
    /// Account suspensions (`crate::suspension`).
    pub(crate) suspended: crate::suspension::Suspended,
    /// When each user last changed their profile here ([`clock_ms`]).
    gate: Mutex<HashMap<UserId, u64>>,
    /// Each user's last `follow.rooms` answer, whole (every room), and when it was read.
    followed: Mutex<HashMap<UserId, FollowedAt>>,
}

impl Users {
    pub(crate) fn new(
        profiles: ProfileStore,
        follows: FollowStore,
        suspensions: storage::suspensions::SuspensionStore,
    ) -> Self {
        Self {
            profiles,
            follows,
            suspended: crate::suspension::Suspended::new(suspensions),
            gate: Mutex::new(HashMap::new()),
            followed: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `user` may change their profile at `now_ms` (then it counts as changed).
    fn admit_change(&self, user: &UserId, now_ms: u64) -> bool {
        let interval = u64::try_from(PROFILE_CHANGE_INTERVAL.as_millis()).unwrap_or(u64::MAX);
        let mut last = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
        if last
            .get(user)
            .is_some_and(|t| now_ms < t.saturating_add(interval))
        {
            return false;
        }
        // Swept before the table grows (not on every insert past a size: a table full of
        // users changing now would be swept on each).
        if last.len() >= GATE_SWEEP_AT.max(last.capacity()) {
            last.retain(|_, t| now_ms < t.saturating_add(interval));
        }
        last.insert(user.clone(), now_ms);
        true
    }
}

/// A refused request: its code and message.
type Refusal = (ErrorCode, &'static str);

fn bad(msg: &'static str) -> Refusal {
    (ErrorCode::BadRequest, msg)
}

/// A store failure as the client sees it: retry later, or an internal error (logged here).
pub(crate) fn store_refusal(e: &StorageError) -> Refusal {
    warn!(error = %e, "User store failed.");
    if e.is_retryable() {
        (ErrorCode::Unavailable, "user store unavailable; retry")
    } else {
        (ErrorCode::Internal, "internal error")
    }
}

/// Whether `s` names a user one may follow: a usable id that is not a robot's.
fn check_user(s: &UserId) -> Result<(), Refusal> {
    check_id(s)?;
    if s.is_robot() {
        return Err(bad("robots have no follows"));
    }
    Ok(())
}

/// Whether `s` is a usable user id: anyone's follows may be read (a robot's are empty), and
/// removing a follow that cannot exist removes nothing.
fn check_id(s: &UserId) -> Result<(), Refusal> {
    if !is_valid_user_id(s.as_str()) {
        return Err(bad("user ids are 1..=64 of [A-Za-z0-9-_.:@+|]"));
    }
    Ok(())
}

/// Checks the fields a profile update sets (an empty string clears a field and is not
/// checked).
fn check_update(update: &Profile) -> Result<(), &'static str> {
    let set = |f: &Option<String>| f.clone().filter(|s| !s.is_empty());
    Profile {
        name: set(&update.name),
        avatar: set(&update.avatar),
        region: set(&update.region),
    }
    .validate()
}

impl Core {
    /// Answers a user operation for `session` (of `user`, writing to `outbox`): `auth.refresh`
    /// at once, the store operations on a task of their own.
    pub(crate) fn user_request(
        self: &Arc<Self>,
        session: SessionId,
        user: &UserId,
        outbox: &Arc<Outbox>,
        id: u64,
        op: UserOp,
    ) {
        if let UserOp::Refresh(r) = op {
            let frame = match self.refresh(session, user, outbox, &r) {
                Ok(exp) => client::encode_ok(id, &Expiry { exp }),
                Err((code, msg)) => client::encode_err(Some(id), code, msg),
            };
            self.push_frame(outbox, frame);
            // A new token already inside the warning time is warned now, after the reply.
            let warn = self.config.expiry_warning.as_secs();
            outbox.warn_if_expiring(crate::outbox::unix_ms() / 1000, warn);
            return;
        }
        let core = self.clone();
        let user = user.clone();
        let outbox = outbox.clone();
        self.tracker.spawn(async move {
            let frame = match core.user_answer(&user, id, op).await {
                Ok(ok) => ok,
                Err((code, msg)) => client::encode_err(Some(id), code, msg),
            };
            core.push_frame(&outbox, frame);
        });
    }

    fn push_frame(&self, outbox: &Outbox, frame: Bytes) {
        if let Some(t) = crate::hub::text(frame) {
            outbox.push(t);
        }
    }

    /// `auth.refresh`: a valid token of the same user moves the connection's expiry (never
    /// earlier) and applies its profile claims like a connect; the new expiry is answered.
    fn refresh(
        self: &Arc<Self>,
        session: SessionId,
        user: &UserId,
        outbox: &Outbox,
        r: &AuthRefresh,
    ) -> Result<u64, Refusal> {
        let who = self
            .auth
            .verify(&r.token)
            .map_err(|_| (ErrorCode::Unauthorized, "invalid or expired token"))?;
        if who.user != *user {
            return Err((ErrorCode::Forbidden, "the token is another user's"));
        }
        let exp = outbox.extend_expiry(who.exp);
        self.load_profile(session, who.user, who.profile);
        Ok(exp)
    }

    /// At connect (and refresh): reads the user's stored profile off the socket's path,
    /// stores the token's claims when they changed, and when the user's own fields change what
    /// `session` shows, applies the merged profile (`Core::profile_applied`).
    pub(crate) fn load_profile(
        self: &Arc<Self>,
        session: SessionId,
        user: UserId,
        claims: Arc<Profile>,
    ) {
        let core = self.clone();
        self.tracker
            .spawn(async move { core.apply_stored_profile(session, user, claims).await });
    }

    /// Whether a new session of `user`, whose token claims `claims`, must read the profile
    /// store: when something may be stored for the user, or the claims must be stored. Else
    /// the stored profile is empty and the claims stand as they are.
    pub(crate) fn profile_read_needed(&self, user: &UserId, claims: &Profile) -> bool {
        self.users.profiles.may_have(user) || *claims != Profile::default()
    }

    /// The body of `load_profile`.
    pub(crate) async fn apply_stored_profile(
        self: &Arc<Self>,
        session: SessionId,
        user: UserId,
        claims: Arc<Profile>,
    ) {
        let store = &self.users.profiles;
        let stored = match store.get(&user).await {
            Ok(s) => s,
            Err(e) => {
                warn!(%user, error = %e, "Could not load a stored profile; the token's claims stand.");
                return;
            }
        };
        let merged = claims.merged(&stored.own);
        if stored.claims != *claims {
            match store.set_claims(&user, &claims).await {
                // New claims stand for every field the user never set: the profile others
                // see changed for the user's sessions on every gateway and for their rooms,
                // not only for this session (as one gateway's `user.update` would).
                Ok(()) if stored.effective() != merged => self.profile_changed(&user, &merged),
                Ok(()) => {}
                Err(e) => warn!(%user, error = %e, "Could not store a token's profile claims."),
            }
        }
        match self.hub.profile(session) {
            // Closed meanwhile, or already showing it: nothing to tell.
            None => {}
            Some(now) if *now == merged => {}
            // This session's view changed (at once, whatever the registry answers above; a
            // room hearing the same profile twice changes nothing). With unchanged claims the
            // user's other sessions and their rooms already have the stored profile.
            Some(_) => self.profile_applied(&user, crate::auth::shared_profile(merged)),
        }
    }

    /// `user`'s profile is now `profile` on this gateway: their sessions here send it with
    /// their joins from now on, and each room they are in hears it (`RoomCmd::Profile`). A
    /// change meant for every gateway goes through `Core::profile_changed`, which ends here on
    /// each gateway that holds the user.
    pub(crate) fn profile_applied(&self, user: &UserId, profile: Arc<Profile>) {
        let mut rooms = self.hub.set_profile(user, &profile);
        rooms.sort_by(|a, b| a.1.cmp(&b.1));
        rooms.dedup_by(|a, b| a.1 == b.1);
        for (session, room) in rooms {
            let cmd = RoomCmd::Profile((*profile).clone());
            self.send_command(session, user, None, room, cmd, None);
        }
    }

    /// Validates and stores a profile update of `user` (from `user.update` or the admin API),
    /// applies it, and answers the profile now shown.
    pub(crate) async fn update_profile(
        self: &Arc<Self>,
        user: &UserId,
        update: &Profile,
    ) -> Result<Profile, (ErrorCode, String)> {
        check_update(update).map_err(|m| (ErrorCode::BadRequest, m.to_owned()))?;
        let stored = self
            .users
            .profiles
            .update(user, update)
            .await
            .map_err(|e| {
                let (c, m) = store_refusal(&e);
                (c, m.to_owned())
            })?;
        let p = stored.effective();
        // An empty update changes nothing: no room needs to hear it.
        if !update.is_empty() {
            self.profile_changed(user, &p);
        }
        Ok(p)
    }

    /// The answer to a store-backed user operation of `user`.
    async fn user_answer(
        self: &Arc<Self>,
        user: &UserId,
        id: u64,
        op: UserOp,
    ) -> Result<Bytes, Refusal> {
        let follows = &self.users.follows;
        Ok(match op {
            UserOp::Update(p) => {
                check_update(&p).map_err(|m| (ErrorCode::BadRequest, m))?;
                if !p.is_empty() && !self.users.admit_change(user, clock_ms()) {
                    return Err((
                        ErrorCode::RateLimited,
                        "profile changes: at most one per second",
                    ));
                }
                match self.update_profile(user, &p).await {
                    Ok(p) => client::encode_ok(id, &ProfileOk { p }),
                    Err((code, msg)) => return Ok(client::encode_err(Some(id), code, &msg)),
                }
            }
            UserOp::Get(g) => client::encode_ok(id, &self.profiles_of(g).await?),
            UserOp::FollowAdd(f) => {
                check_user(&f.user)?;
                if f.user == *user {
                    return Err(bad("one cannot follow oneself"));
                }
                let added = match follows
                    .add(user, &f.user, unix_ms(), MAX_FOLLOWING)
                    .await
                    .map_err(|e| store_refusal(&e))?
                {
                    Followed::Added => true,
                    Followed::Already => false,
                    Followed::AtLimit => {
                        return Err((ErrorCode::QuotaExceeded, "following 5000 users already"));
                    }
                };
                client::encode_ok(id, &json!({ "added": added }))
            }
            UserOp::FollowRemove(f) => {
                check_id(&f.user)?;
                let removed = follows
                    .remove(user, &f.user)
                    .await
                    .map_err(|e| store_refusal(&e))?;
                client::encode_ok(id, &json!({ "removed": removed }))
            }
            UserOp::FollowCounts(c) => {
                let whose = c.user.unwrap_or_else(|| user.clone());
                check_id(&whose)?;
                let (following, followers) = follows
                    .counts(&whose)
                    .await
                    .map_err(|e| store_refusal(&e))?;
                client::encode_ok(
                    id,
                    &FollowCounts {
                        following,
                        followers,
                    },
                )
            }
            UserOp::FollowList(l) => client::encode_ok(id, &self.follow_page(user, l).await?),
            UserOp::FollowRooms(r) => client::encode_ok(id, &self.followed_rooms(user, r).await?),
            UserOp::Refresh(_) => {
                return Err((ErrorCode::Internal, "internal error"));
            }
        })
    }

    /// `follow.rooms`: the rooms the users `user` follows are in now, from the user registry,
    /// rooms with more followed users first (then by room id).
    async fn followed_rooms(
        &self,
        user: &UserId,
        r: FollowRoomsGet,
    ) -> Result<FollowedRooms, Refusal> {
        let limit = r.limit.unwrap_or(DEFAULT_FOLLOW_ROOMS);
        if !(1..=MAX_FOLLOW_ROOMS).contains(&limit) {
            return Err(bad("limit: 1..=50"));
        }
        let now = clock_ms();
        let fresh = self
            .users
            .followed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(user)
            .filter(|(at, _)| now < at.saturating_add(FOLLOW_ROOMS_FRESH_MS))
            .map(|(_, rooms)| rooms.clone());
        let all = match fresh {
            Some(rooms) => rooms,
            None => {
                let rooms = Arc::new(self.read_followed_rooms(user).await?);
                let mut cache = self
                    .users
                    .followed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                // Swept of stale answers before the table grows: it holds the users asking now.
                if cache.len() >= GATE_SWEEP_AT.max(cache.capacity()) {
                    cache.retain(|_, (at, _)| now < at.saturating_add(FOLLOW_ROOMS_FRESH_MS));
                }
                cache.insert(user.clone(), (now, rooms.clone()));
                rooms
            }
        };
        let rooms = all.iter().take(limit as usize).cloned().collect();
        Ok(FollowedRooms { rooms })
    }

    /// Every room the users `user` follows are in now, from the user registry, rooms with
    /// more followed users first (then by room id).
    async fn read_followed_rooms(&self, user: &UserId) -> Result<Vec<FollowedRoom>, Refusal> {
        let followees = self
            .users
            .follows
            .following(user, MAX_FOLLOWING)
            .await
            .map_err(|e| store_refusal(&e))?;
        let found = self
            .social
            .registry
            .rooms_of(&followees)
            .await
            .map_err(|e| store_refusal(&e))?;
        let mut by_room: HashMap<protocol::RoomId, Vec<UserId>> = HashMap::new();
        for (u, entry) in found {
            by_room.entry(entry.room).or_default().push(u);
        }
        let mut rooms: Vec<FollowedRoom> = by_room
            .into_iter()
            .map(|(room, mut users)| {
                users.sort();
                FollowedRoom { room, users }
            })
            .collect();
        rooms.sort_by(|a, b| {
            b.users
                .len()
                .cmp(&a.users.len())
                .then_with(|| a.room.cmp(&b.room))
        });
        // No answer lists more: the rest would only sit in the cache.
        rooms.truncate(MAX_FOLLOW_ROOMS as usize);
        Ok(rooms)
    }

    /// `user.get`: the profiles others see of 1..=100 users.
    async fn profiles_of(&self, g: UserGet) -> Result<Profiles, Refusal> {
        if g.users.is_empty() || g.users.len() > MAX_USER_GET {
            return Err(bad("users: 1..=100 ids"));
        }
        if !g.users.iter().all(|u| is_valid_user_id(u.as_str())) {
            return Err(bad("user ids are 1..=64 of [A-Za-z0-9-_.:@+|]"));
        }
        let stored = self
            .users
            .profiles
            .get_many(&g.users)
            .await
            .map_err(|e| store_refusal(&e))?;
        Ok(Profiles {
            profiles: g
                .users
                .into_iter()
                .zip(stored)
                .map(|(u, s)| (u, s.effective()))
                .collect(),
        })
    }

    /// `follow.list`: one page, newest first.
    async fn follow_page(&self, user: &UserId, l: FollowList) -> Result<FollowPage, Refusal> {
        let whose = l.user.unwrap_or_else(|| user.clone());
        check_id(&whose)?;
        let limit = l.limit.unwrap_or(DEFAULT_FOLLOW_PAGE);
        if !(1..=MAX_FOLLOW_PAGE).contains(&limit) {
            return Err(bad("limit: 1..=100"));
        }
        let cursor = match &l.cursor {
            Some(c) => Some(Cursor::decode(c).ok_or(bad("cursor: not one this server gave"))?),
            None => None,
        };
        let side = match l.dir {
            FollowDir::Following => Side::Following,
            FollowDir::Followers => Side::Followers,
        };
        let page = self
            .users
            .follows
            .page(&whose, side, cursor.as_ref(), limit)
            .await
            .map_err(|e| store_refusal(&e))?;
        // The profiles of the page in one read; a list without them beats no list.
        let ids: Vec<UserId> = page.entries.iter().map(|(u, _)| u.clone()).collect();
        let profiles = match self.users.profiles.get_many(&ids).await {
            Ok(p) => p.iter().map(|s| s.effective()).collect(),
            Err(e) => {
                warn!(error = %e, "Could not read the profiles of a follow page.");
                Vec::new()
            }
        };
        let mut profiles = profiles.into_iter();
        Ok(FollowPage {
            users: page
                .entries
                .into_iter()
                .map(|(user, at)| FollowEntry {
                    user,
                    at,
                    p: profiles.next().unwrap_or_default(),
                })
                .collect(),
            next: page.next.map(|c| c.encode()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_profile_change_per_user_per_interval_passes_the_gate() {
        let dir = tempfile::tempdir().expect("temp dir");
        let users = Users::new(
            ProfileStore::sqlite(dir.path()).await.expect("profiles"),
            FollowStore::sqlite(dir.path()).await.expect("follows"),
            storage::suspensions::SuspensionStore::sqlite(dir.path())
                .await
                .expect("suspensions"),
        );
        let (ann, bob) = (UserId::from("ann"), UserId::from("bob"));
        assert!(users.admit_change(&ann, 10_000));
        assert!(!users.admit_change(&ann, 10_999));
        assert!(users.admit_change(&bob, 10_999), "per user");
        assert!(users.admit_change(&ann, 11_000));
        // Once the table is full (its capacity, at least the sweep size), users outside the
        // interval are forgotten before it grows; not on every change before that.
        let full = |u: &Users| {
            let g = u.gate.lock().expect("gate");
            g.len() >= GATE_SWEEP_AT.max(g.capacity())
        };
        let mut i = 0;
        while !full(&users) {
            assert!(users.admit_change(&UserId::from(format!("u{i}")), 20_000));
            i += 1;
            assert!(i < 1_000_000, "the table never filled");
        }
        assert!(users.admit_change(&UserId::from("late"), 30_000));
        assert_eq!(users.gate.lock().map(|g| g.len()).unwrap_or(0), 1);
    }
}
