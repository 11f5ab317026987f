//! The scoreboard of PKs between two rooms against a real redis-server and in process: the
//! same contract on both (each room reads the other's side; a side only moves forward; a match
//! is forgotten after its keep time), plus the Redis layout.
#![allow(clippy::unwrap_used)]

use kit::redis::RedisServer;
use protocol::RoomId;
use storage::pk_board::{PkBoard, PkSide};
use storage::redis::Redis;

const KEEP: u64 = 60_000;
const T0: u64 = 1_000_000;

fn side(score: i64, closed: bool, stopped: bool) -> PkSide {
    PkSide {
        score,
        closed,
        stopped,
    }
}

/// The contract, on `board` (`other`: a second handle on the same data).
async fn contract(board: PkBoard, other: PkBoard) {
    let (a, b) = (RoomId::from("a"), RoomId::from("b"));
    let open = |score| side(score, false, false);
    // Nothing of the other room yet.
    assert_eq!(
        board.exchange("m1", &a, open(10), KEEP, T0).await.unwrap(),
        None
    );
    assert_eq!(
        other.exchange("m1", &b, open(4), KEEP, T0).await.unwrap(),
        Some(open(10))
    );
    assert_eq!(
        board.exchange("m1", &a, open(12), KEEP, T0).await.unwrap(),
        Some(open(4))
    );
    // Another match is another board.
    assert_eq!(
        board.exchange("m2", &a, open(1), KEEP, T0).await.unwrap(),
        None
    );

    // A stale writer's lower score does not take a's back.
    other.exchange("m1", &a, open(7), KEEP, T0).await.unwrap();
    assert_eq!(
        other.exchange("m1", &b, open(4), KEEP, T0).await.unwrap(),
        Some(open(12))
    );
    // Closed (by a stop), a side keeps the score and flags it closed at.
    board
        .exchange("m1", &a, side(15, true, true), KEEP, T0)
        .await
        .unwrap();
    board.exchange("m1", &a, open(99), KEEP, T0).await.unwrap();
    assert_eq!(
        other
            .exchange("m1", &b, side(6, true, false), KEEP, T0)
            .await
            .unwrap(),
        Some(side(15, true, true))
    );
    assert_eq!(
        board.exchange("m1", &a, open(0), KEEP, T0).await.unwrap(),
        Some(side(6, true, false))
    );
    // Negative scores round-trip (a side is coins; nothing forbids a refund's future).
    board.exchange("m3", &a, open(-3), KEEP, T0).await.unwrap();
    assert_eq!(
        other.exchange("m3", &b, open(0), KEEP, T0).await.unwrap(),
        Some(open(-3))
    );
}

#[tokio::test]
async fn redis_sides_are_exchanged_and_only_move_forward() {
    let server = RedisServer::start().await.unwrap();
    let url = server.url();
    let board = PkBoard::redis(&Redis::connect(&url).await.unwrap());
    let other = PkBoard::redis(&Redis::connect(&url).await.unwrap());
    contract(board.clone(), other).await;
    // One hash per match, in its own slot, that expires.
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let held: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg("pk:{m1}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        held.into_iter()
            .collect::<std::collections::BTreeMap<_, _>>(),
        [("a".into(), "15:1:1".into()), ("b".into(), "6:1:0".into())].into()
    );
    let ttl: i64 = redis::cmd("PTTL")
        .arg("pk:{m1}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 0 && ttl <= KEEP as i64, "{ttl}");
}

#[tokio::test]
async fn in_process_sides_are_exchanged_and_a_match_is_forgotten_after_its_keep_time() {
    let board = PkBoard::memory();
    contract(board.clone(), board.clone()).await;
    let (a, b) = (RoomId::from("a"), RoomId::from("b"));
    let later = T0 + KEEP;
    // b's last write was at T0: at T0 + KEEP the match is gone.
    assert_eq!(
        board
            .exchange("m1", &a, side(1, false, false), KEEP, later)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        board
            .exchange("m1", &b, side(2, false, false), KEEP, later)
            .await
            .unwrap(),
        Some(side(1, false, false))
    );
}
