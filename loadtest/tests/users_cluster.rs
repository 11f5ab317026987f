//! Users across gateways, with real processes: a profile set through one gateway (by its
//! owner or by an operator) is read through the other, and follows made on one are counted
//! and listed on the other (both live in Redis).
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use kit::cluster::{Cluster, ClusterOptions};
use serde_json::json;

#[tokio::test]
async fn profiles_and_follows_set_on_one_gateway_are_read_on_the_other() {
    let cluster = Cluster::start(ClusterOptions {
        shards: 1,
        gateways: 2,
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
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
