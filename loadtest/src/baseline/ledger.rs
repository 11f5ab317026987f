//! The baseline's gift ledger: the least a durable gift server does, so that `gifts --compare`
//! has a same-run baseline (docs/BENCHMARKS-LOG.md, the gifts target).
//!
//! One SQLite file on the same bundled SQLite as Chorus, in WAL mode with `synchronous=FULL`
//! (a gift is answered only after its commit is on disk), one writer thread that commits every
//! job queued at once in one transaction (group commit), SQLite's own automatic checkpoints.
//! A gift is three writes and a read: its idempotency row (`req_id`, sender), the sender's
//! debit and each receiver's credit. What Chorus does beyond it, the baseline does not: no
//! fencing tokens, no saga states or recovery, no house share, no leaderboards, no settled-gift
//! facts, no commit pacing, no checkpointer thread, no lucky draws.
//!
//! Request ids are the idempotency key's first column, so UUIDv7 ids append to its index as
//! Chorus' time-ordered gift ids do: the baseline is not made slow on purpose.

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::{mpsc, oneshot};

/// Jobs queued for the writer before callers wait for room.
const QUEUE: usize = 16 * 1024;
/// Jobs committed together at most.
const MAX_GROUP: usize = 1024;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS account (
    user TEXT PRIMARY KEY,
    coins INTEGER NOT NULL DEFAULT 0,
    earnings INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gift (
    req_id TEXT NOT NULL,
    sender TEXT NOT NULL,
    coins INTEGER NOT NULL,
    PRIMARY KEY (req_id, sender)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS grant_key (
    key TEXT PRIMARY KEY,
    user TEXT NOT NULL,
    amount INTEGER NOT NULL
) WITHOUT ROWID;
";

/// What became of a gift.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiftOutcome {
    /// Debited and credited now; the sender's balance after it.
    Settled {
        /// Coins left.
        balance: i64,
    },
    /// The sender used this `req_id` before: nothing moved again.
    Duplicate {
        /// Coins left.
        balance: i64,
    },
    /// The sender's coins do not cover it: nothing moved.
    InsufficientFunds {
        /// Coins left.
        balance: i64,
    },
}

/// A user's wallet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wallet {
    /// Coins to spend.
    pub coins: i64,
    /// Coins received as gifts.
    pub earnings: i64,
}

/// Everything granted against everything held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// The sum of all grants.
    pub granted: i64,
    /// The sum of all coins and earnings.
    pub held: i64,
}

impl Totals {
    /// Whether no coin was made or lost.
    pub fn is_conserved(&self) -> bool {
        self.granted == self.held
    }
}

/// A gift order: `coins_each` from `sender` to every one of `receivers`.
#[derive(Debug, Clone)]
pub struct Gift {
    /// The sender's request id (the idempotency key with the sender).
    pub req_id: String,
    /// Who pays.
    pub sender: String,
    /// Who is credited.
    pub receivers: Vec<String>,
    /// What each receiver gets (the sender pays this times the receivers).
    pub coins_each: i64,
}

impl Gift {
    /// What the sender pays; `None` when it is negative or overflows.
    pub fn total(&self) -> Option<i64> {
        let n = i64::try_from(self.receivers.len()).ok()?;
        self.coins_each.checked_mul(n).filter(|t| *t >= 0)
    }
}

/// The ledger's failures: the database's, or the writer thread gone.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// SQLite failed at open.
    #[error("sqlite: {0}")]
    Db(#[from] rusqlite::Error),
    /// SQLite failed in the job's group, which was rolled back: nothing of it was written.
    #[error("rolled back: {0}")]
    Rollback(String),
    /// The writer thread has stopped.
    #[error("the ledger writer stopped")]
    Stopped,
    /// A negative or overflowing amount.
    #[error("bad amount")]
    BadAmount,
}

/// A caller's work for the writer, run inside a group's transaction and answered once the
/// group has committed (or failed).
trait Job: Send {
    fn run(&mut self, conn: &Connection) -> rusqlite::Result<()>;
    /// Answers with the result, or `failed` (the whole group rolled back); a caller that gave
    /// up is no one to tell.
    fn answer(self: Box<Self>, failed: Option<&rusqlite::Error>);
}

/// A call: `work` runs once, its value is held until the commit, then sent to the caller.
struct Call<T, F> {
    work: Option<F>,
    value: Option<T>,
    answer: oneshot::Sender<Result<T, Error>>,
}

impl<T, F> Job for Call<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> rusqlite::Result<T> + Send,
{
    fn run(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        if let Some(work) = self.work.take() {
            self.value = Some(work(conn)?);
        }
        Ok(())
    }

    fn answer(self: Box<Self>, failed: Option<&rusqlite::Error>) {
        let result = match (failed, self.value) {
            (None, Some(v)) => Ok(v),
            (Some(e), _) => Err(Error::Rollback(e.to_string())),
            (None, None) => Err(Error::Stopped),
        };
        let _ = self.answer.send(result);
    }
}

