//! The pinned chat line end to end on a standalone node: the staff pin a member's line, every
//! member gets `chat.pin` and a newcomer's snapshot carries it; a member may not pin; the
//! line's recall takes the pin down; and a pin outlives a restart of the node.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use gateway::GatewayConfig;
use kit::client::Client;
use protocol::ErrorCode;
use serde_json::{Value, json};
use shard::ShardConfig;

use crate::support::server::Server;

const SECRET: &[u8] = b"test-secret-for-pinned-lines";
const WAIT: Duration = Duration::from_secs(5);

async fn pinned_event(c: &mut Client) -> Value {
    c.next_event_named("chat.pin", WAIT).await.unwrap().d
}

#[tokio::test]
async fn the_staff_pin_a_line_that_newcomers_see_until_it_is_taken_back() {
    let s = Server::launch(
        SECRET,
        "pins-admin",
        GatewayConfig::default(),
        ShardConfig::default(),
    )
    .await;
    let mut host = s.connect("host").await;
    let room = host.create_room(json!({"room": "pins"})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut bob = s.connect("bob").await;
    bob.join(&room, false, None).await.unwrap();
    let line = bob.chat(&room, "songs at nine").await.unwrap();

    let ok = host
        .request("chat.pin", json!({"room": room, "seq": line}))
        .await
        .unwrap();
    assert_eq!(ok, json!({}));
    let ev = pinned_event(&mut bob).await;
    assert_eq!(
        (
            &ev["by"],
            &ev["line"]["seq"],
            &ev["line"]["from"],
            &ev["line"]["text"]
        ),
        (
            &json!("host"),
            &json!(line),
            &json!("bob"),
            &json!("songs at nine")
        )
    );
    let mut cid = s.connect("cid").await;
    let joined = cid.join(&room, false, None).await.unwrap();
    assert_eq!(
        joined["snapshot"]["pinned"], ev["line"],
        "a newcomer sees it"
    );
    let refused = bob
        .request("chat.pin", json!({"room": room, "seq": line}))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::Forbidden));

    // Bob takes his line back: the pin comes down with it.
    bob.request("chat.recall", json!({"room": room, "seq": line}))
        .await
        .unwrap();
    let down = pinned_event(&mut cid).await;
    assert_eq!(down, json!({"by": "bob", "line": null}));

    // A pin is kept with the room: after a restart the room's snapshot still has it.
    let notice = host.chat(&room, "welcome, read the rules").await.unwrap();
    host.request("chat.pin", json!({"room": room, "seq": notice}))
        .await
        .unwrap();
    let s = s.relaunch().await;
    let mut dan = s.connect("dan").await;
    let joined = dan.join(&room, false, None).await.unwrap();
    assert_eq!(
        (
            &joined["snapshot"]["pinned"]["text"],
            &joined["snapshot"]["pinned"]["by"]
        ),
        (&json!("welcome, read the rules"), &json!("host"))
    );
    s.stop().await;
}
