//! Robots: labelled bot users that sit on seats, chat and send gifts in rooms operators
//! configure. The robots of a room run inside its runtime on the lease owner (started after
//! the claim, stopped with it), so no node that does not own a room ever acts for its robots.

pub mod config;
pub(crate) mod reconcile;

pub use config::{BadConfig, RobotConfig, is_robot};
