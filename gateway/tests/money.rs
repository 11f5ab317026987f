//! Money end to end on a standalone server: grants, balances, gifts (single, batch, lucky),
//! idempotency, concurrency, conservation, catalog and leaderboards.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use gateway::GatewayConfig;
use protocol::{ErrorCode, RoomId};
use serde_json::{Value, json};
use shard::ShardConfig;
use shard::gifts::Catalog;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"money-test-secret";
const ADMIN: &str = "money-admin";
const WAIT: Duration = Duration::from_secs(5);

async fn start() -> Server {
    start_with(|_| {}).await
}

/// A server whose shard configuration `tune` has adjusted.
async fn start_with(tune: impl FnOnce(&mut ShardConfig)) -> Server {
    let gateway = GatewayConfig {
        rate_per_sec: 10_000,
        rate_burst: 10_000,
        drain_window: Duration::from_millis(100),
        ..GatewayConfig::default()
    };
    let mut shard = ShardConfig {
        catalog: std::sync::Arc::new(Catalog::default_with_secret(b"lucky".to_vec())),
        ..ShardConfig::default()
    };
    tune(&mut shard);
    Server::launch(SECRET, ADMIN, gateway, shard).await
}

impl Server {
    async fn grant_coins(&self, user: &str, amount: i64, key: &str) -> Value {
        let r = kit::admin::grant(self.admin, Some(ADMIN), user, amount, key)
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    }

    async fn wallet(&self, user: &str) -> Value {
        kit::admin::wallet(self.admin, Some(ADMIN), user)
            .await
            .unwrap()
            .json()
    }
}

fn gift(room: &RoomId, req: &str, gift: &str, to: Value) -> Value {
    json!({"room": room, "req_id": req, "gift": gift, "count": 1, "to": to})
}

#[tokio::test]
async fn grants_are_idempotent_and_need_the_admin_token() {
    let s = start().await;
    assert_eq!(s.grant_coins("alice", 100, "k1").await["balance"], 100);
    let again = s.grant_coins("alice", 100, "k1").await;
    assert_eq!(
        (again["balance"].as_i64(), again["applied"].as_bool()),
        (Some(100), Some(false))
    );
    assert_eq!(s.grant_coins("alice", 50, "k2").await["balance"], 150);
    // A key reused for another amount is a conflict, and credits nothing.
    let reused = kit::admin::grant(s.admin, Some(ADMIN), "alice", 999, "k1")
        .await
        .unwrap();
    assert_eq!(reused.status, 409, "{}", reused.body);
    assert_eq!(reused.json()["balance"], 150);
    // A key is 1..=128 bytes of printable ASCII, like a gift's req_id.
    for bad in ["", "with space", "caf\u{e9}", "tab\t", &"k".repeat(129)] {
        let r = kit::admin::grant(s.admin, Some(ADMIN), "alice", 1, bad)
            .await
            .unwrap();
        assert_eq!(r.status, 400, "{bad:?}: {}", r.body);
    }
    assert_eq!(s.wallet("alice").await["balance"], 150);
    let refused = kit::admin::call(
        s.admin,
        "POST",
        "/admin/wallets/alice/grant",
        None,
        Some(json!({"amount": 1, "key": "x"})),
    )
    .await
    .unwrap();
    assert_eq!(refused.status, 401);
    let wrong = kit::admin::call(
        s.admin,
        "POST",
        "/admin/wallets/alice/grant",
        Some("wrong"),
        Some(json!({"amount": 1, "key": "x"})),
    )
    .await
    .unwrap();
    assert_eq!(wrong.status, 401);
    let mut a = s.connect("alice").await;
    assert_eq!(
        a.request("wallet.balance", json!({})).await.unwrap()["balance"],
        150
    );
    s.stop().await;
}

