//! Command line and config file of the `chorus` binary: flags and `CHORUS_*` variables via
//! clap, an optional TOML file for the rest. Precedence: flag/env > file > default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde::Deserialize;
use shard::ShardConfig;
use shard::gifts::{Catalog, GiftDef, Prize};

use crate::config::GatewayConfig;

mod admin;
mod events;
pub use events::events_settings;
mod rooms;
use crate::standalone::StandaloneConfig;
pub use admin::{AdminArgs, AdminVerb, RobotsVerb};
pub use rooms::RoomsVerb;

/// Default WebSocket address of standalone mode.
pub const DEFAULT_WS_ADDR: &str = "127.0.0.1:8080";
/// Default admin address of standalone mode.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:9090";
/// Default data directory.
pub const DEFAULT_DATA_DIR: &str = "./data";
/// Bytes of a generated secret: 256 bits, the HS256 key size.
const GENERATED_SECRET_BYTES: usize = 32;

/// Chorus: a realtime backend for live voice-party rooms.
#[derive(Debug, Parser)]
#[command(name = "chorus", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// What to run (standalone when omitted).
    #[command(subcommand)]
    pub cmd: Option<Cmd>,
    /// Standalone flags, when no subcommand is given.
    #[command(flatten)]
    pub standalone: StandaloneArgs,
}

/// The roles and tools of the one binary.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Gateway + shard + embedded storage in one process (the default).
    Standalone(StandaloneArgs),
    /// A shard node of a cluster: owns rooms through Redis leases.
    Shard(ShardArgs),
    /// A gateway node of a cluster: terminates WebSockets, routes by the ring.
    Gateway(GatewayArgs),
    /// Print a client token for a user, signed with the configured secret.
    Token(TokenArgs),
    /// Operator calls to a node's admin API (prints the JSON answer).
    Admin(AdminArgs),
}

/// `chorus shard` flags.
#[derive(Debug, Clone, Args)]
pub struct ShardArgs {
    /// Optional TOML config file (same keys as standalone where they apply).
    #[arg(long, env = "CHORUS_CONFIG")]
    pub config: Option<PathBuf>,
    /// This node's id (unique in the cluster), e.g. s1.
    #[arg(long, env = "CHORUS_NODE_ID")]
    pub node_id: String,
    /// Redis URL, e.g. redis://127.0.0.1:6379.
    #[arg(long, env = "CHORUS_REDIS")]
    pub redis: String,
    /// Link listen address (gateways connect here).
    #[arg(long, env = "CHORUS_LINK_ADDR", default_value = "127.0.0.1:7101")]
    pub link_addr: SocketAddr,
    /// The link address announced in the ring, when gateways reach this shard at another
    /// address than the one it binds (NAT, a proxy); default: the bound address.
    #[arg(long, env = "CHORUS_LINK_ADVERTISE")]
    pub link_advertise: Option<SocketAddr>,
    /// Admin HTTP listen address.
    #[arg(long, env = "CHORUS_ADMIN_ADDR", default_value = "127.0.0.1:9101")]
    pub admin_addr: SocketAddr,
    /// Room lease TTL in milliseconds (default 10000; renewed every TTL/3).
    #[arg(long, env = "CHORUS_LEASE_TTL_MS")]
    pub lease_ttl_ms: Option<u64>,
    /// Milliseconds without members before a room unloads (default 60000).
    #[arg(long, env = "CHORUS_IDLE_UNLOAD_MS")]
    pub idle_unload_ms: Option<u64>,
    /// TEST ONLY: renew a room's lease on its traffic instead of on the timer. Reproduces the
    /// seed incident (quiet rooms lose their owner). Never use in production.
    #[arg(long, hide = true, env = "CHORUS_TEST_RENEW_ON_TRAFFIC")]
    pub test_renew_on_traffic: bool,
    /// Ledger URL shared by every node (`sqlite://<path>` on one machine,
    /// `postgres://user:pass@host:5432/db`, `scylla://…`); without one, gifts are refused.
    #[arg(long, env = "CHORUS_LEDGER")]
    pub ledger: Option<String>,
}

