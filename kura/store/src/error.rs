//! The store's error type: every way a store operation can refuse or fail, as kinds a caller
//! can `match` — misuse (`Invalid`, `NotFound`, ...) kept apart from corruption (`Corrupt`)
//! and from the machine (`Io`, `Sqlite`).

use std::path::PathBuf;

use proto::record::RecordError;

/// Why a conflicting write was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConflictKind {
    /// The approval request was already decided.
    AlreadyDecided,
    /// This approver already voted on this request (or the same decision was replayed).
    DuplicateVote,
}

impl std::fmt::Display for ConflictKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConflictKind::AlreadyDecided => "already decided",
            ConflictKind::DuplicateVote => "duplicate or replayed decision",
        })
    }
}

/// Why a store operation did not happen. Every refusal leaves the store unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// A worker whose claim was taken over tried to write to the turn.
    #[error(
        "fenced: turn {turn_id} is at epoch {current_epoch}; this worker holds epoch {held_epoch}"
    )]
    Fenced {
        /// The turn.
        turn_id: String,
        /// The epoch the writer holds.
        held_epoch: i64,
        /// The turn's epoch now (or -1 when it is no longer running).
        current_epoch: i64,
    },
    /// A write that conflicts with what is already recorded.
    #[error("conflict on {id}: {kind}")]
    Conflict {
        /// What kind of conflict.
        kind: ConflictKind,
        /// The row it concerns.
        id: String,
    },
    /// Stored data that fails a check: an unknown stored state, a malformed stored id, a
    /// row that breaks an invariant. Not the caller's fault.
    #[error("corrupt {what} {id}: {detail}")]
    Corrupt {
        /// What kind of row.
        what: &'static str,
        /// Which one.
        id: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A file outside SQLite (backup, export target) could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The record itself was refused (type, content, author).
    #[error(transparent)]
    Record(#[from] RecordError),
    /// Other invalid caller input, explained.
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

impl StoreError {
    /// True when the data in the store is what is wrong (exit 1 territory for a CLI), as
    /// opposed to the caller's input or the machine.
    pub fn is_corruption(&self) -> bool {
        matches!(self, StoreError::Corrupt { .. })
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        // A stored state no enum knows is corruption, not a database failure.
        if let rusqlite::Error::FromSqlConversionFailure(column, _, source) = &e
            && let Some(unknown) = source.downcast_ref::<proto::UnknownState>()
        {
            return StoreError::Corrupt {
                what: unknown.kind,
                id: format!("column {column}"),
                detail: format!("unknown stored value {:?}", unknown.text),
            };
        }
        StoreError::Sqlite(e)
    }
}

/// Shorthand.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl From<kura_tlog::TlogError> for StoreError {
    fn from(e: kura_tlog::TlogError) -> Self {
        use kura_tlog::TlogError;
        match e {
            TlogError::Invalid(why) => StoreError::Invalid(why),
            TlogError::Corrupt { what, detail } => StoreError::Corrupt {
                what,
                id: String::new(),
                detail,
            },
            TlogError::Io { path, source } => StoreError::Io { path, source },
            TlogError::Storage(e) => match e.downcast::<rusqlite::Error>() {
                Ok(e) => StoreError::from(*e),
                Err(e) => StoreError::Invalid(e.to_string()),
            },
            other => StoreError::Invalid(other.to_string()),
        }
    }
}

impl From<kura_policy::PolicyError> for StoreError {
    fn from(e: kura_policy::PolicyError) -> Self {
        StoreError::Invalid(e.to_string())
    }
}
