//! The moderation queue end to end on a standalone node: members' reports over the WebSocket
//! wait in the queue with their ids, a moderator lists them (by status, room, reported user,
//! in pages), reads one and resolves it once, bad calls are refused, the backlog gauge follows
//! the queue, and the queue survives a restart of the node.

use gateway::GatewayConfig;
use kit::admin::{self, AdminResponse};
use serde_json::{Value, json};
use shard::ShardConfig;

use crate::support::server::Server;

const SECRET: &[u8] = b"test-secret-for-the-report-queue";
const ADMIN: &str = "reports-admin";
/// Longer than the backlog gauge's period (5 s).
const WAIT: std::time::Duration = std::time::Duration::from_secs(15);

async fn get(s: &Server, path: &str) -> AdminResponse {
    admin::get(s.admin, path, Some(ADMIN)).await.unwrap()
}

async fn resolve(s: &Server, id: u64, body: Value) -> AdminResponse {
    let path = format!("/admin/reports/{id}/resolve");
    admin::post(s.admin, &path, Some(ADMIN), body)
        .await
        .unwrap()
}

/// The ids of a list's reports, in order.
fn ids(r: &AdminResponse) -> Vec<u64> {
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect()
}

fn id_of(ok: &Value) -> u64 {
    ok["id"].as_u64().unwrap_or_else(|| panic!("no id: {ok}"))
}

