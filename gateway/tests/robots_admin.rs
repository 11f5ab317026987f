//! Robot room configurations end to end on a standalone server: the `/admin/robots` calls
//! (create, read, list, replace, enable, disable, delete), the checks that need the node's
//! stores (the room exists, the robots' wallets cover the gift budget), a stored configuration
//! run by the shard's reconcile, `chorus admin robots`, and the refusal of robot tokens at the
//! upgrade. (`robots.rs` tests the robots themselves, configured straight in the store.)
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use gateway::GatewayConfig;
use kit::admin::AdminResponse;
use kit::client::{self, ClientError};
use serde_json::{Value, json};
use shard::ShardConfig;
use shard::gifts::Catalog;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"robots-test-secret";
const ADMIN: &str = "robots-admin";
const WAIT: Duration = Duration::from_secs(5);

async fn start() -> Server {
    let gateway = GatewayConfig {
        drain_window: Duration::from_millis(100),
        ..GatewayConfig::default()
    };
    let shard = ShardConfig {
        catalog: std::sync::Arc::new(Catalog::default_with_secret(b"lucky".to_vec())),
        robot_reconcile: Duration::from_millis(100),
        ..ShardConfig::default()
    };
    Server::launch(SECRET, ADMIN, gateway, shard).await
}

impl Server {
    /// An admin call with the token.
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> AdminResponse {
        kit::admin::call(self.admin, method, path, Some(ADMIN), body)
            .await
            .unwrap()
    }

    async fn grant(&self, user: &str, amount: i64, key: &str) {
        let r = kit::admin::grant(self.admin, Some(ADMIN), user, amount, key)
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
    }
}

/// A configuration for `room` without gifts, stored disabled (its robots stay idle).
fn config(room: &str) -> Value {
    json!({
        "room": room,
        "title": "Robot party",
        "enabled": false,
        "robots": [{"id": "bot:amy", "name": "Amy"}, {"id": "bot:bo"}],
        "seat": {"every_s": 5, "stay_s": 30},
        "chat": {"every_s": 10, "phrases": ["hi", "sing!"]},
    })
}

/// The status and error message of a refused call.
fn refused(r: &AdminResponse) -> (u16, String) {
    (
        r.status,
        r.json()["error"].as_str().unwrap_or("").to_owned(),
    )
}

