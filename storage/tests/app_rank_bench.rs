//! App leaderboard read latency at 1,000 and at 10,000,000 gifts, on SQLite and PostgreSQL
//! (docs/BENCHMARKS-LOG.md, "App leaderboards"). By hand, in release:
//!
//! `cargo test --release -p storage --test it -- --ignored --nocapture --test-threads 1 app_rank_bench::`
//!
//! `CHORUS_BENCH_GIFTS` (default 10,000,000; a comma list runs each) gifts are modelled and their
//! rows written straight into `app_rank` (booking 10 M gifts one by one would take hours; the
//! rows are what the bookings write): `gifts / 10` senders send 10 gifts each, on 10 different
//! days of the last 30; `gifts / 100` hosts receive 100 each, spread over those days. Each
//! user gets the day, week and all-time rows those gifts add up to: about 20 M rows at 10 M
//! gifts. Then each board is read through `Ledger::app_leaderboard`.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use kit::postgres::PgServer;
use storage::ledger::{Board, Ledger, Period, day_of, now_ms, week_start};

/// `app_rank` columns of a bulk insert: board, span, start, user, total.
type Columns = (Vec<i16>, Vec<i16>, Vec<i64>, Vec<String>, Vec<i64>);

const READS: usize = 2_000;
const LIMIT: usize = 100;
/// Gifts per sender and per host.
const PER_SENDER: i64 = 10;
const PER_HOST: i64 = 100;
/// Days the gifts spread over.
const DAYS: i64 = 30;

