//! The nemesis: a fault schedule drawn from the seed, and its execution against the cluster.
//! One fault at a time, each held for its time and then healed, so every fault has a clear
//! window in the history (`fault` lines: the fault's name, then `heal:<name>`).

use std::time::Duration;

use kit::proxy::Fault;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::time::Instant;

use super::cluster::ChaosCluster;
use super::history::{Kind, Record, Recorder};
use super::sim::Shared;

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL a shard, restart it after a while.
    KillShard,
    /// SIGKILL a gateway, restart it after a while.
    KillGateway,
    /// SIGSTOP a shard for 1.5×TTL, then SIGCONT.
    PauseShard,
    /// Restart Redis cleanly keeping its data (`SHUTDOWN SAVE`: leases survive).
    RedisRestart,
    /// Restart Redis without persistence: leases, fence counters, snapshots vanish.
    RedisWipe,
    /// A planned move of a room to another shard.
    MoveRoom,
    /// Drain a shard (weight 0), then give its weight back.
    DrainShard,
    /// Change a shard's weight (2), then back to 1.
    WeightShard,
    /// Every client drops its connection and resumes at once.
    ReconnectStorm,
    /// Delay on one shard's Redis link (2×TTL per chunk: renewals cannot prove the lease).
    RedisLinkDelay,
    /// Blackhole on one shard's Redis link.
    RedisLinkBlackhole,
    /// Half-open on one shard's Redis link (requests go, answers are lost).
    RedisLinkHalfOpen,
    /// One shard's Redis link connections are dropped and refused for a while.
    RedisLinkDrop,
    /// Delay on the gateways' link to one shard.
    GatewayLinkDelay,
    /// Blackhole on the gateways' link to one shard.
    GatewayLinkBlackhole,
    /// Half-open on the gateways' link to one shard.
    GatewayLinkHalfOpen,
    /// The gateways' link connections to one shard are dropped and refused for a while.
    GatewayLinkDrop,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 17] = [
        Self::KillShard,
        Self::KillGateway,
        Self::PauseShard,
        Self::RedisRestart,
        Self::RedisWipe,
        Self::MoveRoom,
        Self::DrainShard,
        Self::WeightShard,
        Self::ReconnectStorm,
        Self::RedisLinkDelay,
        Self::RedisLinkBlackhole,
        Self::RedisLinkHalfOpen,
        Self::RedisLinkDrop,
        Self::GatewayLinkDelay,
        Self::GatewayLinkBlackhole,
        Self::GatewayLinkHalfOpen,
        Self::GatewayLinkDrop,
    ];

    /// Its name in the history.
    pub fn name(self) -> &'static str {
        match self {
            Self::KillShard => "kill_shard",
            Self::KillGateway => "kill_gateway",
            Self::PauseShard => "pause_shard",
            Self::RedisRestart => "redis_restart",
            Self::RedisWipe => "redis_wipe",
            Self::MoveRoom => "move_room",
            Self::DrainShard => "drain_shard",
            Self::WeightShard => "weight_shard",
            Self::ReconnectStorm => "reconnect_storm",
            Self::RedisLinkDelay => "redis_link_delay",
            Self::RedisLinkBlackhole => "redis_link_blackhole",
            Self::RedisLinkHalfOpen => "redis_link_half_open",
            Self::RedisLinkDrop => "redis_link_drop",
            Self::GatewayLinkDelay => "gateway_link_delay",
            Self::GatewayLinkBlackhole => "gateway_link_blackhole",
            Self::GatewayLinkHalfOpen => "gateway_link_half_open",
            Self::GatewayLinkDrop => "gateway_link_drop",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether it can take a room's lease from its owner (kills, pauses, Redis and the
    /// shard↔Redis link): a lease lost inside its window is explained.
    pub fn can_lose_leases(self) -> bool {
        matches!(
            self,
            Self::KillShard
                | Self::PauseShard
                | Self::RedisRestart
                | Self::RedisWipe
                | Self::RedisLinkDelay
                | Self::RedisLinkBlackhole
                | Self::RedisLinkHalfOpen
                | Self::RedisLinkDrop
        )
    }
}

/// One fault of the schedule.
#[derive(Clone, Debug)]
pub struct Planned {
    /// When it starts, from the start of traffic.
    pub at: Duration,
    /// What.
    pub kind: FaultKind,
    /// Which shard or gateway (index), or room for a move.
    pub target: usize,
    /// How long it is held before it is healed.
    pub hold: Duration,
}