#[tokio::test]
async fn a_gift_debits_once_credits_the_recipient_and_is_broadcast() {
    let s = start().await;
    s.grant_coins("alice", 100, "g").await;
    let mut a = s.connect("alice").await;
    let mut b = s.connect("bob").await;
    let room = RoomId::from("gifts");
    a.join(&room, false, None).await.unwrap();
    b.join(&room, false, None).await.unwrap();
    let ok = a
        .request("gift.send", gift(&room, "req-1", "rose", json!(["bob"])))
        .await
        .unwrap();
    assert_eq!(ok["balance"], 90);
    let order = ok["order"].as_str().unwrap().to_owned();
    for c in [&mut a, &mut b] {
        let e = c.next_event_named("gift", WAIT).await.unwrap();
        assert_eq!(e.d["order"], order.as_str());
        assert_eq!(e.d["from"], "alice");
        assert_eq!(e.d["to"], json!(["bob"]));
        assert_eq!(e.d["coins"], 10);
        assert!(e.seq.is_some(), "gift events are sequenced");
    }
    // The same req_id again, and again after a reconnect: same order, nothing more debited.
    let again = a
        .request("gift.send", gift(&room, "req-1", "rose", json!(["bob"])))
        .await
        .unwrap();
    assert_eq!(again, ok);
    a.close().await;
    let mut a = s.connect("alice").await;
    a.join(&room, false, None).await.unwrap();
    let third = a
        .request("gift.send", gift(&room, "req-1", "rose", json!(["bob"])))
        .await
        .unwrap();
    assert_eq!(third["order"], order.as_str());
    // After a reconnect without a rejoin too: the first result, not NOT_IN_ROOM.
    a.close().await;
    let mut a = s.connect("alice").await;
    let fourth = a
        .request("gift.send", gift(&room, "req-1", "rose", json!(["bob"])))
        .await
        .unwrap();
    assert_eq!(fourth["order"], order.as_str());
    // A new req_id from a non-member is still refused.
    let err = a
        .request("gift.send", gift(&room, "req-2", "rose", json!(["bob"])))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NotInRoom), "{err:?}");
    assert_eq!(s.wallet("alice").await["balance"], 90);
    assert_eq!(s.wallet("bob").await["earnings"], 5, "50 % share");
    // No duplicate gift event was broadcast for the retries.
    b.chat(&room, "marker").await.unwrap();
    loop {
        let e = b.next_event(WAIT).await.unwrap();
        assert_ne!(e.ev, "gift", "a retry was broadcast again");
        if e.ev == "chat" {
            break;
        }
    }
    s.stop().await;
}

/// A UUIDv7 `req_id` (what PROTOCOL.md recommends) gets the time-ordered order id it documents,
/// and its retries, after a reconnect too, the same order and no second debit.
#[tokio::test]
async fn a_uuid7_request_gets_a_time_ordered_order_id_and_its_retries_the_same_order() {
    const REQ: &str = "0190f1a2-b3c4-7d5e-8f60-0123456789ab";
    let s = start().await;
    s.grant_coins("alice", 100, "g").await;
    let mut a = s.connect("alice").await;
    let room = RoomId::from("v7");
    a.join(&room, false, None).await.unwrap();
    let mut b = s.connect("bob").await;
    b.join(&room, false, None).await.unwrap();
    let ok = a
        .request("gift.send", gift(&room, REQ, "rose", json!(["bob"])))
        .await
        .unwrap();
    let order = ok["order"].as_str().unwrap().to_owned();
    // The request's 48-bit timestamp, then version 8.
    assert!(order.starts_with("0190f1a2-b3c4-8"), "{order}");
    assert_eq!(
        order,
        storage::ledger::gift_id(&"alice".into(), REQ).to_string()
    );
    a.close().await;
    let mut a = s.connect("alice").await;
    a.join(&room, false, None).await.unwrap();
    let again = a
        .request("gift.send", gift(&room, REQ, "rose", json!(["bob"])))
        .await
        .unwrap();
    assert_eq!(again, ok);
    assert_eq!(s.wallet("alice").await["balance"], 90);
    s.stop().await;
}

