//! New gifts on PostgreSQL, booked several to a transaction: one commit (one WAL flush) and
//! three round trips for a whole batch instead of for each gift.
//!
//! Gifts wait in a queue; a dispatcher takes whatever has queued (up to [`MAX_BATCH`]) as soon
//! as one of [`BATCHES_IN_FLIGHT`] transaction slots is free, so a lone gift goes at once and
//! gifts arriving under load share a transaction. Every statement decides its own gift, so no
//! gift's refusal has to roll back another's writes:
//!
//! 1. The rooms' fences `FOR SHARE`, the senders' accounts created and locked (sorted), then
//!    per gift one statement that inserts its saga only if the room's fence allows it and the
//!    id is new, and debits the sender (the prize, if any, credited in the same update) only
//!    if that insert happened and the coins cover it; it answers the balance before and after.
//! 2. Set-based writes for the whole batch, rows in key order: the entries (debits, prizes,
//!    void claims), the recipients' earnings and the leaderboards (summed per row first), the
//!    settlements, the statement lines, and the sagas marked SETTLED or VOIDED.
//! 3. The commit; only then is any gift answered.
//!
//! A gift whose id was booked before (a retry) is answered [`Booked::Alone`] and the caller
//! takes the step-by-step path ([`super::saga`]) once the batch committed; a stale fence is
//! `Fenced` for that gift alone. A failed transaction (a lost connection, a time-out) fails
//! every gift of its batch with the same error, and each caller retries by its gift id.
//!
//! Step 1's locks wait at most [`BATCH_LOCK_WAIT`]: an account held by another transaction
//! (a slow one, or one of a node frozen in the middle of it) would otherwise stall the whole
//! batch until the server's lock bound and then fail every gift in it. Past the wait the batch
//! books nothing, and each of its gifts is booked alone, so only the held account's gifts
//! wait for it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use deadpool_postgres::Transaction;
use futures_util::future::join_all;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_postgres::error::SqlState;
use uuid::Uuid;

use super::super::NewMovement;
use super::super::app_rank::app_rank_rows;
use super::super::movement::{gift_effects, gift_sent};
use super::super::{
    EntryKind, GiftOrder, GiftOutcome, SagaState, VoidReason, day_of, lucky_entry_id, now_ms,
};
use super::app_rank::{AppRankColumns, SQL_APP_RANKS};
use super::movements::{Columns, SQL_INSERT as SQL_MOVEMENTS};
use super::saga::col;
use super::schema::{BOARD_RECEIVERS, BOARD_SENDERS, SLOTS};
use super::{Db, Fail, TxResult, from_sql_fence, to_sql_fence, transact};
use crate::{Result, StorageError};

/// Most gifts in one transaction.
pub(super) const MAX_BATCH: usize = 64;
/// Batches in flight at once, each holding one pooled connection; the rest of the pool serves
/// retries, recoveries, fences and reads.
pub(super) const BATCHES_IN_FLIGHT: usize = super::POOL_SIZE / 2;
/// Gifts that may wait for a batch before senders wait to enqueue.
const QUEUE: usize = 4 * MAX_BATCH * BATCHES_IN_FLIGHT;
/// Histogram of the gifts each committed batch held.
pub const METRIC_BATCH_GIFTS: &str = "chorus_ledger_batch_gifts";
/// Batches whose locks waited past [`BATCH_LOCK_WAIT`], their gifts then booked alone.
pub const METRIC_BATCH_LOCK_WAITS: &str = "chorus_ledger_batch_lock_waits_total";
/// How long a batch waits for its rooms' fences and its senders' accounts (a PostgreSQL
/// `lock_timeout`). The node's own batches hold them for a commit's time; longer means a
/// transaction elsewhere holds one.
pub const BATCH_LOCK_WAIT: &str = "500ms";

/// What the batch did with one gift.
pub(super) enum Booked {
    /// Booked (settled, or refused for its balance) and committed.
    Done(GiftOutcome),
    /// Not booked by the batch: the gift id was booked before, or the batch's locks waited
    /// too long. The caller goes step by step, from where its saga is (if anywhere).
    Alone,
}

/// One gift waiting for a batch, and where its answer goes.
struct Job {
    order: GiftOrder,
    fence: u64,
    reply: oneshot::Sender<Result<Booked>>,
}

