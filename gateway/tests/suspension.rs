//! Account suspension end to end on a standalone node: a suspended user's sockets close with
//! 4003 and a new one is closed the same way after `hello`, other users are untouched, the
//! suspension is listed and read back, a timed one ends by itself, a lifted one lets the user
//! in again, it survives a restart, and bad calls are refused.

use std::time::Duration;

use tokio::time::Instant;

use gateway::GatewayConfig;
use kit::admin::{self, AdminResponse};
use kit::client::ClientError;
use serde_json::{Value, json};
use shard::ShardConfig;

use crate::support::server::Server;

const SECRET: &[u8] = b"test-secret-for-suspensions";
const ADMIN: &str = "suspensions-admin";
const WAIT: Duration = Duration::from_secs(10);

async fn call(s: &Server, method: &str, path: &str, body: Option<Value>) -> AdminResponse {
    admin::call(s.admin, method, path, Some(ADMIN), body)
        .await
        .unwrap()
}

/// `user` connects and is closed with 4003 `account suspended` (after `hello`, or before the
/// client read it).
async fn shut_out(s: &Server, user: &str) {
    let close = match kit::client::connect(&s.url, Some(&s.token(user))).await {
        Ok(mut c) => c.closed(WAIT).await.unwrap(),
        Err(ClientError::Closed(f)) => f,
        Err(e) => panic!("{user}: {e}"),
    };
    let close = close.expect("a close frame");
    assert_eq!(
        (u16::from(close.code), close.reason.as_str()),
        (4003, "account suspended"),
        "{user}"
    );
}

#[tokio::test]
async fn a_suspended_user_is_shut_out_until_lifted() {
    let s = Server::launch(
        SECRET,
        ADMIN,
        GatewayConfig::default(),
        ShardConfig::default(),
    )
    .await;
    let mut host = s.connect("host").await;
    let room = host.create_room(json!({"room": "lounge"})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut troll = s.connect("troll").await;
    troll.join(&room, false, None).await.unwrap();
    let mut second = s.connect("troll").await;

    // Suspended: both sockets close with 4003; the host's stays.
    let body = json!({"reason": "ads in every room", "by": "mod-anna"});
    let put = call(&s, "PUT", "/admin/users/troll/suspension", Some(body)).await;
    assert_eq!(put.status, 200, "{}", put.body);
    let put = put.json();
    assert_eq!(
        (&put["suspended"], &put["reason"], &put["until"], &put["by"]),
        (
            &json!(true),
            &json!("ads in every room"),
            &Value::Null,
            &json!("mod-anna")
        )
    );
    for c in [&mut troll, &mut second] {
        let close = c.closed(WAIT).await.unwrap().expect("a close frame");
        assert_eq!(u16::from(close.code), 4003);
        assert_eq!(close.reason.as_str(), "account suspended");
    }
    shut_out(&s, "troll").await;
    // Out of the room at once, not after the presence grace ("disconnected").
    let gone = host.next_event_named("member.leave", WAIT).await.unwrap();
    assert_eq!(
        (&gone.d["user"], &gone.d["reason"]),
        (&json!("troll"), &json!("left"))
    );
    host.chat(&room, "still here").await.unwrap();

    // Read back and listed.
    let got = call(&s, "GET", "/admin/users/troll/suspension", None).await;
    assert_eq!(got.json()["reason"], "ads in every room");
    let none = call(&s, "GET", "/admin/users/host/suspension", None).await;
    assert_eq!(none.json(), json!({"user": "host", "suspended": false}));
    let list = call(&s, "GET", "/admin/suspensions", None).await.json();
    assert_eq!(list["suspensions"].as_array().unwrap().len(), 1);
    assert_eq!(list["suspensions"][0]["user"], "troll");

    // Refused: bad bodies, a lift of nobody; nothing changed.
    for bad in [
        json!({"seconds": 0}),
        json!({"seconds": -1}),
        json!({"seconds": 315_360_001}),
        json!({"reason": "a\nb"}),
        json!({"by": "a b"}),
        json!({"until": 5}),
    ] {
        let r = call(&s, "PUT", "/admin/users/x/suspension", Some(bad.clone())).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
    }
    let nobody = call(&s, "DELETE", "/admin/users/x/suspension", None).await;
    assert_eq!(nobody.status, 404, "{}", nobody.body);
    let list = call(&s, "GET", "/admin/suspensions", None).await.json();
    assert_eq!(list["suspensions"].as_array().unwrap().len(), 1);

    // Kept on disk: a restarted node shuts the user out as before.
    let s = s.relaunch().await;
    shut_out(&s, "troll").await;

    // Lifted: the user is back.
    let del = call(&s, "DELETE", "/admin/users/troll/suspension", None).await;
    assert_eq!(del.json(), json!({"user": "troll", "suspended": false}));
    let mut back = s.connect("troll").await;
    back.join(&room, false, None).await.unwrap();
    back.chat(&room, "sorry").await.unwrap();

    // A timed suspension ends by itself.
    let timed = json!({"seconds": 1});
    let put = call(&s, "PUT", "/admin/users/troll/suspension", Some(timed)).await;
    let until = put.json()["until"].as_u64().unwrap();
    assert!(until > put.json()["at"].as_u64().unwrap());
    assert_eq!(
        u16::from(back.closed(WAIT).await.unwrap().unwrap().code),
        4003
    );
    let deadline = Instant::now() + WAIT;
    loop {
        // Still suspended: closed at once; past `until`: a ping is answered.
        if let Ok(mut c) = kit::client::connect(&s.url, Some(&s.token("troll"))).await
            && c.request("ping", json!({})).await.is_ok()
        {
            break;
        }
        assert!(Instant::now() < deadline, "the suspension never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        kit::admin::get(s.admin, "/admin/suspensions", Some(ADMIN))
            .await
            .unwrap()
            .json()["suspensions"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    s.stop().await;
}
