//! The room's app-defined attributes (`room.attrs`): a bounded key-value map in the durable
//! state, changed by the staff or the app's backend, announced as a sequenced event.

use std::collections::BTreeMap;

use protocol::UserId;
use protocol::client::{
    AttrsEvent, MAX_ATTRS_BYTES, MAX_ROOM_ATTRS, RoomAttrs, attrs::encoded_len,
};

use super::{Applied, ErrorCode, Rejected, RoomState, Sequenced, rejected};

impl RoomState {
    /// Sets and removes attributes: by the owner or an admin (`by`), or by the app's backend
    /// (`None`). Only what changes is announced; nothing changes on a refusal.
    ///
    /// # Errors
    /// `FORBIDDEN` for a member; `BAD_REQUEST` for a bad key or value, or past the room's
    /// bounds (20 attributes, 8,192 bytes).
    pub fn room_attrs(&mut self, by: Option<&UserId>, a: &RoomAttrs) -> Result<Applied, Rejected> {
        if let Some(user) = by {
            self.require_staff(user, "only the owner or an admin sets room attributes")?;
        }
        a.check()
            .map_err(|why| rejected(ErrorCode::BadRequest, why))?;
        let mut attrs = self.durable.attrs.as_deref().cloned().unwrap_or_default();
        let mut ev = AttrsEvent {
            by: by.cloned(),
            set: BTreeMap::new(),
            removed: Vec::new(),
        };
        for k in &a.remove {
            if attrs.remove(k).is_some() {
                ev.removed.push(k.clone());
            }
        }
        for (k, v) in &a.set {
            if attrs.get(k) != Some(v) {
                attrs.insert(k.clone(), v.clone());
                ev.set.insert(k.clone(), v.clone());
            }
        }
        if attrs.len() > MAX_ROOM_ATTRS {
            return Err(rejected(
                ErrorCode::BadRequest,
                "a room holds at most 20 attributes",
            ));
        }
        let bytes: usize = attrs.iter().map(|(k, v)| k.len() + encoded_len(v)).sum();
        if bytes > MAX_ATTRS_BYTES {
            return Err(rejected(
                ErrorCode::BadRequest,
                "a room's attributes take at most 8192 bytes",
            ));
        }
        let mut applied = Applied::default();
        if ev.set.is_empty() && ev.removed.is_empty() {
            return Ok(applied);
        }
        self.durable.attrs = (!attrs.is_empty()).then(|| Box::new(attrs));
        applied.durable_changed = true;
        self.push(&mut applied, Sequenced::RoomAttrs(ev));
        Ok(applied)
    }

    /// The room's attributes, for the snapshot.
    pub(super) fn attrs(&self) -> BTreeMap<String, serde_json::Value> {
        self.durable.attrs.as_deref().cloned().unwrap_or_default()
    }
}
