//! Direct messages on the gateway: `im.send`, `im.history`, `im.ack` and the block list,
//! delivery to the recipient's connections on every gateway (and to the sender's other
//! connections), and the backlog a connecting session is owed.
//!
//! The store keeps a message owed to its recipient until it is delivered. A connection opened
//! with `?im_ack=1` acknowledges what it got (`im.ack`): a message queued to it stays owed until
//! acknowledged, so one queued to a connection that dies before its client read it (a close
//! answered while the gateway still holds the session, a kill, a lost network) reaches the
//! next connection's backlog. For a connection that does not acknowledge, a message counts as
//! delivered once queued to it (as before acknowledgements existed). A connecting session reads
//! its backlog after registering, so a message is either in the backlog or delivered live, and
//! live copies that arrive while the backlog is read wait and are sent after it, those the
//! backlog held left out: no duplicate and no gap on one connection.

use std::collections::HashSet;
use std::sync::{Arc, PoisonError};

use protocol::client::{
    self, BlockList, ImAck, ImHistory, ImOp, ImSend, ImSent, MAX_BLOCKS, MAX_IM_ACK_IDS,
    MAX_IM_TEXT_CHARS,
};
use protocol::ids::is_valid_user_id;
use protocol::{ErrorCode, SessionId, UserId};
use serde::Deserialize;
use serde_json::value::RawValue;
use storage::im::{Blocked, Outgoing, Sent};
use tracing::warn;

use super::{CatchUp, Notice};
use crate::hub::text;
use crate::outbox::{clock_ms, unix_ms};
use crate::shared::Core;

/// A per-user token bucket for `im.send`: `rate_per_min` tokens a minute, at most `burst`.
#[derive(Debug)]
pub(crate) struct Bucket {
    tokens: f64,
    at_ms: u64,
}

impl Bucket {
    fn take(&mut self, now_ms: u64, rate_per_min: u32, burst: u32) -> bool {
        let dt = now_ms.saturating_sub(self.at_ms) as f64 / 60_000.0;
        self.at_ms = now_ms;
        self.tokens = (self.tokens + dt * f64::from(rate_per_min)).min(f64::from(burst));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Gives back a token taken for a request that sent nothing (a retry), up to `burst`.
    fn give_back(&mut self, burst: u32) {
        self.tokens = (self.tokens + 1.0).min(f64::from(burst));
    }

    /// Whether the bucket has refilled to `burst` by `now_ms`: then it is as good as a fresh
    /// one, and forgetting it loses nothing.
    pub(crate) fn is_full(&self, now_ms: u64, rate_per_min: u32, burst: u32) -> bool {
        let dt = now_ms.saturating_sub(self.at_ms) as f64 / 60_000.0;
        self.tokens + dt * f64::from(rate_per_min) >= f64::from(burst)
    }
}

/// Past this many buckets, full ones (users who have sent nothing lately) are swept before
/// the table grows: a bucket outlives its user's connections, so that reconnecting does not
/// refill it, and the sweep bounds them by the users sending now.
const BUCKET_SWEEP_AT: usize = 4096;

/// The `im` event frame for a stored message.
fn frame(json: &str) -> Option<tokio_tungstenite::tungstenite::Utf8Bytes> {
    let raw = RawValue::from_string(json.to_owned()).ok()?;
    text(client::encode_event("im", None, None, &raw))
}

fn reply(core: &Core, session: SessionId, f: bytes::Bytes) {
    if let Some(t) = text(f) {
        core.hub.send_to(session, t);
    }
}

fn err(core: &Core, session: SessionId, id: u64, code: ErrorCode, msg: &str) {
    ::metrics::counter!(crate::metrics::ERRORS, "code" => code.as_str()).increment(1);
    reply(core, session, client::encode_err(Some(id), code, msg));
}

const STORE_DOWN: &str = "messages unavailable; retry";
const SLOW_DOWN: &str = "too many direct messages; slow down";
const CONFLICT: &str = "req_id was used for another message; send with a new one";

/// Whether an upgrade request's query (`token=…&im_ack=1`) asks for acknowledged delivery.
pub(crate) fn asks_to_ack(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .any(|(k, v)| k == "im_ack" && (v == "1" || v == "true"))
    })
}

