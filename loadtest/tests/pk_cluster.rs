//! PK in a cluster, with real processes: the scores the members saw survive the owner's
//! `kill -9` (each was stored in the same write as the gift event that showed it), the next
//! owner goes on counting from them, and the PK ends there with the whole score.
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
