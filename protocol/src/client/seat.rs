//! `seat.take`, `seat.leave`, `seat.lock` and the `seat.update` event.

use serde::{Deserialize, Serialize};

use crate::client::room::SeatView;
use crate::ids::RoomId;

/// `seat.take` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatTake {
    /// The room.
    pub room: RoomId,
    /// The seat index; the first free seat when absent.
    #[serde(default)]
    pub seat: Option<u32>,
}

/// The `ok` of `seat.take`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatTaken {
    /// The seat now held.
    pub seat: u32,
}

/// `seat.leave` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatLeave {
    /// The room.
    pub room: RoomId,
}

/// `seat.lock` arguments: the owner or an admin locks or unlocks one seat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatLock {
    /// The room.
    pub room: RoomId,
    /// The seat index.
    pub seat: u32,
    /// `true` locks the seat, `false` unlocks it.
    pub locked: bool,
}

/// The `seat.update` event: the changed seat, in full.
pub type SeatUpdate = SeatView;
