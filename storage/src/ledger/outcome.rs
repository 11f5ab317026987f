//! What the ledger answers: saga states, void reasons, wallet entry kinds, stored saga records
//! and the outcome of each call.

use uuid::Uuid;

use super::GiftOrder;
use crate::{Result, StorageError};

/// The result of a top-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrantOutcome {
    /// The user's coin balance after the call.
    pub balance: i64,
    /// False when the key had been used already (nothing was credited this time).
    pub applied: bool,
    /// The coins credited under the key: this call's amount, or the first call's when the key
    /// had been used (a different amount means the key was reused for another grant).
    pub amount: i64,
}

/// Where a gift saga stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SagaState {
    /// Recorded; the sender has not been debited (or the debit is not yet marked).
    Pending,
    /// The sender was debited; the recipients are not yet credited.
    Debited,
    /// Terminal: debited and credited.
    Settled,
    /// Terminal: never debited (insufficient funds, or voided by recovery).
    Voided,
}

impl SagaState {
    /// The state's stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Debited => "DEBITED",
            Self::Settled => "SETTLED",
            Self::Voided => "VOIDED",
        }
    }

    /// Parses a stored name.
    ///
    /// # Errors
    /// `Corrupt` for an unknown name.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "PENDING" => Ok(Self::Pending),
            "DEBITED" => Ok(Self::Debited),
            "SETTLED" => Ok(Self::Settled),
            "VOIDED" => Ok(Self::Voided),
            other => Err(StorageError::corrupt_msg(format!(
                "unknown saga state {other:?}"
            ))),
        }
    }

    /// Whether the saga can no longer move.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Settled | Self::Voided)
    }
}

/// Why a saga was voided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VoidReason {
    /// The sender's coins did not cover the gift.
    InsufficientFunds,
    /// The owner's recovery found no debit and claimed the key.
    Recovered,
    /// The room cancelled the gift before debiting it.
    Cancelled,
}

impl VoidReason {
    /// The reason's stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InsufficientFunds => "NSF",
            Self::Recovered => "RECOVERED",
            Self::Cancelled => "CANCELLED",
        }
    }

    /// Parses a stored name.
    ///
    /// # Errors
    /// `Corrupt` for an unknown name.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "NSF" => Ok(Self::InsufficientFunds),
            "RECOVERED" => Ok(Self::Recovered),
            "CANCELLED" => Ok(Self::Cancelled),
            other => Err(StorageError::corrupt_msg(format!(
                "unknown void reason {other:?}"
            ))),
        }
    }
}

/// The kind of a wallet entry (the row that holds an idempotency key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// Admin top-up.
    Grant,
    /// A gift's debit.
    Debit,
    /// A gift's void claim: the debit can no longer happen.
    Void,
    /// A lucky prize credit.
    Lucky,
    /// One side of a seller's transfer (Scylla: the key is the transfer id in both wallets).
    Transfer,
    /// A payment provider's top-up.
    TopUp,
    /// A refunded top-up.
    Refund,
    /// A guard's purchase (Scylla: the buyer's debit under the purchase id).
    Guard,
}

impl EntryKind {
    /// The kind's stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Grant => "GRANT",
            Self::Debit => "DEBIT",
            Self::Void => "VOID",
            Self::Lucky => "LUCKY",
            Self::Transfer => "TRANSFER",
            Self::TopUp => "TOPUP",
            Self::Refund => "REFUND",
            Self::Guard => "GUARD",
        }
    }

    /// Parses a stored name.
    ///
    /// # Errors
    /// `Corrupt` for an unknown name.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "GRANT" => Ok(Self::Grant),
            "DEBIT" => Ok(Self::Debit),
            "VOID" => Ok(Self::Void),
            "LUCKY" => Ok(Self::Lucky),
            "TRANSFER" => Ok(Self::Transfer),
            "TOPUP" => Ok(Self::TopUp),
            "REFUND" => Ok(Self::Refund),
            "GUARD" => Ok(Self::Guard),
            other => Err(StorageError::corrupt_msg(format!(
                "unknown entry kind {other:?}"
            ))),
        }
    }
}

/// A saga row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SagaRecord {
    /// The order.
    pub order: GiftOrder,
    /// Where it stands.
    pub state: SagaState,
    /// The fence of the owner that last moved or touched it.
    pub fence: u64,
    /// Why it was voided (VOIDED only).
    pub reason: Option<VoidReason>,
    /// The sender's coins after the debit (or at the NSF check); after the prize once settled.
    pub balance_after: Option<i64>,
    /// When it last moved (ms since epoch, wall clock of the writer).
    pub updated_ms: i64,
}

impl SagaRecord {
    /// The client-visible result of a terminal saga (None while it is still moving).
    pub fn result(&self) -> Option<GiftResult> {
        match self.state {
            SagaState::Settled => Some(GiftResult::Settled {
                order_id: self.order.gift_id,
                balance: self.balance_after.unwrap_or(0),
            }),
            SagaState::Voided => Some(match self.reason {
                Some(VoidReason::InsufficientFunds) => GiftResult::InsufficientFunds {
                    balance: self.balance_after.unwrap_or(0),
                },
                _ => GiftResult::Voided,
            }),
            SagaState::Pending | SagaState::Debited => None,
        }
    }
}

