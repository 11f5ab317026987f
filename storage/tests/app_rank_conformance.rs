//! App-wide leaderboards and lifetime spend, on every engine (the shared conformance kit):
//! the boards equal a recount of the ledger's settled gifts after a mix of gifts in several
//! rooms, days and users (robots among them); ties go by user id; the limit holds; a user's
//! lifetime spend is the sum of their settled gifts; pruning deletes old day and week rows and
//! changes no board a read can see. Existing ledgers get their boards from the gifts booked
//! before the migration (SQLite and PostgreSQL).

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use futures_util::future::join_all;
use protocol::{RoomId, UserId};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use storage::ledger::{
    Board, DebitOutcome, GiftOrder, GiftOutcome, Ledger, MS_PER_DAY, Period, SagaState,
    SettleOutcome, day_of, now_ms,
};

use crate::support::ledger as fixture;
use fixture::{Fixture, postgres, scylla, sqlite};

conformance!(
    lifetime_spent_is_the_settled_spend,
    app_boards_equal_a_recount_of_settled_gifts,
    app_boards_break_ties_by_user_id_and_keep_the_limit,
    pruning_drops_old_day_and_week_rows_and_keeps_what_reads_use,
);

/// A robot's id in the fixture's namespace (robots' ids start with `bot:`).
fn robot(f: &Fixture, name: &str) -> UserId {
    UserId::from(format!("bot:{}-{name}", f.ns))
}

async fn lifetime_spent_is_the_settled_spend(f: Fixture) {
    let [a, b, h] = ["a", "b", "h"].map(|n| f.user(n));
    let bot = robot(&f, "r");
    for u in [&a, &b, &bot] {
        f.ledger.grant(u, 1_000, "seed").await.unwrap();
    }
    let room = f.room("r");
    let other = f.room("other");
    assert_eq!(f.ledger.lifetime_spent(&a).await.unwrap(), 0);
    let sent = |s: &UserId, req: &str, unit: i64, to: &[UserId], room: &RoomId| {
        let o = f.order(s, req, room, unit, to);
        let l = f.ledger.clone();
        async move { l.send_gift(&o, 1).await.unwrap() }
    };
    sent(&a, "1", 10, std::slice::from_ref(&h), &room).await;
    sent(&a, "2", 30, &[h.clone(), b.clone()], &other).await; // 60
    // A retry books nothing new.
    let again = sent(&a, "2", 30, &[h.clone(), b.clone()], &other).await;
    assert!(matches!(again, GiftOutcome::Duplicate { .. }), "{again:?}");
    // Refused for want of coins: not spent.
    sent(&a, "3", 5_000, std::slice::from_ref(&h), &room).await;
    // Made eight days ago: still lifetime spend.
    let mut old = f.order(&a, "old", &room, 100, std::slice::from_ref(&h));
    old.created_ms -= 8 * MS_PER_DAY;
    f.ledger.send_gift(&old, 1).await.unwrap();
    sent(&bot, "1", 7, std::slice::from_ref(&h), &room).await;
    assert_eq!(f.ledger.lifetime_spent(&a).await.unwrap(), 170);
    assert_eq!(f.ledger.lifetime_spent(&bot).await.unwrap(), 7);
    // Receiving is not spending.
    assert_eq!(f.ledger.lifetime_spent(&b).await.unwrap(), 0);
    assert_eq!(f.ledger.lifetime_spent(&h).await.unwrap(), 0);
    assert_eq!(f.ledger.balance(&a).await.unwrap(), 1_000 - 170);
}

