//! The `chorus` binary: reads config, installs telemetry, runs a role until a signal.

use std::time::Duration;

use clap::Parser;
use gateway::auth::Authenticator;
use gateway::cli::{self, Cli, Cmd};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

/// jemalloc serves every allocation of the process, SQLite's included, built with a small
/// per-thread cache (`.cargo/config.toml`; `MALLOC_CONF` overrides it at start). Against glibc's
/// malloc: less CPU per gift and per room delivery, and less memory per idle connection
/// (docs/BENCHMARKS-LOG.md, Changes 13 and 24).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How long shutdown waits for tasks (sockets closing with 1001, rooms saving) to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("CHORUS_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.cmd {
        Some(Cmd::Token(t)) => token(&t),
        Some(Cmd::Admin(a)) => admin(&a),
        Some(Cmd::Shard(a)) => shard_node(&a),
        Some(Cmd::Gateway(a)) => gateway_node(&a),
        Some(Cmd::Standalone(a)) => standalone(&a),
        None => standalone(&cli.standalone),
    }
}

fn token(t: &cli::TokenArgs) -> anyhow::Result<()> {
    let file = cli::load_file(t.common.config.as_deref())?;
    let dir = cli::data_dir(&t.common, &file);
    let Some((secret, _)) = cli::secret(
        "CHORUS_JWT_SECRET",
        file.jwt_secret.as_ref(),
        &dir,
        "jwt_secret",
        false,
    )?
    else {
        anyhow::bail!(
            "no secret: set CHORUS_JWT_SECRET, jwt_secret in the config, or start standalone once with --data-dir {}",
            dir.display()
        );
    };
    let max = file
        .max_token_lifetime_s
        .map(|v| Duration::from_secs(v.max(1)));
    let audience = cli::env_or_file("CHORUS_JWT_AUDIENCE", file.jwt_audience.as_ref());
    let tok = Authenticator::new(secret.as_bytes())?
        .with_max_lifetime(max)
        .with_audience(audience)
        .mint(&t.user, t.ttl)?;
    println!("{tok}");
    Ok(())
}

fn standalone(a: &cli::StandaloneArgs) -> anyhow::Result<()> {
    let file = cli::load_file(a.common.config.as_deref())?;
    let dir = cli::data_dir(&a.common, &file);
    let (secret, fresh) = cli::secret(
        "CHORUS_JWT_SECRET",
        file.jwt_secret.as_ref(),
        &dir,
        "jwt_secret",
        true,
    )?
    .ok_or_else(|| anyhow::anyhow!("no JWT secret"))?;
    if fresh {
        tracing::info!(path = %dir.join("jwt_secret").display(), "Generated a new JWT secret.");
    }
    let (admin_token, fresh_admin) = cli::secret(
        "CHORUS_ADMIN_TOKEN",
        file.admin_token.as_ref(),
        &dir,
        "admin_token",
        true,
    )?
    .ok_or_else(|| anyhow::anyhow!("no admin token"))?;
    if fresh_admin {
        tracing::info!(path = %dir.join("admin_token").display(), "Generated a new admin token.");
    }
    let (lucky, _) = cli::secret(
        "CHORUS_LUCKY_SECRET",
        file.lucky_secret.as_ref(),
        &dir,
        "lucky_secret",
        true,
    )?
    .ok_or_else(|| anyhow::anyhow!("no lucky secret"))?;
    let mut cfg = cli::standalone_config(a, &file, secret.into_bytes(), Some(admin_token))?;
    cfg.shard.catalog = std::sync::Arc::new(cli::catalog(&file, lucky.into_bytes())?);
    cfg.shard.test_crash_after_debit = test_switch("CHORUS_TEST_CRASH_AFTER_DEBIT");
    cfg.shard.test_crash_after_settle = test_switch("CHORUS_TEST_CRASH_AFTER_SETTLE");
    cfg.shard.rocket = std::sync::Arc::new(cli::rocket(&file)?);
    cfg.shard.vip = std::sync::Arc::new(cli::vip(&file)?);
    if let Some(n) = env_gift_events_per_sec()? {
        cfg.shard.gift_rules.events_per_sec = n;
    }
    cfg.shard.test_crash_after_rocket_payout = test_switch("CHORUS_TEST_CRASH_AFTER_ROCKET_PAYOUT");
    if let Some(every) = env_positive_ms("CHORUS_ORPHAN_SWEEP_MS")? {
        cfg.shard.orphan_sweep = every;
    }
    let rt = runtime()?;
    rt.block_on(async move {
        let running = gateway::standalone::start(cfg.clone()).await?;
        // One machine-readable line for harnesses that start nodes on port 0.
        println!(
            "CHORUS_READY ws={} admin={}",
            running.ws_addr, running.admin_addr
        );
        println!("Chorus standalone");
        println!("  WebSocket:  ws://{}/ws", running.ws_addr);
        if cfg.gateway.demo_tokens {
            println!(
                "  Demo room:  http://{}/   DEMO MODE: any user name gets a token; never expose this port",
                running.ws_addr
            );
        } else {
            println!(
                "  Demo room:  http://{}/   (paste a token, or restart with --demo)",
                running.ws_addr
            );
        }
        println!("  Dashboard:  http://{}/dashboard", running.admin_addr);
        println!(
            "  Admin:      http://{}/healthz  http://{}/metrics",
            running.admin_addr, running.admin_addr
        );
        println!("  Data dir:   {}", cfg.data_dir.display());
        println!(
            "  Token:      cargo run --release -- token --data-dir {} --user alice",
            cfg.data_dir.display()
        );
        println!(
            "  Admin API:  bearer token in {}/admin_token (or CHORUS_ADMIN_TOKEN)",
            cfg.data_dir.display()
        );
        let root: CancellationToken = running.shutdown_token();
        tokio::spawn(gateway::signal::cancel_on_signal(root));
        running.wait(SHUTDOWN_GRACE).await;
        anyhow::Ok(())
    })?;
    Ok(())
}

