//! Gifts in the room actor: validate, take the order, drive the saga next to the inbox, and
//! publish the `gift` event only after the debit committed. Plus the owner-only recovery of
//! sagas a previous runtime left unfinished (docs/ARCHITECTURE.md, section 8: recovery is owner-only, a
//! conflict is retried, never compensated).

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use protocol::client::{self, GiftEvent, GiftSend, GiftSent, LuckyWinEvent, Profile, RoomOp};
use protocol::link::{Command, ReplyError, RoomCmd};
use protocol::{ErrorCode, FencingToken, RoomId};
use storage::StorageError;
use storage::ledger::{
    FenceInstall, GiftIds, GiftOrder, GiftOutcome, GiftResult, LuckyPrize, SagaState, gift_ids,
    now_ms,
};

use tracing::{info, warn};
use uuid::Uuid;

use super::RoomActor;
use super::state::{Applied, Rejected, Sequenced, SessionRef};
use crate::Inner;
use crate::gifts::GiftKind;
use crate::metrics as m;

mod nonowner;
mod opener;
mod saga;
mod sweep;
pub(crate) use opener::Opener;
use saga::{Crash, SagaStart, saga};
use sweep::RECOVERY_MIN_AGE_MS;
pub(crate) use sweep::{Sweep, sweep_orphans};

/// Gift ids whose saga a runtime is driving now.
pub(crate) type InFlight = Arc<Mutex<HashSet<Uuid>>>;

/// One gift saga, from the ledger call to its outcome.
type Saga = Pin<Box<dyn Future<Output = GiftDone> + Send>>;

/// The gift sagas a room runtime is driving. The room actor polls them itself, next to its
/// inbox: no task per gift, and the outcome needs no trip through the inbox. The ledger does
/// the work on its own thread, so a saga only needs polling to hand its job over and to take
/// the answer. When the runtime stops, the sagas still running move to one task of their own
/// ([`Sagas::finish_without_room`]): their coins may move, so their senders still get answers.
/// The set is made by the room's first gift: a room nobody sends gifts in holds none.
#[derive(Default)]
pub(crate) struct Sagas(Option<FuturesUnordered<Saga>>);

impl Sagas {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(FuturesUnordered::is_empty)
    }

    fn push(&mut self, saga: Saga) {
        self.0.get_or_insert_with(FuturesUnordered::new).push(saga);
    }

    /// The next saga to finish; `None` at once when none is running.
    pub(crate) async fn next(&mut self) -> Option<GiftDone> {
        match &mut self.0 {
            Some(sagas) => sagas.next().await,
            None => None,
        }
    }

    /// Answers every saga still running once it finishes, on a task of its own.
    pub(crate) fn finish_without_room(&mut self, inner: &Arc<Inner>, in_flight: &InFlight) {
        if self.is_empty() {
            return;
        }
        let Some(mut sagas) = self.0.take() else {
            return;
        };
        let inner = inner.clone();
        let in_flight = in_flight.clone();
        inner.clone().tracker.spawn(async move {
            while let Some(done) = sagas.next().await {
                done.leave(&in_flight);
                reply_without_room(&inner, done).await;
            }
        });
    }
}

impl std::fmt::Debug for Sagas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Sagas({})",
            self.0.as_ref().map_or(0, FuturesUnordered::len)
        )
    }
}

/// Refused gifts a runtime lets wait for its next write before it closes them in a write of
/// their own ([`RoomActor::flush_closing`]).
const CLOSE_BATCH: usize = 32;
/// Attempts of a saga step on a retryable ledger error before the client is told to retry.
const SAGA_ATTEMPTS: u32 = 5;
/// First pause between saga attempts; doubles per attempt.
const SAGA_RETRY_DELAY: Duration = Duration::from_millis(20);

