//! What a verification reports: every problem found (kind, id, a stable check code, what was
//! found), the records erased under a valid redaction, and what was checked — the words
//! `kura verify`, the agents' `verify` and the console share.

use serde::Serialize;

use crate::{LedgerId, SessionId};

/// What to verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// One ledger and all its ancestors.
    Ledger(LedgerId),
    /// Every ledger of a session, their ancestors, and the session's ref log.
    Session(SessionId),
    /// Everything in the database.
    All,
}

/// One thing that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// `record`, `ledger`, `session`, `schema` or `seal_log`.
    pub kind: &'static str,
    /// The id of the record, ledger or session at fault.
    pub id: String,
    /// Which check failed, a stable code such as `record_hash` or `merkle_root`.
    pub check: &'static str,
    /// What exactly was found.
    pub detail: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}: {}",
            self.kind, self.id, self.check, self.detail
        )
    }
}

/// The outcome of a verification.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Distinct records whose hashes were recomputed.
    pub records_checked: u64,
    /// Ledgers checked.
    pub ledgers_checked: u64,
    /// Sessions whose ref log and head were checked.
    pub sessions_checked: u64,
    /// Every problem found; empty means verified.
    pub problems: Vec<Problem>,
    /// Records whose content a trusted person erased under a valid signed redaction: their
    /// leaves still verify, their content is gone.
    pub redacted: Vec<RedactedRecord>,
    /// Records an earlier release left in no ledger (listed when the database was upgraded):
    /// hashes checked, not a problem, never found nor packed.
    pub legacy_loose: u64,
}

/// A record verify found redacted, and by whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RedactedRecord {
    /// The record.
    pub record_id: String,
    /// What its content hashed to.
    pub record_hash: String,
    /// Who (`user:<name>`).
    pub by: String,
    /// When.
    pub redacted_at: String,
    /// Why.
    pub reason: String,
    /// The `sys.redaction` record.
    pub redaction_record: String,
}

impl Report {
    /// True when nothing is wrong.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}
