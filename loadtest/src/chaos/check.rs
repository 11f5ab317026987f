//! The checkers: safety properties over the history, the nodes' audit lines and the ledger
//! at the end, and the liveness summary. Each checker returns its violations (a description
//! each); a run passes when every list is empty.
//!
//! 1. **single writer**: per room, the fences runtimes served with strictly increase and each
//!    belongs to one owner; one content per `(room, epoch, seq)` across all clients; every
//!    epoch a client saw is a fence a runtime served; no lease lost outside a fault's window
//!    (a quiet room keeps its owner).
//! 2. **order**: replaying each client's events through the protocol's client rules, every
//!    resume (`since`, no resync) fills the gap up to the reply's position, no gap stays open,
//!    no event of an older epoch arrives that the client never had.
//! 3. **no acknowledged event lost**: every acknowledged chat and every settled gift (answered
//!    or not) reached some client, and none reached clients at two positions of its room.
//! 4. **gifts exactly once**: one order id per `req_id`; every acknowledged gift SETTLED; no
//!    saga open at the end; a refused gift not booked; each sender's coins and each recipient's
//!    earnings equal to what the settled sagas say (a double debit would show).
//! 5. **recovery**: every saga recovery was written by the room's serving owner with its
//!    fence; no acknowledged gift voided.
//! 6. **conservation**: the ledger's totals.
//! 7. **liveness**: after the last fault every room serves again within TTL + a bound, every
//!    outage ends within its fault's hold + TTL + that bound, and every client received every
//!    member's last chat.
//! 8. **faults took effect**: every kill or pause of a shard, move and Redis wipe moved a room
//!    it struck to a new fence (a fault that struck nothing would let a run pass untested).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::audit::AuditLine;
use super::faults::FaultKind;
use super::history::{Kind, Record};

/// At most this many examples per checker in the report (the count is always exact).
const EXAMPLES: usize = 20;

/// One checker's result.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Verdict {
    /// Checker name.
    pub name: &'static str,
    /// What was checked (items).
    pub checked: u64,
    /// Violations found.
    pub violations: u64,
    /// Items excused as a documented limitation (RELIABILITY.md), not violations.
    pub excused: u64,
    /// The first few, described.
    pub examples: Vec<String>,
}

impl Verdict {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            ..Self::default()
        }
    }

    fn excuse(&mut self, what: String) {
        self.excused += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(format!("excused: {what}"));
        }
    }

    fn fail(&mut self, what: String) {
        self.violations += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(what);
        }
    }
}

/// What the checkers need besides the history and the audit lines.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// Lease TTL of the run.
    pub ttl: Duration,
    /// Coins granted to every user at the start.
    pub grant: i64,
    /// Room → its members (user ids).
    pub members: BTreeMap<String, Vec<String>>,
    /// How long after the last fault every room must serve again, on top of the TTL.
    pub recovery_bound: Duration,
}

/// A saga as the ledger holds it at the end.
#[derive(Clone, Debug)]
pub struct Saga {
    /// Order id.
    pub gift_id: String,
    /// State.
    pub state: String,
    /// Sender.
    pub sender: String,
    /// Recipients.
    pub recipients: Vec<String>,
    /// Coins the sender pays.
    pub cost: i64,
    /// Coins each recipient earns.
    pub share_each: i64,
}

/// The ledger at the end of the run.
#[derive(Clone, Debug, Default)]
pub struct EndState {
    /// Every saga.
    pub sagas: Vec<Saga>,
    /// user → (coins, earnings).
    pub accounts: HashMap<String, (i64, i64)>,
    /// `/admin/ledger/totals`.
    pub totals: serde_json::Value,
}

