//! VIP protection from admins end to end on a standalone server, with real WebSocket clients:
//! a protected VIP who has left the room can be banned or chat-muted by the owner only, as
//! when they are in it; a plain user who is away is not protected. A VIP who joined before the
//! gateway's read of their standing came back is protected all the same.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::sync::Arc;
use std::time::Duration;

use gateway::GatewayConfig;
use protocol::{ErrorCode, RoomId};
use serde_json::json;
use shard::ShardConfig;
use shard::state::VipRules;
use tokio::sync::Semaphore;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"vip-protection-test-secret";
const ADMIN: &str = "vip-protection-admin";

const WAIT: Duration = Duration::from_secs(10);

/// Levels at 10 and 100 coins of lifetime spend; level 2 is protected from admins.
async fn launch() -> Server {
    launch_holding(None).await
}

/// [`launch`], the gateway's standing reads waiting for `hold` (when given) to be closed.
async fn launch_holding(hold: Option<Arc<Semaphore>>) -> Server {
    let gateway = GatewayConfig {
        rate_per_sec: 10_000,
        rate_burst: 10_000,
        test_hold_standing_reads: hold,
        ..GatewayConfig::default()
    };
    let shard = ShardConfig {
        vip: Arc::new(VipRules {
            thresholds: vec![10, 100],
            entrance_level: 2,
            protected_level: 2,
        }),
        ..ShardConfig::default()
    };
    Server::launch(SECRET, ADMIN, gateway, shard).await
}

/// `room` created by its owner `hana`, who makes `adm` an admin; both in it.
async fn staffed(s: &Server, room: &RoomId) -> (kit::client::Client, kit::client::Client) {
    let mut host = s.connect("hana").await;
    host.create_room(json!({"room": room})).await.unwrap();
    host.join(room, false, None).await.unwrap();
    let mut adm = s.connect("adm").await;
    adm.join(room, false, None).await.unwrap();
    host.request(
        "room.admin",
        json!({"room": room, "user": "adm", "admin": true}),
    )
    .await
    .unwrap();
    (host, adm)
}

#[tokio::test]
async fn an_admin_cannot_ban_or_mute_a_protected_vip_who_left_the_room() {
    let s = launch().await;
    let r = kit::admin::grant(s.admin, Some(ADMIN), "vip", 100, "seed-vip")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let room = RoomId::from("vip-room");
    let (mut host, mut adm) = staffed(&s, &room).await;

    // Two hearts (100 coins) settled: level 2, protected. Then the VIP leaves.
    let mut vip = s.connect("vip").await;
    vip.join(&room, false, None).await.unwrap();
    let g = json!({"room": room, "req_id": "v1", "gift": "heart", "count": 2, "to": ["hana"]});
    vip.request("gift.send", g).await.unwrap();
    let e = adm
        .request(
            "room.ban",
            json!({"room": room, "user": "vip", "seconds": 60}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::VipProtected), "in the room");
    vip.request("room.leave", json!({"room": room}))
        .await
        .unwrap();

    // Absent, still protected from the admin: no ban, no mute.
    for (op, d) in [
        (
            "room.ban",
            json!({"room": room, "user": "vip", "seconds": 60}),
        ),
        (
            "chat.mute",
            json!({"room": room, "user": "vip", "seconds": 60}),
        ),
    ] {
        let e = adm.request(op, d).await.unwrap_err();
        assert_eq!(
            e.code(),
            Some(ErrorCode::VipProtected),
            "{op} of the absent VIP"
        );
    }
    let bans = adm
        .request("room.bans", json!({"room": room}))
        .await
        .unwrap();
    assert_eq!(bans["bans"], json!([]), "{bans}");
    vip.join(&room, false, None).await.unwrap();
    vip.chat(&room, "still here").await.unwrap();
    vip.request("room.leave", json!({"room": room}))
        .await
        .unwrap();

    // A user who never spent is not protected, present or not; the owner may ban the VIP.
    adm.request(
        "room.ban",
        json!({"room": room, "user": "stranger", "seconds": 60}),
    )
    .await
    .unwrap();
    host.request(
        "room.ban",
        json!({"room": room, "user": "vip", "seconds": 60}),
    )
    .await
    .unwrap();
    let e = vip.join(&room, false, None).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Banned));
    s.stop().await;
}

/// A VIP whose standing the gateway has not read yet (its reads held back) joins with none.
/// The room does not know their spend, and takes it for no level 0: an admin's kick, ban,
/// chat mute, seat kick and seat mute of them have it read from the ledger and are refused;
/// a plain user in the same state is not protected; once the read arrives it shows.
#[tokio::test]
async fn an_admin_cannot_act_on_a_vip_whose_standing_is_not_read_yet() {
    let hold = Arc::new(Semaphore::new(0));
    let s = launch_holding(Some(hold.clone())).await;
    let r = kit::admin::grant(s.admin, Some(ADMIN), "vip", 100, "seed-vip")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    // The VIP's 100 coins go in another room first: this room counts nothing of them.
    let shop = RoomId::from("shop");
    let mut keeper = s.connect("keeper").await;
    keeper.create_room(json!({"room": shop})).await.unwrap();
    keeper.join(&shop, false, None).await.unwrap();
    let mut vip = s.connect("vip").await;
    vip.join(&shop, false, None).await.unwrap();
    let g = json!({"room": shop, "req_id": "v1", "gift": "heart", "count": 2, "to": ["keeper"]});
    vip.request("gift.send", g).await.unwrap();
    vip.request("room.leave", json!({"room": shop}))
        .await
        .unwrap();

    let room = RoomId::from("vip-room");
    let (mut host, mut adm) = staffed(&s, &room).await;
    let mut pleb = s.connect("pleb").await;
    pleb.join(&room, false, None).await.unwrap();
    // No standing read has come back: the VIP joins with none, and takes seat 1.
    vip.join(&room, false, None).await.unwrap();
    vip.request("seat.take", json!({"room": room, "seat": 1}))
        .await
        .unwrap();
    for (op, d) in kit::client::vip_covered_moderations(&room, "vip", 1) {
        let e = adm.request(op, d).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::VipProtected), "{op}");
    }
    vip.chat(&room, "still here, seated").await.unwrap();
    let bans = adm
        .request("room.bans", json!({"room": room}))
        .await
        .unwrap();
    assert_eq!(bans["bans"], json!([]), "{bans}");
    // A user who never spent, read the same way, is not protected.
    adm.request(
        "chat.mute",
        json!({"room": room, "user": "pleb", "seconds": 60}),
    )
    .await
    .unwrap();
    adm.request("room.kick", json!({"room": room, "user": "pleb"}))
        .await
        .unwrap();

    // The reads come back: the VIP's level shows, and the room knows it from now on.
    hold.close();
    let until = tokio::time::Instant::now() + WAIT;
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        let e = adm.next_event_named("member.update", left).await.unwrap();
        if e.d["user"] == "vip" && e.d["vip"] == 2 {
            break;
        }
    }
    let e = adm
        .request("room.kick", json!({"room": room, "user": "vip"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::VipProtected));
    host.request("room.kick", json!({"room": room, "user": "vip"}))
        .await
        .unwrap();
    s.stop().await;
}
