//! Smoke test of the load harness: the in-process baseline server and a tiny fanout run over
//! loopback must deliver every message exactly once, with latency measured.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use loadtest::report::Report;
use loadtest::scenario::gifts::Order;
use loadtest::scenario::{self, Params, Scenario};
use loadtest::target::{Guard, Target};
use protocol::ErrorCode;

/// One second of a fanout (1 publisher, 20 listeners, 50 msgs/s) after a `warmup`, against the
/// in-process baseline server.
async fn fanout_on_the_baseline(warmup: Duration) -> Report {
    let (addr, server) = loadtest::baseline::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let target = Target {
        name: "baseline".into(),
        urls: vec![format!("ws://{addr}/ws")],
        pids: vec![std::process::id()],
        parts: None,
        admin: None,
        admin_token: None,
        secret: None,
        guard: Guard::None,
    };
    let params = Params {
        duration: Duration::from_millis(1000),
        warmup,
        drain: Duration::from_secs(5),
        ..Params::default()
    };
    let scenario = Scenario::Fanout {
        listeners: 20,
        publishers: 1,
    };
    let r = scenario.run(&target, &params, 50.0).await.unwrap();
    server.abort();
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fanout_against_the_baseline_loses_nothing() {
    let r = fanout_on_the_baseline(Duration::ZERO).await;
    assert_eq!(r.sent, 50);
    assert_eq!(r.accepted, 50);
    assert_eq!(r.unanswered, 0);
    assert_eq!(r.expected, 50 * 21);
    assert_eq!(r.received, r.expected, "{r:?}");
    assert_eq!((r.lost, r.gaps, r.duplicates, r.closed), (0, 0, 0, 0));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.latency.count, r.received);
    assert!(r.p99_ms > 0.0 && r.max_ms >= r.p99_ms);
    // The baseline serves no metrics: no write batching figure is made up for it.
    assert_eq!(r.frames_per_write, None);
}

/// With a warm-up, its messages are sent and must all arrive (the loss check counts them),
/// but only the measured schedule's are in the latency figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_up_is_delivered_in_full_and_left_out_of_the_latency() {
    let r = fanout_on_the_baseline(Duration::from_millis(500)).await;
    // 1.5 s at 50/s: 25 warm-up messages, then 50 measured.
    assert_eq!((r.sent, r.accepted, r.unanswered), (75, 75, 0));
    assert_eq!(r.expected, 75 * 21);
    assert_eq!(r.received, r.expected, "{r:?}");
    assert_eq!((r.lost, r.gaps, r.duplicates), (0, 0, 0));
    assert_eq!(r.latency.count, 50 * 21, "{r:?}");
    assert_eq!(r.reply.count, 50);
}

/// The bare baseline (`baseline-server --bare`, the plain broadcast server `rooms` and
/// `fanout` compare against) numbers each room's events and delivers every message to every
/// member, the sender too, in rooms side by side and in one large room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rooms_and_fanout_against_the_bare_baseline_lose_nothing() {
    let running = loadtest::baseline::start(loadtest::baseline::Options {
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        ledger: None,
        admin: None,
        jwt_secret: None,
        bare: true,
    })
    .await
    .unwrap();
    let target = Target {
        name: "baseline".into(),
        urls: vec![format!("ws://{}/ws", running.addr)],
        pids: vec![std::process::id()],
        parts: None,
        admin: None,
        admin_token: None,
        secret: None,
        guard: Guard::None,
    };
    let rooms = Scenario::Rooms {
        rooms: 3,
        members: 4,
    };
    // 12 members at 5 messages/s each, for one second; each message to its room's 4.
    let r = rooms.run(&target, &one_second(), 5.0).await.unwrap();
    assert_eq!((r.sent, r.accepted, r.unanswered), (60, 60, 0), "{r:?}");
    assert_eq!(r.expected, 60 * 4);
    assert_eq!(r.received, r.expected, "{r:?}");
    assert_eq!((r.lost, r.gaps, r.duplicates, r.closed), (0, 0, 0, 0));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.latency.count, r.received);
    let fanout = Scenario::Fanout {
        listeners: 30,
        publishers: 2,
    };
    let r = fanout.run(&target, &one_second(), 40.0).await.unwrap();
    assert_eq!((r.accepted, r.expected), (40, 40 * 32), "{r:?}");
    assert_eq!(r.received, r.expected, "{r:?}");
    assert_eq!((r.lost, r.gaps, r.duplicates, r.closed), (0, 0, 0, 0));
    for t in running.tasks {
        t.abort();
    }
}