/// A client may use one `req_id` in two rooms. The second room's gift is a conflict, whatever
/// the rooms' fences: a second room whose fence is below the first room's must not read the
/// stored saga's fence as a newer owner and stop its runtime (every retry would stop it again).
#[tokio::test]
async fn a_req_id_reused_in_a_room_with_a_lower_fence_is_a_conflict_that_stops_nothing() {
    let s = start_with(|sh| sh.idle_unload = Duration::from_millis(200)).await;
    s.grant_coins("alice", 100, "g").await;
    let mut a = s.connect("alice").await;
    let (first, second) = (RoomId::from("first"), RoomId::from("second"));
    // The first room's second runtime (it wrote under its first fence, then unloaded).
    a.join(&first, false, None).await.unwrap();
    a.request("chat.send", json!({"room": first, "text": "hi"}))
        .await
        .unwrap();
    a.request("room.leave", json!({"room": first}))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while s.room_fence("first").await.is_some() {
        assert!(tokio::time::Instant::now() < deadline, "never unloaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.join(&first, false, None).await.unwrap();
    let mut b = s.connect("bob").await;
    b.join(&first, false, None).await.unwrap();
    let ok = a
        .request("gift.send", gift(&first, "same", "rose", json!(["bob"])))
        .await
        .unwrap();
    assert_eq!(ok["balance"], 90);
    a.join(&second, false, None).await.unwrap();
    b.join(&second, false, None).await.unwrap();
    let fences = (s.room_fence("first").await, s.room_fence("second").await);
    let (Some(f1), Some(f2)) = fences else {
        panic!("both rooms run: {fences:?}");
    };
    assert!(
        f2 < f1,
        "the second room's fence {f2} is below the first's {f1}"
    );
    for _ in 0..2 {
        let err = a
            .request("gift.send", gift(&second, "same", "rose", json!(["bob"])))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::IdempotencyConflict));
    }
    // The second room kept its runtime, and nothing more was debited.
    assert_eq!(s.room_fence("second").await, Some(f2));
    let ok = a
        .request("gift.send", gift(&second, "new", "rose", json!(["bob"])))
        .await
        .unwrap();
    assert_eq!(ok["balance"], 80);
    assert_eq!(s.room_fence("second").await, Some(f2));
    s.stop().await;
}

