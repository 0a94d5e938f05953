//! The store's error type: every way a store operation can refuse or fail.

use std::path::PathBuf;

use proto::record::RecordError;

/// Why a store operation did not happen. Every refusal leaves the store unchanged.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database file does not exist.
    #[error("no Kura database at {} (create one with `kura init`)", .0.display())]
    NoDatabase(PathBuf),
    /// The file exists but is not (a usable) Kura database.
    #[error("{} is not a Kura database: {reason}", path.display())]
    NotKura {
        /// The file.
        path: PathBuf,
        /// What gave it away.
        reason: String,
    },
    /// An id, record, ledger or session that is not in the store.
    #[error("{kind} {id} not found")]
    NotFound {
        /// `record`, `ledger`, `session`, ...
        kind: &'static str,
        /// The id as given.
        id: String,
    },
    /// The text given as an id is not a UUID.
    #[error("invalid id {0:?}: expected a UUID such as 0193a5c2-7e1f-7c3a-9d2b-4f6e8a1b2c3d")]
    InvalidId(String),
    /// Appending to a sealed ledger.
    #[error("ledger {0} is sealed: records can only be appended to open ledgers")]
    Sealed(String),
    /// A parent ledger is still open, so there is no hash to chain to.
    #[error("parent ledger {0} is still open: only sealed ledgers can be parents")]
    ParentOpen(String),
    /// The record itself was refused (type, content, author).
    #[error(transparent)]
    Record(#[from] RecordError),
    /// Other invalid input, explained.
    #[error("{0}")]
    Invalid(String),
    /// SQLite failed (I/O, full disk, lock timeout, ...). Not marked as the error's source:
    /// its message already says everything, and a cause chain would repeat it.
    #[error("database error: {0}")]
    Sqlite(rusqlite::Error),
    /// The schema could not be brought up to date.
    #[error("schema migration failed: {0}")]
    Migration(#[from] rusqlite_migration::Error),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(e)
    }
}

/// Shorthand.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
