//! A PK between two rooms on a standalone server: the app's backend matches two rooms
//! (`POST /admin/pk`), each room's gifts score for it and the other room's score reaches its
//! members through the board (`pk.score`), a stop in either room ends both with the same
//! result seen from each side, and a match one room refuses is taken back in the other.

use std::sync::Arc;
use std::time::Duration;

use gateway::GatewayConfig;
use kit::client::Client;
use protocol::{ErrorCode, RoomId};
use serde_json::{Value, json};
use shard::ShardConfig;
use shard::state::RocketRules;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"pk-link-test-secret";
const ADMIN: &str = "pk-link-admin";
const WAIT: Duration = Duration::from_secs(10);
/// The rooms exchange scores (and send `pk.score`) every this many ms.
const EVERY_MS: u64 = 100;

async fn start() -> Server {
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
            progress_interval_ms: EVERY_MS,
        }),
        ..ShardConfig::default()
    };
    Server::launch(SECRET, ADMIN, gateway, shard).await
}

/// `POST /admin/pk` with `body`: (status, answer).
async fn matched(s: &Server, body: Value) -> (u16, Value) {
    let r = kit::admin::call(s.admin, "POST", "/admin/pk", Some(ADMIN), Some(body))
        .await
        .unwrap();
    (r.status, r.json())
}

/// Waits for a `pk.score` on `c` with these scores.
async fn score(c: &mut Client, red: i64, blue: i64) {
    loop {
        let e = c.next_event_named("pk.score", WAIT).await.unwrap();
        if e.d["red"] == red && e.d["blue"] == blue {
            return;
        }
    }
}

/// Room `id` with its host, and a watcher.
async fn room(s: &Server, id: &str) -> (Client, Client) {
    let room = RoomId::from(id);
    let mut host = s.connect(&format!("host-{id}")).await;
    host.create_room(json!({"room": room, "seats": 8}))
        .await
        .unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut w = s.connect(&format!("watch-{id}")).await;
    w.join(&room, false, None).await.unwrap();
    (host, w)
}

async fn gift(c: &mut Client, room: &str, to: &str, n: usize) {
    for i in 0..n {
        let g =
            json!({"room": room, "req_id": format!("{room}-{to}-{i}"), "gift": "rose", "to": [to]});
        c.request("gift.send", g).await.unwrap();
    }
}