async fn pruning_drops_old_day_and_week_rows_and_keeps_what_reads_use(f: Fixture) {
    let [a, h] = ["a", "h"].map(|n| f.user(n));
    let bot = robot(&f, "r");
    for u in [&a, &bot] {
        f.ledger.grant(u, 100_000, "seed").await.unwrap();
    }
    let room = f.room("r");
    // 400 days ago, far from the other gifts' weeks: a person's gift and a robot's.
    for (i, s) in [&a, &bot].into_iter().enumerate() {
        let mut old = f.order(s, &format!("old{i}"), &room, 10, std::slice::from_ref(&h));
        old.created_ms -= 400 * MS_PER_DAY;
        f.ledger.send_gift(&old, 1).await.unwrap();
    }
    let today = f.order(&a, "today", &room, 7, std::slice::from_ref(&h));
    f.ledger.send_gift(&today, 1).await.unwrap();
    let boards = |robots| {
        let l = f.ledger.clone();
        async move {
            let mut all = Vec::new();
            for board in [Board::Senders, Board::Receivers] {
                for period in [Period::Day, Period::Week, Period::All] {
                    all.push(l.app_leaderboard(board, period, 10, robots).await.unwrap());
                }
            }
            all
        }
    };
    let before = boards(true).await;
    // Buckets before 390 days ago (the old gifts' week began before that day's week): each old
    // gift's sender's day and week rows, and the receiver's two, which both gifts share.
    let cutoff = day_of(now_ms()) - 390;
    let gone = f.ledger.prune_app_boards(cutoff).await.unwrap();
    if f.url().starts_with("scylla") {
        assert_eq!(gone, 0, "Scylla keeps its rows");
        return;
    }
    assert_eq!(
        gone, 6,
        "the day and week rows of a, the robot and h, 400 days ago"
    );
    assert_eq!(f.ledger.prune_app_boards(cutoff).await.unwrap(), 0);
    // Today's, this week's and all-time boards read the same; lifetime spend holds.
    assert_eq!(boards(true).await, before);
    assert_eq!(f.ledger.lifetime_spent(&a).await.unwrap(), 17);
    assert_eq!(f.ledger.lifetime_spent(&bot).await.unwrap(), 10);
}

/// What an app board must hold, recounted from settled orders: best first, ties by user id.
fn recount(
    settled: &[GiftOrder],
    board: Board,
    period: Period,
    robots: bool,
    today: i64,
) -> Vec<(UserId, i64)> {
    let first = period.first_day(today);
    let mut totals: HashMap<UserId, i64> = HashMap::new();
    for o in settled.iter().filter(|o| day_of(o.created_ms) >= first) {
        match board {
            Board::Senders => *totals.entry(o.sender.clone()).or_default() += o.total(),
            Board::Receivers => {
                for r in &o.recipients {
                    *totals.entry(r.clone()).or_default() += o.per_recipient();
                }
            }
        }
    }
    let mut ranked: Vec<(UserId, i64)> = totals
        .into_iter()
        .filter(|(u, _)| robots || !u.is_robot())
        .collect();
    ranked.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    ranked
}

