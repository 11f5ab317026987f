//! Who a gift goes to: the listed members or everyone seated, checked against the room.

use protocol::client::GiftTargets;
use protocol::client::gift::{MAX_GIFT_COUNT, MAX_GIFT_RECIPIENTS};
use protocol::{ErrorCode, UserId};

use super::{Rejected, RoomState, SessionRef, rejected};

impl RoomState {
    /// Who receives a gift from `sender`: the listed members, or everyone seated (`"seats"`),
    /// without the sender, each once.
    ///
    /// # Errors
    /// `NOT_IN_ROOM` for a sender who is not a member; `BAD_REQUEST` for a bad count, an
    /// unknown target word, a recipient who is not in the room, or no recipient at all.
    pub fn gift_recipients(
        &self,
        sender: &UserId,
        at: &SessionRef,
        targets: &GiftTargets,
        count: u32,
    ) -> Result<Vec<UserId>, Rejected> {
        self.check_member(sender, at)?;
        if count == 0 || count > MAX_GIFT_COUNT {
            return Err(rejected(ErrorCode::BadRequest, "count must be 1..=9999"));
        }
        let mut out: Vec<UserId> = Vec::new();
        match targets {
            GiftTargets::Users(users) => {
                for u in users {
                    if u == sender || out.contains(u) {
                        continue;
                    }
                    if !self.members.contains_key(u) {
                        return Err(rejected(
                            ErrorCode::BadRequest,
                            "a recipient is not in the room",
                        ));
                    }
                    out.push(u.clone());
                }
            }
            GiftTargets::Seated(word) if word == "seats" => {
                for seat in &self.durable.seats {
                    if let Some(u) = &seat.user
                        && u != sender
                        && !out.contains(u)
                    {
                        out.push(u.clone());
                    }
                }
            }
            GiftTargets::Seated(_) => {
                return Err(rejected(
                    ErrorCode::BadRequest,
                    "`to` is a list of users or \"seats\"",
                ));
            }
        }
        if out.is_empty() {
            return Err(rejected(
                ErrorCode::BadRequest,
                "no recipient (the sender is not one)",
            ));
        }
        if out.len() > MAX_GIFT_RECIPIENTS {
            return Err(rejected(ErrorCode::BadRequest, "too many recipients"));
        }
        Ok(out)
    }
}
