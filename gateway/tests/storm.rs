//! Gift storms on a standalone server: 20,000 gifts into one room, with and without storm
//! coalescing. What a member adds up from the `gift` events it receives (orders, gifts and
//! coins), live and again on a resume from before the storm, equals what the ledger booked;
//! the combo numbers of every streak run 1..=N without a gap or a repeat. Each run prints the
//! events per second the member received.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use gateway::GatewayConfig;
use kit::client::Client;
use protocol::RoomId;
use serde_json::{Value, json};
use shard::ShardConfig;
use shard::state::GiftRules;

use crate::support::server;
use server::Server;

const SECRET: &[u8] = b"storm-test-secret";
const ADMIN: &str = "storm-admin";
/// Gifts in the storm.
const GIFTS: usize = 20_000;
/// Senders, each one streak (same gift, same recipient).
const SENDERS: usize = 8;
/// Requests a sender keeps in flight.
const WINDOW: usize = 200;
/// The rose's price.
const PRICE: i64 = 10;

async fn start(events_per_sec: u32) -> Server {
    let gateway = GatewayConfig {
        rate_per_sec: 100_000,
        rate_burst: 100_000,
        outbox_frames: 100_000,
        outbox_bytes: 256 << 20,
        drain_window: Duration::from_millis(100),
        ..GatewayConfig::default()
    };
    let shard = ShardConfig {
        history_events: 2 * GIFTS,
        history_age: Duration::from_secs(600),
        gift_rules: GiftRules {
            // Long enough that every sender's storm is one streak on a slow machine.
            combo_window_ms: 60_000,
            events_per_sec,
            storm_interval_ms: 500,
        },
        ..ShardConfig::default()
    };
    Server::launch(SECRET, ADMIN, gateway, shard).await
}

/// What a member adds up from gift events.
#[derive(Debug, Default, PartialEq)]
struct Sums {
    events: u64,
    orders: u64,
    count: u64,
    coins: i64,
    /// Per streak: the combo numbers seen, as ranges `(first, last)` in arrival order.
    streaks: HashMap<String, Vec<(u64, u64)>>,
}

impl Sums {
    fn add(&mut self, d: &Value) {
        let merged = d["merged"].as_u64().unwrap_or(1);
        let combo = d["combo"].as_u64().unwrap();
        self.events += 1;
        self.orders += merged;
        self.count += d["count"].as_u64().unwrap();
        self.coins += d["coins"].as_i64().unwrap();
        self.streaks
            .entry(d["streak"].as_str().unwrap().to_owned())
            .or_default()
            .push((combo + 1 - merged, combo));
    }

    /// Every streak's numbers run 1..=N in order, each once; returns the Ns.
    fn check_streaks(&self) -> Vec<u64> {
        let mut ends = Vec::new();
        for (id, ranges) in &self.streaks {
            let mut next = 1;
            for &(first, last) in ranges {
                assert_eq!(first, next, "streak {id}: a gap or a repeat at {first}");
                next = last + 1;
            }
            ends.push(next - 1);
        }
        ends.sort_unstable();
        ends
    }
}

/// Reads gift events into `sums` until they carry `orders` orders or `within` runs out.
async fn read_gifts(c: &mut Client, sums: &mut Sums, orders: u64, within: Duration) {
    let deadline = Instant::now() + within;
    while sums.orders < orders {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "only {} of {orders} orders seen",
            sums.orders
        );
        let e = c.next_event(left).await.unwrap();
        if e.ev == "gift" {
            sums.add(&e.d);
        }
    }
}

