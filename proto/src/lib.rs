//! Kura's shared vocabulary: records, ledgers, canonical hashes, Merkle proofs and NATS doorbells.
//!
//! This crate is deliberately lean — serde and hashing only. No async runtime, no NATS
//! client and no SQLite live here, so every process (and an offline auditor) can use it.

pub mod agent;
pub mod bundle;
pub mod canonical;
pub mod consumers;
pub mod content;
pub mod doorbell;
pub mod fleet;
pub mod ids;
pub mod ledger;
pub mod merkle;
pub mod plan;
pub mod prompt;
pub mod proof;
pub mod record;
pub mod states;
pub mod subjects;
pub mod text;
pub mod verify;
pub mod workspace;
pub mod writ;

pub use canonical::{canonical_json, record_hash, record_hash_from_canonical, sha256_hex};
pub use ids::{
    CallId, LedgerId, PlanId, RecordId, RequestId, RoleName, SessionId, TurnId, WritId, new_id,
};
pub use ledger::{Ledger, LedgerHeader, LedgerState, ParentRef, ledger_hash};
pub use proof::InclusionProof;
pub use record::{
    CanonicalParts, Content, NewRecord, OwnedColumns, Record, RecordColumns, RecordError,
    RecordType, TextContent, ToolCallContent, ToolResultContent, ToolStatus,
};
pub use states::{
    ApprovalState, Effect, Outcome, SessionStatus, StepState, TurnState, UnknownState, Verdict,
    Vote,
};
