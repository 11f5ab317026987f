//! PK in a cluster, with real processes: the scores the members saw survive the owner's
//! `kill -9` (each was stored in the same write as the gift event that showed it), the next
//! owner goes on counting from them, and the PK ends there with the whole score. A PK between
//! two rooms on two shards exchanges its scores through Redis, and outlives the `kill -9` of
//! one room's owner; the hosts then arrange the next match with an invitation.
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).

use kit::client::Client;
use kit::cluster::Cluster;
use protocol::RoomId;
use serde_json::{Value, json};

use crate::support;

use support::WAIT;

/// Waits for the `pk.score` that shows `red` and `blue` (earlier ones may come first).
async fn sees_score(c: &mut Client, red: i64, blue: i64) {
    loop {
        let ev = c.next_event_named("pk.score", WAIT).await.unwrap();
        if ev.d["red"] == red && ev.d["blue"] == blue {
            return;
        }
    }
}

/// `fan` sends a rose to `to`.
async fn rose(fan: &mut Client, room: &RoomId, req: &str, to: &str) -> Value {
    let g = json!({"room": room, "req_id": req, "gift": "rose", "to": [to]});
    fan.request("gift.send", g).await.unwrap()
}

#[tokio::test]
async fn a_pks_scores_survive_a_killed_owner_and_the_next_owner_ends_it() {
    let mut cluster = Cluster::of(2, 2).await.unwrap();
    let token = Some(cluster.admin_token.as_str());
    let r = kit::admin::grant(cluster.gateways[0].admin, token, "fan", 100, "g1")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let room = RoomId::from("battle");
    // The first to join makes the room and owns it.
    let mut host = cluster.connect(0, "host").await.unwrap();
    host.join_retrying(&room, None, WAIT).await.unwrap();
    let mut red = cluster.connect(1, "red").await.unwrap();
    let mut blue = cluster.connect(0, "blue").await.unwrap();
    let mut fan = cluster.connect(1, "fan").await.unwrap();
    for (c, seat) in [(&mut red, Some(1)), (&mut blue, Some(5)), (&mut fan, None)] {
        c.join_retrying(&room, None, WAIT).await.unwrap();
        if let Some(seat) = seat {
            let take = json!({"room": room, "seat": seat});
            c.request("seat.take", take).await.unwrap();
        }
    }
    let pk = json!({"room": room, "seconds": 600, "red": [1], "blue": [5]});
    let started = host.request("pk.start", pk).await.unwrap();
    let ends_at = started["ends_at"].as_u64().unwrap();
    rose(&mut fan, &room, "r1", "red").await;
    rose(&mut fan, &room, "r2", "red").await;
    rose(&mut fan, &room, "r3", "blue").await;
    // Seen by a member, so stored: the next owner starts from it.
    sees_score(&mut host, 20, 10).await;

    let (owner, _) = cluster.room_owner("battle").await.unwrap().unwrap();
    cluster.shard_mut(&owner).unwrap().node.kill9().unwrap();
    let mut late = cluster.connect(1, "late").await.unwrap();
    let ok = late.join_retrying(&room, None, WAIT * 4).await.unwrap();
    assert_eq!(
        ok["snapshot"]["pk"],
        json!({"pk": 1, "red": 20, "blue": 10, "ends_at": ends_at, "red_seats": [1], "blue_seats": [5]}),
        "{ok}"
    );
    // The next owner counts on: everyone back in, two roses for blue.
    for c in [&mut host, &mut red, &mut blue, &mut fan] {
        c.join_retrying(&room, None, WAIT * 4).await.unwrap();
    }
    rose(&mut fan, &room, "r4", "blue").await;
    rose(&mut fan, &room, "r5", "blue").await;
    sees_score(&mut late, 20, 30).await;
    host.request("pk.stop", json!({"room": room}))
        .await
        .unwrap();
    let end = late.next_event_named("pk.end", WAIT).await.unwrap();
    assert_eq!(
        end.d,
        json!({"pk": 1, "red": 20, "blue": 30, "winner": "blue", "red_top": "fan",
            "blue_top": "fan", "reason": "stopped", "by": "host"})
    );
}