/// The outcome of one gift saga, for the room actor (or, once it stopped, a direct reply).
#[derive(Debug)]
pub(crate) struct GiftDone {
    /// Boxed, as it came through the inbox: the saga's box stays under glibc's 1,000-byte
    /// threshold (see [`saga()`]).
    cmd: Box<Command>,
    /// The gift id the saga was started under (in [`InFlight`] until it is done).
    key: Uuid,
    /// The order booked: the saga's own, or the one a request booked under its legacy id.
    order: GiftOrder,
    /// Whether this saga opened the gift in the fenced store (cluster): then that open record
    /// stands for the gift's event until a write publishes it (see
    /// [`storage::snapshot::SnapshotStore::open_batch`]).
    opened: bool,
    outcome: Result<GiftOutcome, StorageError>,
}

impl GiftDone {
    /// Takes the saga's gift ids out of the in-flight set.
    fn leave(&self, in_flight: &InFlight) {
        let mut set = lock(in_flight);
        set.remove(&self.key);
        set.remove(&self.order.gift_id);
    }
}

fn lock(f: &InFlight) -> std::sync::MutexGuard<'_, HashSet<Uuid>> {
    f.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Installs `fence` as the room's durable high-water mark in the ledger. `Ok(true)` when the
/// room never had an owner there: no saga can exist for it, so there is nothing to recover.
pub(crate) async fn install_fence(
    inner: &Arc<Inner>,
    room: &RoomId,
    fence: FencingToken,
) -> Result<bool, ()> {
    let Some(ledger) = &inner.ledger else {
        return Ok(false);
    };
    match ledger
        .install_fence(room, fence, inner.owner.owner_id())
        .await
    {
        Ok(FenceInstall::First) => Ok(true),
        Ok(FenceInstall::Installed) => Ok(false),
        Ok(FenceInstall::Stale { current }) => {
            // The lease store handed out a token the ledger has already seen (e.g. Redis lost
            // its counters): never run with it. The next claim starts above `current`.
            warn!(%room, fence, current, "Lease token below the ledger's fence; refusing it.");
            inner.owner.raise_floor(room, current);
            Err(())
        }
        Err(e) => {
            warn!(%room, fence, error = %e, "Could not install the fence in the ledger.");
            Err(())
        }
    }
}

/// Answers a gift whose room stopped before the outcome arrived. A gift settled just now
/// had no room to publish its event: the room's next owner publishes it, found open in the
/// fenced store (cluster) or recorded in the ledger here.
pub(crate) async fn reply_without_room(inner: &Arc<Inner>, done: GiftDone) {
    if let Ok(GiftOutcome::Settled { .. }) = &done.outcome {
        event_not_published(inner, &done.order.room, done.order.gift_id, done.opened).await;
    }
    let outcome = outcome_reply(&done.order, &done.outcome);
    inner.reply_direct(&done.cmd, outcome, None).await;
}

/// Records in the ledger that the room owes the event of a settled gift it could not publish
/// ([`Ledger::mark_unpublished`]): the room's next owner publishes it (its sweep at load, or
/// the orphan sweep). Money never waits for this; a gift is settled whatever its event does.
///
/// [`Ledger::mark_unpublished`]: storage::ledger::Ledger::mark_unpublished
pub(crate) async fn owe_event(inner: &Inner, room: &RoomId, gift_id: Uuid) {
    let Some(ledger) = &inner.ledger else {
        return;
    };
    match ledger.mark_unpublished(gift_id).await {
        Ok(()) => {
            metrics::counter!(m::GIFT_EVENTS_OWED).increment(1);
            info!(%room, order = %gift_id, "Gift event not published; recorded for the next owner.");
        }
        Err(e) => {
            metrics::counter!(m::GIFT_EVENTS_LOST).increment(1);
            warn!(%room, order = %gift_id, error = %e, "Gift event neither published nor recorded.");
        }
    }
}

/// A settled gift whose event its runtime could not publish. One that is open in the fenced
/// store (`open`, cluster) stays open: the room's next runtime finds it there and publishes it
/// ([`RoomActor::publish_left_open`]), and only that runtime does (a ledger record as well would
/// be a second source, and the event could be published twice). Any other is recorded in the
/// ledger ([`owe_event`]).
pub(super) async fn event_not_published(inner: &Inner, room: &RoomId, gift_id: Uuid, open: bool) {
    if open {
        metrics::counter!(m::GIFT_EVENTS_LEFT_OPEN).increment(1);
        info!(%room, order = %gift_id, "Gift event not published; left open for the next runtime.");
    } else {
        owe_event(inner, room, gift_id).await;
    }
}

