//! Acknowledged direct messages on a standalone node (`?im_ack=1` and `im.ack`): a message a
//! connection got but did not acknowledge (it closed, or its socket was dropped without a
//! close) reaches the next connection's backlog; an acknowledged one does not; a connection
//! that does not acknowledge keeps the old rule; `im.ack`'s limits.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use gateway::GatewayConfig;
use kit::client::{self, Client, ClientError};
use protocol::ErrorCode;
use serde_json::{Value, json};
use shard::ShardConfig;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"test-secret-for-im-ack";
const WAIT: Duration = Duration::from_secs(5);

async fn start() -> Server {
    let gateway = GatewayConfig {
        drain_window: Duration::from_millis(100),
        ..GatewayConfig::default()
    };
    Server::launch(SECRET, "admin-token", gateway, ShardConfig::default()).await
}

/// Connects `user` asking for acknowledged delivery.
async fn acking(s: &Server, user: &str) -> Client {
    let c = client::connect(&format!("{}?im_ack=1", s.url), Some(&s.token(user)))
        .await
        .unwrap();
    assert!(c.im_ack, "hello says the connection acknowledges");
    c
}

async fn send(c: &mut Client, to: &str, text: &str, req: &str) -> u64 {
    c.request("im.send", json!({"to": to, "text": text, "req_id": req}))
        .await
        .unwrap()["id"]
        .as_u64()
        .unwrap()
}

async fn next_im(c: &mut Client) -> Value {
    c.next_event_named("im", WAIT).await.unwrap().d
}

async fn ack(c: &mut Client, ids: &[u64]) -> Result<Value, ClientError> {
    c.request("im.ack", json!({ "ids": ids })).await
}

#[tokio::test]
async fn a_message_got_but_not_acknowledged_reaches_the_next_connection_until_acknowledged() {
    let s = start().await;
    let mut ann = s.connect("ann").await;
    let mut bob = acking(&s, "bob").await;
    let id = send(&mut ann, "bob", "hello", "k1").await;
    assert_eq!(next_im(&mut bob).await["id"].as_u64(), Some(id));
    // Bob's client had the frame but never processed it: it closed.
    bob.close().await;
    let mut bob = acking(&s, "bob").await;
    assert_eq!(
        next_im(&mut bob).await["id"].as_u64(),
        Some(id),
        "not acknowledged: owed again after a close"
    );
    // Got it again, and the socket died without a close (a kill, a lost network).
    drop(bob);
    let mut bob = acking(&s, "bob").await;
    assert_eq!(
        next_im(&mut bob).await["id"].as_u64(),
        Some(id),
        "not acknowledged: owed again after a dropped socket"
    );
    ack(&mut bob, &[id]).await.unwrap();
    bob.close().await;
    // Acknowledged: the next connection is owed nothing; the next message it gets is new.
    let mut bob = acking(&s, "bob").await;
    let after = send(&mut ann, "bob", "after", "k2").await;
    assert_eq!(next_im(&mut bob).await["id"].as_u64(), Some(after));
    s.stop().await;
}

#[tokio::test]
async fn messages_sent_while_the_connection_closes_reach_the_next_one_each_once() {
    let s = start().await;
    let mut ann = s.connect("ann").await;
    // Each round Bob closes and Ann sends at once: the message is queued to the closing
    // connection or stored for the next one, whichever wins; either way the next connection
    // has it, once.
    let mut bob = acking(&s, "bob").await;
    for round in 0..5 {
        bob.close().await;
        let id = send(&mut ann, "bob", &format!("m{round}"), &format!("k{round}")).await;
        bob = acking(&s, "bob").await;
        let m = next_im(&mut bob).await;
        assert_eq!(m["id"].as_u64(), Some(id), "round {round}");
        ack(&mut bob, &[id]).await.unwrap();
        // Nothing else: a ping's reply comes after any queued event.
        bob.request("ping", json!({})).await.unwrap();
        let extra: Vec<_> = bob
            .queued_events()
            .into_iter()
            .filter(|e| e.ev == "im")
            .collect();
        assert!(extra.is_empty(), "round {round}: a duplicate {extra:?}");
    }
    s.stop().await;
}