impl Core {
    /// Answers a direct-message op of `session` (of `user`), on a task of its own.
    pub(crate) fn im_request(
        self: &Arc<Self>,
        session: SessionId,
        user: &UserId,
        id: u64,
        op: ImOp,
    ) {
        let core = self.clone();
        let user = user.clone();
        self.tracker.spawn(async move {
            match op {
                ImOp::Send(a) => send(&core, session, &user, id, a).await,
                ImOp::History(a) => history(&core, session, &user, id, a).await,
                ImOp::Block(a) => block(&core, session, &user, id, &a.user, true).await,
                ImOp::Unblock(a) => block(&core, session, &user, id, &a.user, false).await,
                ImOp::Ack(a) => ack(&core, session, &user, id, a).await,
                ImOp::Blocks(_) => match core.social.im.blocks(&user).await {
                    Ok(blocks) => {
                        reply(&core, session, client::encode_ok(id, &BlockList { blocks }))
                    }
                    Err(e) => {
                        warn!(error = %e, "Block list read failed.");
                        err(&core, session, id, ErrorCode::Unavailable, STORE_DOWN);
                    }
                },
            }
        });
    }
}

/// Why a message may not be sent, before the store is asked (the rate aside: `take_token`).
fn check(from: &UserId, a: &ImSend) -> Result<(), (ErrorCode, &'static str)> {
    if !client::is_valid_req_id(&a.req_id) {
        return Err((
            ErrorCode::BadRequest,
            "req_id must be 1..=128 bytes of printable ASCII",
        ));
    }
    if !is_valid_user_id(a.to.as_str()) {
        return Err((
            ErrorCode::BadRequest,
            "user ids are 1..=64 of [A-Za-z0-9-_.:@+|]",
        ));
    }
    if a.to == *from {
        return Err((ErrorCode::BadRequest, "cannot message oneself"));
    }
    if a.to.is_robot() {
        return Err((ErrorCode::BadRequest, "robots take no direct messages"));
    }
    let chars = a.text.chars().count();
    if chars == 0 || chars > MAX_IM_TEXT_CHARS {
        return Err((ErrorCode::BadRequest, "text must be 1..=500 characters"));
    }
    if !protocol::text::is_clean(&a.text, true) {
        return Err((
            ErrorCode::BadRequest,
            "text may not hold control or bidi characters (newline and tab are fine)",
        ));
    }
    a.check_typed().map_err(|why| (ErrorCode::BadRequest, why))
}

/// Takes one of `from`'s `im.send` tokens on this gateway; false when none is left.
fn take_token(core: &Core, from: &UserId) -> bool {
    let cfg = &core.config;
    let mut buckets = core
        .social
        .buckets
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let now = clock_ms();
    // Only when the table is about to grow: a sweep per growth keeps sends O(1) on average.
    if buckets.len() >= BUCKET_SWEEP_AT.max(buckets.capacity()) {
        buckets.retain(|_, b| !b.is_full(now, cfg.im_rate_per_min, cfg.im_rate_burst));
    }
    let bucket = buckets.entry(from.clone()).or_insert_with(|| Bucket {
        tokens: f64::from(cfg.im_rate_burst),
        at_ms: now,
    });
    bucket.take(now, cfg.im_rate_per_min, cfg.im_rate_burst)
}

/// Returns the token `take_token` took for a request that sent nothing.
fn give_back_token(core: &Core, from: &UserId) {
    let mut buckets = core
        .social
        .buckets
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(b) = buckets.get_mut(from) {
        b.give_back(core.config.im_rate_burst);
    }
}

