//! Statement page latency at 10 or at 10 million movements, on SQLite and PostgreSQL
//! (docs/BENCHMARKS-LOG.md, "Wallet statements"). By hand, in release:
//!
//! `cargo test --release -p storage --test it -- --ignored --nocapture --test-threads 1 wallet_bench::`
//!
//! One user gets `CHORUS_BENCH_MOVEMENTS` movements (default 10,000,000), written straight
//! into the statement table in one bulk insert (far quicker than booking them one by one;
//! the rows are what bookings write), another user 10. Each then reads pages through the
//! ledger: the first page, and a page from a cursor halfway down the big statement (the position
//! built from the rows just written).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tokio::time::Instant;

use kit::postgres::PgServer;
use protocol::UserId;
use storage::ledger::{HistoryQuery, Ledger};

const SMALL: i64 = 10;
const PAGES: usize = 2_000;
const LIMIT: usize = 20;

fn movements() -> i64 {
    std::env::var("CHORUS_BENCH_MOVEMENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000)
}

/// p50 and p99 of `PAGES` page reads from `cursor`.
async fn page_latency(l: &Ledger, user: &UserId, cursor: Option<String>) -> (Duration, Duration) {
    let mut took = Vec::with_capacity(PAGES);
    for _ in 0..PAGES {
        let q = HistoryQuery {
            cursor: cursor.clone(),
            limit: LIMIT,
            kind: None,
        };
        let t = Instant::now();
        let page = l.history(user, &q).await.unwrap();
        took.push(t.elapsed());
        assert!(!page.movements.is_empty());
    }
    took.sort_unstable();
    (took[PAGES / 2], took[PAGES * 99 / 100])
}

async fn report(engine: &str, l: &Ledger, n: i64, mid: Option<String>) {
    let (big, small) = (UserId::from("big"), UserId::from("small"));
    // Warm the caches as a serving node's would be.
    page_latency(l, &small, None).await;
    let (s50, s99) = page_latency(l, &small, None).await;
    let (b50, b99) = page_latency(l, &big, None).await;
    let (d50, d99) = page_latency(l, &big, mid).await;
    println!(
        "{engine}: page of {LIMIT}: {SMALL} movements p50 {s50:?} p99 {s99:?}; {n} movements \
         first page p50 {b50:?} p99 {b99:?}; deep page p50 {d50:?} p99 {d99:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: fills millions of rows; run by hand in release (see the module docs)"]
async fn sqlite_statement_page_latency() {
    let n = movements();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    // Create the schema through the ledger, then fill the statement directly.
    drop(
        Ledger::open(&format!("sqlite://{}", path.display()), dir.path())
            .await
            .unwrap(),
    );
    let fill = Instant::now();
    {
        let mut c = rusqlite::Connection::open(&path).unwrap();
        let tx = c.transaction().unwrap();
        {
            let mut st = tx
                .prepare(
                    "INSERT INTO movement (user, kind, amount, balance_after, counterparty, key, at_ms)
                     VALUES (?1, 'grant', 1, ?2, NULL, ?3, ?4)",
                )
                .unwrap();
            for i in 0..n {
                st.execute(rusqlite::params!["big", i + 1, format!("k{i}"), i])
                    .unwrap();
            }
            for i in 0..SMALL {
                st.execute(rusqlite::params!["small", i + 1, format!("k{i}"), i])
                    .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    println!("sqlite: filled {n} movements in {:?}", fill.elapsed());
    let l = Ledger::open(&format!("sqlite://{}", path.display()), dir.path())
        .await
        .unwrap();
    // The big user's rows hold ids 1..=n (inserted first): the position halfway down.
    report("sqlite", &l, n, Some((n / 2).to_string())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: fills millions of rows; run by hand in release (see the module docs)"]
async fn postgres_statement_page_latency() {
    let n = movements();
    let server = PgServer::start().await.unwrap();
    let url = server.url("postgres");
    let l = Ledger::open(&url, &std::env::temp_dir()).await.unwrap();
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let fill = Instant::now();
    client
        .execute(
            "INSERT INTO movement (user_id, kind, amount, balance_after, key, at_ms)
             SELECT 'big', 'grant', 1, i, 'k' || i, i FROM generate_series(1, $1::BIGINT) AS i",
            &[&n],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO movement (user_id, kind, amount, balance_after, key, at_ms)
             SELECT 'small', 'grant', 1, i, 'k' || i, i FROM generate_series(1, $1::BIGINT) AS i",
            &[&SMALL],
        )
        .await
        .unwrap();
    client.execute("ANALYZE movement", &[]).await.unwrap();
    println!("postgres: filled {n} movements in {:?}", fill.elapsed());
    // The position halfway down (one transaction wrote them all: one xid, ids in order).
    let row = client
        .query_one(
            "SELECT xid::TEXT || '.' || (MIN(id) + $1::BIGINT)::TEXT FROM movement
             WHERE user_id = 'big' GROUP BY xid",
            &[&(n / 2)],
        )
        .await
        .unwrap();
    report("postgres", &l, n, Some(row.get(0))).await;
}
