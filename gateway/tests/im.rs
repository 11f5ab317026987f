//! Direct messages end to end on a standalone node: live delivery to every connection of the
//! recipient and the sender's other connections, the backlog on connect (in order, once),
//! idempotent retries, blocks, history paging, typed messages (a room invitation) and the
//! limits.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use gateway::GatewayConfig;
use kit::client::{Client, ClientError};
use protocol::ErrorCode;
use serde_json::{Value, json};
use shard::ShardConfig;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"test-secret-for-im";
const WAIT: Duration = Duration::from_secs(5);

async fn start(tune: impl FnOnce(&mut GatewayConfig)) -> Server {
    let mut gateway = GatewayConfig {
        drain_window: Duration::from_millis(100),
        ..GatewayConfig::default()
    };
    tune(&mut gateway);
    Server::launch(SECRET, "admin-token", gateway, ShardConfig::default()).await
}

async fn send(c: &mut Client, to: &str, text: &str, req: &str) -> Result<Value, ClientError> {
    c.request("im.send", json!({"to": to, "text": text, "req_id": req}))
        .await
}

async fn next_im(c: &mut Client) -> Value {
    c.next_event_named("im", WAIT).await.unwrap().d
}

fn code(r: Result<Value, ClientError>) -> ErrorCode {
    r.unwrap_err().code().unwrap()
}

#[tokio::test]
async fn a_message_reaches_every_connection_of_the_recipient_and_the_senders_other_ones() {
    let s = start(|_| {}).await;
    let mut ann = s.connect("ann").await;
    let mut ann2 = s.connect("ann").await;
    let mut bob = s.connect("bob").await;
    let mut bob2 = s.connect("bob").await;
    let ok = send(&mut ann, "bob", "hello bob", "k1").await.unwrap();
    let id = ok["id"].as_u64().unwrap();
    for c in [&mut bob, &mut bob2, &mut ann2] {
        let m = next_im(c).await;
        assert_eq!(m["id"].as_u64(), Some(id));
        assert_eq!(
            (m["from"].as_str(), m["to"].as_str()),
            (Some("ann"), Some("bob"))
        );
        assert_eq!(m["text"], "hello bob");
        assert_eq!(m["at"], ok["at"]);
        assert!(m.get("p").is_none(), "no profile, no p: {m}");
    }
    // The sending connection has the reply; it gets no echo.
    ann.request("ping", json!({})).await.unwrap();
    assert!(ann.queued_events().iter().all(|e| e.ev != "im"));
    s.stop().await;
}

#[tokio::test]
async fn an_offline_user_gets_the_messages_on_connect_in_order_and_only_once() {
    let s = start(|_| {}).await;
    let mut ann = s.connect("ann").await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let ok = send(&mut ann, "bob", &format!("m{i}"), &format!("k{i}"))
            .await
            .unwrap();
        ids.push(ok["id"].as_u64().unwrap());
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let mut bob = s.connect("bob").await;
    for (i, id) in ids.iter().enumerate() {
        let m = next_im(&mut bob).await;
        assert_eq!(
            (m["id"].as_u64(), m["text"].as_str()),
            (Some(*id), Some(format!("m{i}").as_str()))
        );
    }
    // Delivered: a second connection later is owed nothing; the next live one comes next.
    let mut bob2 = s.connect("bob").await;
    send(&mut ann, "bob", "live", "k-live").await.unwrap();
    assert_eq!(next_im(&mut bob2).await["text"], "live");
    assert_eq!(next_im(&mut bob).await["text"], "live");
    // And a reconnect after the live one owes nothing either.
    drop(bob);
    drop(bob2);
    let mut bob3 = s.connect("bob").await;
    send(&mut ann, "bob", "after", "k-after").await.unwrap();
    assert_eq!(next_im(&mut bob3).await["text"], "after");
    s.stop().await;
}

/// A connection that opens while an earlier delivery is still being marked in the store must
/// not wait for a catch-up forever: whether it reads a backlog is decided once, at connect.
/// Each round opens a connection of the recipient at the same time as a message reaches the
/// recipient's other one, so its connect meets that message's mark in flight.
#[tokio::test]
async fn connections_opened_while_deliveries_are_marked_get_the_next_live_message() {
    let s = start(|g| {
        g.im_rate_burst = 1_000;
        g.rate_burst = 1_000;
    })
    .await;
    let mut ann = s.connect("ann").await;
    let mut bob = s.connect("bob").await;
    for i in 0..60 {
        let (text, key) = (format!("m{i}"), format!("k{i}"));
        let (sent, mut next) = tokio::join!(send(&mut ann, "bob", &text, &key), s.connect("bob"));
        sent.unwrap();
        assert_eq!(next_im(&mut bob).await["text"], text.as_str());
        let live = format!("live{i}");
        send(&mut ann, "bob", &live, &format!("l{i}"))
            .await
            .unwrap();
        // The new connection may also get m{i} as owed, if it connected before the mark.
        let mut got = next_im(&mut next).await;
        if got["text"] == text.as_str() {
            got = next_im(&mut next).await;
        }
        assert_eq!(got["text"], live.as_str(), "round {i}");
        assert_eq!(next_im(&mut bob).await["text"], live.as_str(), "round {i}");
        bob = next;
    }
    s.stop().await;
}

