//! Room changes on Redis, several rooms to a script call: one `EVALSHA` (one request, one
//! reply, one wake-up of Redis and of the writer) for a whole batch instead of for each chat
//! line.
//!
//! Changes wait in a queue; a writer takes whatever has queued (up to [`MAX_BATCH`]) once the
//! previous call has been answered and at least the write interval has passed since it
//! started ([`DEFAULT_INTERVAL`]). A change after a quiet spell goes at once; under load the
//! calls are paced, one per interval, and a change waits at most that long for its call. A
//! busy room's change (its room has more waiting behind it) does not wait: a room writes one
//! change at a time, so pacing would hold a busy room to one change per interval. With a zero
//! interval a call goes as soon as the previous one is answered. Every room is fenced on its
//! own inside the script: a stale token refuses that room's change alone, and each room's
//! change is still all or none. A failed call (a lost connection, a time-out, Redis out of
//! memory) fails every change of its batch with the same error; each room then stops as it
//! would after its own failed write.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ::redis::Script;
use ::redis::aio::ConnectionManager;
use protocol::{FencingToken, RoomId};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use uuid::Uuid;

use super::super::{history_key, open_gifts_key, state_key};
use super::fenced_status;
use crate::error::{Result, StorageError};
use crate::lease::lease_key;
use crate::redis::map_err;

/// Most rooms in one script call: bounds the call's arguments and how long it holds Redis.
pub(super) const MAX_BATCH: usize = 64;
/// Changes that may wait for a call before their rooms wait to queue theirs.
const QUEUE: usize = 8 * MAX_BATCH;
/// The write interval unless configured: a millisecond is nothing next to a chat line's
/// delivery budget, and under load it puts several changes in each call (BENCHMARKS.md,
/// K1 and K2).
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(1);
/// Histogram of the rooms each answered call held.
pub const METRIC_HISTORY_BATCH_ROOMS: &str = "chorus_history_batch_rooms";