/// `chorus gateway` flags.
#[derive(Debug, Clone, Args)]
pub struct GatewayArgs {
    /// Optional TOML config file (same keys as standalone where they apply).
    #[arg(long, env = "CHORUS_CONFIG")]
    pub config: Option<PathBuf>,
    /// This node's id (unique in the cluster), e.g. g1.
    #[arg(long, env = "CHORUS_NODE_ID")]
    pub node_id: String,
    /// Redis URL, e.g. redis://127.0.0.1:6379.
    #[arg(long, env = "CHORUS_REDIS")]
    pub redis: String,
    /// WebSocket listen address.
    #[arg(long, env = "CHORUS_WS_ADDR", default_value = "127.0.0.1:8080")]
    pub ws_addr: SocketAddr,
    /// Admin HTTP listen address.
    #[arg(long, env = "CHORUS_ADMIN_ADDR", default_value = "127.0.0.1:9201")]
    pub admin_addr: SocketAddr,
    /// Socket flags.
    #[command(flatten)]
    pub socket: SocketArgs,
    /// Ledger URL shared by every node; without one, wallet ops answer UNAVAILABLE.
    #[arg(long, env = "CHORUS_LEDGER")]
    pub ledger: Option<String>,
}

/// Per-socket flags of every role that serves WebSockets (standalone, gateway).
#[derive(Debug, Clone, Args)]
pub struct SocketArgs {
    /// Server ping interval in milliseconds (default 15000).
    #[arg(long, env = "CHORUS_HEARTBEAT_MS")]
    pub heartbeat_ms: Option<u64>,
    /// Per-connection requests per second (default 20).
    #[arg(long, env = "CHORUS_RATE_PER_SEC")]
    pub rate_per_sec: Option<u32>,
    /// Per-connection burst (default 40).
    #[arg(long, env = "CHORUS_RATE_BURST")]
    pub rate_burst: Option<u32>,
    /// How long a room request may wait for its room's owner, in milliseconds, before it is
    /// answered `UNAVAILABLE` (default 15000).
    #[arg(long, env = "CHORUS_ROUTE_RETRY_MS")]
    pub route_retry_ms: Option<u64>,
}

/// Flags shared by every role.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// Optional TOML config file.
    #[arg(long, env = "CHORUS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Embedded storage directory (default ./data).
    #[arg(long, env = "CHORUS_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

/// Standalone flags.
#[derive(Debug, Clone, Args)]
pub struct StandaloneArgs {
    /// Shared flags.
    #[command(flatten)]
    pub common: CommonArgs,
    /// WebSocket listen address (default 127.0.0.1:8080).
    #[arg(long, env = "CHORUS_WS_ADDR")]
    pub ws_addr: Option<SocketAddr>,
    /// Admin HTTP listen address (default 127.0.0.1:9090).
    #[arg(long, env = "CHORUS_ADMIN_ADDR")]
    pub admin_addr: Option<SocketAddr>,
    /// Socket flags.
    #[command(flatten)]
    pub socket: SocketArgs,
    /// Largest accepted frame in bytes (default 65536).
    #[arg(long, env = "CHORUS_MAX_FRAME_BYTES")]
    pub max_frame_bytes: Option<usize>,
    /// Milliseconds without members before a room unloads (default 60000).
    #[arg(long, env = "CHORUS_IDLE_UNLOAD_MS")]
    pub idle_unload_ms: Option<u64>,
    /// Joining a missing room creates it (default true in standalone).
    #[arg(long, env = "CHORUS_AUTO_CREATE")]
    pub auto_create: Option<bool>,
    /// Ledger URL (default: SQLite at `<data dir>/ledger.db`).
    #[arg(long, env = "CHORUS_LEDGER")]
    pub ledger: Option<String>,
    /// Demo mode: the demo page at `http://<ws addr>/` may mint a token for any user name
    /// (`/demo/token`) with demo coins. Anyone who reaches the port can act as anyone: for a
    /// laptop, never for production.
    #[arg(long, env = "CHORUS_DEMO")]
    pub demo: bool,
}

