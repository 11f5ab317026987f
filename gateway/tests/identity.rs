//! User ids as identity providers issue them (`auth0|5f7c8ec7`, `ann+tag@example.com`) work
//! end to end on a standalone node: connecting, a room with its chat, a direct message, a
//! follow, and the admin API's wallet paths with the id `%`-encoded. Room ids keep the narrower
//! rule, and a subject outside the user-id rule (or a robot's) is still refused at the upgrade.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use gateway::GatewayConfig;
use kit::client::{self, ClientError};
use protocol::{ErrorCode, RoomId};
use serde_json::json;
use shard::ShardConfig;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"test-secret-for-identity";
const ADMIN: &str = "admin-token";
const WAIT: Duration = Duration::from_secs(5);
const AUTH0: &str = "auth0|5f7c8ec7";
const EMAIL: &str = "ann+tag@example.com";

async fn start() -> Server {
    Server::launch(
        SECRET,
        ADMIN,
        GatewayConfig::default(),
        ShardConfig::default(),
    )
    .await
}

#[tokio::test]
async fn identity_provider_subjects_connect_chat_message_and_follow() {
    let s = start().await;
    let mut a = s.connect(AUTH0).await;
    let mut e = s.connect(EMAIL).await;
    let room = RoomId::from("idp-room");
    a.join(&room, false, None).await.unwrap();
    e.join(&room, false, None).await.unwrap();
    let joined = a.next_event_named("member.join", WAIT).await.unwrap();
    assert_eq!(joined.d["user"], EMAIL);
    e.chat(&room, "hello").await.unwrap();
    let chat = a.next_event_named("chat", WAIT).await.unwrap();
    assert_eq!(
        (chat.d["from"].as_str(), chat.d["text"].as_str()),
        (Some(EMAIL), Some("hello"))
    );
    // A direct message each way names both ids as they are.
    a.request(
        "im.send",
        json!({"to": EMAIL, "text": "hi", "req_id": "k1"}),
    )
    .await
    .unwrap();
    let im = e.next_event_named("im", WAIT).await.unwrap();
    assert_eq!(
        (im.d["from"].as_str(), im.d["to"].as_str()),
        (Some(AUTH0), Some(EMAIL))
    );
    e.request("follow.add", json!({"user": AUTH0}))
        .await
        .unwrap();
    let counts = a
        .request("follow.counts", json!({"user": AUTH0}))
        .await
        .unwrap();
    assert_eq!(counts["followers"], 1, "{counts}");
    let list = a
        .request("follow.list", json!({"dir": "followers"}))
        .await
        .unwrap();
    assert_eq!(list["users"][0]["user"], EMAIL, "{list}");
    // Room ids keep the narrower rule.
    let err = a
        .request("room.join", json!({"room": "auth0|room"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::BadRequest));
    s.stop().await;
}

#[tokio::test]
async fn the_admin_api_takes_such_ids_percent_encoded() {
    let s = start().await;
    let path = "/admin/wallets/auth0%7C5f7c8ec7";
    let grant = kit::admin::call(
        s.admin,
        "POST",
        &format!("{path}/grant"),
        Some(ADMIN),
        Some(json!({"amount": 25, "key": "seed"})),
    )
    .await
    .unwrap();
    assert_eq!(grant.status, 200, "{}", grant.body);
    let wallet = kit::admin::get(s.admin, path, Some(ADMIN)).await.unwrap();
    assert_eq!(wallet.json()["balance"], 25, "{}", wallet.body);
    let mut a = s.connect(AUTH0).await;
    let own = a.request("wallet.balance", json!({})).await.unwrap();
    assert_eq!(own["balance"], 25);
    s.stop().await;
}

#[tokio::test]
async fn subjects_outside_the_user_id_rule_are_refused_at_the_upgrade() {
    let s = start().await;
    for sub in ["has space", "a/b", "bot:ann", "x{y}"] {
        let token = s.token(sub);
        match client::connect(&s.url, Some(&token)).await {
            Err(ClientError::Refused(status)) => assert_eq!(status, 401, "{sub}"),
            other => panic!("{sub}: {:?}", other.map(|_| "connected")),
        }
    }
    s.stop().await;
}