/// Draws the schedule: faults of `kinds` back to back over `span`, each after a pause of
/// 1–3 s of calm, in an order and on targets drawn from `seed`. With `each_once`, every kind
/// comes once (shuffled) before any repeats.
pub fn schedule(
    seed: u64,
    span: Duration,
    ttl: Duration,
    kinds: &[FaultKind],
    shards: usize,
    gateways: usize,
    rooms: usize,
) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut t = Duration::from_secs(2);
    let mut bag: Vec<FaultKind> = Vec::new();
    while t < span && !kinds.is_empty() {
        if bag.is_empty() {
            bag = kinds.to_vec();
            // Fisher–Yates from the seeded generator: the same seed, the same order.
            for i in (1..bag.len()).rev() {
                let j = rng.random_range(0..=i);
                bag.swap(i, j);
            }
        }
        let Some(kind) = bag.pop() else { break };
        let target = match kind {
            FaultKind::KillGateway => rng.random_range(0..gateways.max(1)),
            FaultKind::MoveRoom => rng.random_range(0..rooms.max(1)),
            _ => rng.random_range(0..shards.max(1)),
        };
        let hold = match kind {
            FaultKind::KillShard | FaultKind::KillGateway => ttl + ttl / 2,
            FaultKind::PauseShard => ttl + ttl / 2,
            FaultKind::RedisRestart | FaultKind::RedisWipe | FaultKind::ReconnectStorm => {
                Duration::ZERO
            }
            FaultKind::MoveRoom => Duration::from_secs(1),
            FaultKind::DrainShard | FaultKind::WeightShard => ttl * 2,
            _ => ttl + ttl / 2 + Duration::from_millis(rng.random_range(0..500)),
        };
        out.push(Planned {
            at: t,
            kind,
            target,
            hold,
        });
        t += hold + Duration::from_millis(rng.random_range(1000..3000));
    }
    out
}

fn note(rec: &Recorder, kind: FaultKind, target: &str, heal: bool) {
    let mut r = Record::new(Kind::Fault);
    r.op = Some(if heal {
        format!("heal:{}", kind.name())
    } else {
        kind.name().to_owned()
    });
    r.client = Some(target.to_owned());
    rec.put(&r);
}

/// The shard a fault on a shard strikes: the drawn one when it owns a room now, else the next
/// one (in order) that does, so that the fault strikes a room (on a shard owning none it would
/// test nothing); the drawn one when no owner can be read. Rooms are `room-0..rooms`.
async fn striking(c: &ChaosCluster, drawn: usize, rooms: usize) -> usize {
    let n = c.shards.len().max(1);
    let mut owners = std::collections::HashSet::new();
    for i in 0..rooms {
        if let Ok(r) = c
            .admin("GET", &format!("/admin/rooms/room-{i}"), None)
            .await
            && let Some(owner) = r.json()["owner"].as_str()
        {
            owners.insert(owner.to_owned());
        }
    }
    (0..n)
        .map(|k| (drawn + k) % n)
        .find(|&s| c.shards.get(s).is_some_and(|x| owners.contains(&x.id)))
        .unwrap_or(drawn % n)
}

/// Whether a fault of `kind` strikes one shard (a kill, a pause, or one of its links).
fn strikes_a_shard(kind: FaultKind) -> bool {
    !matches!(
        kind,
        FaultKind::KillGateway
            | FaultKind::MoveRoom
            | FaultKind::RedisRestart
            | FaultKind::RedisWipe
            | FaultKind::ReconnectStorm
    )
}