/// A handle on the ledger; cheap to clone. The writer thread stops when every handle is gone.
#[derive(Clone, Debug)]
pub struct Ledger {
    jobs: mpsc::Sender<Box<dyn Job>>,
}

impl Ledger {
    /// Opens (creating if needed) the ledger at `path` and starts its writer thread.
    ///
    /// # Errors
    /// The file cannot be opened, or the thread not started.
    pub fn open(path: &std::path::Path) -> Result<Self, Error> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(SCHEMA)?;
        let (jobs, rx) = mpsc::channel(QUEUE);
        std::thread::Builder::new()
            .name("baseline-ledger".into())
            .spawn(move || writer(&conn, rx))
            .map_err(|_| Error::Stopped)?;
        Ok(Self { jobs })
    }

    /// Runs `work` in the writer's next group; its value once the group has committed.
    async fn call<T, F>(&self, work: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let (answer, rx) = oneshot::channel();
        let job = Box::new(Call {
            work: Some(work),
            value: None,
            answer,
        });
        self.jobs.send(job).await.map_err(|_| Error::Stopped)?;
        rx.await.map_err(|_| Error::Stopped)?
    }

    /// Sends a gift: settled, a duplicate of an earlier one, or refused for funds; answered
    /// once its commit is durable, with the gift given back.
    ///
    /// # Errors
    /// SQLite failed, the amount overflows, or the writer stopped.
    pub async fn send_gift(&self, g: Gift) -> Result<(GiftOutcome, Gift), Error> {
        if g.total().is_none() {
            return Err(Error::BadAmount);
        }
        self.call(move |conn| gift(conn, &g).map(|o| (o, g))).await
    }

    /// Grants `amount` coins to `user` once per `key`; the balance after it.
    ///
    /// # Errors
    /// SQLite failed, the amount is negative, or the writer stopped.
    pub async fn grant(&self, user: &str, amount: i64, key: &str) -> Result<i64, Error> {
        if amount < 0 {
            return Err(Error::BadAmount);
        }
        let (user, key) = (user.to_owned(), key.to_owned());
        self.call(move |conn| grant(conn, &user, amount, &key))
            .await
    }

    /// A user's wallet (zeros for an unknown user).
    ///
    /// # Errors
    /// SQLite failed, or the writer stopped.
    pub async fn wallet(&self, user: &str) -> Result<Wallet, Error> {
        let user = user.to_owned();
        self.call(move |conn| wallet(conn, &user)).await
    }

    /// Granted against held, over the whole ledger.
    ///
    /// # Errors
    /// SQLite failed, or the writer stopped.
    pub async fn totals(&self) -> Result<Totals, Error> {
        self.call(totals).await
    }
}

fn writer(conn: &Connection, mut rx: mpsc::Receiver<Box<dyn Job>>) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_GROUP);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let commit = commit_group(conn, &mut batch);
        if commit.is_err() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        // Answered only now: every result of the group is durable, or none of it is.
        let failed = commit.as_ref().err();
        batch.drain(..).for_each(|job| job.answer(failed));
    }
}

/// Runs `batch` in one transaction and commits it.
fn commit_group(conn: &Connection, batch: &mut [Box<dyn Job>]) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    for job in batch.iter_mut() {
        job.run(conn)?;
    }
    conn.execute_batch("COMMIT")
}

