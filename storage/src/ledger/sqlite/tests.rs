//! Unit tests of the SQLite engine: connection settings, group commit, the WAL's syncer and
//! checkpoints, the saga row as the gift's claim, and the migrations.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::super::day_of;
use super::rows::{add_coins, coins, house, set_coins};
use super::schema::MIGRATIONS;
use super::tx::PLATFORM_REVENUE;
use super::wal::WalAction;
use super::writer::{pace_wait, run_group};
use super::*;

#[test]
fn connections_are_durable_wal() {
    let dir = tempfile::tempdir().unwrap();
    let conn = open_connection(&dir.path().join("l.db"), Syncing::Full).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    let sync: i64 = conn
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .unwrap();
    let temp: i64 = conn
        .query_row("PRAGMA temp_store", [], |r| r.get(0))
        .unwrap();
    let mmap: i64 = conn
        .query_row("PRAGMA mmap_size", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    assert_eq!(sync, 2, "synchronous=FULL");
    // The writer's commits are synced by the syncer thread; SQLite syncs its checkpoints.
    let writer = open_connection(&dir.path().join("l.db"), Syncing::CommitsBySyncer).unwrap();
    let sync: i64 = writer
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .unwrap();
    assert_eq!(sync, 1, "synchronous=NORMAL");
    assert_eq!(temp, 2, "temp_store=MEMORY");
    assert_eq!(
        mmap, 0,
        "no memory map: it costs a WAL lookup per cached page"
    );
}

#[test]
fn the_wal_is_checkpointed_off_the_writer_and_bounded() {
    assert_eq!(WAL_BOUNDS.action(10, 0), WalAction::Nothing);
    assert_eq!(
        WAL_BOUNDS.action(CHECKPOINT_AFTER_FRAMES, 0),
        WalAction::WakeCheckpointer
    );
    // Copied frames do not count again.
    assert_eq!(
        WAL_BOUNDS.action(CHECKPOINT_AFTER_FRAMES + 5, 10),
        WalAction::Nothing
    );
    // The WAL restarted (fewer frames than were copied): count from its beginning.
    assert_eq!(
        WAL_BOUNDS.action(CHECKPOINT_AFTER_FRAMES, 50_000),
        WalAction::WakeCheckpointer
    );
    assert_eq!(
        WAL_BOUNDS.action(WAL_LIMIT_FRAMES, WAL_LIMIT_FRAMES - 1),
        WalAction::RestartHere
    );
    // Near the limit every commit with frames left to copy wakes it, so that it catches
    // the WAL's end before the writer would have to stop for it.
    assert_eq!(
        WAL_BOUNDS.action(WAL_DRAIN_FROM_FRAMES - 1, WAL_DRAIN_FROM_FRAMES - 2),
        WalAction::Nothing
    );
    assert_eq!(
        WAL_BOUNDS.action(WAL_DRAIN_FROM_FRAMES, WAL_DRAIN_FROM_FRAMES - 1),
        WalAction::WakeCheckpointer
    );
    assert_eq!(
        WAL_BOUNDS.action(WAL_DRAIN_FROM_FRAMES + 5, WAL_DRAIN_FROM_FRAMES + 5),
        WalAction::Nothing
    );
}

#[test]
fn only_a_crowded_writer_paces_its_commits() {
    let ms = Duration::from_millis;
    // A lone caller, or a light load, starts its group at once.
    assert_eq!(pace_wait(ms(0), 1), None);
    assert_eq!(pace_wait(ms(0), PACE_FROM_JOBS - 1), None);
    // After a crowded group: wait out the rest of the pace, and no more.
    assert_eq!(pace_wait(ms(1), PACE_FROM_JOBS), Some(COMMIT_PACE - ms(1)));
    assert_eq!(pace_wait(ms(0), MAX_JOBS_PER_COMMIT), Some(COMMIT_PACE));
    assert_eq!(pace_wait(COMMIT_PACE, PACE_FROM_JOBS), None);
    assert_eq!(pace_wait(COMMIT_PACE + ms(5), 100), None);
}

fn job(name: &'static str, fail: bool) -> (Job, oneshot::Receiver<Result<()>>) {
    let (tx, rx) = oneshot::channel();
    let f = move |c: &Tx<'_, '_>| -> Result<()> {
        c.execute("INSERT INTO house (name, amount) VALUES (?1, 1)", [name])
            .map_err(db)?;
        if fail {
            return Err(StorageError::Conflict("this job fails".into()));
        }
        Ok(())
    };
    (Box::new(Pending { f, out: None, tx }), rx)
}

/// A job that adds `delta` to the platform's revenue, then fails if `fail`.
fn takes(delta: i64, fail: bool) -> Job {
    let (tx, _rx) = oneshot::channel();
    let f = move |c: &Tx<'_, '_>| -> Result<()> {
        c.add_house(PLATFORM_REVENUE, delta)?;
        if fail {
            return Err(StorageError::Conflict("this job fails".into()));
        }
        Ok(())
    };
    Box::new(Pending { f, out: None, tx })
}

#[test]
fn house_takings_are_written_with_the_group_and_a_failed_job_adds_none() {
    let (_dir, conn) = fresh_db();
    run_and_answer(&conn, vec![takes(1, false), takes(2, false)]);
    assert_eq!(house(&conn, "platform_revenue").unwrap(), 3);
    // A failure reruns the group with savepoints: the failed job's takings are dropped,
    // and the first run's takings are not counted twice.
    run_and_answer(
        &conn,
        vec![takes(5, false), takes(7, true), takes(11, false)],
    );
    assert_eq!(house(&conn, "platform_revenue").unwrap(), 19);
    assert_eq!(house(&conn, "lucky_paid").unwrap(), 0);
    // Nothing is left over for the next group.
    run_and_answer(&conn, vec![takes(0, false)]);
    assert_eq!(house(&conn, "platform_revenue").unwrap(), 19);
}

/// A job that adds a settled gift of `unit` coins from `s` to `r0` to the group's app-board
/// totals, then fails if `fail`.
fn ranks(unit: i64, fail: bool) -> Job {
    let (tx, _rx) = oneshot::channel();
    let f = move |c: &Tx<'_, '_>| -> Result<()> {
        super::app_rank::add_app_ranks(c, &super::super::order::sample(unit, 1, 1, 0))?;
        if fail {
            return Err(StorageError::Conflict("this job fails".into()));
        }
        Ok(())
    };
    Box::new(Pending { f, out: None, tx })
}

#[test]
fn app_board_totals_are_written_with_the_group_and_a_failed_job_adds_none() {
    let (_dir, conn) = fresh_db();
    let totals = |conn: &Connection| -> Vec<(i64, i64, i64, String, i64)> {
        conn.prepare("SELECT board, span, start, user, total FROM app_rank ORDER BY 1, 2, 3, 4")
            .unwrap()
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    };
    let rows = |total: i64| -> Vec<(i64, i64, i64, String, i64)> {
        // Day 0 (1970-01-01, a Thursday) is in the week of day -3.
        let mut v = Vec::new();
        for (board, user) in [(0, "s"), (1, "r0")] {
            for (span, start) in [(0, 0), (1, -3), (2, 0)] {
                v.push((board, span, start, user.to_owned(), total));
            }
        }
        v
    };
    run_and_answer(&conn, vec![ranks(1, false), ranks(2, false)]);
    assert_eq!(totals(&conn), rows(3));
    // A failure reruns the group with savepoints: the failed job's totals are dropped, and
    // the first run's are not counted twice.
    run_and_answer(
        &conn,
        vec![ranks(5, false), ranks(7, true), ranks(11, false)],
    );
    assert_eq!(totals(&conn), rows(19));
    // Nothing is left over for the next group.
    run_and_answer(&conn, vec![takes(0, false)]);
    assert_eq!(totals(&conn), rows(19));
}

/// A fresh ledger database (kept alive by the returned directory).
fn fresh_db() -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let conn = open_connection(&dir.path().join("l.db"), Syncing::Full).unwrap();
    conn.execute_batch(SCHEMA).unwrap();
    conn.execute_batch(super::app_rank::TABLES).unwrap();
    (dir, conn)
}

