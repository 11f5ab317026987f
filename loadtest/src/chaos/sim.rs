//! The client simulator: users in rooms doing what users do (chat, gifts to the room's host,
//! seat changes, leaving and rejoining, dropping the connection and resuming), each following
//! the protocol's client rules (PROTOCOL.md section 8: apply in order, rejoin with `since` on a
//! gap, a `room.left` or a lost connection; retry a gift by its `req_id`). Every operation
//! and every sequenced event received goes to the history.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use kit::client::{Client, ClientError, Event, connect};
use protocol::{ErrorCode, RoomId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::history::{Kind, Record, Recorder, now_ms};

/// How long a reply may take before the operation counts as unknown.
const REPLY_WAIT: Duration = Duration::from_secs(8);
/// Pause between reconnect or rejoin attempts.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// Most attempts of one gift (same `req_id`) before it is left unknown.
const GIFT_ATTEMPTS: u32 = 30;
/// Coins of one rose.
pub const ROSE: i64 = 10;

/// What every simulated user shares.
#[derive(Clone)]
pub struct Shared {
    /// The gateways' URLs.
    pub urls: Vec<String>,
    /// JWT secret.
    pub secret: Vec<u8>,
    /// The history.
    pub rec: Recorder,
    /// Set when the traffic phase ends.
    pub stop: Arc<AtomicBool>,
    /// Bumped by a reconnect storm: every client drops its connection and resumes.
    pub storm: Arc<AtomicU64>,
    /// Users only join and listen (no operations).
    pub quiet: bool,
}

/// One simulated user.
pub struct User {
    id: String,
    room: RoomId,
    /// Who this user's gifts go to.
    gift_to: String,
    host: bool,
    sh: Shared,
    rng: StdRng,
    client: Option<Client>,
    gw: usize,
    op_seq: u64,
    storm_seen: u64,
    gifts: u64,
    chats: u64,
    /// Users whose last chat (`fin:<user>`) this user received.
    fins: std::collections::HashSet<String>,
    /// The room position of the last connection, carried over to the next one (a new
    /// connection knows nothing; the resume needs it).
    saved: Option<(u64, u64)>,
}

/// The users of `rooms` rooms × `per_room` members.
pub fn users(sh: &Shared, rooms: usize, per_room: usize, seed: u64) -> Vec<User> {
    let mut out = Vec::new();
    for r in 0..rooms {
        for k in 0..per_room {
            let id = user_id(r, k);
            let gift_to = user_id(r, usize::from(k == 0));
            out.push(User {
                id: id.clone(),
                room: RoomId::from(format!("room-{r}").as_str()),
                gift_to,
                host: k == 0,
                sh: sh.clone(),
                rng: StdRng::seed_from_u64(seed ^ ((r as u64) << 32) ^ k as u64),
                client: None,
                gw: (r + k) % sh.urls.len().max(1),
                op_seq: 0,
                storm_seen: 0,
                gifts: 0,
                chats: 0,
                fins: std::collections::HashSet::new(),
                saved: None,
            });
        }
    }
    out
}

/// User `k` of room `r`.
pub fn user_id(r: usize, k: usize) -> String {
    format!("u{r}-{k}")
}

fn is_connection(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Closed(_) | ClientError::Ws(_) | ClientError::Timeout
    )
}

impl User {
    /// The user's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The user's room.
    pub fn room(&self) -> &RoomId {
        &self.room
    }

    fn rec(&self, mut r: Record) {
        r.client = Some(self.id.clone());
        if r.room.is_none() {
            r.room = Some(self.room.to_string());
        }
        r.node = Some(format!("g{}", self.gw + 1));
        self.sh.rec.put(&r);
    }

    fn next_id(&mut self) -> u64 {
        self.op_seq += 1;
        self.op_seq
    }

