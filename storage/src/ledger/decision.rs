//! Pure decision tables of the gift saga (the wallet compare-and-set and recovery): no I/O,
//! every row tested.
//!
//! Both the debit and the void claim write the sender's wallet entry under the gift id. Whoever
//! writes it first owns the key; the other must find the row and follow it. [`decide`] says what
//! to do after each attempt to write the key; [`decide_recovery`] says what the recovery worker
//! may do with a saga that is not terminal.

use super::{EntryKind, SagaState};

/// What came back from one attempt to write the gift's wallet entry (a conditional write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    /// The conditional write was applied.
    Applied,
    /// The write was not applied; `entry` is the key's row read afterwards (linearizable read).
    NotApplied {
        /// The kind found under the gift id, if any.
        entry: Option<EntryKind>,
    },
    /// Timeout, lost connection, `CAS_WRITE_UNKNOWN`: it may or may not have been applied.
    Unknown,
    /// The linearizable read-back after an unknown outcome.
    ReadBack {
        /// The kind found under the gift id, if any.
        entry: Option<EntryKind>,
    },
}

/// What to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The key is held by this kind: a debit → mark DEBITED (roll forward); a void → mark VOIDED.
    Holds(EntryKind),
    /// The balance version moved under us and the key is free: re-read the head and retry
    /// (bounded, jittered).
    RetryFresh,
    /// The outcome is unknown: read the entry back at SERIAL consistency before anything else.
    ReadBack,
    /// The read-back proves the write did not land: resend the same statement (safe: the key
    /// makes it idempotent).
    ResendSame,
    /// The key holds an entry that no gift can write (schema drift, id collision): stop and page.
    Corrupt(EntryKind),
}

/// The decision after an attempt to write `claim` under its key: `Debit` or `Void` under a gift
/// id (either may hold it), `Grant` or `Lucky` under their own keys.
pub fn decide(claim: EntryKind, observed: Observation) -> Decision {
    // A gift id is claimed by its debit or its void; any other key only by its own kind.
    let gift_key = |k: EntryKind| matches!(k, EntryKind::Debit | EntryKind::Void);
    let holder = |kind: EntryKind| {
        if kind == claim || (gift_key(claim) && gift_key(kind)) {
            Decision::Holds(kind)
        } else {
            Decision::Corrupt(kind)
        }
    };
    match observed {
        Observation::Applied => Decision::Holds(claim),
        Observation::NotApplied { entry: Some(kind) } => holder(kind),
        Observation::NotApplied { entry: None } => Decision::RetryFresh,
        Observation::Unknown => Decision::ReadBack,
        Observation::ReadBack { entry: Some(kind) } => holder(kind),
        Observation::ReadBack { entry: None } => Decision::ResendSame,
    }
}

/// What recovery may do with a saga.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryAction {
    /// Not the owner: write nothing, release the claim, let the owner resolve it.
    Release,
    /// Terminal already: nothing to do.
    Done,
    /// The debit happened: mark DEBITED (if needed) and settle.
    RollForward,
    /// No debit and no claim: write the void claim (which may still lose to a racing debit).
    VoidClaim,
    /// The void claim holds the key: mark VOIDED.
    MarkVoided,
    /// The saga and the wallet disagree in a way no protocol step produces: leave it, page.
    Inconsistent,
}