fn coins(conn: &Connection, user: &str) -> rusqlite::Result<i64> {
    Ok(conn
        .prepare_cached("SELECT coins FROM account WHERE user = ?1")?
        .query_row([user], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

fn gift(conn: &Connection, g: &Gift) -> rusqlite::Result<GiftOutcome> {
    // `send_gift` checked that it neither overflows nor is negative.
    let total = g.total().unwrap_or(i64::MAX);
    let new = conn
        .prepare_cached(
            "INSERT INTO gift (req_id, sender, coins) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
        )?
        .execute(params![g.req_id, g.sender, total])?;
    let balance = coins(conn, &g.sender)?;
    if new == 0 {
        return Ok(GiftOutcome::Duplicate { balance });
    }
    if balance < total {
        conn.prepare_cached("DELETE FROM gift WHERE req_id = ?1 AND sender = ?2")?
            .execute(params![g.req_id, g.sender])?;
        return Ok(GiftOutcome::InsufficientFunds { balance });
    }
    conn.prepare_cached("UPDATE account SET coins = ?2 WHERE user = ?1")?
        .execute(params![g.sender, balance - total])?;
    let mut credit = conn.prepare_cached(
        "INSERT INTO account (user, earnings) VALUES (?1, ?2)
         ON CONFLICT (user) DO UPDATE SET earnings = earnings + ?2",
    )?;
    for r in &g.receivers {
        credit.execute(params![r, g.coins_each])?;
    }
    Ok(GiftOutcome::Settled {
        balance: balance - total,
    })
}

fn grant(conn: &Connection, user: &str, amount: i64, key: &str) -> rusqlite::Result<i64> {
    let new = conn
        .prepare_cached(
            "INSERT INTO grant_key (key, user, amount) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
        )?
        .execute(params![key, user, amount])?;
    if new == 1 {
        conn.prepare_cached(
            "INSERT INTO account (user, coins) VALUES (?1, ?2)
             ON CONFLICT (user) DO UPDATE SET coins = coins + ?2",
        )?
        .execute(params![user, amount])?;
    }
    coins(conn, user)
}

fn wallet(conn: &Connection, user: &str) -> rusqlite::Result<Wallet> {
    Ok(conn
        .prepare_cached("SELECT coins, earnings FROM account WHERE user = ?1")?
        .query_row([user], |r| {
            Ok(Wallet {
                coins: r.get(0)?,
                earnings: r.get(1)?,
            })
        })
        .optional()?
        .unwrap_or(Wallet {
            coins: 0,
            earnings: 0,
        }))
}

fn totals(conn: &Connection) -> rusqlite::Result<Totals> {
    let granted = conn.query_row("SELECT COALESCE(SUM(amount), 0) FROM grant_key", [], |r| {
        r.get(0)
    })?;
    let held = conn.query_row(
        "SELECT COALESCE(SUM(coins), 0) + COALESCE(SUM(earnings), 0) FROM account",
        [],
        |r| r.get(0),
    )?;
    Ok(Totals { granted, held })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gift(sender: &str, req_id: &str, to: &[&str]) -> Gift {
        Gift {
            req_id: req_id.to_owned(),
            sender: sender.to_owned(),
            receivers: to.iter().map(|s| (*s).to_owned()).collect(),
            coins_each: 10,
        }
    }

    #[tokio::test]
    async fn a_reused_request_id_debits_once_and_coins_are_conserved() {
        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::open(&dir.path().join("l.db")).unwrap();
        assert_eq!(l.grant("a", 100, "g1").await.unwrap(), 100);
        // A grant is once per key.
        assert_eq!(l.grant("a", 100, "g1").await.unwrap(), 100);
        let g = gift("a", "r1", &["b", "c"]);
        assert_eq!(
            l.send_gift(g.clone()).await.unwrap().0,
            GiftOutcome::Settled { balance: 80 }
        );
        assert_eq!(
            l.send_gift(g).await.unwrap().0,
            GiftOutcome::Duplicate { balance: 80 }
        );
        // The same request id from another sender is another order.
        l.grant("b", 10, "g2").await.unwrap();
        assert_eq!(
            l.send_gift(gift("b", "r1", &["a"])).await.unwrap().0,
            GiftOutcome::Settled { balance: 0 }
        );
        assert_eq!(
            l.wallet("b").await.unwrap(),
            Wallet {
                coins: 0,
                earnings: 10
            }
        );
        let t = l.totals().await.unwrap();
        assert_eq!(t.granted, 110);
        assert!(t.is_conserved(), "{t:?}");
    }

    #[tokio::test]
    async fn a_gift_beyond_the_balance_moves_nothing_and_its_id_stays_free() {
        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::open(&dir.path().join("l.db")).unwrap();
        l.grant("a", 15, "g").await.unwrap();
        assert_eq!(
            l.send_gift(gift("a", "r1", &["b", "c"])).await.unwrap().0,
            GiftOutcome::InsufficientFunds { balance: 15 }
        );
        assert_eq!(l.wallet("b").await.unwrap().earnings, 0);
        // Refused, not booked: once funded, the same request id settles.
        l.grant("a", 5, "g2").await.unwrap();
        assert_eq!(
            l.send_gift(gift("a", "r1", &["b", "c"])).await.unwrap().0,
            GiftOutcome::Settled { balance: 0 }
        );
        let overflow = Gift {
            coins_each: i64::MAX,
            ..gift("a", "r2", &["b", "c"])
        };
        assert!(matches!(l.send_gift(overflow).await, Err(Error::BadAmount)));
        assert!(l.totals().await.unwrap().is_conserved());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gifts_answered_together_are_all_on_disk_when_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let l = Ledger::open(&path).unwrap();
        l.grant("a", 1_000, "g").await.unwrap();
        // Sent at once, so the writer commits them in groups.
        let sends = (0..50).map(|i| {
            let l = l.clone();
            tokio::spawn(async move { l.send_gift(gift("a", &format!("r{i}"), &["b"])).await })
        });
        for s in sends.collect::<Vec<_>>() {
            assert!(matches!(
                s.await.unwrap().unwrap().0,
                GiftOutcome::Settled { .. }
            ));
        }
        drop(l);
        let conn = Connection::open(&path).unwrap();
        let (gifts, coins): (i64, i64) = conn
            .query_row(
                "SELECT (SELECT COUNT(*) FROM gift), (SELECT coins FROM account WHERE user = 'a')",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((gifts, coins), (50, 500));
    }
}