/// The bare baseline answers what it does not serve with a clear error, and refuses chat to a
/// room the connection has not joined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bare_baseline_refuses_what_it_does_not_serve() {
    let (addr, server) = loadtest::baseline::bare::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let url = format!("ws://{addr}/ws");
    let mut c = kit::client::connect(&url, None).await.unwrap();
    let e = c
        .request("gift.send", serde_json::json!({"room": "r"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::UnknownOp), "{e:?}");
    let e = c
        .request("chat.send", serde_json::json!({"room": "r", "text": "hi"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NotInRoom), "{e:?}");
    let ok = c
        .request("room.join", serde_json::json!({"room": "r"}))
        .await
        .unwrap();
    assert_eq!(
        (ok["epoch"].as_u64(), ok["seq"].as_u64()),
        (Some(1), Some(0))
    );
    // The text goes out as it came, escapes included.
    let text = "a \"quoted\" line\n";
    let ok = c
        .request("chat.send", serde_json::json!({"room": "r", "text": text}))
        .await
        .unwrap();
    assert_eq!(ok["seq"].as_u64(), Some(1));
    let ev = c
        .next_event_named("chat", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(ev.seq, Some(1));
    assert_eq!(ev.d["text"].as_str(), Some(text));
    server.abort();
}

/// A node whose pid the generator cannot see (another user's, or in a container) is measured through its admin
/// port: `process_resident_memory_bytes` and `process_cpu_seconds_total` must read what `/proc`
/// reads for the same process, in the units the reports use, and an idle run must work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_pid_memory_and_cpu_come_from_the_admin_metrics() {
    let mut target =
        loadtest::target::spawn_standalone(b"harness-secret", "harness-admin", false, false)
            .await
            .unwrap();
    let pid = target.pids[0];
    target.pids.clear();

    let from_proc = kit::procfs::rss_total_kib(&[pid]).unwrap();
    let from_admin = scenario::server_rss_kib(&target).await.unwrap();
    let drift = from_admin.abs_diff(from_proc);
    assert!(
        drift * 5 < from_proc,
        "admin {from_admin} KiB, /proc {from_proc} KiB"
    );

    let cpu_proc = kit::procfs::cpu_ms(&[pid]).unwrap();
    let cpu_admin = scenario::server_cpu(&target).await.unwrap().ms;
    // Both count since the process started; the scrape in between costs a few ticks.
    assert!(
        cpu_admin >= cpu_proc && cpu_admin - cpu_proc < 200.0,
        "admin {cpu_admin} ms, /proc {cpu_proc} ms"
    );

    let params = Params::default();
    let r = Scenario::Idle {
        conns: 50,
        rooms: 5,
    }
    .run(&target, &params, 0.0)
    .await
    .unwrap();
    assert_eq!(r.connections, 50);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let (before, after) = (r.rss_before_kib.unwrap(), r.rss_after_kib.unwrap());
    assert!(before > 1024 && after > 1024, "{before} → {after} KiB");
    assert!(r.rss_per_conn_bytes.is_some());
    assert!(r.rss_marginal_per_conn_bytes.is_some());
}

/// One second of sending, drained for up to 10 s.
fn one_second() -> Params {
    Params {
        duration: Duration::from_millis(1000),
        drain: Duration::from_secs(10),
        ..Params::default()
    }
}

/// A standalone node for the gift storms below.
async fn gift_node() -> Target {
    loadtest::target::spawn_standalone(b"harness-secret", "harness-admin", false, false)
        .await
        .unwrap()
}

/// One second of gifts at `rate` over 2 rooms × 4 members, drained for up to 10 s.
async fn gift_storm(target: &Target, order: Order, rate: f64) -> Report {
    let params = one_second();
    Scenario::Gifts {
        rooms: 2,
        members: 4,
        order,
    }
    .run(target, &params, rate)
    .await
    .unwrap()
}

/// A node's write batching is reported from its admin counters: every gift here is one reply
/// to its sender and one event to each of the room's 4 members, so the node writes 5 frames
/// per gift, and no socket write carries less than one frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gift_storm_reports_the_nodes_frames_per_socket_write() {
    let target = gift_node().await;
    let before = scenario::server_writes(&target).await.unwrap();
    let r = gift_storm(&target, Order::default(), 100.0).await;
    let after = scenario::server_writes(&target).await.unwrap();
    assert_eq!(r.settled, Some(100), "{r:?}");
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let per_write = r
        .frames_per_write
        .expect("the node serves its write counters");
    assert!(per_write >= 1.0, "{per_write} frames per write");
    // The whole run (connecting and joining included) wrote at least the gifts' 500 frames,
    // in no more writes than frames.
    let (frames, writes) = (after.frames - before.frames, after.batches - before.batches);
    assert!(frames >= 500.0, "{frames} frames");
    assert!(
        writes >= 1.0 && writes <= frames,
        "{writes} writes for {frames} frames"
    );
}