/// The node's tokio runtime: multi-threaded (a worker per CPU the process may use), or, with
/// `CHORUS_RUNTIME=current-thread`, every task on the main thread (SQLite and other blocking
/// work still on the blocking pool): for a node given one CPU, where a second worker could
/// only take turns with the first.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    let mut b = match std::env::var("CHORUS_RUNTIME").as_deref() {
        Err(_) | Ok("" | "multi-thread") => tokio::runtime::Builder::new_multi_thread(),
        Ok("current-thread") => tokio::runtime::Builder::new_current_thread(),
        Ok(other) => {
            anyhow::bail!("CHORUS_RUNTIME must be multi-thread or current-thread, not {other:?}")
        }
    };
    Ok(b.enable_all()
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build()?)
}

/// Threads of the blocking pool (tokio's default: 512). Blocking work is SQLite, and each store
/// takes its connection's lock before it hands a call to the pool, so no more than one call
/// per store runs at once; but a burst of calls (thousands of connects, rooms starting) still
/// made the pool start a thread for each call that found no idle one, ~25 threads whose stacks
/// stayed resident until they idled out.
const MAX_BLOCKING_THREADS: usize = 16;

fn run_until_signal(
    start: impl std::future::Future<Output = Result<gateway::node::Running, gateway::node::StartError>>,
    what: &str,
) -> anyhow::Result<()> {
    let rt = runtime()?;
    rt.block_on(async move {
        let running = start.await?;
        // One machine-readable line for harnesses that start nodes on port 0.
        println!(
            "CHORUS_READY ws={} admin={}",
            running.ws_addr, running.admin_addr
        );
        println!(
            "Chorus {what}: {} (admin http://{})",
            running.ws_addr, running.admin_addr
        );
        tokio::spawn(gateway::signal::cancel_on_signal(running.stop_token()));
        running.wait(SHUTDOWN_GRACE).await;
        anyhow::Ok(())
    })
}

/// A duration in milliseconds from the environment variable `name`: `None` when it is unset,
/// an error unless it is a positive whole number. Read for `CHORUS_ORPHAN_SWEEP_MS` (how often
/// a shard looks for rooms with unfinished sagas that nobody has loaded; default 60 s) and,
/// TEST ONLY, `CHORUS_TEST_HOLD_BROADCAST_MS` (how long a room holds a broadcast after its
/// fenced history write, [`shard::ShardConfig::test_hold_before_broadcast`]).
fn env_positive_ms(name: &str) -> anyhow::Result<Option<std::time::Duration>> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) => match v.parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Some(std::time::Duration::from_millis(ms))),
            _ => anyhow::bail!("{name} must be a positive number of ms, not {v:?}"),
        },
    }
}

/// `CHORUS_GIFT_EVENTS_PER_SEC` (wins over the file's `gift_events_per_sec`; 0: never merge).
fn env_gift_events_per_sec() -> anyhow::Result<Option<u32>> {
    match std::env::var("CHORUS_GIFT_EVENTS_PER_SEC") {
        Err(_) => Ok(None),
        Ok(v) => match v.parse::<u32>() {
            Ok(n) => Ok(Some(n)),
            Err(_) => anyhow::bail!("CHORUS_GIFT_EVENTS_PER_SEC must be a number, not {v:?}"),
        },
    }
}