/// The first, final result of a gift request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiftResult {
    /// Debited and credited; `balance` is the sender's coins afterwards (prize included).
    Settled {
        /// The gift id.
        order_id: Uuid,
        /// The sender's coins after the gift.
        balance: i64,
    },
    /// The sender's coins did not cover the gift; nothing was debited.
    InsufficientFunds {
        /// The sender's coins at the check.
        balance: i64,
    },
    /// Cancelled before any debit (by the room or by the owner's recovery).
    Voided,
}

/// What `send_gift` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiftOutcome {
    /// Debited and credited just now.
    Settled {
        /// The gift id.
        order_id: Uuid,
        /// The sender's coins after the gift (prize included).
        balance: i64,
    },
    /// The sender's coins did not cover the gift; nothing was debited.
    InsufficientFunds {
        /// The sender's coins at the check.
        balance: i64,
    },
    /// Cancelled before any debit (recovery claimed the key first).
    Voided,
    /// A retry of a request already booked: nothing new was debited.
    Duplicate {
        /// The first request's result.
        first: GiftResult,
    },
}

impl GiftOutcome {
    /// The result, whether first or repeated.
    pub fn result(&self) -> GiftResult {
        match *self {
            Self::Settled { order_id, balance } => GiftResult::Settled { order_id, balance },
            Self::InsufficientFunds { balance } => GiftResult::InsufficientFunds { balance },
            Self::Voided => GiftResult::Voided,
            Self::Duplicate { first } => first,
        }
    }

    pub(super) fn first(result: GiftResult) -> Self {
        match result {
            GiftResult::Settled { order_id, balance } => Self::Settled { order_id, balance },
            GiftResult::InsufficientFunds { balance } => Self::InsufficientFunds { balance },
            GiftResult::Voided => Self::Voided,
        }
    }
}

/// What `begin` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BeginOutcome {
    /// A new PENDING saga was recorded.
    Started,
    /// The gift id was known: a retry. Continue from its state.
    Existing(SagaRecord),
}

/// What `debit` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebitOutcome {
    /// The sender is debited (now or earlier) and the saga is DEBITED or SETTLED.
    Debited {
        /// The sender's coins right after the debit.
        balance: i64,
    },
    /// Not enough coins: the void claim was written and the saga is VOIDED.
    InsufficientFunds {
        /// The sender's coins at the check.
        balance: i64,
    },
    /// The void claim had won the key: the saga is VOIDED and nothing was debited.
    Voided,
    /// No saga with this gift id (call `begin` first).
    Missing,
}

/// What `settle` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleOutcome {
    /// This call moved the saga from DEBITED to SETTLED: the gift's event is its caller's to
    /// publish (or to owe).
    Settled {
        /// The sender's coins after the gift (prize included).
        balance: i64,
    },
    /// The saga was SETTLED already (an earlier call, or one racing this one, moved it): its
    /// event is that caller's, so of two finishers (a retry and the owner's recovery) exactly
    /// one publishes it.
    AlreadySettled {
        /// The sender's coins after the gift (prize included).
        balance: i64,
    },
    /// The saga is not DEBITED; nothing was credited.
    NotDebited(SagaState),
    /// No saga with this gift id.
    Missing,
}

impl SettleOutcome {
    /// The gift's result when the saga is SETTLED, with whether this call settled it (its
    /// event is then the caller's to publish or owe); `None` when it is not settled.
    pub fn settled(self, order_id: Uuid) -> Option<(GiftResult, bool)> {
        match self {
            Self::Settled { balance } => Some((GiftResult::Settled { order_id, balance }, true)),
            Self::AlreadySettled { balance } => {
                Some((GiftResult::Settled { order_id, balance }, false))
            }
            Self::NotDebited(_) | Self::Missing => None,
        }
    }
}

/// What `void` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VoidOutcome {
    /// The void claim holds the key and the saga is VOIDED.
    Voided,
    /// The debit holds the key: the saga is DEBITED or SETTLED and must be rolled forward.
    Debited,
    /// No saga with this gift id.
    Missing,
}

/// What `install_fence` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FenceInstall {
    /// The room had no owner in the ledger: this is its first fence. No saga can exist for it
    /// (every saga step checks the room's fence), so its owner has nothing to recover.
    First,
    /// The fence is now the room's durable high-water mark (or already was, for this owner).
    /// Also the answer when an engine cannot tell whether the room had an owner before.
    Installed,
    /// A fence at least as high is installed: the caller's lease store regressed.
    Stale {
        /// The installed fence.
        current: u64,
    },
}

/// What recovery did to one saga.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryOutcome {
    /// Not the owner: nothing was written; the owner will resolve it.
    Released,
    /// The debit was found and the gift settled.
    Settled,
    /// No debit was found; the void claim won and the saga is VOIDED.
    Voided,
    /// The saga was already terminal.
    AlreadyTerminal(SagaState),
    /// No saga with this gift id.
    Missing,
}