/// Reads the SQLite ledger at `path` (the nodes are stopped) and the saved totals.
///
/// # Errors
/// When the database or the totals cannot be read.
pub fn read_end_state(path: &Path, totals: serde_json::Value) -> anyhow::Result<EndState> {
    let c =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut sagas = Vec::new();
    let mut st = c.prepare("SELECT gift_id, order_json, state FROM gift_saga")?;
    let rows = st.query_map([], |r| {
        Ok((
            r.get::<_, Vec<u8>>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
        ))
    })?;
    for row in rows {
        let (id, order, state) = row?;
        let o: serde_json::Value = serde_json::from_str(&order)?;
        let gift_id = uuid::Uuid::from_slice(&id).map_or_else(|_| hex_of(&id), |u| u.to_string());
        let recipients: Vec<String> = o["recipients"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let price = o["unit_price"].as_i64().unwrap_or(0) * o["count"].as_i64().unwrap_or(0);
        let share_bp = o["share_bp"].as_i64().unwrap_or(0);
        sagas.push(Saga {
            gift_id,
            state,
            sender: o["sender"].as_str().unwrap_or_default().to_owned(),
            cost: price * recipients.len() as i64,
            share_each: price * share_bp / 10_000,
            recipients,
        });
    }
    let mut accounts = HashMap::new();
    let mut st = c.prepare("SELECT user, coins, earnings FROM account")?;
    let rows = st.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
        ))
    })?;
    for row in rows {
        let (u, coins, earnings) = row?;
        accounts.insert(u, (coins, earnings));
    }
    Ok(EndState {
        sagas,
        accounts,
        totals,
    })
}

