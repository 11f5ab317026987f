//! What the room directory reads from a room's state: its seated count, and the owner's
//! region, which the owner's profile sets.

use super::{Applied, RoomState};
use protocol::UserId;

impl RoomState {
    /// Seats taken.
    pub fn seated(&self) -> u32 {
        self.durable
            .seats
            .iter()
            .filter(|s| s.user.is_some())
            .count() as u32
    }

    /// Records the region of `user`'s profile (`None`: the profile has none) as the owner's
    /// region when `user` owns the room and it differs; `None` when nothing changed.
    pub fn note_owner_region(&mut self, user: &UserId, region: Option<&str>) -> Option<Applied> {
        if *user != self.durable.owner || self.durable.owner_region.as_deref() == region {
            return None;
        }
        self.durable.owner_region = region.map(Into::into);
        Some(Applied::changed())
    }
}
