//! Users end to end on standalone servers (real sockets, SQLite in a temp dir): profiles
//! (`user.update`, `user.get`, the profile loaded at connect, the admin calls and
//! `chorus admin users`), token refresh (`auth.refresh`, `session.expiring`) and follows,
//! durable across a restart.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::Path;
use std::time::Duration;

use gateway::GatewayConfig;
use gateway::standalone::{self, Running, StandaloneConfig};
use kit::client::{self, Client, ClientError};
use protocol::ErrorCode;
use serde_json::{Value, json};
use shard::ShardConfig;

const SECRET: &[u8] = b"users-test-secret";
const ADMIN: &str = "users-admin";
const WAIT: Duration = Duration::from_secs(5);

/// A standalone server on a data directory the test keeps (to restart on it).
struct Node {
    running: Running,
    url: String,
    admin: std::net::SocketAddr,
}

impl Node {
    async fn start(dir: &Path, tune: impl FnOnce(&mut GatewayConfig)) -> Node {
        let mut gateway = GatewayConfig {
            drain_window: Duration::from_millis(50),
            ..GatewayConfig::default()
        };
        tune(&mut gateway);
        let running = standalone::start(StandaloneConfig {
            ws_addr: "127.0.0.1:0".parse().unwrap(),
            admin_addr: "127.0.0.1:0".parse().unwrap(),
            data_dir: dir.to_owned(),
            jwt_secret: SECRET.to_vec(),
            admin_token: Some(ADMIN.into()),
            gateway,
            shard: ShardConfig::default(),
            ledger: String::new(),
        })
        .await
        .unwrap();
        Node {
            url: format!("ws://{}/ws", running.ws_addr),
            admin: running.admin_addr,
            running,
        }
    }

    async fn connect_with(&self, token: &str) -> Client {
        client::connect(&self.url, Some(token)).await.unwrap()
    }

    async fn connect(&self, user: &str) -> Client {
        self.connect_with(&kit::token(SECRET, user).unwrap()).await
    }

    async fn stop(self) {
        self.running.stop(Duration::from_secs(5)).await;
    }
}

/// A token for `user` living `ttl`, with extra claims (profile claims).
fn token_with(user: &str, ttl: Duration, extra: Value) -> String {
    token_until(
        user,
        jsonwebtoken::get_current_timestamp() + ttl.as_secs(),
        extra,
    )
}

/// A token for `user` expiring at `exp` (Unix seconds), with extra claims.
fn token_until(user: &str, exp: u64, extra: Value) -> String {
    let mut claims = json!({ "sub": user, "exp": exp });
    if let (Some(c), Some(e)) = (claims.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET).unwrap(),
    )
    .unwrap()
}

fn code(r: Result<Value, ClientError>) -> ErrorCode {
    match r {
        Err(e) => e
            .code()
            .unwrap_or_else(|| panic!("not an error reply: {e:?}")),
        Ok(v) => panic!("expected an error, got {v}"),
    }
}