async fn send(core: &Arc<Core>, session: SessionId, from: &UserId, id: u64, a: ImSend) {
    if let Err((code, msg)) = check(from, &a) {
        return err(core, session, id, code, msg);
    }
    let profile = core
        .hub
        .profile(session)
        .filter(|p| !p.is_empty())
        .map(|p| client::to_json(&*p));
    let profile_json = profile.as_deref().and_then(|p| std::str::from_utf8(p).ok());
    let data_json = a.data.as_ref().map(serde_json::Value::to_string);
    let m = Outgoing {
        from,
        to: &a.to,
        text: &a.text,
        kind: a.kind.as_deref(),
        data_json: data_json.as_deref(),
        req_id: &a.req_id,
        profile_json,
        system: false,
    };
    let refused = |code, msg| err(core, session, id, code, msg);
    if !take_token(core, from) {
        // Out of tokens: a retry (which sends nothing) is still answered, so a client that
        // lost its replies learns its messages' ids; anything else waits for the rate.
        return match core.social.im.repeat(&m).await {
            Ok(Some(Sent::Repeated { id: first, at })) => reply(
                core,
                session,
                client::encode_ok(id, &ImSent { id: first, at }),
            ),
            Ok(Some(Sent::Conflict)) => refused(ErrorCode::IdempotencyConflict, CONFLICT),
            Ok(_) => refused(ErrorCode::RateLimited, SLOW_DOWN),
            Err(e) => {
                warn!(error = %e, "Direct message store failed.");
                refused(ErrorCode::RateLimited, SLOW_DOWN)
            }
        };
    }
    let outcome = core.social.im.send(&m).await;
    if matches!(outcome, Ok(Sent::Repeated { .. } | Sent::Conflict)) {
        // Nothing was sent: the rate is for messages.
        give_back_token(core, from);
    }
    let stored = match outcome {
        Ok(Sent::New(m)) => m,
        Ok(Sent::Repeated { id: first, at }) => {
            let ok = client::encode_ok(id, &ImSent { id: first, at });
            return reply(core, session, ok);
        }
        Ok(Sent::Conflict) => return refused(ErrorCode::IdempotencyConflict, CONFLICT),
        Ok(Sent::BlockedByRecipient) => {
            return refused(ErrorCode::Blocked, "the recipient blocked you");
        }
        Ok(Sent::BlockedBySender) => {
            return refused(ErrorCode::Blocked, "you blocked this user; unblock to send");
        }
        Err(e) => {
            warn!(error = %e, "Direct message store failed.");
            return refused(ErrorCode::Unavailable, STORE_DOWN);
        }
    };
    reply(
        core,
        session,
        client::encode_ok(
            id,
            &ImSent {
                id: stored.id,
                at: stored.at,
            },
        ),
    );
    ::metrics::counter!(crate::metrics::IM_SENT).increment(1);
    fan_out(core, &stored, &a.to, from, Some(session)).await;
}

/// Sends a stored message to `to` on every gateway, and to `from`'s other connections (all but
/// `except`, the sending one); and to the event webhook as `im.sent` when it asks for them.
async fn fan_out(
    core: &Arc<Core>,
    stored: &storage::im::Stored,
    to: &UserId,
    from: &UserId,
    except: Option<SessionId>,
) {
    if let Some(n) = core.events.get().filter(|n| n.wants("im.sent")) {
        match serde_json::from_str(&stored.json) {
            Ok(d) => n.emit_account("im.sent", d),
            Err(e) => warn!(error = %e, "A stored direct message is not JSON."),
        }
    }
    for (user, inbox) in [(to, true), (from, false)] {
        let gateways = match core.gateways_of(user).await {
            Ok(g) => g,
            Err(e) => {
                warn!(error = %e, "Registry unreachable; the message waits for a reconnect.");
                continue;
            }
        };
        for gw in gateways {
            if gw == core.node {
                let except = if inbox { None } else { except };
                deliver_local(core, user, stored.id, &stored.json, inbox, except);
            } else {
                let notice = Notice::Im {
                    user: user.clone(),
                    id: stored.id,
                    inbox,
                    msg: stored.json.clone(),
                };
                core.notify(&gw, &notice).await;
            }
        }
    }
}

