//! The user stores (profiles, follows) against both engines: a real redis-server and SQLite in
//! a temp dir run the same contract functions.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::HashSet;

use kit::redis::RedisServer;
use protocol::UserId;
use protocol::client::Profile;
use storage::follows::{Cursor, FollowStore, Followed, Side};
use storage::profiles::{ProfileStore, StoredProfile};
use storage::redis::Redis;

fn u(s: &str) -> UserId {
    UserId::from(s)
}

fn p(name: Option<&str>, avatar: Option<&str>, region: Option<&str>) -> Profile {
    Profile {
        name: name.map(Into::into),
        avatar: avatar.map(Into::into),
        region: region.map(Into::into),
    }
}

async fn profiles_contract(s: &ProfileStore) {
    let ann = u("ann");
    assert_eq!(s.get(&ann).await.unwrap().effective(), Profile::default());
    // Claims show until the user's own fields override or clear them.
    s.set_claims(&ann, &p(Some("Ann C"), Some("https://a/c.png"), Some("eu")))
        .await
        .unwrap();
    let after = s.update(&ann, &p(Some("Ann"), None, None)).await.unwrap();
    assert_eq!(
        after.effective(),
        p(Some("Ann"), Some("https://a/c.png"), Some("eu"))
    );
    // Two updates of different fields both stay; an empty string clears, over the claim too.
    s.update(&ann, &p(None, None, Some("sa"))).await.unwrap();
    let after = s.update(&ann, &p(None, Some(""), None)).await.unwrap();
    assert_eq!(after.effective(), p(Some("Ann"), None, Some("sa")));
    // New claims replace the old ones, and the user's own fields still win.
    s.set_claims(&ann, &p(Some("Other"), None, None))
        .await
        .unwrap();
    let got = s.get(&ann).await.unwrap();
    assert_eq!(got.claims, p(Some("Other"), None, None));
    assert_eq!(got.effective(), p(Some("Ann"), None, Some("sa")));
    let many = s.get_many(&[u("nobody"), ann.clone()]).await.unwrap();
    assert_eq!(many.len(), 2);
    assert_eq!(many[0].effective(), Profile::default());
    assert_eq!(many[1].effective(), p(Some("Ann"), None, Some("sa")));
}

async fn follows_contract(s: &FollowStore) {
    let (a, b, c) = (u("a"), u("b"), u("c"));
    assert_eq!(s.add(&a, &b, 1000, 3).await.unwrap(), Followed::Added);
    assert_eq!(
        s.add(&a, &b, 2000, 3).await.unwrap(),
        Followed::Already,
        "following twice is one follow"
    );
    assert_eq!(s.add(&a, &c, 1000, 3).await.unwrap(), Followed::Added);
    assert_eq!(s.add(&c, &b, 1500, 3).await.unwrap(), Followed::Added);
    assert_eq!(s.counts(&a).await.unwrap(), (2, 0));
    assert_eq!(s.counts(&b).await.unwrap(), (0, 2));
    // The bound: a third follow fits, a fourth does not.
    assert_eq!(s.add(&a, &u("d"), 3000, 3).await.unwrap(), Followed::Added);
    assert_eq!(
        s.add(&a, &u("e"), 3001, 3).await.unwrap(),
        Followed::AtLimit
    );
    assert_eq!(s.counts(&a).await.unwrap(), (3, 0));
    // Newest first; ties by user id, descending.
    let page = s.page(&a, Side::Following, None, 10).await.unwrap();
    let got: Vec<(&str, u64)> = page.entries.iter().map(|(u, t)| (u.as_str(), *t)).collect();
    assert_eq!(got, [("d", 3000), ("c", 1000), ("b", 1000)]);
    assert_eq!(page.next, None);
    let fans = s.page(&b, Side::Followers, None, 10).await.unwrap();
    assert_eq!(fans.entries, [(c.clone(), 1500), (a.clone(), 1000)]);
    let all = s.following(&a, 10).await.unwrap();
    assert_eq!(all, [u("d"), c.clone(), b.clone()]);
    assert_eq!(s.following(&a, 1).await.unwrap(), [u("d")]);
    assert!(s.following(&a, 0).await.unwrap().is_empty());
    assert!(s.following(&u("nobody"), 10).await.unwrap().is_empty());
    assert!(s.remove(&a, &b).await.unwrap());
    assert!(
        !s.remove(&a, &b).await.unwrap(),
        "removing twice is one removal"
    );
    assert_eq!(s.counts(&b).await.unwrap(), (0, 1));
    assert_eq!(s.counts(&a).await.unwrap(), (2, 0));
}

/// Follower `i` of the paging test: ids of mixed case and punctuation, so that ties (several
/// in one millisecond) are ordered by bytes on both engines, not by a locale.
fn fan(i: u64) -> UserId {
    let stem = ["fan", "Fan", "f_an", "f-an", "f.an", "f:an"][(i % 6) as usize];
    u(&format!("{stem}{i:02}"))
}

