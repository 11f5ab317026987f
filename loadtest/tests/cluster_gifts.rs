//! Settled gifts whose events a cluster could not publish at once reach the room after all:
//! a history write Redis refuses, a runtime that stopped before its saga settled, an owner
//! killed between its settle and its publish; refused gifts closed with the next write; gifts
//! sent at once opened together and each published once. Real `redis-server` and `chorus`
//! processes on free loopback ports, real WebSocket clients.
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use std::time::Duration;

use kit::client::Client;
use kit::cluster::{Cluster, ClusterOptions};
use protocol::{ErrorCode, RoomId};
use serde_json::{Value, json};
use support::{HISTORY_FAILED, WAIT, alice_and_bob_in, events_until_room_left, one_shard_cluster};
use tokio::time::Instant;

/// A settled gift whose event its runtime cannot publish (its history write fails, as above)
/// is not lost to the room: the gift stays open in the fenced store, and the room's next
/// runtime finds it settled in the ledger and publishes it. The test holds the ledger's write
/// lock until the gift is open, then makes Redis refuse writes: the saga settles, and the
/// write that would publish the event (and close the gift) fails. Bob, who rejoins, gets
/// alice's gift; the coins moved once.
#[tokio::test]
async fn a_settled_gift_whose_event_could_not_be_published_reaches_the_room_after_all() {
    let mut g = alice_with_coins_and_bob_in("owed-gift").await;
    let shard = g.cluster.shards.first().unwrap();
    let lock = hold_ledger_lock(&g.cluster);
    let gift = json!({"room": g.room, "req_id": "owed-1", "gift": "rose", "to": ["bob"]});
    let sent = g.a.send("gift.send", gift).await.unwrap();
    wait_gift_open(&g.cluster, &g.room).await;
    g.cluster.redis.config_set("maxmemory", "1").await.unwrap();
    lock.execute_batch("ROLLBACK").unwrap();
    let settled = g.a.reply_to(sent, WAIT).await;
    g.cluster.redis.config_set("maxmemory", "0").await.unwrap();
    let settled = settled.unwrap();
    assert_eq!(settled["balance"], 90, "{settled}");
    let metric = |name| kit::admin::metric(shard.admin, name);
    assert_eq!(metric(HISTORY_FAILED).await.unwrap(), 1.0);
    assert_eq!(metric(LEFT_OPEN).await.unwrap(), 1.0);
    let seen = events_until_room_left(&mut g.b).await;
    assert!(seen.iter().all(|e| e.ev != "gift"), "published: {seen:?}");
    let e = gift_on_rejoin(&mut g.b, &g.room, &settled, &g.before).await;
    assert_eq!(
        (e.d["from"].as_str(), e.d["coins"].as_i64()),
        (Some("alice"), Some(10))
    );
    assert_eq!(metric(FOUND_OPEN).await.unwrap(), 1.0);
    assert_eq!(
        open_gifts(&g.cluster, &g.room).await,
        0,
        "closed by the publish"
    );
    let token = Some(g.cluster.admin_token.as_str());
    let alice = kit::admin::wallet(g.cluster.gateways[0].admin, token, "alice")
        .await
        .unwrap()
        .json();
    assert_eq!(alice["balance"], 90, "{alice}");
}

