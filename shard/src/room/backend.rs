//! The app backend's commands to a room (the admin API): attributes, messages, the moderation
//! of a user, and closing, reopening or changing the room. Each is one rule of the room's
//! state, published as a member's change is, and answered with the seq of the event it made.

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
