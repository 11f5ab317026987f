//! Guards across a node restart: a guard lives in the ledger, so after a kill -9 and a restart
//! it is listed with the same expiry, a retry of its purchase is not paid again, and its
//! badge shows in the host's room; a short guard ends by time across the restart (no longer
//! listed, no badge on a join). Real `chorus` processes.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use kit::client::Client;
use kit::node::{NODE_READY_TIMEOUT, wait_listening};
use kit::standalone::Server;
use protocol::RoomId;
use serde_json::{Value, json};
use tokio::time::Instant;

const SECRET: &str = "guard-secret";
const ADMIN: &str = "guard-admin";
const WAIT: Duration = Duration::from_secs(20);
/// A week's guard, and one of 0.00005 days (4.32 s): it ends while the test runs.
const CONFIG: &str = "[[guard_plans]]\nid = \"week\"\ndays = 7.0\nprice = 100\n\
                      [[guard_plans]]\nid = \"blink\"\ndays = 0.00005\nprice = 10\n";

async fn node(dir: &std::path::Path, config: &std::path::Path) -> Server {
    let env = [("CHORUS_CONFIG", config.to_str().unwrap())];
    let s = Server::start(dir, SECRET, ADMIN, &[], &env).await.unwrap();
    wait_listening(s.admin, NODE_READY_TIMEOUT).await.unwrap();
    s
}

async fn listed(c: &mut Client, host: &str) -> Vec<(String, i64)> {
    let ok = c
        .request("guard.list", json!({"host": host}))
        .await
        .unwrap();
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

/// The next `member.join` or `member.update` about `user`.
async fn presence_of(c: &mut Client, user: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = c.next_event(left).await.unwrap();
        if (e.ev == "member.join" || e.ev == "member.update") && e.d["user"] == user {
            return json!({"ev": e.ev, "d": e.d});
        }
    }
}

fn buy(host: &str, plan: &str, req: &str) -> Value {
    json!({"host": host, "plan": plan, "req_id": req})
}

#[tokio::test]
async fn a_guard_survives_a_restart_and_a_short_one_ends_by_time() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("guards.toml");
    std::fs::write(&config, CONFIG).unwrap();

    // 1. alice buys a week's guard of hana and a short one of kai; the node is killed.
    let mut n = node(dir.path(), &config).await;
    let r = kit::admin::grant(n.admin, Some(ADMIN), "alice", 500, "g1")
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let mut hana = n.connect("hana").await.unwrap();
    let hana_room = hana
        .create_room(json!({"room": "hana-room"}))
        .await
        .unwrap();
    let mut kai = n.connect("kai").await.unwrap();
    let kai_room = kai.create_room(json!({"room": "kai-room"})).await.unwrap();
    let mut a = n.connect("alice").await.unwrap();
    let week = a
        .request("guard.buy", buy("hana", "week", "w1"))
        .await
        .unwrap();
    let blink = a
        .request("guard.buy", buy("kai", "blink", "b1"))
        .await
        .unwrap();
    assert_eq!(blink["balance"], 390);
    let (week_end, blink_end) = (
        week["expires_at"].as_i64().unwrap(),
        blink["expires_at"].as_i64().unwrap(),
    );
    drop((a, hana, kai));
    n.node.kill9().unwrap();
    n.node.wait_exit(WAIT).await.unwrap();

    // 2. Restarted on the same data: the week's guard is listed as it was.
    let n = node(dir.path(), &config).await;
    let mut w = n.connect("watcher").await.unwrap();
    assert_eq!(
        listed(&mut w, "hana").await,
        vec![("alice".to_owned(), week_end)]
    );
    // A retry of the purchase is answered again and not paid again; it also reads alice's
    // guards before it answers, so her join below carries them.
    let mut a = n.connect("alice").await.unwrap();
    let again = a
        .request("guard.buy", buy("hana", "week", "w1"))
        .await
        .unwrap();
    assert_eq!(
        (&again["applied"], &again["balance"], &again["expires_at"]),
        (&json!(false), &json!(390), &json!(week_end))
    );
    w.join(&RoomId::from(hana_room.as_str()), false, None)
        .await
        .unwrap();
    a.join(&hana_room, false, None).await.unwrap();
    let j = presence_of(&mut w, "alice").await;
    assert_eq!(
        (&j["ev"], &j["d"]["guard"]),
        (&json!("member.join"), &json!(true)),
        "{j}"
    );

    // 3. The short guard ends by time: listed until its end, then gone (polled, bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = storage::ledger::now_ms();
        let l = listed(&mut w, "kai").await;
        if l.is_empty() {
            assert!(
                storage::ledger::now_ms() >= blink_end,
                "listed until its end"
            );
            break;
        }
        assert!(
            now < blink_end,
            "still listed at {now}, after its end {blink_end}"
        );
        assert_eq!(l, vec![("alice".to_owned(), blink_end)]);
        assert!(Instant::now() < deadline, "the short guard never ended");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // ... and a join of kai's room shows no badge (alice's connection is a new one: its
    // guards are read again, the ended one left out).
    a.close().await;
    let mut a = n.connect("alice").await.unwrap();
    a.request("guard.buy", buy("hana", "week", "w1"))
        .await
        .unwrap();
    w.request("room.leave", json!({"room": hana_room}))
        .await
        .unwrap();
    w.join(&kai_room, false, None).await.unwrap();
    a.join(&kai_room, false, None).await.unwrap();
    let j = presence_of(&mut w, "alice").await;
    assert_eq!(j["ev"], "member.join");
    assert!(
        j["d"].get("guard").is_none(),
        "an ended guard shows nothing: {j}"
    );
    let wallet = kit::admin::wallet(n.admin, Some(ADMIN), "alice")
        .await
        .unwrap()
        .json();
    assert_eq!(wallet["balance"], 390, "{wallet}");
}