/// A gift whose saga is still in the ledger when its room's runtime stops (here Redis freezes,
/// so the owner cannot prove its lease and stops) is settled after the stop: the sender is
/// answered from outside the room, and the event, which no room could publish then, stays
/// open for the next runtime, which publishes it.
#[tokio::test]
async fn a_gift_settled_after_its_runtime_stopped_reaches_the_room_after_all() {
    let mut g = alice_with_coins_and_bob_in("late-gift").await;
    // The test holds the ledger's write lock: the gift's saga waits in the ledger.
    let lock = hold_ledger_lock(&g.cluster);
    let gift = json!({"room": g.room, "req_id": "late-1", "gift": "rose", "to": ["bob"]});
    let sent = g.a.send("gift.send", gift).await.unwrap();
    wait_gift_open(&g.cluster, &g.room).await;
    g.cluster.redis.pause().unwrap();
    let seen = events_until_room_left(&mut g.b).await;
    lock.execute_batch("ROLLBACK").unwrap();
    let settled = g.a.reply_to(sent, WAIT).await;
    g.cluster.redis.resume().unwrap();
    assert!(seen.iter().all(|e| e.ev != "gift"), "published: {seen:?}");
    let settled = settled.unwrap();
    assert_eq!(settled["balance"], 90, "{settled}");
    let shard = g.cluster.shards.first().unwrap();
    let metric = |name| kit::admin::metric(shard.admin, name);
    assert_eq!(metric(LEFT_OPEN).await.unwrap(), 1.0);
    gift_on_rejoin(&mut g.b, &g.room, &settled, &g.before).await;
    assert_eq!(metric(FOUND_OPEN).await.unwrap(), 1.0);
}

/// Refused gifts do not stay open in the fenced store: their records go with the room's next
/// write, or in a write of their own once 32 wait. Bob has no coins.
#[tokio::test]
async fn refused_gifts_are_closed_with_the_next_write() {
    let cluster = one_shard_cluster().await;
    let room = RoomId::from("refused-gifts");
    let (mut a, mut b) = alice_and_bob_in(&cluster, &room).await;
    let mut refuse = async |from: u32, to: u32| {
        for i in from..to {
            let gift = json!({"room": room, "req_id": format!("nsf-{i}"), "gift": "rose", "to": ["alice"]});
            let refused = b.request("gift.send", gift).await;
            assert!(
                matches!(&refused, Err(e) if e.code() == Some(ErrorCode::InsufficientFunds)),
                "a gift without coins: {refused:?}"
            );
        }
    };
    refuse(0, 3).await;
    assert_eq!(open_gifts(&cluster, &room).await, 3, "waiting for a write");
    a.chat(&room, "a write").await.unwrap();
    assert_eq!(open_gifts(&cluster, &room).await, 0, "closed with the chat");
    refuse(3, 3 + 31).await;
    assert_eq!(open_gifts(&cluster, &room).await, 31);
    refuse(34, 35).await;
    assert_eq!(
        open_gifts(&cluster, &room).await,
        0,
        "closed by a write of their own"
    );
}