/// The recovery action for a saga in `state` whose wallet entry (read at SERIAL) is `entry`.
/// Pending never proves "not debited": only the wallet entry does.
pub fn decide_recovery(
    is_owner: bool,
    state: SagaState,
    entry: Option<EntryKind>,
) -> RecoveryAction {
    if !is_owner {
        return RecoveryAction::Release;
    }
    match (state, entry) {
        (SagaState::Settled | SagaState::Voided, _) => RecoveryAction::Done,
        (SagaState::Pending | SagaState::Debited, Some(EntryKind::Debit)) => {
            RecoveryAction::RollForward
        }
        (SagaState::Pending, None) => RecoveryAction::VoidClaim,
        (SagaState::Pending, Some(EntryKind::Void)) => RecoveryAction::MarkVoided,
        (SagaState::Debited, None | Some(EntryKind::Void)) => RecoveryAction::Inconsistent,
        (
            _,
            Some(
                EntryKind::Grant
                | EntryKind::Lucky
                | EntryKind::Transfer
                | EntryKind::TopUp
                | EntryKind::Refund
                | EntryKind::Guard,
            ),
        ) => RecoveryAction::Inconsistent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use EntryKind::{Debit, Grant, Lucky, Void};

    #[test]
    fn applied_claim_holds_the_key() {
        assert_eq!(decide(Debit, Observation::Applied), Decision::Holds(Debit));
        assert_eq!(decide(Void, Observation::Applied), Decision::Holds(Void));
    }

    #[test]
    fn not_applied_with_debit_rolls_forward() {
        for claim in [Debit, Void] {
            let o = Observation::NotApplied { entry: Some(Debit) };
            assert_eq!(decide(claim, o), Decision::Holds(Debit));
        }
    }

    #[test]
    fn not_applied_with_void_never_debits() {
        for claim in [Debit, Void] {
            let o = Observation::NotApplied { entry: Some(Void) };
            assert_eq!(decide(claim, o), Decision::Holds(Void));
        }
    }

    #[test]
    fn not_applied_without_entry_retries_with_fresh_version() {
        let o = Observation::NotApplied { entry: None };
        assert_eq!(decide(Debit, o), Decision::RetryFresh);
        assert_eq!(decide(Void, o), Decision::RetryFresh);
    }

    #[test]
    fn unknown_outcome_reads_back_first() {
        assert_eq!(decide(Debit, Observation::Unknown), Decision::ReadBack);
        assert_eq!(decide(Void, Observation::Unknown), Decision::ReadBack);
    }

    #[test]
    fn read_back_resolves_or_resends_the_same_statement() {
        let found = |k| Observation::ReadBack { entry: Some(k) };
        assert_eq!(decide(Debit, found(Debit)), Decision::Holds(Debit));
        assert_eq!(decide(Debit, found(Void)), Decision::Holds(Void));
        assert_eq!(decide(Void, found(Debit)), Decision::Holds(Debit));
        let absent = Observation::ReadBack { entry: None };
        assert_eq!(decide(Debit, absent), Decision::ResendSame);
        assert_eq!(decide(Void, absent), Decision::ResendSame);
    }

    #[test]
    fn credits_hold_only_their_own_keys() {
        let o = Observation::NotApplied { entry: Some(Grant) };
        assert_eq!(decide(Grant, o), Decision::Holds(Grant));
        let o = Observation::ReadBack { entry: Some(Lucky) };
        assert_eq!(decide(Lucky, o), Decision::Holds(Lucky));
        let o = Observation::NotApplied { entry: Some(Debit) };
        assert_eq!(decide(Grant, o), Decision::Corrupt(Debit));
        assert_eq!(decide(Lucky, Observation::Applied), Decision::Holds(Lucky));
    }

    #[test]
    fn foreign_entry_kinds_are_corrupt() {
        for kind in [Grant, Lucky] {
            let o = Observation::NotApplied { entry: Some(kind) };
            assert_eq!(decide(Debit, o), Decision::Corrupt(kind));
            let o = Observation::ReadBack { entry: Some(kind) };
            assert_eq!(decide(Void, o), Decision::Corrupt(kind));
        }
    }

    #[test]
    fn non_owner_never_moves_a_saga() {
        for state in [
            SagaState::Pending,
            SagaState::Debited,
            SagaState::Settled,
            SagaState::Voided,
        ] {
            for entry in [None, Some(Debit), Some(Void)] {
                assert_eq!(
                    decide_recovery(false, state, entry),
                    RecoveryAction::Release
                );
            }
        }
    }

    #[test]
    fn owner_recovery_table() {
        use RecoveryAction::*;
        use SagaState::*;
        let rows = [
            (Pending, None, VoidClaim),
            (Pending, Some(Debit), RollForward),
            (Pending, Some(Void), MarkVoided),
            (Debited, Some(Debit), RollForward),
            (Debited, None, Inconsistent),
            (Debited, Some(Void), Inconsistent),
            (Settled, Some(Debit), Done),
            (Voided, Some(Void), Done),
            (Pending, Some(Grant), Inconsistent),
            (Debited, Some(Lucky), Inconsistent),
        ];
        for (state, entry, want) in rows {
            assert_eq!(
                decide_recovery(true, state, entry),
                want,
                "{state:?} {entry:?}"
            );
        }
    }
}
