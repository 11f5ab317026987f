//! Guards and VIP badges end to end on a standalone server, with real WebSocket clients:
//! `guard.buy` paid once per request id, the `guard` badge on `member.join`, `member.update` (and again when it ends),
//! `member.list`, chat and gift events in the host's room, `guard.list` by host or room, a
//! refusal without coins, expiry by time, and the VIP level moving with a settled gift (also
//! one a storm holds back).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::sync::Arc;
use std::time::Duration;

use gateway::GatewayConfig;
use gateway::guards::GuardPlan;
use kit::client::{Client, Event};
use protocol::{ErrorCode, RoomId};
use serde_json::{Value, json};
use shard::ShardConfig;
use shard::state::{GiftRules, VipRules};
use tokio::time::Instant;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"guards-test-secret";
const ADMIN: &str = "guards-admin";
const WAIT: Duration = Duration::from_secs(10);

async fn launch() -> Server {
    launch_with(GiftRules::default()).await
}

async fn launch_with(gift_rules: GiftRules) -> Server {
    let plans = vec![
        GuardPlan {
            id: "week".into(),
            days: 7.0,
            price: 300,
        },
        // About 2.6 s: long enough to be seen, short enough to end within the test.
        GuardPlan {
            id: "blink".into(),
            days: 0.000_03,
            price: 10,
        },
    ];
    let gateway = GatewayConfig {
        rate_per_sec: 10_000,
        rate_burst: 10_000,
        drain_window: Duration::from_millis(100),
        guard_plans: Arc::new(plans),
        ..GatewayConfig::default()
    };
    let shard = ShardConfig {
        vip: Arc::new(VipRules {
            thresholds: vec![10, 100],
            entrance_level: 2,
            protected_level: 2,
        }),
        gift_rules,
        ..ShardConfig::default()
    };
    Server::launch(SECRET, ADMIN, gateway, shard).await
}

async fn grant(s: &Server, user: &str, coins: i64) {
    let r = kit::admin::grant(s.admin, Some(ADMIN), user, coins, &format!("seed-{user}"))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
}

/// The next presence event (`member.join` or `member.update`) about `user`.
async fn presence_of(c: &mut Client, user: &str) -> Event {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = c.next_event(left).await.unwrap();
        if (e.ev == "member.join" || e.ev == "member.update") && e.d["user"] == user {
            return e;
        }
    }
}