#[tokio::test]
async fn a_connection_that_does_not_acknowledge_keeps_the_old_rule_but_cannot_mark_for_an_acking_one()
 {
    let s = start().await;
    let mut ann = s.connect("ann").await;
    // Alone, a connection that does not acknowledge counts as having the message.
    let mut old = s.connect("bob").await;
    assert!(!old.im_ack, "hello leaves im_ack out");
    let first = send(&mut ann, "bob", "first", "k1").await;
    assert_eq!(next_im(&mut old).await["id"].as_u64(), Some(first));
    // Beside an acknowledging one, the message waits for the acknowledgement. (The first is
    // marked delivered just after it was queued: the new connection's backlog may still hold
    // it.)
    let mut new = acking(&s, "bob").await;
    let second = send(&mut ann, "bob", "second", "k2").await;
    assert_eq!(next_im(&mut old).await["id"].as_u64(), Some(second));
    let mut got = next_im(&mut new).await["id"].as_u64();
    if got == Some(first) {
        got = next_im(&mut new).await["id"].as_u64();
    }
    assert_eq!(got, Some(second));
    drop(new);
    let mut new = acking(&s, "bob").await;
    assert_eq!(
        next_im(&mut new).await["id"].as_u64(),
        Some(second),
        "owed until acknowledged (the first was delivered to the old connection)"
    );
    // Any connection of the user may acknowledge.
    ack(&mut old, &[second]).await.unwrap();
    drop(new);
    let mut new = acking(&s, "bob").await;
    let third = send(&mut ann, "bob", "third", "k3").await;
    assert_eq!(next_im(&mut new).await["id"].as_u64(), Some(third));
    s.stop().await;
}

/// Mixed devices (PROTOCOL.md 13.7): a message an acknowledging connection got waits for its
/// acknowledgement even when a connection that does not acknowledge, on the same gateway, gets
/// it too, live or, as here, in the backlog it reads when it opens.
#[tokio::test]
async fn a_backlog_read_beside_an_acknowledging_connection_waits_for_its_acknowledgement() {
    let s = start().await;
    let mut ann = s.connect("ann").await;
    let mut acker = acking(&s, "bob").await;
    let id = send(&mut ann, "bob", "hi", "k1").await;
    assert_eq!(next_im(&mut acker).await["id"].as_u64(), Some(id));
    // Bob's other device opens: the message is still owed, so it is in its backlog.
    let mut plain = s.connect("bob").await;
    assert!(!plain.im_ack);
    assert_eq!(next_im(&mut plain).await["id"].as_u64(), Some(id));
    // A store read after the backlog: any mark the backlog made has landed.
    plain.request("im.history", json!({})).await.unwrap();
    // The acknowledging connection goes before its client acknowledged: its next one gets it.
    acker.close_and_wait(WAIT).await.unwrap();
    let mut next = acking(&s, "bob").await;
    assert_eq!(
        next_im(&mut next).await["id"].as_u64(),
        Some(id),
        "owed until acknowledged"
    );
    ack(&mut next, &[id]).await.unwrap();
    s.stop().await;
}

#[tokio::test]
async fn im_ack_takes_one_to_two_hundred_ids_and_ignores_unknown_ones() {
    let s = start().await;
    let mut bob = acking(&s, "bob").await;
    let code = |r: Result<Value, ClientError>| r.unwrap_err().code().unwrap();
    assert_eq!(code(ack(&mut bob, &[]).await), ErrorCode::BadRequest);
    let many: Vec<u64> = (1..=201).collect();
    assert_eq!(code(ack(&mut bob, &many).await), ErrorCode::BadRequest);
    assert_eq!(
        code(bob.request("im.ack", json!({"ids": "x"})).await),
        ErrorCode::BadFrame
    );
    assert_eq!(ack(&mut bob, &many[..200]).await.unwrap(), json!({}));
    s.stop().await;
}