/// A fingerprint of a `gift.send` as the client sent it: room, gift, count, and the targets
/// as named (the users sorted, or the word), so that a retry matches however the room changed.
fn request_fingerprint(room: &protocol::RoomId, g: &GiftSend) -> u64 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [room.as_str(), g.gift.as_str(), &g.count.to_string()] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    match &g.to {
        protocol::client::GiftTargets::Users(users) => {
            let mut users: Vec<&str> = users.iter().map(protocol::UserId::as_str).collect();
            users.sort_unstable();
            users.dedup();
            for u in users {
                h.update(u.as_bytes());
                h.update([1]);
            }
        }
        protocol::client::GiftTargets::Seated(word) => {
            h.update(word.as_bytes());
            h.update([2]);
        }
    }
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    // Never 0, which stands for "no fingerprint".
    u64::from_le_bytes(first).max(1)
}

/// Whether a stored order's request fingerprint names another request than `ours` (orders
/// stored before fingerprints existed, fingerprint 0, match anything).
pub(super) fn reused(stored: u64, ours: u64) -> bool {
    stored != 0 && ours != 0 && stored != ours
}

/// A gift request the room could not take, to look up in the ledger as a retry.
struct Asked {
    /// The order's gift id, and the one it had before time-ordered ids (if it may exist).
    id: Uuid,
    legacy: Option<Uuid>,
    /// The room the request came to, and its fingerprint.
    room: RoomId,
    request: u64,
}

/// The answer to a request the room refused (`rejected`) but the ledger may hold as an
/// order booked earlier: that order's first result, `IDEMPOTENCY_CONFLICT` when the order was
/// booked for another request, or `rejected` when there is none.
async fn answer_from_ledger(
    ledger: &storage::ledger::Ledger,
    asked: &Asked,
    rejected: Rejected,
) -> Result<Bytes, ReplyError> {
    let found = match ledger.saga(asked.id).await {
        Ok(None) => ledger.legacy_saga(asked.legacy).await,
        other => other,
    };
    match found {
        // Another room's order is another request, also one stored without a fingerprint
        // (which matches any): the check the saga makes with `same_request_as`.
        Ok(Some(rec))
            if rec.order.room != asked.room || reused(rec.order.request, asked.request) =>
        {
            Err(conflict_error())
        }
        Ok(Some(rec)) => match rec.result() {
            Some(result) => {
                outcome_reply(&rec.order, &Ok(GiftOutcome::Duplicate { first: result }))
            }
            None => Err(ReplyError::new(
                ErrorCode::Unavailable,
                "the order is still being settled; retry with the same req_id",
            )),
        },
        _ => Err(ReplyError::new(rejected.code, rejected.msg)),
    }
}

/// An order whose numbers the ledger would refuse (or could not count).
fn invalid_order() -> Rejected {
    super::state::rejected(ErrorCode::BadRequest, "invalid gift order")
}

fn conflict_error() -> ReplyError {
    ReplyError::new(
        ErrorCode::IdempotencyConflict,
        "req_id already used for another gift; send with a new req_id",
    )
}

fn outcome_reply(
    order: &GiftOrder,
    outcome: &Result<GiftOutcome, StorageError>,
) -> Result<Bytes, ReplyError> {
    match outcome {
        Ok(o) => match o.result() {
            GiftResult::Settled { order_id, balance } => {
                Ok(Bytes::from(client::to_json(&GiftSent {
                    order: order_id,
                    balance,
                })))
            }
            GiftResult::InsufficientFunds { balance } => Err(ReplyError::new(
                ErrorCode::InsufficientFunds,
                format!("balance {balance} does not cover {}", order.total()),
            )),
            GiftResult::Voided => Err(ReplyError::new(
                ErrorCode::GiftVoided,
                "the order was cancelled before any coin moved; send again with a new req_id",
            )),
        },
        Err(StorageError::Fenced { .. }) => Err(ReplyError::new(
            ErrorCode::Unavailable,
            "room ownership moved; retry with the same req_id",
        )),
        Err(StorageError::Reused { .. }) => Err(conflict_error()),
        Err(e) if e.is_retryable() => Err(ReplyError::new(
            ErrorCode::Unavailable,
            "ledger busy; retry with the same req_id",
        )),
        // A caller's mistake is the client's to fix; anything else is ours and says no more.
        Err(e) if e.code() == ErrorCode::BadRequest => {
            Err(ReplyError::new(ErrorCode::BadRequest, e.to_string()))
        }
        Err(e) => {
            warn!(error = %e, "Gift failed.");
            Err(ReplyError::new(ErrorCode::Internal, "internal error"))
        }
    }
}

