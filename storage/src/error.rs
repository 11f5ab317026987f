//! Storage errors with a retry bit.

use protocol::ErrorCode;

/// What went wrong talking to a store.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StorageError {
    /// A conditional write lost: another owner (higher fencing token) or another writer won.
    /// Ownership conflicts are retried by the current owner, never turned into a terminal state.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A write carried a fencing token that is not the live lease's.
    #[error("fenced: write with token {token} rejected")]
    Fenced {
        /// The token the rejected write carried.
        token: u64,
    },
    /// The backend could not be reached or timed out; the outcome of a write may be unknown.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Stored data could not be decoded.
    #[error("corrupt: {0}")]
    Corrupt(String),
    /// Any other backend error.
    #[error("backend: {0}")]
    Backend(String),
}

impl StorageError {
    /// Whether the same operation may succeed if retried.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Conflict(_) | Self::Unavailable(_))
    }

    /// The code a client sees for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Conflict(_) | Self::Fenced { .. } | Self::Unavailable(_) => {
                ErrorCode::Unavailable
            }
            Self::Corrupt(_) | Self::Backend(_) => ErrorCode::Internal,
        }
    }
}

/// Result alias for storage calls.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;
