//! The moderation queue in a cluster, with real processes: a report filed in a room on one
//! shard, by a member on one gateway, is listed and resolved through another gateway's admin
//! API and read back from a shard's; it stays after its room's owner is killed (`kill -9`).
//!
//! These need the `chorus` binary built (`cargo build --bins`; `.ci/test-all` does it).

use kit::admin;
use kit::cluster::Cluster;
use protocol::RoomId;
use serde_json::json;

use crate::support::WAIT;

#[tokio::test]
async fn a_report_filed_on_a_shard_is_resolved_through_any_node() {
    let mut cluster = Cluster::of(2, 2).await.unwrap();
    let token = Some(cluster.admin_token.clone());
    let token = token.as_deref();
    let room = RoomId::from("reported");
    let mut host = cluster.connect(0, "host").await.unwrap();
    host.join_retrying(&room, None, WAIT).await.unwrap();
    let mut troll = cluster.connect(1, "troll").await.unwrap();
    troll.join_retrying(&room, None, WAIT).await.unwrap();
    let seq = troll.chat(&room, "free coins, dm me").await.unwrap();
    let report = json!({"room": room, "seq": seq, "reason": "spam"});
    let ok = host.request("report.send", report).await.unwrap();
    let id = ok["id"].as_u64().unwrap_or_else(|| panic!("no id: {ok}"));

    // The other gateway lists it, with the line as members saw it.
    let list = admin::get(cluster.gateways[1].admin, "/admin/reports", token)
        .await
        .unwrap();
    assert_eq!(list.status, 200, "{}", list.body);
    let listed = &list.json()["reports"][0];
    assert_eq!(
        (&listed["id"], &listed["user"], &listed["line"]["text"]),
        (&json!(id), &json!("troll"), &json!("free coins, dm me"))
    );

    // The owner dies; the queue is in Redis, not in the room.
    let (owner, _) = cluster.room_owner("reported").await.unwrap().unwrap();
    cluster.shard_mut(&owner).unwrap().node.kill9().unwrap();
    let path = format!("/admin/reports/{id}/resolve");
    let decision = json!({"action": "banned", "by": "mod-anna"});
    let done = admin::post(cluster.gateways[1].admin, &path, token, decision)
        .await
        .unwrap();
    assert_eq!(done.status, 200, "{}", done.body);
    let other = cluster
        .shards
        .iter()
        .find(|s| s.id != owner)
        .map(|s| s.admin)
        .unwrap();
    let read = admin::get(other, &format!("/admin/reports/{id}"), token)
        .await
        .unwrap();
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(
        (&read.json()["status"], &read.json()["resolution"]["action"]),
        (&json!("resolved"), &json!("banned"))
    );
    let open = admin::get(cluster.gateways[0].admin, "/admin/reports", token)
        .await
        .unwrap();
    assert_eq!(open.json()["reports"], json!([]), "{}", open.body);
}
