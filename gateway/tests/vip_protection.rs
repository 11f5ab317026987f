//! VIP protection from admins end to end on a standalone server, with real WebSocket clients:
//! a protected VIP who has left the room can be banned or chat-muted by the owner only, as
//! when they are in it; a plain user who is away is not protected.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::sync::Arc;

use gateway::GatewayConfig;
use protocol::{ErrorCode, RoomId};
use serde_json::json;
use shard::ShardConfig;
use shard::state::VipRules;

#[path = "support/server.rs"]
mod server;
use server::Server;

const SECRET: &[u8] = b"vip-protection-test-secret";
const ADMIN: &str = "vip-protection-admin";

/// Levels at 10 and 100 coins of lifetime spend; level 2 is protected from admins.
async fn launch() -> Server {
    let gateway = GatewayConfig {
        rate_per_sec: 10_000,
        rate_burst: 10_000,
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

#[tokio::test]
async fn an_admin_cannot_ban_or_mute_a_protected_vip_who_left_the_room() {
    let s = launch().await;
    let r = kit::admin::grant(s.admin, Some(ADMIN), "vip", 100, "seed-vip")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let room = RoomId::from("vip-room");
    let mut host = s.connect("hana").await;
    host.create_room(json!({"room": room})).await.unwrap();
    host.join(&room, false, None).await.unwrap();
    let mut adm = s.connect("adm").await;
    adm.join(&room, false, None).await.unwrap();
    host.request(
        "room.admin",
        json!({"room": room, "user": "adm", "admin": true}),
    )
    .await
    .unwrap();

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
