//! Account suspension in a cluster, with real processes: a suspension made through one
//! gateway closes the user's socket on another at once (the gateway bus), reaches a gateway
//! where the user has no socket yet through the store (its refresh), and a lift made on one
//! gateway reaches the others the same way. Each decision reaches the app's event webhook
//! from the gateway that took it.
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).

use std::time::Duration;

use tokio::time::Instant;

use kit::admin;
use kit::client::{self, ClientError};
use kit::cluster::{Cluster, ClusterOptions};
use kit::hooks::Receiver;
use serde_json::json;

use crate::support::WAIT;

/// How `user`'s connect to gateway `gw` ends: `Some(code)` when the server closed it (after
/// `hello` or before the client read it), `None` when a ping is answered.
async fn connect_ends(cluster: &Cluster, gw: usize, user: &str) -> Option<u16> {
    let token = kit::token(&cluster.secret, user).unwrap();
    match client::connect(&cluster.gateways[gw].url, Some(&token)).await {
        Ok(mut c) => match c.request("ping", json!({})).await {
            Ok(_) => None,
            Err(_) => c.closed(WAIT).await.unwrap().map(|f| u16::from(f.code)),
        },
        Err(ClientError::Closed(f)) => f.map(|f| u16::from(f.code)),
        Err(e) => panic!("{user} on gateway {gw}: {e}"),
    }
}

/// Polls `connect_ends` until it gives `want` (bounded by `WAIT`).
async fn until_connect_ends(cluster: &Cluster, gw: usize, user: &str, want: Option<u16>) {
    let deadline = Instant::now() + WAIT;
    loop {
        let got = connect_ends(cluster, gw, user).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{user} on gateway {gw}: {got:?}, waiting for {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_suspension_reaches_every_gateway() {
    let mut hooks = Receiver::start(0).await.unwrap();
    let cluster = Cluster::start(ClusterOptions {
        shards: 1,
        gateways: 2,
        env: vec![
            ("CHORUS_EVENTS_WEBHOOK_URL".into(), hooks.url.clone()),
            (
                "CHORUS_EVENTS_WEBHOOK_SECRET".into(),
                "cluster-event-webhook-secret".into(),
            ),
        ],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let token = Some(cluster.admin_token.clone());
    let token = token.as_deref();
    let mut troll = cluster.connect(1, "troll").await.unwrap();
    let mut bystander = cluster.connect(1, "bystander").await.unwrap();

    // Through gateway 0, for a user connected to gateway 1: closed at once.
    let body = json!({"reason": "spam", "seconds": 3600});
    let put = admin::call(
        cluster.gateways[0].admin,
        "PUT",
        "/admin/users/troll/suspension",
        token,
        Some(body),
    )
    .await
    .unwrap();
    assert_eq!(put.status, 200, "{}", put.body);
    let close = troll.closed(WAIT).await.unwrap().expect("a close frame");
    assert_eq!(u16::from(close.code), 4003);
    assert_eq!(connect_ends(&cluster, 1, "troll").await, Some(4003));
    assert_eq!(connect_ends(&cluster, 0, "troll").await, Some(4003));
    bystander.request("ping", json!({})).await.unwrap();

    // A user with no socket anywhere: gateway 1 learns it from the store.
    let put = admin::call(
        cluster.gateways[0].admin,
        "PUT",
        "/admin/users/lurker/suspension",
        token,
        Some(json!({})),
    )
    .await
    .unwrap();
    assert_eq!(put.status, 200, "{}", put.body);
    // The other gateway's admin API reads the store: it knows at once, before its refresh.
    let read = admin::get(
        cluster.gateways[1].admin,
        "/admin/users/lurker/suspension",
        token,
    )
    .await
    .unwrap()
    .json();
    assert_eq!(read["suspended"], true, "{read}");
    until_connect_ends(&cluster, 1, "lurker", Some(4003)).await;
    let listed = admin::get(cluster.gateways[1].admin, "/admin/suspensions", token)
        .await
        .unwrap()
        .json();
    assert_eq!(
        listed["suspensions"].as_array().unwrap().len(),
        2,
        "{listed}"
    );

    // Lifted through gateway 1: gateway 0 lets the user in again.
    let del = admin::call(
        cluster.gateways[1].admin,
        "DELETE",
        "/admin/users/troll/suspension",
        token,
        None,
    )
    .await
    .unwrap();
    assert_eq!(del.status, 200, "{}", del.body);
    until_connect_ends(&cluster, 0, "troll", None).await;
    assert_eq!(connect_ends(&cluster, 0, "lurker").await, Some(4003));

    // The app heard each decision once, from the gateway that took it (two gateways' POSTs
    // may come in either order: wait for three events).
    let heard = std::cell::Cell::new(0);
    let third = |_: &serde_json::Value| {
        heard.set(heard.get() + 1);
        heard.get() == 3
    };
    let (events, _) = hooks.delivered_until(third, WAIT, |_| {}).await;
    let mut seen: Vec<(String, String, String)> = events
        .iter()
        .map(|e| {
            let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
            (s(&e["kind"]), s(&e["data"]["user"]), s(&e["node"]))
        })
        .collect();
    seen.sort();
    let (g0, g1) = (&cluster.gateways[0].id, &cluster.gateways[1].id);
    let want = |k: &str, u: &str, n: &String| (k.to_owned(), u.to_owned(), n.clone());
    assert_eq!(
        seen,
        [
            want("user.reinstated", "troll", g1),
            want("user.suspended", "lurker", g0),
            want("user.suspended", "troll", g0),
        ],
        "{events:?}"
    );
}