async fn app_boards_equal_a_recount_of_settled_gifts(f: Fixture) {
    let mut rng = StdRng::seed_from_u64(38);
    let mut senders: Vec<UserId> = (0..6).map(|i| f.user(&format!("s{i}"))).collect();
    senders.push(robot(&f, "s"));
    let mut hosts: Vec<UserId> = (0..4).map(|i| f.user(&format!("h{i}"))).collect();
    hosts.push(robot(&f, "h"));
    // Some senders receive too.
    hosts.push(senders[0].clone());
    for s in &senders {
        let coins = rng.random_range(500..3_000);
        f.ledger.grant(s, coins, "seed").await.unwrap();
    }
    let rooms: Vec<RoomId> = (0..4).map(|i| f.room(&format!("r{i}"))).collect();
    let days_ago = [0, 0, 0, 1, 2, 3, 6, 8, 15];
    let mut orders = Vec::new();
    for i in 0..120 {
        let s = &senders[rng.random_range(0..senders.len())];
        let n = rng.random_range(1..=3);
        let to: Vec<UserId> = hosts
            .choose_multiple(&mut rng, n)
            .filter(|h| *h != s)
            .cloned()
            .collect();
        if to.is_empty() {
            continue;
        }
        let room = &rooms[rng.random_range(0..rooms.len())];
        let unit = [1, 5, 10, 50, 100][rng.random_range(0..5)];
        let mut o = f.order(s, &format!("g{i}"), room, unit, &to);
        o.count = rng.random_range(1..=3);
        o.created_ms -= days_ago[rng.random_range(0..days_ago.len())] * MS_PER_DAY;
        orders.push(o);
    }
    // In concurrent waves (batched together on PostgreSQL), every tenth gift step by step
    // (the saga's own settlement), and a retry of each wave's first gift.
    for wave in orders.chunks(15) {
        let sends = wave.iter().enumerate().map(|(i, o)| {
            let l = f.ledger.clone();
            async move {
                if i % 10 == 9 {
                    l.begin(o, 1).await.unwrap();
                    if let DebitOutcome::Debited { .. } = l.debit(o, 1).await.unwrap() {
                        let settled = l.settle(o, 1).await.unwrap();
                        assert!(matches!(settled, SettleOutcome::Settled { .. }));
                    }
                } else {
                    l.send_gift(o, 1).await.unwrap();
                }
            }
        });
        join_all(sends).await;
        f.ledger.send_gift(&wave[0], 1).await.unwrap();
    }
    // The recount: the orders the ledger holds as settled.
    let mut settled = Vec::new();
    for o in &orders {
        if let Some(rec) = f.ledger.saga(o.gift_id).await.unwrap()
            && rec.state == SagaState::Settled
        {
            settled.push(rec.order);
        }
    }
    assert!(settled.len() > 20, "{} settled", settled.len());
    assert!(settled.len() < orders.len(), "some gifts must be refused");
    let today = day_of(now_ms());
    for board in [Board::Senders, Board::Receivers] {
        for period in [Period::Day, Period::Week, Period::All] {
            for robots in [false, true] {
                let got = f
                    .ledger
                    .app_leaderboard(board, period, 100, robots)
                    .await
                    .unwrap();
                let want = recount(&settled, board, period, robots, today);
                assert!(!want.is_empty(), "{board:?} {period:?}");
                assert_eq!(got, want, "{board:?} {period:?} robots: {robots}");
            }
        }
    }
    for s in &senders {
        let spent: i64 = settled
            .iter()
            .filter(|o| &o.sender == s)
            .map(GiftOrder::total)
            .sum();
        assert_eq!(f.ledger.lifetime_spent(s).await.unwrap(), spent, "{s}");
    }
}

async fn app_boards_break_ties_by_user_id_and_keep_the_limit(f: Fixture) {
    let [c, a, b, h] = ["c", "a", "b", "h"].map(|n| f.user(n));
    let bot = robot(&f, "x");
    let room = f.room("r");
    for (i, u) in [&c, &a, &b, &bot].into_iter().enumerate() {
        f.ledger.grant(u, 1_000, "seed").await.unwrap();
        let o = f.order(u, "1", &room, 30, std::slice::from_ref(&h));
        f.ledger.send_gift(&o, 1).await.unwrap();
        // The robot outspends everyone: it tops the board only when robots are asked for.
        if i == 3 {
            let o = f.order(u, "2", &room, 50, std::slice::from_ref(&h));
            f.ledger.send_gift(&o, 1).await.unwrap();
        }
    }
    let board = |limit, robots| {
        f.ledger
            .app_leaderboard(Board::Senders, Period::Day, limit, robots)
    };
    assert_eq!(
        board(10, false).await.unwrap(),
        vec![(a.clone(), 30), (b.clone(), 30), (c.clone(), 30)]
    );
    assert_eq!(
        board(2, false).await.unwrap(),
        vec![(a.clone(), 30), (b.clone(), 30)]
    );
    assert_eq!(
        board(2, true).await.unwrap(),
        vec![(bot.clone(), 80), (a.clone(), 30)]
    );
    assert!(board(0, true).await.unwrap().is_empty());
    let receivers = f
        .ledger
        .app_leaderboard(Board::Receivers, Period::All, 10, false)
        .await
        .unwrap();
    assert_eq!(receivers, vec![(h.clone(), 170)]);
}