/// Waits until `room` is owned by a shard other than `not`, and answers it.
async fn owned_elsewhere(cluster: &Cluster, room: &str, not: &str) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some((owner, _)) = cluster.room_owner(room).await.unwrap()
            && owner != not
        {
            return owner;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{room} still on {not}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn two_rooms_on_different_shards_play_a_pk_and_a_killed_owner_does_not_end_it() {
    let mut cluster = Cluster::of(2, 2).await.unwrap();
    let token = Some(cluster.admin_token.clone());
    for fan in ["fan-a", "fan-b"] {
        let r = kit::admin::grant(cluster.gateways[0].admin, token.as_deref(), fan, 100, fan)
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let (ra, rb) = (RoomId::from("duel-a"), RoomId::from("duel-b"));
    let mut host_a = cluster.connect(0, "host-a").await.unwrap();
    host_a.join_retrying(&ra, None, WAIT).await.unwrap();
    let mut host_b = cluster.connect(1, "host-b").await.unwrap();
    host_b.join_retrying(&rb, None, WAIT).await.unwrap();
    // The two rooms on two shards: the scores cross between nodes, through Redis.
    let (owner_a, _) = cluster.room_owner("duel-a").await.unwrap().unwrap();
    let (owner_b, _) = cluster.room_owner("duel-b").await.unwrap().unwrap();
    if owner_a == owner_b {
        let to = cluster.other_shard(&owner_a).unwrap();
        let r = cluster.move_room("duel-b", &to).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        owned_elsewhere(&cluster, "duel-b", &owner_a).await;
        host_b.join_retrying(&rb, None, WAIT).await.unwrap();
    }
    let mut fan_a = cluster.connect(1, "fan-a").await.unwrap();
    fan_a.join_retrying(&ra, None, WAIT).await.unwrap();
    let mut fan_b = cluster.connect(0, "fan-b").await.unwrap();
    fan_b.join_retrying(&rb, None, WAIT).await.unwrap();

    let body = json!({"rooms": ["duel-a", "duel-b"], "seconds": 600, "link": "cluster-duel"});
    let r = kit::admin::call(
        cluster.gateways[1].admin,
        "POST",
        "/admin/pk",
        token.as_deref(),
        Some(body),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    rose(&mut fan_a, &ra, "a1", "host-a").await;
    rose(&mut fan_a, &ra, "a2", "host-a").await;
    rose(&mut fan_b, &rb, "b1", "host-b").await;
    sees_score(&mut host_a, 20, 10).await;
    sees_score(&mut host_b, 10, 20).await;

    // duel-b's owner dies; its next owner goes on from the stored side and keeps exchanging.
    let (owner_b, _) = cluster.room_owner("duel-b").await.unwrap().unwrap();
    cluster.shard_mut(&owner_b).unwrap().node.kill9().unwrap();
    let mut late = cluster.connect(1, "late").await.unwrap();
    let ok = late.join_retrying(&rb, None, WAIT * 4).await.unwrap();
    let pk = &ok["snapshot"]["pk"];
    assert_eq!((&pk["pk"], &pk["red"]), (&json!(1), &json!(10)), "{ok}");
    assert_eq!(pk["vs"], json!({"room": "duel-a", "link": "cluster-duel"}));
    for c in [&mut host_b, &mut fan_b] {
        c.join_retrying(&rb, None, WAIT * 4).await.unwrap();
    }
    rose(&mut fan_b, &rb, "b2", "host-b").await;
    sees_score(&mut host_a, 20, 20).await;

    host_a
        .request("pk.stop", json!({"room": ra}))
        .await
        .unwrap();
    let end_a = host_a.next_event_named("pk.end", WAIT).await.unwrap();
    let end_b = late.next_event_named("pk.end", WAIT).await.unwrap();
    assert_eq!(
        end_a.d,
        json!({"pk": 1, "red": 20, "blue": 20, "winner": "draw", "red_top": "fan-a",
            "reason": "stopped", "by": "host-a", "vs": {"room": "duel-b", "link": "cluster-duel"}})
    );
    assert_eq!(
        end_b.d,
        json!({"pk": 1, "red": 20, "blue": 20, "winner": "draw", "red_top": "fan-b",
            "reason": "stopped", "vs": {"room": "duel-a", "link": "cluster-duel"}})
    );

    // The hosts arrange the next one themselves, each step through its own gateway.
    let sent = host_b
        .request("pk.invite", json!({"room": rb, "vs": ra, "seconds": 60}))
        .await
        .unwrap();
    let link = sent["link"].clone();
    let invited = host_a.next_event_named("pk.invite", WAIT).await.unwrap();
    assert_eq!(
        (&invited.d["link"], &invited.d["from"]),
        (&link, &json!("duel-b"))
    );
    let ok = host_a
        .request("pk.accept", json!({"room": ra, "link": link}))
        .await
        .unwrap();
    assert_eq!(ok["pk"], 2, "{ok}");
    for (c, other) in [(&mut late, "duel-a"), (&mut host_a, "duel-b")] {
        let e = c.next_event_named("pk.start", WAIT).await.unwrap();
        assert_eq!(e.d["vs"], json!({"room": other, "link": link}));
    }
}