/// Why the app's message was not sent.
#[derive(Debug)]
pub(crate) enum SystemRefusal {
    /// A rule of `im.send` broken (`BAD_REQUEST`), or a block (`BLOCKED`), or the key used
    /// for another message (`IDEMPOTENCY_CONFLICT`).
    Refused(ErrorCode, &'static str),
    /// The store failed: retry with the same `req_id`.
    Unavailable,
}

/// A direct message from the app's backend (`POST /admin/users/{user}/messages`): `a` sent as
/// `from`, an account the app keeps for itself (its official or support account), with
/// `"system":true` in the event so clients can tell it from a member's; `im.send`'s rules,
/// blocks, idempotency, backlog and delivery, without the per-user rate. The sender's `p` is
/// `from`'s stored profile. The message's `{id, at}`, the first one's for a retry.
pub(crate) async fn send_system(
    core: &Arc<Core>,
    from: &UserId,
    a: &ImSend,
) -> Result<ImSent, SystemRefusal> {
    check(from, a).map_err(|(code, why)| SystemRefusal::Refused(code, why))?;
    if from.is_robot() {
        return Err(SystemRefusal::Refused(
            ErrorCode::BadRequest,
            "from may not be a robot",
        ));
    }
    let profile = match core.users.profiles.get(from).await {
        Ok(p) => Some(p.effective()).filter(|p| !p.is_empty()),
        Err(e) => {
            warn!(error = %e, "Profile store failed.");
            return Err(SystemRefusal::Unavailable);
        }
    };
    let profile = profile.map(|p| client::to_json(&p));
    let data_json = a.data.as_ref().map(serde_json::Value::to_string);
    let m = Outgoing {
        from,
        to: &a.to,
        text: &a.text,
        kind: a.kind.as_deref(),
        data_json: data_json.as_deref(),
        req_id: &a.req_id,
        profile_json: profile.as_deref().and_then(|p| std::str::from_utf8(p).ok()),
        system: true,
    };
    let refused = |code, why| Err(SystemRefusal::Refused(code, why));
    let stored = match core.social.im.send(&m).await {
        Ok(Sent::New(m)) => m,
        Ok(Sent::Repeated { id, at }) => return Ok(ImSent { id, at }),
        Ok(Sent::Conflict) => return refused(ErrorCode::IdempotencyConflict, CONFLICT),
        Ok(Sent::BlockedByRecipient) => {
            return refused(ErrorCode::Blocked, "the recipient blocked the sender");
        }
        Ok(Sent::BlockedBySender) => {
            return refused(ErrorCode::Blocked, "the sender blocked the recipient");
        }
        Err(e) => {
            warn!(error = %e, "Direct message store failed.");
            return Err(SystemRefusal::Unavailable);
        }
    };
    ::metrics::counter!(crate::metrics::IM_SENT).increment(1);
    fan_out(core, &stored, &a.to, from, None).await;
    Ok(ImSent {
        id: stored.id,
        at: stored.at,
    })
}

/// Queues message `id` to `user`'s sessions here (but `except`); a session still reading its
/// backlog gets it after the backlog. When `inbox` and a session that does not acknowledge got
/// it, it is delivered; a session that acknowledges keeps it owed until its `im.ack`.
pub(super) fn deliver_local(
    core: &Arc<Core>,
    user: &UserId,
    id: u64,
    json: &str,
    inbox: bool,
    except: Option<SessionId>,
) {
    let Some(f) = frame(json) else { return };
    let mut got = false;
    let mut acking = false;
    {
        let mut tracked = core.social.sessions();
        let now = unix_ms();
        for (s, out) in core.hub.sessions_of(user) {
            if Some(s) == except {
                continue;
            }
            acking |= out.im_ack();
            if let Some(t) = tracked.get_mut(&s)
                && let Some(catch_up) = t.im.as_deref_mut()
            {
                let skip = match catch_up {
                    CatchUp::Reading(waiting) => {
                        waiting.push((id, json.to_owned()));
                        true
                    }
                    CatchUp::Sent(held) => release_held(held, id, now),
                };
                if matches!(catch_up, CatchUp::Sent(held) if held.is_empty()) {
                    t.im = None;
                    super::forget_if_idle(&mut tracked, s);
                }
                if skip {
                    continue;
                }
            }
            out.push(f.clone());
            got = true;
        }
    }
    if inbox && got && !acking {
        mark_delivered(core, user, vec![id]);
    }
}

/// How long after it was stored a backlog message's live delivery is still waited for (see
/// `CatchUp::Sent`): a live delivery follows its store by a round trip or two.
const HELD_FOR_MS: u64 = 60_000;

/// Whether the message of `id` was stored within `HELD_FOR_MS` of `now` (ids are
/// `at_ms * IDS_PER_MS + n`).
fn recent(id: u64, now: u64) -> bool {
    id / storage::im::IDS_PER_MS + HELD_FOR_MS >= now
}

/// Takes `id` out of a sent backlog's held ids (and the ids no longer recent): whether it was
/// held, i.e. the session already got it.
fn release_held(held: &mut Vec<u64>, id: u64, now: u64) -> bool {
    let mut was_held = false;
    held.retain(|h| {
        was_held |= *h == id;
        *h != id && recent(*h, now)
    });
    was_held
}

fn mark_delivered(core: &Arc<Core>, user: &UserId, ids: Vec<u64>) {
    let core2 = core.clone();
    let user = user.clone();
    core.tracker.spawn(async move {
        if let Err(e) = core2.social.im.delivered(&user, &ids).await {
            warn!(error = %e, "Could not mark direct messages delivered.");
        }
    });
}

/// Sends `session` the messages `user` is owed, then the live ones that arrived meanwhile.
/// A failed read is tried again after `pause` (doubling) while the session lives; the live
/// messages wait for it, and stay owed if the session ends first.
pub(super) async fn catch_up(
    core: &Arc<Core>,
    session: SessionId,
    user: &UserId,
    mut pause: std::time::Duration,
) {
    let owed = loop {
        match core.social.im.undelivered(user).await {
            Ok(o) => break o,
            Err(e) => warn!(error = %e, %user, "Could not read owed direct messages; retrying."),
        }
        if !core.retry_after(session, &mut pause).await {
            return;
        }
    };
    deliver_owed(core, session, user, owed);
}

/// Ends `session`'s catch-up: sends what `user` is owed (`owed`, then the live messages that
/// arrived meanwhile) and marks it delivered, unless a session of the user here acknowledges
/// (its `im.ack` does).
pub(super) fn deliver_owed(
    core: &Arc<Core>,
    session: SessionId,
    user: &UserId,
    owed: Vec<(u64, String)>,
) {
    let mut sent = Vec::with_capacity(owed.len());
    let mut tracked = core.social.sessions();
    let Some(t) = tracked.get_mut(&session) else {
        return;
    };
    let waiting = match t.im.take().map(|c| *c) {
        Some(CatchUp::Reading(waiting)) => waiting,
        Some(CatchUp::Sent(_)) | None => Vec::new(),
    };
    // The backlog's recent messages whose live delivery has not come yet may still come.
    let now = unix_ms();
    let arrived: HashSet<u64> = waiting.iter().map(|(id, _)| *id).collect();
    let held: Vec<u64> = owed
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| !arrived.contains(id) && recent(*id, now))
        .collect();
    if !held.is_empty() {
        t.im = Some(Box::new(CatchUp::Sent(held)));
    }
    super::forget_if_idle(&mut tracked, session);
    let sessions = core.hub.sessions_of(user);
    let Some((_, out)) = sessions.iter().find(|(s, _)| *s == session) else {
        return;
    };
    let backlog: HashSet<u64> = owed.iter().map(|(id, _)| *id).collect();
    for (id, json) in owed
        .iter()
        .chain(waiting.iter().filter(|(id, _)| !backlog.contains(id)))
    {
        if let Some(f) = frame(json) {
            out.push(f);
            sent.push(*id);
        }
    }
    // As for a live message (`deliver_local`): beside a connection here that acknowledges,
    // what this one got waits for that acknowledgement (the other may hold it unread).
    let acking_here = sessions.iter().any(|(_, o)| o.im_ack());
    drop(tracked);
    if !acking_here {
        mark_delivered(core, user, sent);
    }
}