/// The order id the ledger gives `(sender, req_id)`.
pub fn order_id(sender: &str, req: &str) -> String {
    storage::ledger::gift_id(&protocol::UserId::from(sender), req).to_string()
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A fault's window: `[start, heal]` in ms.
#[derive(Clone, Debug)]
pub struct Window {
    /// The fault.
    pub kind: Option<FaultKind>,
    /// Its target.
    pub target: String,
    /// Start (ms).
    pub start: u64,
    /// Heal (ms).
    pub end: u64,
}

/// The fault windows of the history.
pub fn windows(h: &[Record]) -> Vec<Window> {
    let mut open: HashMap<String, (u64, String)> = HashMap::new();
    let mut out = Vec::new();
    for r in h.iter().filter(|r| r.kind() == Kind::Fault) {
        let op = r.op.clone().unwrap_or_default();
        if let Some(name) = op.strip_prefix("heal:") {
            if let Some((start, target)) = open.remove(name) {
                out.push(Window {
                    kind: FaultKind::parse(name),
                    target,
                    start,
                    end: r.t,
                });
            }
        } else {
            open.insert(op, (r.t, r.client.clone().unwrap_or_default()));
        }
    }
    for (name, (start, target)) in open {
        out.push(Window {
            kind: FaultKind::parse(&name),
            target,
            start,
            end: u64::MAX,
        });
    }
    out.sort_by_key(|w| w.start);
    out
}

/// Whether fault `x` struck lease owner `owner` (`<node id>/<boot id>`): its target is that
/// node, or Redis, which every owner's leases live in.
fn struck(x: &Window, owner: &str) -> bool {
    x.target == "redis" || owner.split('/').next() == Some(x.target.as_str())
}

fn content(r: &Record) -> String {
    format!(
        "{}|{}|{}",
        r.op.as_deref().unwrap_or(""),
        r.text.as_deref().unwrap_or(""),
        r.order.as_deref().unwrap_or("")
    )
}

/// Checker 1.
pub fn single_writer(h: &[Record], audit: &[AuditLine], inp: &Inputs, w: &[Window]) -> Verdict {
    let mut v = Verdict::new("1 single writer per room (fences, histories, leases)");
    let mut last: HashMap<&str, (u64, &str)> = HashMap::new();
    let mut served: HashMap<(&str, u64), &str> = HashMap::new();
    for a in audit.iter().filter(|a| a.what == "serve") {
        v.checked += 1;
        if let Some((f, _)) = last.get(a.room.as_str())
            && a.fence <= *f
        {
            v.fail(format!(
                "room {} served with fence {} after fence {f} (by {})",
                a.room, a.fence, a.owner
            ));
        }
        last.insert(&a.room, (a.fence, &a.owner));
        if let Some(o) = served.insert((&a.room, a.fence), &a.owner)
            && o != a.owner
        {
            v.fail(format!(
                "room {} fence {} served by {o} and {}",
                a.room, a.fence, a.owner
            ));
        }
    }
    let mut seen: HashMap<(&str, u64, u64), String> = HashMap::new();
    let mut bad_epochs = HashSet::new();
    for r in h.iter().filter(|r| r.kind() == Kind::Event) {
        let (Some(room), Some(e), Some(s)) = (r.room.as_deref(), r.epoch, r.seq) else {
            continue;
        };
        v.checked += 1;
        let c = content(r);
        match seen.get(&(room, e, s)) {
            Some(prev) if *prev != c => v.fail(format!(
                "room {room} ({e},{s}) delivered as {prev} and as {c} (to {})",
                r.client.as_deref().unwrap_or("?")
            )),
            Some(_) => {}
            None => {
                seen.insert((room, e, s), c);
            }
        }
        if !served.contains_key(&(room, e)) && bad_epochs.insert((room, e)) {
            v.fail(format!(
                "room {room}: events of epoch {e}, which no runtime served"
            ));
        }
    }
    // A lease is lost only to a fault that can take it (kills, pauses, Redis, the lease link),
    // within its window and a grace of two TTLs after the heal, and only on the fault's
    // target: the shard it struck, or any for Redis itself.
    let grace = 2 * inp.ttl.as_millis() as u64 + 1000;
    for a in audit
        .iter()
        .filter(|a| a.what == "stop" && a.detail == "lease_lost")
    {
        let explained = w.iter().any(|x| {
            x.kind.is_some_and(FaultKind::can_lose_leases)
                && struck(x, &a.owner)
                && a.t + 200 >= x.start
                && a.t <= x.end.saturating_add(grace)
        });
        if !explained {
            v.fail(format!(
                "room {} lost its lease on {} (fence {}) with no fault in force",
                a.room, a.owner, a.fence
            ));
        }
    }
    v
}

/// Checker 2.
pub fn order(h: &[Record]) -> Verdict {
    let mut v = Verdict::new("2 per-client order, resumes fill every gap");
    #[derive(Default)]
    struct Track {
        pos: Option<(u64, u64)>,
        gap: bool,
        applied: HashSet<(u64, u64)>,
    }
    // The last seq of each (room, epoch) any client received: a resume answered at a new
    // epoch that has no event yet (`seq` 0) is filled when the client had its old epoch's
    // last event.
    let mut last_seq: HashMap<(&str, u64), u64> = HashMap::new();
    for r in h.iter().filter(|r| r.kind() == Kind::Event) {
        if let (Some(room), Some(e), Some(s)) = (r.room.as_deref(), r.epoch, r.seq) {
            let m = last_seq.entry((room, e)).or_default();
            *m = (*m).max(s);
        }
    }
    let mut t: HashMap<(&str, &str), Track> = HashMap::new();
    for r in h {
        let (Some(client), Some(room)) = (r.client.as_deref(), r.room.as_deref()) else {
            continue;
        };
        match (r.kind(), r.op.as_deref()) {
            (Kind::Event, _) => {
                let (Some(e), Some(s)) = (r.epoch, r.seq) else {
                    continue;
                };
                v.checked += 1;
                let tr = t.entry((client, room)).or_default();
                let Some((pe, ps)) = tr.pos else { continue };
                if (e == pe && s == ps + 1) || (e > pe && s == 1) {
                    tr.pos = Some((e, s));
                    tr.applied.insert((e, s));
                } else if e < pe && !tr.applied.contains(&(e, s)) {
                    v.fail(format!(
                        "{client} in {room}: event ({e},{s}) of an older epoch after ({pe},{ps})"
                    ));
                } else if e > pe || (e == pe && s > ps + 1) {
                    tr.gap = true;
                }
            }
            (Kind::Ok, Some("room.join")) => {
                let (Some(e), Some(s)) = (r.epoch, r.seq) else {
                    continue;
                };
                let tr = t.entry((client, room)).or_default();
                let resumed = r.since.is_some() && r.resync == Some(false);
                let filled = match tr.pos {
                    None => true,
                    Some(p) if p == (e, s) => true,
                    Some((pe, ps)) => {
                        s == 0 && pe < e && ps >= last_seq.get(&(room, pe)).copied().unwrap_or(0)
                    }
                };
                if resumed && !filled {
                    v.fail(format!(
                        "{client} in {room}: resume answered at ({e},{s}) but the replay left the client at {:?}",
                        tr.pos
                    ));
                }
                tr.pos = Some((e, s));
                tr.gap = false;
            }
            _ => {}
        }
    }
    for ((client, room), tr) in &t {
        if tr.gap {
            v.fail(format!("{client} in {room}: a gap never repaired"));
        }
    }
    v
}

/// Checker 3. A gift acknowledged within a second of a Redis wipe whose event reached nobody is
/// excused, not a violation: the order's "open" record, which the next runtime publishes the
/// event from, lives in Redis and goes with it (RELIABILITY.md, "Found").
///
/// Nor is any delivered twice: a chat line (its text is unique to its sender's attempt) or a
/// gift order at two positions of its room means a change applied twice (e.g. a write that
/// landed late and was sent again). A convergence line (`fin:`) is left out: it is retried
/// until answered, so one of unknown outcome may rightly land twice.
pub fn acked_delivered(h: &[Record], w: &[Window], end: &EndState) -> Verdict {
    let mut v = Verdict::new("3 no acknowledged chat or settled gift lost, none delivered twice");
    let mut first_at: HashMap<(&str, &str, &str), (u64, u64)> = HashMap::new();
    for r in h.iter().filter(|r| r.kind() == Kind::Event) {
        let (Some(room), Some(op), Some(e), Some(s)) =
            (r.room.as_deref(), r.op.as_deref(), r.epoch, r.seq)
        else {
            continue;
        };
        let key = match op {
            "chat" => r.text.as_deref().filter(|t| !t.starts_with("fin:")),
            "gift" => r.order.as_deref(),
            _ => None,
        };
        let Some(key) = key else { continue };
        v.checked += 1;
        match first_at.get(&(room, op, key)) {
            Some(&(pe, ps)) if (pe, ps) != (e, s) => v.fail(format!(
                "{op} {key:?} in {room} delivered at ({pe},{ps}) and at ({e},{s})"
            )),
            Some(_) => {}
            None => {
                first_at.insert((room, op, key), (e, s));
            }
        }
    }
    let wiped = |t: u64| {
        w.iter().any(|x| {
            x.kind == Some(FaultKind::RedisWipe)
                && t + 1000 >= x.start
                && t <= x.end.saturating_add(1000)
        })
    };
    let mut texts = HashSet::new();
    let mut orders = HashSet::new();
    let mut acked = HashSet::new();
    for r in h.iter().filter(|r| r.kind() == Kind::Event) {
        if let Some(t) = &r.text {
            texts.insert((r.room.as_deref().unwrap_or(""), t.as_str()));
        }
        if let Some(o) = &r.order {
            orders.insert(o.as_str());
        }
    }
    for r in h.iter().filter(|r| r.kind() == Kind::Ok) {
        match r.op.as_deref() {
            Some("chat.send") => {
                v.checked += 1;
                let room = r.room.as_deref().unwrap_or("");
                let text = r.text.as_deref().unwrap_or("");
                if !texts.contains(&(room, text)) {
                    v.fail(format!(
                        "chat {text:?} acknowledged in {room}, delivered to nobody"
                    ));
                }
            }
            Some("gift.send") => {
                v.checked += 1;
                let o = r.order.as_deref().unwrap_or("");
                acked.insert(o);
                if !orders.contains(o) {
                    let what = format!(
                        "gift {o} ({}) acknowledged in {}, its event delivered to nobody",
                        r.req.as_deref().unwrap_or("?"),
                        r.room.as_deref().unwrap_or("?")
                    );
                    if wiped(r.t) {
                        v.excuse(format!("{what} (around a Redis wipe)"));
                    } else {
                        v.fail(what);
                    }
                }
            }
            _ => {}
        }
    }
    // A gift the ledger settled whose sender never saw the answer (its attempts timed out or
    // lost their connection) moved coins all the same: its event is owed to the room too.
    let mut attempts: HashMap<String, Vec<u64>> = HashMap::new();
    for r in h.iter().filter(|r| r.op.as_deref() == Some("gift.send")) {
        if let (Some(c), Some(req)) = (r.client.as_deref(), r.req.as_deref()) {
            attempts.entry(order_id(c, req)).or_default().push(r.t);
        }
    }
    for s in end.sagas.iter().filter(|s| s.state == "SETTLED") {
        let o = s.gift_id.as_str();
        if acked.contains(o) {
            continue;
        }
        v.checked += 1;
        if orders.contains(o) {
            continue;
        }
        let what = format!(
            "gift {o} of {} settled, never acknowledged, its event delivered to nobody",
            s.sender
        );
        if attempts
            .get(o)
            .is_some_and(|ts| ts.iter().any(|t| wiped(*t)))
        {
            v.excuse(format!("{what} (around a Redis wipe)"));
        } else {
            v.fail(what);
        }
    }
    v
}

/// Checker 4.
pub fn gifts_once(h: &[Record], end: &EndState, inp: &Inputs) -> Verdict {
    let mut v = Verdict::new("4 every acknowledged gift debited exactly once, none left open");
    let by_id: HashMap<&str, &Saga> = end.sagas.iter().map(|s| (s.gift_id.as_str(), s)).collect();
    let mut order_of: HashMap<(&str, &str), &str> = HashMap::new();
    let mut last: HashMap<(&str, &str), &Record> = HashMap::new();
    // Requests with an attempt of unknown outcome: a later refusal (e.g. `NOT_IN_ROOM` for a
    // retry sent before the rejoin) says nothing about that attempt.
    let mut uncertain: HashSet<(&str, &str)> = HashSet::new();
    for r in h.iter().filter(|r| r.op.as_deref() == Some("gift.send")) {
        let (Some(c), Some(req)) = (r.client.as_deref(), r.req.as_deref()) else {
            continue;
        };
        if r.kind() == Kind::Invoke {
            continue;
        }
        last.insert((c, req), r);
        if r.kind() == Kind::Unknown {
            uncertain.insert((c, req));
        }
        if r.kind() != Kind::Ok {
            continue;
        }
        v.checked += 1;
        let o = r.order.as_deref().unwrap_or("");
        if let Some(prev) = order_of.insert((c, req), o)
            && prev != o
        {
            v.fail(format!("{c} {req}: order {prev} then {o}"));
        }
        match by_id.get(o) {
            Some(s) if s.state == "SETTLED" => {}
            Some(s) => v.fail(format!("{c} {req}: acknowledged, saga {o} is {}", s.state)),
            None => v.fail(format!("{c} {req}: acknowledged, no saga {o}")),
        }
    }
    for ((c, req), r) in &last {
        if r.kind() == Kind::Fail
            && !order_of.contains_key(&(*c, *req))
            && !uncertain.contains(&(*c, *req))
        {
            // A refused gift (every answer a definite error) was not booked.
            v.checked += 1;
            let id = order_id(c, req);
            if by_id.get(id.as_str()).is_some_and(|s| s.state == "SETTLED") {
                v.fail(format!(
                    "{c} {req}: refused ({:?}), yet saga {id} settled",
                    r.err
                ));
            }
        }
    }
    let mut spent: HashMap<&str, i64> = HashMap::new();
    let mut earned: HashMap<&str, i64> = HashMap::new();
    for s in &end.sagas {
        v.checked += 1;
        match s.state.as_str() {
            "SETTLED" => {
                *spent.entry(&s.sender).or_default() += s.cost;
                for rcp in &s.recipients {
                    *earned.entry(rcp).or_default() += s.share_each;
                }
            }
            "VOIDED" => {}
            other => v.fail(format!("saga {} left {other} at the end", s.gift_id)),
        }
    }
    for users in inp.members.values() {
        for u in users {
            let (coins, earnings) = end.accounts.get(u).copied().unwrap_or((0, 0));
            let want = inp.grant - spent.get(u.as_str()).copied().unwrap_or(0);
            if coins != want {
                v.fail(format!("{u}: {coins} coins, settled sagas say {want}"));
            }
            let want = earned.get(u.as_str()).copied().unwrap_or(0);
            if earnings != want {
                v.fail(format!("{u}: {earnings} earned, settled sagas say {want}"));
            }
        }
    }
    v
}

/// Checker 5.
pub fn recovery(h: &[Record], audit: &[AuditLine], end: &EndState) -> Verdict {
    let mut v = Verdict::new("5 no saga voided after a debit, no recovery by a non-owner");
    let serves: HashMap<(&str, u64, &str), u64> = audit
        .iter()
        .filter(|a| a.what == "serve")
        .map(|a| ((a.room.as_str(), a.fence, a.owner.as_str()), a.t))
        .collect();
    for a in audit.iter().filter(|a| a.what == "recover") {
        v.checked += 1;
        match serves.get(&(a.room.as_str(), a.fence, a.owner.as_str())) {
            Some(t) if *t <= a.t + 50 => {}
            _ => v.fail(format!(
                "saga {} of room {} {} by {} with fence {}, which it never served",
                a.gift, a.room, a.detail, a.owner, a.fence
            )),
        }
    }
    let state: HashMap<&str, &str> = end
        .sagas
        .iter()
        .map(|s| (s.gift_id.as_str(), s.state.as_str()))
        .collect();
    for r in h
        .iter()
        .filter(|r| r.kind() == Kind::Ok && r.op.as_deref() == Some("gift.send"))
    {
        let o = r.order.as_deref().unwrap_or("");
        if state.get(o) == Some(&"VOIDED") {
            v.fail(format!("gift {o} acknowledged (debited), then voided"));
        }
    }
    v
}

/// Checker 6.
pub fn conservation(end: &EndState, inp: &Inputs) -> Verdict {
    let mut v = Verdict::new("6 coins conserved (ledger totals)");
    v.checked = 1;
    // `/admin/ledger/totals` answers `{"conserved":…,"totals":{…}}`.
    let t = end.totals.get("totals").unwrap_or(&end.totals);
    if t.get("granted").is_none() {
        v.fail(format!("no ledger totals: {}", end.totals));
        return v;
    }
    let n = |k: &str| t[k].as_i64().unwrap_or(0);
    let users: i64 = inp.members.values().map(|m| m.len() as i64).sum();
    if n("granted") != inp.grant * users {
        v.fail(format!(
            "granted {} but {} were granted",
            n("granted"),
            inp.grant * users
        ));
    }
    if n("negative_accounts") != 0 {
        v.fail(format!("{} negative accounts", n("negative_accounts")));
    }
    let lhs = n("coins") + n("earnings") + n("platform_revenue") - n("lucky_paid");
    if lhs != n("granted") {
        v.fail(format!(
            "coins + earnings + platform − lucky = {lhs}, granted {}",
            n("granted")
        ));
    }
    v
}

/// Checker 7 (liveness); also returns, per room, the time it took to serve again.
pub fn liveness(h: &[Record], inp: &Inputs, w: &[Window]) -> (Verdict, BTreeMap<String, u64>) {
    let mut v = Verdict::new("7 every room serves again after the faults, clients converge");
    // Every outage of a room (from its last success before a failed operation to its next
    // success) ends within the hold of the fault it began in, TTL and the recovery bound: a
    // failover is bounded, not only the end of the run.
    let slack = inp.ttl + inp.recovery_bound;
    let mut last_ok: HashMap<&str, u64> = HashMap::new();
    let mut outage_from: HashMap<&str, u64> = HashMap::new();
    for r in h {
        let Some(room) = r.room.as_deref() else {
            continue;
        };
        match r.kind() {
            Kind::Ok => {
                // The clients' records interleave, so `t` is not in order: an answer timed
                // before the outage began says nothing about its end.
                if let Some(from) = outage_from.remove(room) {
                    if r.t < from {
                        outage_from.insert(room, from);
                        continue;
                    }
                    v.checked += 1;
                    let hold = w
                        .iter()
                        .filter(|x| from >= x.start && from <= x.end)
                        .map(|x| x.end.saturating_sub(x.start))
                        .max()
                        .unwrap_or(0);
                    let bound = hold + slack.as_millis() as u64;
                    if r.t - from > bound {
                        v.fail(format!(
                            "{room} served nothing for {} ms from {from} (bound {bound})",
                            r.t - from
                        ));
                    }
                }
                let last = last_ok.entry(room).or_insert(r.t);
                *last = (*last).max(r.t);
            }
            Kind::Fail | Kind::Unknown => {
                let since = last_ok.get(room).copied().unwrap_or(r.t);
                outage_from.entry(room).or_insert(since);
            }
            _ => {}
        }
    }
    let faults_end = h
        .iter()
        .find(|r| r.kind() == Kind::Phase && r.op.as_deref() == Some("faults_end"))
        .map_or(0, |r| r.t);
    let mut back: BTreeMap<String, u64> = BTreeMap::new();
    for r in h
        .iter()
        .filter(|r| r.kind() == Kind::Ok && r.t >= faults_end)
    {
        if let Some(room) = &r.room {
            back.entry(room.clone()).or_insert(r.t - faults_end);
        }
    }
    let bound = (inp.ttl + inp.recovery_bound).as_millis() as u64;
    for room in inp.members.keys() {
        v.checked += 1;
        match back.get(room) {
            Some(ms) if *ms <= bound => {}
            Some(ms) => v.fail(format!(
                "{room} served again {ms} ms after the faults (bound {bound})"
            )),
            None => v.fail(format!("{room} never served again after the faults")),
        }
    }
    // Every member received every member's last chat.
    let mut got: HashSet<(&str, &str)> = HashSet::new();
    for r in h.iter().filter(|r| r.kind() == Kind::Event) {
        if let (Some(c), Some(t)) = (r.client.as_deref(), r.text.as_deref())
            && let Some(who) = t.strip_prefix("fin:")
        {
            got.insert((c, who));
        }
    }
    for members in inp.members.values() {
        for a in members {
            for b in members {
                v.checked += 1;
                if !got.contains(&(a.as_str(), b.as_str())) {
                    v.fail(format!("{a} never received {b}'s last chat"));
                }
            }
        }
    }
    (v, back)
}

/// Checker 8: every fault that must move a room's ownership did, so a run cannot pass on
/// faults that struck nothing. After a kill or a pause of a shard, a room that shard served
/// when the fault began is served again with a higher fence (by the shard's next process, or
/// by another shard); after a move, the moved room is; after a Redis wipe, which takes every
/// lease, some room is. Within the fault's window, the TTL and the recovery bound after it.
pub fn faults_took_effect(audit: &[AuditLine], w: &[Window], inp: &Inputs) -> Verdict {
    let mut v = Verdict::new("8 every kill, pause, move and wipe moved a room to a new fence");
    let serves: Vec<&AuditLine> = audit.iter().filter(|a| a.what == "serve").collect();
    // The fence and owner of each room's last serve at or before `t`.
    let at = |t: u64| {
        let mut last: HashMap<&str, (u64, &str)> = HashMap::new();
        for a in serves.iter().filter(|a| a.t <= t) {
            last.insert(a.room.as_str(), (a.fence, a.owner.as_str()));
        }
        last
    };
    let grace = (inp.ttl + inp.recovery_bound).as_millis() as u64;
    for x in w {
        let Some(kind) = x.kind else { continue };
        let struck: Vec<(&str, u64)> = match kind {
            FaultKind::KillShard | FaultKind::PauseShard => at(x.start)
                .into_iter()
                .filter(|(_, (_, owner))| owner.split('/').next() == Some(x.target.as_str()))
                .map(|(room, (fence, _))| (room, fence))
                .collect(),
            FaultKind::MoveRoom => {
                let fence = at(x.start).get(x.target.as_str()).map_or(0, |f| f.0);
                vec![(x.target.as_str(), fence)]
            }
            FaultKind::RedisWipe => at(x.start)
                .into_iter()
                .map(|(room, (fence, _))| (room, fence))
                .collect(),
            _ => continue,
        };
        v.checked += 1;
        let what = format!("{} of {} at {}", kind.name(), x.target, x.start);
        if struck.is_empty() {
            v.fail(format!("{what}: it struck no room"));
            continue;
        }
        let until = x.end.saturating_add(grace);
        let moved = serves.iter().any(|a| {
            a.t > x.start
                && a.t <= until
                && struck
                    .iter()
                    .any(|(room, fence)| a.room == *room && a.fence > *fence)
        });
        if !moved {
            v.fail(format!(
                "{what}: none of {:?} was served with a new fence within {grace} ms of the heal",
                struck.iter().map(|(r, _)| *r).collect::<Vec<_>>()
            ));
        }
    }
    v
}

/// The liveness summary.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// Operations by `op:outcome`.
    pub ops: BTreeMap<String, u64>,
    /// Events received.
    pub events: u64,
    /// Faults by kind.
    pub faults: BTreeMap<String, u64>,
    /// Per room: availability (ok ÷ completed operations) per 5 s bucket, in order.
    pub availability: BTreeMap<String, Vec<f64>>,
    /// Per room: the longest stretch without a successful operation while some were tried (ms).
    pub longest_outage_ms: BTreeMap<String, u64>,
    /// Per fault kind: the longest outage of any room that began in its window (ms).
    pub failover_ms: BTreeMap<String, u64>,
    /// p99 of successful operations' latency (ms) inside fault windows.
    pub p99_ms_during_faults: u64,
    /// p99 outside them.
    pub p99_ms_calm: u64,
    /// Per room: ms from the last fault's heal to its first successful operation.
    pub served_again_ms: BTreeMap<String, u64>,
}