#[tokio::test]
async fn reports_wait_for_a_moderator_and_survive_a_restart() {
    let s = Server::launch(
        SECRET,
        ADMIN,
        GatewayConfig::default(),
        ShardConfig::default(),
    )
    .await;
    let mut host = s.connect("host").await;
    let room = host.create_room(json!({"room": "queue"})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut bob = s.connect("bob").await;
    bob.join(&room, false, None).await.unwrap();
    let seq = bob.chat(&room, "cheap coins at example.com").await.unwrap();

    // Filed: the reporter gets the queue's id; a duplicate gets none and is not queued.
    let line = json!({"room": room, "seq": seq, "reason": "spam", "text": "an ad"});
    let id1 = id_of(&host.request("report.send", line.clone()).await.unwrap());
    let again = host.request("report.send", line).await.unwrap();
    assert_eq!(again, json!({"duplicate": true}));
    let of_room = json!({"room": room, "reason": "other"});
    let id2 = id_of(&host.request("report.send", of_room).await.unwrap());
    let of_host = json!({"room": room, "user": "host", "reason": "harassment"});
    let id3 = id_of(&bob.request("report.send", of_host).await.unwrap());
    assert_eq!((id2, id3), (id1 + 1, id1 + 2));
    // The backlog gauge follows the queue by itself (its periodic read; nothing listed yet).
    assert!(
        admin::wait_metric(s.admin, "chorus_reports_open", 3.0, WAIT)
            .await
            .unwrap(),
        "chorus_reports_open reaches 3"
    );

    // Listed newest first, with the line as members saw it.
    let open = get(&s, "/admin/reports").await;
    assert_eq!(ids(&open), [id3, id2, id1]);
    assert_eq!(open.json()["open"], 3, "the backlog");
    let first = &open.json()["reports"][2];
    assert_eq!(
        (
            &first["room"],
            &first["reporter"],
            &first["user"],
            &first["seq"],
            &first["reason"],
            &first["text"],
            &first["status"]
        ),
        (
            &json!(room),
            &json!("host"),
            &json!("bob"),
            &json!(seq),
            &json!("spam"),
            &json!("an ad"),
            &json!("open")
        )
    );
    assert_eq!(
        (&first["line"]["from"], &first["line"]["text"]),
        (&json!("bob"), &json!("cheap coins at example.com"))
    );
    assert_eq!(open.json()["reports"][1]["user"], Value::Null, "the room");
    assert_eq!(ids(&get(&s, "/admin/reports?user=bob").await), [id1]);
    assert_eq!(
        ids(&get(&s, &format!("/admin/reports?room={room}")).await),
        [id3, id2, id1]
    );
    assert!(ids(&get(&s, "/admin/reports?room=elsewhere").await).is_empty());
    let page = get(&s, "/admin/reports?limit=2").await;
    assert_eq!(ids(&page), [id3, id2]);
    let next = page.json()["next"].as_u64().unwrap();
    let rest = get(&s, &format!("/admin/reports?limit=2&before={next}")).await;
    assert_eq!(ids(&rest), [id1]);
    assert_eq!(rest.json()["next"], Value::Null);
    let one = get(&s, &format!("/admin/reports/{id1}")).await;
    assert_eq!(one.json(), first.clone());

    // Resolved once; the second decision is refused with the first.
    let decision = json!({"action": "warned", "note": "first time", "by": "mod-anna"});
    let done = resolve(&s, id1, decision).await;
    assert_eq!(done.status, 200, "{}", done.body);
    let done = done.json();
    assert_eq!(done["status"], "resolved");
    assert_eq!(
        (
            &done["resolution"]["action"],
            &done["resolution"]["note"],
            &done["resolution"]["by"]
        ),
        (&json!("warned"), &json!("first time"), &json!("mod-anna"))
    );
    assert!(done["resolution"]["at"].as_u64().unwrap() > 0);
    let twice = resolve(&s, id1, json!({"action": "banned"})).await;
    assert_eq!(twice.status, 409, "{}", twice.body);
    assert_eq!(twice.json()["report"]["resolution"]["action"], "warned");
    assert_eq!(ids(&get(&s, "/admin/reports").await), [id3, id2]);
    let resolved = get(&s, "/admin/reports?status=resolved").await;
    assert_eq!(ids(&resolved), [id1]);
    assert_eq!(
        resolved.json()["open"],
        2,
        "the backlog, whatever the filter"
    );
    assert_eq!(
        admin::metric(s.admin, "chorus_reports_open").await.unwrap(),
        2.0,
        "a list sets the gauge at once"
    );

    // Refused: unknown reports, bad decisions and bad queries; no token.
    for (status, r) in [
        (404, get(&s, "/admin/reports/999999").await),
        (404, get(&s, "/admin/reports/x").await),
        (404, resolve(&s, 999_999, json!({"action": "warned"})).await),
        (400, resolve(&s, id2, json!({"action": ""})).await),
        (400, resolve(&s, id2, json!({"action": "a b"})).await),
        (
            400,
            resolve(&s, id2, json!({"action": "ok", "by": "a b"})).await,
        ),
        (
            400,
            resolve(&s, id2, json!({"action": "ok", "note": "\u{202e}x"})).await,
        ),
        (
            400,
            resolve(&s, id2, json!({"action": "ok", "extra": 1})).await,
        ),
        (400, get(&s, "/admin/reports?status=closed").await),
        (400, get(&s, "/admin/reports?limit=0").await),
        (400, get(&s, "/admin/reports?limit=201").await),
        (400, get(&s, "/admin/reports?before=x").await),
        (
            401,
            admin::get(s.admin, "/admin/reports", None).await.unwrap(),
        ),
    ] {
        assert_eq!(r.status, status, "{}", r.body);
    }
    assert_eq!(
        ids(&get(&s, "/admin/reports").await),
        [id3, id2],
        "refused decisions changed nothing"
    );

    // The queue is on disk: a restarted node lists it as it was and numbers on.
    let s = s.relaunch().await;
    let all = get(&s, "/admin/reports?status=all").await;
    assert_eq!(ids(&all), [id3, id2, id1]);
    assert_eq!(all.json()["reports"][2]["resolution"]["action"], "warned");
    let mut cid = s.connect("cid").await;
    cid.join(&room, false, None).await.unwrap();
    let of_bob = json!({"room": room, "user": "bob", "reason": "spam"});
    let id4 = id_of(&cid.request("report.send", of_bob).await.unwrap());
    assert_eq!(id4, id3 + 1);
    s.stop().await;
}
