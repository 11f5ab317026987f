//! What a room tells the app's backend (event webhooks, `crate::events`): built from what the
//! room published, only for the kinds the operator asked for, and never waited on.

use serde_json::json;
use storage::ledger::GiftOrder;

use super::RoomActor;
use super::state::{Applied, Filed, Presence, Sequenced};

impl RoomActor {
    /// Queues the events of a published change: members in and out (after the grace window,
    /// as presence shows them), seats, moderation, attributes, rocket launches, PK results, and the
    /// sequenced messages (volatile ones are never sent).
    pub(super) fn notify(&self, applied: &Applied) {
        let Some(n) = &self.inner.events else { return };
        for (seq, ev) in &applied.events {
            match ev {
                Sequenced::Chat(c) if n.wants("chat.sent") => {
                    let d = json!({ "seq": seq, "from": c.from, "text": c.text });
                    n.emit("chat.sent", &self.room, d);
                }
                Sequenced::ChatRecall(r) if n.wants("chat.recalled") => {
                    let d = json!({ "seq": r.line, "from": r.from, "by": r.by });
                    n.emit("chat.recalled", &self.room, d);
                }
                Sequenced::Custom(c) if n.wants("message.custom") => {
                    let d = json!({
                        "seq": seq,
                        "from": c.from,
                        "system": c.system,
                        "type": c.kind,
                        "data": c.data,
                    });
                    n.emit("message.custom", &self.room, d);
                }
                Sequenced::RoomAttrs(a) if n.wants("room.attrs") => {
                    let d = serde_json::to_value(a).unwrap_or_default();
                    n.emit("room.attrs", &self.room, d);
                }
                Sequenced::RocketLaunch(l) if n.wants("rocket.launched") => {
                    let d = serde_json::to_value(l).unwrap_or_default();
                    n.emit("rocket.launched", &self.room, d);
                }
                Sequenced::PkEnd(e) if n.wants("pk.ended") => {
                    let d = serde_json::to_value(e).unwrap_or_default();
                    n.emit("pk.ended", &self.room, d);
                }
                Sequenced::SeatUpdate(s) if n.wants("seat.changed") => {
                    let d = json!({
                        "index": s.seat.index,
                        "user": s.seat.user,
                        "by": s.by,
                        "cause": s.cause,
                        "reason": s.reason,
                    });
                    n.emit("seat.changed", &self.room, d);
                }
                Sequenced::Moderation(m) if n.wants("moderation") => {
                    let d = serde_json::to_value(m).unwrap_or_default();
                    n.emit("moderation", &self.room, d);
                }
                _ => {}
            }
        }
        for p in &applied.presence {
            match p {
                Presence::Join(user, ..) if n.wants("member.joined") => {
                    n.emit("member.joined", &self.room, json!({ "user": user }));
                }
                Presence::Leave(user, reason) if n.wants("member.left") => {
                    let d = json!({ "user": user, "reason": reason });
                    n.emit("member.left", &self.room, d);
                }
                _ => {}
            }
        }
    }

    /// Queues `gift.settled` for an order the room publishes (once per order: a storm's merged
    /// event still makes one webhook event per order).
    pub(super) fn notify_gift(&self, order: &GiftOrder) {
        let Some(n) = &self.inner.events else { return };
        if !n.wants("gift.settled") {
            return;
        }
        let mut d = json!({
            "order": order.gift_id,
            "from": order.sender,
            "to": order.recipients,
            "gift": order.gift,
            "count": order.count,
            "coins": order.total(),
        });
        if let Some(l) = &order.lucky {
            d["lucky_multiplier"] = l.multiplier.into();
            d["lucky_coins"] = l.coins.into();
        }
        n.emit("gift.settled", &self.room, d);
    }

    /// Counts a member's report and queues `report.filed`, with the reported line as the room
    /// sent it (its event's `d`) while the room's log holds it.
    pub(super) fn notify_report(
        &self,
        reporter: &protocol::UserId,
        r: &protocol::client::ReportSend,
        filed: &Filed,
    ) {
        metrics::counter!(crate::metrics::REPORTS_FILED).increment(1);
        tracing::info!(room = %self.room, %reporter, user = ?filed.user, reason = %r.reason, "Report filed.");
        let Some(n) = self
            .inner
            .events
            .as_ref()
            .filter(|n| n.wants("report.filed"))
        else {
            return;
        };
        let epoch = self.state.as_ref().map(|s| s.epoch());
        let line = filed
            .seq
            .zip(epoch)
            .and_then(|(seq, epoch)| self.log.frame(epoch, seq))
            .and_then(|f| serde_json::from_slice::<serde_json::Value>(f).ok())
            .and_then(|mut v| v.get_mut("d").map(serde_json::Value::take));
        let d = json!({
            "reporter": reporter,
            "user": filed.user,
            "seq": filed.seq,
            "line": line,
            "reason": r.reason,
            "text": r.text,
        });
        n.emit("report.filed", &self.room, d);
    }

    /// Queues a room lifecycle event (`room.created`, `room.closed`, `room.opened`): `by`
    /// null for the app's backend, whose close carries its `reason`.
    pub(super) fn notify_room(
        &self,
        kind: &'static str,
        by: Option<&protocol::UserId>,
        reason: Option<&str>,
    ) {
        if let Some(n) = self.inner.events.as_ref().filter(|n| n.wants(kind)) {
            let mut d = json!({ "by": by });
            if let Some(r) = reason {
                d["reason"] = r.into();
            }
            n.emit(kind, &self.room, d);
        }
    }
}