fn p99(mut v: Vec<u64>) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

/// Builds the summary.
pub fn summary(h: &[Record], w: &[Window], back: BTreeMap<String, u64>) -> Summary {
    let mut s = Summary {
        served_again_ms: back,
        ..Summary::default()
    };
    let t0 = h.first().map_or(0, |r| r.t);
    let in_fault = |t: u64| w.iter().any(|x| t >= x.start && t <= x.end);
    let (mut during, mut calm) = (Vec::new(), Vec::new());
    let mut buckets: BTreeMap<String, BTreeMap<u64, (u64, u64)>> = BTreeMap::new();
    let mut last_ok: HashMap<String, u64> = HashMap::new();
    let mut outage_from: HashMap<String, u64> = HashMap::new();
    for r in h {
        match r.kind() {
            Kind::Event => s.events += 1,
            Kind::Fault => {
                if let Some(op) = &r.op
                    && !op.starts_with("heal:")
                {
                    *s.faults.entry(op.clone()).or_default() += 1;
                }
            }
            Kind::Ok | Kind::Fail | Kind::Unknown => {
                let op = r.op.as_deref().unwrap_or("?");
                let outcome = format!("{:?}", r.kind()).to_lowercase();
                *s.ops.entry(format!("{op}:{outcome}")).or_default() += 1;
                let Some(room) = r.room.clone() else { continue };
                let b = buckets.entry(room.clone()).or_default();
                let e = b.entry((r.t.saturating_sub(t0)) / 5000).or_default();
                e.1 += 1;
                if r.kind() == Kind::Ok {
                    e.0 += 1;
                    if let Some(ms) = r.ms {
                        if in_fault(r.t) {
                            during.push(ms);
                        } else {
                            calm.push(ms);
                        }
                    }
                    if let Some(from) = outage_from.remove(&room) {
                        let len = r.t - from;
                        let cur = s.longest_outage_ms.entry(room.clone()).or_default();
                        *cur = (*cur).max(len);
                        for x in w.iter().filter(|x| from >= x.start && from <= x.end) {
                            if let Some(k) = x.kind {
                                let f = s.failover_ms.entry(k.name().to_owned()).or_default();
                                *f = (*f).max(len);
                            }
                        }
                    }
                    last_ok.insert(room, r.t);
                } else {
                    let since = last_ok.get(&room).copied().unwrap_or(r.t);
                    outage_from.entry(room).or_insert(since);
                }
            }
            _ => {}
        }
    }
    for (room, b) in buckets {
        let last = b.keys().next_back().copied().unwrap_or(0);
        let series = (0..=last)
            .map(|i| {
                b.get(&i)
                    .map_or(1.0, |(ok, all)| *ok as f64 / (*all).max(1) as f64)
            })
            .collect();
        s.availability.insert(room, series);
    }
    s.p99_ms_during_faults = p99(during);
    s.p99_ms_calm = p99(calm);
    s
}

#[cfg(test)]
#[path = "check/tests.rs"]
mod tests;