/// Runs the schedule from `start` on rooms `room-0..rooms`; returns the faults injected by
/// kind. A fault on a shard strikes one that owns a room when it starts (see `striking`).
///
/// # Errors
/// When a node cannot be restarted (the run cannot go on).
pub async fn run(
    c: &mut ChaosCluster,
    plan: &[Planned],
    start: Instant,
    sh: &Shared,
    rooms: usize,
) -> anyhow::Result<std::collections::BTreeMap<&'static str, u32>> {
    let mut counts = std::collections::BTreeMap::new();
    let ttl = c.ttl;
    for p in plan {
        tokio::time::sleep_until(start + p.at).await;
        let s = if strikes_a_shard(p.kind) {
            striking(c, p.target, rooms).await
        } else {
            p.target % c.shards.len().max(1)
        };
        let shard_id = c.shards[s].id.clone();
        let target = match p.kind {
            FaultKind::KillGateway => c.gateways[p.target % c.gateways.len()].id.clone(),
            FaultKind::MoveRoom => format!("room-{}", p.target),
            FaultKind::RedisRestart | FaultKind::RedisWipe => "redis".to_owned(),
            FaultKind::ReconnectStorm => "clients".to_owned(),
            _ => shard_id.clone(),
        };
        note(&sh.rec, p.kind, &target, false);
        *counts.entry(p.kind.name()).or_insert(0) += 1;
        match p.kind {
            FaultKind::KillShard => {
                c.kill(true, s);
                tokio::time::sleep(p.hold).await;
                c.start_shard(s).await?;
            }
            FaultKind::KillGateway => {
                let g = p.target % c.gateways.len();
                c.kill(false, g);
                tokio::time::sleep(p.hold).await;
                c.start_gateway(g).await?;
            }
            FaultKind::PauseShard => {
                c.pause(true, s);
                tokio::time::sleep(p.hold).await;
                c.resume(true, s);
            }
            FaultKind::RedisRestart => c.redis.restart_persisted().await?,
            FaultKind::RedisWipe => c.redis.restart().await?,
            FaultKind::MoveRoom => {
                // To a shard other than the current owner when the owner is known.
                let owner = c
                    .admin("GET", &format!("/admin/rooms/{target}"), None)
                    .await
                    .ok()
                    .and_then(|r| r.json()["owner"].as_str().map(str::to_owned));
                let others: Vec<String> = c
                    .shards
                    .iter()
                    .map(|x| x.id.clone())
                    .filter(|id| Some(id) != owner.as_ref())
                    .collect();
                let to = others
                    .choose(&mut StdRng::seed_from_u64(p.at.as_millis() as u64))
                    .cloned()
                    .unwrap_or(shard_id.clone());
                let path = format!("/admin/rooms/{target}/move");
                let _ = c.admin("POST", &path, Some(json!({ "to": to }))).await;
                tokio::time::sleep(p.hold).await;
            }
            FaultKind::DrainShard | FaultKind::WeightShard => {
                let (path, body) = if p.kind == FaultKind::DrainShard {
                    (format!("/admin/nodes/{shard_id}/drain"), None)
                } else {
                    (
                        format!("/admin/nodes/{shard_id}/weight"),
                        Some(json!({"weight": 2})),
                    )
                };
                let method = if body.is_some() { "PUT" } else { "POST" };
                let _ = c.admin(method, &path, body).await;
                tokio::time::sleep(p.hold).await;
                let path = format!("/admin/nodes/{shard_id}/weight");
                let _ = c.admin("PUT", &path, Some(json!({"weight": 1}))).await;
            }
            FaultKind::ReconnectStorm => {
                sh.storm.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            FaultKind::RedisLinkDelay
            | FaultKind::RedisLinkBlackhole
            | FaultKind::RedisLinkHalfOpen
            | FaultKind::RedisLinkDrop => {
                let proxy = &c.redis_proxies[s];
                proxy.set_fault(proxy_fault(p.kind, ttl));
                tokio::time::sleep(p.hold).await;
                // Held bytes flow on (a healed partition), unless the peers gave up.
                proxy.heal();
            }
            FaultKind::GatewayLinkDelay
            | FaultKind::GatewayLinkBlackhole
            | FaultKind::GatewayLinkHalfOpen
            | FaultKind::GatewayLinkDrop => {
                let proxy = &c.link_proxies[s];
                proxy.set_fault(proxy_fault(p.kind, ttl));
                tokio::time::sleep(p.hold).await;
                // Held bytes flow on (a healed partition), unless the peers gave up.
                proxy.heal();
            }
        }
        note(&sh.rec, p.kind, &target, true);
    }
    Ok(counts)
}

fn proxy_fault(kind: FaultKind, ttl: Duration) -> Fault {
    match kind {
        FaultKind::RedisLinkDelay => Fault::Delay(ttl * 2),
        FaultKind::GatewayLinkDelay => Fault::Delay(Duration::from_millis(300)),
        FaultKind::RedisLinkBlackhole | FaultKind::GatewayLinkBlackhole => Fault::Blackhole,
        FaultKind::RedisLinkHalfOpen | FaultKind::GatewayLinkHalfOpen => Fault::HalfOpen,
        _ => Fault::Refuse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_schedule_and_every_kind_comes_once_first() {
        let ttl = Duration::from_secs(2);
        let span = Duration::from_secs(600);
        let a = schedule(7, span, ttl, &FaultKind::ALL, 3, 2, 6);
        let b = schedule(7, span, ttl, &FaultKind::ALL, 3, 2, 6);
        let names = |v: &[Planned]| {
            v.iter()
                .map(|p| (p.kind, p.target, p.at))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&a), names(&b));
        let first: std::collections::HashSet<_> = a
            .iter()
            .take(FaultKind::ALL.len())
            .map(|p| p.kind)
            .collect();
        assert_eq!(first.len(), FaultKind::ALL.len());
        assert!(a.windows(2).all(|w| w[0].at + w[0].hold < w[1].at));
        for k in FaultKind::ALL {
            assert_eq!(FaultKind::parse(k.name()), Some(k));
        }
    }
}
