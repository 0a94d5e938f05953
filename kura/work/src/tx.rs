//! [`WorkTx`](crate::WorkTx) on the store's [`Tx`]: each operation runs its module's SQL
//! through the transaction's connection, so it commits with whatever else the caller wrote.

use std::collections::BTreeMap;

use kura_store::{Result, Tx};
use kura_tlog::sealer::Sealer;
use proto::record::{NewRecord, Record};
use proto::{ApprovalState, Effect, Vote};
use proto::{CallId, LedgerId, RecordId, RequestId, SessionId, TurnId};
use serde_json::{Map, Value};

use crate::{Approval, Claim, WorkTx, approvals, policy, requests, turns};

impl WorkTx for Tx<'_> {
    fn mark_accepted(&self, request_seq: i64, session_id: SessionId) -> Result<()> {
        requests::mark_accepted(self, request_seq, session_id)
    }

    fn insert_turn(
        &self,
        session_id: SessionId,
        seq: i64,
        request_seq: i64,
        context_ledger_id: LedgerId,
    ) -> Result<TurnId> {
        turns::insert_turn(self, session_id, seq, request_seq, context_ledger_id)
    }

    fn complete_turn(&self, claim: &Claim, sealer: Option<&Sealer>) -> Result<LedgerId> {
        turns::complete_turn_in(self, claim, sealer)
    }

    fn append_to_turn(&self, turn_id: TurnId, rec: &NewRecord) -> Result<Record> {
        approvals::append_to_turn(self, turn_id, rec)
    }

    fn request_approval(
        &self,
        claim: &Claim,
        call_id: &CallId,
        tool_name: &str,
        arguments: &Map<String, Value>,
        effect: Effect,
        author: &str,
        metadata: BTreeMap<String, String>,
    ) -> Result<Approval> {
        approvals::request_approval(
            self, claim, call_id, tool_name, arguments, effect, author, metadata,
        )
    }

    fn park_turn(&self, claim: &Claim, request_id: RequestId) -> Result<bool> {
        approvals::park_turn(self, claim, request_id)
    }

    fn mark_started(&self, request_id: RequestId, epoch: i64) -> Result<()> {
        approvals::mark_started(self, request_id, epoch)
    }

    fn mark_asked(
        &self,
        request_id: RequestId,
        rule: &str,
        required: i64,
        deadline_ms: i64,
    ) -> Result<()> {
        approvals::mark_asked(self, request_id, rule, required, deadline_ms)
    }

    fn record_vote(
        &self,
        a: &Approval,
        approver: (&str, &str),
        decision: Vote,
        record: &NewRecord,
        signature: &str,
    ) -> Result<(Record, i64)> {
        approvals::record_vote(self, a, approver, decision, record, signature)
    }

    fn raise_requirement(&self, request_id: RequestId, rule: &str, required: i64) -> Result<()> {
        approvals::raise_requirement(self, request_id, rule, required)
    }

    fn set_edited_arguments(&self, request_id: RequestId, canonical: &str) -> Result<()> {
        approvals::set_edited_arguments(self, request_id, canonical)
    }

    fn decide_by_policy(
        &self,
        a: &Approval,
        allow: bool,
        rule: &str,
        policy_hash: &str,
        metadata: BTreeMap<String, String>,
    ) -> Result<Option<TurnId>> {
        approvals::decide_by_policy(self, a, allow, rule, policy_hash, metadata)
    }

    fn finalize(
        &self,
        a: &Approval,
        state: ApprovalState,
        rule: &str,
        decision_record: RecordId,
    ) -> Result<Option<TurnId>> {
        approvals::finalize(self, a, state, rule, decision_record)
    }

    fn add_refusals(&self, request_id: &str, approver: &str, n: i64) -> Result<()> {
        approvals::add_refusals(self, request_id, approver, n)
    }

    fn reject(
        &self,
        author: &str,
        request: Option<&Approval>,
        approver: Option<&str>,
        reason: &str,
        message: &str,
    ) -> Result<bool> {
        approvals::reject(self, author, request, approver, reason, message)
    }

    fn publish_policy(&self, policy: &kura_policy::Policy) -> Result<String> {
        policy::publish(self, policy)
    }
}
