//! The loadtest crate's integration tests, one module per file, built as one test binary:
//! one link in place of one per file. A new file here needs its `mod` line below (the
//! test at the end of this file fails otherwise).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod support;

mod admin_port;
mod chaos;
mod cli;
mod cluster;
mod cluster_gifts;
mod custom_cluster;
mod delivery;
mod directory_cluster;
mod docs;
mod drained_redis_loss;
mod events_cluster;
mod guard_cluster;
mod guard_restart;
mod harness;
mod health;
mod hostile;
mod hostile_ci;
mod likes_cluster;
mod link_auth;
mod money_crash;
mod money_postgres;
mod pk_cluster;
mod presence_cluster;
mod rebalance;
mod reports_cluster;
mod robots_cluster;
mod rocket_crash;
mod seats_cluster;
mod snapshots;
mod social_cluster;
mod suspension_cluster;
mod users_cluster;

/// Every file in `tests/` is declared above: one without its `mod` line would never run.
#[test]
fn every_test_file_is_a_module_of_this_binary() {
    let tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    assert_eq!(
        kit::undeclared_test_files(&tests).unwrap(),
        Vec::<String>::new()
    );
}
