//! PK on a standalone server: the owner starts a battle between two teams of seats, gifts to
//! the users on each team's seats score for it (`pk.score`, volatile, latest wins, bounded
//! rate), a joiner's snapshot shows the PK, and the owner's stop ends it with the sequenced
//! `pk.end` (winner, each team's top sender), replayed to a member who resumes across it and
//! sent to the app's backend as `pk.ended`.

use std::sync::Arc;
use std::time::Duration;

use gateway::GatewayConfig;
use kit::hooks::Receiver;
use protocol::{ErrorCode, RoomId};
use serde_json::json;
use shard::ShardConfig;
use shard::events::EventsConfig;
use shard::state::RocketRules;
use tokio::time::Instant;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"pk-test-secret";
const ADMIN: &str = "pk-admin";
const WAIT: Duration = Duration::from_secs(10);
/// At most one `pk.score` per this many ms.
const SCORE_EVERY_MS: u64 = 200;

/// A server that sends `pk.ended` to the webhook at `hook`.
async fn start(hook: &str) -> Server {
    let gateway = GatewayConfig {
        rate_per_sec: 10_000,
        rate_burst: 10_000,
        drain_window: Duration::from_millis(100),
        ..GatewayConfig::default()
    };
    let shard = ShardConfig {
        rocket: Arc::new(RocketRules {
            levels: Vec::new(),
            daily_cap: 0,
            progress_interval_ms: SCORE_EVERY_MS,
        }),
        events: Some(
            EventsConfig::new(hook, "pk-hook-secret-0123456", Some(&["pk.ended".into()])).unwrap(),
        ),
        ..ShardConfig::default()
    };
    Server::launch(SECRET, ADMIN, gateway, shard).await
}