/// A test-only switch: on when the environment variable `name` is `1`.
fn test_switch(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

fn shard_node(a: &cli::ShardArgs) -> anyhow::Result<()> {
    let file = cli::load_file(a.config.as_deref())?;
    let lucky =
        cli::env_or_file("CHORUS_LUCKY_SECRET", file.lucky_secret.as_ref()).unwrap_or_default();
    let mut shard = cli::shard_settings(a.idle_unload_ms, a.lease_ttl_ms, &file);
    shard.durable_history = true;
    shard.events = cli::events_settings(&file)?;
    shard.catalog = std::sync::Arc::new(cli::catalog(&file, lucky.into_bytes()).map_err(|e| {
        anyhow::anyhow!("{e} (shards need CHORUS_LUCKY_SECRET when the catalog has lucky gifts)")
    })?);
    shard.test_crash_after_debit = test_switch("CHORUS_TEST_CRASH_AFTER_DEBIT");
    shard.test_crash_after_settle = test_switch("CHORUS_TEST_CRASH_AFTER_SETTLE");
    shard.rocket = std::sync::Arc::new(cli::rocket(&file)?);
    shard.vip = std::sync::Arc::new(cli::vip(&file)?);
    if let Some(n) = env_gift_events_per_sec()? {
        shard.gift_rules.events_per_sec = n;
    }
    shard.test_crash_after_rocket_payout = test_switch("CHORUS_TEST_CRASH_AFTER_ROCKET_PAYOUT");
    shard.test_nonowner_void = test_switch("CHORUS_TEST_NONOWNER_VOID");
    if let Some(every) = env_positive_ms("CHORUS_ORPHAN_SWEEP_MS")? {
        shard.orphan_sweep = every;
    }
    shard.test_hold_before_broadcast = env_positive_ms("CHORUS_TEST_HOLD_BROADCAST_MS")?;
    let cfg = gateway::node::ShardRoleConfig {
        node: shard::node::ShardNodeConfig {
            node_id: protocol::NodeId::from(a.node_id.as_str()),
            redis: a.redis.clone(),
            link_addr: a.link_addr,
            link_advertise: a.link_advertise,
            admin_addr: a.admin_addr,
            shard,
            renew_on_traffic: a.test_renew_on_traffic,
            ledger: a.ledger.clone().or_else(|| file.ledger.clone()),
            link_secret: Some(cli::cluster_secret(&file, "shard")?),
        },
        admin_token: cli::env_or_file("CHORUS_ADMIN_TOKEN", file.admin_token.as_ref()),
        metrics_token: cli::metrics_token(&file),
    };
    run_until_signal(gateway::node::start_shard(cfg), "shard")
}

fn gateway_node(a: &cli::GatewayArgs) -> anyhow::Result<()> {
    let file = cli::load_file(a.config.as_deref())?;
    let Some(secret) = cli::env_or_file("CHORUS_JWT_SECRET", file.jwt_secret.as_ref()) else {
        anyhow::bail!("a gateway needs CHORUS_JWT_SECRET (or jwt_secret in the config)");
    };
    let mut settings = cli::gateway_settings(&a.socket, &file)?;
    settings.link_secret = Some(cli::cluster_secret(&file, "gateway")?);
    let cfg = gateway::node::GatewayNodeConfig {
        node_id: protocol::NodeId::from(a.node_id.as_str()),
        redis: a.redis.clone(),
        ws_addr: a.ws_addr,
        admin_addr: a.admin_addr,
        admin_token: cli::env_or_file("CHORUS_ADMIN_TOKEN", file.admin_token.as_ref()),
        jwt_secret: secret.into_bytes(),
        gateway: settings,
        ledger: a.ledger.clone().or_else(|| file.ledger.clone()),
        // Gateways only list the catalog; draws happen on shards.
        catalog: std::sync::Arc::new(cli::catalog(&file, b"unused-on-gateways".to_vec())?),
        events: cli::events_settings(&file)?,
    };
    run_until_signal(gateway::node::start_gateway(cfg), "gateway")
}

fn admin(a: &cli::AdminArgs) -> anyhow::Result<()> {
    let (method, path, body) = a.verb.request()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let answer = rt
        .block_on(kit::admin::call(
            a.addr,
            method,
            &path,
            a.token.as_deref(),
            body,
        ))
        .map_err(|e| anyhow::anyhow!("{method} {path} on {}: {e}", a.addr))?;
    println!("{}", answer.body);
    if answer.status >= 400 {
        anyhow::bail!("{method} {path}: HTTP {}", answer.status);
    }
    Ok(())
}
