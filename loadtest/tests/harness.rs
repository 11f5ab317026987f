//! Smoke test of the load harness: the in-process baseline server and a tiny fanout run over
//! loopback must deliver every message exactly once, with latency measured.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use loadtest::scenario::{Params, Scenario};
use loadtest::target::{Guard, Target};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fanout_against_the_baseline_loses_nothing() {
    let (addr, server) = loadtest::baseline::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let target = Target {
        name: "baseline".into(),
        urls: vec![format!("ws://{addr}/ws")],
        pids: vec![std::process::id()],
        admin: None,
        admin_token: None,
        secret: None,
        guard: Guard::None,
    };
    let params = Params {
        duration: Duration::from_millis(1000),
        drain: Duration::from_secs(5),
        ..Params::default()
    };
    let scenario = Scenario::Fanout {
        listeners: 20,
        publishers: 1,
    };
    let r = scenario.run(&target, &params, 50.0).await.unwrap();
    server.abort();
    assert_eq!(r.sent, 50);
    assert_eq!(r.accepted, 50);
    assert_eq!(r.expected, 50 * 21);
    assert_eq!(r.received, r.expected, "{r:?}");
    assert_eq!((r.lost, r.gaps, r.duplicates, r.closed), (0, 0, 0, 0));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.latency.count, r.received);
    assert!(r.p99_ms > 0.0 && r.max_ms >= r.p99_ms);
}