/// A gift's events are timed like chat: its `req_id` is a UUIDv7 at the intended send time,
/// and every member's `gift` event carries that time in its order id. Interleaved, each gift
/// goes to the other room than the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gift_storms_events_are_timed_from_their_order_ids() {
    let target = gift_node().await;
    let interleaved = Order {
        interleave_rooms: true,
        ..Order::default()
    };
    let r = gift_storm(&target, interleaved, 100.0).await;
    assert_eq!(r.settled, Some(100), "{r:?}");
    assert_eq!((r.received, r.lost, r.gaps), (400, 0, 0), "{r:?}");
    // Every event was timed: one sample per delivery, each after its gift was due.
    assert_eq!(r.latency.count, 400, "{:?}", r.latency);
    assert!(
        r.p50_ms > 0.0 && r.max_ms < 10_000.0,
        "{} / {} ms",
        r.p50_ms,
        r.max_ms
    );
    // Random request ids give order ids without a time: counted, not timed.
    let random = Order {
        random_req_ids: true,
        ..Order::default()
    };
    let r = gift_storm(&target, random, 50.0).await;
    assert_eq!((r.settled, r.received), (Some(50), 200), "{r:?}");
    assert_eq!(r.latency.count, 0, "{:?}", r.latency);
}

/// The baseline with its gift ledger, in this process, as `gifts --compare` runs it: users
/// from tokens, an admin port, a ledger in a temp dir.
async fn gift_baseline(dir: &std::path::Path) -> (Target, loadtest::baseline::Running) {
    let secret = b"harness-baseline-secret".to_vec();
    let running = loadtest::baseline::start(loadtest::baseline::Options {
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        ledger: Some(dir.join("ledger.db")),
        admin: Some(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))),
        jwt_secret: Some(secret.clone()),
        bare: false,
    })
    .await
    .unwrap();
    let target = Target {
        name: "baseline".into(),
        urls: vec![format!("ws://{}/ws", running.addr)],
        pids: vec![std::process::id()],
        parts: None,
        admin: running.admin,
        admin_token: None,
        secret: Some(secret),
        guard: Guard::None,
    };
    (target, running)
}

/// `gifts --compare` has a baseline: the same storm settles every gift on the baseline's
/// durable ledger, every member gets every event timed from its order id, every sender's
/// balance is what its gifts cost, coins are conserved, and the baseline's write counters
/// give its frames per socket write as Chorus' give Chorus'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gift_storm_against_the_baseline_settles_and_checks_every_gift() {
    let dir = tempfile::tempdir().unwrap();
    let (target, running) = gift_baseline(dir.path()).await;
    let r = gift_storm(&target, Order::default(), 100.0).await;
    assert_eq!(r.settled, Some(100), "{r:?}");
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(
        (r.received, r.lost, r.gaps, r.duplicates),
        (400, 0, 0, 0),
        "{r:?}"
    );
    assert_eq!(r.latency.count, 400, "{:?}", r.latency);
    assert_eq!(
        (r.balances_checked, r.balance_mismatches, r.conserved),
        (Some(8), Some(0), Some(true)),
        "{r:?}"
    );
    let per_write = r.frames_per_write.expect("the baseline counts its writes");
    assert!(per_write >= 1.0, "{per_write} frames per write");
    for t in running.tasks {
        t.abort();
    }
}