#[tokio::test]
async fn a_retried_req_id_answers_the_first_message_and_delivers_once() {
    let s = start(|_| {}).await;
    let mut ann = s.connect("ann").await;
    let mut bob = s.connect("bob").await;
    let first = send(&mut ann, "bob", "once", "same").await.unwrap();
    assert_eq!(next_im(&mut bob).await["text"], "once");
    let again = send(&mut ann, "bob", "once", "same").await.unwrap();
    assert_eq!(again, first);
    assert_eq!(
        code(send(&mut ann, "bob", "something else", "same").await),
        ErrorCode::IdempotencyConflict
    );
    send(&mut ann, "bob", "next", "other").await.unwrap();
    assert_eq!(
        next_im(&mut bob).await["text"],
        "next",
        "the retry delivered nothing"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_block_refuses_messages_both_ways_until_lifted() {
    let s = start(|_| {}).await;
    let mut ann = s.connect("ann").await;
    let mut bob = s.connect("bob").await;
    bob.request("im.block", json!({"user": "ann"}))
        .await
        .unwrap();
    bob.request("im.block", json!({"user": "zed"}))
        .await
        .unwrap();
    let list = bob.request("im.blocks", json!({})).await.unwrap();
    assert_eq!(list["blocks"], json!(["ann", "zed"]));
    assert_eq!(
        code(send(&mut ann, "bob", "hi", "k1").await),
        ErrorCode::Blocked
    );
    assert_eq!(
        code(send(&mut bob, "ann", "hi", "k1").await),
        ErrorCode::Blocked
    );
    assert_eq!(
        code(bob.request("im.block", json!({"user": "bob"})).await),
        ErrorCode::BadRequest
    );
    bob.request("im.unblock", json!({"user": "ann"}))
        .await
        .unwrap();
    send(&mut ann, "bob", "hi again", "k2").await.unwrap();
    assert_eq!(next_im(&mut bob).await["text"], "hi again");
    s.stop().await;
}

#[tokio::test]
async fn history_pages_newest_first_and_filters_by_peer() {
    let s = start(|_| {}).await;
    let mut ann = s.connect("ann").await;
    let mut bob = s.connect("bob").await;
    for i in 0..4 {
        send(&mut ann, "bob", &format!("a{i}"), &format!("a{i}"))
            .await
            .unwrap();
    }
    send(&mut bob, "ann", "b0", "b0").await.unwrap();
    send(&mut ann, "cy", "to cy", "c0").await.unwrap();
    let p1 = ann
        .request("im.history", json!({"with": "bob", "limit": 2}))
        .await
        .unwrap();
    let texts = |p: &Value| -> Vec<String> {
        p["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["text"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(texts(&p1), ["b0", "a3"]);
    let p2 = ann
        .request(
            "im.history",
            json!({"with": "bob", "limit": 2, "before": p1["next"]}),
        )
        .await
        .unwrap();
    assert_eq!(texts(&p2), ["a2", "a1"]);
    let p3 = ann
        .request("im.history", json!({"with": "bob", "before": p2["next"]}))
        .await
        .unwrap();
    assert_eq!(texts(&p3), ["a0"]);
    assert_eq!(p3["next"], Value::Null);
    let all = ann.request("im.history", json!({})).await.unwrap();
    assert_eq!(texts(&all)[0], "to cy");
    assert_eq!(all["messages"].as_array().unwrap().len(), 6);
    // Nobody messages themselves: the conversation with oneself is empty, not everything.
    let own = ann
        .request("im.history", json!({"with": "ann"}))
        .await
        .unwrap();
    assert_eq!(own, json!({"messages": [], "next": null}));
    assert_eq!(
        code(ann.request("im.history", json!({"limit": 0})).await),
        ErrorCode::BadRequest
    );
    s.stop().await;
}

#[tokio::test]
async fn limits_have_their_codes() {
    let s = start(|g| {
        g.im_rate_per_min = 1;
        g.im_rate_burst = 3;
    })
    .await;
    let mut ann = s.connect("ann").await;
    let bad = [
        json!({"to": "bob", "text": "x".repeat(501), "req_id": "k"}),
        json!({"to": "bob", "text": "", "req_id": "k"}),
        json!({"to": "bob", "text": "bell\u{7}", "req_id": "k"}),
        json!({"to": "ann", "text": "me", "req_id": "k"}),
        json!({"to": "bot:amy", "text": "hi", "req_id": "k"}),
        json!({"to": "not a user", "text": "hi", "req_id": "k"}),
        json!({"to": "bob", "text": "hi", "req_id": "has space"}),
        json!({"to": "bob", "text": "hi", "req_id": "k", "type": "no spaces"}),
        json!({"to": "bob", "text": "hi", "req_id": "k", "data": {"room": "r1"}}),
        json!({"to": "bob", "text": "hi", "req_id": "k", "type": "pic", "data": "x".repeat(2100)}),
    ];
    for d in bad {
        let r = ann.request("im.send", d.clone()).await;
        assert_eq!(code(r), ErrorCode::BadRequest, "{d}");
    }
    assert_eq!(
        code(ann.request("im.send", json!({"to": "bob"})).await),
        ErrorCode::BadFrame
    );
    // 500 characters is fine (not bytes: each is three).
    send(&mut ann, "bob", &"€".repeat(500), "k0").await.unwrap();
    send(&mut ann, "bob", "two", "k1").await.unwrap();
    send(&mut ann, "bob", "three", "k2").await.unwrap();
    assert_eq!(
        code(send(&mut ann, "bob", "four", "k3").await),
        ErrorCode::RateLimited
    );
    // Reconnecting does not refill the bucket. The server answers a client's close once it
    // has cleaned the connection up, so the next one is new to it.
    let answer = ann.close_and_wait(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        answer.map(|f| u16::from(f.code)),
        Some(1000),
        "the server answers a client's close"
    );
    let mut ann = s.connect("ann").await;
    assert_eq!(
        code(send(&mut ann, "bob", "five", "k4").await),
        ErrorCode::RateLimited
    );
    s.stop().await;
}

/// A retry (same `req_id`, recipient and text) sends nothing, so the user's direct-message
/// rate neither refuses it nor is spent by it: a client that lost its replies (a dropped
/// connection) learns its messages' ids at once, and can still send new ones.
#[tokio::test]
async fn a_retry_is_answered_whatever_the_rate_and_spends_none_of_it() {
    let s = start(|g| {
        g.im_rate_per_min = 1;
        g.im_rate_burst = 2;
    })
    .await;
    let mut ann = s.connect("ann").await;
    let first = send(&mut ann, "bob", "one", "k1").await.unwrap();
    // Retried while a token is left: answered, and the token stays.
    assert_eq!(send(&mut ann, "bob", "one", "k1").await.unwrap(), first);
    let second = send(&mut ann, "bob", "two", "k2").await.unwrap();
    assert_eq!(
        code(send(&mut ann, "bob", "three", "k3").await),
        ErrorCode::RateLimited,
        "two new messages spent the burst"
    );
    // Retried with the bucket empty: still the first answers, and nothing new.
    assert_eq!(send(&mut ann, "bob", "one", "k1").await.unwrap(), first);
    assert_eq!(send(&mut ann, "bob", "two", "k2").await.unwrap(), second);
    assert_eq!(
        code(send(&mut ann, "bob", "other", "k1").await),
        ErrorCode::IdempotencyConflict
    );
    assert_eq!(
        code(send(&mut ann, "bob", "three", "k3").await),
        ErrorCode::RateLimited
    );
    let mut bob = s.connect("bob").await;
    assert_eq!(next_im(&mut bob).await["text"], "one");
    assert_eq!(next_im(&mut bob).await["text"], "two");
    bob.request("ping", json!({})).await.unwrap();
    assert!(
        bob.queued_events().iter().all(|e| e.ev != "im"),
        "each message once"
    );
    s.stop().await;
}

/// A typed message (here a room invitation) reaches the recipient live and in the history with
/// its type and data; a retry must repeat them.
#[tokio::test]
async fn a_typed_message_keeps_its_type_and_data() {
    let s = start(|_| {}).await;
    let mut ann = s.connect("ann").await;
    let mut bob = s.connect("bob").await;
    let invite = json!({
        "to": "bob",
        "text": "ann invites you to Late Night",
        "req_id": "inv-1",
        "type": "room.invite",
        "data": {"room": "late-night", "seat": 3},
    });
    let ok = ann.request("im.send", invite.clone()).await.unwrap();
    let m = next_im(&mut bob).await;
    assert_eq!(
        (&m["id"], &m["type"], &m["data"], &m["text"]),
        (
            &ok["id"],
            &json!("room.invite"),
            &json!({"room": "late-night", "seat": 3}),
            &json!("ann invites you to Late Night")
        )
    );
    let again = ann.request("im.send", invite.clone()).await.unwrap();
    assert_eq!(again["id"], ok["id"], "a retry answers the first message");
    let mut elsewhere = invite;
    elsewhere["data"]["room"] = json!("elsewhere");
    assert_eq!(
        code(ann.request("im.send", elsewhere).await),
        ErrorCode::IdempotencyConflict
    );
    let page = bob
        .request("im.history", json!({"with": "ann"}))
        .await
        .unwrap();
    assert_eq!(page["messages"][0]["type"], "room.invite");
    assert_eq!(page["messages"][0]["data"]["seat"], 3);
    s.stop().await;
}