/// The queue into the batches. Cloned with the ledger; the dispatcher stops when the last
/// clone is dropped.
#[derive(Clone)]
pub(super) struct Batcher {
    queue: mpsc::Sender<Job>,
    stats: Arc<Stats>,
}

/// Batches committed and the gifts they held, since start.
#[derive(Default)]
struct Stats {
    started: AtomicU64,
    batches: AtomicU64,
    gifts: AtomicU64,
}

impl Batcher {
    /// Starts the dispatcher on the current runtime.
    pub(super) fn start(db: Db) -> Self {
        let (queue, rx) = mpsc::channel(QUEUE);
        let stats = Arc::new(Stats::default());
        tokio::spawn(dispatch(db, rx, Arc::clone(&stats)));
        Self { queue, stats }
    }

    /// `(batches, gifts)` committed since start.
    pub(super) fn stats(&self) -> (u64, u64) {
        (
            self.stats.batches.load(Ordering::Relaxed),
            self.stats.gifts.load(Ordering::Relaxed),
        )
    }

    /// Books `order` in the next batch; answers after that batch's commit.
    pub(super) async fn book(&self, order: &GiftOrder, fence: u64) -> Result<Booked> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            order: order.clone(),
            fence,
            reply,
        };
        let gone = || StorageError::unavailable_msg("postgres: the gift batcher has stopped");
        self.queue.send(job).await.map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// Takes queued gifts into batches, at most [`BATCHES_IN_FLIGHT`] at a time.
async fn dispatch(db: Db, mut rx: mpsc::Receiver<Job>, stats: Arc<Stats>) {
    let slots = Arc::new(Semaphore::new(BATCHES_IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        // Whatever queued while waiting for the permit joins this batch.
        let mut jobs = vec![first];
        while jobs.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let (db, stats) = (db.clone(), Arc::clone(&stats));
        // Consecutive batches write their earnings and leaderboard totals to consecutive
        // rows of each user's slots, so batches in flight together do not queue on a popular
        // host's rows (a batch holds the rows it wrote until its commit).
        let row = i16::try_from(stats.started.fetch_add(1, Ordering::Relaxed) % u64::from(SLOTS))
            .unwrap_or(0);
        tokio::spawn(async move {
            run(&db, jobs, row, &stats).await;
            drop(permit);
        });
    }
}

/// Books one batch and answers each of its gifts.
async fn run(db: &Db, jobs: Vec<Job>, row: i16, stats: &Stats) {
    let gifts: Vec<(&GiftOrder, u64)> = jobs.iter().map(|j| (&j.order, j.fence)).collect();
    let started = tokio::time::Instant::now();
    let booked =
        transact!(db, |tx| book(&tx, &gifts, row).await, commit_if |b: &Option<_>| b.is_some());
    drop(gifts);
    match booked {
        Ok(None) => {
            metrics::counter!(METRIC_BATCH_LOCK_WAITS).increment(1);
            for job in jobs {
                let _ = job.reply.send(Ok(Booked::Alone));
            }
        }
        Ok(Some(results)) => {
            metrics::histogram!(crate::ledger::METRIC_GROUP_COMMIT_SECONDS)
                .record(started.elapsed().as_secs_f64());
            stats.batches.fetch_add(1, Ordering::Relaxed);
            stats.gifts.fetch_add(jobs.len() as u64, Ordering::Relaxed);
            metrics::histogram!(METRIC_BATCH_GIFTS).record(jobs.len() as f64);
            for (job, result) in jobs.into_iter().zip(results) {
                let _ = job.reply.send(result);
            }
        }
        Err(e) => {
            for job in jobs {
                let _ = job.reply.send(Err(e.clone()));
            }
        }
    }
}

/// A statement's parameters.
type Params<'a> = [&'a (dyn tokio_postgres::types::ToSql + Sync)];

/// Sets this transaction's lock wait to `$1`, then back to the session's.
const SQL_LOCK_WAIT: &str = "SELECT set_config('lock_timeout', $1, true)";
const SQL_LOCK_WAIT_BACK: &str = "SET LOCAL lock_timeout TO DEFAULT";
const SQL_FENCES: &str =
    "SELECT room, fence FROM room_owner WHERE room = ANY($1) ORDER BY room FOR SHARE";
