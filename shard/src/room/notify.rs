//! What a room tells the app's backend (event webhooks, `crate::events`): built from what the
//! room published, only for the kinds the operator asked for, and never waited on; and the
//! moderation queue a member's report is filed in, beside the room.

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use storage::ledger::GiftOrder;
use storage::reports::{NewReport, ReportStore};

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
                    let mut d = json!({ "seq": seq, "from": c.from, "text": c.text });
                    if !c.mentions.is_empty() {
                        d["mentions"] = json!(c.mentions);
                    }
                    if let Some(r) = &c.reply {
                        d["reply"] = json!(r);
                    }
                    if c.mention_all {
                        d["mention_all"] = true.into();
                    }
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

    /// Files a member's report in the moderation queue, then answers the reporter with its id
    /// and queues `report.filed` (with the id) for the app. The reported line goes with it as
    /// the room sent it (its event's `d`) while the room's log holds it. The write runs beside
    /// the room, which goes on with its next command.
    pub(super) fn file_report(
        &self,
        cmd: &protocol::link::Command,
        r: &protocol::client::ReportSend,
        filed: &Filed,
    ) {
        metrics::counter!(crate::metrics::REPORTS_FILED).increment(1);
        let reporter = &cmd.user;
        tracing::info!(room = %self.room, %reporter, user = ?filed.user, reason = %r.reason, "Report filed.");
        let epoch = self.state.as_ref().map(|s| s.epoch());
        let line = filed
            .seq
            .zip(epoch)
            .and_then(|(seq, epoch)| self.log.frame(epoch, seq))
            .and_then(|f| serde_json::from_slice::<EventData<'_>>(f).ok())
            .map(|e| e.d.to_owned());
        let report = NewReport {
            room: self.room.clone(),
            reporter: reporter.clone(),
            user: filed.user.clone(),
            seq: filed.seq,
            line,
            reason: r.reason.clone(),
            text: r.text.clone(),
            at: crate::room::now_ms(),
        };
        let inner = self.inner.clone();
        let cmd = cmd.clone();
        self.inner.tracker.spawn(async move {
            let id = store_report(&inner.reports, &report).await;
            if let Some(n) = inner.events.as_ref().filter(|n| n.wants("report.filed")) {
                let d = json!({
                    "id": id,
                    "reporter": report.reporter,
                    "user": report.user,
                    "seq": report.seq,
                    "line": report.line,
                    "reason": report.reason,
                    "text": report.text,
                });
                n.emit("report.filed", &report.room, d);
            }
            let ok = protocol::client::ReportFiled {
                duplicate: false,
                id,
            };
            let ok = protocol::client::to_json(&ok).into();
            inner.reply_direct(&cmd, Ok(ok), None).await;
        });
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

/// An event frame's `d`, borrowed.
#[derive(Deserialize)]
struct EventData<'a> {
    #[serde(borrow)]
    d: &'a RawValue,
}

/// Waits between tries of a report's write.
const REPORT_RETRIES: [Duration; 2] = [Duration::from_millis(200), Duration::from_secs(1)];

/// Writes `report` to the queue, trying again twice; its id, or `None` (logged and counted)
/// when every try failed: the app still gets `report.filed`, without an id.
async fn store_report(store: &ReportStore, report: &NewReport) -> Option<u64> {
    // One key through every try: a try whose answer was lost after the write went through
    // answers that write's id instead of queueing the report again.
    let key = uuid::Uuid::now_v7().to_string();
    let mut waits = REPORT_RETRIES.iter();
    loop {
        match store.file(report, &key).await {
            Ok(id) => return Some(id),
            Err(e) => match waits.next() {
                Some(wait) => {
                    tracing::debug!(room = %report.room, error = %e, "Report not stored yet; trying again.");
                    tokio::time::sleep(*wait).await;
                }
                None => {
                    metrics::counter!(crate::metrics::REPORTS_UNSTORED).increment(1);
                    tracing::warn!(room = %report.room, reporter = %report.reporter, error = %e, "Report not stored in the moderation queue.");
                    return None;
                }
            },
        }
    }
}
