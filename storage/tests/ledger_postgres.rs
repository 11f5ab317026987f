//! What only the PostgreSQL engine has to show, against a real throwaway server: the schema is
//! created once however many nodes start at once, the database's own constraints refuse an
//! overdraw and a double claim, a stale owner's gifts racing a new fence all commit before it,
//! a lost server answers `Unavailable` while a retry by the gift id, once it is back, books
//! the gift exactly once, gifts in flight together share a commit without sharing a fate, an
//! account locked elsewhere holds up only its own gifts, gifts settled by nodes older than the
//! app boards (a rolling upgrade) count on them once, and board ties read in the user ids'
//! byte order under any collation.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use futures_util::future::join_all;

use kit::postgres::PgServer;
use protocol::UserId;
use storage::StorageError;
use storage::ledger::{
    Board, GiftOrder, GiftOutcome, GiftResult, Ledger, Period, day_of, gift_id, now_ms, week_start,
};
use tokio::time::Instant;
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

/// A plain driver connection, to look at (or tamper with) the tables directly.
async fn sql(server: &PgServer) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&server.url("postgres"), NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

async fn open(server: &PgServer) -> Ledger {
    Ledger::open(&server.url("postgres"), &std::env::temp_dir())
        .await
        .unwrap()
}

fn order(sender: &str, req: &str, unit: i64) -> GiftOrder {
    let sender = UserId::from(sender);
    GiftOrder {
        gift_id: gift_id(&sender, req),
        sender,
        room: "room".into(),
        gift: "rose".into(),
        count: 1,
        unit_price: unit,
        recipients: vec![UserId::from("host")],
        share_bp: 5_000,
        lucky: None,
        created_ms: now_ms(),
        request: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_starting_at_once_create_the_schema_once_and_a_newer_schema_is_refused() {
    let server = PgServer::start().await.unwrap();
    let url = server.url("postgres");
    let dir = std::env::temp_dir();
    let opens = (0..4).map(|_| Ledger::open(&url, &dir));
    for ledger in futures_util::future::join_all(opens).await {
        ledger.unwrap();
    }
    let db = sql(&server).await;
    let versions: Vec<i32> = db
        .query(
            "SELECT version FROM chorus_ledger_schema ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // Versions 1 (gifts) to 8 (older nodes' gifts on the app boards), each applied once.
    assert_eq!(versions, (1..=8).collect::<Vec<i32>>(), "each version once");
    // Opening again changes nothing.
    open(&server).await;
    // A database a newer version migrated is not written by this one.
    db.execute(
        "INSERT INTO chorus_ledger_schema (version, applied_ms) VALUES (99, 0)",
        &[],
    )
    .await
    .unwrap();
    let err = Ledger::open(&url, &dir).await.unwrap_err();
    assert!(err.to_string().contains("newer version"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_itself_refuses_an_overdraw_and_a_second_claim_under_a_gift_id() {
    let server = PgServer::start().await.unwrap();
    let ledger = open(&server).await;
    ledger.grant(&"s".into(), 10, "seed").await.unwrap();
    let o = order("s", "q1", 4);
    assert!(matches!(
        ledger.send_gift(&o, 1).await.unwrap(),
        GiftOutcome::Settled { balance: 6, .. }
    ));
    let db = sql(&server).await;
    // A statement that would overdraw, whoever sends it, fails the CHECK.
    let err = db
        .execute(
            "UPDATE account SET coins = coins - 7 WHERE user_id = 's'",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::CHECK_VIOLATION), "{err}");
    // A void claim under a debited gift's id fails the key: never both debited and voided.
    let err = db
        .execute(
            "INSERT INTO entry (user_id, entry_id, kind, amount, created_ms)
             VALUES ('s', $1, 'VOID', 4, 0)",
            &[&o.gift_id],
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::UNIQUE_VIOLATION), "{err}");
    // A second settlement of the gift fails its key too.
    let err = db
        .execute(
            "INSERT INTO gift_settlement (gift_id, room, platform, lucky) VALUES ($1, 'room', 2, 0)",
            &[&o.gift_id],
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::UNIQUE_VIOLATION), "{err}");
    assert_eq!(ledger.balance(&"s".into()).await.unwrap(), 6);
    assert!(ledger.audit_totals().await.unwrap().is_conserved());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_server_answers_unavailable_and_the_retry_by_id_books_the_gift_once() {
    let mut server = PgServer::start().await.unwrap();
    let ledger = open(&server).await;
    ledger.grant(&"s".into(), 100, "seed").await.unwrap();
    let o = order("s", "q1", 30);
    // Debited, then the primary goes away before the settle.
    ledger.begin(&o, 1).await.unwrap();
    ledger.debit(&o, 1).await.unwrap();
    server.stop();
    let err = ledger.send_gift(&o, 1).await.unwrap_err();
    assert!(
        matches!(err, StorageError::Unavailable { .. }) && err.is_retryable(),
        "{err:?}"
    );
    assert!(matches!(
        ledger.check_writable().await,
        Err(StorageError::Unavailable { .. })
    ));
    // Back (same data, as after a failover to a synchronous standby): the pool reconnects,
    // and the retry with the same order finishes the saga from where it stood.
    server.restart().await.unwrap();
    let again = retry_until_served(&ledger, &o).await;
    assert_eq!(
        again.result(),
        GiftResult::Settled {
            order_id: o.gift_id,
            balance: 70
        }
    );
    assert!(matches!(again, GiftOutcome::Duplicate { .. }), "{again:?}");
    assert_eq!(ledger.balance(&"s".into()).await.unwrap(), 70);
    assert_eq!(ledger.earnings(&"host".into()).await.unwrap(), 15);
    assert!(ledger.audit_totals().await.unwrap().is_conserved());
    ledger.check_writable().await.unwrap();
}

/// Sends `o` until the ledger answers other than `Unavailable` (pooled connections broken by
/// the restart are dropped one by one), within a bounded number of tries.
async fn retry_until_served(ledger: &Ledger, o: &GiftOrder) -> GiftOutcome {
    for _ in 0..32 {
        match ledger.send_gift(o, 1).await {
            Err(StorageError::Unavailable { .. }) => continue,
            other => return other.unwrap(),
        }
    }
    panic!("the ledger stayed unavailable after the server came back");
}

/// A stale owner's gifts racing the new owner's fence: the install waits for the steps that
/// read the old fence, and every step after it is refused inside its own transaction. So
/// every saga the old fence wrote committed before the install did (commit timestamps), and
/// every gift either settled or was fenced without a trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owners_gifts_racing_a_new_fence_all_commit_before_it() {
    const GIFTS: usize = 200;
    let server = PgServer::start_with(&[("track_commit_timestamp", "on")])
        .await
        .unwrap();
    let old = open(&server).await;
    let new = open(&server).await;
    let room = protocol::RoomId::from("room");
    old.grant(&"s".into(), 1_000_000, "seed").await.unwrap();
    old.install_fence(&room, 1, "n1/a").await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..GIFTS {
        let (l, o) = (old.clone(), order("s", &format!("q{i}"), 10));
        tasks.push(tokio::spawn(async move { (l.send_gift(&o, 1).await, o) }));
    }
    // Install once some gifts have settled, while the rest are in flight.
    let deadline = Instant::now() + Duration::from_secs(30);
    while old.balance(&"s".into()).await.unwrap() == 1_000_000 {
        assert!(Instant::now() < deadline, "no gift settled");
        tokio::task::yield_now().await;
    }
    new.install_fence(&room, 2, "n2/b").await.unwrap();
    // The stale owner keeps sending after the install: all refused.
    for i in GIFTS..GIFTS + 20 {
        let (l, o) = (old.clone(), order("s", &format!("q{i}"), 10));
        tasks.push(tokio::spawn(async move { (l.send_gift(&o, 1).await, o) }));
    }
    let (mut settled, mut fenced) = (0, 0);
    for t in tasks {
        let (out, o) = t.await.unwrap();
        match out {
            Ok(GiftOutcome::Settled { .. }) => settled += 1,
            Err(StorageError::Fenced { token: 1 }) => {
                fenced += 1;
                assert!(old.saga(o.gift_id).await.unwrap().is_none(), "no trace");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(settled + fenced, GIFTS + 20);
    assert!(
        settled > 0 && fenced >= 20,
        "{settled} settled, {fenced} fenced"
    );
    let db = sql(&server).await;
    let late: i64 = db
        .query_one(
            "SELECT COUNT(*) FROM gift_saga s, room_owner r
             WHERE s.fence = 1 AND r.room = 'room'
               AND pg_xact_commit_timestamp(s.xmin) > pg_xact_commit_timestamp(r.xmin)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        late, 0,
        "a saga of the old fence committed after the new fence"
    );
    let count: i64 = db
        .query_one("SELECT COUNT(*) FROM gift_saga", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, settled as i64);
    assert_eq!(
        old.balance(&"s".into()).await.unwrap(),
        1_000_000 - 10 * settled as i64
    );
    assert!(old.audit_totals().await.unwrap().is_conserved());
    eprintln!("{settled} settled before the new fence, {fenced} fenced");
}

/// New gifts in flight together share transactions (one commit for a batch), and each gets
/// its own answer whatever the others in its batch get: settled, refused for its balance,
/// fenced, or a retry of a gift booked before. Nothing of a refused gift is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gifts_in_flight_together_share_a_commit_and_each_gets_its_own_answer() {
    const RICH: usize = 50;
    const EACH: usize = 4;
    let server = PgServer::start().await.unwrap();
    let ledger = open(&server).await;
    let room = protocol::RoomId::from("room");
    ledger.install_fence(&room, 5, "n1/a").await.unwrap();
    for i in 0..RICH {
        ledger
            .grant(&format!("r{i}").as_str().into(), 100, "seed")
            .await
            .unwrap();
    }
    // `poor` covers one of its two gifts; `broke` none; `early` was booked before.
    ledger.grant(&"poor".into(), 15, "seed").await.unwrap();
    ledger.grant(&"early".into(), 50, "seed").await.unwrap();
    let early = order("early", "e", 10);
    ledger.send_gift(&early, 5).await.unwrap();
    let (batches_before, _) = batches(&ledger);
    let mut sends: Vec<(GiftOrder, u64)> = Vec::new();
    for n in 0..EACH {
        for i in 0..RICH {
            sends.push((order(&format!("r{i}"), &format!("q{n}"), 10), 5));
        }
    }
    sends.push((order("poor", "p1", 10), 5));
    sends.push((order("poor", "p2", 10), 5));
    sends.push((order("broke", "b1", 10), 5));
    sends.push((order("stale", "s1", 10), 4));
    sends.push((early.clone(), 5));
    // The same new request twice at once: one books it, the other is its retry.
    let twice = order("r0", "twice", 10);
    sends.push((twice.clone(), 5));
    sends.push((twice.clone(), 5));
    let tasks: Vec<_> = sends
        .into_iter()
        .map(|(o, fence)| {
            let l = ledger.clone();
            tokio::spawn(async move { (l.send_gift(&o, fence).await, o) })
        })
        .collect();
    let (mut settled, mut poor_settled, mut twice_first, mut twice_retry) = (0, 0, 0, 0);
    for t in tasks {
        let (out, o) = t.await.unwrap();
        match (o.sender.as_str(), out) {
            ("poor", Ok(GiftOutcome::Settled { balance: 5, .. })) => poor_settled += 1,
            ("poor", Ok(GiftOutcome::InsufficientFunds { balance: 5 })) => {}
            ("broke", Ok(GiftOutcome::InsufficientFunds { balance: 0 })) => {}
            ("stale", Err(StorageError::Fenced { token: 4 })) => {
                assert!(ledger.saga(o.gift_id).await.unwrap().is_none(), "no trace");
            }
            ("early", Ok(GiftOutcome::Duplicate { first })) => {
                assert_eq!(
                    first,
                    GiftResult::Settled {
                        order_id: early.gift_id,
                        balance: 40
                    }
                );
            }
            (_, Ok(GiftOutcome::Settled { .. })) if o.gift_id == twice.gift_id => twice_first += 1,
            (_, Ok(GiftOutcome::Duplicate { .. })) if o.gift_id == twice.gift_id => {
                twice_retry += 1;
            }
            (_, Ok(GiftOutcome::Settled { .. })) => settled += 1,
            (who, other) => panic!("{who}: unexpected {other:?}"),
        }
    }
    assert_eq!(settled, RICH * EACH);
    assert_eq!((poor_settled, twice_first, twice_retry), (1, 1, 1));
    assert_eq!(ledger.balance(&"r0".into()).await.unwrap(), 100 - 10 * 5);
    assert_eq!(ledger.balance(&"r1".into()).await.unwrap(), 100 - 10 * 4);
    assert_eq!(ledger.balance(&"poor".into()).await.unwrap(), 5);
    assert_eq!(ledger.balance(&"early".into()).await.unwrap(), 40);
    // 200 + 1 (twice) + 1 (poor) + 1 (early) gifts of 10 at 50 %: 5 each to the host.
    let booked = (RICH * EACH + 3) as i64;
    assert_eq!(ledger.earnings(&"host".into()).await.unwrap(), 5 * booked);
    let totals = ledger.audit_totals().await.unwrap();
    assert!(totals.is_conserved(), "{totals:?}");
    assert_eq!(totals.platform_revenue, 5 * booked);
    let board = ledger
        .leaderboard(
            &room,
            storage::ledger::Board::Receivers,
            storage::ledger::Period::All,
            1,
        )
        .await
        .unwrap();
    assert_eq!(board, vec![("host".into(), 10 * booked)]);
    // Far fewer commits than gifts: the gifts queued while a batch ran shared the next one.
    let (batches_after, _) = batches(&ledger);
    let used = batches_after - batches_before;
    let gifts = (RICH * EACH + 7) as u64;
    assert!(used * 2 <= gifts, "{used} batches for {gifts} gifts");
}

fn batches(ledger: &Ledger) -> (u64, u64) {
    match ledger {
        Ledger::Postgres(l) => l.gift_batches(),
        other => panic!("not PostgreSQL: {other:?}"),
    }
}

/// A sender's account row held by another session (a slow transaction, a node cut off in the
/// middle of one): that sender's gift answers `Unavailable` at the server's lock bound, before
/// the node's own 10 s, and no pooled connection is left waiting behind the lock: the next
/// gifts, more than the pool holds, settle at once, and the held one by its id once the lock
/// goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_elsewhere_answers_unavailable_and_leaves_no_connection_stuck() {
    let server = PgServer::start().await.unwrap();
    let ledger = open(&server).await;
    for u in ["s", "t"] {
        ledger
            .grant(&u.into(), 100, &format!("seed-{u}"))
            .await
            .unwrap();
    }
    let mut raw = sql(&server).await;
    let holder = raw.transaction().await.unwrap();
    holder
        .execute("SELECT 1 FROM account WHERE user_id = 's' FOR UPDATE", &[])
        .await
        .unwrap();
    let held = order("s", "held", 30);
    let started = Instant::now();
    let err = ledger.send_gift(&held, 1).await.unwrap_err();
    assert!(matches!(err, StorageError::Unavailable { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "answered after {:?}",
        started.elapsed()
    );
    // Twenty gifts one after another (the pool holds 16 connections): none waits behind the
    // lock (a connection left waiting there would cost one of them the node's 10 s).
    let started = Instant::now();
    for i in 0..20 {
        let o = order("t", &format!("t{i}"), 1);
        let out = ledger.send_gift(&o, 1).await.unwrap();
        assert!(
            matches!(out.result(), GiftResult::Settled { .. }),
            "{out:?}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "20 gifts took {:?}",
        started.elapsed()
    );
    holder.rollback().await.unwrap();
    let again = retry_until_served(&ledger, &held).await;
    assert_eq!(
        again.result(),
        GiftResult::Settled {
            order_id: held.gift_id,
            balance: 70
        }
    );
    assert!(ledger.audit_totals().await.unwrap().is_conserved());
}

/// A sender's account held by another session does not hold up the other senders' gifts
/// that share its batch: the batch gives its locks up after a short wait and each gift is
/// booked on its own, so the others settle while the lock is still held, and the held
/// sender's gift settles, once, when it goes. (Before, the whole batch waited for the
/// server's lock bound and then failed every gift in it.)
#[tokio::test]
async fn a_held_account_does_not_fail_the_other_gifts_of_its_batch() {
    const OTHERS: usize = 12;
    let server = PgServer::start().await.unwrap();
    let ledger = open(&server).await;
    let senders: Vec<String> = (0..OTHERS).map(|i| format!("o{i}")).collect();
    for u in senders.iter().map(String::as_str).chain(["held"]) {
        ledger.grant(&u.into(), 100, "seed").await.unwrap();
    }
    let mut raw = sql(&server).await;
    let holder = raw.transaction().await.unwrap();
    holder
        .execute(
            "SELECT 1 FROM account WHERE user_id = 'held' FOR UPDATE",
            &[],
        )
        .await
        .unwrap();
    let held = order("held", "h", 30);
    let others: Vec<GiftOrder> = senders.iter().map(|u| order(u, "x", 10)).collect();
    // One thread: every send below queues before the batcher runs, so they share one batch.
    let (batches_before, _) = batches(&ledger);
    let held_send = ledger.send_gift(&held, 1);
    let others_then_release = async {
        let outs = join_all(others.iter().map(|o| ledger.send_gift(o, 1))).await;
        // Only now does the lock go: the others must not have needed it.
        holder.rollback().await.unwrap();
        outs
    };
    let (held_out, outs) = tokio::join!(held_send, others_then_release);
    for (o, out) in others.iter().zip(outs) {
        assert_eq!(
            out.unwrap().result(),
            GiftResult::Settled {
                order_id: o.gift_id,
                balance: 90
            },
            "{}",
            o.sender
        );
    }
    assert_eq!(
        held_out.unwrap().result(),
        GiftResult::Settled {
            order_id: held.gift_id,
            balance: 70
        }
    );
    // They did share a batch, which gave up its locks: no batch committed them.
    assert_eq!(batches(&ledger).0, batches_before);
    assert_eq!(ledger.balance(&"held".into()).await.unwrap(), 70);
    let totals = ledger.audit_totals().await.unwrap();
    assert!(totals.is_conserved(), "{totals:?}");
    assert_eq!(totals.platform_revenue, (5 * OTHERS + 15) as i64);
}

/// The batch's short lock wait is for its first round trip only: a row its second round trip
/// writes (here the host's app-wide leaderboard rows), held elsewhere for longer than that
/// wait but within the server's bound, delays the batch and fails nothing.
#[tokio::test]
async fn the_short_lock_wait_ends_with_the_batchs_first_round_trip() {
    let server = PgServer::start().await.unwrap();
    let ledger = open(&server).await;
    ledger.grant(&"s".into(), 100, "seed").await.unwrap();
    ledger.send_gift(&order("s", "first", 10), 1).await.unwrap();
    let mut raw = sql(&server).await;
    let holder = raw.transaction().await.unwrap();
    let held = holder
        .execute(
            "SELECT 1 FROM app_rank WHERE user_id = 'host' FOR UPDATE",
            &[],
        )
        .await
        .unwrap();
    assert!(held > 0, "the first gift made the host's rows");
    let second = order("s", "second", 10);
    let l = ledger.clone();
    let o = second.clone();
    let send = tokio::spawn(async move { l.send_gift(&o, 1).await });
    // Once the batch waits for the rows, hold them past its 500 ms first-trip bound.
    let watcher = sql(&server).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let waiting: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the batch never waited for the rows"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    holder.rollback().await.unwrap();
    let out = send.await.unwrap().unwrap();
    assert_eq!(
        out.result(),
        GiftResult::Settled {
            order_id: second.gift_id,
            balance: 80
        }
    );
}

/// A deadlock the server reports in a batch's second round trip (here a trigger raises one,
/// once, on the host's earnings) is retried like any other: the gift settles, once. The
/// statements after the failed one answer only "transaction aborted", so the batch must read
/// its answers in the order it sent them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_in_a_batchs_second_round_trip_is_retried_and_books_once() {
    let server = PgServer::start().await.unwrap();
    let ledger = open(&server).await;
    ledger.grant(&"s".into(), 100, "seed").await.unwrap();
    sql(&server)
        .await
        .batch_execute(
            "CREATE SEQUENCE boom_once;
             CREATE FUNCTION boom() RETURNS trigger AS $$
             BEGIN
               -- A sequence is not rolled back with the transaction: one failure only.
               IF nextval('boom_once') = 1 THEN
                 RAISE EXCEPTION 'test deadlock' USING ERRCODE = '40P01';
               END IF;
               RETURN NEW;
             END $$ LANGUAGE plpgsql;
             CREATE TRIGGER boom BEFORE INSERT OR UPDATE ON earning
               FOR EACH ROW EXECUTE FUNCTION boom();",
        )
        .await
        .unwrap();
    let o = order("s", "q1", 30);
    let out = ledger.send_gift(&o, 1).await.unwrap();
    assert_eq!(
        out.result(),
        GiftResult::Settled {
            order_id: o.gift_id,
            balance: 70
        }
    );
    let fired: i64 = sql(&server)
        .await
        .query_one("SELECT last_value FROM boom_once", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        fired >= 2,
        "the trigger ran {fired} times: no retry happened"
    );
    assert_eq!(ledger.earnings(&"host".into()).await.unwrap(), 15);
    assert!(ledger.audit_totals().await.unwrap().is_conserved());
}

/// Writes `o` as settled, as a node built before the app boards (schema 6) settles a gift:
/// its saga and its settlement row, and no `app_rank` row. With `ranked`, also the app-board
/// rows, as a node of schema 6 or 7 adds them in the same transaction.
async fn settle_as_an_older_node(
    tx: &tokio_postgres::Transaction<'_>,
    o: &GiftOrder,
    ranked: bool,
) {
    let json = serde_json::json!({
        "sender": o.sender, "room": o.room, "gift": &*o.gift, "count": o.count,
        "unit_price": o.unit_price, "recipients": o.recipients, "share_bp": o.share_bp,
        "lucky": null, "created_ms": o.created_ms,
    })
    .to_string();
    tx.execute(
        "INSERT INTO gift_saga (gift_id, room, sender, order_json, state, fence, updated_ms)
         VALUES ($1, $2, $3, $4, 'SETTLED', 1, $5)",
        &[
            &o.gift_id,
            &o.room.as_str(),
            &o.sender.as_str(),
            &json,
            &o.created_ms,
        ],
    )
    .await
    .unwrap();
    if ranked {
        let day = day_of(o.created_ms);
        let robot = |u: &UserId| if u.is_robot() { 2i16 } else { 0 };
        let mut rows = vec![(robot(&o.sender), o.sender.as_str(), o.total())];
        for r in &o.recipients {
            rows.push((robot(r) + 1, r.as_str(), o.per_recipient()));
        }
        for (board, user, total) in rows {
            for (span, start) in [(0i16, day), (1, week_start(day)), (2, 0)] {
                tx.execute(
                    "INSERT INTO app_rank (board, span, start, user_id, total)
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (board, span, start, user_id)
                     DO UPDATE SET total = app_rank.total + EXCLUDED.total",
                    &[&board, &span, &start, &user, &total],
                )
                .await
                .unwrap();
            }
        }
    }
    tx.execute(
        "INSERT INTO gift_settlement (gift_id, room, platform, lucky) VALUES ($1, $2, $3, 0)",
        &[&o.gift_id, &o.room.as_str(), &o.platform_share()],
    )
    .await
    .unwrap();
}

/// A rolling upgrade: nodes built before the app boards keep settling gifts after a newer node
/// migrated the schema. Their gifts count on the app boards and in the lifetime spend like
/// every other, once: a node that keeps the boards itself (schema 6 or 7, whose settlements
/// carry no mark either) and this build are not counted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gifts_settled_by_nodes_older_than_the_app_boards_count_on_them_once() {
    let server = PgServer::start().await.unwrap();
    let ledger = open(&server).await;
    let mut db = sql(&server).await;
    // An older node's batch: two gifts of one sender and a robot's, in one transaction.
    let tx = db.transaction().await.unwrap();
    for o in [
        order("alice", "a1", 30),
        order("alice", "a2", 20),
        order("bot:r", "b1", 5),
    ] {
        settle_as_an_older_node(&tx, &o, false).await;
    }
    tx.commit().await.unwrap();
    // A node of schema 6 or 7 adds its gift's rows itself.
    let tx = db.transaction().await.unwrap();
    settle_as_an_older_node(&tx, &order("carol", "c1", 7), true).await;
    tx.commit().await.unwrap();
    // This build.
    ledger.install_fence(&"room".into(), 1, "n1").await.unwrap();
    ledger.grant(&"dave".into(), 100, "k").await.unwrap();
    let booked = ledger.send_gift(&order("dave", "d1", 11), 1).await.unwrap();
    assert!(matches!(booked, GiftOutcome::Settled { .. }), "{booked:?}");
    for (user, spent) in [("alice", 50), ("bot:r", 5), ("carol", 7), ("dave", 11)] {
        assert_eq!(
            ledger.lifetime_spent(&user.into()).await.unwrap(),
            spent,
            "{user}"
        );
    }
    for period in [Period::Day, Period::Week, Period::All] {
        let board = ledger
            .app_leaderboard(Board::Receivers, period, 10, true)
            .await
            .unwrap();
        assert_eq!(board, vec![(UserId::from("host"), 73)], "{period:?}");
    }
}

/// Boards break ties by user id as SQLite and Scylla do, byte by byte, whatever collation the
/// database was made with: under a language's collation (ICU `en-US`, as many servers are
/// made) "alice" would come before "Bob", and a board would read differently on each engine.
#[tokio::test]
async fn board_ties_are_ordered_by_the_user_ids_bytes_under_any_collation() {
    let server = PgServer::start().await.unwrap();
    sql(&server)
        .await
        .batch_execute(
            "CREATE DATABASE icu TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C.UTF-8'
               LOCALE_PROVIDER icu ICU_LOCALE 'en-US'",
        )
        .await
        .unwrap();
    let ledger = Ledger::open(&server.url("icu"), &std::env::temp_dir())
        .await
        .unwrap();
    ledger.install_fence(&"room".into(), 1, "n1").await.unwrap();
    for user in ["alice", "Bob"] {
        ledger.grant(&user.into(), 100, "k").await.unwrap();
        let booked = ledger.send_gift(&order(user, "g", 10), 1).await.unwrap();
        assert!(matches!(booked, GiftOutcome::Settled { .. }), "{booked:?}");
    }
    let tied = vec![(UserId::from("Bob"), 10), (UserId::from("alice"), 10)];
    let room = ledger
        .leaderboard(&"room".into(), Board::Senders, Period::Day, 10)
        .await
        .unwrap();
    assert_eq!(room, tied, "room board");
    let app = ledger
        .app_leaderboard(Board::Senders, Period::Day, 10, false)
        .await
        .unwrap();
    assert_eq!(app, tied, "app board");
}
