//! A gateway's graceful drain in a real cluster (redis-server, a shard and two gateway
//! processes on loopback): until its own 1001, each socket of the draining gateway is still
//! served its room (PROTOCOL.md section 11: closes spread over the drain window).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use kit::client::{Client, ClientError};
use kit::cluster::{Cluster, ClusterOptions};
use protocol::RoomId;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long a join retries while the cluster settles.
const JOIN_WITHIN: Duration = Duration::from_secs(20);
/// The drain window of the draining gateway: four sockets, one closed every 750 ms.
const DRAIN_WINDOW_MS: u64 = 3000;
const WAIT: Duration = Duration::from_secs(15);

/// What a client of the draining gateway saw until its close.
struct Seen {
    close: Option<u16>,
    closed_at: Instant,
    /// `room.left` reasons received before the close.
    left: Vec<String>,
    chats: Vec<String>,
}

/// Reads `c` until the server closes it; says when on `closes`.
async fn watch(mut c: Client, closes: mpsc::Sender<()>) -> Seen {
    let (mut left, mut chats) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + WAIT;
    let close = loop {
        match c
            .next_event(deadline.saturating_duration_since(Instant::now()))
            .await
        {
            Ok(e) if e.ev == "room.left" => left.push(e.d["reason"].to_string()),
            Ok(e) if e.ev == "chat" => chats.push(e.d["text"].as_str().unwrap().to_owned()),
            Ok(_) => {}
            Err(ClientError::Closed(f)) => break f.map(|f| u16::from(f.code)),
            Err(e) => panic!("no close in time: {e:?}"),
        }
    };
    let _ = closes.try_send(());
    Seen {
        close,
        closed_at: Instant::now(),
        left,
        chats,
    }
}

#[tokio::test]
async fn a_draining_gateway_serves_each_socket_its_room_until_its_1001() {
    let cluster = Cluster::start(ClusterOptions {
        shards: 1,
        gateways: 2,
        env: vec![("CHORUS_DRAIN_WINDOW_MS".into(), DRAIN_WINDOW_MS.to_string())],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let room = RoomId::from("drain-served");
    let mut publisher = cluster.connect(1, "publisher").await.unwrap();
    publisher
        .join_retrying(&room, None, JOIN_WITHIN)
        .await
        .unwrap();
    // One place per client: a close is never dropped.
    let (closes_tx, mut closes) = mpsc::channel(4);
    let mut watchers = Vec::new();
    for i in 0..4 {
        let mut c = cluster.connect(0, &format!("listener{i}")).await.unwrap();
        c.join_retrying(&room, None, JOIN_WITHIN).await.unwrap();
        watchers.push(tokio::spawn(watch(c, closes_tx.clone())));
    }
    cluster.gateways[0].node.terminate().unwrap();
    // The first socket is closed at the start of the window: the drain has begun.
    tokio::time::timeout(WAIT, closes.recv()).await.unwrap();
    publisher.chat(&room, "during the drain").await.unwrap();
    let acked = Instant::now();
    let mut served_late = 0;
    for w in watchers {
        let seen = w.await.unwrap();
        assert_eq!(seen.close, Some(1001));
        assert!(
            seen.left.is_empty(),
            "taken out of the room before its 1001: {:?}",
            seen.left
        );
        if seen.closed_at > acked + Duration::from_millis(300) {
            assert_eq!(
                seen.chats,
                ["during the drain"],
                "an open socket of the draining gateway missed its room's event"
            );
            served_late += 1;
        }
    }
    assert!(served_late > 0, "no socket was closed late in the window");
}