async fn guards(c: &mut Client, d: Value) -> Vec<(String, i64)> {
    let ok = c.request("guard.list", d).await.unwrap();
    ok["guards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["user"].as_str().unwrap().to_owned(),
                g["expires_at"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_guard_bought_shows_its_badge_in_the_hosts_room_and_is_listed() {
    let s = launch().await;
    grant(&s, "alice", 1_000).await;
    let room = RoomId::from("hana-room");
    let mut host = s.connect("hana").await;
    host.create_room(json!({"room": room})).await.unwrap();
    let mut w = s.connect("watcher").await;
    w.join(&room, false, None).await.unwrap();

    let mut a = s.connect("alice").await;
    let plans = a.request("guard.plans", json!({})).await.unwrap();
    assert_eq!(
        plans["plans"][0],
        json!({"id": "week", "days": 7.0, "price": 300})
    );
    let buy = json!({"host": "hana", "plan": "week", "req_id": "b1"});
    let before = storage::ledger::now_ms();
    let ok = a.request("guard.buy", buy.clone()).await.unwrap();
    assert_eq!(ok["applied"], true);
    assert_eq!(ok["balance"], 700);
    let expires = ok["expires_at"].as_i64().unwrap();
    assert!(expires >= before + 7 * 86_400_000, "{ok}");
    // A retry of the same request: answered again, paid once.
    let again = a.request("guard.buy", buy).await.unwrap();
    assert_eq!(
        (&again["applied"], &again["balance"], &again["expires_at"]),
        (&json!(false), &json!(700), &json!(expires))
    );

    // Joining the host's room: the badge rides on `member.join`, the list and chat.
    a.join(&room, false, None).await.unwrap();
    let j = presence_of(&mut w, "alice").await;
    assert_eq!(
        (j.ev.as_str(), &j.d["guard"]),
        ("member.join", &json!(true)),
        "{:?}",
        j.d
    );
    let list = w
        .request("member.list", json!({"room": room}))
        .await
        .unwrap();
    let me = list["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["user"] == "alice")
        .unwrap()
        .clone();
    assert_eq!(me["guard"], true);
    let plain = list["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["user"] == "watcher")
        .unwrap();
    assert!(plain.get("guard").is_none(), "no badge without a guard");
    a.chat(&room, "hello").await.unwrap();
    let c = w.next_event_named("chat", WAIT).await.unwrap();
    assert_eq!(
        (&c.d["from"], &c.d["guard"]),
        (&json!("alice"), &json!(true))
    );

    // Listed by host and by room, with the expiry.
    let want = vec![("alice".to_owned(), expires)];
    assert_eq!(guards(&mut w, json!({"host": "hana"})).await, want);
    assert_eq!(guards(&mut w, json!({"room": room})).await, want);
    let e = w
        .request("guard.list", json!({"room": "no-such-room"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::RoomNotFound));
    let e = w
        .request("guard.list", json!({"host": "hana", "room": room}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::BadRequest));

    // No coins: refused, nothing listed or shown; oneself and unknown plans: bad requests.
    let mut bob = s.connect("bob").await;
    let e = bob
        .request(
            "guard.buy",
            json!({"host": "hana", "plan": "week", "req_id": "x"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InsufficientFunds));
    assert_eq!(guards(&mut w, json!({"host": "hana"})).await, want);
    for d in [
        json!({"host": "bob", "plan": "week", "req_id": "y"}),
        json!({"host": "hana", "plan": "forever", "req_id": "y"}),
        json!({"host": "hana", "plan": "week", "req_id": ""}),
    ] {
        let e = bob.request("guard.buy", d.clone()).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::BadRequest), "{d}");
    }
    let wallet = kit::admin::wallet(s.admin, Some(ADMIN), "bob")
        .await
        .unwrap()
        .json();
    assert_eq!(wallet["balance"], 0, "{wallet}");

    // A guard bought while in the room: `member.update` shows the badge at once.
    grant(&s, "carol", 100).await;
    let mut carol = s.connect("carol").await;
    carol.join(&room, false, None).await.unwrap();
    let j = presence_of(&mut w, "carol").await;
    assert!(j.d.get("guard").is_none(), "{:?}", j.d);
    carol
        .request(
            "guard.buy",
            json!({"host": "hana", "plan": "blink", "req_id": "c1"}),
        )
        .await
        .unwrap();
    let u = presence_of(&mut w, "carol").await;
    assert_eq!(
        (u.ev.as_str(), &u.d["guard"]),
        ("member.update", &json!(true))
    );

    // The short guard ends by time: the room shows the badge gone (`member.update` without
    // it), it is no longer listed (polled, bounded), and a rejoin shows no badge.
    let u = presence_of(&mut w, "carol").await;
    assert_eq!(u.ev, "member.update");
    assert!(u.d.get("guard").is_none(), "the badge ended: {:?}", u.d);
    let deadline = Instant::now() + Duration::from_secs(20);
    while guards(&mut w, json!({"host": "hana"})).await.len() > 1 {
        assert!(Instant::now() < deadline, "carol's guard never ended");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    carol
        .request("room.leave", json!({"room": room}))
        .await
        .unwrap();
    carol.join(&room, false, None).await.unwrap();
    let j = presence_of(&mut w, "carol").await;
    assert_eq!(j.ev, "member.join");
    assert!(
        j.d.get("guard").is_none(),
        "an ended guard shows nothing: {:?}",
        j.d
    );

    // VIP: alice's gift of 10 coins reaches level 1 (shown with `member.update`); the gift
    // event carries her badges.
    let g = json!({"room": room, "req_id": "v1", "gift": "rose", "to": ["watcher"]});
    a.request("gift.send", g).await.unwrap();
    let (mut update, mut gift) = (None, None);
    let deadline = Instant::now() + WAIT;
    while update.is_none() || gift.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = w.next_event(left).await.unwrap();
        match e.ev.as_str() {
            "member.update" if e.d["user"] == "alice" => update = Some(e.d),
            "gift" => gift = Some(e.d),
            _ => {}
        }
    }
    let (u, g) = (update.unwrap(), gift.unwrap());
    assert_eq!((&u["vip"], &u["guard"]), (&json!(1), &json!(true)), "{u}");
    assert_eq!((&g["vip"], &g["guard"]), (&json!(1), &json!(true)), "{g}");
    // Two hearts (100 coins): 110 spent, level 2.
    let g = json!({"room": room, "req_id": "v2", "gift": "heart", "count": 2, "to": ["watcher"]});
    a.request("gift.send", g).await.unwrap();
    let u = presence_of(&mut w, "alice").await;
    assert_eq!((u.ev.as_str(), &u.d["vip"]), ("member.update", &json!(2)));
    // A new connection reads the lifetime spend from the ledger: level 2 and the entrance on
    // its join (or, when the join overtakes that read, an update right after it).
    a.close().await;
    let left = presence_of_or_leave(&mut w, "alice").await;
    assert_eq!(left, "member.leave");
    let mut a = s.connect("alice").await;
    a.join(&room, false, None).await.unwrap();
    let j = presence_of(&mut w, "alice").await;
    assert_eq!(j.ev, "member.join");
    if j.d.get("vip").is_some() {
        assert_eq!(
            (&j.d["vip"], &j.d["entrance"]),
            (&json!(2), &json!(true)),
            "{:?}",
            j.d
        );
    } else {
        let u = presence_of(&mut w, "alice").await;
        assert_eq!((u.ev.as_str(), &u.d["vip"]), ("member.update", &json!(2)));
    }
    s.stop().await;
}

/// The next `member.leave` about `user` (its name), or a presence event about them.
async fn presence_of_or_leave(c: &mut Client, user: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = c.next_event(left).await.unwrap();
        if e.ev.starts_with("member.") && e.d["user"] == user {
            return e.ev;
        }
    }
}

/// A gift a storm holds back still shows the VIP level it crosses at once: one `gift` event
/// per second, so after a rose (level 1) the hearts that reach level 2 are held for a merged
/// event, and `member.update` with level 2 comes anyway (before or with that event).
#[tokio::test]
async fn a_held_gift_crossing_a_vip_level_shows_member_update() {
    let s = launch_with(GiftRules {
        events_per_sec: 1,
        ..GiftRules::default()
    })
    .await;
    grant(&s, "alice", 1_000).await;
    let room = RoomId::from("storm-vip");
    let mut host = s.connect("hana").await;
    host.create_room(json!({"room": room})).await.unwrap();
    let mut w = s.connect("watcher").await;
    w.join(&room, false, None).await.unwrap();
    let mut a = s.connect("alice").await;
    a.join(&room, false, None).await.unwrap();
    assert_eq!(presence_of(&mut w, "alice").await.ev, "member.join");
    // The rose is the second's one event: level 1 at once.
    let g = json!({"room": room, "req_id": "r1", "gift": "rose", "to": ["watcher"]});
    a.request("gift.send", g).await.unwrap();
    let u = presence_of(&mut w, "alice").await;
    assert_eq!((u.ev.as_str(), &u.d["vip"]), ("member.update", &json!(1)));
    // Two hearts, one order each, over the budget: held (110 spent, level 2).
    for n in 0..2 {
        let g =
            json!({"room": room, "req_id": format!("h{n}"), "gift": "heart", "to": ["watcher"]});
        a.request("gift.send", g).await.unwrap();
    }
    let (mut update, mut hearts) = (None, 0);
    let deadline = Instant::now() + WAIT;
    while update.is_none() || hearts < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = w
            .next_event(left)
            .await
            .unwrap_or_else(|e| panic!("update {update:?}, hearts {hearts}: {e:?}"));
        match e.ev.as_str() {
            "member.update" if e.d["user"] == "alice" => update = Some(e.d),
            "gift" if e.d["gift"] == "heart" => {
                hearts += e.d["merged"].as_u64().unwrap_or(1);
            }
            _ => {}
        }
    }
    assert_eq!(update.unwrap()["vip"], json!(2));
    s.stop().await;
}