/// Backlog reads after a re-subscribe that run at once: enough to finish a big gateway in
/// seconds, few enough not to flood Redis.
const CATCH_UP_CONCURRENCY: usize = 64;

/// After a lost bus connection (Redis may have restarted, losing its data): every local
/// session is registered again and gets what its user is owed.
pub(super) async fn catch_up_everyone(core: &Arc<Core>) {
    use futures_util::StreamExt;
    let social = &core.social;
    if let Err(e) = social
        .registry
        .keep_alive(&social.node, social.incarnation)
        .await
    {
        warn!(error = %e, "Could not refresh the gateway's registry liveness.");
    }
    let users = core.hub.session_users();
    {
        let mut tracked = social.sessions();
        for (s, _) in &users {
            let t = tracked.entry(*s).or_default();
            if !matches!(t.im.as_deref(), Some(CatchUp::Reading(_))) {
                t.im = Some(Box::new(CatchUp::Reading(Vec::new())));
            }
        }
    }
    futures_util::stream::iter(users)
        .for_each_concurrent(CATCH_UP_CONCURRENCY, |(session, user)| async move {
            // A connect's own path: registration and backlog, each retried while it fails.
            core.social_catch_up(session, &user).await;
        })
        .await;
}

/// The peers of a stored message, for the `with` filter.
#[derive(Deserialize)]
struct Peers {
    id: u64,
    from: UserId,
    to: UserId,
}

