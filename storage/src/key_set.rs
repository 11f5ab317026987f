//! Which users may have rows in a standalone SQLite store, kept in memory so that a connect
//! reads the store only for users with something in it. A connect that finds nothing stored
//! (the common case: most users set no profile and are owed no message) then costs no turn on
//! the store's one connection and no blocking-pool hop, and a burst of connects does not queue
//! thousands of reads behind it.
//!
//! It holds a 64-bit hash of each user id, not the id: 8 bytes a user, and a collision only
//! makes a read that finds nothing. Only a single-process store can keep it (every write
//! passes here); the Redis engines, which other gateways write, always read.
//!
//! It also serves as a bounded memo of users already handled ([`KeySet::insert_new`]), where
//! a collision makes a user count as handled: fit only where that defers work to a later
//! process (one chance in about 2^64 / the set's size per lookup), never where it loses it.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

/// A set of user-id hashes; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct KeySet {
    hashes: Arc<Mutex<HashSet<u64>>>,
}

fn hash(user: &str) -> u64 {
    // SipHash with fixed keys: the same id hashes the same in every call.
    let mut h = DefaultHasher::new();
    user.hash(&mut h);
    h.finish()
}

impl KeySet {
    /// A set of `users`.
    pub(crate) fn of(users: impl IntoIterator<Item = String>) -> Self {
        Self {
            hashes: Arc::new(Mutex::new(users.into_iter().map(|u| hash(&u)).collect())),
        }
    }

    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.hashes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that `user` may have rows now.
    pub(crate) fn insert(&self, user: &str) {
        self.set().insert(hash(user));
    }

    /// Adds `user` unless it is in the set; a full set (`max` users) starts afresh first.
    /// Whether it was added (false: it was there already).
    pub fn insert_new(&self, user: &str, max: usize) -> bool {
        let h = hash(user);
        let mut set = self.set();
        if set.contains(&h) {
            return false;
        }
        if set.len() >= max {
            set.clear();
        }
        set.insert(h)
    }

    /// Notes that `user` has no rows (the caller checked, under the store's lock), or takes
    /// it out of a memo.
    pub fn remove(&self, user: &str) {
        self.set().remove(&hash(user));
    }

    /// Whether `user` may have rows (false: certainly none).
    pub(crate) fn may_contain(&self, user: &str) -> bool {
        self.set().contains(&hash(user))
    }
}

#[cfg(test)]
mod tests {
    use super::KeySet;

    #[test]
    fn a_user_is_in_the_set_from_its_insert_to_its_removal() {
        let s = KeySet::of(["a".to_owned()]);
        assert!(s.may_contain("a"));
        assert!(!s.may_contain("b"));
        s.insert("b");
        assert!(s.may_contain("b"));
        s.remove("a");
        assert!(!s.may_contain("a"));
        assert!(s.clone().may_contain("b"), "clones share the set");
    }

    #[test]
    fn insert_new_adds_each_user_once_and_starts_afresh_when_full() {
        let s = KeySet::default();
        assert!(s.insert_new("a", 2));
        assert!(!s.insert_new("a", 2), "already there");
        assert!(s.insert_new("b", 2));
        assert!(!s.clone().insert_new("b", 2), "clones share the set");
        // Full: the next new user clears the others out.
        assert!(s.insert_new("c", 2));
        assert!(s.may_contain("c"));
        assert!(!s.may_contain("a") && !s.may_contain("b"));
        s.remove("c");
        assert!(s.insert_new("c", 2), "removed: added again");
    }
}