const SQL_CREATE_ACCOUNTS: &str = "INSERT INTO account (user_id)
 SELECT u FROM unnest($1::TEXT[]) AS u ORDER BY u ON CONFLICT (user_id) DO NOTHING";
const SQL_LOCK_ACCOUNTS: &str =
    "SELECT user_id FROM account WHERE user_id = ANY($1) ORDER BY user_id FOR UPDATE";
/// One gift's saga and debit: `(inserted, coins after, coins before)`. The saga goes in only
/// under a fence not below the room's and a new id; the debit (less the prize) only with it,
/// with coins covering the total and no debt owed (a refund of spent coins blocks sending, as
/// if the coins were short). The last column reads the account as it was before this
/// statement (every part of a statement sees the same snapshot): 0 for a sender in debt, who
/// has nothing to spend.
const SQL_GIFT: &str = "WITH s AS (
   INSERT INTO gift_saga (gift_id, room, sender, order_json, state, fence, updated_ms)
   SELECT $1::UUID, $2::TEXT, $3::TEXT, $4::TEXT, 'PENDING', $5::BIGINT, $6::BIGINT
   WHERE NOT EXISTS (SELECT 1 FROM room_owner WHERE room = $2 AND fence > $5)
   ON CONFLICT (gift_id) DO NOTHING
   RETURNING gift_id),
 d AS (
   UPDATE account SET coins = coins - $7::BIGINT + $8::BIGINT
   WHERE user_id = $3 AND coins >= $7 AND EXISTS (SELECT 1 FROM s)
     AND NOT EXISTS (SELECT 1 FROM debt WHERE user_id = $3)
   RETURNING coins)
 SELECT EXISTS (SELECT 1 FROM s), (SELECT coins FROM d),
   (SELECT CASE WHEN EXISTS (SELECT 1 FROM debt WHERE user_id = $3) THEN 0 ELSE coins END
    FROM account WHERE user_id = $3)";
const SQL_ENTRIES: &str =
    "INSERT INTO entry (user_id, entry_id, kind, amount, balance_after, created_ms)
 SELECT u, i, k, a, b, $6 FROM unnest($1::TEXT[], $2::UUID[], $3::TEXT[], $4::BIGINT[],
   $5::BIGINT[]) AS x(u, i, k, a, b)";
const SQL_EARNINGS: &str = "INSERT INTO earning (user_id, slot, amount)
 SELECT u, s, a FROM unnest($1::TEXT[], $2::SMALLINT[], $3::BIGINT[])
   WITH ORDINALITY AS x(u, s, a, n) ORDER BY n
 ON CONFLICT (user_id, slot) DO UPDATE SET amount = earning.amount + EXCLUDED.amount";
const SQL_RANKS: &str = "INSERT INTO gift_rank (room, board, day, user_id, slot, total)
 SELECT r, b, d, u, s, t FROM unnest($1::TEXT[], $2::SMALLINT[], $3::BIGINT[], $4::TEXT[],
   $5::SMALLINT[], $6::BIGINT[]) WITH ORDINALITY AS x(r, b, d, u, s, t, n) ORDER BY n
 ON CONFLICT (room, board, day, user_id, slot)
 DO UPDATE SET total = gift_rank.total + EXCLUDED.total";