/// Gifts booked on `ledger` before the app boards existed: (sender, recipient, days ago, unit).
const EARLIER: [(&str, &str, i64, i64); 5] = [
    ("s", "h", 0, 30),
    ("t", "h", 0, 10),
    ("s", "bot:h", 0, 5),
    ("t", "h", 8, 100),
    ("bot:s", "h", 1, 7),
];

async fn book_earlier(ledger: &Ledger) {
    for (i, (sender, to, days_ago, unit)) in EARLIER.into_iter().enumerate() {
        let s = UserId::from(sender);
        ledger.grant(&s, 1_000, "seed").await.unwrap();
        let mut o = GiftOrder {
            gift_id: storage::ledger::gift_id(&s, &format!("e{i}")),
            sender: s,
            room: RoomId::from(format!("room{}", i % 2)),
            gift: "rose".into(),
            count: 1,
            unit_price: unit,
            recipients: vec![UserId::from(to)],
            share_bp: 5_000,
            lucky: None,
            created_ms: now_ms(),
            request: 0,
        };
        o.created_ms -= days_ago * MS_PER_DAY;
        assert!(matches!(
            ledger.send_gift(&o, 1).await.unwrap(),
            GiftOutcome::Settled { .. }
        ));
    }
}

/// Every app board and the lifetime spend of `s`, `t` and `bot:s`.
async fn app_state(ledger: &Ledger) -> Vec<Vec<(UserId, i64)>> {
    let mut out = Vec::new();
    for board in [Board::Senders, Board::Receivers] {
        for period in [Period::Day, Period::Week, Period::All] {
            out.push(
                ledger
                    .app_leaderboard(board, period, 10, true)
                    .await
                    .unwrap(),
            );
        }
    }
    let mut spent = Vec::new();
    for u in ["s", "t", "bot:s"] {
        let u = UserId::from(u);
        spent.push((u.clone(), ledger.lifetime_spent(&u).await.unwrap()));
    }
    out.push(spent);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_migration_fills_the_app_boards_from_earlier_gifts() {
    let f = sqlite().await;
    book_earlier(&f.ledger).await;
    let before = app_state(&f.ledger).await;
    let spent = |u: &str, coins| (UserId::from(u), coins);
    assert_eq!(
        before[6],
        vec![spent("s", 35), spent("t", 110), spent("bot:s", 7)]
    );
    let path = f.dir().join("ledger.db");
    {
        // The ledger as the version before the app boards left it.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("DROP TABLE app_rank; PRAGMA user_version = 2;")
            .unwrap();
    }
    let reopened = f.second_handle().await;
    assert_eq!(app_state(&reopened).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_migration_fills_the_app_boards_from_earlier_gifts() {
    let f = postgres().await;
    book_earlier(&f.ledger).await;
    let before = app_state(&f.ledger).await;
    let (client, conn) = tokio_postgres::connect(f.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    client
        // (Later versions' tables go too: migrations apply after the highest version found.)
        .batch_execute(
            "DROP TABLE app_rank; DROP TABLE IF EXISTS guard_purchase, guard;
             DROP TRIGGER IF EXISTS gift_settlement_older_node ON gift_settlement;
             DROP FUNCTION IF EXISTS chorus_app_rank_older_node();
             ALTER TABLE gift_settlement DROP COLUMN IF EXISTS app_ranked;
             DELETE FROM chorus_ledger_schema WHERE version >= 6;",
        )
        .await
        .unwrap();
    drop(client);
    let _ = conn.await;
    let reopened = f.second_handle().await;
    assert_eq!(app_state(&reopened).await, before);
}