async fn history(core: &Arc<Core>, session: SessionId, user: &UserId, id: u64, a: ImHistory) {
    match history_page(core, user, a.with.as_ref(), a.before, a.limit).await {
        Ok(body) => reply(core, session, client::encode_ok_raw(id, body.as_bytes())),
        Err((code, msg)) => err(core, session, id, code, msg),
    }
}

/// One page of `user`'s kept messages, newest first, as `im.history`'s ok JSON
/// (`{"messages":[…],"next":…}`): only those with `with` when given, below `before`, at most
/// `limit` (default 50). The admin API reads a user's messages through it too.
///
/// # Errors
/// `BAD_REQUEST` for a limit outside 1..=100 or a bad `with`; `UNAVAILABLE` when the store
/// cannot be read.
pub(crate) async fn history_page(
    core: &Core,
    user: &UserId,
    with: Option<&UserId>,
    before: Option<u64>,
    limit: Option<u32>,
) -> Result<String, (ErrorCode, &'static str)> {
    let limit = limit.unwrap_or(client::im::DEFAULT_IM_HISTORY_LIMIT);
    if !(1..=client::im::MAX_IM_HISTORY_LIMIT).contains(&limit) {
        return Err((ErrorCode::BadRequest, "limit must be 1..=100"));
    }
    if with.is_some_and(|w| !is_valid_user_id(w.as_str())) {
        return Err((
            ErrorCode::BadRequest,
            "user ids are 1..=64 of [A-Za-z0-9-_.:@+|]",
        ));
    }
    let all = match core.social.im.history(user, before).await {
        Ok(all) => all,
        Err(e) => {
            warn!(error = %e, "Direct message history read failed.");
            return Err((ErrorCode::Unavailable, STORE_DOWN));
        }
    };
    let mut page: Vec<(u64, &str)> = Vec::new();
    let mut more = false;
    for json in &all {
        let Ok(p) = serde_json::from_str::<Peers>(json) else {
            continue;
        };
        // Between the user and `with`: both ends (the user is one end of every message, so
        // `with` naming the user matches none, not all).
        if with
            .is_some_and(|w| !((p.from == *user && p.to == *w) || (p.to == *user && p.from == *w)))
        {
            continue;
        }
        if page.len() == limit as usize {
            more = true;
            break;
        }
        page.push((p.id, json));
    }
    let mut body = String::from("{\"messages\":[");
    for (i, (_, json)) in page.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(json);
    }
    body.push_str("],\"next\":");
    match page.last().filter(|_| more) {
        Some((last, _)) => body.push_str(&last.to_string()),
        None => body.push_str("null"),
    }
    body.push('}');
    Ok(body)
}

