//! The event webhook end to end on a standalone node: a real HTTP receiver on loopback gets
//! what a room did (created, members in and out, a seat, a gift settled through the ledger, a
//! kick, the room closed) in order, in signed batches, and a batch it refused is sent again
//! with the same event ids; the sequenced messages, attribute changes and rocket launches;
//! members' reports with the line reported; and only the kinds asked for (chat lines only
//! then); and the platform's decisions on reports and accounts.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::sync::Arc;
use std::time::Duration;

use gateway::GatewayConfig;
use kit::hooks::Receiver;
use serde_json::{Value, json};
use shard::ShardConfig;
use shard::events::{EventsConfig, signature};
use shard::state::{RocketLevel, RocketRules};

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"test-secret-for-event-webhooks";
const ADMIN: &str = "events-admin";
const HOOK_SECRET: &str = "event-webhook-secret-0123";
const WAIT: Duration = Duration::from_secs(15);

async fn start(url: &str, kinds: Option<&[String]>) -> Server {
    let shard = ShardConfig {
        events: Some(EventsConfig::new(url, HOOK_SECRET, kinds).unwrap()),
        ..ShardConfig::default()
    };
    Server::launch(SECRET, ADMIN, GatewayConfig::default(), shard).await
}

/// The events delivered until one of kind `last`, each POST's signature checked.
async fn delivered_until(rx: &mut Receiver, last: &str) -> (Vec<Value>, Vec<Vec<Value>>) {
    rx.delivered_until(
        |e| e["kind"] == last,
        WAIT,
        |post| {
            assert_eq!(
                post.signature,
                signature(HOOK_SECRET.as_bytes(), &post.timestamp, &post.body),
                "every batch is signed"
            );
        },
    )
    .await
}

#[tokio::test]
async fn a_rooms_life_reaches_the_app_in_order_and_a_refused_batch_comes_again() {
    let mut rx = Receiver::start(1).await.unwrap();
    let s = start(&rx.url, None).await;
    let grant = kit::admin::grant(s.admin, Some(ADMIN), "host", 100, "g1")
        .await
        .unwrap();
    assert_eq!(grant.status, 200, "{}", grant.body);
    let mut host = s.connect("host").await;
    let room = host
        .create_room(json!({"room": "hooks", "seats": 4}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut bob = s.connect("bob").await;
    bob.join(&room, false, None).await.unwrap();
    bob.request("seat.take", json!({"room": room, "seat": 1}))
        .await
        .unwrap();
    // Chat lines and direct messages are sent only when asked for by name: none below.
    bob.chat(&room, "not for the app").await.unwrap();
    let dm = json!({"to": "host", "text": "nor this", "req_id": "dm-1"});
    bob.request("im.send", dm).await.unwrap();
    let req_id = "0190c5d2-0000-7000-8000-000000000001";
    host.request(
        "gift.send",
        json!({"room": room, "req_id": req_id, "gift": "rose", "to": ["bob"]}),
    )
    .await
    .unwrap();
    host.request("room.kick", json!({"room": room, "user": "bob"}))
        .await
        .unwrap();
    host.request("room.close", json!({"room": room}))
        .await
        .unwrap();

    let (events, refused) = delivered_until(&mut rx, "room.closed").await;
    // The refused first batch came again, whole, with the same ids.
    let [first_refused] = &refused[..] else {
        panic!("one refused batch: {refused:?}")
    };
    let resent: Vec<Value> = events
        .iter()
        .take(first_refused.len())
        .map(|e| e["id"].clone())
        .collect();
    assert_eq!(&resent, first_refused);
    for e in &events {
        assert_eq!(
            (e["room"].clone(), e["node"].is_string()),
            (json!("hooks"), true),
            "{e}"
        );
    }
    let seen: Vec<(String, Value)> = events
        .iter()
        .map(|e| (e["kind"].as_str().unwrap().to_owned(), e["data"].clone()))
        .collect();
    let kinds: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "room.created",
            "member.joined",
            "member.joined",
            "seat.changed",
            "gift.settled",
            "seat.changed",
            "moderation",
            "member.left",
            "room.closed",
        ],
        "{seen:?}"
    );
    assert_eq!(seen[0].1, json!({"by": "host"}));
    assert_eq!(
        (seen[1].1.clone(), seen[2].1.clone()),
        (json!({"user": "host"}), json!({"user": "bob"}))
    );
    assert_eq!(
        seen[3].1,
        json!({"index": 1, "user": "bob", "by": "bob", "cause": "self", "reason": null})
    );
    let gift = &seen[4].1;
    assert_eq!(
        (
            gift["from"].clone(),
            gift["to"].clone(),
            gift["gift"].clone(),
            gift["count"].clone(),
            gift["coins"].clone()
        ),
        (
            json!("host"),
            json!(["bob"]),
            json!("rose"),
            json!(1),
            json!(10)
        )
    );
    assert!(gift["order"].is_string());
    assert_eq!(
        (seen[5].1["user"].clone(), seen[5].1["reason"].clone()),
        (Value::Null, json!("kicked"))
    );
    assert_eq!(
        (seen[6].1["action"].clone(), seen[6].1["user"].clone()),
        (json!("kick"), json!("bob"))
    );
    assert_eq!(seen[7].1, json!({"user": "bob", "reason": "kicked"}));
    assert_eq!(seen[8].1, json!({"by": "host"}));
    s.stop().await;
}