/// CHANGES: for each room, `KEYS` `[lease, state, history, open_gifts]` and the `ARGV` segment
/// `[fence, max_len, has_state ('0' or '1'), data, closed_count, entry_count, closed…,
/// entry…]`. Answers one status per room: 1 written, -1 the lease does not carry the fence,
/// -2 a higher token already wrote. Per room it writes only what changes: `hwm` when the fence
/// raises it (every token is written as the same decimal text, so equal text is the equal
/// token), and a trim only past `max_len + max_len / 8`, back to `max_len`: a full history
/// is trimmed once per `max_len / 8 + 1` pushes, not on every push (on an idle Redis a trim
/// per push was a third of the script's time; docs/BENCHMARKS-LOG.md). Every room's state and
/// events are written before any gift is closed: a Redis over its memory limit refuses a
/// script whose first write adds memory and lets one go on once it wrote, so a call with
/// events is refused whole when Redis is full, never written after a first `SREM`.
pub(super) const CHANGES_LUA: &str = r"
local statuses, closing, a = {}, {}, 1
for r = 1, #KEYS / 4 do
  local k = 4 * (r - 1)
  local fence = ARGV[a]
  local closed, entries = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local first = a + 6
  local status = 1
  if redis.call('HGET', KEYS[k + 1], 'fence') ~= fence then
    status = -1
  else
    local hwm = redis.call('HGET', KEYS[k + 2], 'hwm')
    if hwm and tonumber(fence) < tonumber(hwm) then
      status = -2
    else
      if ARGV[a + 2] == '1' then
        redis.call('HSET', KEYS[k + 2], 'hwm', fence, 'fence', fence, 'data', ARGV[a + 3])
      elseif hwm ~= fence then
        redis.call('HSET', KEYS[k + 2], 'hwm', fence)
      end
      if entries > 0 then
        local from = first + closed
        local len = redis.call('RPUSH', KEYS[k + 3], unpack(ARGV, from, from + entries - 1))
        local max = tonumber(ARGV[a + 1])
        if len > max + math.floor(max / 8) then
          redis.call('LTRIM', KEYS[k + 3], -max, -1)
        end
      end
      if closed > 0 then
        closing[#closing + 1] = {k + 4, first, first + closed - 1}
      end
    end
  end
  statuses[r] = status
  a = first + closed + entries
end
for _, c in ipairs(closing) do
  redis.call('SREM', KEYS[c[1]], unpack(ARGV, c[2], c[3]))
end
return statuses
";

/// One room's change, owned so that it can wait in the queue.
pub(super) struct Job {
    pub(super) room: RoomId,
    pub(super) fence: FencingToken,
    pub(super) max_len: usize,
    /// Sent without waiting out the interval (see `Change::more_waiting`).
    pub(super) more_waiting: bool,
    pub(super) state: Option<Vec<u8>>,
    pub(super) closed: Vec<Uuid>,
    /// Encoded history entries (`super::super::encode_entry`).
    pub(super) entries: Vec<Vec<u8>>,
}

/// The queue into the writer. The writer stops when the last clone is dropped.
#[derive(Clone)]
pub(super) struct Batcher {
    queue: mpsc::Sender<(Job, oneshot::Sender<Result<()>>)>,
    stats: Arc<Stats>,
}

/// Calls answered and the rooms they held, since start.
#[derive(Default)]
struct Stats {
    calls: AtomicU64,
    rooms: AtomicU64,
}

impl Batcher {
    /// Starts the writer on the current runtime.
    pub(super) fn start(conn: ConnectionManager, script: Script, interval: Duration) -> Self {
        let (queue, rx) = mpsc::channel(QUEUE);
        let stats = Arc::new(Stats::default());
        tokio::spawn(write(conn, script, interval, rx, Arc::clone(&stats)));
        Self { queue, stats }
    }

    /// `(calls, rooms)` answered since start.
    pub(super) fn stats(&self) -> (u64, u64) {
        (
            self.stats.calls.load(Ordering::Relaxed),
            self.stats.rooms.load(Ordering::Relaxed),
        )
    }

    /// Writes `job` in the next call; answers once that call has been answered. A full queue
    /// makes the caller wait for room in it: the rooms then wait for Redis, as they would
    /// each on its own call.
    pub(super) async fn write(&self, job: Job) -> Result<()> {
        let (reply, answer) = oneshot::channel();
        let gone = || StorageError::unavailable_msg("redis: the history writer has stopped");
        self.queue.send((job, reply)).await.map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// Takes queued changes into calls, one call at a time, at most one per `interval`.
async fn write(
    mut conn: ConnectionManager,
    script: Script,
    interval: Duration,
    mut rx: mpsc::Receiver<(Job, oneshot::Sender<Result<()>>)>,
    stats: Arc<Stats>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut last_call: Option<Instant> = None;
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        // Within `interval` of the last call, wait out the rest of it: what queues meanwhile
        // shares this call. After a quiet spell the change goes at once, and so does a call
        // that carries a busy room's change: its next change waits for this one.
        if let Some(next) = last_call.map(|t| t + interval)
            && batch.len() < MAX_BATCH
            && Instant::now() < next
            && !batch.iter().any(|(job, _)| job.more_waiting)
        {
            tokio::time::sleep_until(next).await;
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
        }
        last_call = Some(Instant::now());
        let answers = call(&mut conn, &script, &batch).await;
        stats.calls.fetch_add(1, Ordering::Relaxed);
        stats.rooms.fetch_add(batch.len() as u64, Ordering::Relaxed);
        metrics::histogram!(METRIC_HISTORY_BATCH_ROOMS).record(batch.len() as f64);
        match answers {
            Ok(statuses) => {
                for ((job, reply), status) in batch.drain(..).zip(statuses) {
                    let _ = reply.send(fenced_status(status, job.fence));
                }
            }
            Err(e) => {
                for (_, reply) in batch.drain(..) {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// One script call for `batch`: a status per room, in order.
async fn call(
    conn: &mut ConnectionManager,
    script: &Script,
    batch: &[(Job, oneshot::Sender<Result<()>>)],
) -> Result<Vec<i64>> {
    let mut call = script.prepare_invoke();
    for (job, _) in batch {
        call.key(lease_key(&job.room))
            .key(state_key(&job.room))
            .key(history_key(&job.room))
            .key(open_gifts_key(&job.room))
            .arg(job.fence)
            .arg(job.max_len)
            .arg(if job.state.is_some() { "1" } else { "0" })
            .arg(job.state.as_deref().unwrap_or_default())
            .arg(job.closed.len())
            .arg(job.entries.len());
        for gift in &job.closed {
            call.arg(gift.as_bytes().as_slice());
        }
        for entry in &job.entries {
            call.arg(entry.as_slice());
        }
    }
    let statuses: Vec<i64> = call.invoke_async(conn).await.map_err(map_err)?;
    if statuses.len() != batch.len() {
        return Err(StorageError::corrupt_msg(format!(
            "{} statuses for a batch of {} changes",
            statuses.len(),
            batch.len()
        )));
    }
    Ok(statuses)
}
