//! Per-user room quotas: the creation rate (here, per shard) and the cap of stored rooms (kept
//! by the snapshot store, see `storage::snapshot`'s "Quotas and retention").

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use protocol::UserId;
use tokio::time::Instant;

/// Users tracked before the limiter drops the ones whose bucket is full again.
const PRUNE_AT: usize = 4096;

/// A token bucket per user: `per_min` creations, refilled evenly over a minute.
#[derive(Debug)]
pub(crate) struct CreateRate {
    per_min: u32,
    state: Mutex<Buckets>,
}

#[derive(Debug)]
struct Buckets {
    users: HashMap<UserId, Bucket>,
    /// Size of `users` at which the next prune runs.
    prune_at: usize,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl CreateRate {
    /// A limiter of `per_min` creations per user and minute (0: no limit).
    pub(crate) fn new(per_min: u32) -> Self {
        Self {
            per_min,
            state: Mutex::new(Buckets {
                users: HashMap::new(),
                prune_at: PRUNE_AT,
            }),
        }
    }

    /// Takes one creation from `user`'s allowance: false when it is used up.
    pub(crate) fn try_take(&self, user: &UserId) -> bool {
        self.take_at(user, Instant::now())
    }

    /// Whether `user` has a creation left, without taking it: a room start looks before it
    /// claims a room the creation would be refused for.
    pub(crate) fn has_one(&self, user: &UserId) -> bool {
        self.has_one_at(user, Instant::now())
    }

    /// [`CreateRate::has_one`] at `now`.
    fn has_one_at(&self, user: &UserId, now: Instant) -> bool {
        if self.per_min == 0 {
            return true;
        }
        let cap = f64::from(self.per_min);
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.users.get(user).is_none_or(|b| {
            let secs = now.saturating_duration_since(b.at).as_secs_f64();
            (b.tokens + secs * cap / 60.0).min(cap) >= 1.0
        })
    }

    /// [`CreateRate::try_take`] at `now`.
    fn take_at(&self, user: &UserId, now: Instant) -> bool {
        if self.per_min == 0 {
            return true;
        }
        let cap = f64::from(self.per_min);
        let per_sec = cap / 60.0;
        let refill = |b: &Bucket| {
            let secs = now.saturating_duration_since(b.at).as_secs_f64();
            (b.tokens + secs * per_sec).min(cap)
        };
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if s.users.len() >= s.prune_at {
            s.users.retain(|_, b| refill(b) < cap);
            s.prune_at = (s.users.len() * 2).max(PRUNE_AT);
        }
        let b = s.users.entry(user.clone()).or_insert(Bucket {
            tokens: cap,
            at: now,
        });
        b.tokens = refill(b);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_gets_per_min_creations_then_one_per_share_of_a_minute() {
        let rate = CreateRate::new(3);
        let (a, b) = (UserId::from("a"), UserId::from("b"));
        let t0 = Instant::now();
        assert!((0..3).all(|_| rate.take_at(&a, t0)));
        assert!(!rate.take_at(&a, t0));
        // Another user has an allowance of their own.
        assert!(rate.take_at(&b, t0));
        let later = t0 + std::time::Duration::from_secs(20);
        assert!(rate.take_at(&a, later));
        assert!(!rate.take_at(&a, later));
        assert!(CreateRate::new(0).take_at(&a, t0));
        // Looking takes nothing.
        let rate = CreateRate::new(1);
        assert!(rate.has_one_at(&a, t0) && rate.has_one_at(&a, t0));
        assert!(rate.take_at(&a, t0));
        assert!(!rate.has_one_at(&a, t0));
        assert!(rate.has_one_at(&a, t0 + std::time::Duration::from_secs(60)));
    }
}