#[test]
fn coins_move_by_plain_writes_and_refuse_to_overflow() {
    let (_dir, c) = fresh_db();
    assert_eq!(add_coins(&c, "u", 5).unwrap(), 5, "creates the account");
    assert_eq!(set_coins(&c, "u", 2).unwrap(), 2);
    assert_eq!(add_coins(&c, "u", i64::MAX - 2).unwrap(), i64::MAX);
    assert!(matches!(
        add_coins(&c, "u", 1),
        Err(StorageError::Backend { .. })
    ));
    assert_eq!(coins(&c, "u").unwrap(), i64::MAX, "nothing written");
    // The CHECK still refuses a negative balance.
    assert!(set_coins(&c, "u", -1).is_err());
    assert_eq!(coins(&c, "u").unwrap(), i64::MAX);
}

/// Runs `group` as the writer does and answers every job with the commit's success.
fn run_and_answer(conn: &Connection, mut group: Vec<Job>) {
    run_group(conn, &Hot::prepare(conn).unwrap(), &mut group).unwrap();
    for j in group {
        j.answer(Ok(()));
    }
}

#[test]
fn a_failing_job_leaves_no_trace_and_the_rest_of_its_group_commits() {
    let (_dir, conn) = fresh_db();
    let (a, mut ra) = job("a", false);
    let (b, mut rb) = job("b", true);
    let (c, mut rc) = job("c", false);
    run_and_answer(&conn, vec![a, b, c]);
    assert!(ra.try_recv().unwrap().is_ok());
    assert!(matches!(
        rb.try_recv().unwrap(),
        Err(StorageError::Conflict(_))
    ));
    assert!(rc.try_recv().unwrap().is_ok());
    let names = strings(
        &conn,
        "SELECT name FROM house WHERE name IN ('a', 'b', 'c') ORDER BY name",
    );
    assert_eq!(names, ["a", "c"], "b failed: none of its writes stay");
}

