//! What can go wrong with the object store: misuse and the disk apart from corruption.

use proto::workspace::ObjectId;

/// The object store's result.
pub type Result<T> = std::result::Result<T, ObjectsError>;

/// Why an object store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObjectsError {
    /// The disk refused (names what was being done).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// An object's bytes do not hash to its id: tampered with or damaged on disk.
    #[error(
        "object {id} in the object store does not hash to its id ({why}); it was altered on disk"
    )]
    Corrupt {
        /// The object.
        id: ObjectId,
        /// What was found instead.
        why: String,
    },
    /// The store does not hold an object a tree names.
    #[error("object {id} is not in the object store")]
    Missing {
        /// The object.
        id: ObjectId,
    },
    /// The object's bytes were erased by redaction (its id is kept).
    #[error("object {id} was redacted: {reason}")]
    Redacted {
        /// The object.
        id: ObjectId,
        /// Why, as the redaction said.
        reason: String,
    },
    /// A bound was reached (depth, entries, the store's size).
    #[error("{0}")]
    Bound(String),
    /// The workspace holds something the store will not take or touch (says what).
    #[error("{0}")]
    Refused(String),
}

/// An I/O error, saying what was being done.
pub(crate) fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> ObjectsError {
    move |source| ObjectsError::Io {
        what: what.to_string(),
        source,
    }
}

/// A rustix error, saying what was being done.
pub(crate) fn sys(what: impl std::fmt::Display) -> impl FnOnce(rustix::io::Errno) -> ObjectsError {
    move |e| ObjectsError::Io {
        what: what.to_string(),
        source: e.into(),
    }
}
