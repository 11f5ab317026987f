//! The gateway crate's integration tests, one module per file, built as one test binary:
//! one link in place of one per file. A new file here needs its `mod` line below (the
//! test at the end of this file fails otherwise).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod support {
    pub(crate) mod server;
    pub(crate) mod standalone;
    pub(crate) mod webhook;
}

mod admin_moderation;
mod app_rank;
mod custom;
mod directory;
mod drain;
mod events_webhook;
mod guards;
mod identity;
mod im;
mod im_ack;
mod likes;
mod members;
mod metrics;
mod money;
mod openapi;
mod payments;
mod payments_bench;
mod pins;
mod pk;
mod pk_link;
mod reports;
mod robots;
mod robots_admin;
mod robots_restart;
mod rocket;
mod room_lifecycle;
mod rtc;
mod seats;
mod slow_reader;
mod standalone;
mod standalone_connection;
mod storm;
mod suspension;
mod system_messages;
mod users;
mod vip_protection;
mod wallet;
mod web;

/// Every file in `tests/` is declared above: one without its `mod` line would never run.
#[test]
fn every_test_file_is_a_module_of_this_binary() {
    let tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    assert_eq!(
        kit::undeclared_test_files(&tests).unwrap(),
        Vec::<String>::new()
    );
}