/// `user.update` with `d`, again while the one-change-per-second gate refuses it (bounded).
async fn update(c: &mut Client, d: Value) -> Result<Value, ClientError> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match c.request("user.update", d.clone()).await {
            Err(e)
                if e.code() == Some(ErrorCode::RateLimited)
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

async fn profile_of(c: &mut Client, user: &str) -> Value {
    let ok = c
        .request("user.get", json!({ "users": [user] }))
        .await
        .unwrap();
    ok["profiles"][user].clone()
}

/// Asks for `user`'s profile until it is `want` (the connect-time load runs beside the
/// socket), within [`WAIT`].
async fn wait_profile(c: &mut Client, user: &str, want: &Value) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let got = profile_of(c, user).await;
        if got == *want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{user}'s profile stayed {got}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_profile_update_is_stored_shown_and_merged_over_the_next_tokens_claims() {
    let dir = tempfile::tempdir().unwrap();
    let s = Node::start(dir.path(), |_| {}).await;
    let claims = json!({"name": "Claimed Ann", "region": "eu"});
    let mut ann = s
        .connect_with(&token_with("ann", Duration::from_secs(600), claims.clone()))
        .await;
    // The token's claims are stored at connect, so others can look them up.
    wait_profile(&mut ann, "ann", &claims).await;
    let ok = ann
        .request(
            "user.update",
            json!({"name": "Ann", "avatar": "https://cdn.example/ann.png"}),
        )
        .await
        .unwrap();
    assert_eq!(
        ok["p"],
        json!({"name": "Ann", "avatar": "https://cdn.example/ann.png", "region": "eu"})
    );
    // One change per second: a second one at once is refused, and nothing of it is stored.
    assert_eq!(
        code(ann.request("user.update", json!({"avatar": ""})).await),
        ErrorCode::RateLimited
    );
    assert_eq!(
        profile_of(&mut ann, "ann").await["avatar"],
        json!("https://cdn.example/ann.png")
    );
    // An empty string clears a field.
    let ok = update(&mut ann, json!({"avatar": ""})).await.unwrap();
    assert_eq!(ok["p"], json!({"name": "Ann", "region": "eu"}));
    let mut bob = s.connect("bob").await;
    let got = bob
        .request("user.get", json!({"users": ["ann", "nobody"]}))
        .await
        .unwrap();
    assert_eq!(
        got["profiles"],
        json!({"ann": {"name": "Ann", "region": "eu"}, "nobody": {}})
    );
    // Out of bounds: refused, nothing stored, the connection stays.
    for bad in [
        json!({"name": "x".repeat(33)}),
        json!({"name": "bell\u{7}"}),
        json!({"avatar": "javascript:alert(1)"}),
        json!({"region": "eu west"}),
    ] {
        assert_eq!(
            code(ann.request("user.update", bad.clone()).await),
            ErrorCode::BadRequest,
            "{bad}"
        );
    }
    assert_eq!(
        code(bob.request("user.get", json!({"users": []})).await),
        ErrorCode::BadRequest
    );
    let many: Vec<String> = (0..101).map(|i| format!("u{i}")).collect();
    assert_eq!(
        code(bob.request("user.get", json!({ "users": many })).await),
        ErrorCode::BadRequest
    );
    assert_eq!(
        code(bob.request("user.get", json!({"users": ["bad id"]})).await),
        ErrorCode::BadRequest
    );
    ann.close().await;
    // The next connect: its claims are stored and show where the user set nothing (the
    // region); the user's own name wins, and the avatar they cleared stays cleared.
    let next = json!({"name": "Other", "region": "sa", "avatar": "https://cdn.example/o.png"});
    let _ann = s
        .connect_with(&token_with("ann", Duration::from_secs(600), next))
        .await;
    wait_profile(&mut bob, "ann", &json!({"name": "Ann", "region": "sa"})).await;
    s.stop().await;
}

#[tokio::test]
async fn the_admin_api_and_the_cli_read_and_set_profiles() {
    let dir = tempfile::tempdir().unwrap();
    let s = Node::start(dir.path(), |_| {}).await;
    let put = kit::admin::call(
        s.admin,
        "PUT",
        "/admin/users/cat/profile",
        Some(ADMIN),
        Some(json!({"name": "Cat", "region": "us"})),
    )
    .await
    .unwrap();
    assert_eq!(put.status, 200, "{}", put.body);
    assert_eq!(
        put.json()["profile"],
        json!({"name": "Cat", "region": "us"})
    );
    let bad = kit::admin::call(
        s.admin,
        "PUT",
        "/admin/users/cat/profile",
        Some(ADMIN),
        Some(json!({"avatar": "ftp://x"})),
    )
    .await
    .unwrap();
    assert_eq!(bad.status, 400, "{}", bad.body);
    let unauthorized = kit::admin::get(s.admin, "/admin/users/cat/profile", None)
        .await
        .unwrap();
    assert_eq!(unauthorized.status, 401);
    let mut dan = s.connect("dan").await;
    assert_eq!(
        profile_of(&mut dan, "cat").await,
        json!({"name": "Cat", "region": "us"})
    );
    let addr = s.admin.to_string();
    let chorus = |args: &[&str]| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_chorus"))
            .args(["admin", "--addr", addr.as_str()])
            .args(args)
            .env("CHORUS_ADMIN_TOKEN", ADMIN)
            .output()
    };
    let out = chorus(&["users", "set", "cat", "--name", "Kitty", "--region", ""])
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = chorus(&["users", "get", "cat"]).await.unwrap();
    assert!(out.status.success(), "{out:?}");
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["profile"], json!({"name": "Kitty"}));
    assert_eq!(profile_of(&mut dan, "cat").await, json!({"name": "Kitty"}));
    s.stop().await;
}

