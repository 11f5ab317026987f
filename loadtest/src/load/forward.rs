//! Events a connection hands on to the scenario that drives it: a load connection's reader
//! counts and times the room traffic itself, but a scenario that reacts to what the server
//! tells one client (a moderator approving the seat requests it is shown) needs those events.

use std::sync::Arc;

use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Shared;

/// One event handed on.
#[derive(Debug)]
pub struct Forwarded {
    /// The tag the connection was given ([`Forward::new`]): which connection got it.
    pub tag: usize,
    /// The event's name.
    pub ev: String,
    /// Its room, if it names one.
    pub room: Option<String>,
    /// Its `d` (`Null` when it had none or it did not parse).
    pub d: Value,
    /// When the reader got it.
    pub at: Instant,
}

/// Which events a connection hands on, and where to.
#[derive(Debug, Clone)]
pub struct Forward {
    events: &'static [&'static str],
    tag: usize,
    tx: mpsc::Sender<Forwarded>,
}

impl Forward {
    /// Hands on `events` tagged `tag` into `tx`.
    pub fn new(events: &'static [&'static str], tag: usize, tx: mpsc::Sender<Forwarded>) -> Self {
        Self { events, tag, tx }
    }

    /// Whether `ev` is handed on.
    pub(super) fn wants(&self, ev: &str) -> bool {
        self.events.contains(&ev)
    }

    /// Hands the event on without waiting: a full channel (the scenario is behind by the
    /// channel's whole capacity) drops it and counts `FORWARD_FULL` in `shared`, so that the
    /// reader never stalls behind the scenario.
    pub(super) fn send(
        &self,
        shared: &Arc<Shared>,
        ev: &str,
        room: Option<&str>,
        d: Option<&RawValue>,
    ) {
        let d = d
            .and_then(|d| serde_json::from_str(d.get()).ok())
            .unwrap_or(Value::Null);
        let f = Forwarded {
            tag: self.tag,
            ev: ev.to_owned(),
            room: room.map(str::to_owned),
            d,
            at: Instant::now(),
        };
        // A closed channel is a scenario done with these events: nothing to count.
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(f) {
            shared.error("FORWARD_FULL");
        }
    }
}
