//! Storage errors with a retry bit, each keeping the engine's own error as its source.

use std::fmt;
use std::sync::Arc;

use protocol::ErrorCode;

/// The underlying error of a [`StorageError`] (a `rusqlite`, `redis`, `scylla` or `serde_json`
/// error...), shared so that the error stays `Clone`.
pub type Source = Arc<dyn std::error::Error + Send + Sync>;

/// What went wrong talking to a store.
///
/// The message of a variant with a source ends with the source's own message: logs and replies
/// print errors with `Display` alone, and must not lose the engine's words. `source()` still
/// gives the typed error to whoever wants to inspect it.
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
    #[error("unavailable: {context}{}", Detail(.source))]
    Unavailable {
        /// What was being done.
        context: String,
        /// The engine's error, if one was raised.
        #[source]
        source: Option<Source>,
    },
    /// Stored data could not be decoded.
    #[error("corrupt: {context}{}", Detail(.source))]
    Corrupt {
        /// What could not be decoded.
        context: String,
        /// The decoder's error, if one was raised.
        #[source]
        source: Option<Source>,
    },
    /// The caller asked for something the store refuses whatever its state: an invalid gift
    /// order, a non-positive amount, a value out of range, an unknown engine. Retrying the same
    /// call fails the same way.
    #[error("invalid: {context}{}", Detail(.source))]
    Invalid {
        /// What was refused, and why.
        context: String,
        /// The validation's error, if one was raised.
        #[source]
        source: Option<Source>,
    },
    /// A request id the store had booked for another request (another room's gift, other
    /// amounts): nothing was done, and the stored request was left alone.
    #[error("request id reused: {context}")]
    Reused {
        /// What the id is already booked for.
        context: String,
    },
    /// Any other backend error.
    #[error("backend: {context}{}", Detail(.source))]
    Backend {
        /// What was being done.
        context: String,
        /// The engine's error, if one was raised.
        #[source]
        source: Option<Source>,
    },
}

/// `": <source>"` after a variant's context, or nothing.
struct Detail<'a>(&'a Option<Source>);

impl fmt::Display for Detail<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(source) => write!(f, ": {source}"),
            None => Ok(()),
        }
    }
}

fn source<E: std::error::Error + Send + Sync + 'static>(e: E) -> Option<Source> {
    Some(Arc::new(e))
}

impl StorageError {
    /// `Unavailable` caused by the engine's error `e`.
    pub fn unavailable<E>(context: impl Into<String>, e: E) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Self::Unavailable {
            context: context.into(),
            source: source(e),
        }
    }

    /// `Unavailable` with no underlying error (a stopped task, a closed channel).
    pub fn unavailable_msg(context: impl Into<String>) -> Self {
        Self::Unavailable {
            context: context.into(),
            source: None,
        }
    }

    /// `Corrupt` caused by the decoder's error `e`.
    pub fn corrupt<E>(context: impl Into<String>, e: E) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Self::Corrupt {
            context: context.into(),
            source: source(e),
        }
    }

    /// `Corrupt` with no underlying error (a stored value the code does not know).
    pub fn corrupt_msg(context: impl Into<String>) -> Self {
        Self::Corrupt {
            context: context.into(),
            source: None,
        }
    }

    /// `Invalid` caused by the validation's error `e`.
    pub fn invalid<E>(context: impl Into<String>, e: E) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Self::Invalid {
            context: context.into(),
            source: source(e),
        }
    }

    /// `Invalid` with no underlying error.
    pub fn invalid_msg(context: impl Into<String>) -> Self {
        Self::Invalid {
            context: context.into(),
            source: None,
        }
    }

    /// `Backend` caused by the engine's error `e`.
    pub fn backend<E>(context: impl Into<String>, e: E) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Self::Backend {
            context: context.into(),
            source: source(e),
        }
    }

    /// `Backend` with no underlying error.
    pub fn backend_msg(context: impl Into<String>) -> Self {
        Self::Backend {
            context: context.into(),
            source: None,
        }
    }

    /// `Reused`: the request id is booked for `context`.
    pub fn reused(context: impl Into<String>) -> Self {
        Self::Reused {
            context: context.into(),
        }
    }

    /// Whether the same operation may succeed if retried.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Conflict(_) | Self::Unavailable { .. })
    }

    /// The code a client sees for this error: a caller's mistake is `BAD_REQUEST`, never
    /// `INTERNAL`.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Conflict(_) | Self::Fenced { .. } | Self::Unavailable { .. } => {
                ErrorCode::Unavailable
            }
            Self::Invalid { .. } => ErrorCode::BadRequest,
            Self::Reused { .. } => ErrorCode::IdempotencyConflict,
            Self::Corrupt { .. } | Self::Backend { .. } => ErrorCode::Internal,
        }
    }
}

/// Result alias for storage calls.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn a_callers_mistake_is_a_bad_request_and_a_stores_fault_is_internal() {
        let invalid = StorageError::invalid_msg("grant amount must be positive");
        assert_eq!(invalid.code(), ErrorCode::BadRequest);
        assert!(!invalid.is_retryable());
        assert_eq!(
            StorageError::corrupt_msg("unknown saga state").code(),
            ErrorCode::Internal
        );
        assert_eq!(
            StorageError::backend_msg("disk full").code(),
            ErrorCode::Internal
        );
        assert_eq!(
            StorageError::unavailable_msg("down").code(),
            ErrorCode::Unavailable
        );
        assert_eq!(
            StorageError::Conflict("lost".into()).code(),
            ErrorCode::Unavailable
        );
        assert_eq!(
            StorageError::Fenced { token: 3 }.code(),
            ErrorCode::Unavailable
        );
    }

    #[test]
    fn the_engines_error_is_kept_as_the_source_and_in_the_message() {
        let json = serde_json::from_str::<u32>("x").unwrap_err();
        let text = json.to_string();
        let e = StorageError::corrupt("room r snapshot", json);
        assert_eq!(e.to_string(), format!("corrupt: room r snapshot: {text}"));
        let source = e.source().map(ToString::to_string);
        assert_eq!(source, Some(text));
        assert!(e.clone().source().is_some(), "a clone keeps its source");
        let bare = StorageError::backend_msg("no source");
        assert_eq!(bare.to_string(), "backend: no source");
        assert!(bare.source().is_none());
    }
}
