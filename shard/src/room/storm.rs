//! Gift events in the room actor after the state machine numbered them (combos) and, in a
//! storm, held them back: publishing, the storm timer, and the held orders of a runtime that
//! stops. An order's open record (cluster) is closed only by the write that publishes the
//! event carrying it; an event that cannot be published is owed like any gift's.

use super::RoomActor;
use super::gifts::event_not_published;
use super::state::{Applied, GiftMark};
use crate::metrics as m;

impl RoomActor {
    /// Publishes gift events (`applied`, which may also change the durable state: a rocket
    /// launch) carrying `orders`: their open records close with the write; when it fails, each
    /// order's event is owed to the room's next runtime.
    pub(super) async fn publish_gifts(&mut self, applied: Applied, orders: Vec<GiftMark>) {
        if applied.events.is_empty() && !applied.durable_changed {
            // A held order: no event and nothing to write yet, but the VIP level it crossed
            // shows at once (its merged event carries the badge later).
            for p in applied.presence {
                self.publish_presence(p, None).await;
            }
            return;
        }
        if orders.len() > 1 {
            metrics::counter!(m::GIFT_EVENTS_MERGED).increment(orders.len() as u64);
        }
        if self.inner.config.durable_history {
            self.closing.extend(orders.iter().map(|o| o.order));
        }
        if self.publish(applied, None).await.is_err() {
            for o in orders {
                event_not_published(&self.inner, &self.room, o.order, o.open).await;
            }
        }
    }

    /// Publishes the storm batches due now (`all`: every one), their orders' rocket fuel with
    /// them. A runtime that cannot prove its lease owes them instead, fuel not counted.
    pub(super) async fn flush_storm(&mut self, all: bool) {
        if !self.inner.owner.proven(&self.valid) {
            self.owe_storm(all).await;
            return;
        }
        let Some(state) = self.state.as_mut() else {
            return;
        };
        let out = state.flush_storm(super::now_ms(), all);
        if out.orders.is_empty() {
            return;
        }
        let moved = (out.fuelled, out.pk_scored);
        self.publish_gifts(out.applied, out.orders).await;
        self.gifts_moved(moved.0, moved.1);
    }

    /// At stop: the orders a storm still holds go out in their merged events, or, when the
    /// runtime lost its lease (`lost`), are owed to the next runtime.
    pub(super) async fn end_storm(&mut self, lost: bool) {
        if lost {
            self.owe_storm(true).await;
        } else {
            self.flush_storm(true).await;
        }
    }

    /// Owes the events of the storm batches due now (`all`: every one) to the next runtime.
    async fn owe_storm(&mut self, all: bool) {
        let Some(state) = self.state.as_mut() else {
            return;
        };
        for o in state.owe_storm(super::now_ms(), all) {
            event_not_published(&self.inner, &self.room, o.order, o.open).await;
        }
    }
}