#[tokio::test]
async fn only_the_kinds_asked_for_are_sent() {
    let mut rx = Receiver::start(0).await.unwrap();
    let kinds = ["room.created".to_owned(), "room.closed".to_owned()];
    let s = start(&rx.url, Some(&kinds)).await;
    let mut host = s.connect("host").await;
    let room = host.create_room(json!({"room": "quiet"})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    host.chat(&room, "hello").await.unwrap();
    host.request("room.close", json!({"room": room}))
        .await
        .unwrap();
    let (events, _) = delivered_until(&mut rx, "room.closed").await;
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["room.created", "room.closed"]);
    // The platform reopens it (a kind not asked for) and closes it: `by` null, its reason.
    for (path, body) in [
        ("/admin/rooms/quiet/open", None),
        ("/admin/rooms/quiet/close", Some(json!({"reason": "spam"}))),
    ] {
        let r = kit::admin::call(s.admin, "POST", path, Some(ADMIN), body)
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{path}");
    }
    let (events, _) = delivered_until(&mut rx, "room.closed").await;
    let seen: Vec<(&str, &Value)> = events
        .iter()
        .map(|e| (e["kind"].as_str().unwrap(), &e["data"]))
        .collect();
    assert_eq!(
        seen,
        [("room.closed", &json!({"by": null, "reason": "spam"}))]
    );
    s.stop().await;
}

