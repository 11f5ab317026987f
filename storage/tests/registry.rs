//! The user registry against a real redis-server and in-process: one contract on both
//! engines, plus what only a cluster has (dead gateways, restarts) and a race of joins.
#![allow(clippy::unwrap_used)]

use kit::redis::RedisServer;
use protocol::{NodeId, RoomId, UserId};
use storage::redis::Redis;
use storage::registry::{Registry, SessionRef};

fn at(gw: &str, inc: u64, session: u64) -> SessionRef {
    SessionRef {
        gateway: NodeId::from(gw),
        incarnation: inc,
        session,
    }
}

async fn contract(reg: Registry) {
    let ann = UserId::from("ann");
    let (g1, g2) = (at("g1", 11, 1), at("g2", 22, 7));
    reg.keep_alive(&g1.gateway, 11).await.unwrap();
    reg.keep_alive(&g2.gateway, 22).await.unwrap();
    assert!(reg.gateways_of(&ann).await.unwrap().is_empty());
    reg.add_connection(&ann, &g1).await.unwrap();
    reg.add_connection(&ann, &g2).await.unwrap();
    reg.add_connection(&ann, &at("g2", 22, 8)).await.unwrap();
    assert_eq!(
        reg.gateways_of(&ann).await.unwrap(),
        [NodeId::from("g1"), NodeId::from("g2")]
    );

    // Each swap returns the entry it replaced; the latest stays.
    let (r1, r2) = (RoomId::from("r1"), RoomId::from("r2"));
    let first = reg.set_room(&ann, &r1, &g1).await.unwrap();
    assert_eq!(first.previous, None);
    let second = reg.set_room(&ann, &r2, &g2).await.unwrap();
    assert!(second.ver > first.ver);
    let prev = second.previous.unwrap();
    assert_eq!(
        (prev.room.clone(), prev.at.clone(), prev.ver),
        (r1.clone(), g1.clone(), first.ver)
    );
    // Compare-and-delete: g1's entry is gone already, so clearing it keeps g2's.
    reg.clear_room(&ann, &r1, &g1).await.unwrap();
    reg.clear_room(&ann, &r1, &g2).await.unwrap();
    let bob = UserId::from("bob");
    let rooms = reg.rooms_of(&[bob.clone(), ann.clone()]).await.unwrap();
    assert_eq!(rooms.len(), 1);
    assert_eq!(
        (&rooms[0].0, &rooms[0].1.room, &rooms[0].1.at),
        (&ann, &r2, &g2)
    );
    reg.clear_room(&ann, &r2, &g2).await.unwrap();
    assert!(
        reg.rooms_of(std::slice::from_ref(&ann))
            .await
            .unwrap()
            .is_empty()
    );

    // A list as long as a user may follow is read whole (on Redis, in several calls).
    let many: Vec<UserId> = (0..1_200).map(|i| UserId::from(format!("m{i}"))).collect();
    for u in many.iter().step_by(100) {
        reg.add_connection(u, &g1).await.unwrap();
        reg.set_room(u, &r1, &g1).await.unwrap();
    }
    let found = reg.rooms_of(&many).await.unwrap();
    let users: Vec<&UserId> = found.iter().map(|(u, _)| u).collect();
    assert_eq!(users, many.iter().step_by(100).collect::<Vec<_>>());
    for u in many.iter().step_by(100) {
        reg.clear_room(u, &r1, &g1).await.unwrap();
    }

    // A closed connection keeps its room entry (the room keeps the member away for its grace
    // window) until `clear_room_of`, which clears it whatever the room, and only its own.
    reg.set_room(&ann, &r1, &g1).await.unwrap();
    reg.remove_connection(&ann, &g1).await.unwrap();
    let kept = reg.rooms_of(std::slice::from_ref(&ann)).await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!((&kept[0].1.room, &kept[0].1.at), (&r1, &g1));
    reg.clear_room_of(&ann, &g2).await.unwrap();
    assert_eq!(
        reg.rooms_of(std::slice::from_ref(&ann))
            .await
            .unwrap()
            .len(),
        1,
        "another connection's clear leaves the entry"
    );
    reg.clear_room_of(&ann, &g1).await.unwrap();
    assert!(
        reg.rooms_of(std::slice::from_ref(&ann))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(reg.gateways_of(&ann).await.unwrap(), [NodeId::from("g2")]);
    reg.remove_connection(&ann, &g2).await.unwrap();
    reg.remove_connection(&ann, &at("g2", 22, 8)).await.unwrap();
    assert!(reg.gateways_of(&ann).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_in_process_registry_keeps_the_contract() {
    contract(Registry::in_process()).await;
}

#[tokio::test]
async fn the_redis_registry_keeps_the_contract() {
    let server = RedisServer::start().await.unwrap();
    let redis = Redis::connect(&server.url()).await.unwrap();
    contract(Registry::redis(&redis)).await;
}

#[tokio::test]
async fn entries_of_a_dead_or_restarted_gateway_count_for_nothing_and_are_removed() {
    let server = RedisServer::start().await.unwrap();
    let redis = Redis::connect(&server.url()).await.unwrap();
    let reg = Registry::redis(&redis);
    let ann = UserId::from("ann");
    let old = at("g2", 1, 5);
    reg.keep_alive(&old.gateway, 1).await.unwrap();
    reg.add_connection(&ann, &old).await.unwrap();
    reg.set_room(&ann, &RoomId::from("r1"), &old).await.unwrap();
    assert_eq!(reg.gateways_of(&ann).await.unwrap(), [NodeId::from("g2")]);

    // g2 restarts under the same id with a new incarnation: its old entries are dead.
    reg.keep_alive(&old.gateway, 2).await.unwrap();
    assert!(reg.gateways_of(&ann).await.unwrap().is_empty());
    assert!(
        reg.rooms_of(std::slice::from_ref(&ann))
            .await
            .unwrap()
            .is_empty()
    );
    let swap = reg
        .set_room(&ann, &RoomId::from("r2"), &at("g2", 2, 1))
        .await
        .unwrap();
    assert_eq!(swap.previous, None, "a dead holder is nobody to tell");
    // And the lookup removed the dead field from Redis.
    let mut conn = redis.conn();
    let fields: Vec<String> = ::redis::cmd("HKEYS")
        .arg("chorus:{reg}:conns:ann")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(fields.is_empty(), "{fields:?}");

    // A clean stop marks the gateway dead at once.
    let live = at("g3", 9, 1);
    reg.keep_alive(&live.gateway, 9).await.unwrap();
    reg.add_connection(&ann, &live).await.unwrap();
    assert_eq!(reg.gateways_of(&ann).await.unwrap(), [NodeId::from("g3")]);
    reg.gone(&live.gateway, 9).await.unwrap();
    assert!(reg.gateways_of(&ann).await.unwrap().is_empty());
}

#[tokio::test]
async fn racing_swaps_leave_one_entry_and_every_other_one_is_told_exactly_once() {
    let server = RedisServer::start().await.unwrap();
    let redis = Redis::connect(&server.url()).await.unwrap();
    let reg = Registry::redis(&redis);
    let ann = UserId::from("ann");
    for gw in ["g1", "g2"] {
        reg.keep_alive(&NodeId::from(gw), 1).await.unwrap();
    }
    let swaps = (0..40u64).map(|i| {
        let reg = reg.clone();
        let ann = ann.clone();
        tokio::spawn(async move {
            let gw = if i % 2 == 0 { "g1" } else { "g2" };
            let room = RoomId::from(format!("r{i}"));
            reg.set_room(&ann, &room, &at(gw, 1, i)).await.unwrap()
        })
    });
    let mut replaced = std::collections::HashSet::new();
    for s in futures_util::future::join_all(swaps).await {
        if let Some(p) = s.unwrap().previous {
            assert!(replaced.insert(p.at.session), "told twice: {p:?}");
        }
    }
    let now = reg.rooms_of(&[ann]).await.unwrap();
    let last = now[0].1.at.session;
    assert_eq!(replaced.len(), 39);
    assert!(!replaced.contains(&last), "the holder was told to leave");
}
