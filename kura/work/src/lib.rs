//! Work state shared by the daemons, kept in the store's database: session requests, turns
//! with leases and fencing epochs, approvals, consumer cursors that advance in the same
//! transaction as the work, the published policy, and the daemons' heartbeats and sweeps
//! ([`ops`]). The store owns the schema (one database, one migration list); this crate owns
//! the SQL over the work tables. Writes are the operations of [`WorkTx`] on the store's
//! [`kura_store::Tx`]; reads take any [`kura_store::Db`]. The policy over these tables (what
//! a context holds, when a session ends) lives in the daemons.

pub mod agents;
pub mod approvals;
mod cursor;
pub mod gate;
pub mod ops;
pub mod plans;
pub mod policy;
mod requests;
mod turn_kind;
mod turns;
mod tx;
pub mod verdicts;
pub mod writs;

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use kura_store::Result;
use kura_tlog::sealer::Sealer;
use proto::record::{NewRecord, Record};
use proto::{ApprovalState, Effect, Vote};
use proto::{CallId, LedgerId, RecordId, RequestId, SessionId, TurnId};
use serde_json::{Map, Value};

pub use approvals::Approval;
pub use cursor::{cursor, set_cursor};
/// The policy language and writs this crate's requests are ruled by ([`gate`]).
pub use kura_policy;
pub use requests::{
    Ask, Queued, RecordedTurn, Request, RequestStatus, last_deliverable, next_request_after,
    recorded_turns, request_instruction, request_replays, request_status, request_submitter,
    submit, submit_as, submit_replay, turn_submitter,
};
pub use turn_kind::{
    LedgerUsage, TurnKind, last_plan, ledger_usage, role_at, role_of, role_of_output,
};
pub use turns::{
    Claim, Replay, Turn, TurnState, claim_next, complete_turn, fenced, next_done_turn_after,
    next_turn_seq, release, release_failed, renew, turn, turn_of_output,
};

/// Milliseconds since the Unix epoch, the clock leases are measured on.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The work operations a daemon runs inside one store transaction ([`kura_store::Store::write`]
/// or [`fenced`]): they commit together with the records written beside them.
pub trait WorkTx {
    /// Marks a queued request accepted into `session_id`.
    fn mark_accepted(&self, request_seq: i64, session_id: SessionId) -> Result<()>;

    /// Queues a turn of a session on its sealed context ledger; returns the turn id.
    fn insert_turn(
        &self,
        session_id: SessionId,
        seq: i64,
        request_seq: i64,
        context_ledger_id: LedgerId,
    ) -> Result<TurnId>;

    /// Seals a claimed turn's output and marks it done; returns the output ledger.
    fn complete_turn(&self, claim: &Claim, sealer: Option<&Sealer>) -> Result<LedgerId>;

    /// Appends to a turn's output ledger.
    fn append_to_turn(&self, turn_id: TurnId, rec: &NewRecord) -> Result<Record>;

    /// Records a tool call's approval request (and its record in the turn).
    #[allow(clippy::too_many_arguments)]
    fn request_approval(
        &self,
        claim: &Claim,
        call_id: &CallId,
        tool_name: &str,
        arguments: &Map<String, Value>,
        effect: Effect,
        author: &str,
        metadata: BTreeMap<String, String>,
    ) -> Result<Approval>;

    /// Parks a claimed turn until `request_id` is decided; false if it was decided already
    /// (the turn is claimable again instead).
    fn park_turn(&self, claim: &Claim, request_id: RequestId) -> Result<bool>;

    /// Notes that the approved call started under `epoch`.
    fn mark_started(&self, request_id: RequestId, epoch: i64) -> Result<()>;

    /// Puts a request to the approvers under `rule`, with `required` votes by `deadline_ms`.
    fn mark_asked(
        &self,
        request_id: RequestId,
        rule: &str,
        required: i64,
        deadline_ms: i64,
    ) -> Result<()>;

    /// Records an approver's vote; returns its record and the votes so far.
    fn record_vote(
        &self,
        a: &Approval,
        approver: (&str, &str),
        decision: Vote,
        record: &NewRecord,
        signature: &str,
    ) -> Result<(Record, i64)>;

    /// Raises the votes a request needs.
    fn raise_requirement(&self, request_id: RequestId, rule: &str, required: i64) -> Result<()>;

    /// Keeps the arguments an approver edited.
    fn set_edited_arguments(&self, request_id: RequestId, canonical: &str) -> Result<()>;

    /// Decides a request by policy; returns the turn it woke, if any.
    fn decide_by_policy(
        &self,
        a: &Approval,
        allow: bool,
        rule: &str,
        policy_hash: &str,
        metadata: BTreeMap<String, String>,
    ) -> Result<Option<TurnId>>;

    /// Closes a request as `state`; returns the turn it woke, if any.
    fn finalize(
        &self,
        a: &Approval,
        state: ApprovalState,
        rule: &str,
        decision_record: RecordId,
    ) -> Result<Option<TurnId>>;

    /// Counts `n` refused decisions by `approver`.
    fn add_refusals(&self, request_id: &str, approver: &str, n: i64) -> Result<()>;

    /// Records a refused decision message; true if it was recorded.
    fn reject(
        &self,
        author: &str,
        request: Option<&Approval>,
        approver: Option<&str>,
        reason: &str,
        message: &str,
    ) -> Result<bool>;

    /// Publishes a policy; returns its hash.
    fn publish_policy(&self, policy: &kura_policy::Policy) -> Result<String>;
}

#[cfg(test)]
mod gate_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod writ_tests;