#[tokio::test]
async fn messages_attributes_and_rocket_launches_reach_the_app_and_chat_only_when_asked() {
    let mut rx = Receiver::start(0).await.unwrap();
    let kinds: Vec<String> = [
        "chat.sent",
        "chat.recalled",
        "message.custom",
        "room.attrs",
        "rocket.launched",
    ]
    .map(String::from)
    .to_vec();
    let shard = ShardConfig {
        events: Some(EventsConfig::new(&rx.url, HOOK_SECRET, Some(&kinds)).unwrap()),
        // One rose fills the first level.
        rocket: Arc::new(RocketRules {
            levels: vec![RocketLevel {
                fuel: 10,
                top: vec![5],
                present: 0,
                present_coins: 0,
            }],
            daily_cap: 0,
            progress_interval_ms: 1000,
        }),
        ..ShardConfig::default()
    };
    let s = Server::launch(SECRET, ADMIN, GatewayConfig::default(), shard).await;
    let grant = kit::admin::grant(s.admin, Some(ADMIN), "host", 100, "g2")
        .await
        .unwrap();
    assert_eq!(grant.status, 200, "{}", grant.body);
    let mut host = s.connect("host").await;
    let room = host.create_room(json!({"room": "talk"})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut bob = s.connect("bob").await;
    bob.join(&room, false, None).await.unwrap();
    let chat = bob.chat(&room, "hello app").await.unwrap();
    let answer = json!({"room": room, "text": "hi bob", "mentions": ["bob"], "reply_to": chat,
        "mention_all": true});
    let answer = host.request("chat.send", answer).await.unwrap()["seq"].clone();
    // Bob's socket gets the answer with its mentions (bob, and everyone) and the line it answers.
    let mut lines = Vec::new();
    while lines.len() < 2 {
        lines.push(bob.next_event_named("chat", WAIT).await.unwrap());
    }
    assert_eq!(
        (lines[1].seq, &lines[1].d),
        (
            answer.as_u64(),
            &json!({"from": "host", "text": "hi bob", "mentions": ["bob"],
                "reply": {"seq": chat, "from": "bob"}, "mention_all": true})
        )
    );
    let recall = json!({"room": room, "seq": chat});
    host.request("chat.recall", recall).await.unwrap();
    let volatile = json!({"room": room, "type": "like", "volatile": true});
    bob.request("custom.send", volatile).await.unwrap();
    let custom = json!({"room": room, "type": "game.move", "data": {"x": 1}});
    let moved = bob.request("custom.send", custom).await.unwrap();
    let set = json!({"room": room, "set": {"theme": "night"}});
    host.request("room.attrs", set).await.unwrap();
    let gift = json!({"room": room, "req_id": "0190c5d2-0000-7000-8000-0000000000aa",
        "gift": "rose", "to": ["bob"]});
    let order = host.request("gift.send", gift).await.unwrap()["order"].clone();
    let (events, _) = delivered_until(&mut rx, "rocket.launched").await;
    let got: Vec<(&str, &Value)> = events
        .iter()
        .map(|e| (e["kind"].as_str().unwrap(), &e["data"]))
        .collect();
    let launch = &got[5].1;
    assert_eq!(
        got[..5],
        [
            (
                "chat.sent",
                &json!({"seq": chat, "from": "bob", "text": "hello app"})
            ),
            (
                "chat.sent",
                &json!({"seq": answer, "from": "host", "text": "hi bob", "mentions": ["bob"],
                    "reply": {"seq": chat, "from": "bob"}, "mention_all": true})
            ),
            (
                "chat.recalled",
                &json!({"seq": chat, "from": "bob", "by": "host"})
            ),
            (
                "message.custom",
                &json!({"seq": moved["seq"], "from": "bob", "system": false,
                    "type": "game.move", "data": {"x": 1}})
            ),
            (
                "room.attrs",
                &json!({"by": "host", "set": {"theme": "night"}})
            ),
        ],
        "the volatile message is not sent: {events:?}"
    );
    assert_eq!(got[5].0, "rocket.launched");
    assert_eq!(
        (
            &launch["launch"],
            &launch["level"],
            &launch["order"],
            &launch["by"]
        ),
        (&json!(1), &json!(1), &order, &json!("host"))
    );
    assert_eq!(got.len(), 6, "nothing else: {events:?}");
    s.stop().await;
}

/// A member's report reaches the app once, with its id in the moderation queue and the
/// reported line as the room sent it; a report of the room names no user.
#[tokio::test]
async fn a_report_reaches_the_app_once_with_the_reported_line() {
    let mut rx = Receiver::start(0).await.unwrap();
    let s = start(&rx.url, Some(&["report.filed".to_owned()])).await;
    let mut host = s.connect("host").await;
    let room = host.create_room(json!({"room": "reports"})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut bob = s.connect("bob").await;
    bob.join(&room, false, None).await.unwrap();
    let seq = bob.chat(&room, "cheap coins at example.com").await.unwrap();
    let report = json!({"room": room, "seq": seq, "reason": "spam", "text": "an ad"});
    let ok = host.request("report.send", report.clone()).await.unwrap();
    let id = ok["id"].as_u64().unwrap();
    assert_eq!(ok, json!({"id": id}), "the moderation queue's id");
    let again = host.request("report.send", report).await.unwrap();
    assert_eq!(again, json!({"duplicate": true}));
    let of_room = json!({"room": room, "reason": "other"});
    host.request("report.send", of_room).await.unwrap();
    let (events, _) = rx
        .delivered_until(
            |e| e["kind"] == "report.filed" && e["data"]["user"].is_null(),
            WAIT,
            |_| {},
        )
        .await;
    let data: Vec<&Value> = events.iter().map(|e| &e["data"]).collect();
    let [line, room_report] = data[..] else {
        panic!("two reports, the duplicate not sent: {events:?}")
    };
    assert_eq!(line["id"], json!(id), "the app can resolve it by id");
    assert_eq!(room_report["id"], json!(id + 1));
    assert_eq!(
        (
            &line["reporter"],
            &line["user"],
            &line["seq"],
            &line["reason"],
            &line["text"]
        ),
        (
            &json!("host"),
            &json!("bob"),
            &json!(seq),
            &json!("spam"),
            &json!("an ad")
        )
    );
    assert_eq!(
        (&line["line"]["from"], &line["line"]["text"]),
        (&json!("bob"), &json!("cheap coins at example.com"))
    );
    assert_eq!(
        (
            &room_report["user"],
            &room_report["line"],
            &room_report["reason"]
        ),
        (&Value::Null, &Value::Null, &json!("other"))
    );
    s.stop().await;
}

/// The platform's moderation decisions reach the app from the node that took them: a report
/// resolved (once: a second resolve is refused and sends nothing), an account suspended and
/// reinstated (in no room: `room` null); a lift of nobody's suspension sends nothing.
#[tokio::test]
async fn the_platforms_decisions_reach_the_app_once_each() {
    let mut rx = Receiver::start(0).await.unwrap();
    let kinds = ["report.resolved", "user.suspended", "user.reinstated"].map(str::to_owned);
    let s = start(&rx.url, Some(&kinds)).await;
    let mut host = s.connect("host").await;
    let room = host.create_room(json!({"room": "decide"})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut bob = s.connect("bob").await;
    bob.join(&room, false, None).await.unwrap();
    let filed = host
        .request(
            "report.send",
            json!({"room": room, "user": "bob", "reason": "spam"}),
        )
        .await
        .unwrap();
    let id = filed["id"].as_u64().unwrap();
    let addr = s.admin;
    let call = |method: &'static str, path: String, body: Option<Value>| async move {
        kit::admin::call(addr, method, &path, Some(ADMIN), body).await
    };
    let decision = json!({"action": "warned", "note": "first time", "by": "mod-anna"});
    let resolve = format!("/admin/reports/{id}/resolve");
    let resolved = call("POST", resolve.clone(), Some(decision.clone()))
        .await
        .unwrap();
    assert_eq!(resolved.status, 200, "{}", resolved.body);
    let again = call("POST", resolve, Some(decision)).await.unwrap();
    assert_eq!(again.status, 409, "{}", again.body);
    let nobody = call("DELETE", "/admin/users/carol/suspension".into(), None)
        .await
        .unwrap();
    assert_eq!(nobody.status, 404, "{}", nobody.body);
    let body = json!({"seconds": 3600, "reason": "spam", "by": "mod-anna"});
    let suspended = call("PUT", "/admin/users/bob/suspension".into(), Some(body))
        .await
        .unwrap();
    assert_eq!(suspended.status, 200, "{}", suspended.body);
    let lifted = call("DELETE", "/admin/users/bob/suspension".into(), None)
        .await
        .unwrap();
    assert_eq!(lifted.status, 200, "{}", lifted.body);

    let (events, _) = delivered_until(&mut rx, "user.reinstated").await;
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["report.resolved", "user.suspended", "user.reinstated"],
        "one event per decision taken: {events:?}"
    );
    let [report, suspension, reinstated] = &events[..] else {
        unreachable!()
    };
    assert_eq!(report["room"], json!("decide"));
    assert_eq!(
        report["data"],
        serde_json::from_str::<Value>(&resolved.body).unwrap(),
        "the report as the admin API answered it"
    );
    assert_eq!(
        (
            &report["data"]["status"],
            &report["data"]["user"],
            &report["data"]["resolution"]["action"]
        ),
        (&json!("resolved"), &json!("bob"), &json!("warned"))
    );
    assert_eq!(suspension["room"], Value::Null, "an account is in no room");
    assert_eq!(
        suspension["data"],
        serde_json::from_str::<Value>(&suspended.body).unwrap()
    );
    assert_eq!(
        (&suspension["data"]["reason"], &suspension["data"]["by"]),
        (&json!("spam"), &json!("mod-anna"))
    );
    assert!(suspension["data"]["until"].as_u64().is_some());
    assert_eq!(
        (&reinstated["room"], &reinstated["data"]),
        (&Value::Null, &json!({"user": "bob"}))
    );
    s.stop().await;
}

/// Direct messages reach the app when it asks for `im.sent` by name: a member's and the app's
/// own (marked `system`), each as the `im` event's `d`; a retry is not sent again.
#[tokio::test]
async fn direct_messages_reach_the_app_only_when_asked() {
    let mut rx = Receiver::start(0).await.unwrap();
    let s = start(&rx.url, Some(&["im.sent".to_owned()])).await;
    let mut ann = s.connect("ann").await;
    let dm = json!({"to": "bob", "text": "hi bob", "req_id": "dm-1"});
    let sent = ann.request("im.send", dm.clone()).await.unwrap();
    assert_eq!(ann.request("im.send", dm).await.unwrap(), sent, "a retry");
    let body = json!({"from": "official", "text": "welcome", "req_id": "w-1"});
    let app = kit::admin::call(
        s.admin,
        "POST",
        "/admin/users/bob/messages",
        Some(ADMIN),
        Some(body),
    )
    .await
    .unwrap();
    assert_eq!(app.status, 200, "{}", app.body);
    let (events, _) = delivered_until(&mut rx, "im.sent").await;
    let mut events = events;
    if events.len() < 2 {
        events.extend(delivered_until(&mut rx, "im.sent").await.0);
    }
    let data: Vec<&Value> = events.iter().map(|e| &e["data"]).collect();
    assert_eq!(
        data,
        [
            &json!({"id": sent["id"], "at": sent["at"], "from": "ann", "to": "bob", "text": "hi bob"}),
            &json!({"id": app.json()["id"], "at": app.json()["at"], "from": "official", "to": "bob",
                "text": "welcome", "system": true}),
        ],
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .all(|e| e["room"].is_null() && e["kind"] == "im.sent")
    );
    s.stop().await;
}