/// With a ledger, the baseline knows its users from their tokens, as Chorus does: a socket
/// without a valid one is refused at the upgrade with 401, and a gift's sender is the
/// token's user (a reused `req_id` gets the same order and no second debit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gift_baseline_refuses_a_bad_token_and_books_a_retry_once() {
    use kit::client::{ClientError, connect, mint_token};
    let dir = tempfile::tempdir().unwrap();
    let (target, running) = gift_baseline(dir.path()).await;
    let url = &target.urls[0];
    let wrong = mint_token(b"another-secret", "mallory", Duration::from_secs(60)).unwrap();
    let refused = connect(url, Some(&wrong)).await;
    assert!(
        matches!(refused, Err(ClientError::Refused(401))),
        "{:?}",
        refused.err()
    );
    let admin = target.admin.unwrap();
    let r = kit::admin::grant(admin, None, "alice", 100, "g")
        .await
        .unwrap();
    assert_eq!((r.status, r.json()["balance"].as_i64()), (200, Some(100)));
    let token = mint_token(
        target.secret.as_ref().unwrap(),
        "alice",
        Duration::from_secs(60),
    )
    .unwrap();
    let mut alice = connect(url, Some(&token)).await.unwrap();
    alice
        .join(&protocol::ids::RoomId::from("r"), false, None)
        .await
        .unwrap();
    let d = serde_json::json!({
        "room": "r", "req_id": "0190f1c2-7a1b-7c3d-9e4f-5a6b7c8d9e0f",
        "gift": "rose", "count": 2, "to": ["bob"],
    });
    let first = alice.request("gift.send", d.clone()).await.unwrap();
    let again = alice.request("gift.send", d).await.unwrap();
    assert_eq!(first["balance"].as_i64(), Some(80));
    assert_eq!(first, again);
    let bob = kit::admin::get(admin, "/admin/wallets/bob", None)
        .await
        .unwrap();
    assert_eq!(bob.json()["earnings"].as_i64(), Some(20));
    for t in running.tasks {
        t.abort();
    }
}

/// No seat requests: the rest of a party's shape where a test leaves them out.
fn quiet_seats() -> loadtest::scenario::party::Shape {
    loadtest::scenario::party::Shape {
        rooms: 1,
        members: 1,
        gifters: 0,
        seaters: 0,
        bursts_per_sec: 0.0,
        burst_gifts: 0,
        burst_rate: 1.0,
        seat_rate: 0.0,
        listeners: 0,
        join_rate: 0.0,
        seat_requesters: 0,
        seat_request_rate: 0.0,
        seat_hold_ms: 0,
    }
}

/// A party carries chat, gift bursts, seat changes and listeners coming and going at once, and
/// reports each apart: every chat message reaches every chatter and every gift event every
/// gifter, counted by its own kind only (a chatter does not count the gift events it also gets,
/// so the deliveries add up exactly), every request is answered and timed in its own
/// histogram, and the gifts are paid for and conserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_party_reports_its_chat_gift_bursts_and_seat_changes_apart() {
    use loadtest::scenario::party::Shape;
    let target = gift_node().await;
    let params = one_second();
    let shape = Shape {
        rooms: 3,
        members: 3,
        gifters: 2,
        seaters: 2,
        bursts_per_sec: 4.0,
        burst_gifts: 10,
        burst_rate: 1_000.0,
        seat_rate: 20.0,
        listeners: 2,
        join_rate: 12.0,
        ..quiet_seats()
    };
    // 2 messages/s from each of the 9 chatters: 18 messages; 4 bursts of 10 gifts; 20 seat
    // changes (each of the 6 changers takes a seat, leaves it, ...); 12 comings and goings
    // (each of the 6 listeners leaves its room and joins it again: the chat and gifts it
    // missed meanwhile are no gap).
    let r = Scenario::Party(shape)
        .run(&target, &params, 2.0)
        .await
        .unwrap();
    assert_eq!(r.scenario, "party");
    assert_eq!((r.sent, r.accepted, r.unanswered), (90, 90, 0), "{r:?}");
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.connections, 3 * (3 + 2 + 2 + 2));
    assert_eq!(r.expected, 18 * 3 + 40 * 2, "{r:?}");
    assert_eq!(r.received, r.expected, "{r:?}");
    assert_eq!(
        (r.lost, r.gaps, r.duplicates, r.closed),
        (0, 0, 0, 0),
        "{r:?}"
    );
    // The chat's deliveries and replies are the main figures; the rest stand beside them.
    assert_eq!((r.latency.count, r.reply.count), (18 * 3, 18), "{r:?}");
    let gift_reply = r.gift_reply.as_ref().unwrap();
    let gift_events = r.gift_events.as_ref().unwrap();
    let seat_reply = r.seat_reply.as_ref().unwrap();
    let join_reply = r.join_reply.as_ref().unwrap();
    assert_eq!(
        (
            gift_reply.count,
            gift_events.count,
            seat_reply.count,
            join_reply.count
        ),
        (40, 80, 20, 12)
    );
    assert!(r.side_p99_ms() >= gift_reply.p99_ms.max(seat_reply.p99_ms));
    assert!(r.side_p99_ms() >= join_reply.p99_ms);
    assert_eq!(
        (
            r.settled,
            r.balances_checked,
            r.balance_mismatches,
            r.conserved
        ),
        (Some(40), Some(6), Some(0), Some(true)),
        "{r:?}"
    );
}