fn gift_counts() -> Vec<i64> {
    std::env::var("CHORUS_BENCH_GIFTS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 10_000_000])
}

/// A gift's value: spread over 1..=1,000 coins, so that totals differ and tie now and then.
fn value(a: i64, b: i64) -> i64 {
    1 + (a * 7_919 + b * 104_729).rem_euclid(1_000)
}

/// One user's rows: `(span, start, total)` for each day, week and all time (spans as in
/// `app_rank`: 0 day, 1 week, 2 all).
fn user_rows(gifts: impl Iterator<Item = (i64, i64)>) -> Vec<(i16, i64, i64)> {
    let mut days: BTreeMap<i64, i64> = BTreeMap::new();
    let mut weeks: BTreeMap<i64, i64> = BTreeMap::new();
    let mut all = 0;
    for (day, v) in gifts {
        *days.entry(day).or_default() += v;
        *weeks.entry(week_start(day)).or_default() += v;
        all += v;
    }
    let mut rows: Vec<(i16, i64, i64)> = days.into_iter().map(|(d, t)| (0, d, t)).collect();
    rows.extend(weeks.into_iter().map(|(w, t)| (1, w, t)));
    rows.push((2, 0, all));
    rows
}

/// Every row `gifts` gifts add up to: `(board, span, start, user, total)`, user by user.
fn model(gifts: i64, today: i64, mut sink: impl FnMut(i16, i16, i64, &str, i64)) {
    let senders = (gifts / PER_SENDER).max(1);
    for u in 0..senders {
        let user = format!("s{u}");
        let sent = (0..PER_SENDER).map(|k| (today - (u + k * 3).rem_euclid(DAYS), value(u, k)));
        for (span, start, total) in user_rows(sent) {
            sink(0, span, start, &user, total);
        }
    }
    let hosts = (gifts / PER_HOST).max(1);
    for h in 0..hosts {
        let user = format!("h{h}");
        let got = (0..PER_HOST).map(|k| (today - (h + k).rem_euclid(DAYS), value(h, k)));
        for (span, start, total) in user_rows(got) {
            sink(1, span, start, &user, total);
        }
    }
}

/// p50 and p99 of `READS` reads of one board.
async fn latency(l: &Ledger, board: Board, period: Period, robots: bool) -> (Duration, Duration) {
    let mut took = Vec::with_capacity(READS);
    for _ in 0..READS {
        let t = Instant::now();
        let rows = l
            .app_leaderboard(board, period, LIMIT, robots)
            .await
            .unwrap();
        took.push(t.elapsed());
        assert_eq!(rows.len(), LIMIT.min(rows.len()));
        assert!(!rows.is_empty());
    }
    took.sort_unstable();
    (took[READS / 2], took[READS * 99 / 100])
}

async fn report(engine: &str, l: &Ledger, gifts: i64, rows: u64, fill: Duration) {
    // Warm the caches as a serving node's would be.
    latency(l, Board::Senders, Period::All, false).await;
    println!("{engine}: {gifts} gifts, {rows} rows, filled in {fill:?}");
    for (board, period, robots) in [
        (Board::Senders, Period::Day, false),
        (Board::Senders, Period::Week, false),
        (Board::Senders, Period::All, false),
        (Board::Receivers, Period::All, false),
        (Board::Senders, Period::All, true),
    ] {
        let (p50, p99) = latency(l, board, period, robots).await;
        println!(
            "{engine}: {gifts} gifts: {board:?} {period:?} robots {robots}: top {LIMIT} p50 {p50:?} p99 {p99:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: fills millions of rows; run by hand in release (see the module docs)"]
async fn sqlite_app_board_read_latency() {
    for gifts in gift_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let url = format!("sqlite://{}", path.display());
        // Create the schema through the ledger, then fill the boards directly.
        drop(Ledger::open(&url, dir.path()).await.unwrap());
        let today = day_of(now_ms());
        let fill = Instant::now();
        let mut rows = 0_u64;
        {
            // A bulk load: rows appended to a plain table, copied into `app_rank` in key order,
            // and the index built once at the end (the rows and index a booking would write).
            let mut c = rusqlite::Connection::open(&path).unwrap();
            c.execute_batch(
                "PRAGMA cache_size = -262144;
                 CREATE TABLE seed (board, span, start, user, total);
                 DROP INDEX app_rank_top;",
            )
            .unwrap();
            let tx = c.transaction().unwrap();
            {
                let mut st = tx
                    .prepare(
                        "INSERT INTO seed (board, span, start, user, total)
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                    )
                    .unwrap();
                model(gifts, today, |board, span, start, user, total| {
                    st.execute(rusqlite::params![board, span, start, user, total])
                        .unwrap();
                    rows += 1;
                });
            }
            tx.execute_batch(
                "INSERT INTO app_rank SELECT * FROM seed ORDER BY board, span, start, user;
                 DROP TABLE seed;
                 CREATE INDEX app_rank_top ON app_rank (board, span, start, total DESC, user);",
            )
            .unwrap();
            tx.commit().unwrap();
            c.execute_batch("ANALYZE; PRAGMA wal_checkpoint(TRUNCATE);")
                .unwrap();
        }
        let fill = fill.elapsed();
        let l = Ledger::open(&url, dir.path()).await.unwrap();
        report("sqlite", &l, gifts, rows, fill).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: fills millions of rows; run by hand in release (see the module docs)"]
async fn postgres_app_board_read_latency() {
    for gifts in gift_counts() {
        let server = PgServer::start().await.unwrap();
        let url = server.url("postgres");
        let l = Ledger::open(&url, &std::env::temp_dir()).await.unwrap();
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let today = day_of(now_ms());
        let fill = Instant::now();
        // The index by total is built once, after the rows (a bulk load).
        client
            .batch_execute("DROP INDEX app_rank_top")
            .await
            .unwrap();
        let mut batch = Columns::default();
        let mut batches = Vec::new();
        let mut rows = 0_u64;
        model(gifts, today, |board, span, start, user, total| {
            batch.0.push(board);
            batch.1.push(span);
            batch.2.push(start);
            batch.3.push(user.to_owned());
            batch.4.push(total);
            rows += 1;
            if batch.0.len() == 100_000 {
                batches.push(std::mem::take(&mut batch));
            }
        });
        batches.push(batch);
        let insert = client
            .prepare(
                "INSERT INTO app_rank (board, span, start, user_id, total)
                 SELECT * FROM unnest($1::SMALLINT[], $2::SMALLINT[], $3::BIGINT[], $4::TEXT[],
                   $5::BIGINT[])",
            )
            .await
            .unwrap();
        for b in batches {
            client
                .execute(&insert, &[&b.0, &b.1, &b.2, &b.3, &b.4])
                .await
                .unwrap();
        }
        client
            .batch_execute(
                "CREATE INDEX app_rank_top ON app_rank (board, span, start, total DESC, user_id);
                 ANALYZE app_rank;",
            )
            .await
            .unwrap();
        let fill = fill.elapsed();
        report("postgres", &l, gifts, rows, fill).await;
    }
}