    /// Records the sequenced events `evs` (in arrival order) and reports whether a rejoin is
    /// due (a gap, or `room.left` for our room).
    fn record_events(&mut self, evs: Vec<Event>) -> bool {
        let mut rejoin = false;
        for e in evs {
            if e.ev == "chat"
                && let Some(who) = e.d["text"].as_str().and_then(|t| t.strip_prefix("fin:"))
            {
                self.fins.insert(who.to_owned());
            }
            if e.ev == "room.left" && e.d["room"] == self.room.as_str() {
                rejoin = true;
            }
            let (Some(room), Some(epoch), Some(seq)) = (&e.room, e.epoch, e.seq) else {
                continue;
            };
            let mut r = Record::new(Kind::Event);
            r.op = Some(e.ev.clone());
            r.room = Some(room.to_string());
            r.epoch = Some(epoch);
            r.seq = Some(seq);
            r.text = e.d["text"].as_str().map(str::to_owned);
            r.order = e.d["order"].as_str().map(str::to_owned);
            self.rec(r);
        }
        let gap = self
            .client
            .as_ref()
            .and_then(|c| c.position(&self.room))
            .is_some_and(|p| p.gap_pending);
        if gap {
            self.rec(Record::new(Kind::Gap));
        }
        rejoin || gap
    }

    /// Drains the events queued during a request; rejoins if they call for it.
    async fn after_request(&mut self) {
        let evs = self
            .client
            .as_mut()
            .map(Client::queued_events)
            .unwrap_or_default();
        if self.record_events(evs) {
            self.rejoin().await;
        }
    }