/// Pages of 7 through 60 followers, many of them made in the same millisecond, while follows
/// are added (newer, so ahead of the cursor) and removed between pages: every follower that
/// stayed the whole scan is listed exactly once, in order.
async fn paging_contract(s: &FollowStore) {
    let star = u("star");
    for i in 0..60u64 {
        let at = 10_000 + i / 4;
        assert_eq!(
            s.add(&fan(i), &star, at, 10).await.unwrap(),
            Followed::Added
        );
    }
    let mut seen = Vec::new();
    let mut cursor: Option<Cursor> = None;
    let mut removed = HashSet::new();
    for round in 0..100u64 {
        let page = s
            .page(&star, Side::Followers, cursor.as_ref(), 7)
            .await
            .unwrap();
        seen.extend(page.entries.iter().cloned());
        // Churn: a new follower (newest, ahead of the cursor) and one removal further back.
        let late = u(&format!("late{round}"));
        s.add(&late, &star, 20_000 + round, 10).await.unwrap();
        let gone = fan(round * 3 % 60);
        if s.remove(&gone, &star).await.unwrap() {
            removed.insert(gone);
        }
        match page.next {
            Some(c) => cursor = Some(Cursor::decode(&c.encode()).unwrap()),
            None => break,
        }
    }
    let ids: Vec<&UserId> = seen.iter().map(|(u, _)| u).collect();
    let unique: HashSet<&UserId> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "no entry twice");
    for i in 0..60u64 {
        let f = fan(i);
        if !removed.contains(&f) {
            assert!(unique.contains(&f), "{f} stayed and was skipped");
        }
    }
    let order: Vec<(u64, &UserId)> = seen.iter().map(|(u, t)| (*t, u)).collect();
    let mut sorted = order.clone();
    sorted.sort_by(|x, y| y.cmp(x));
    assert_eq!(order, sorted, "newest first");
    assert!(!ids.iter().any(|u| u.as_str().starts_with("late")));
}

#[tokio::test]
async fn profiles_on_sqlite_and_redis() {
    let dir = tempfile::tempdir().unwrap();
    profiles_contract(&ProfileStore::sqlite(dir.path()).await.unwrap()).await;
    let again = ProfileStore::sqlite(dir.path()).await.unwrap();
    assert_eq!(
        again
            .get(&u("ann"))
            .await
            .unwrap()
            .effective()
            .name
            .as_deref(),
        Some("Ann"),
        "durable across a reopen"
    );
    let redis = RedisServer::start().await.unwrap();
    let r = Redis::connect(&redis.url()).await.unwrap();
    profiles_contract(&ProfileStore::redis(&r)).await;
}

/// The SQLite profile store knows which users have a row, so a connect of anyone else reads
/// nothing; a write (own fields or claims) adds the user, and a reopened store knows them
/// again. Redis always reads.
#[tokio::test]
async fn only_users_with_a_stored_profile_are_read_for_at_connect() {
    let dir = tempfile::tempdir().unwrap();
    let s = ProfileStore::sqlite(dir.path()).await.unwrap();
    assert!(!s.may_have(&u("ann")) && !s.may_have(&u("bob")));
    assert_eq!(s.get(&u("ann")).await.unwrap(), StoredProfile::default());
    s.update(&u("ann"), &p(Some("Ann"), None, None))
        .await
        .unwrap();
    s.set_claims(&u("bob"), &p(None, None, Some("eu")))
        .await
        .unwrap();
    assert!(s.may_have(&u("ann")) && s.may_have(&u("bob")) && !s.may_have(&u("cy")));
    let again = ProfileStore::sqlite(dir.path()).await.unwrap();
    assert!(again.may_have(&u("ann")) && again.may_have(&u("bob")) && !again.may_have(&u("cy")));
    // A page of several users reads those with rows and answers the others empty.
    let all = again
        .get_many(&[u("cy"), u("bob"), u("ann")])
        .await
        .unwrap();
    assert_eq!(all[0], StoredProfile::default());
    assert_eq!(all[1].claims.region.as_deref(), Some("eu"));
    assert_eq!(all[2].own.name.as_deref(), Some("Ann"));
    let redis = RedisServer::start().await.unwrap();
    let r = Redis::connect(&redis.url()).await.unwrap();
    assert!(ProfileStore::redis(&r).may_have(&u("cy")));
}

#[tokio::test]
async fn follows_on_sqlite_and_redis() {
    let dir = tempfile::tempdir().unwrap();
    let sq = FollowStore::sqlite(dir.path()).await.unwrap();
    follows_contract(&sq).await;
    paging_contract(&sq).await;
    // Profiles and follows share users.db.
    ProfileStore::sqlite(dir.path()).await.unwrap();
    let again = FollowStore::sqlite(dir.path()).await.unwrap();
    assert_eq!(again.counts(&u("a")).await.unwrap(), (2, 0), "durable");
    let redis = RedisServer::start().await.unwrap();
    let r = Redis::connect(&redis.url()).await.unwrap();
    let rs = FollowStore::redis(&r);
    follows_contract(&rs).await;
    paging_contract(&rs).await;
}

#[test]
fn cursors_round_trip_and_refuse_garbage() {
    let c = Cursor {
        at: 17,
        user: u("u:1"),
    };
    assert_eq!(Cursor::decode(&c.encode()), Some(c));
    assert_eq!(Cursor::decode("x:u1"), None);
    assert_eq!(Cursor::decode("12"), None);
    assert_eq!(Cursor::decode("12:bad id"), None);
}