impl RoomActor {
    /// Takes a `gift.send` and starts its saga (the reply comes with the outcome), or answers
    /// at once when the order is refused. The command moves into the saga, which keeps it for
    /// the reply.
    pub(super) async fn take_gift(&mut self, cmd: Box<Command>, at: &SessionRef) {
        let order = match &cmd.cmd {
            RoomCmd::Op(RoomOp::Gift(g)) => self.gift_order(&cmd, at, g),
            _ => Err(super::state::rejected(
                ErrorCode::BadRequest,
                "not a gift.send",
            )),
        };
        match order {
            Ok(Some((order, legacy, ledger))) => self.start_saga(cmd, order, legacy, ledger),
            Ok(None) => {}
            Err(r) => {
                let err = ReplyError::new(r.code, r.msg);
                self.reply(&cmd, Err(err), None).await;
            }
        }
    }

    /// The order of a `gift.send`, its legacy gift id (when the ledger may hold a saga under it,
    /// see [`GiftIds`]) and the ledger that books it, or `None` when the request was answered from the ledger (a retry of an order
    /// booked earlier).
    #[allow(
        clippy::type_complexity,
        reason = "a private triple, named where it is taken apart"
    )]
    fn gift_order(
        &self,
        cmd: &Command,
        at: &SessionRef,
        g: &GiftSend,
    ) -> Result<Option<(GiftOrder, Option<Uuid>, storage::ledger::Ledger)>, Rejected> {
        let Some(ledger) = &self.inner.ledger else {
            return Err(super::state::rejected(
                ErrorCode::Unavailable,
                "gifts are not enabled on this node",
            ));
        };
        let catalog = &self.inner.config.catalog;
        let Some(def) = catalog.get(&g.gift) else {
            return Err(super::state::rejected(
                ErrorCode::BadRequest,
                "no such gift",
            ));
        };
        if !client::is_valid_req_id(&g.req_id) {
            return Err(super::state::rejected(
                ErrorCode::BadRequest,
                "req_id must be 1..=128 bytes of printable ASCII (0x21..=0x7E)",
            ));
        }
        let Some(state) = &self.state else {
            return Err(super::state::rejected(
                ErrorCode::RoomNotFound,
                "no such room",
            ));
        };
        let GiftIds { id, legacy } = gift_ids(&cmd.user, &g.req_id);
        let request = request_fingerprint(&self.room, g);
        // Only a ledger from before time-ordered ids may hold a saga under the legacy one.
        let legacy = legacy.filter(|_| ledger.may_hold_legacy_gift_ids());
        let recipients = match state.gift_recipients(&cmd.user, at, &g.to, g.count) {
            Ok(r) => r,
            Err(rejected)
                if matches!(rejected.code, ErrorCode::BadRequest | ErrorCode::NotInRoom) =>
            {
                // A retry of an order booked earlier gets its first result even if the room
                // changed since (a recipient left) or the sender is no longer in it (it
                // reconnected and retries before rejoining): look the order up before
                // refusing.
                self.answer_from_ledger_or(cmd, id, legacy, request, rejected, ledger.clone());
                return Ok(None);
            }
            Err(rejected) => return Err(rejected),
        };
        // Checked: the catalog bounds no price, and an order whose cost or prize does not fit
        // in the coins' integer is refused, never booked wrapped (a wrapped prize could be
        // any number of coins; `validate` refuses a cost that does not fit).
        let n = i64::try_from(recipients.len()).unwrap_or(i64::MAX);
        let paid = def
            .price
            .checked_mul(i64::from(g.count))
            .and_then(|p| p.checked_mul(n));
        let lucky = match (def.kind, paid) {
            (GiftKind::Lucky, Some(paid)) => {
                let multiplier = catalog.lucky_multiplier(id.as_bytes());
                match paid.checked_mul(i64::from(multiplier)) {
                    Some(coins) => Some(LuckyPrize { multiplier, coins }),
                    None => return Err(invalid_order()),
                }
            }
            (GiftKind::Lucky, None) => return Err(invalid_order()),
            (GiftKind::Normal, _) => None,
        };
        let order = GiftOrder {
            gift_id: id,
            sender: cmd.user.clone(),
            room: self.room.clone(),
            gift: def.id.as_str().into(),
            count: g.count,
            unit_price: def.price,
            recipients,
            share_bp: catalog.share_bp,
            lucky,
            created_ms: now_ms(),
            request,
        };
        if order.validate().is_err() {
            return Err(invalid_order());
        }
        Ok(Some((order, legacy, ledger.clone())))
    }

    /// Starts the saga of a validated order; the actor polls it (see [`Sagas`]).
    fn start_saga(
        &mut self,
        cmd: Box<Command>,
        order: GiftOrder,
        legacy: Option<Uuid>,
        ledger: storage::ledger::Ledger,
    ) {
        lock(&self.in_flight).insert(order.gift_id);
        let config = &self.inner.config;
        let crash = if config.test_crash_after_debit {
            Crash::AfterDebit
        } else if config.test_crash_after_settle {
            Crash::AfterSettle
        } else {
            Crash::No
        };
        let start = SagaStart {
            cmd,
            order,
            legacy,
            ledger,
            fence: self.fence,
            in_flight: self.in_flight.clone(),
            open_in: config.durable_history.then(|| self.opener()),
            crash,
        };
        self.sagas.push(Box::pin(saga(start)));
    }

    /// The runtime's [`Opener`], started with its first gift.
    fn opener(&mut self) -> Opener {
        self.opener
            .get_or_insert_with(|| Opener::start(&self.inner, self.room.clone(), self.fence))
            .clone()
    }

    fn answer_from_ledger_or(
        &self,
        cmd: &Command,
        id: Uuid,
        legacy: Option<Uuid>,
        request: u64,
        rejected: Rejected,
        ledger: storage::ledger::Ledger,
    ) {
        let inner = self.inner.clone();
        let cmd = cmd.clone();
        let room = self.room.clone();
        self.inner.tracker.spawn(async move {
            let asked = Asked {
                id,
                legacy,
                room,
                request,
            };
            let reply = answer_from_ledger(&ledger, &asked, rejected).await;
            inner.reply_direct(&cmd, reply, None).await;
        });
    }

    /// Publishes a settled gift (first time only) and answers the sender.
    pub(super) async fn gift_done(&mut self, done: GiftDone) {
        done.leave(&self.in_flight);
        if done.outcome.is_err() && self.sweep.failed(now_ms()) {
            self.spawn_sweep(RECOVERY_MIN_AGE_MS, true);
        }
        if let Err(StorageError::Fenced { token }) = &done.outcome {
            // A higher token wrote (the fenced store or the ledger): another runtime owns
            // the room now.
            warn!(room = %self.room, token, "Gift fenced; stopping the runtime.");
            self.lease.cancel();
        }
        let reply = outcome_reply(&done.order, &done.outcome);
        let GiftDone {
            cmd,
            order,
            opened,
            outcome,
            ..
        } = done;
        let repeat = matches!(outcome, Ok(GiftOutcome::Duplicate { .. }))
            .then_some((order.gift_id, order.request));
        match &outcome {
            Ok(GiftOutcome::Settled { .. }) => {
                self.inner.hot.gifts_settled.increment(1);
                self.publish_gift(order, opened).await;
            }
            // Refused, a retry of an order settled before, or a request id the ledger holds
            // for another gift (maybe another room's): no event of this call's to publish.
            // Its open record goes with the room's next write. Any other error leaves it
            // open: the next runtime asks the ledger how the gift ended.
            Ok(_) | Err(StorageError::Reused { .. }) if opened => {
                self.closing.push(order.gift_id);
                // A retry of a settled order closes its record at once: left open, a stop
                // before the next write would have the next runtime publish its event again.
                if self.closing.len() >= CLOSE_BATCH || repeat.is_some() {
                    self.flush_closing().await;
                }
            }
            _ => {}
        }
        if let Ok(GiftOutcome::Duplicate {
            first: GiftResult::Settled { .. },
        }) = &outcome
        {
            // A retry may have finished a saga an earlier attempt left open, and the ledger
            // then owes its event: the sweep publishes it now, not at the next orphan sweep.
            self.sweep_now();
        }
        if let (Some((gift_id, request)), Some(ledger)) = (repeat, &self.inner.ledger) {
            // A repeated request id: a retry gets the first result, a reuse for another gift
            // a conflict. The stored order tells; its read is off the room's loop.
            self.answer_repeat(cmd, gift_id, request, reply, ledger.clone());
            return;
        }
        self.reply(&cmd, reply, None).await;
    }

    /// Answers a request whose id the ledger had booked already: its first result when it is
    /// the same request (a retry), `IDEMPOTENCY_CONFLICT` when the booked order came from
    /// another one.
    fn answer_repeat(
        &self,
        cmd: Box<Command>,
        gift_id: Uuid,
        request: u64,
        first: Result<Bytes, ReplyError>,
        ledger: storage::ledger::Ledger,
    ) {
        let inner = self.inner.clone();
        self.inner.tracker.spawn(async move {
            let reply = match ledger.saga(gift_id).await {
                Ok(Some(rec)) if reused(rec.order.request, request) => Err(conflict_error()),
                _ => first,
            };
            inner.reply_direct(&cmd, reply, None).await;
        });
    }

    /// Publishes a gift the owner's recovery settled, or whose event a runtime owed.
    pub(super) async fn gift_recovered(&mut self, order: GiftOrder) {
        self.publish_gift(order, false).await;
    }

    /// Publishes a settled order; the event takes the order's fields rather than copies. When
    /// the runtime cannot publish it (it cannot prove its lease, or the history write failed and
    /// it stops), the event is owed to the members: `open` (the gift is open in the fenced
    /// store) leaves it to the next runtime's [`RoomActor::publish_left_open`], otherwise it is
    /// recorded in the ledger for the next owner ([`owe_event`]). In a cluster the write that
    /// publishes the event closes the gift's open record (a no-op for one never opened).
    async fn publish_gift(&mut self, order: GiftOrder, open: bool) {
        if self.state.is_none() {
            return;
        }
        let order_id = order.gift_id;
        if !self.inner.owner.proven(&self.valid) {
            event_not_published(&self.inner, &self.room, order_id, open).await;
            return;
        }
        self.notify_gift(&order);
        let Some(state) = self.state.as_mut() else {
            return;
        };
        let coins = order.total();
        let win = order
            .lucky
            .filter(|l| l.multiplier >= self.inner.config.catalog.big_win_multiplier)
            .map(|l| LuckyWinEvent {
                order: order_id,
                user: order.sender.clone(),
                multiplier: l.multiplier,
                coins: l.coins,
            });
        // The sender's spend moves their VIP level (shown with `member.update` on a change);
        // the event carries the badges as they are now.
        let now = super::now_ms();
        let vip_moved = state.add_spent(&order.sender, coins, now);
        let badges = state.badges(&order.sender, now);
        // Profiles of the sender and recipients still in the room (one clone each).
        let p = state.profile_of(&order.sender).map(|p| Profile::clone(p));
        let to_p = order
            .recipients
            .iter()
            .filter_map(|u| state.profile_of(u).map(|p| (u.clone(), Profile::clone(p))))
            .collect();
        let gift = GiftEvent {
            order: order_id,
            robot: order.sender.is_robot(),
            p,
            guard: badges.guard,
            vip: badges.vip,
            to_p,
            from: order.sender,
            to: order.recipients,
            gift: order.gift.into_string(),
            count: order.count,
            coins,
            lucky_multiplier: order.lucky.map(|l| l.multiplier),
            combo: None,
        };
        // Numbered in its streak; in a storm held back for a merged event (see `storm`). The
        // orders published now fuel the room rocket in the same change; a held one fuels it
        // with the write of its merged event, so an order never published is fuel only once,
        // when the room's next runtime publishes it.
        let published = state.record_gift(gift, open, now);
        let moved = (published.fuelled, published.pk_scored);
        let mut applied = published.applied;
        applied.presence.extend(vip_moved.presence);
        if let Some(win) = win {
            applied
                .events
                .extend(state.record(Sequenced::LuckyWin(win)).events);
        }
        // The gift is settled in the ledger whatever happens to its event: a runtime that
        // cannot publish it stops, the sender's answer still says settled, and the event is
        // owed to the room's next runtime.
        self.publish_gifts(applied, published.orders).await;
        self.gifts_moved(moved.0, moved.1);
    }

    /// At load, before the room serves (cluster): publishes the events of the gifts a previous
    /// runtime left open and the ledger settled (it was killed, or could not write, between
    /// the two), and closes the open records of gifts the ledger refused or never booked. The
    /// ledger's fence, installed before this, keeps a previous runtime from booking one now.
    /// A gift still mid-saga stays open: the saga sweep settles or voids it. One the ledger
    /// also lists as owed is left to the sweep, which publishes that record once. One whose
    /// event the room's history holds already is closed, not published again.
    pub(super) async fn publish_left_open(&mut self) {
        let Some(ledger) = self.inner.ledger.clone() else {
            return;
        };
        if !self.inner.config.durable_history || self.state.is_none() {
            return;
        }
        let open = match self.inner.snapshots.store().open_gifts(&self.room).await {
            Ok(open) => open,
            Err(e) => {
                warn!(room = %self.room, error = %e, "Could not list the room's open gifts.");
                return;
            }
        };
        if open.is_empty() {
            return;
        }
        let owed: HashSet<Uuid> = match ledger.unpublished_gifts(&self.room, 0).await {
            Ok(owed) => owed.iter().map(|o| o.gift_id).collect(),
            Err(e) => {
                warn!(room = %self.room, error = %e, "Could not list owed gift events.");
                return;
            }
        };
        for gift_id in open.into_iter().filter(|g| !owed.contains(g)) {
            match ledger.saga(gift_id).await {
                // Another room's gift under a request id reused here: not this room's to
                // publish (older builds left such records open).
                Ok(Some(rec)) if rec.order.room != self.room => self.closing.push(gift_id),
                Ok(Some(rec)) => match rec.state {
                    // Its event is in the room's history: published, and the record opened
                    // again by a retry of the request that no write closed before the stop.
                    SagaState::Settled if self.log.names_order(&gift_id) => {
                        self.closing.push(gift_id);
                    }
                    SagaState::Settled => {
                        metrics::counter!(m::GIFT_EVENTS_FOUND_OPEN).increment(1);
                        info!(room = %self.room, order = %gift_id, "Publishing a gift event a previous runtime left open.");
                        self.publish_gift(rec.order, true).await;
                        if self.lease.is_cancelled() {
                            return;
                        }
                    }
                    SagaState::Voided => self.closing.push(gift_id),
                    SagaState::Pending | SagaState::Debited => {}
                },
                Ok(None) => self.closing.push(gift_id),
                Err(e) => {
                    warn!(room = %self.room, order = %gift_id, error = %e, "Could not read an open gift's saga.")
                }
            }
        }
        self.flush_closing().await;
    }

    /// Closes the open gifts waiting for the room's next write now, in a write of their own
    /// (an empty change through [`RoomActor::publish`], which handles a failed or fenced write
    /// as for any other change): refused gifts would otherwise pile up in a room that
    /// publishes nothing. Gifts a failed write leaves open are asked about by the next runtime.
    async fn flush_closing(&mut self) {
        if !self.closing.is_empty() {
            // A failure stops the runtime (see `publish`): nothing more to do here.
            let _ = self.publish(Applied::default(), None).await;
        }
    }
}

#[cfg(test)]
#[path = "gifts/tests.rs"]
mod tests;