/// `chorus token` flags.
#[derive(Debug, Clone, Args)]
pub struct TokenArgs {
    /// Shared flags.
    #[command(flatten)]
    pub common: CommonArgs,
    /// The user id (the token's `sub`).
    #[arg(long)]
    pub user: String,
    /// How long the token is valid, e.g. 1h, 30m, 7d (default 24h).
    #[arg(long, default_value = "24h", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
}

/// The TOML config file: every field optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// WebSocket listen address.
    pub ws_addr: Option<SocketAddr>,
    /// Admin listen address.
    pub admin_addr: Option<SocketAddr>,
    /// Data directory.
    pub data_dir: Option<PathBuf>,
    /// HS256 secret (`CHORUS_JWT_SECRET` wins).
    pub jwt_secret: Option<String>,
    /// The secret gateways prove on their links to shards (`CHORUS_CLUSTER_SECRET` wins).
    pub cluster_secret: Option<String>,
    /// The audience client tokens must name (`CHORUS_JWT_AUDIENCE` wins); unset: not checked.
    pub jwt_audience: Option<String>,
    /// Admin bearer token (`CHORUS_ADMIN_TOKEN` wins).
    pub admin_token: Option<String>,
    /// Ping interval, ms.
    pub heartbeat_ms: Option<u64>,
    /// How long a room request may wait for its room's owner, ms.
    pub route_retry_ms: Option<u64>,
    /// Frame limit, bytes.
    pub max_frame_bytes: Option<usize>,
    /// Connections one user may hold on a gateway.
    pub max_conns_per_user: Option<usize>,
    /// Longest lifetime of a client token, in seconds.
    pub max_token_lifetime_s: Option<u64>,
    /// `session.expiring` goes this many seconds before a connection's token expires.
    pub session_expiring_s: Option<u64>,
    /// Leave robots out of leaderboards.
    pub ranks_without_robots: Option<bool>,
    /// Most coins one coin seller may transfer per UTC day.
    pub transfer_daily_limit: Option<i64>,
    /// Host settlements' payout minor units per 1,000 earnings coins.
    pub settlement_rate_milli: Option<i64>,
    /// Coins credited on a user's first connection ever.
    pub signup_reward: Option<i64>,
    /// Coins `wallet.checkin` credits once per user per UTC day.
    pub checkin_reward: Option<i64>,
    /// Direct messages one user may send per minute on a gateway.
    pub im_rate_per_min: Option<u32>,
    /// Direct messages one user may send at once.
    pub im_rate_burst: Option<u32>,
    /// Token bucket rate.
    pub rate_per_sec: Option<u32>,
    /// Token bucket size.
    pub rate_burst: Option<u32>,
    /// Rate-limited frames before 1008.
    pub flood_close_after: Option<u32>,
    /// Outbox bound, frames.
    pub outbox_frames: Option<usize>,
    /// Outbox bound, bytes.
    pub outbox_bytes: Option<usize>,
    /// Socket write timeout, ms.
    pub write_timeout_ms: Option<u64>,
    /// Idle unload, ms.
    pub idle_unload_ms: Option<u64>,
    /// Lease TTL, ms.
    pub lease_ttl_ms: Option<u64>,
    /// Resume history, events.
    pub history_events: Option<usize>,
    /// Resume history, ms.
    pub history_age_ms: Option<u64>,
    /// Shortest time between two of a shard's history writes to Redis, µs.
    pub history_write_interval_us: Option<u64>,
    /// Per-member presence up to this room size.
    pub presence_full_max: Option<usize>,
    /// member.count interval, ms.
    pub member_count_interval_ms: Option<u64>,
    /// Shortest time between two `room.likes` of a room, ms (at least 100).
    pub likes_interval_ms: Option<u64>,
    /// A member whose connection drops stays (away) this many ms before it leaves (0: at once).
    pub presence_grace_ms: Option<u64>,
    /// A seated user must publish audio within this many ms, or the seat is freed (0: off).
    pub publish_deadline_ms: Option<u64>,
    /// Seat requests expire after this many ms.
    pub seat_request_ttl_ms: Option<u64>,
    /// Seat invitations expire after this many ms.
    pub seat_invite_ttl_ms: Option<u64>,
    /// How often the robot reconcile runs, ms.
    pub robot_reconcile_ms: Option<u64>,
    /// Planned handoffs a shard starts per second (the rebalance throttle, at least 1).
    pub handoff_rate_per_sec: Option<u32>,
    /// Auto-create rooms on join.
    pub auto_create: Option<bool>,
    /// Rooms one user may have created that are still stored (0: no cap).
    pub max_rooms_per_user: Option<u32>,
    /// Room creations one user may start per minute on a shard (0: no limit).
    pub room_creates_per_min: Option<u32>,
    /// Rooms nobody joined for this many seconds are removed (0: kept forever).
    pub room_retention_s: Option<u64>,
    /// How often a shard sweeps for rooms past their retention, seconds.
    pub retention_sweep_s: Option<u64>,
    /// How often a shard publishes its rooms' changed directory summaries, ms.
    pub directory_publish_ms: Option<u64>,
    /// Directory entries of a shard silent this long are not listed, ms.
    pub directory_stale_ms: Option<u64>,
    /// How long a gateway caches a `room.list` page, ms (0: no cache).
    pub directory_cache_ms: Option<u64>,
    /// Ledger URL (`sqlite://<path>`, `postgres://user:pass@host:5432/db` or
    /// `scylla://host:9042,...[/keyspace]`).
    pub ledger: Option<String>,
    /// Drain window on shutdown, ms.
    pub drain_window_ms: Option<u64>,
    /// New connections admitted per second.
    pub admit_per_sec: Option<u32>,
    /// Admission burst.
    pub admit_burst: Option<u32>,
    /// Orders of one sender, gift and recipients at most this many ms apart form a combo.
    pub combo_window_ms: Option<u64>,
    /// Gift events a room sends per second before it merges combo streaks (0: never).
    pub gift_events_per_sec: Option<u32>,
    /// A merged (storm) gift event goes out this many ms after its first order.
    pub storm_interval_ms: Option<u64>,
    /// The room rocket's levels (none: no rocket).
    pub rocket_levels: Option<Vec<shard::state::RocketLevel>>,
    /// The most rocket rewards one user gets in one room per UTC day (0: no cap).
    pub rocket_daily_cap: Option<i64>,
    /// `rocket.progress` goes out at most this often, ms.
    pub rocket_progress_ms: Option<u64>,
    /// The gift catalog (replaces the default one).
    pub gifts: Option<Vec<GiftDef>>,
    /// Recipients' share of a gift's price, in basis points (default 5000).
    pub share_bp: Option<u32>,
    /// The lucky prize table (replaces the default one).
    pub lucky_prizes: Option<Vec<Prize>>,
    /// Secret of lucky draws (`CHORUS_LUCKY_SECRET` wins).
    pub lucky_secret: Option<String>,
    /// Lucky wins at or above this multiplier raise `gift.lucky`.
    pub big_win_multiplier: Option<u32>,
    /// HMAC key of `POST /rtc/webhook` (`CHORUS_RTC_WEBHOOK_SECRET` wins).
    pub rtc_webhook_secret: Option<String>,
    /// Where rooms POST their events (`CHORUS_EVENTS_WEBHOOK_URL` wins).
    pub events_webhook_url: Option<String>,
    /// HMAC key of the event webhook's signature (`CHORUS_EVENTS_WEBHOOK_SECRET` wins).
    pub events_webhook_secret: Option<String>,
    /// The event kinds sent (all when absent; `CHORUS_EVENTS_WEBHOOK_KINDS` wins).
    pub events_webhook_kinds: Option<Vec<String>>,
    /// HMAC key of `POST /payments/webhook` (`CHORUS_PAYMENTS_WEBHOOK_SECRET` wins).
    pub payments_webhook_secret: Option<String>,
    /// The payment provider's price list: product id to coins.
    pub payment_products: Option<std::collections::BTreeMap<String, i64>>,
    /// The guard plans on sale (replaces the default ones).
    pub guard_plans: Option<Vec<crate::guards::GuardPlan>>,
    /// The VIP levels and their perks (`[vip]`: thresholds, entrance_level, protected_level).
    pub vip: Option<shard::state::VipRules>,
    /// LiveKit API key, the `iss` of its webhooks (`CHORUS_LIVEKIT_API_KEY` wins).
    pub livekit_api_key: Option<String>,
    /// LiveKit API secret, the key of its webhooks (`CHORUS_LIVEKIT_API_SECRET` wins).
    pub livekit_api_secret: Option<String>,
    /// Bearer token `GET /metrics` requires (`CHORUS_METRICS_TOKEN` wins; unset: open).
    pub metrics_token: Option<String>,
}