#[tokio::test]
async fn a_refresh_keeps_the_connection_open_past_its_first_tokens_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let s = Node::start(dir.path(), |g| {
        // Expiry is checked every heartbeat slice; silence closes after 10 s, well after the
        // short token's expiry (5 to 6 s), so the control connection (which reads nothing
        // until the end) is closed for its token. The warning comes at once (expiry is within
        // 6 s of connecting, on a loaded machine) and the refresh has seconds to spare.
        g.heartbeat = Duration::from_secs(5);
        g.expiry_warning = Duration::from_secs(6);
    })
    .await;
    let exp = jsonwebtoken::get_current_timestamp() + 6;
    let first = token_until("eve", exp, json!({}));
    let mut eve = s.connect_with(&first).await;
    // A control connection with the same short token and no refresh: closed at expiry.
    let mut control = s.connect_with(&first).await;
    let warned = eve
        .next_event_named("session.expiring", WAIT)
        .await
        .unwrap();
    assert_eq!(warned.d["exp"], json!(exp));
    // Another user's token, and a token that is not one, are refused; the socket stays.
    let mallory = kit::token(SECRET, "mallory").unwrap();
    assert_eq!(
        code(
            eve.request("auth.refresh", json!({ "token": mallory }))
                .await
        ),
        ErrorCode::Forbidden
    );
    assert_eq!(
        code(
            eve.request("auth.refresh", json!({"token": "not.a.token"}))
                .await
        ),
        ErrorCode::Unauthorized
    );
    let fresh = token_with("eve", Duration::from_secs(600), json!({"name": "Eve"}));
    let ok = eve
        .request("auth.refresh", json!({ "token": fresh }))
        .await
        .unwrap();
    assert!(ok["exp"].as_u64().unwrap() >= exp + 590, "{ok}");
    // The refreshed token's claims apply like a connect.
    wait_profile(&mut eve, "eve", &json!({"name": "Eve"})).await;
    // Past the first token's expiry (plus heartbeat slices): eve is still served.
    let past = exp + 2;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while jsonwebtoken::get_current_timestamp() < past {
        assert!(tokio::time::Instant::now() < deadline, "the clock stalled");
        eve.request("ping", json!({})).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eve.request("ping", json!({})).await.unwrap();
    let closed = control.closed(WAIT).await.unwrap();
    assert_eq!(closed.map(|f| u16::from(f.code)), Some(1008));
    s.stop().await;
}

/// Well under the first heartbeat tick of the node below (7.5 s): a warning this soon was
/// sent at connect (or at the refresh), not by a tick.
const AT_ONCE: Duration = Duration::from_secs(2);