async fn storm(events_per_sec: u32) {
    let s = start(events_per_sec).await;
    let room = RoomId::from("storm");
    let per_sender = GIFTS / SENDERS;
    let mut host = s.connect("host").await;
    host.join(&room, false, None).await.unwrap();
    let mut watcher = s.connect("watcher").await;
    watcher.join(&room, false, None).await.unwrap();
    // A member that joins before the storm and comes back after it, resuming.
    let mut away = s.connect("away").await;
    away.join(&room, false, None).await.unwrap();
    let before = away.position(&room).map(|p| (p.epoch, p.seq)).unwrap();
    away.close().await;
    let mut senders = Vec::new();
    for i in 0..SENDERS {
        let user = format!("s{i}");
        let grant = kit::admin::grant(s.admin, Some(ADMIN), &user, PRICE * per_sender as i64, "g")
            .await
            .unwrap();
        assert_eq!(grant.status, 200, "{}", grant.body);
        let mut c = s.connect(&user).await;
        c.join(&room, false, None).await.unwrap();
        senders.push(c);
    }
    // The member reads while the storm runs.
    let reader = tokio::spawn(async move {
        let mut sums = Sums::default();
        read_gifts(
            &mut watcher,
            &mut sums,
            GIFTS as u64,
            Duration::from_secs(300),
        )
        .await;
        (sums, Instant::now())
    });
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, mut c) in senders.into_iter().enumerate() {
        let room = room.clone();
        tasks.push(tokio::spawn(async move {
            let mut pending = std::collections::VecDeque::new();
            let mut settled = 0;
            for n in 0..per_sender {
                let d = json!({"room": room, "req_id": format!("s{i}-{n}"), "gift": "rose", "to": ["host"]});
                pending.push_back(c.send("gift.send", d).await.unwrap());
                if pending.len() >= WINDOW {
                    let id = pending.pop_front().unwrap();
                    c.reply_to(id, Duration::from_secs(60)).await.unwrap();
                    settled += 1;
                }
            }
            for id in pending {
                c.reply_to(id, Duration::from_secs(60)).await.unwrap();
                settled += 1;
            }
            settled
        }));
    }
    let mut settled = 0;
    for t in tasks {
        settled += t.await.unwrap();
    }
    let sent_in = started.elapsed();
    assert_eq!(settled, GIFTS, "every gift settled");
    let (live, last_at) = reader.await.unwrap();
    let took = last_at.duration_since(started);
    // The ledger's books: every coin the senders paid went to earnings or revenue.
    let totals = kit::admin::ledger_totals(s.admin, Some(ADMIN))
        .await
        .unwrap()
        .json();
    let t = &totals["totals"];
    let booked = t["earnings"].as_i64().unwrap() + t["platform_revenue"].as_i64().unwrap();
    assert_eq!(totals["conserved"], true, "{totals}");
    assert_eq!(booked, PRICE * GIFTS as i64);
    assert_eq!(
        (live.orders, live.count, live.coins),
        (GIFTS as u64, GIFTS as u64, booked)
    );
    assert_eq!(live.check_streaks(), vec![per_sender as u64; SENDERS]);
    // A resume from before the storm replays the same events: the same totals.
    let mut back = s.connect("away").await;
    back.set_position(&room, before.0, before.1);
    back.join(&room, true, None).await.unwrap();
    let mut replayed = Sums::default();
    read_gifts(
        &mut back,
        &mut replayed,
        GIFTS as u64,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(replayed, live, "resume sees the same gift events");
    eprintln!(
        "storm events_per_sec={events_per_sec}: {GIFTS} gifts sent in {:.2} s ({:.0}/s), \
         member received {} gift events in {:.2} s = {:.0} events/s",
        sent_in.as_secs_f64(),
        GIFTS as f64 / sent_in.as_secs_f64(),
        live.events,
        took.as_secs_f64(),
        live.events as f64 / took.as_secs_f64(),
    );
    if events_per_sec > 0 {
        // Within the room's budget in every second the storm touched, merged events included.
        let bound = (took.as_secs_f64().ceil() as u64 + 1) * u64::from(events_per_sec);
        assert!(live.events <= bound, "{} events over {bound}", live.events);
        assert!(
            live.events < GIFTS as u64 / 4,
            "coalesced: {} events",
            live.events
        );
    } else {
        assert_eq!(
            live.events, GIFTS as u64,
            "no coalescing: one event per gift"
        );
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20000_gift_storm_coalesced_adds_up_to_the_ledger() {
    storm(50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20000_gift_storm_without_coalescing_adds_up_to_the_ledger() {
    storm(0).await;
}