/// Waits until the room directory (`room.list`) shows `room` with its PK flag at `on`.
async fn listed_with_pk(c: &mut kit::client::Client, room: &RoomId, on: bool) {
    let deadline = Instant::now() + WAIT;
    loop {
        let page = c.request("room.list", json!({"limit": 50})).await.unwrap();
        let entry = page["rooms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["room"] == room.as_str())
            .cloned();
        if entry.as_ref().is_some_and(|e| e.get("pk").is_some() == on) {
            if on {
                assert_eq!(entry.unwrap()["pk"], true);
            }
            return;
        }
        assert!(Instant::now() < deadline, "not listed with pk {on}: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn gifts_to_each_teams_seats_score_and_the_owners_stop_names_the_winner() {
    let mut rx = Receiver::start(0).await.unwrap();
    let s = start(&rx.url).await;
    let r = kit::admin::grant(s.admin, Some(ADMIN), "fan", 1_000, "g")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let room = RoomId::from("pk");
    let mut host = s.connect("host").await;
    host.create_room(json!({"room": room, "seats": 8}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut red = s.connect("red").await;
    let mut blue = s.connect("blue").await;
    let mut fan = s.connect("fan").await;
    let mut w = s.connect("watcher").await;
    for c in [&mut red, &mut blue, &mut fan, &mut w] {
        c.join(&room, false, None).await.unwrap();
    }
    red.request("seat.take", json!({"room": room, "seat": 1}))
        .await
        .unwrap();
    blue.request("seat.take", json!({"room": room, "seat": 5}))
        .await
        .unwrap();

    // Only the staff start one.
    let pk = json!({"room": room, "seconds": 120, "red": [1], "blue": [5]});
    let err = w.request("pk.start", pk.clone()).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Forbidden));
    let ok = host.request("pk.start", pk.clone()).await.unwrap();
    assert_eq!(ok["pk"], 1);
    let ends_at = ok["ends_at"].as_u64().unwrap();
    let e = w.next_event_named("pk.start", WAIT).await.unwrap();
    assert!(e.seq.is_some(), "sequenced");
    assert_eq!(
        e.d,
        json!({"pk": 1, "red_seats": [1], "blue_seats": [5], "ends_at": ends_at, "by": "host"})
    );
    let err = host.request("pk.start", pk).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PkOn));
    // The directory marks the room as in a PK.
    listed_with_pk(&mut w, &room, true).await;

    // Three roses to red's seat, one to blue's, one to a listener (no team).
    let started = Instant::now();
    for (i, to) in ["red", "red", "blue", "red", "watcher"].iter().enumerate() {
        let g = json!({"room": room, "req_id": format!("g{i}"), "gift": "rose", "to": [to]});
        fan.request("gift.send", g).await.unwrap();
    }
    let mut scores = 0;
    loop {
        let e = w.next_event_named("pk.score", WAIT).await.unwrap();
        scores += 1;
        assert!(e.seq.is_none(), "volatile: not sequenced");
        assert_eq!(
            (e.d["pk"].as_u64(), e.d["ends_at"].as_u64()),
            (Some(1), Some(ends_at))
        );
        if e.d["red"] == 30 && e.d["blue"] == 10 {
            break;
        }
    }
    let bound = started.elapsed().as_millis() / u128::from(SCORE_EVERY_MS) + 1;
    assert!(
        scores as u128 <= bound,
        "{scores} pk.score events over {bound}"
    );

    // A joiner sees the PK with its teams and scores.
    let mut late = s.connect("late").await;
    let ok = late.join(&room, false, None).await.unwrap();
    assert_eq!(
        ok["snapshot"]["pk"],
        json!({"pk": 1, "red": 30, "blue": 10, "ends_at": ends_at, "red_seats": [1], "blue_seats": [5]})
    );

    // The watcher drops out; the owner stops the PK meanwhile.
    let since = w.since(&room).unwrap();
    drop(w);
    let err = late
        .request("pk.stop", json!({"room": room}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Forbidden));
    host.request("pk.stop", json!({"room": room}))
        .await
        .unwrap();
    let end = late.next_event_named("pk.end", WAIT).await.unwrap();
    assert!(end.seq.is_some(), "sequenced");
    let want = json!({"pk": 1, "red": 30, "blue": 10, "winner": "red", "red_top": "fan",
        "blue_top": "fan", "reason": "stopped", "by": "host"});
    assert_eq!(end.d, want);
    let mut after = s.connect("after").await;
    let ok = after.join(&room, false, None).await.unwrap();
    assert!(ok["snapshot"].get("pk").is_none(), "{}", ok["snapshot"]);
    let err = host
        .request("pk.stop", json!({"room": room}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NoPk));
    listed_with_pk(&mut after, &room, false).await;
    // The app's backend gets the result.
    let (events, _) = rx
        .delivered_until(|e| e["kind"] == "pk.ended", WAIT, |_| {})
        .await;
    let ended = events.last().unwrap();
    assert_eq!((&ended["room"], &ended["data"]), (&json!("pk"), &want));

    // Resuming from before the stop replays the end.
    let mut w = s.connect("watcher").await;
    w.set_position(&room, since.epoch, since.seq);
    w.join(&room, true, None).await.unwrap();
    let replayed = w.next_event_named("pk.end", WAIT).await.unwrap();
    assert_eq!(replayed.d, want);
    assert_eq!(replayed.seq, end.seq);
    s.stop().await;
}

#[tokio::test]
async fn the_apps_backend_starts_and_stops_a_pk_through_the_admin_api() {
    let mut rx = Receiver::start(0).await.unwrap();
    let s = start(&rx.url).await;
    let room = RoomId::from("backend-pk");
    let mut host = s.connect("host").await;
    host.create_room(json!({"room": room, "seats": 8}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    let call = |method: &'static str, body: Option<serde_json::Value>| {
        kit::admin::call(
            s.admin,
            method,
            "/admin/rooms/backend-pk/pk",
            Some(ADMIN),
            body,
        )
    };

    let r = call("POST", Some(json!({"seconds": 10}))).await.unwrap();
    assert_eq!(r.status, 400, "{}", r.body);
    let r = call("POST", Some(json!({"seconds": 60, "colour": "red"})))
        .await
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.body);
    let r = call("POST", Some(json!({"seconds": 60}))).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let ok = r.json();
    assert_eq!(ok["pk"], 1, "{ok}");
    let e = host.next_event_named("pk.start", WAIT).await.unwrap();
    assert_eq!(
        e.d,
        json!({"pk": 1, "red_seats": [0, 1, 2, 3], "blue_seats": [4, 5, 6, 7],
            "ends_at": ok["ends_at"], "by": null})
    );
    assert_eq!(Some(ok["seq"].as_u64().unwrap()), e.seq);
    let r = call("POST", None).await.unwrap();
    assert_eq!((r.status, r.json()["code"].clone()), (409, json!("PK_ON")));

    let r = call("DELETE", None).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let end = host.next_event_named("pk.end", WAIT).await.unwrap();
    assert_eq!(
        end.d,
        json!({"pk": 1, "red": 0, "blue": 0, "winner": "draw", "reason": "stopped"})
    );
    let r = call("DELETE", None).await.unwrap();
    assert_eq!((r.status, r.json()["code"].clone()), (404, json!("NO_PK")));
    let (events, _) = rx
        .delivered_until(|e| e["kind"] == "pk.ended", WAIT, |_| {})
        .await;
    assert_eq!(events.last().unwrap()["data"], end.d);
    s.stop().await;
}
