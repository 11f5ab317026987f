//! Direct messages from the app's backend (`POST /admin/users/{user}/messages`) on a
//! standalone node: delivered live and from the backlog as `im` events marked `system`, with
//! the sending account's stored profile; idempotent by `req_id`; in `im.history`; refused
//! for bad bodies and blocks. A member's own message is never marked `system`. A moderator
//! reads a user's conversations (`GET /admin/users/{user}/messages`).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use gateway::GatewayConfig;
use kit::admin::{self, AdminResponse};
use kit::client::Client;
use serde_json::{Value, json};
use shard::ShardConfig;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"test-secret-for-system-messages";
const ADMIN: &str = "system-messages-admin";
const WAIT: Duration = Duration::from_secs(5);

async fn call(s: &Server, method: &str, path: &str, body: Value) -> AdminResponse {
    admin::call(s.admin, method, path, Some(ADMIN), Some(body))
        .await
        .unwrap()
}

async fn next_im(c: &mut Client) -> Value {
    c.next_event_named("im", WAIT).await.unwrap().d
}

#[tokio::test]
async fn the_app_messages_a_user_as_its_own_account_marked_system() {
    let s = Server::launch(
        SECRET,
        ADMIN,
        GatewayConfig::default(),
        ShardConfig::default(),
    )
    .await;
    let named = call(
        &s,
        "PUT",
        "/admin/users/official/profile",
        json!({"name": "Chorus Team"}),
    )
    .await;
    assert_eq!(named.status, 200, "{}", named.body);
    let mut bob = s.connect("bob").await;

    // Live, typed, with the account's profile, marked system.
    let notice = json!({
        "from": "official", "text": "Your report was handled", "req_id": "n1",
        "type": "report.result", "data": {"report": 7, "action": "warned"}
    });
    let sent = call(&s, "POST", "/admin/users/bob/messages", notice.clone()).await;
    assert_eq!(sent.status, 200, "{}", sent.body);
    let sent = sent.json();
    let got = next_im(&mut bob).await;
    assert_eq!(
        got,
        json!({
            "id": sent["id"], "at": sent["at"], "from": "official", "to": "bob",
            "text": "Your report was handled", "type": "report.result",
            "data": {"report": 7, "action": "warned"}, "p": {"name": "Chorus Team"},
            "system": true
        })
    );

    // A retry answers the first message and delivers nothing; another body under the key is
    // a conflict.
    let again = call(&s, "POST", "/admin/users/bob/messages", notice).await;
    assert_eq!((again.status, again.json()), (200, sent.clone()));
    let other = json!({"from": "official", "text": "something else", "req_id": "n1"});
    let conflict = call(&s, "POST", "/admin/users/bob/messages", other).await;
    assert_eq!(conflict.status, 409, "{}", conflict.body);
    assert_eq!(conflict.json()["code"], "IDEMPOTENCY_CONFLICT");

    // A member's message is never marked, even one that asks to be.
    let mut ann = s.connect("ann").await;
    ann.request(
        "im.send",
        json!({"to": "bob", "text": "hi", "req_id": "a1", "system": true}),
    )
    .await
    .unwrap();
    let from_ann = next_im(&mut bob).await;
    assert_eq!(
        (&from_ann["from"], from_ann.get("system")),
        (&json!("ann"), None),
        "the next delivery is ann's, unmarked (the app's retry delivered nothing)"
    );

    // An offline user gets it from the backlog on connect; history keeps the mark.
    let plain = json!({"from": "official", "text": "Welcome to Chorus", "req_id": "w1"});
    let welcome = call(&s, "POST", "/admin/users/carol/messages", plain).await;
    assert_eq!(welcome.status, 200, "{}", welcome.body);
    let mut carol = s.connect("carol").await;
    let owed = next_im(&mut carol).await;
    assert_eq!(
        (&owed["id"], &owed["system"], &owed["text"]),
        (
            &welcome.json()["id"],
            &json!(true),
            &json!("Welcome to Chorus")
        )
    );
    let history = carol.request("im.history", json!({})).await.unwrap();
    assert_eq!(history["messages"][0]["system"], true, "{history}");

    // Blocks hold: a user who blocked the account gets nothing from it.
    carol
        .request("im.block", json!({"user": "official"}))
        .await
        .unwrap();
    let body = json!({"from": "official", "text": "Still there?", "req_id": "w2"});
    let blocked = call(&s, "POST", "/admin/users/carol/messages", body).await;
    assert_eq!(blocked.status, 409, "{}", blocked.body);
    assert_eq!(blocked.json()["code"], "BLOCKED");

    // A moderator reads a user's conversations as the user would (`im.history`'s page).
    let read = |path: &'static str| admin::get(s.admin, path, Some(ADMIN));
    let bobs = read("/admin/users/bob/messages").await.unwrap();
    assert_eq!(bobs.status, 200, "{}", bobs.body);
    let texts: Vec<Value> = bobs.json()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].clone())
        .collect();
    assert_eq!(
        texts,
        [json!("hi"), json!("Your report was handled")],
        "newest first"
    );
    let with = read("/admin/users/bob/messages?with=official&limit=1")
        .await
        .unwrap();
    assert_eq!(
        (
            with.json()["messages"][0]["system"].clone(),
            with.json()["next"].clone()
        ),
        (json!(true), Value::Null)
    );
    for bad in [
        "/admin/users/bob/messages?limit=0",
        "/admin/users/bob/messages?limit=x",
        "/admin/users/bob/messages?before=x",
        "/admin/users/bob/messages?with=not%20valid",
    ] {
        assert_eq!(read(bad).await.unwrap().status, 400, "{bad}");
    }

    // Bad calls.
    let refused = [
        json!({"from": "official", "text": "", "req_id": "x"}),
        json!({"from": "bob", "text": "to myself", "req_id": "x"}),
        json!({"from": "not valid!", "text": "hi", "req_id": "x"}),
        json!({"from": "bot:greeter", "text": "hi", "req_id": "x"}),
        json!({"from": "official", "text": "hi"}),
        json!({"from": "official", "text": "hi", "req_id": "x", "data": {"a": 1}}),
        json!({"from": "official", "text": "hi", "req_id": "x", "extra": 1}),
    ];
    for body in refused {
        let r = call(&s, "POST", "/admin/users/bob/messages", body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
    }
    let to_robot = json!({"from": "official", "text": "hi", "req_id": "x"});
    let r = call(&s, "POST", "/admin/users/bot:greeter/messages", to_robot).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let no_token = admin::call(
        s.admin,
        "POST",
        "/admin/users/bob/messages",
        None,
        Some(json!({"from": "official", "text": "hi", "req_id": "x"})),
    )
    .await
    .unwrap();
    assert_eq!(no_token.status, 401);
    s.stop().await;
}