    /// Connects (rotating over the gateways) until it works or the run stops.
    async fn ensure_connected(&mut self) -> bool {
        if self.client.is_some() {
            return true;
        }
        let token = match kit::client::token(&self.sh.secret, &self.id) {
            Ok(t) => t,
            Err(_) => return false,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let url = self.sh.urls[self.gw % self.sh.urls.len()].clone();
            match tokio::time::timeout(REPLY_WAIT, connect(&url, Some(&token))).await {
                Ok(Ok(c)) => {
                    self.client = Some(c);
                    return true;
                }
                _ => {
                    self.gw = (self.gw + 1) % self.sh.urls.len();
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
            if self.sh.stop.load(Ordering::Relaxed) && self.client.is_none() {
                // Keep trying past the stop: convergence needs every client back.
                continue;
            }
        }
        false
    }

    /// Drops the connection (keeping the tracked positions for the resume).
    fn drop_connection(&mut self) {
        // Events the connection received and queued are part of the history too.
        let evs = self
            .client
            .as_mut()
            .map(Client::queued_events)
            .unwrap_or_default();
        self.record_events(evs);
        if let Some(s) = self.client.as_ref().and_then(|c| c.since(&self.room)) {
            self.saved = Some((s.epoch, s.seq));
        }
        self.client = None;
        self.gw = (self.gw + 1) % self.sh.urls.len();
    }

    /// Joins the room (resuming from the tracked position), creating it if it vanished (a
    /// Redis wipe), retrying while it is unavailable. Records each attempt.
    async fn rejoin(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            if !self.ensure_connected().await {
                continue;
            }
            let Some(c) = self.client.as_mut() else {
                continue;
            };
            // A new connection knows nothing: carry the position over.
            if c.position(&self.room).is_none()
                && let Some((e, s)) = self.saved
            {
                c.set_position(&self.room, e, s);
            }
            let since = c.since(&self.room).map(|s| (s.epoch, s.seq));
            let id = self.next_id();
            let mut inv = Record::new(Kind::Invoke);
            inv.op = Some("room.join".into());
            inv.id = Some(id);
            inv.since = since;
            self.rec(inv);
            let t0 = Instant::now();
            let Some(c) = self.client.as_mut() else {
                continue;
            };
            let res = tokio::time::timeout(REPLY_WAIT, c.join(&self.room, true, None)).await;
            let evs = c.queued_events();
            // Replayed events arrive before the reply: record them first.
            self.record_events(evs);
            let mut done = Record::new(Kind::Ok);
            done.op = Some("room.join".into());
            done.id = Some(id);
            done.ms = Some(t0.elapsed().as_millis() as u64);
            match res {
                Ok(Ok(ok)) => {
                    done.epoch = ok["epoch"].as_u64();
                    done.seq = ok["seq"].as_u64();
                    done.resync = ok["resync"].as_bool();
                    done.since = since;
                    self.rec(done);
                    return;
                }
                Ok(Err(e)) if e.code() == Some(ErrorCode::RoomNotFound) => {
                    done.kind = Some(Kind::Fail);
                    done.err = Some("ROOM_NOT_FOUND".into());
                    self.rec(done);
                    self.create_room().await;
                }
                Ok(Err(e)) if is_connection(&e) => {
                    done.kind = Some(Kind::Unknown);
                    done.err = Some(e.to_string());
                    self.rec(done);
                    self.drop_connection();
                }
                Ok(Err(e)) => {
                    done.kind = Some(Kind::Fail);
                    done.err = Some(e.code().map_or(e.to_string(), |c| format!("{c:?}")));
                    self.rec(done);
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(_) => {
                    done.kind = Some(Kind::Unknown);
                    done.err = Some("timeout".into());
                    self.rec(done);
                    self.drop_connection();
                }
            }
        }
    }

    async fn create_room(&mut self) {
        let Some(c) = self.client.as_mut() else {
            return;
        };
        let d = json!({"room": self.room, "title": "chaos", "seats": 8});
        let _ = tokio::time::timeout(REPLY_WAIT, c.request("room.create", d)).await;
    }

    /// One request with its invoke and completion records; `None` on a lost connection.
    async fn request(&mut self, op: &str, d: Value, inv: Record) -> (Record, Option<Value>) {
        let id = self.next_id();
        let mut inv = inv;
        inv.op = Some(op.into());
        inv.id = Some(id);
        let mut done = Record::new(Kind::Ok);
        done.op = Some(op.into());
        done.id = Some(id);
        done.text.clone_from(&inv.text);
        done.req.clone_from(&inv.req);
        self.rec(inv);
        let t0 = Instant::now();
        let res = match self.client.as_mut() {
            Some(c) => tokio::time::timeout(REPLY_WAIT, c.request(op, d))
                .await
                .unwrap_or(Err(ClientError::Timeout)),
            None => Err(ClientError::Closed(None)),
        };
        done.ms = Some(t0.elapsed().as_millis() as u64);
        done.t = now_ms();
        let out = match res {
            Ok(v) => Some(v),
            Err(e) if is_connection(&e) => {
                done.kind = Some(Kind::Unknown);
                done.err = Some(e.to_string());
                self.drop_connection();
                None
            }
            Err(e) => {
                let code = e.code();
                let uncertain = matches!(code, Some(ErrorCode::Unavailable | ErrorCode::Internal));
                done.kind = Some(if uncertain && op == "gift.send" {
                    Kind::Unknown
                } else {
                    Kind::Fail
                });
                done.err = Some(code.map_or(e.to_string(), |c| format!("{c:?}")));
                None
            }
        };
        (done, out)
    }

    async fn chat(&mut self) {
        self.chats += 1;
        let text = format!("{}#{}", self.id, self.chats);
        let mut inv = Record::new(Kind::Invoke);
        inv.text = Some(text.clone());
        let d = json!({"room": self.room, "text": text});
        let (mut done, ok) = self.request("chat.send", d, inv).await;
        if let Some(v) = &ok {
            done.seq = v["seq"].as_u64();
        }
        let lost = done.kind == Some(Kind::Unknown);
        self.rec(done);
        self.after_request().await;
        if lost {
            self.rejoin().await;
        }
    }

    async fn gift(&mut self) {
        self.gifts += 1;
        let req = format!("{}-gift-{}", self.id, self.gifts);
        let d = json!({"room": self.room, "req_id": req, "gift": "rose", "to": [self.gift_to]});
        for _ in 0..GIFT_ATTEMPTS {
            let mut inv = Record::new(Kind::Invoke);
            inv.req = Some(req.clone());
            inv.coins = Some(ROSE);
            let (mut done, ok) = self.request("gift.send", d.clone(), inv).await;
            let kind = done.kind;
            if let Some(v) = &ok {
                done.order = v["order"].as_str().map(str::to_owned);
                done.coins = Some(ROSE);
            }
            self.rec(done);
            self.after_request().await;
            match kind {
                Some(Kind::Unknown) => {
                    // Retry by the same req_id, after the rejoin the protocol asks for.
                    self.rejoin().await;
                    if self.sh.stop.load(Ordering::Relaxed) && self.client.is_none() {
                        return;
                    }
                }
                _ => return,
            }
        }
    }

    async fn seat(&mut self) {
        let (op, d) = if self.rng.random_bool(0.5) {
            let n = self.rng.random_range(1..=8u32);
            ("seat.take", json!({"room": self.room, "seat": n}))
        } else {
            ("seat.leave", json!({"room": self.room}))
        };
        let (done, _) = self.request(op, d, Record::new(Kind::Invoke)).await;
        let lost = done.kind == Some(Kind::Unknown);
        self.rec(done);
        self.after_request().await;
        if lost {
            self.rejoin().await;
        }
    }

    async fn leave_and_rejoin(&mut self) {
        let d = json!({"room": self.room});
        let (done, _) = self
            .request("room.leave", d, Record::new(Kind::Invoke))
            .await;
        self.rec(done);
        self.after_request().await;
        self.rejoin().await;
    }

    /// Reads events for `d` (the user "thinks"); handles gaps and lost connections.
    async fn idle(&mut self, d: Duration) {
        let until = Instant::now() + d;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            let Some(c) = self.client.as_mut() else {
                self.rejoin().await;
                continue;
            };
            match c.next_event(left).await {
                Ok(e) => {
                    if self.record_events(vec![e]) {
                        self.rejoin().await;
                    }
                }
                Err(ClientError::Timeout) => return,
                Err(_) => {
                    self.drop_connection();
                    self.rejoin().await;
                }
            }
        }
    }

    /// The user's life until the run's stop: join, then random operations.
    pub async fn run(mut self) -> Self {
        self.rejoin().await;
        if self.host {
            let d = json!({"room": self.room, "seat": 1});
            let (done, _) = self
                .request("seat.take", d, Record::new(Kind::Invoke))
                .await;
            self.rec(done);
            self.after_request().await;
        }
        while !self.sh.stop.load(Ordering::Relaxed) {
            let storm = self.sh.storm.load(Ordering::Relaxed);
            if storm != self.storm_seen {
                self.storm_seen = storm;
                self.drop_connection();
                self.rejoin().await;
            }
            let roll = if self.sh.quiet {
                100
            } else {
                self.rng.random_range(0..100u32)
            };
            match roll {
                0..40 => self.chat().await,
                40..60 => self.gift().await,
                60..72 => self.seat().await,
                72..75 => self.leave_and_rejoin().await,
                75..78 => {
                    self.drop_connection();
                    self.rejoin().await;
                }
                _ => {}
            }
            let pause = self.rng.random_range(100..400u64);
            self.idle(Duration::from_millis(pause)).await;
        }
        self
    }

    /// Convergence: rejoin (resume), send a last chat, then read until every member's last
    /// chat (`fin` texts of the room) has arrived or `within` passes. Records the final
    /// position as a `final` phase line.
    pub async fn converge(mut self, members: Vec<String>, within: Duration) -> Self {
        let deadline = Instant::now() + within;
        self.rejoin().await;
        let fin = format!("fin:{}", self.id);
        let mut inv = Record::new(Kind::Invoke);
        inv.text = Some(fin.clone());
        let d = json!({"room": self.room, "text": fin});
        for _ in 0..20 {
            let (done, ok) = self.request("chat.send", d.clone(), inv.clone()).await;
            self.rec(done);
            self.after_request().await;
            if ok.is_some() || Instant::now() >= deadline {
                break;
            }
            self.rejoin().await;
        }
        // Wait for everyone's fin (ours included).
        while !members.iter().all(|m| self.fins.contains(m)) && Instant::now() < deadline {
            let Some(c) = self.client.as_mut() else {
                self.rejoin().await;
                continue;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            match c.next_event(left.min(Duration::from_secs(1))).await {
                Ok(e) => {
                    if self.record_events(vec![e]) {
                        self.rejoin().await;
                    }
                }
                Err(ClientError::Timeout) => {}
                Err(_) => {
                    self.drop_connection();
                    self.rejoin().await;
                }
            }
        }
        let mut r = Record::new(Kind::Phase);
        r.op = Some("final".into());
        if let Some(p) = self.client.as_ref().and_then(|c| c.position(&self.room)) {
            r.epoch = Some(p.epoch);
            r.seq = Some(p.seq);
        }
        self.rec(r);
        self
    }
}