#[tokio::test]
async fn robot_configs_are_created_read_listed_replaced_switched_and_deleted() {
    let s = start().await;
    // Behind the admin token like every /admin call.
    let anon = kit::admin::get(s.admin, "/admin/robots", None)
        .await
        .unwrap();
    assert_eq!(anon.status, 401);
    assert_eq!(
        s.call("GET", "/admin/robots", None).await.json()["configs"],
        json!([])
    );

    let made = s.call("POST", "/admin/robots", Some(config("party"))).await;
    assert_eq!(made.status, 201, "{}", made.body);
    // Stored with its defaults filled in.
    let c = made.json();
    assert_eq!(
        (&c["room"], &c["enabled"], &c["create"]),
        (&json!("party"), &json!(false), &json!(true))
    );
    assert_eq!(
        (&c["seats"], &c["jitter"], &c["gift"]),
        (&json!(8), &json!(0.3), &Value::Null)
    );
    let again = s.call("POST", "/admin/robots", Some(config("party"))).await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert_eq!(s.call("GET", "/admin/robots/party", None).await.json(), c);
    s.call("POST", "/admin/robots", Some(config("afterparty")))
        .await;
    let list = s.call("GET", "/admin/robots", None).await.json();
    let rooms: Vec<&Value> = list["configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["room"])
        .collect();
    assert_eq!(rooms, [&json!("afterparty"), &json!("party")]);

    // Replace: the body's room may be left out, and must match the path when present.
    let mut new = config("party");
    new["title"] = "Robots only".into();
    let moved = s
        .call(
            "PUT",
            "/admin/robots/party",
            Some({
                let mut v = new.clone();
                v["room"] = "elsewhere".into();
                v
            }),
        )
        .await;
    assert_eq!(refused(&moved).0, 400, "{}", moved.body);
    assert!(refused(&moved).1.contains("path"), "{}", moved.body);
    new.as_object_mut().unwrap().remove("room");
    let replaced = s
        .call("PUT", "/admin/robots/party", Some(new.clone()))
        .await;
    assert_eq!(replaced.status, 200, "{}", replaced.body);
    assert_eq!(replaced.json()["title"], "Robots only");
    assert_eq!(replaced.json()["room"], "party");
    assert_eq!(
        s.call("GET", "/admin/robots/party", None).await.json()["title"],
        "Robots only"
    );
    let absent = s.call("PUT", "/admin/robots/nowhere", Some(new)).await;
    assert_eq!(absent.status, 404, "{}", absent.body);

    // Enable and disable flip `enabled` and keep the rest.
    let on = s.call("POST", "/admin/robots/party/enable", None).await;
    assert_eq!(
        (on.status, &on.json()["enabled"]),
        (200, &json!(true)),
        "{}",
        on.body
    );
    assert_eq!(
        s.call("GET", "/admin/robots/party", None).await.json()["enabled"],
        true
    );
    let off = s.call("POST", "/admin/robots/party/disable", None).await;
    assert_eq!(
        (off.status, &off.json()["enabled"]),
        (200, &json!(false)),
        "{}",
        off.body
    );
    assert_eq!(off.json()["title"], "Robots only");
    for verb in ["enable", "disable"] {
        let r = s
            .call("POST", &format!("/admin/robots/nowhere/{verb}"), None)
            .await;
        assert_eq!(r.status, 404, "{verb}: {}", r.body);
    }

    // Delete, once.
    let gone = s.call("DELETE", "/admin/robots/party", None).await;
    assert_eq!(
        (gone.status, &gone.json()["deleted"]),
        (200, &json!(true)),
        "{}",
        gone.body
    );
    assert_eq!(
        s.call("DELETE", "/admin/robots/party", None).await.status,
        404
    );
    assert_eq!(s.call("GET", "/admin/robots/party", None).await.status, 404);
    let list = s.call("GET", "/admin/robots", None).await.json();
    assert_eq!(list["configs"].as_array().unwrap().len(), 1, "{list}");
    // A bad path or method is no call at all.
    assert_eq!(
        s.call("PATCH", "/admin/robots/afterparty", None)
            .await
            .status,
        404
    );
    assert_eq!(
        s.call("GET", "/admin/robots/bad%20id", None).await.status,
        404
    );

    // Counted by verb.
    let created = kit::admin::metric(s.admin, "chorus_admin_calls_total{verb=\"robots_create\"}")
        .await
        .unwrap();
    assert!(created >= 3.0, "{created}");
    s.stop().await;
}

#[tokio::test]
async fn a_config_stored_through_the_api_runs_its_robots_until_disabled() {
    let s = start().await;
    let mut v = config("live");
    v["enabled"] = true.into();
    v["chat"] = json!({"every_s": 0.3, "phrases": ["beep"]});
    let r = s.call("POST", "/admin/robots", Some(v)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    // The reconcile creates the room (owned by the first robot) and starts its robots.
    let deadline = tokio::time::Instant::now() + WAIT;
    while s.call("GET", "/admin/rooms/live", None).await.status != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the robot room never ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut alice = s.connect("alice").await;
    let room = protocol::RoomId::from("live");
    let joined = alice.join(&room, false, None).await.unwrap();
    assert_eq!(joined["snapshot"]["owner"], "bot:amy");
    let chat = alice.next_event_named("chat", WAIT).await.unwrap();
    assert_eq!(
        (&chat.d["text"], &chat.d["robot"]),
        (&json!("beep"), &json!(true))
    );
    // Disabled: both robots leave.
    let r = s.call("POST", "/admin/robots/live/disable", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    for _ in 0..2 {
        let left = alice.next_event_named("member.leave", WAIT).await.unwrap();
        assert!(
            left.d["user"].as_str().unwrap().starts_with("bot:"),
            "{:?}",
            left.d
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn bad_robot_configs_are_refused_with_what_is_wrong() {
    let s = start().await;
    type Patch = fn(&mut Value);
    let cases: [(&str, Patch); 8] = [
        ("seat.every_s", |v| v["seat"]["every_s"] = (-1).into()),
        ("chat.every_s", |v| v["chat"]["every_s"] = (-0.5).into()),
        ("chat.phrases", |v| v["chat"]["phrases"] = json!([])),
        ("starting with", |v| v["robots"][0]["id"] = "amy".into()),
        ("room must be", |v| v["room"] = "bad room".into()),
        ("bad JSON", |v| v["robots"] = "none".into()),
        ("unknown room", |v| v["create"] = false.into()),
        ("no gift \"diamond\"", |v| {
            v["gift"] = json!({"every_s": 60, "gift": "diamond", "budget": 0});
        }),
    ];
    for (want, patch) in cases {
        let mut v = config("lounge");
        patch(&mut v);
        let r = s.call("POST", "/admin/robots", Some(v.clone())).await;
        let (status, msg) = refused(&r);
        assert_eq!(status, 400, "{want}: {}", r.body);
        assert!(msg.contains(want), "{want}: {msg}");
        // Replacing is checked the same way.
        s.call("POST", "/admin/robots", Some(config("lounge")))
            .await;
        // (A bad room in the body is not the path's room.)
        let want = if want == "room must be" { "path" } else { want };
        let r = s.call("PUT", "/admin/robots/lounge", Some(v)).await;
        let (status, msg) = refused(&r);
        assert_eq!(status, 400, "{want}: {}", r.body);
        assert!(msg.contains(want), "{want}: {msg}");
        s.call("DELETE", "/admin/robots/lounge", None).await;
    }
    assert_eq!(
        s.call("GET", "/admin/robots", None).await.json()["configs"],
        json!([])
    );

    // Robots visiting a human room: accepted once the room exists.
    let mut host = s.connect("host").await;
    host.create_room(json!({"room": "lounge"})).await.unwrap();
    let mut visit = config("lounge");
    visit["create"] = false.into();
    visit["fill_below"] = 3.into();
    let r = s.call("POST", "/admin/robots", Some(visit)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    s.stop().await;
}

#[tokio::test]
async fn a_gift_budget_above_a_robots_wallet_is_refused() {
    let s = start().await;
    s.grant("bot:amy", 100, "fund-amy").await;
    s.grant("bot:bo", 500, "fund-bo").await;
    let mut v = config("gala");
    v["gift"] = json!({"every_s": 30, "gift": "rose", "budget": 200});
    let r = s.call("POST", "/admin/robots", Some(v.clone())).await;
    assert_eq!(
        refused(&r),
        (
            400,
            "budget overdraw: bot:amy holds 100 coins, budget 200".to_owned()
        ),
        "{}",
        r.body
    );
    // Within every robot's wallet: stored, then a replace above it is refused too.
    v["gift"]["budget"] = 100.into();
    let r = s.call("POST", "/admin/robots", Some(v.clone())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.json()["gift"],
        json!({"every_s": 30.0, "gift": "rose", "count": 1, "budget": 100})
    );
    v["gift"]["budget"] = 101.into();
    let r = s.call("PUT", "/admin/robots/gala", Some(v.clone())).await;
    assert_eq!(refused(&r).0, 400, "{}", r.body);
    assert!(
        refused(&r)
            .1
            .starts_with("budget overdraw: bot:amy holds 100"),
        "{}",
        r.body
    );
    s.grant("bot:amy", 1, "top-up").await;
    let r = s.call("PUT", "/admin/robots/gala", Some(v)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["gift"]["budget"], 101);
    s.stop().await;
}

#[tokio::test]
async fn robot_tokens_are_refused_at_the_upgrade() {
    let s = start().await;
    let t = client::mint_token(SECRET, "bot:amy", Duration::from_secs(60)).unwrap();
    match client::connect(&s.url, Some(&t)).await {
        Err(ClientError::Refused(status)) => assert_eq!(status, 401),
        Ok(_) => panic!("a robot's token was accepted"),
        Err(e) => panic!("unexpected {e:?}"),
    }
    // A human's token from the same secret is fine.
    let mut human = s.connect("amy").await;
    human.request("ping", json!({})).await.unwrap();
    s.stop().await;
}

/// Runs `chorus admin … robots <args>` against `s`: its exit status and what it printed.
async fn cli(s: &Server, args: &[&str]) -> (bool, Value, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_chorus"))
        .args([
            "admin",
            "--addr",
            &s.admin.to_string(),
            "--token",
            ADMIN,
            "robots",
        ])
        .args(args)
        .env_remove("CHORUS_ADMIN_ADDR")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (
        out.status.success(),
        json,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn chorus_admin_robots_drives_every_call() {
    let s = start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("party.json");
    std::fs::write(&file, config("party").to_string()).unwrap();
    let path = file.to_str().unwrap();

    let (ok, v, err) = cli(&s, &["create", path]).await;
    assert!(ok && v["room"] == "party", "{v} {err}");
    let (ok, _, err) = cli(&s, &["create", path]).await;
    assert!(!ok && err.contains("HTTP 409"), "{err}");
    let (ok, v, _) = cli(&s, &["get", "party"]).await;
    assert!(ok && v["robots"][0]["id"] == "bot:amy", "{v}");
    let mut new = config("party");
    new["title"] = "Renamed".into();
    std::fs::write(&file, new.to_string()).unwrap();
    let (ok, v, err) = cli(&s, &["update", "party", path]).await;
    assert!(ok && v["title"] == "Renamed", "{v} {err}");
    let (ok, v, _) = cli(&s, &["enable", "party"]).await;
    assert!(ok && v["enabled"] == true, "{v}");
    let (ok, v, _) = cli(&s, &["disable", "party"]).await;
    assert!(ok && v["enabled"] == false, "{v}");
    let (ok, v, _) = cli(&s, &["list"]).await;
    assert!(ok && v["configs"][0]["title"] == "Renamed", "{v}");
    let (ok, v, _) = cli(&s, &["delete", "party"]).await;
    assert!(ok && v["deleted"] == true, "{v}");
    let (ok, v, err) = cli(&s, &["get", "party"]).await;
    assert!(
        !ok && v["error"].is_string() && err.contains("HTTP 404"),
        "{v} {err}"
    );
    // A file that is not JSON is refused before anything is sent.
    std::fs::write(&file, "robots: yes").unwrap();
    let (ok, _, err) = cli(&s, &["create", path]).await;
    assert!(!ok && err.contains("parsing"), "{err}");
    s.stop().await;
}