#[tokio::test]
async fn a_token_already_inside_the_warning_time_is_warned_at_connect_and_at_refresh() {
    let dir = tempfile::tempdir().unwrap();
    // Ticks every 7.5 s; the warning time (60 s) covers both tokens below.
    let s = Node::start(dir.path(), |g| g.heartbeat = Duration::from_secs(60)).await;
    let exp = jsonwebtoken::get_current_timestamp() + 20;
    let mut eve = s.connect_with(&token_until("eve", exp, json!({}))).await;
    let warned = eve.next_event_named("session.expiring", AT_ONCE).await;
    assert_eq!(
        warned.unwrap().d["exp"],
        json!(exp),
        "no warning at connect"
    );
    // A refresh that moves the expiry but stays inside the warning time warns again.
    let later = token_until("eve", exp + 10, json!({}));
    eve.request("auth.refresh", json!({ "token": later }))
        .await
        .unwrap();
    let warned = eve.next_event_named("session.expiring", AT_ONCE).await;
    assert_eq!(
        warned.unwrap().d["exp"],
        json!(exp + 10),
        "no warning at refresh"
    );
    s.stop().await;
}

#[tokio::test]
async fn follows_are_added_listed_counted_removed_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = Node::start(dir.path(), |_| {}).await;
    let mut fans = Vec::new();
    for i in 0..5 {
        let mut c = s.connect(&format!("fan{i}")).await;
        if i == 3 {
            update(&mut c, json!({"name": "Fan Three"})).await.unwrap();
        }
        let ok = c
            .request("follow.add", json!({"user": "star"}))
            .await
            .unwrap();
        assert_eq!(ok["added"], json!(true));
        fans.push(c);
    }
    let f0 = &mut fans[0];
    let again = f0
        .request("follow.add", json!({"user": "star"}))
        .await
        .unwrap();
    assert_eq!(
        again["added"],
        json!(false),
        "following twice is one follow"
    );
    f0.request("follow.add", json!({"user": "fan1"}))
        .await
        .unwrap();
    for bad in [
        json!({"user": "fan0"}),
        json!({"user": "bot:amy"}),
        json!({"user": "no way"}),
    ] {
        assert_eq!(
            code(f0.request("follow.add", bad.clone()).await),
            ErrorCode::BadRequest,
            "{bad}"
        );
    }
    // Anyone's follows may be read, a robot's too (it has none); unfollowing one removes
    // nothing.
    let bot = f0
        .request("follow.counts", json!({"user": "bot:amy"}))
        .await
        .unwrap();
    assert_eq!(bot, json!({"following": 0, "followers": 0}));
    let none = f0
        .request("follow.remove", json!({"user": "bot:amy"}))
        .await
        .unwrap();
    assert_eq!(none, json!({"removed": false}));
    let page = f0
        .request(
            "follow.list",
            json!({"user": "bot:amy", "dir": "followers"}),
        )
        .await
        .unwrap();
    assert_eq!(page["users"], json!([]));
    let counts = f0.request("follow.counts", json!({})).await.unwrap();
    assert_eq!(counts, json!({"following": 2, "followers": 0}));
    let star = f0
        .request("follow.counts", json!({"user": "star"}))
        .await
        .unwrap();
    assert_eq!(star, json!({"following": 0, "followers": 5}));
    // Pages of two, newest first, through the cursor.
    let mut seen = Vec::new();
    let mut cursor = Value::Null;
    for _ in 0..10 {
        let mut d = json!({"user": "star", "dir": "followers", "limit": 2});
        if !cursor.is_null() {
            d["cursor"] = cursor.clone();
        }
        let page = f0.request("follow.list", d).await.unwrap();
        for e in page["users"].as_array().unwrap() {
            seen.push(e["user"].as_str().unwrap().to_owned());
        }
        cursor = page["next"].clone();
        if cursor.is_null() {
            break;
        }
    }
    assert_eq!(seen, ["fan4", "fan3", "fan2", "fan1", "fan0"]);
    assert_eq!(
        code(
            f0.request("follow.list", json!({"dir": "following", "limit": 0}))
                .await
        ),
        ErrorCode::BadRequest
    );
    assert_eq!(
        code(
            f0.request("follow.list", json!({"dir": "following", "cursor": "junk"}))
                .await
        ),
        ErrorCode::BadRequest
    );
    let gone = fans[2]
        .request("follow.remove", json!({"user": "star"}))
        .await
        .unwrap();
    assert_eq!(gone["removed"], json!(true));
    drop(fans);
    s.stop().await;
    // A restart on the same data: the follows are still there.
    let s = Node::start(dir.path(), |_| {}).await;
    let mut star = s.connect("star").await;
    let counts = star.request("follow.counts", json!({})).await.unwrap();
    assert_eq!(counts, json!({"following": 0, "followers": 4}));
    let page = star
        .request("follow.list", json!({"dir": "followers"}))
        .await
        .unwrap();
    let users: Vec<&str> = page["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["user"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["fan4", "fan3", "fan1", "fan0"]);
    // Entries carry the profile (left out when empty): no second lookup.
    assert_eq!(page["users"][1]["p"], json!({"name": "Fan Three"}));
    assert!(page["users"][0].get("p").is_none());
    assert!(page["users"][0]["at"].as_u64().unwrap() > 0);
    let mine = star
        .request("follow.list", json!({"user": "fan0", "dir": "following"}))
        .await
        .unwrap();
    assert_eq!(mine["users"].as_array().unwrap().len(), 2);
    s.stop().await;
}