#[tokio::test]
async fn two_rooms_matched_by_the_backend_score_against_each_other_and_end_alike() {
    let s = start().await;
    for fan in ["fan-a", "fan-b"] {
        let r = kit::admin::grant(s.admin, Some(ADMIN), fan, 1_000, fan)
            .await
            .unwrap();
        assert_eq!(r.status, 200);
    }
    let (mut host_a, mut wa) = room(&s, "ra").await;
    let (_host_b, mut wb) = room(&s, "rb").await;
    let mut fan_a = s.connect("fan-a").await;
    fan_a.join(&RoomId::from("ra"), false, None).await.unwrap();
    let mut fan_b = s.connect("fan-b").await;
    fan_b.join(&RoomId::from("rb"), false, None).await.unwrap();

    // Bad matches are refused before any room is touched.
    for bad in [
        json!({"rooms": ["ra", "ra"]}),
        json!({"rooms": ["ra"]}),
        json!({"rooms": ["ra", "rb"], "seconds": 10}),
        json!({"rooms": ["ra", "rb"], "link": "no spaces"}),
        json!({"rooms": ["ra", "rb"], "colour": "red"}),
    ] {
        let (status, answer) = matched(&s, bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {answer}");
    }

    let (status, ok) = matched(
        &s,
        json!({"rooms": ["ra", "rb"], "seconds": 60, "link": "match-1"}),
    )
    .await;
    assert_eq!(status, 200, "{ok}");
    let ends_at = ok["ends_at"].as_u64().unwrap();
    assert_eq!(ok["link"], "match-1");
    assert_eq!(
        (&ok["rooms"][0]["room"], &ok["rooms"][0]["pk"]),
        (&json!("ra"), &json!(1))
    );
    assert_eq!(ok["rooms"][1]["room"], "rb");
    for (w, other) in [(&mut wa, "rb"), (&mut wb, "ra")] {
        let e = w.next_event_named("pk.start", WAIT).await.unwrap();
        assert!(e.seq.is_some(), "sequenced");
        assert_eq!(
            e.d,
            json!({"pk": 1, "red_seats": [], "blue_seats": [], "ends_at": ends_at, "by": null,
                "vs": {"room": other, "link": "match-1"}})
        );
    }
    // Each room is red in its own events: its own gifts, whoever gets them.
    gift(&mut fan_a, "ra", "host-ra", 2).await;
    gift(&mut fan_b, "rb", "watch-rb", 1).await;
    score(&mut wa, 20, 10).await;
    score(&mut wb, 10, 20).await;

    // A joiner sees the match in its snapshot.
    let mut late = s.connect("late").await;
    let ok = late.join(&RoomId::from("rb"), false, None).await.unwrap();
    assert_eq!(
        ok["snapshot"]["pk"],
        json!({"pk": 1, "red": 10, "blue": 20, "ends_at": ends_at, "red_seats": [], "blue_seats": [],
            "vs": {"room": "ra", "link": "match-1"}})
    );

    // ra's host stops it: both rooms end, each with the same two scores from its side.
    host_a
        .request("pk.stop", json!({"room": "ra"}))
        .await
        .unwrap();
    let end_a = wa.next_event_named("pk.end", WAIT).await.unwrap().d;
    let end_b = wb.next_event_named("pk.end", WAIT).await.unwrap().d;
    assert_eq!(
        end_a,
        json!({"pk": 1, "red": 20, "blue": 10, "winner": "red", "red_top": "fan-a",
            "reason": "stopped", "by": "host-ra", "vs": {"room": "rb", "link": "match-1"}})
    );
    assert_eq!(
        end_b,
        json!({"pk": 1, "red": 10, "blue": 20, "winner": "blue", "red_top": "fan-b",
            "reason": "stopped", "vs": {"room": "ra", "link": "match-1"}})
    );
    let err = host_a
        .request("pk.stop", json!({"room": "ra"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NoPk));

    // A second match; the backend stops it through the other room.
    let (status, ok) = matched(&s, json!({"rooms": ["ra", "rb"]})).await;
    assert_eq!(status, 200, "{ok}");
    let link = ok["link"].as_str().unwrap().to_owned();
    assert_eq!(ok["rooms"][1]["pk"], 2);
    // A room in a match is refused another (both are here: the first refusal answers).
    let (status, answer) = matched(&s, json!({"rooms": ["ra", "nowhere"]})).await;
    assert_eq!(
        (status, &answer["code"]),
        (409, &json!("PK_ON")),
        "{answer}"
    );
    let r = kit::admin::call(s.admin, "DELETE", "/admin/rooms/rb/pk", Some(ADMIN), None)
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    for w in [&mut wa, &mut wb] {
        let end = w.next_event_named("pk.end", WAIT).await.unwrap().d;
        assert_eq!((&end["pk"], &end["reason"]), (&json!(2), &json!("stopped")));
        assert_eq!(end["vs"]["link"], link.as_str());
        assert!(end.get("by").is_none(), "{end}");
    }
    s.stop().await;
}

#[tokio::test]
async fn a_match_one_room_refuses_is_taken_back_in_the_other() {
    let s = start().await;
    let (_host, mut w) = room(&s, "alone").await;
    let (status, answer) = matched(&s, json!({"rooms": ["alone", "missing"]})).await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(
        (&answer["code"], &answer["room"]),
        (&json!("ROOM_NOT_FOUND"), &json!("missing"))
    );
    // The side that started ends as stopped, without a score from a room that never wrote.
    let start = w.next_event_named("pk.start", WAIT).await.unwrap();
    assert_eq!(start.d["vs"]["room"], "missing");
    let end = w.next_event_named("pk.end", WAIT).await.unwrap().d;
    assert_eq!(
        (&end["red"], &end["blue"], &end["winner"], &end["reason"]),
        (&json!(0), &json!(0), &json!("draw"), &json!("stopped"))
    );
    s.stop().await;
}

#[tokio::test]
async fn a_host_invites_another_room_whose_host_declines_then_accepts() {
    let s = start().await;
    let (mut host_a, mut wa) = room(&s, "inv-a").await;
    let (mut host_b, mut wb) = room(&s, "inv-b").await;
    let invite = json!({"room": "inv-a", "vs": "inv-b", "seconds": 90});

    // Only the staff of a room, in it, invite; not to the room itself or a missing room.
    let err = wa.request("pk.invite", invite.clone()).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Forbidden));
    let mut stranger = s.connect("stranger").await;
    let err = stranger
        .request("pk.invite", invite.clone())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NotInRoom));
    for (bad, code) in [
        (
            json!({"room": "inv-a", "vs": "inv-a"}),
            ErrorCode::BadRequest,
        ),
        (
            json!({"room": "inv-a", "vs": "inv-b", "seconds": 5}),
            ErrorCode::BadRequest,
        ),
        (
            json!({"room": "inv-a", "vs": "no-such-room"}),
            ErrorCode::RoomNotFound,
        ),
    ] {
        let err = host_a.request("pk.invite", bad.clone()).await.unwrap_err();
        assert_eq!(err.code(), Some(code), "{bad}");
    }

    // Invited: the other room's staff are told, its members not.
    let sent = host_a.request("pk.invite", invite.clone()).await.unwrap();
    let link = sent["link"].as_str().unwrap().to_owned();
    assert!(sent["expires_at"].as_u64().is_some(), "{sent}");
    let e = host_b.next_event_named("pk.invite", WAIT).await.unwrap();
    assert!(e.seq.is_none(), "volatile");
    assert_eq!(
        (&e.d["link"], &e.d["from"], &e.d["by"], &e.d["seconds"]),
        (
            &json!(link),
            &json!("inv-a"),
            &json!("host-inv-a"),
            &json!(90)
        )
    );
    // The operator sees it pending.
    let r = kit::admin::get(s.admin, "/admin/rooms/inv-b", Some(ADMIN))
        .await
        .unwrap();
    assert_eq!(
        r.json()["details"]["pk_invites"][0]["link"],
        json!(link),
        "{}",
        r.body
    );
    let err = wb
        .request("pk.decline", json!({"room": "inv-b", "link": link}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Forbidden));
    // Declined: the inviting room's staff are told.
    host_b
        .request("pk.decline", json!({"room": "inv-b", "link": link}))
        .await
        .unwrap();
    let e = host_a.next_event_named("pk.declined", WAIT).await.unwrap();
    assert_eq!(
        e.d,
        json!({"link": link, "vs": "inv-b", "by": "host-inv-b"})
    );
    let err = host_b
        .request("pk.accept", json!({"room": "inv-b", "link": link}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NoSuchRequest), "answered once");

    // Invited again and accepted: the PK starts in both rooms under the invitation's id.
    let sent = host_a.request("pk.invite", invite).await.unwrap();
    let link = sent["link"].as_str().unwrap().to_owned();
    host_b.next_event_named("pk.invite", WAIT).await.unwrap();
    let ok = host_b
        .request("pk.accept", json!({"room": "inv-b", "link": link}))
        .await
        .unwrap();
    assert_eq!(ok["pk"], 1, "{ok}");
    let ends_at = ok["ends_at"].as_u64().unwrap();
    for (w, other) in [(&mut wa, "inv-b"), (&mut wb, "inv-a")] {
        let e = w.next_event_named("pk.start", WAIT).await.unwrap();
        assert_eq!(e.d["vs"], json!({"room": other, "link": link}));
        assert_eq!(e.d["ends_at"], ends_at);
    }
    // A room in a PK is not invited.
    let (_host_c, _) = room(&s, "inv-c").await;
    let err = host_a
        .request("pk.invite", json!({"room": "inv-a", "vs": "inv-c"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PkOn));
    s.stop().await;
}
