//! Users across gateways, with real processes: a profile set through one gateway (by its
//! owner or by an operator) is read through the other, and follows made on one are counted
//! and listed on the other (both live in Redis).
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use kit::cluster::Cluster;
use serde_json::json;

/// One shard and two gateways: what one gateway stores, the other reads.
async fn two_gateways() -> Cluster {
    Cluster::of(1, 2).await.unwrap()
}

#[tokio::test]
async fn profiles_and_follows_set_on_one_gateway_are_read_on_the_other() {
    let cluster = two_gateways().await;
    let token = Some(cluster.admin_token.as_str());
    let (g0, g1) = (cluster.gateways[0].admin, cluster.gateways[1].admin);
    let set = kit::admin::set_profile(g1, token, "ann", json!({"name": "Ann", "region": "eu"}))
        .await
        .unwrap();
    assert_eq!(set.status, 200, "{}", set.body);
    let read = kit::admin::profile(g0, token, "ann").await.unwrap();
    assert_eq!(
        read.json()["profile"],
        json!({"name": "Ann", "region": "eu"})
    );

    let mut ann = cluster.connect(1, "ann").await.unwrap();
    let mut star = cluster.connect(0, "star").await.unwrap();
    let ok = ann
        .request(
            "user.update",
            json!({"avatar": "https://cdn.example/ann.png", "region": ""}),
        )
        .await
        .unwrap();
    assert_eq!(
        ok["p"],
        json!({"name": "Ann", "avatar": "https://cdn.example/ann.png"})
    );
    let got = star
        .request("user.get", json!({"users": ["ann"]}))
        .await
        .unwrap();
    assert_eq!(
        got["profiles"]["ann"],
        json!({"name": "Ann", "avatar": "https://cdn.example/ann.png"})
    );

    let added = ann
        .request("follow.add", json!({"user": "star"}))
        .await
        .unwrap();
    assert_eq!(added["added"], json!(true));
    let again = ann
        .request("follow.add", json!({"user": "star"}))
        .await
        .unwrap();
    assert_eq!(again["added"], json!(false));
    let counts = star.request("follow.counts", json!({})).await.unwrap();
    assert_eq!(counts, json!({"following": 0, "followers": 1}));
    let fans = star
        .request("follow.list", json!({"dir": "followers"}))
        .await
        .unwrap();
    assert_eq!(fans["users"].as_array().unwrap().len(), 1);
    assert_eq!(fans["users"][0]["user"], json!("ann"));
    star.request("follow.add", json!({"user": "ann"}))
        .await
        .unwrap();
    let mine = ann.request("follow.counts", json!({})).await.unwrap();
    assert_eq!(mine, json!({"following": 1, "followers": 1}));
}

/// Asks `follow.rooms` until `want` holds, for at most 10 s (a join's registry entry is
/// written just after its reply).
async fn followed_rooms_until(
    c: &mut kit::client::Client,
    want: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let got = c.request("follow.rooms", json!({})).await.unwrap();
        if want(&got) || tokio::time::Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn followed_users_rooms_and_profile_changes_reach_across_gateways() {
    let cluster = two_gateways().await;
    let mut fan = cluster.connect(0, "fan").await.unwrap();
    let mut bob = cluster.connect(1, "bob").await.unwrap();
    let mut cy = cluster.connect(1, "cy").await.unwrap();
    let mut dee = cluster.connect(0, "dee").await.unwrap();
    for u in ["bob", "cy", "dee"] {
        fan.request("follow.add", json!({"user": u})).await.unwrap();
    }
    let empty = fan.request("follow.rooms", json!({})).await.unwrap();
    assert_eq!(empty, json!({"rooms": []}));

    let r1 = bob.create_room(json!({"room": "fr1"})).await.unwrap();
    bob.join(&r1, false, None).await.unwrap();
    cy.join(&r1, false, None).await.unwrap();
    let r2 = dee.create_room(json!({"room": "fr2"})).await.unwrap();
    dee.join(&r2, false, None).await.unwrap();
    let want = json!({"rooms": [
        {"room": "fr1", "users": ["bob", "cy"]},
        {"room": "fr2", "users": ["dee"]},
    ]});
    let got = followed_rooms_until(&mut fan, |v| *v == want).await;
    assert_eq!(got, want, "rooms with more followed users first");

    // A leave takes the user out of the answer.
    cy.request("room.leave", json!({"room": "fr1"}))
        .await
        .unwrap();
    let want = json!({"rooms": [
        {"room": "fr1", "users": ["bob"]},
        {"room": "fr2", "users": ["dee"]},
    ]});
    let got = followed_rooms_until(&mut fan, |v| *v == want).await;
    assert_eq!(got, want);
    let one = fan
        .request("follow.rooms", json!({"limit": 1}))
        .await
        .unwrap();
    assert_eq!(one["rooms"].as_array().unwrap().len(), 1);
    let bad = fan.request("follow.rooms", json!({"limit": 0})).await;
    assert!(bad.is_err(), "limit 0 is refused");

    // An operator's profile change through gateway 0 reaches bob's room through bob's
    // gateway (1): dee, a member watching from gateway 0, sees `member.update`.
    dee.join(&r1, false, None).await.unwrap();
    let token = Some(cluster.admin_token.as_str());
    let set = kit::admin::set_profile(
        cluster.gateways[0].admin,
        token,
        "bob",
        json!({"name": "Bobby"}),
    )
    .await
    .unwrap();
    assert_eq!(set.status, 200, "{}", set.body);
    let ev = dee
        .next_event_named("member.update", std::time::Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(ev.d, json!({"user": "bob", "p": {"name": "Bobby"}}));
}

/// A token for `user` signed with the cluster's secret, claiming display name `name`.
fn token_named(cluster: &Cluster, user: &str, name: &str) -> String {
    let exp = jsonwebtoken::get_current_timestamp() + 600;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"sub": user, "exp": exp, "name": name}),
        &jsonwebtoken::EncodingKey::from_secret(&cluster.secret).unwrap(),
    )
    .unwrap()
}

/// New profile claims (a later token) change what others see of a user who never set the
/// field: on every gateway, so a room the user is in through another gateway hears it too,
/// as it would standalone (PROTOCOL.md, section 14.1).
#[tokio::test]
async fn a_later_tokens_claims_reach_the_users_room_through_another_gateway() {
    let cluster = two_gateways().await;
    let url = |g: usize| cluster.gateways[g].url.clone();
    let mut ann = kit::client::connect(&url(0), Some(&token_named(&cluster, "ann", "Ann")))
        .await
        .unwrap();
    let room = ann.create_room(json!({"room": "claims"})).await.unwrap();
    ann.join(&room, false, None).await.unwrap();
    let mut dee = cluster.connect(0, "dee").await.unwrap();
    dee.join(&room, false, None).await.unwrap();
    let list = dee
        .request("member.list", json!({"room": "claims"}))
        .await
        .unwrap();
    assert_eq!(list["members"][0]["p"], json!({"name": "Ann"}), "{list}");
    // Ann's second device, through the other gateway, with a token that claims a new name.
    let _ann2 = kit::client::connect(&url(1), Some(&token_named(&cluster, "ann", "Annie")))
        .await
        .unwrap();
    let ev = dee
        .next_event_named("member.update", std::time::Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(ev.d, json!({"user": "ann", "p": {"name": "Annie"}}));
    let got = dee
        .request("user.get", json!({"users": ["ann"]}))
        .await
        .unwrap();
    assert_eq!(got["profiles"]["ann"], json!({"name": "Annie"}));
}