/// A member's profile change is sent to the room they are in (the link's profile notice, which
/// the room answers without an event of its own yet); the room and the member's session carry
/// on, and others read the new profile.
#[tokio::test]
async fn a_profile_change_inside_a_room_leaves_the_room_working() {
    let dir = tempfile::tempdir().unwrap();
    let s = Node::start(dir.path(), |_| {}).await;
    let mut ann = s.connect("ann").await;
    let mut bob = s.connect("bob").await;
    let room = ann.create_room(json!({"title": "party"})).await.unwrap();
    ann.join(&room, false, None).await.unwrap();
    bob.join(&room, false, None).await.unwrap();
    let ok = ann
        .request("user.update", json!({"name": "Ann"}))
        .await
        .unwrap();
    assert_eq!(ok["p"], json!({"name": "Ann"}));
    // An empty update answers the profile and tells nobody.
    let same = ann.request("user.update", json!({})).await.unwrap();
    assert_eq!(same["p"], json!({"name": "Ann"}));
    bob.chat(&room, "hi ann").await.unwrap();
    let chat = ann.next_event_named("chat", WAIT).await.unwrap();
    assert_eq!(chat.d["text"], json!("hi ann"));
    ann.chat(&room, "hi bob").await.unwrap();
    assert_eq!(profile_of(&mut bob, "ann").await, json!({"name": "Ann"}));
    s.stop().await;
}

/// The following bound end to end: a user who follows 4,999 users (written straight into
/// the node's store before it starts) may follow one more, and is then refused.
#[tokio::test]
async fn the_five_thousandth_follow_is_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let store = storage::follows::FollowStore::sqlite(dir.path())
        .await
        .unwrap();
    let me = protocol::UserId::from("collector");
    let max = protocol::client::user::MAX_FOLLOWING;
    for i in 0..max - 1 {
        let them = protocol::UserId::from(format!("idol{i}"));
        store
            .add(&me, &them, 1_000 + u64::from(i), max)
            .await
            .unwrap();
    }
    drop(store);
    let s = Node::start(dir.path(), |_| {}).await;
    let mut c = s.connect("collector").await;
    let ok = c
        .request("follow.add", json!({"user": "last"}))
        .await
        .unwrap();
    assert_eq!(ok["added"], json!(true));
    assert_eq!(
        code(c.request("follow.add", json!({"user": "one-more"})).await),
        ErrorCode::QuotaExceeded
    );
    // Following one already followed is still an answer, not a refusal.
    let again = c
        .request("follow.add", json!({"user": "last"}))
        .await
        .unwrap();
    assert_eq!(again["added"], json!(false));
    let counts = c.request("follow.counts", json!({})).await.unwrap();
    assert_eq!(counts["following"], json!(max));
    s.stop().await;
}
