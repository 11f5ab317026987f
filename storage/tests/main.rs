//! The storage crate's integration tests, one module per file, built as one test binary:
//! one link in place of one per file. A new file here needs its `mod` line below (the
//! test at the end of this file fails otherwise).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

// The ledger fixture's `conformance!` macro is used by the conformance modules below.
#[macro_use]
mod support {
    pub(crate) mod admin;
    #[macro_use]
    pub(crate) mod ledger;
    pub(crate) mod owner;
}

mod app_rank_bench;
mod app_rank_conformance;
mod directory;
mod guard_conformance;
mod im;
mod lease;
mod ledger_bench;
mod ledger_conformance;
mod ledger_owed_events;
mod ledger_postgres;
mod pk_board;
mod registry;
mod reports;
mod retention;
mod robots;
mod snapshot;
mod suspensions;
mod users;
mod wallet_bench;
mod wallet_conformance;

/// Every file in `tests/` is declared above: one without its `mod` line would never run.
#[test]
fn every_test_file_is_a_module_of_this_binary() {
    let tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    assert_eq!(
        kit::undeclared_test_files(&tests).unwrap(),
        Vec::<String>::new()
    );
}