#[test]
fn a_group_without_failures_commits_every_job() {
    let (_dir, conn) = fresh_db();
    let (a, mut ra) = job("a", false);
    let (b, mut rb) = job("b", false);
    run_and_answer(&conn, vec![a, b]);
    assert!(ra.try_recv().unwrap().is_ok() && rb.try_recv().unwrap().is_ok());
    let n: i64 = conn
        .query_row(
            "SELECT count(*) FROM house WHERE name IN ('a', 'b')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 2);
}

/// The first column of every row `sql` returns, as text.
fn strings(conn: &Connection, sql: &str) -> Vec<String> {
    conn.prepare(sql)
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

fn gift(sender: &str, req: &str, unit_price: i64, lucky: Option<i64>) -> GiftOrder {
    let sender = UserId::from(sender.to_owned());
    GiftOrder {
        gift_id: super::super::gift_id(&sender, req),
        sender,
        room: RoomId::from("r".to_owned()),
        gift: "rose".into(),
        count: 1,
        unit_price,
        recipients: vec![UserId::from("host".to_owned())],
        share_bp: 5_000,
        lucky: lucky.map(|coins| super::super::LuckyPrize {
            multiplier: 2,
            coins,
        }),
        created_ms: now_ms(),
        request: 0,
    }
}

/// Grants one coin each (a commit each) until the WAL holds at least `frames` frames.
async fn grow_wal(ledger: &SqliteLedger, user: &UserId, frames: i32) {
    for i in 0..10_000 {
        if ledger.wal.frames.load(Ordering::Relaxed) >= frames {
            return;
        }
        ledger.grant(user, 1, &format!("k{i}")).await.unwrap();
    }
    panic!("10,000 commits left fewer than {frames} frames in the WAL");
}

/// Near the limit the checkpointer is woken after every commit; once it has copied the WAL
/// to its end, the next commit restarts the WAL from its beginning, and the writer never
/// runs a RESTART checkpoint of its own (a stop of ~47 ms in a gift storm).
#[tokio::test]
async fn near_its_limit_the_wal_restarts_without_stopping_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let bounds = WalBounds {
        checkpoint_after: i32::MAX,
        drain_from: 40,
        limit: i32::MAX,
    };
    let ledger = SqliteLedger::open_with(&dir.path().join("ledger.db"), bounds)
        .await
        .unwrap();
    let user = UserId::from("u".to_owned());
    grow_wal(&ledger, &user, bounds.drain_from).await;
    let before = ledger.balance(&user).await.unwrap();
    let wal = Arc::clone(&ledger.wal);
    let frames = wal.frames.load(Ordering::Relaxed);
    // The writer is idle now: the checkpointer, woken by the last commit, catches up.
    let mut polls = 0;
    while wal.copied.load(Ordering::Relaxed) < frames {
        polls += 1;
        assert!(
            polls < 5_000,
            "the checkpointer never copied the WAL's {frames} frames"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(wal.restarts.load(Ordering::Relaxed), 0);
    ledger.grant(&user, 1, "after").await.unwrap();
    assert_eq!(wal.restarts.load(Ordering::Relaxed), 1);
    assert!(wal.frames.load(Ordering::Relaxed) < frames);
    assert_eq!(wal.writer_checkpoints.load(Ordering::Relaxed), 0);
    assert_eq!(ledger.balance(&user).await.unwrap(), before + 1);
    assert!(ledger.audit_totals().await.unwrap().is_conserved());
}

/// Polls `f` until it holds (at most ~5 s).
async fn eventually(what: &str, f: impl Fn() -> bool) {
    for _ in 0..5_000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("never happened: {what}");
}

/// A grant on a task of its own, committed and then held by the syncer (its gate closed)
/// before the sync that would answer it.
async fn held_grant(
    ledger: &SqliteLedger,
    user: &UserId,
    amount: i64,
) -> tokio::task::JoinHandle<Result<GrantOutcome>> {
    ledger.sync_hooks.close();
    let grant = tokio::spawn({
        let (ledger, user) = (ledger.clone(), user.clone());
        async move { ledger.grant(&user, amount, "held").await }
    });
    eventually("the grant committed and held before its sync", || {
        ledger.sync_hooks.waiting()
    })
    .await;
    grant
}

/// A ledger in a fresh directory (kept alive by the returned one), and a user granted 5.
async fn granted_ledger() -> (tempfile::TempDir, SqliteLedger, UserId) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(&dir.path().join("ledger.db"))
        .await
        .unwrap();
    let user = UserId::from("u".to_owned());
    ledger.grant(&user, 5, "first").await.unwrap();
    (dir, ledger, user)
}

/// A balance read on a task of its own.
fn spawn_balance(ledger: &SqliteLedger, user: &UserId) -> tokio::task::JoinHandle<Result<i64>> {
    let (ledger, user) = (ledger.clone(), user.clone());
    tokio::spawn(async move { ledger.balance(&user).await })
}

/// A commit is answered, and shown to readers, only once the syncer has synced the WAL:
/// held before its sync, a committed grant is neither answered nor shown by a read.
#[tokio::test]
async fn answers_and_reads_wait_for_the_wal_sync() {
    let (_dir, ledger, user) = granted_ledger().await;
    let grant = held_grant(&ledger, &user, 7).await;
    // The read is past its query (it saw the grant) once it has had the reader connection and
    // let it go: the test holds the connection first, so the read's handle on it (an `Arc`)
    // shows while it waits, and goes when its query ends. All it does next is ask the syncer
    // (held at its gate) for a sync and wait for it.
    let held = ledger.reader.lock().await;
    let handles = Arc::strong_count(&ledger.reader);
    let read = spawn_balance(&ledger, &user);
    eventually("the read waiting for the reader connection", || {
        Arc::strong_count(&ledger.reader) == handles + 2
    })
    .await;
    drop(held);
    eventually("the read's query over", || {
        Arc::strong_count(&ledger.reader) <= handles + 1
    })
    .await;
    // Not answered while the WAL is unsynced: a crash now would undo the grant.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!grant.is_finished(), "a grant was answered before its sync");
    assert!(!read.is_finished(), "a read showed an unsynced commit");
    ledger.sync_hooks.open();
    assert_eq!(
        grant.await.unwrap().unwrap(),
        GrantOutcome {
            balance: 12,
            applied: true,
            amount: 7,
        }
    );
    assert_eq!(read.await.unwrap().unwrap(), 12);
}

/// Two processes may share one ledger file. A read of a commit another writer has not
/// synced yet is answered after a sync of the reader's own, which makes that commit durable
/// too: the sync flushes the WAL file's pages, whoever wrote them.
#[tokio::test]
async fn a_read_of_another_writers_commit_waits_for_a_sync_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let one = SqliteLedger::open(&path).await.unwrap();
    let other = SqliteLedger::open(&path).await.unwrap();
    let user = UserId::from("u".to_owned());
    let grant = held_grant(&one, &user, 7).await;
    other.sync_hooks.close();
    let read = spawn_balance(&other, &user);
    eventually("the read waiting for the other ledger's sync", || {
        other.sync_hooks.waiting()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !read.is_finished(),
        "a read showed another writer's unsynced commit"
    );
    let syncs = other.sync_hooks.syncs.load(Ordering::SeqCst);
    other.sync_hooks.open();
    assert_eq!(read.await.unwrap().unwrap(), 7);
    assert_eq!(other.sync_hooks.syncs.load(Ordering::SeqCst), syncs + 1);
    assert!(!grant.is_finished());
    one.sync_hooks.open();
    assert!(grant.await.unwrap().unwrap().applied);
}

/// A failed sync stops the ledger: the group it covered fails, and so does every later
/// write and every read that may have seen an unsynced commit.
#[tokio::test]
async fn a_failed_sync_stops_the_ledger() {
    let (_dir, ledger, user) = granted_ledger().await;
    ledger.sync_hooks.fail_next.store(true, Ordering::SeqCst);
    let unavailable = |r: Result<()>| matches!(r, Err(StorageError::Unavailable { .. }));
    assert!(unavailable(
        ledger.grant(&user, 7, "second").await.map(drop)
    ));
    // Reads may have seen the unsynced commit; writes would build on it.
    assert!(unavailable(ledger.balance(&user).await.map(drop)));
    assert!(unavailable(ledger.grant(&user, 1, "third").await.map(drop)));
    assert!(unavailable(
        ledger.grant(&user, 1, "fourth").await.map(drop)
    ));
}

/// With no checkpointer woken, the writer bounds the WAL itself at the limit.
#[tokio::test]
async fn at_its_limit_the_writer_restarts_the_wal_itself() {
    let dir = tempfile::tempdir().unwrap();
    let bounds = WalBounds {
        checkpoint_after: i32::MAX,
        drain_from: i32::MAX,
        limit: 40,
    };
    let ledger = SqliteLedger::open_with(&dir.path().join("ledger.db"), bounds)
        .await
        .unwrap();
    let user = UserId::from("u".to_owned());
    grow_wal(&ledger, &user, bounds.limit).await;
    assert_eq!(ledger.wal.writer_checkpoints.load(Ordering::Relaxed), 1);
    assert_eq!(ledger.wal.restarts.load(Ordering::Relaxed), 0);
    let before = ledger.balance(&user).await.unwrap();
    ledger.grant(&user, 1, "after").await.unwrap();
    assert_eq!(ledger.wal.restarts.load(Ordering::Relaxed), 1);
    assert_eq!(ledger.balance(&user).await.unwrap(), before + 1);
}

/// The cost model of [`SCHEMA`]: a gift adds to one randomly keyed b-tree, the saga's
/// `gift_id` index, and to no `entry` row (a second random page per gift) whether it
/// settles, wins a prize or is refused; only the grant is an entry. The claims are still
/// there, as the sagas' states.
#[tokio::test]
async fn gifts_write_their_claims_in_the_saga_row_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let ledger = SqliteLedger::open(&path).await.unwrap();
    let sender = UserId::from("s".to_owned());
    ledger.grant(&sender, 100, "seed").await.unwrap();
    let plain = gift("s", "1", 30, None);
    let lucky = gift("s", "2", 10, Some(20));
    let refused = gift("s", "3", 1_000, None);
    assert!(matches!(
        ledger.send_gift(&plain, 1).await.unwrap(),
        GiftOutcome::Settled { balance: 70, .. }
    ));
    assert!(matches!(
        ledger.send_gift(&lucky, 1).await.unwrap(),
        GiftOutcome::Settled { balance: 80, .. }
    ));
    assert_eq!(
        ledger.send_gift(&refused, 1).await.unwrap(),
        GiftOutcome::InsufficientFunds { balance: 80 }
    );
    let conn = open_connection(&path, Syncing::Full).unwrap();
    let kinds = strings(&conn, "SELECT kind FROM entry");
    assert_eq!(kinds, ["GRANT"]);
    for (order, claim) in [
        (&plain, EntryKind::Debit),
        (&lucky, EntryKind::Debit),
        (&refused, EntryKind::Void),
    ] {
        let found = ledger.wallet_entry(&sender, order.gift_id).await.unwrap();
        assert_eq!(found, Some(claim));
    }
    assert!(ledger.audit_totals().await.unwrap().is_conserved());
}

/// A ledger from before `gift_rank` (leaderboards summed the facts through an index by
/// room and day) opens with its boards intact, migrated once, its index gone; gifts after
/// the migration add to the same totals.
#[tokio::test]
async fn an_older_ledger_keeps_its_leaderboards_through_the_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    {
        let old = open_connection(&path, Syncing::Full).unwrap();
        old.execute_batch(
            "CREATE TABLE settled_gift (
               gift_id BLOB NOT NULL, receiver TEXT NOT NULL, room TEXT NOT NULL,
               day INTEGER NOT NULL, sender TEXT NOT NULL, amount INTEGER NOT NULL,
               earnings INTEGER NOT NULL);
             CREATE INDEX settled_gift_room_day ON settled_gift (room, day);",
        )
        .unwrap();
        let today = day_of(now_ms());
        for (receiver, room, day, sender, amount) in [
            ("host", "r", today, "s", 30),
            ("host", "r", today, "t", 10),
            ("h2", "r", today, "s", 5),
            ("host", "r", today - 8, "t", 100),
            ("host", "elsewhere", today, "s", 1_000),
        ] {
            old.execute(
                "INSERT INTO settled_gift VALUES (x'00', ?1, ?2, ?3, ?4, ?5, 0)",
                params![receiver, room, day, sender, amount],
            )
            .unwrap();
        }
    }
    let boards = |ledger: SqliteLedger| async move {
        let room = RoomId::from("r".to_owned());
        let today = day_of(now_ms());
        let mut out = Vec::new();
        for board in [super::super::Board::Senders, super::super::Board::Receivers] {
            for first_day in [today, i64::MIN] {
                let b = ledger
                    .leaderboard(&room, board, first_day, 10)
                    .await
                    .unwrap();
                out.push(
                    b.into_iter()
                        .map(|(u, t)| (u.to_string(), t))
                        .collect::<Vec<_>>(),
                );
            }
        }
        out
    };
    let pairs = |v: &[(&str, i64)]| -> Vec<(String, i64)> {
        v.iter().map(|(u, t)| ((*u).to_owned(), *t)).collect()
    };
    let expected = vec![
        pairs(&[("s", 35), ("t", 10)]),
        pairs(&[("t", 110), ("s", 35)]),
        pairs(&[("host", 40), ("h2", 5)]),
        pairs(&[("host", 140), ("h2", 5)]),
    ];
    let ledger = SqliteLedger::open(&path).await.unwrap();
    assert_eq!(boards(ledger).await, expected);
    // Opened again: nothing is counted twice.
    let ledger = SqliteLedger::open(&path).await.unwrap();
    assert_eq!(boards(ledger.clone()).await, expected);
    let conn = open_connection(&path, Syncing::Full).unwrap();
    let (version, index): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version),
                    (SELECT count(*) FROM sqlite_master WHERE name = 'settled_gift_room_day')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((version, index), (MIGRATIONS.len() as i64, 0));
    assert!(
        !ledger.may_hold_legacy_gift_ids(),
        "no saga before migration 2: none kept under an old id (the shard's upgrade test has one)"
    );
    // A gift now joins the migrated totals.
    let t = UserId::from("t".to_owned());
    ledger.grant(&t, 100, "seed").await.unwrap();
    let mut g = gift("t", "after", 30, None);
    g.recipients = vec![UserId::from("h2".to_owned())];
    assert!(matches!(
        ledger.send_gift(&g, 1).await.unwrap(),
        GiftOutcome::Settled { .. }
    ));
    let room = RoomId::from("r".to_owned());
    let senders = ledger
        .leaderboard(&room, super::super::Board::Senders, i64::MIN, 10)
        .await
        .unwrap();
    assert_eq!(senders[0], (t, 140));
}
