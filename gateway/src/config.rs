//! Gateway limits and timings, each default with its reason.

use std::time::Duration;

/// Largest accepted frame/message: 64 KiB holds any legitimate request with room to spare.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 64 * 1024;
/// Server ping interval; a connection silent for two intervals is closed.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(15);
/// Sustained requests per second per connection: a chatty human sends a few.
pub const DEFAULT_RATE_PER_SEC: u32 = 20;
/// Burst allowance of the per-connection token bucket.
pub const DEFAULT_RATE_BURST: u32 = 40;
/// Rate-limited frames within one refill window after which the connection is closed 1008.
pub const DEFAULT_FLOOD_CLOSE_AFTER: u32 = 50;
/// Frames queued to one socket before it counts as a slow consumer (closed 4000).
pub const DEFAULT_OUTBOX_FRAMES: usize = 1024;
/// Bytes queued to one socket before it counts as a slow consumer (closed 4000).
pub const DEFAULT_OUTBOX_BYTES: usize = 1024 * 1024;
/// Longest a write to one socket may block before the client counts as a slow consumer.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// tungstenite's eagerly allocated read buffer: small, because idle connections must be cheap
/// (the default 128 KiB would dominate memory per connection). Client frames are small (a chat
/// line of 100 bytes with its envelope and mask is under 200 bytes), so one read still takes a
/// whole frame; a rare large frame takes a few reads.
pub const DEFAULT_READ_BUFFER_BYTES: usize = 256;
/// Bytes the writer buffers before writing to the socket; a flush always writes everything.
pub const DEFAULT_WRITE_BUFFER_BYTES: usize = 16 * 1024;
/// Coins one coin seller may move with `wallet.transfer` per UTC day, by default: a cap on
/// what a leaked seller account can hand out in a day, high enough for a busy reseller.
pub const DEFAULT_TRANSFER_DAILY_LIMIT: i64 = 10_000_000;
/// Payout minor units per 1,000 earnings coins in a host settlement, by default: one per coin.
pub const DEFAULT_SETTLEMENT_RATE_MILLI: i64 = 1_000;
/// Frames the writer takes from the outbox before one flush (batching writes).
pub const WRITE_BATCH_FRAMES: usize = 64;
/// How long the gateway keeps retrying a command whose room has no reachable owner (covers a
/// lease TTL of 10 s plus failure detection), before answering `UNAVAILABLE`.
pub const DEFAULT_ROUTE_RETRY_BUDGET: Duration = Duration::from_secs(15);
/// On shutdown, clients are told to reconnect elsewhere (close 1001) spread evenly over this
/// window, so they do not all reconnect at once.
pub const DEFAULT_DRAIN_WINDOW: Duration = Duration::from_secs(5);
/// New connections admitted per second per node; beyond it the upgrade gets 503 with
/// Retry-After (reconnect storms after a deploy are spread instead of served at once).
pub const DEFAULT_ADMIT_PER_SEC: u32 = 2000;
/// Burst of the admission bucket.
pub const DEFAULT_ADMIT_BURST: u32 = 4000;
/// Connections one user may hold on one gateway; one more closes the user's oldest (4001).
/// Ten covers a phone, a tablet and a few tabs; a leaked token cannot hold hundreds.
pub const DEFAULT_MAX_CONNS_PER_USER: usize = 10;
/// Direct messages one user may send per minute on one gateway: a fast typist in a lively
/// conversation sends a few a minute; a spammer is stopped within seconds.
pub const DEFAULT_IM_RATE_PER_MIN: u32 = 30;
/// Direct messages one user may send at once before the per-minute rate applies.
pub const DEFAULT_IM_RATE_BURST: u32 = 10;
/// How long before its token expires a connection gets `session.expiring`: a minute leaves a
/// client time to fetch a new token and send `auth.refresh`, even over a slow network.
pub const DEFAULT_EXPIRY_WARNING: Duration = Duration::from_secs(60);
/// Longest time a client may take to finish the WebSocket handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a `room.list` page is served from the gateway's cache: a crowd opening the room
/// list costs the directory store one read per distinct request per second.
pub const DEFAULT_DIRECTORY_CACHE: Duration = Duration::from_secs(1);