/// Gifts sent at once by several members of one room are opened together (the runtime's
/// opener batches them) and each is closed by the write that publishes its event: every gift
/// settles, a watcher sees each event exactly once, and nothing stays open.
#[tokio::test]
async fn concurrent_gifts_are_opened_together_and_each_published_once() {
    const SENDERS: usize = 5;
    const GIFTS_EACH: usize = 20;
    let cluster = one_shard_cluster().await;
    let room = RoomId::from("gift-batch");
    let token = Some(cluster.admin_token.as_str());
    let mut senders = Vec::new();
    for i in 0..SENDERS {
        let user = format!("sender{i}");
        let r = kit::admin::grant(cluster.gateways[0].admin, token, &user, 1000, "g1")
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        let mut c = cluster.connect(0, &user).await.unwrap();
        c.join_retrying(&room, None, WAIT).await.unwrap();
        senders.push(c);
    }
    let mut watcher = cluster.connect(0, "watcher").await.unwrap();
    watcher.join_retrying(&room, None, WAIT).await.unwrap();
    let mut sent = Vec::new();
    for n in 0..GIFTS_EACH {
        for (i, c) in senders.iter_mut().enumerate() {
            let to = format!("sender{}", (i + 1) % SENDERS);
            let gift =
                json!({"room": room, "req_id": format!("b-{i}-{n}"), "gift": "rose", "to": [to]});
            sent.push((i, c.send("gift.send", gift).await.unwrap()));
        }
    }
    for (i, id) in sent {
        let settled = senders[i].reply_to(id, WAIT).await.unwrap();
        assert!(settled["order"].is_string(), "{settled}");
    }
    // Every order is carried by exactly one event: a storm may merge a streak's orders (one
    // streak per sender here) into one event covering combo numbers `combo - merged + 1 ..=
    // combo`, so each streak's numbers must come exactly once, in order.
    let mut next: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    let mut carried = 0;
    while carried < SENDERS * GIFTS_EACH {
        let e = watcher.next_event_named("gift", WAIT).await.unwrap();
        let merged = e.d["merged"].as_u64().unwrap_or(1);
        let combo = e.d["combo"].as_u64().unwrap();
        let n = next.entry(e.d["streak"].to_string()).or_insert(1);
        assert_eq!(combo + 1 - merged, *n, "published twice or skipped: {e:?}");
        *n = combo + 1;
        carried += merged as usize;
    }
    // A merged event's write closed its orders' open records.
    let deadline = tokio::time::Instant::now() + WAIT;
    while open_gifts(&cluster, &room).await != 0 {
        assert!(tokio::time::Instant::now() < deadline, "gifts left open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watcher.chat(&room, "the end").await.unwrap();
    loop {
        let e = watcher.next_event(WAIT).await.unwrap();
        assert_ne!(e.ev, "gift", "published twice: {e:?}");
        if e.ev == "chat" {
            break;
        }
    }
}

/// Takes the shared ledger's write lock, so that every saga waits in the ledger until the
/// returned connection rolls back.
fn hold_ledger_lock(cluster: &Cluster) -> rusqlite::Connection {
    let lock = rusqlite::Connection::open(cluster.data_dir.join("ledger.db")).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    lock
}

/// The number of gifts open in `room` (in Redis).
async fn open_gifts(cluster: &Cluster, room: &RoomId) -> i64 {
    let key = format!("room:{{{room}}}:open_gifts");
    cluster.redis.integer(&["SCARD", &key]).await.unwrap()
}

/// Waits until a gift is open in `room`: its runtime opened it and handed it to the ledger.
async fn wait_gift_open(cluster: &Cluster, room: &RoomId) {
    let deadline = Instant::now() + WAIT;
    while open_gifts(cluster, room).await == 0 {
        assert!(Instant::now() < deadline, "no gift was opened in {room}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A shard killed after a gift settled in the ledger and before its event reached the room's
/// history (a test switch aborts it there): the gift was open in the fenced store, so the
/// room's next runtime, on the other shard, finds it settled in the ledger and publishes its
/// event. Bob, who rejoins from his position, gets it in the new epoch, and only once; the
/// coins moved once.
#[tokio::test]
async fn a_gift_whose_owner_died_before_publishing_it_reaches_the_room_after_all() {
    let cluster = Cluster::start(ClusterOptions {
        shards: 2,
        gateways: 1,
        lease_ttl: Duration::from_secs(2),
        env: vec![("CHORUS_TEST_CRASH_AFTER_SETTLE".into(), "1".into())],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let mut g = alice_with_coins_and_bob_in_cluster(cluster, "killed-gift").await;
    let (owner, _) = g
        .cluster
        .room_owner(g.room.as_str())
        .await
        .unwrap()
        .unwrap();
    let gift = json!({"room": g.room, "req_id": "killed-1", "gift": "rose", "to": ["bob"]});
    let _ = g.a.send("gift.send", gift).await.unwrap();
    let dead = g.cluster.shard_mut(&owner).unwrap();
    let status = dead.node.wait_exit(WAIT).await.unwrap();
    assert!(status.is_some(), "the owner did not crash");
    let seen = events_until_room_left(&mut g.b).await;
    assert!(seen.iter().all(|e| e.ev != "gift"), "published: {seen:?}");
    let token = Some(g.cluster.admin_token.as_str());
    let gw = g.cluster.gateways[0].admin;
    let wallet = |user: &'static str| async move {
        let path = format!("/admin/wallets/{user}");
        kit::admin::get(gw, &path, token).await.unwrap().json()
    };
    assert_eq!(
        wallet("alice").await["balance"],
        90,
        "settled before the crash"
    );

    let rejoined = g.b.join_retrying(&g.room, None, WAIT).await.unwrap();
    assert_eq!(rejoined["resync"], false, "{rejoined}");
    let e = g.b.next_event_named("gift", WAIT).await.unwrap();
    assert_eq!(
        (e.d["from"].as_str(), e.d["coins"].as_i64()),
        (Some("alice"), Some(10)),
        "{e:?}"
    );
    assert!(e.epoch > g.before.epoch, "{e:?}");
    let survivor = g.cluster.shards.iter().find(|s| s.id != owner).unwrap();
    let found = kit::admin::metric(survivor.admin, FOUND_OPEN).await;
    assert_eq!(found.unwrap(), 1.0);
    assert_eq!(
        open_gifts(&g.cluster, &g.room).await,
        0,
        "closed by the publish"
    );
    // Once: no second gift event before alice's next chat.
    g.a.join_retrying(&g.room, None, WAIT).await.unwrap();
    g.a.chat(&g.room, "after").await.unwrap();
    loop {
        let next = g.b.next_event(WAIT).await.unwrap();
        assert_ne!(next.ev, "gift", "published twice: {next:?}");
        if next.ev == "chat" {
            assert_eq!(next.d["text"], "after", "{next:?}");
            break;
        }
    }
    assert_eq!(wallet("alice").await["balance"], 90, "debited once");
    assert_eq!(wallet("bob").await["earnings"], 5, "credited once");
}

/// A one-shard cluster (2-s leases) where alice has 100 coins and bob, beside her in `room`,
/// holds a position to resume from (`before`, a chat).
struct OwedGift {
    cluster: Cluster,
    a: Client,
    b: Client,
    before: kit::client::Event,
    room: RoomId,
}

async fn alice_with_coins_and_bob_in(room: &str) -> OwedGift {
    alice_with_coins_and_bob_in_cluster(one_shard_cluster().await, room).await
}

/// [`alice_with_coins_and_bob_in`] on `cluster`.
async fn alice_with_coins_and_bob_in_cluster(cluster: Cluster, room: &str) -> OwedGift {
    let token = Some(cluster.admin_token.as_str());
    let r = kit::admin::grant(cluster.gateways[0].admin, token, "alice", 100, "g1")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let room = RoomId::from(room);
    let (mut a, mut b) = alice_and_bob_in(&cluster, &room).await;
    a.chat(&room, "before").await.unwrap();
    let before = b.next_event_named("chat", WAIT).await.unwrap();
    OwedGift {
        cluster,
        a,
        b,
        before,
        room,
    }
}

/// Bob rejoins from his position (no resync) and gets the `settled` gift's event, in an epoch
/// after `before`'s: published by the next runtime.
async fn gift_on_rejoin(
    b: &mut Client,
    room: &RoomId,
    settled: &Value,
    before: &kit::client::Event,
) -> kit::client::Event {
    let rejoined = b.join_retrying(room, None, WAIT).await.unwrap();
    assert_eq!(rejoined["resync"], false, "{rejoined}");
    let e = b.next_event_named("gift", WAIT).await.unwrap();
    assert_eq!(e.d["order"], settled["order"], "{e:?}");
    assert!(e.epoch > before.epoch, "{e:?}");
    e
}

/// Settled gifts whose event a runtime left open in the fenced store for the next one (the
/// shard's counter).
const LEFT_OPEN: &str = "chorus_gift_events_left_open_total";

/// Gift events a room's new runtime published from gifts a previous one left open (the
/// shard's counter).
const FOUND_OPEN: &str = "chorus_gift_events_found_open_total";
