//! The `chorus-loadtest chaos` and `chaos-check` flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::faults::FaultKind;
use super::{ChaosOptions, Outcome};

/// `chorus-loadtest chaos`.
#[derive(Args, Clone, Debug)]
pub struct ChaosArgs {
    /// Seed of the fault schedule and of the users' choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seconds of faults (traffic runs throughout, then a calm period and the checks).
    #[arg(long, default_value_t = 60)]
    pub duration: u64,
    /// The run's directory: history, node logs, ledger, report.
    #[arg(long)]
    pub out: PathBuf,
    /// Rooms.
    #[arg(long, default_value_t = 6)]
    pub rooms: usize,
    /// Users per room.
    #[arg(long, default_value_t = 4)]
    pub per_room: usize,
    /// Lease TTL of the shards, ms.
    #[arg(long, default_value_t = 2000)]
    pub lease_ttl_ms: u64,
    /// Fault kinds to draw from, comma-separated (default: all; `none` for no faults).
    #[arg(long, value_delimiter = ',')]
    pub faults: Vec<String>,
}

impl ChaosArgs {
    /// The run's options.
    ///
    /// # Errors
    /// An unknown fault kind.
    pub fn options(&self) -> anyhow::Result<ChaosOptions> {
        let mut o = ChaosOptions::new(
            self.seed,
            Duration::from_secs(self.duration),
            self.out.clone(),
        );
        o.rooms = self.rooms;
        o.per_room = self.per_room;
        o.ttl = Duration::from_millis(self.lease_ttl_ms);
        if !self.faults.is_empty() {
            o.kinds = Vec::new();
            for f in &self.faults {
                if f == "none" {
                    continue;
                }
                let names: Vec<_> = FaultKind::ALL.iter().map(|k| k.name()).collect();
                let k = FaultKind::parse(f)
                    .ok_or_else(|| anyhow::anyhow!("unknown fault {f:?}; known: {names:?}"))?;
                o.kinds.push(k);
            }
        }
        Ok(o)
    }
}

/// Prints the outcome; an error when a checker failed (the process exits non-zero).
///
/// # Errors
/// Any violation.
pub fn finish(out: &Outcome) -> anyhow::Result<()> {
    print!("{}", out.report());
    anyhow::ensure!(out.passed(), "the checkers found violations");
    Ok(())
}
