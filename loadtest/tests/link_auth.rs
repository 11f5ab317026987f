//! Who may open a link to a shard: only a gateway that proves the cluster's secret. A process
//! that reaches a shard's link port with no proof, or another secret's, is refused before its
//! first command, so it cannot act as any user; one with the secret is served like a gateway.
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use kit::cluster::{CLUSTER_SECRET, Cluster};
use protocol::NodeId;
use protocol::link::{self, Command, LINK_VERSION, LinkFrame, ToGateway};
use serde_json::json;
use shard::link::LinkSecret;
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_util::codec::Framed;

const WAIT: Duration = Duration::from_secs(10);

/// Opens a link to `addr` as gateway `g-other` proving `secret`, and sends a command that
/// would create room `room` for user `mallory`.
async fn link_and_create(
    addr: std::net::SocketAddr,
    secret: Option<&str>,
    room: &str,
) -> Framed<TcpStream, tokio_util::codec::LengthDelimitedCodec> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let mut framed = Framed::new(stream, shard::link::codec());
    let secret = secret.map(|s| LinkSecret::new(s.as_bytes()).unwrap());
    let hello = shard::link::hello(LINK_VERSION, &NodeId::from("g-other"), secret.as_ref());
    framed
        .send(link::encode(&LinkFrame::Hello(hello)))
        .await
        .unwrap();
    let create: Command = serde_json::from_value(json!({
        "req": 1, "gateway": "g-other", "session": 1, "user": "mallory", "client_id": 1,
        "room": room, "cmd": {"Op": {"Create": {"room": room}}},
    }))
    .unwrap();
    // The shard may have closed the link already: the send's outcome is not the test.
    let _ = framed.send(link::encode(&LinkFrame::Command(create))).await;
    framed
}

#[tokio::test]
async fn a_link_without_the_cluster_secret_is_refused_and_acts_for_nobody() {
    let cluster = Cluster::of(1, 1).await.unwrap();
    let shard = &cluster.shards[0];
    for (reason, secret) in [("missing", None), ("bad", Some("not-the-cluster-secret"))] {
        let mut framed = link_and_create(shard.link, secret, "stolen").await;
        // The shard closes the link without a frame: no reply, no event.
        match timeout(WAIT, framed.next()).await {
            Ok(None | Some(Err(_))) => {}
            other => panic!("{reason}: the link was not closed: {other:?}"),
        }
        let refused = format!("chorus_link_refused_total{{reason=\"{reason}\"}}");
        assert_eq!(
            kit::admin::metric(shard.admin, &refused).await.unwrap(),
            1.0,
            "{reason}"
        );
    }
    let stolen = kit::admin::call(
        cluster.gateways[0].admin,
        "GET",
        "/admin/rooms/stolen",
        Some(&cluster.admin_token),
        None,
    )
    .await
    .unwrap();
    assert_eq!(stolen.status, 404, "{}", stolen.body);

    // With the cluster's secret the same command is served, and answered on the link.
    let mut framed = link_and_create(shard.link, Some(CLUSTER_SECRET), "granted").await;
    let reply = loop {
        let body = timeout(WAIT, framed.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let LinkFrame::ToGateway(ToGateway::Reply(r)) = link::decode(body.freeze()).unwrap() {
            break r;
        }
    };
    assert_eq!(reply.req, 1);
    assert!(reply.outcome.is_ok(), "{:?}", reply.outcome);
}

/// A shard or gateway started without the cluster secret, or with one too short to be a
/// secret, does not start: a cluster never runs with links anyone can open.
#[tokio::test]
async fn cluster_nodes_do_not_start_without_the_cluster_secret() {
    let shard = [
        "shard",
        "--node-id",
        "s1",
        "--redis",
        "redis://127.0.0.1:1",
        "--link-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
    ];
    let gateway = [
        "gateway",
        "--node-id",
        "g1",
        "--redis",
        "redis://127.0.0.1:1",
        "--ws-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
    ];
    for args in [&shard[..], &gateway[..]] {
        for secret in ["", "too-short"] {
            let env = [
                ("CHORUS_JWT_SECRET", "jwt-secret-for-this-test"),
                ("CHORUS_LUCKY_SECRET", "lucky-secret-for-this-test"),
                ("CHORUS_CLUSTER_SECRET", secret),
            ];
            let mut node = kit::cluster::Node::spawn_with_env(args, env).unwrap();
            let status = node.wait_exit(WAIT).await.unwrap();
            assert!(
                status.is_some_and(|s| !s.success()),
                "{args:?} with {secret:?}: {status:?}"
            );
            let log = node.log().unwrap();
            assert!(
                log.contains("CHORUS_CLUSTER_SECRET") || log.contains("at least 16 bytes"),
                "{args:?} with {secret:?}: {log}"
            );
        }
    }
}
