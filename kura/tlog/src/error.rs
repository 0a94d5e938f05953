//! The log's error type: every way a log operation can refuse or fail, as kinds a caller can
//! `match` — misuse (`Invalid`) kept apart from corruption (`Corrupt`) and from the machine
//! (`Io`, `Storage`).

use std::path::PathBuf;

/// Why a log operation did not happen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlogError {
    /// Invalid input, explained: a key, note, checkpoint or proof that does not check, or a
    /// size the log does not have.
    #[error("{0}")]
    Invalid(String),
    /// Stored log data that fails a check (a leaf index out of range, a missing or malformed
    /// stored hash). Not the caller's fault.
    #[error("corrupt {what}: {detail}")]
    Corrupt {
        /// What kind of data.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// A file (key, checkpoint, witness directory) could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The storage behind the log's storage (`LogStorage`) failed while reading or writing the
    /// log's rows (the store's database error, boxed).
    #[error("database error: {0}")]
    Storage(Box<dyn std::error::Error + Send + Sync>),
}

impl TlogError {
    /// True when stored data is what is wrong, as opposed to the caller's input or the machine.
    pub fn is_corruption(&self) -> bool {
        matches!(self, TlogError::Corrupt { .. })
    }
}

/// Shorthand.
pub type Result<T, E = TlogError> = std::result::Result<T, E>;

pub(crate) fn invalid(message: impl Into<String>) -> TlogError {
    TlogError::Invalid(message.into())
}