#[tokio::test]
async fn twenty_concurrent_gifts_over_a_balance_for_ten() {
    let s = start().await;
    s.grant_coins("alice", 100, "g").await;
    let mut a = s.connect("alice").await;
    let mut b = s.connect("bob").await;
    let room = RoomId::from("race");
    a.join(&room, false, None).await.unwrap();
    b.join(&room, false, None).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(
            a.send(
                "gift.send",
                gift(&room, &format!("c{i}"), "rose", json!(["bob"])),
            )
            .await
            .unwrap(),
        );
    }
    let (mut ok, mut nsf) = (0, 0);
    for id in ids {
        match a.reply_to(id, WAIT).await {
            Ok(v) => {
                assert!(v["balance"].as_i64().unwrap() >= 0);
                ok += 1;
            }
            Err(e) if e.code() == Some(ErrorCode::InsufficientFunds) => nsf += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!((ok, nsf), (10, 10));
    assert_eq!(s.wallet("alice").await["balance"], 0);
    assert_eq!(s.wallet("bob").await["earnings"], 50);
    s.stop().await;
}

#[tokio::test]
async fn batch_gifts_to_the_seated_and_bad_gift_requests() {
    let s = start().await;
    s.grant_coins("host", 1000, "g").await;
    let room = RoomId::from("batch");
    let mut h = s.connect("host").await;
    h.join(&room, false, None).await.unwrap();
    let mut seated = Vec::new();
    for u in ["s1", "s2", "s3"] {
        let mut c = s.connect(u).await;
        c.join(&room, false, None).await.unwrap();
        c.request("seat.take", json!({"room": room})).await.unwrap();
        seated.push(c);
    }
    let mut g = gift(&room, "batch-1", "heart", json!("seats"));
    g["count"] = json!(2);
    let ok = h.request("gift.send", g).await.unwrap();
    assert_eq!(ok["balance"], 1000 - 50 * 2 * 3);
    let e = h.next_event_named("gift", WAIT).await.unwrap();
    assert_eq!(e.d["to"], json!(["s1", "s2", "s3"]));
    for u in ["s1", "s2", "s3"] {
        assert_eq!(s.wallet(u).await["earnings"], 50);
    }
    let code = |r: Result<Value, kit::client::ClientError>| r.unwrap_err().code().unwrap();
    assert_eq!(
        code(
            h.request("gift.send", gift(&room, "x1", "nope", json!(["s1"])))
                .await
        ),
        ErrorCode::BadRequest
    );
    assert_eq!(
        code(
            h.request("gift.send", gift(&room, "x2", "rose", json!(["ghost"])))
                .await
        ),
        ErrorCode::BadRequest
    );
    assert_eq!(
        code(
            h.request("gift.send", gift(&room, "x3", "rose", json!(["host"])))
                .await
        ),
        ErrorCode::BadRequest
    );
    // A retry of the "seats" gift after the seats changed is still a retry: the same order.
    seated[2]
        .request("seat.leave", json!({"room": room}))
        .await
        .unwrap();
    let mut again = gift(&room, "batch-1", "heart", json!("seats"));
    again["count"] = json!(2);
    assert_eq!(h.request("gift.send", again).await.unwrap(), ok);
    // The same req_id for another gift, count, recipients or room is a conflict, not a retry:
    // nothing is debited.
    let mut other_count = gift(&room, "batch-1", "heart", json!("seats"));
    other_count["count"] = json!(3);
    for reused in [
        other_count,
        gift(&room, "batch-1", "rose", json!("seats")),
        gift(&room, "batch-1", "heart", json!(["s1"])),
    ] {
        assert_eq!(
            code(h.request("gift.send", reused).await),
            ErrorCode::IdempotencyConflict
        );
    }
    assert_eq!(s.wallet("host").await["balance"], 1000 - 50 * 2 * 3);
    // A req_id outside printable ASCII, or over 128 bytes, is refused before anything moves.
    for bad in ["has space", "tab\there", "é", &"x".repeat(129)] {
        assert_eq!(
            code(
                h.request("gift.send", gift(&room, bad, "rose", json!(["s1"])))
                    .await
            ),
            ErrorCode::BadRequest,
            "{bad:?}"
        );
    }
    let mut poor = s.connect("poor").await;
    poor.join(&room, false, None).await.unwrap();
    assert_eq!(
        code(
            poor.request("gift.send", gift(&room, "x4", "rose", json!(["s1"])))
                .await
        ),
        ErrorCode::InsufficientFunds
    );
    s.stop().await;
}

#[tokio::test]
async fn catalog_leaderboards_and_lucky_gifts() {
    let s = start().await;
    let mut a = s.connect("alice").await;
    let list = a.request("gift.list", json!({})).await.unwrap();
    let gifts = list["gifts"].as_array().unwrap();
    assert!(
        gifts
            .iter()
            .any(|g| g["id"] == "rose" && g["price"] == 10 && g["kind"] == "normal")
    );
    assert!(gifts.iter().any(|g| g["kind"] == "lucky"));
    s.grant_coins("alice", 100_000, "g").await;
    s.grant_coins("carol", 100_000, "g").await;
    let room = RoomId::from("ranks");
    let mut b = s.connect("bob").await;
    let mut c = s.connect("carol").await;
    a.join(&room, false, None).await.unwrap();
    b.join(&room, false, None).await.unwrap();
    c.join(&room, false, None).await.unwrap();
    a.request("gift.send", gift(&room, "r1", "rocket", json!(["bob"])))
        .await
        .unwrap();
    c.request(
        "gift.send",
        gift(&room, "r2", "rose", json!(["bob", "alice"])),
    )
    .await
    .unwrap();
    let senders = a
        .request(
            "rank.get",
            json!({"room": room, "board": "senders", "period": "day"}),
        )
        .await
        .unwrap();
    assert_eq!(
        senders["entries"][0],
        json!({"user": "alice", "score": 1000})
    );
    assert_eq!(senders["entries"][1], json!({"user": "carol", "score": 20}));
    let receivers = a
        .request(
            "rank.get",
            json!({"room": room, "board": "receivers", "period": "all"}),
        )
        .await
        .unwrap();
    assert_eq!(receivers["entries"][0]["user"], "bob");
    // Lucky gifts: many orders, every outcome paid, the books balance.
    let mut won = 0;
    for i in 0..200 {
        let ok = a
            .request(
                "gift.send",
                gift(&room, &format!("lucky-{i}"), "clover", json!(["bob"])),
            )
            .await
            .unwrap();
        assert!(ok["balance"].as_i64().unwrap() >= 0);
        let e = loop {
            let e = a.next_event_named("gift", WAIT).await.unwrap();
            if e.d["order"] == ok["order"] {
                break e;
            }
        };
        if e.d["lucky_multiplier"].as_u64().unwrap() > 0 {
            won += 1;
        }
    }
    assert!(won > 0, "no lucky win in 200 orders");
    let totals = kit::admin::ledger_totals(s.admin, Some(ADMIN))
        .await
        .unwrap()
        .json();
    assert_eq!(totals["conserved"], true, "{totals}");
    s.stop().await;
}

#[tokio::test]
async fn conservation_over_thousands_of_random_gifts() {
    let s = start().await;
    let users = ["u0", "u1", "u2", "u3", "u4"];
    let mut clients = Vec::new();
    let room = RoomId::from("conserve");
    for u in users {
        s.grant_coins(u, 5_000, "g").await;
        let mut c = s.connect(u).await;
        c.join(&room, false, None).await.unwrap();
        clients.push(c);
    }
    let kinds = ["rose", "heart", "clover"];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut pending = Vec::new();
    for i in 0..2000 {
        let from = (next() % 5) as usize;
        let to = (from + 1 + (next() % 4) as usize) % 5;
        let kind = kinds[(next() % 3) as usize];
        let id = clients[from]
            .send(
                "gift.send",
                gift(&room, &format!("rnd-{i}"), kind, json!([users[to]])),
            )
            .await
            .unwrap();
        pending.push((from, id));
        if pending.len() >= 200 {
            for (c, id) in pending.drain(..) {
                let _ = clients[c].reply_to(id, WAIT).await;
            }
        }
    }
    for (c, id) in pending.drain(..) {
        let _ = clients[c].reply_to(id, WAIT).await;
    }
    let totals = kit::admin::ledger_totals(s.admin, Some(ADMIN))
        .await
        .unwrap()
        .json();
    assert_eq!(totals["conserved"], true, "{totals}");
    for u in users {
        assert!(s.wallet(u).await["balance"].as_i64().unwrap() >= 0);
    }
    s.stop().await;
}

/// An event owed to a room that runs here, recorded after the room's own sweep (if any) has
/// ended: a stopped runtime's late record, made here through a second handle on the ledger as
/// another process would. The node's orphan sweep finds the room, tells its runtime to sweep,
/// and the runtime publishes the gift's event again, to the members it has now.
#[tokio::test]
async fn an_owed_gift_event_recorded_late_reaches_the_running_room() {
    let s = start_with(|c| c.orphan_sweep = Duration::from_millis(200)).await;
    s.grant_coins("alice", 100, "g1").await;
    let room = RoomId::from("late-owed");
    let mut a = s.connect("alice").await;
    let mut b = s.connect("bob").await;
    a.join(&room, true, None).await.unwrap();
    b.join(&room, false, None).await.unwrap();
    a.request("gift.send", gift(&room, "owed-1", "rose", json!(["bob"])))
        .await
        .unwrap();
    let first = b.next_event_named("gift", WAIT).await.unwrap();
    let ledger = storage::ledger::Ledger::open("", s.dir.path())
        .await
        .unwrap();
    let id = storage::ledger::gift_id(&"alice".into(), "owed-1");
    assert_eq!(first.d["order"], id.to_string());
    ledger.mark_unpublished(id).await.unwrap();
    // The sweep lists a record once it is 3 s old; then the running room publishes it.
    let again = b
        .next_event_named("gift", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(again.d["order"], first.d["order"], "{again:?}");
    assert_eq!(
        again.seq,
        first.seq.map(|q| q + 1),
        "a new event of the same epoch"
    );
    assert!(
        ledger.unpublished_gifts(&room, 0).await.unwrap().is_empty(),
        "taken"
    );
    assert_eq!(
        s.wallet("alice").await["balance"],
        90,
        "the money moved once"
    );
    s.stop().await;
}

#[tokio::test]
async fn rank_get_of_a_missing_room_is_room_not_found_and_of_a_quiet_room_is_empty() {
    let s = start().await;
    let mut a = s.connect("alice").await;
    let rank = |room: &str| json!({"room": room, "board": "senders", "period": "all"});
    let missing = a.request("rank.get", rank("nowhere")).await.unwrap_err();
    assert_eq!(missing.code(), Some(ErrorCode::RoomNotFound), "{missing:?}");
    // Bad arguments are still BAD_REQUEST, whether or not the room exists.
    let bad = a
        .request(
            "rank.get",
            json!({"room": "nowhere", "board": "nope", "period": "all"}),
        )
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Some(ErrorCode::BadRequest), "{bad:?}");
    let room = a
        .create_room(json!({"room": "quiet", "title": "no gifts yet"}))
        .await
        .unwrap();
    let empty = a.request("rank.get", rank(room.as_str())).await.unwrap();
    assert_eq!(empty["entries"], json!([]), "{empty}");
    assert_eq!(empty["room"], "quiet");
    s.stop().await;
}

/// A lucky prize is the price paid times the multiplier drawn. For a catalog price so high
/// that the product does not fit in the coins' integer, the order is refused as a bad request
/// (the gift's cost itself fits): the room never books a prize its arithmetic wrapped, and
/// the room keeps serving.
#[tokio::test]
async fn a_lucky_prize_too_large_to_count_is_refused_and_the_room_keeps_serving() {
    use shard::gifts::{GiftDef, GiftKind, Prize};
    let mut catalog = Catalog::default_with_secret(b"lucky".to_vec());
    catalog.gifts.push(GiftDef {
        id: "jackpot".into(),
        name: "Jackpot".into(),
        price: 5_000_000_000_000_000_000,
        kind: GiftKind::Lucky,
        effect_level: 0,
    });
    catalog.prizes = vec![Prize {
        multiplier: 4,
        ppm: 240_000,
    }];
    catalog.validate().unwrap();
    // A request id whose draw wins: 5e18 × 4 does not fit in an i64.
    let winning = (0..1_000)
        .map(|i| format!("jackpot-{i}"))
        .find(|req| {
            let id = storage::ledger::gift_id(&"alice".into(), req);
            catalog.lucky_multiplier(id.as_bytes()) == 4
        })
        .unwrap();
    let s = start_with(|c| c.catalog = std::sync::Arc::new(catalog)).await;
    let room = RoomId::from("jackpot-room");
    let mut a = s.connect("alice").await;
    let mut b = s.connect("bob").await;
    a.join(&room, false, None).await.unwrap();
    b.join(&room, false, None).await.unwrap();
    let err = a
        .request(
            "gift.send",
            gift(&room, &winning, "jackpot", json!(["bob"])),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::BadRequest), "{err:?}");
    // The room is still served.
    a.request("chat.send", json!({"room": room, "text": "still here"}))
        .await
        .unwrap();
    assert_eq!(s.wallet("alice").await["balance"], 0);
    s.stop().await;
}