/// `im.ack`: the messages `a.ids` (to `user`) reached a client; they are owed no more.
async fn ack(core: &Arc<Core>, session: SessionId, user: &UserId, id: u64, a: ImAck) {
    if a.ids.is_empty() || a.ids.len() > MAX_IM_ACK_IDS {
        return err(
            core,
            session,
            id,
            ErrorCode::BadRequest,
            "ids must hold 1..=200 message ids",
        );
    }
    match core.social.im.delivered(user, &a.ids).await {
        Ok(()) => reply(core, session, client::encode_ok(id, &serde_json::json!({}))),
        Err(e) => {
            warn!(error = %e, "Could not mark direct messages acknowledged.");
            err(core, session, id, ErrorCode::Unavailable, STORE_DOWN);
        }
    }
}

async fn block(
    core: &Arc<Core>,
    session: SessionId,
    user: &UserId,
    id: u64,
    other: &UserId,
    on: bool,
) {
    if !is_valid_user_id(other.as_str()) {
        return err(
            core,
            session,
            id,
            ErrorCode::BadRequest,
            "user ids are 1..=64 of [A-Za-z0-9-_.:@+|]",
        );
    }
    if other == user {
        return err(
            core,
            session,
            id,
            ErrorCode::BadRequest,
            "cannot block oneself",
        );
    }
    let outcome = if on {
        core.social
            .im
            .block(user, other, MAX_BLOCKS)
            .await
            .map(Some)
    } else {
        core.social.im.unblock(user, other).await.map(|_| None)
    };
    match outcome {
        Ok(Some(Blocked::ListFull)) => err(
            core,
            session,
            id,
            ErrorCode::BadRequest,
            "the block list is full (1,000 users)",
        ),
        Ok(_) => reply(core, session, client::encode_ok(id, &serde_json::json!({}))),
        Err(e) => {
            warn!(error = %e, "Block list write failed.");
            err(core, session, id, ErrorCode::Unavailable, STORE_DOWN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Bucket, HELD_FOR_MS, asks_to_ack, release_held};
    use storage::im::IDS_PER_MS;

    /// A bucket is as good as new (and may be forgotten) only once it has refilled.
    #[test]
    fn a_bucket_is_full_only_once_refilled() {
        let mut b = Bucket {
            tokens: 3.0,
            at_ms: 0,
        };
        assert!(b.is_full(0, 30, 3));
        assert!(b.take(0, 30, 3));
        assert!(!b.is_full(0, 30, 3));
        // 30 a minute: one token back after 2 s.
        assert!(!b.is_full(1_999, 30, 3));
        assert!(b.is_full(2_000, 30, 3));
    }

    #[test]
    fn a_held_backlog_id_drops_its_live_delivery_once_and_old_ids_expire() {
        let now = 1_000_000_000;
        let id_at = |ms: u64, n: u64| ms * IDS_PER_MS + n;
        let (fresh, other, last) = (id_at(now - 5, 1), id_at(now - 5, 2), id_at(now - 1, 3));
        let mut held = vec![fresh, other, last];
        assert!(release_held(&mut held, fresh, now), "held: already sent");
        assert!(
            !release_held(&mut held, fresh, now),
            "released: a second one is new"
        );
        assert_eq!(held, vec![other, last]);
        // Past the hold, nothing more is waited for.
        assert!(!release_held(&mut held, 7, now + HELD_FOR_MS + 10));
        assert!(held.is_empty());
    }

    #[test]
    fn only_an_im_ack_of_1_or_true_asks_for_acknowledged_delivery() {
        assert!(asks_to_ack(Some("token=x&im_ack=1")));
        assert!(asks_to_ack(Some("im_ack=true&token=x")));
        assert!(!asks_to_ack(Some("token=x")));
        assert!(!asks_to_ack(Some("token=x&im_ack=0")));
        assert!(!asks_to_ack(Some("xim_ack=1")));
        assert!(!asks_to_ack(None));
    }

    #[test]
    fn the_im_bucket_allows_its_burst_then_refills_per_minute() {
        let mut b = Bucket {
            tokens: 2.0,
            at_ms: 0,
        };
        assert!(b.take(0, 60, 2) && b.take(0, 60, 2));
        assert!(!b.take(0, 60, 2));
        // 60 a minute: one back after a second.
        assert!(b.take(1_000, 60, 2));
        assert!(!b.take(1_000, 60, 2));
    }
}
