//! The direct-message store against a real redis-server and against SQLite: one contract on
//! both engines (order, undelivered messages, idempotent retries, blocks, bounds, history,
//! typed messages).
#![allow(clippy::unwrap_used)]

use kit::redis::RedisServer;
use protocol::UserId;
use protocol::client::ImMessage;
use storage::im::{Blocked, ImStore, KEEP_PER_USER, Outgoing, Sent, Stored};
use storage::redis::Redis;

async fn send(s: &ImStore, from: &UserId, to: &UserId, text: &str, req: &str) -> Sent {
    s.send(&Outgoing {
        from,
        to,
        text,
        kind: None,
        data_json: None,
        req_id: req,
        profile_json: None,
        system: false,
    })
    .await
    .unwrap()
}

fn new(sent: Sent) -> Stored {
    match sent {
        Sent::New(s) => s,
        other => panic!("expected a new message, got {other:?}"),
    }
}

fn parse(json: &str) -> ImMessage {
    serde_json::from_str(json).unwrap()
}

async fn contract(s: ImStore) {
    let (ann, bob, cy) = (UserId::from("ann"), UserId::from("bob"), UserId::from("cy"));
    let m1 = new(send(&s, &ann, &bob, "hi \"bob\"\nline two", "k1").await);
    let m2 = new(s
        .send(&Outgoing {
            from: &cy,
            to: &bob,
            text: "from cy",
            kind: None,
            data_json: None,
            req_id: "k1",
            profile_json: Some(r#"{"name":"Cy"}"#),
            system: false,
        })
        .await
        .unwrap());
    assert!(m2.id > m1.id);
    let e1 = parse(&m1.json);
    assert_eq!(
        (e1.id, e1.at, e1.text.as_str()),
        (m1.id, m1.at, "hi \"bob\"\nline two")
    );
    assert_eq!(
        (e1.from.clone(), e1.to.clone(), e1.p.clone()),
        (ann.clone(), bob.clone(), None)
    );
    assert!(!m1.json.contains("\"p\""), "an empty profile is left out");
    assert_eq!(parse(&m2.json).p.unwrap().name.as_deref(), Some("Cy"));

    // Undelivered, in order, until marked delivered.
    let ids = |v: Vec<(u64, String)>| v.into_iter().map(|(id, _)| id).collect::<Vec<_>>();
    assert_eq!(ids(s.undelivered(&bob).await.unwrap()), [m1.id, m2.id]);
    assert!(
        s.undelivered(&ann).await.unwrap().is_empty(),
        "sent is not owed"
    );
    s.delivered(&bob, &[m1.id]).await.unwrap();
    assert_eq!(ids(s.undelivered(&bob).await.unwrap()), [m2.id]);

    // A retry answers the first message; another message under the same key is a conflict.
    assert_eq!(
        send(&s, &ann, &bob, "hi \"bob\"\nline two", "k1").await,
        Sent::Repeated {
            id: m1.id,
            at: m1.at
        }
    );
    assert_eq!(send(&s, &ann, &bob, "other", "k1").await, Sent::Conflict);
    // The same answers without a send (what a sender out of rate is told), and a new key
    // answers nothing.
    let again = |text: &'static str, req_id: &'static str| Outgoing {
        from: &ann,
        to: &bob,
        text,
        kind: None,
        data_json: None,
        req_id,
        profile_json: None,
        system: false,
    };
    assert_eq!(
        s.repeat(&again("hi \"bob\"\nline two", "k1"))
            .await
            .unwrap(),
        Some(Sent::Repeated {
            id: m1.id,
            at: m1.at
        })
    );
    assert_eq!(
        s.repeat(&again("other", "k1")).await.unwrap(),
        Some(Sent::Conflict)
    );
    assert_eq!(s.repeat(&again("hi", "k-new")).await.unwrap(), None);
    assert_eq!(
        ids(s.undelivered(&bob).await.unwrap()),
        [m2.id],
        "nothing new"
    );

    // Blocks, both ways.
    assert_eq!(s.block(&bob, &ann, 10).await.unwrap(), Blocked::Done);
    assert_eq!(s.block(&bob, &ann, 10).await.unwrap(), Blocked::Done);
    assert_eq!(
        send(&s, &ann, &bob, "x", "k2").await,
        Sent::BlockedByRecipient
    );
    assert_eq!(send(&s, &bob, &ann, "x", "k2").await, Sent::BlockedBySender);
    assert_eq!(
        s.block(&bob, &UserId::from("zed"), 2).await.unwrap(),
        Blocked::Done
    );
    assert_eq!(s.block(&bob, &cy, 2).await.unwrap(), Blocked::ListFull);
    assert_eq!(
        s.blocks(&bob).await.unwrap(),
        [ann.clone(), UserId::from("zed")]
    );
    assert!(s.unblock(&bob, &ann).await.unwrap());
    assert!(!s.unblock(&bob, &ann).await.unwrap());
    let m3 = new(send(&s, &ann, &bob, "again", "k2").await);

    // History: sent and received, newest first, paged by id.
    let h: Vec<u64> = s
        .history(&bob, None)
        .await
        .unwrap()
        .iter()
        .map(|j| parse(j).id)
        .collect();
    assert_eq!(h, [m3.id, m2.id, m1.id]);
    let older: Vec<u64> = s
        .history(&bob, Some(m2.id))
        .await
        .unwrap()
        .iter()
        .map(|j| parse(j).id)
        .collect();
    assert_eq!(older, [m1.id]);
    assert_eq!(s.history(&ann, None).await.unwrap().len(), 2);

    // Bounded per user: the newest KEEP_PER_USER stay, and nothing trimmed is still owed.
    for i in 0..KEEP_PER_USER + 5 {
        new(send(&s, &cy, &ann, &format!("n{i}"), &format!("bulk-{i}")).await);
    }
    let kept = s.history(&ann, None).await.unwrap();
    assert_eq!(kept.len(), KEEP_PER_USER);
    assert_eq!(parse(&kept[0]).text, format!("n{}", KEEP_PER_USER + 4));
    let owed = s.undelivered(&ann).await.unwrap();
    assert_eq!(owed.len(), KEEP_PER_USER);
    assert!(owed.windows(2).all(|w| w[0].0 < w[1].0), "oldest first");

    let (dee, eve) = (UserId::from("dee"), UserId::from("eve"));
    // A typed message keeps its type and data; a retry must repeat them, and the same text
    // of another type under the key is a conflict.
    let typed = |kind: &'static str, data: &'static str| Outgoing {
        from: &dee,
        to: &eve,
        text: "ann invites you to Late Night",
        kind: Some(kind),
        data_json: Some(data),
        req_id: "k-invite",
        profile_json: None,
        system: false,
    };
    let invite = typed("room.invite", r#"{"room":"late-night"}"#);
    let m4 = new(s.send(&invite).await.unwrap());
    let e4 = parse(&m4.json);
    assert_eq!(
        (e4.kind.as_deref(), e4.data),
        (
            Some("room.invite"),
            Some(serde_json::json!({"room": "late-night"}))
        )
    );
    assert_eq!(
        s.send(&invite).await.unwrap(),
        Sent::Repeated {
            id: m4.id,
            at: m4.at
        }
    );
    let other = typed("room.invite", r#"{"room":"elsewhere"}"#);
    assert_eq!(s.send(&other).await.unwrap(), Sent::Conflict);
    s.delivered(&eve, &[m4.id]).await.unwrap();
    assert!(
        parse(&kept[0]).kind.is_none(),
        "a plain message has no type"
    );
}

#[tokio::test]
async fn the_sqlite_store_keeps_the_contract_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    contract(ImStore::sqlite(dir.path()).await.unwrap()).await;
    let again = ImStore::sqlite(dir.path()).await.unwrap();
    assert_eq!(
        again
            .history(&UserId::from("bob"), None)
            .await
            .unwrap()
            .len(),
        3
    );
}

/// The SQLite store knows which users may be owed messages, so a connect of anyone else
/// reads nothing: a message makes its recipient owed until all of theirs are delivered, and a
/// reopened store knows again who is owed. Redis, which other gateways write, always reads.
#[tokio::test]
async fn only_users_with_pending_messages_are_read_for_at_connect() {
    let dir = tempfile::tempdir().unwrap();
    let s = ImStore::sqlite(dir.path()).await.unwrap();
    let (ann, bob) = (UserId::from("ann"), UserId::from("bob"));
    assert!(!s.may_owe(&bob));
    let m1 = new(send(&s, &ann, &bob, "one", "k1").await);
    let m2 = new(send(&s, &ann, &bob, "two", "k2").await);
    assert!(
        s.may_owe(&bob) && !s.may_owe(&ann),
        "the sender is owed nothing"
    );
    s.delivered(&bob, &[m1.id]).await.unwrap();
    assert!(s.may_owe(&bob), "one still pending");
    let again = ImStore::sqlite(dir.path()).await.unwrap();
    assert!(again.may_owe(&bob), "known again after a reopen");
    assert_eq!(again.undelivered(&bob).await.unwrap().len(), 1);
    s.delivered(&bob, &[m2.id]).await.unwrap();
    assert!(!s.may_owe(&bob));
    assert!(s.undelivered(&bob).await.unwrap().is_empty());
    assert!(!ImStore::sqlite(dir.path()).await.unwrap().may_owe(&bob));
    let server = RedisServer::start().await.unwrap();
    let redis = Redis::connect(&server.url()).await.unwrap();
    assert!(ImStore::redis(&redis).may_owe(&bob));
}

#[tokio::test]
async fn the_redis_store_keeps_the_contract() {
    let server = RedisServer::start().await.unwrap();
    let redis = Redis::connect(&server.url()).await.unwrap();
    contract(ImStore::redis(&redis)).await;
}

/// A message id of `days_ago` days ago, as the stores make them (a time, 1,024 a millisecond).
fn id_days_ago(days_ago: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    (now - days_ago * 24 * 3600 * 1000) * storage::im::IDS_PER_MS
}

/// After `plant` put a message of 8 days ago in bob's log, pending: neither delivered at
/// connect nor listed, since nothing older than 7 days is kept, whatever the engine has not
/// deleted yet.
async fn an_old_message_is_neither_delivered_nor_listed(s: &ImStore) {
    let (ann, bob) = (UserId::from("ann"), UserId::from("bob"));
    let pending: Vec<u64> = s
        .undelivered(&bob)
        .await
        .unwrap()
        .iter()
        .map(|(id, _)| *id)
        .collect();
    let fresh = pending.iter().copied().max().unwrap();
    assert_eq!(pending, vec![fresh], "only the fresh message is owed");
    let listed = s.history(&bob, None).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(parse(&listed[0]).from, ann);
}

#[tokio::test]
async fn messages_past_seven_days_are_gone_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let s = ImStore::sqlite(dir.path()).await.unwrap();
    let (ann, bob) = (UserId::from("ann"), UserId::from("bob"));
    new(send(&s, &ann, &bob, "fresh", "k1").await);
    let old = id_days_ago(8);
    let file = dir.path().join(storage::im::IM_DB_FILE);
    let c = rusqlite::Connection::open(file).unwrap();
    let json = format!(
        r#"{{"id":{old},"at":{},"from":"ann","to":"bob","text":"old"}}"#,
        old / 1024
    );
    c.execute(
        "INSERT INTO im_log (user, id, msg, pending) VALUES ('bob', ?1, ?2, 1)",
        (old as i64, &json),
    )
    .unwrap();
    an_old_message_is_neither_delivered_nor_listed(&s).await;
}

#[tokio::test]
async fn messages_past_seven_days_are_gone_on_redis() {
    let server = RedisServer::start().await.unwrap();
    let redis = Redis::connect(&server.url()).await.unwrap();
    let s = ImStore::redis(&redis);
    let (ann, bob) = (UserId::from("ann"), UserId::from("bob"));
    new(send(&s, &ann, &bob, "fresh", "k1").await);
    let old = id_days_ago(8);
    let json = format!(
        r#"{{"id":{old},"at":{},"from":"ann","to":"bob","text":"old"}}"#,
        old / 1024
    );
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = ::redis::pipe()
        .cmd("ZADD")
        .arg("chorus:{im}:log:bob")
        .arg(old)
        .arg(&json)
        .ignore()
        .cmd("ZADD")
        .arg("chorus:{im}:pending:bob")
        .arg(old)
        .arg(old)
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    an_old_message_is_neither_delivered_nor_listed(&s).await;
}