/// Reads the config file, if one was named.
///
/// # Errors
/// The file cannot be read or parsed.
pub fn load_file(path: Option<&Path>) -> anyhow::Result<FileConfig> {
    let Some(path) = path else {
        return Ok(FileConfig::default());
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("reading config {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| anyhow::anyhow!("parsing config {}: {e}", path.display()))
}

/// The data directory from flags/env, file, or the default.
pub fn data_dir(common: &CommonArgs, file: &FileConfig) -> PathBuf {
    common
        .data_dir
        .clone()
        .or_else(|| file.data_dir.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR))
}

/// Reads a secret from the environment, the config, or a file in the data dir that is
/// generated on first use. Returns the secret and whether it was just generated.
///
/// # Errors
/// The data-dir file cannot be read or written.
pub fn secret(
    env: &str,
    from_file: Option<&String>,
    data_dir: &Path,
    file_name: &str,
    generate: bool,
) -> anyhow::Result<Option<(String, bool)>> {
    if let Some(v) = env_or_file(env, from_file) {
        return Ok(Some((v, false)));
    }
    let path = data_dir.join(file_name);
    match std::fs::read_to_string(&path) {
        Ok(v) if !v.trim().is_empty() => return Ok(Some((v.trim().to_owned(), false))),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(anyhow::anyhow!("reading {}: {e}", path.display())),
    }
    if !generate {
        return Ok(None);
    }
    std::fs::create_dir_all(data_dir)?;
    let bytes: [u8; GENERATED_SECRET_BYTES] = rand::random();
    let v: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    write_private(&path, &v)?;
    Ok(Some((v, true)))
}

fn write_private(path: &Path, v: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    f.write_all(v.as_bytes())?;
    Ok(())
}

fn ms(v: Option<u64>) -> Option<Duration> {
    v.map(Duration::from_millis)
}

/// A secret from the environment variable `env`, else from the file, without surrounding
/// whitespace (a secret made from a file often ends in a newline, which no header could carry);
/// empty counts as unset (an empty HMAC key is one anybody knows, and an empty admin token would
/// match a request without `Authorization`).
pub fn env_or_file(env: &str, from_file: Option<&String>) -> Option<String> {
    let env = std::env::var(env).ok();
    [env.as_ref(), from_file]
        .into_iter()
        .flatten()
        .map(|v| v.trim())
        .find(|v| !v.is_empty())
        .map(str::to_owned)
}

/// The cluster secret (`CHORUS_CLUSTER_SECRET`, else the file's `cluster_secret`), which a
/// cluster's shards and gateways must share: a gateway proves it on every link, and a shard
/// takes no link without it.
///
/// # Errors
/// When it is unset or shorter than 16 bytes.
pub fn cluster_secret(f: &FileConfig, role: &str) -> anyhow::Result<shard::link::LinkSecret> {
    let Some(s) = env_or_file("CHORUS_CLUSTER_SECRET", f.cluster_secret.as_ref()) else {
        anyhow::bail!(
            "a {role} needs CHORUS_CLUSTER_SECRET (or cluster_secret in the config): the secret \
             every gateway and shard of the cluster shares, at least {} bytes",
            shard::link::MIN_SECRET_BYTES
        );
    };
    shard::link::LinkSecret::new(s.as_bytes()).map_err(|e| anyhow::anyhow!("{e}"))
}

/// The token `GET /metrics` requires: `CHORUS_METRICS_TOKEN`, else the file's `metrics_token`;
/// empty counts as unset, and unset leaves `/metrics` open.
pub fn metrics_token(f: &FileConfig) -> Option<String> {
    env_or_file("CHORUS_METRICS_TOKEN", f.metrics_token.as_ref())
}

/// Applies the gateway settings of the flags, the environment and the file.
///
/// # Errors
/// Only one of the LiveKit API key and secret is set.
pub fn gateway_settings(a: &SocketArgs, f: &FileConfig) -> anyhow::Result<GatewayConfig> {
    let mut g = GatewayConfig::default();
    if let Some(v) = a.heartbeat_ms.or(f.heartbeat_ms) {
        g.heartbeat = Duration::from_millis(v.max(1));
    }
    if let Some(v) = a.route_retry_ms.or(f.route_retry_ms) {
        g.route_retry_budget = Duration::from_millis(v.max(1));
    }
    if let Some(v) = f.max_frame_bytes {
        g.max_frame_bytes = v;
    }
    if let Some(v) = a.rate_per_sec.or(f.rate_per_sec) {
        g.rate_per_sec = v;
    }
    if let Some(v) = a.rate_burst.or(f.rate_burst) {
        g.rate_burst = v;
    }
    if let Some(v) = f.flood_close_after {
        g.flood_close_after = v;
    }
    if let Some(v) = f.outbox_frames {
        g.outbox_frames = v;
    }
    if let Some(v) = f.outbox_bytes {
        g.outbox_bytes = v;
    }
    if let Some(v) = ms(f.write_timeout_ms) {
        g.write_timeout = v;
    }
    if let Some(v) = ms(std::env::var("CHORUS_DRAIN_WINDOW_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .or(f.drain_window_ms))
    {
        g.drain_window = v;
    }
    if let Some(v) = f.admit_per_sec {
        g.admit_per_sec = v;
    }
    if let Some(v) = f.admit_burst {
        g.admit_burst = v;
    }
    if let Some(v) = f.max_conns_per_user {
        g.max_conns_per_user = v.max(1);
    }
    if let Some(v) = f.ranks_without_robots {
        g.ranks_without_robots = v;
    }
    if let Some(v) = f.transfer_daily_limit {
        g.transfer_daily_limit = v.max(0);
    }
    if let Some(v) = f.settlement_rate_milli {
        g.settlement_rate_milli = v.max(0);
    }
    if let Some(v) = f.signup_reward {
        g.signup_reward = v.max(0);
    }
    if let Some(v) = f.checkin_reward {
        g.checkin_reward = v.max(0);
    }
    if let Some(v) = ms(f.presence_grace_ms) {
        g.presence_grace = v;
    }
    if let Some(v) = f.im_rate_per_min {
        g.im_rate_per_min = v;
    }
    if let Some(v) = f.im_rate_burst {
        g.im_rate_burst = v.max(1);
    }
    g.max_token_lifetime = f
        .max_token_lifetime_s
        .map(|v| Duration::from_secs(v.max(1)));
    g.jwt_audience = env_or_file("CHORUS_JWT_AUDIENCE", f.jwt_audience.as_ref());
    if let Some(v) = f.session_expiring_s {
        g.expiry_warning = Duration::from_secs(v);
    }
    g.rtc_webhook_secret = env_or_file("CHORUS_RTC_WEBHOOK_SECRET", f.rtc_webhook_secret.as_ref());
    g.payments_webhook_secret = env_or_file(
        "CHORUS_PAYMENTS_WEBHOOK_SECRET",
        f.payments_webhook_secret.as_ref(),
    );
    if let Some(p) = &f.payment_products {
        // A product worth no coins would book nothing: left out, so its payments are refused.
        let priced = p
            .iter()
            .filter(|(_, c)| **c > 0)
            .map(|(k, c)| (k.clone(), *c));
        g.payment_products = std::sync::Arc::new(priced.collect());
    }
    g.livekit_api_key = env_or_file("CHORUS_LIVEKIT_API_KEY", f.livekit_api_key.as_ref());
    g.livekit_api_secret = env_or_file("CHORUS_LIVEKIT_API_SECRET", f.livekit_api_secret.as_ref());
    g.metrics_token = metrics_token(f);
    g.guard_plans = std::sync::Arc::new(guard_plans(f)?);
    if let Some(v) = f.directory_cache_ms {
        g.directory_cache = Duration::from_millis(v);
    }
    if let Some(v) = f.directory_stale_ms {
        g.directory_stale = Duration::from_millis(v.max(1000));
    }
    anyhow::ensure!(
        g.livekit_api_key.is_some() == g.livekit_api_secret.is_some(),
        "LiveKit webhooks need both CHORUS_LIVEKIT_API_KEY and CHORUS_LIVEKIT_API_SECRET \
         (or livekit_api_key and livekit_api_secret in the config), or neither"
    );
    Ok(g)
}

/// Applies the shard settings of the file (and the given overrides).
pub fn shard_settings(
    idle_unload_ms: Option<u64>,
    lease_ttl_ms: Option<u64>,
    f: &FileConfig,
) -> ShardConfig {
    let mut s = ShardConfig::default();
    if let Some(v) = ms(idle_unload_ms.or(f.idle_unload_ms)) {
        s.idle_unload = v;
    }
    if let Some(v) = ms(lease_ttl_ms.or(f.lease_ttl_ms)) {
        s.lease_ttl = v;
    }
    if let Some(v) = f.history_events {
        s.history_events = v;
    }
    if let Some(v) = ms(f.history_age_ms) {
        s.history_age = v;
    }
    if let Some(v) = f.history_write_interval_us {
        s.history_write_interval = Duration::from_micros(v);
    }
    if let Some(v) = f.presence_full_max {
        s.presence_full_max = v;
    }
    if let Some(v) = ms(f.member_count_interval_ms) {
        s.member_count_interval = v;
    }
    if let Some(v) = f.likes_interval_ms {
        s.likes_interval = Duration::from_millis(v.max(100));
    }
    if let Some(v) = ms(f.presence_grace_ms) {
        s.presence_grace = v;
    }
    if let Some(v) = ms(f.publish_deadline_ms) {
        s.publish_deadline = v;
    }
    if let Some(v) = ms(f.seat_request_ttl_ms) {
        s.seat_request_ttl = v.max(Duration::from_secs(1));
    }
    if let Some(v) = ms(f.seat_invite_ttl_ms) {
        s.seat_invite_ttl = v.max(Duration::from_secs(1));
    }
    if let Some(v) = ms(f.robot_reconcile_ms) {
        s.robot_reconcile = v.max(Duration::from_millis(100));
    }
    if let Some(v) = f.handoff_rate_per_sec {
        s.handoff_rate_per_sec = v.max(1);
    }
    if let Some(v) = f.auto_create {
        s.auto_create = v;
    }
    if let Some(v) = f.max_rooms_per_user {
        s.max_rooms_per_user = v;
    }
    if let Some(v) = f.room_creates_per_min {
        s.room_creates_per_min = v;
    }
    if let Some(v) = f.room_retention_s {
        s.room_retention = Duration::from_secs(v);
    }
    if let Some(v) = f.retention_sweep_s {
        s.retention_sweep = Duration::from_secs(v.max(1));
    }
    if let Some(v) = f.directory_publish_ms {
        s.directory_publish = Duration::from_millis(v.max(10));
    }
    if let Some(v) = f.directory_stale_ms {
        s.directory_stale = Duration::from_millis(v.max(1000));
    }
    if let Some(v) = f.combo_window_ms {
        s.gift_rules.combo_window_ms = v.max(1);
    }
    if let Some(v) = f.gift_events_per_sec {
        s.gift_rules.events_per_sec = v;
    }
    if let Some(v) = f.storm_interval_ms {
        s.gift_rules.storm_interval_ms = v.clamp(10, 60_000);
    }
    s
}

/// Builds the standalone configuration (secrets resolved separately).
pub fn standalone_config(
    a: &StandaloneArgs,
    f: &FileConfig,
    jwt_secret: Vec<u8>,
    admin_token: Option<String>,
) -> anyhow::Result<StandaloneConfig> {
    let mut g = gateway_settings(&a.socket, f)?;
    g.demo_tokens = a.demo;
    if let Some(v) = a.max_frame_bytes {
        g.max_frame_bytes = v;
    }
    let mut s = shard_settings(a.idle_unload_ms, None, f);
    s.events = events_settings(f)?;
    if let Some(v) = a.auto_create {
        s.auto_create = v;
    }
    let parse = |s: &str| -> anyhow::Result<SocketAddr> { Ok(s.parse()?) };
    Ok(StandaloneConfig {
        ws_addr: match a.ws_addr.or(f.ws_addr) {
            Some(v) => v,
            None => parse(DEFAULT_WS_ADDR)?,
        },
        admin_addr: match a.admin_addr.or(f.admin_addr) {
            Some(v) => v,
            None => parse(DEFAULT_ADMIN_ADDR)?,
        },
        data_dir: data_dir(&a.common, f),
        jwt_secret,
        admin_token,
        gateway: g,
        shard: s,
        ledger: a
            .ledger
            .clone()
            .or_else(|| f.ledger.clone())
            .unwrap_or_default(),
    })
}

/// The gift catalog from the file (or the default), with its lucky secret, validated.
///
/// # Errors
/// The catalog is invalid (duplicate ids, prices, a lucky table paying out too much).
pub fn catalog(f: &FileConfig, lucky_secret: Vec<u8>) -> anyhow::Result<Catalog> {
    let mut c = Catalog::default_with_secret(lucky_secret);
    if let Some(g) = &f.gifts {
        c.gifts = g.clone();
    }
    if let Some(p) = &f.lucky_prizes {
        c.prizes = p.clone();
    }
    if let Some(v) = f.share_bp {
        c.share_bp = v;
    }
    if let Some(v) = f.big_win_multiplier {
        c.big_win_multiplier = v;
    }
    c.validate()?;
    Ok(c)
}

/// The guard plans from the file (or the default ones), validated.
///
/// # Errors
/// A plan is invalid.
pub fn guard_plans(f: &FileConfig) -> anyhow::Result<Vec<crate::guards::GuardPlan>> {
    let plans = f
        .guard_plans
        .clone()
        .unwrap_or_else(crate::guards::default_plans);
    crate::guards::validate_plans(&plans)
        .map_err(|e| anyhow::anyhow!("invalid guard plans: {e}"))?;
    Ok(plans)
}

/// The VIP levels from the file (or the default ones), validated: thresholds ascending.
///
/// # Errors
/// The levels are invalid.
pub fn vip(f: &FileConfig) -> anyhow::Result<shard::state::VipRules> {
    let v = f.vip.clone().unwrap_or_default();
    v.validate()
        .map_err(|e| anyhow::anyhow!("invalid VIP configuration: {e}"))?;
    Ok(v)
}

/// The room rocket from the file, validated: a level that could pay more in rewards than its
/// fuel is refused.
///
/// # Errors
/// A level is invalid.
pub fn rocket(f: &FileConfig) -> anyhow::Result<shard::state::RocketRules> {
    let mut r = shard::state::RocketRules {
        levels: f.rocket_levels.clone().unwrap_or_default(),
        daily_cap: f.rocket_daily_cap.unwrap_or(0),
        progress_interval_ms: 1000,
    };
    if let Some(v) = f.rocket_progress_ms {
        r.progress_interval_ms = v.max(100);
    }
    r.validate()
        .map_err(|e| anyhow::anyhow!("invalid rocket configuration: {e}"))?;
    Ok(r)
}

mod reports;
#[cfg(test)]
mod tests;
mod users;
mod wallets;

pub use reports::{ReportStatus, ReportsVerb};
pub use users::UsersVerb;
pub use wallets::WalletsVerb;