/// Gateway settings.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Largest frame/message accepted; bigger ones close the connection with 1009.
    pub max_frame_bytes: usize,
    /// Ping interval.
    pub heartbeat: Duration,
    /// Token bucket refill rate (requests per second).
    pub rate_per_sec: u32,
    /// Token bucket size.
    pub rate_burst: u32,
    /// Rate-limited frames (without a pause) before closing with 1008.
    pub flood_close_after: u32,
    /// Per-socket outbound queue bound, in frames.
    pub outbox_frames: usize,
    /// Per-socket outbound queue bound, in bytes.
    pub outbox_bytes: usize,
    /// Longest a socket write may block.
    pub write_timeout: Duration,
    /// WebSocket read buffer size.
    pub read_buffer_bytes: usize,
    /// WebSocket write buffer size.
    pub write_buffer_bytes: usize,
    /// How long routing retries last before `UNAVAILABLE`.
    pub route_retry_budget: Duration,
    /// Window over which shutdown spreads its 1001 closes.
    pub drain_window: Duration,
    /// New connections admitted per second.
    pub admit_per_sec: u32,
    /// Admission burst.
    pub admit_burst: u32,
    /// Connections one user may hold on this gateway; one more closes the oldest with 4001.
    pub max_conns_per_user: usize,
    /// Longest lifetime a client token may have (`exp` minus `iat`, or minus now without
    /// `iat`); `None`: no cap, as the client protocol's core asks only that `exp` be checked.
    /// A cap makes a leaked token expire by waiting.
    pub max_token_lifetime: Option<Duration>,
    /// The audience client tokens must name in `aud`; `None`: `aud` is not checked.
    pub jwt_audience: Option<String>,
    /// How long before its token expires a connection gets `session.expiring` (zero: never).
    pub expiry_warning: Duration,
    /// Leave robots out of `rank.get` (default: list them, marked `robot: true`).
    pub ranks_without_robots: bool,
    /// Most coins one coin seller may move with `wallet.transfer` per UTC day.
    pub transfer_daily_limit: i64,
    /// Coins credited from the platform on a user's first connection ever (0: none).
    pub signup_reward: i64,
    /// Coins `wallet.checkin` credits once per user per UTC day (0: the op is off).
    pub checkin_reward: i64,
    /// A host settlement's exchange rate: payout minor units (e.g. cents) per 1,000 earnings
    /// coins; the payout is rounded down.
    pub settlement_rate_milli: i64,
    /// How long a closed connection's room entry stays in the user registry: the rooms'
    /// presence grace window (the same `presence_grace_ms` key as the shards').
    pub presence_grace: Duration,
    /// `im.send` per user per minute on this gateway; beyond it `RATE_LIMITED`.
    pub im_rate_per_min: u32,
    /// `im.send` burst per user on this gateway.
    pub im_rate_burst: u32,
    /// HMAC-SHA256 key of `POST /rtc/webhook` on the admin port; `None`: that endpoint answers
    /// 503.
    pub rtc_webhook_secret: Option<String>,
    /// HMAC-SHA256 key of `POST /payments/webhook` on the admin port; `None`: that endpoint
    /// answers 503.
    pub payments_webhook_secret: Option<String>,
    /// The payment provider's products and the coins each is worth (`payment_products`).
    pub payment_products: std::sync::Arc<std::collections::BTreeMap<String, i64>>,
    /// LiveKit API key: the `iss` that `POST /rtc/livekit` requires of a webhook's token.
    pub livekit_api_key: Option<String>,
    /// LiveKit API secret: the HS256 key of a LiveKit webhook's token; `POST /rtc/livekit`
    /// answers 503 unless both it and [`Self::livekit_api_key`] are set.
    pub livekit_api_secret: Option<String>,
    /// Bearer token `GET /metrics` on the admin port requires; `None` (the default): the
    /// endpoint is open, as Prometheus scrapers expect.
    pub metrics_token: Option<String>,
    /// The cluster secret this gateway proves on its links to the shards (`None`: it sends no
    /// proof, and only shards without a secret take its links).
    pub link_secret: Option<shard::link::LinkSecret>,
    /// How long a `room.list` page is cached (zero: not cached).
    pub directory_cache: Duration,
    /// Room-directory entries of a shard that has not published for this long are not listed.
    pub directory_stale: Duration,
    /// Demo mode: the client port's `/demo/token` mints a token for any user name (standalone
    /// `--demo` only; off by default).
    pub demo_tokens: bool,
    /// The guard plans on sale (`guard.plans`).
    pub guard_plans: std::sync::Arc<Vec<crate::guards::GuardPlan>>,
    /// TEST ONLY: each batched read of users' standing waits for a permit of this semaphore
    /// (or for it to be closed) first, so a test can hold the gateway's reads back and join
    /// rooms before they arrive. Never set in production.
    pub test_hold_standing_reads: Option<std::sync::Arc<tokio::sync::Semaphore>>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            heartbeat: DEFAULT_HEARTBEAT,
            rate_per_sec: DEFAULT_RATE_PER_SEC,
            rate_burst: DEFAULT_RATE_BURST,
            flood_close_after: DEFAULT_FLOOD_CLOSE_AFTER,
            outbox_frames: DEFAULT_OUTBOX_FRAMES,
            outbox_bytes: DEFAULT_OUTBOX_BYTES,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            read_buffer_bytes: DEFAULT_READ_BUFFER_BYTES,
            write_buffer_bytes: DEFAULT_WRITE_BUFFER_BYTES,
            route_retry_budget: DEFAULT_ROUTE_RETRY_BUDGET,
            drain_window: DEFAULT_DRAIN_WINDOW,
            admit_per_sec: DEFAULT_ADMIT_PER_SEC,
            admit_burst: DEFAULT_ADMIT_BURST,
            max_conns_per_user: DEFAULT_MAX_CONNS_PER_USER,
            ranks_without_robots: false,
            transfer_daily_limit: DEFAULT_TRANSFER_DAILY_LIMIT,
            settlement_rate_milli: DEFAULT_SETTLEMENT_RATE_MILLI,
            signup_reward: 0,
            checkin_reward: 0,
            presence_grace: shard::config::DEFAULT_PRESENCE_GRACE,
            im_rate_per_min: DEFAULT_IM_RATE_PER_MIN,
            im_rate_burst: DEFAULT_IM_RATE_BURST,
            max_token_lifetime: None,
            jwt_audience: None,
            expiry_warning: DEFAULT_EXPIRY_WARNING,
            rtc_webhook_secret: None,
            payments_webhook_secret: None,
            payment_products: std::sync::Arc::default(),
            livekit_api_key: None,
            livekit_api_secret: None,
            metrics_token: None,
            link_secret: None,
            directory_cache: DEFAULT_DIRECTORY_CACHE,
            directory_stale: shard::config::DEFAULT_DIRECTORY_STALE,
            demo_tokens: false,
            guard_plans: std::sync::Arc::new(crate::guards::default_plans()),
            test_hold_standing_reads: None,
        }
    }
}
