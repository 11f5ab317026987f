//! The app backend's commands to a room (the admin API): attributes, messages, the moderation
//! of a user, and closing, reopening or changing the room. Each is one rule of the room's
//! state, published as a member's change is, and answered with the seq of the event it made.
//! Also the room as the admin API shows it.

use bytes::Bytes;
use protocol::ErrorCode;
use protocol::client::{self, BackendManage};
use protocol::link::{Membership, RoomCmd};

use super::state::{self, Rejected};
use super::{RoomActor, now_ms};

impl RoomActor {
    /// Applies a command of the app's backend; any other command is refused `INTERNAL`.
    pub(super) async fn backend(
        &mut self,
        cmd: &RoomCmd,
    ) -> Result<Option<(Bytes, Option<Membership>)>, Rejected> {
        let Some(state) = self.state.as_mut() else {
            return Err(state::rejected(ErrorCode::RoomNotFound, "no such room"));
        };
        let now = now_ms();
        match cmd {
            RoomCmd::Attrs(a) => {
                let applied = state.room_attrs(None, a)?;
                self.publish_for_backend(applied).await
            }
            RoomCmd::Custom(c) => {
                let applied = state.custom(None, c, now)?;
                self.publish_for_backend(applied).await
            }
            RoomCmd::Moderate(m) => {
                let applied = state.backend_moderate(m, now)?;
                self.publish_for_backend(applied).await
            }
            RoomCmd::Manage(BackendManage::PkStart(p)) => {
                // Answered with the PK's number and end beside the event's seq.
                let (started, applied) = state.pk_start(None, p, now)?;
                let seq = applied.events.last().map(|(s, _)| *s);
                self.publish(applied, None).await?;
                let ok =
                    serde_json::json!({"seq": seq, "pk": started.pk, "ends_at": started.ends_at});
                Ok(Some((ok.to_string().into(), None)))
            }
            RoomCmd::Manage(BackendManage::PkLink(p)) => {
                let (started, applied) = state.pk_link_start(p, now)?;
                let seq = applied.events.last().map(|(s, _)| *s);
                self.publish(applied, None).await?;
                self.pk_sync_start();
                let ok =
                    serde_json::json!({"seq": seq, "pk": started.pk, "ends_at": started.ends_at});
                Ok(Some((ok.to_string().into(), None)))
            }
            RoomCmd::Manage(m) => {
                let was_closed = state.durable().closed;
                let by_platform = state.durable().platform_closed.is_some();
                let applied = state.backend_manage(m, now)?;
                let answer = self.publish_for_backend(applied).await?;
                match m {
                    BackendManage::Close { reason } if !by_platform => {
                        self.notify_room("room.closed", None, Some(reason));
                    }
                    BackendManage::Open if was_closed => {
                        self.notify_room("room.opened", None, None);
                    }
                    _ => {}
                }
                Ok(answer)
            }
            _ => Err(state::rejected(
                ErrorCode::Internal,
                "not a command of the app's backend",
            )),
        }
    }

    /// The room for the admin API: snapshot, members (at most 1,000 listed) and fence.
    pub(super) fn inspect(&self) -> serde_json::Value {
        /// Members listed by the admin API; the count is always exact.
        const MAX_LISTED: usize = 1000;
        match &self.state {
            Some(state) => {
                let members: Vec<&protocol::UserId> =
                    state.members().map(|(u, _)| u).take(MAX_LISTED).collect();
                let d = state.durable();
                serde_json::json!({
                    "snapshot": state.snapshot(),
                    "members": members,
                    "member_count": state.member_count(),
                    "away": state.away_count(),
                    "fence": self.fence,
                    "closed": d.closed,
                    "platform_closed": d.platform_closed,
                    "requests": d.requests,
                    "bans": d.bans.len(),
                    "chat_mutes": d.mutes.len(),
                    "audit": d.audit,
                    "pk_invites": state.pk_invites(),
                })
            }
            None => serde_json::Value::Null,
        }
    }

    /// Publishes a change the app's backend made, answered with the seq of the event it
    /// made: none for a volatile message, or a change that changed nothing.
    async fn publish_for_backend(
        &mut self,
        applied: state::Applied,
    ) -> Result<Option<(Bytes, Option<Membership>)>, Rejected> {
        let seq = applied.events.last().map(|(s, _)| *s);
        self.publish(applied, None).await?;
        let ok = client::to_json(&client::CustomSent { seq });
        Ok(Some((ok.into(), None)))
    }
}