/// Without seat changes a party runs against the baseline too, as `party --compare --seat-rate
/// 0` runs it: the baseline's ledger settles the bursts' gifts, and the chat and the gift events
/// add up as on Chorus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_party_without_seat_changes_runs_against_the_baseline() {
    use loadtest::scenario::party::Shape;
    let dir = tempfile::tempdir().unwrap();
    let (target, running) = gift_baseline(dir.path()).await;
    let params = one_second();
    let shape = Shape {
        rooms: 2,
        members: 3,
        gifters: 2,
        seaters: 0,
        bursts_per_sec: 2.0,
        burst_gifts: 10,
        burst_rate: 1_000.0,
        seat_rate: 0.0,
        listeners: 0,
        join_rate: 0.0,
        ..quiet_seats()
    };
    assert!(Scenario::Party(shape).needs_ledger());
    let r = Scenario::Party(shape)
        .run(&target, &params, 3.0)
        .await
        .unwrap();
    // 18 chat messages counted by 3 chatters each, 20 gifts by 2 gifters each.
    assert_eq!((r.sent, r.accepted, r.unanswered), (38, 38, 0), "{r:?}");
    assert_eq!(
        (r.expected, r.received, r.lost, r.gaps),
        (94, 94, 0, 0),
        "{r:?}"
    );
    assert_eq!(r.gift_events.as_ref().map(|l| l.count), Some(40));
    assert!(r.seat_reply.is_none() && r.join_reply.is_none(), "{r:?}");
    assert_eq!(
        (r.settled, r.balance_mismatches, r.conserved),
        (Some(20), Some(0), Some(true)),
        "{r:?}"
    );
    for t in running.tasks {
        t.abort();
    }
}

/// Seat requests in apply mode beside the chat and the seat changes: each room's owner approves
/// every request it is shown and kicks the requester 100 ms later, before its next turn, so
/// every request is approved and every approval kicked; the seat changers, made admins, still
/// take seats directly; each op's reply latency is reported apart, and no connection sees a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_party_with_seat_requests_approves_and_kicks_each_requester() {
    use loadtest::scenario::party::Shape;
    let target = gift_node().await;
    let shape = Shape {
        rooms: 2,
        members: 2,
        seaters: 1,
        seat_rate: 4.0,
        seat_requesters: 2,
        seat_request_rate: 8.0,
        seat_hold_ms: 100,
        ..quiet_seats()
    };
    // 8 requests over the 4 requesters: each asks every 0.5 s, and holds its seat 0.1 s.
    let r = Scenario::Party(shape)
        .run(&target, &one_second(), 2.0)
        .await
        .unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.unanswered, 0, "{r:?}");
    assert_eq!(
        (r.lost, r.gaps, r.duplicates, r.closed),
        (0, 0, 0, 0),
        "{r:?}"
    );
    // Per room: 2 chatters, 1 seat changer, 2 requesters and the owner.
    assert_eq!(r.connections, 2 * 6);
    assert_eq!(
        (r.seats_approved, r.seats_kicked),
        (Some(8), Some(8)),
        "{r:?}"
    );
    let count = |l: &Option<loadtest::report::Latency>| l.as_ref().map(|l| l.count);
    assert_eq!(
        (
            count(&r.seat_request_reply),
            count(&r.seat_approve_reply),
            count(&r.seat_kick_reply),
            count(&r.seat_reply)
        ),
        (Some(8), Some(8), Some(8), Some(4)),
        "{r:?}"
    );
    // The chat is still the main figure: 2 messages/s from each of the 4 chatters.
    assert_eq!((r.reply.count, r.latency.count), (8, 16), "{r:?}");
    assert!(r.side_p99_ms() >= r.seat_kick_reply.as_ref().unwrap().p99_ms);
}