const SQL_SETTLEMENTS: &str =
    "INSERT INTO gift_settlement (gift_id, room, platform, lucky, app_ranked)
 SELECT *, TRUE FROM unnest($1::UUID[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[])";
const SQL_MARKS: &str = "UPDATE gift_saga g
 SET state = x.st, balance_after = x.b, reason = x.r, updated_ms = $5
 FROM unnest($1::UUID[], $2::TEXT[], $3::BIGINT[], $4::TEXT[]) AS x(id, st, b, r)
 WHERE g.gift_id = x.id";

/// The batch's writes of round trip 2, gathered from round trip 1's answers.
#[derive(Default)]
struct Writes<'a> {
    /// The slot this batch adds earnings and leaderboard totals to.
    slot: i16,
    entry_users: Vec<&'a str>,
    entry_ids: Vec<Uuid>,
    entry_kinds: Vec<&'static str>,
    entry_amounts: Vec<i64>,
    entry_after: Vec<Option<i64>>,
    earnings: BTreeMap<(&'a str, i16), i64>,
    ranks: BTreeMap<(&'a str, i16, i64, &'a str, i16), i64>,
    /// The app boards' rows (board, span, start, user), in key order.
    app_ranks: BTreeMap<(i16, i16, i64, &'a str), i64>,
    settled_ids: Vec<Uuid>,
    settled_rooms: Vec<&'a str>,
    settled_platform: Vec<i64>,
    settled_lucky: Vec<i64>,
    mark_ids: Vec<Uuid>,
    mark_states: Vec<&'static str>,
    mark_after: Vec<i64>,
    mark_reasons: Vec<Option<&'static str>>,
    /// The statement lines of the settled gifts.
    movements: Vec<NewMovement>,
}

impl<'a> Writes<'a> {
    fn entry(&mut self, user: &'a str, id: Uuid, kind: EntryKind, amount: i64, after: i64) {
        self.entry_users.push(user);
        self.entry_ids.push(id);
        self.entry_kinds.push(kind.as_str());
        self.entry_amounts.push(amount);
        self.entry_after.push(Some(after));
    }

    fn mark(&mut self, id: Uuid, state: SagaState, after: i64, reason: Option<VoidReason>) {
        self.mark_ids.push(id);
        self.mark_states.push(state.as_str());
        self.mark_after.push(after);
        self.mark_reasons.push(reason.map(VoidReason::as_str));
    }

    /// A debited gift's settlement: `after` is the sender's coins with the prize paid.
    fn settled(&mut self, o: &'a GiftOrder, after: i64) {
        let (sender, prize) = (o.sender.as_str(), o.prize());
        self.entry(
            sender,
            o.gift_id,
            EntryKind::Debit,
            o.total(),
            after - prize,
        );
        if prize > 0 {
            let lucky = lucky_entry_id(o.gift_id);
            self.entry(sender, lucky, EntryKind::Lucky, prize, after);
        }
        let slot = self.slot;
        let (room, day) = (o.room.as_str(), day_of(o.created_ms));
        let earned = o.earnings_per_recipient();
        *self
            .ranks
            .entry((room, BOARD_SENDERS, day, sender, slot))
            .or_default() += o.total();
        for r in &o.recipients {
            *self.earnings.entry((r.as_str(), slot)).or_default() += earned;
            *self
                .ranks
                .entry((room, BOARD_RECEIVERS, day, r.as_str(), slot))
                .or_default() += o.per_recipient();
        }
        for (board, span, start, user, amount) in app_rank_rows(o) {
            *self
                .app_ranks
                .entry((board, span, start, user))
                .or_default() += amount;
        }
        self.settled_ids.push(o.gift_id);
        self.settled_rooms.push(room);
        self.settled_platform.push(o.platform_share());
        self.settled_lucky.push(prize);
        self.mark(o.gift_id, SagaState::Settled, after, None);
        self.movements.push(gift_sent(o, after - prize));
        self.movements.extend(gift_effects(o, after));
    }

    /// A gift the balance did not cover: the void claim takes the debit's key.
    fn refused(&mut self, o: &'a GiftOrder, balance: i64) {
        let sender = o.sender.as_str();
        self.entry(sender, o.gift_id, EntryKind::Void, o.total(), balance);
        let reason = Some(VoidReason::InsufficientFunds);
        self.mark(o.gift_id, SagaState::Voided, balance, reason);
    }

    fn is_empty(&self) -> bool {
        self.mark_ids.is_empty()
    }
}

/// Books `gifts` (orders with their fences) in transaction `tx`, adding earnings and
/// leaderboard totals to slot `row`: each gift's answer, in order; `None` (nothing booked:
/// roll back) when a lock of step 1 waited past [`BATCH_LOCK_WAIT`].
async fn book(
    tx: &Transaction<'_>,
    gifts: &[(&GiftOrder, u64)],
    row: i16,
) -> TxResult<Option<Vec<Result<Booked>>>> {
    let (s_wait, s_wait_back, s_fences, s_create, s_lock, s_gift) = tokio::try_join!(
        tx.prepare_cached(SQL_LOCK_WAIT),
        tx.prepare_cached(SQL_LOCK_WAIT_BACK),
        tx.prepare_cached(SQL_FENCES),
        tx.prepare_cached(SQL_CREATE_ACCOUNTS),
        tx.prepare_cached(SQL_LOCK_ACCOUNTS),
        tx.prepare_cached(SQL_GIFT),
    )?;
    let mut rooms: Vec<&str> = gifts.iter().map(|(o, _)| o.room.as_str()).collect();
    rooms.sort_unstable();
    rooms.dedup();
    let mut senders: Vec<&str> = gifts.iter().map(|(o, _)| o.sender.as_str()).collect();
    senders.sort_unstable();
    senders.dedup();
    let now = now_ms();
    let mut params = Vec::with_capacity(gifts.len());
    for (o, fence) in gifts {
        let (room, sender) = (o.room.as_str(), o.sender.as_str());
        let values = (o.to_json()?, to_sql_fence(*fence)?, o.total(), o.prize());
        params.push((room, sender, values));
    }
    // Round trip 1: the statements go out in this order and run in it.
    let p_rooms: &Params<'_> = &[&rooms];
    let p_senders: &Params<'_> = &[&senders];
    let per_gift = gifts.iter().zip(&params).map(|((o, _), p)| {
        let (room, sender, (json, f, total, prize)) = p;
        let p: [&(dyn tokio_postgres::types::ToSql + Sync); 8] =
            [&o.gift_id, room, sender, json, f, &now, total, prize];
        let s_gift = &s_gift;
        async move { tx.query_one(s_gift, &p).await }
    });
    let (wait, fences, created, locked, wait_back, answers) = tokio::join!(
        tx.query_one(&s_wait, &[&BATCH_LOCK_WAIT]),
        tx.query(&s_fences, p_rooms),
        tx.execute(&s_create, p_senders),
        tx.query(&s_lock, p_senders),
        tx.execute(&s_wait_back, &[]),
        join_all(per_gift),
    );
    // The first statement to fail names the cause; the ones after it only "aborted".
    let waited_too_long = [
        fences.as_ref().err(),
        created.as_ref().err(),
        locked.as_ref().err(),
    ]
    .into_iter()
    .flatten()
    .any(|e| e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE));
    if waited_too_long {
        return Ok(None);
    }
    wait?;
    wait_back?;
    let mut installed: BTreeMap<String, u64> = BTreeMap::new();
    for row in fences? {
        installed.insert(col(&row, 0)?, from_sql_fence(col(&row, 1)?)?);
    }
    created?;
    locked?;
    let mut writes = Writes {
        slot: row,
        ..Writes::default()
    };
    let mut results = Vec::with_capacity(gifts.len());
    for ((o, fence), answer) in gifts.iter().zip(answers) {
        let row = answer?;
        let inserted: bool = col(&row, 0)?;
        let after: Option<i64> = col(&row, 1)?;
        let before: Option<i64> = col(&row, 2)?;
        if !inserted {
            let room_fence = installed.get(o.room.as_str()).copied().unwrap_or(0);
            results.push(if *fence < room_fence {
                Err(StorageError::Fenced { token: *fence })
            } else {
                Ok(Booked::Alone)
            });
            continue;
        }
        let outcome = match after {
            Some(after) => {
                writes.settled(o, after);
                GiftOutcome::Settled {
                    order_id: o.gift_id,
                    balance: after,
                }
            }
            None => {
                let balance = before.unwrap_or(0);
                writes.refused(o, balance);
                GiftOutcome::InsufficientFunds { balance }
            }
        };
        results.push(Ok(Booked::Done(outcome)));
    }
    if !writes.is_empty() {
        write(tx, &writes, now).await?;
    }
    Ok(Some(results))
}

/// Round trip 2: the batch's writes, pipelined, rows in key order.
async fn write(tx: &Transaction<'_>, w: &Writes<'_>, now: i64) -> TxResult<()> {
    let (s_entries, s_earnings, s_ranks, s_settlements, s_marks, s_moves, s_app) = tokio::try_join!(
        tx.prepare_cached(SQL_ENTRIES),
        tx.prepare_cached(SQL_EARNINGS),
        tx.prepare_cached(SQL_RANKS),
        tx.prepare_cached(SQL_SETTLEMENTS),
        tx.prepare_cached(SQL_MARKS),
        tx.prepare_cached(SQL_MOVEMENTS),
        tx.prepare_cached(SQL_APP_RANKS),
    )?;
    let m = Columns::of(&w.movements);
    let p_moves: &Params<'_> = &[
        &m.users,
        &m.kinds,
        &m.amounts,
        &m.after,
        &m.counterparties,
        &m.keys,
        &m.at,
    ];
    let earn_users: Vec<&str> = w.earnings.keys().map(|k| k.0).collect();
    let earn_slots: Vec<i16> = w.earnings.keys().map(|k| k.1).collect();
    let earn_amounts: Vec<i64> = w.earnings.values().copied().collect();
    let rank_rooms: Vec<&str> = w.ranks.keys().map(|k| k.0).collect();
    let rank_boards: Vec<i16> = w.ranks.keys().map(|k| k.1).collect();
    let rank_days: Vec<i64> = w.ranks.keys().map(|k| k.2).collect();
    let rank_users: Vec<&str> = w.ranks.keys().map(|k| k.3).collect();
    let rank_slots: Vec<i16> = w.ranks.keys().map(|k| k.4).collect();
    let rank_totals: Vec<i64> = w.ranks.values().copied().collect();
    let p_entries: &Params<'_> = &[
        &w.entry_users,
        &w.entry_ids,
        &w.entry_kinds,
        &w.entry_amounts,
        &w.entry_after,
        &now,
    ];
    let p_earnings: &Params<'_> = &[&earn_users, &earn_slots, &earn_amounts];
    let p_ranks: &Params<'_> = &[
        &rank_rooms,
        &rank_boards,
        &rank_days,
        &rank_users,
        &rank_slots,
        &rank_totals,
    ];
    let p_settlements: &Params<'_> = &[
        &w.settled_ids,
        &w.settled_rooms,
        &w.settled_platform,
        &w.settled_lucky,
    ];
    let p_marks: &Params<'_> = &[
        &w.mark_ids,
        &w.mark_states,
        &w.mark_after,
        &w.mark_reasons,
        &now,
    ];
    let app = AppRankColumns::of(w.app_ranks.iter().map(|(k, t)| (k.0, k.1, k.2, k.3, *t)));
    let p_app: &Params<'_> = &[
        &app.boards,
        &app.spans,
        &app.starts,
        &app.users,
        &app.totals,
    ];
    let settles = !w.settled_ids.is_empty();
    // The app boards' rows go last: a popular host's are locked until the commit.
    let (entries, earnings, ranks, settlements, marked, moves, app_ranks) = tokio::join!(
        tx.execute(&s_entries, p_entries),
        async {
            if settles && !earn_users.is_empty() {
                tx.execute(&s_earnings, p_earnings).await
            } else {
                Ok(0)
            }
        },
        async {
            if settles {
                tx.execute(&s_ranks, p_ranks).await
            } else {
                Ok(0)
            }
        },
        async {
            if settles {
                tx.execute(&s_settlements, p_settlements).await
            } else {
                Ok(0)
            }
        },
        tx.execute(&s_marks, p_marks),
        async {
            if settles {
                tx.execute(&s_moves, p_moves).await
            } else {
                Ok(0)
            }
        },
        async {
            if settles && !app.is_empty() {
                tx.execute(&s_app, p_app).await
            } else {
                Ok(0)
            }
        },
    );
    // In the order the statements went out: after the first failure the rest answer only
    // "transaction aborted" (25P02), so the first is the one that says what happened (and
    // whether it may run again: a deadlock or a serialization failure).
    entries?;
    earnings?;
    ranks?;
    settlements?;
    let marked = marked?;
    moves?;
    app_ranks?;
    if marked != w.mark_ids.len() as u64 {
        // Every saga marked was inserted by this transaction: fail, so none of it is kept.
        return Err(Fail::Store(StorageError::corrupt_msg(format!(
            "{marked} of {} sagas marked in a gift batch",
            w.mark_ids.len()
        ))));
    }
    Ok(())
}
