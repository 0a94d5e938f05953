//! The store's write transaction as callers see it: [`Tx`], handed out by
//! [`Store::write`](crate::Store::write), with the named operations a daemon may run inside
//! one transaction — the SQL and the `rusqlite` types stay inside the store.

use std::collections::BTreeMap;

use proto::record::{NewRecord, Record};
use proto::{ApprovalState, Effect, Ledger, SessionStatus, Vote};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::error::Result;
use crate::memory::{Item, Remembered};
use crate::store::{Appended, Session};
use crate::work::Claim;
use crate::work::approvals::Approval;
use kura_tlog::sealer::Sealer;

/// What the store's reads run on: a [`crate::Store`] or a [`Tx`] (sealed; the connection
/// inside stays the store's).
pub trait Db: sealed::Sealed {}

pub(crate) mod sealed {
    /// The connection under a [`super::Db`].
    pub trait Sealed {
        /// The SQLite connection to run statements on.
        fn db(&self) -> &rusqlite::Connection;
    }
}

impl sealed::Sealed for rusqlite::Connection {
    fn db(&self) -> &rusqlite::Connection {
        self
    }
}
impl Db for rusqlite::Connection {}
impl sealed::Sealed for rusqlite::Transaction<'_> {
    fn db(&self) -> &rusqlite::Connection {
        self
    }
}
impl Db for rusqlite::Transaction<'_> {}
impl sealed::Sealed for crate::Store {
    fn db(&self) -> &rusqlite::Connection {
        self.conn()
    }
}
impl Db for crate::Store {}
impl sealed::Sealed for Tx<'_> {
    fn db(&self) -> &rusqlite::Connection {
        self.0
    }
}
impl Db for Tx<'_> {}

/// The connection under `db`, for the store's own functions.
pub(crate) fn conn(db: &(impl Db + ?Sized)) -> &rusqlite::Connection {
    sealed::Sealed::db(db)
}

/// One `BEGIN IMMEDIATE` write transaction of [`crate::Store::write`]: everything done
/// through it commits together or not at all.
pub struct Tx<'a>(pub(crate) &'a rusqlite::Transaction<'a>);

impl std::fmt::Debug for Tx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tx")
    }
}

impl Tx<'_> {
    /// Reads one record.
    pub fn read_record(&self, id: Uuid) -> Result<Record> {
        crate::store::read_record_in(self.0, id)
    }

    /// Appends a new record to an open ledger.
    pub fn append(&self, ledger_id: Uuid, new: &NewRecord) -> Result<Appended> {
        crate::store::append_in(self.0, ledger_id, new)
    }

    /// Appends a record already in the store to an open ledger; returns its position.
    pub fn append_existing(&self, ledger_id: Uuid, record_id: Uuid) -> Result<u64> {
        crate::store::append_existing_in(self.0, ledger_id, record_id)
    }

    /// Opens a ledger in a session on top of sealed `parents`.
    pub fn open_ledger(&self, session_id: Uuid, label: &str, parents: &[Uuid]) -> Result<Ledger> {
        crate::store::open_ledger_in(self.0, session_id, label, parents)
    }

    /// Seals a ledger (a leaf in the seal log, signed by `sealer` if given); true if it was
    /// sealed now rather than already.
    pub fn seal(&self, ledger_id: Uuid, sealer: Option<&Sealer>) -> Result<(Ledger, bool)> {
        crate::store::seal_in(self.0, ledger_id, sealer)
    }

    /// Creates a session.
    pub fn create_session(&self, label: &str) -> Result<Session> {
        crate::store::create_session_in(self.0, label)
    }

    /// Reads a session.
    pub fn read_session(&self, id: Uuid) -> Result<Session> {
        crate::store::read_session_in(self.0, id)
    }

    /// Sets a session's status.
    pub fn set_session_status(&self, id: Uuid, status: SessionStatus) -> Result<()> {
        crate::store::set_session_status_in(self.0, id, status)
    }

    /// Marks a queued request accepted into `session_id`.
    pub fn mark_accepted(&self, request_seq: i64, session_id: Uuid) -> Result<()> {
        crate::work::mark_accepted_in(self.0, request_seq, session_id)
    }

    /// Queues a turn of a session on its sealed context ledger; returns the turn id.
    pub fn insert_turn(
        &self,
        session_id: Uuid,
        seq: i64,
        request_seq: i64,
        context_ledger_id: Uuid,
    ) -> Result<Uuid> {
        crate::work::insert_turn_in(self.0, session_id, seq, request_seq, context_ledger_id)
    }

    /// Seals a claimed turn's output and marks it done; returns the output ledger.
    pub fn complete_turn(&self, claim: &Claim, sealer: Option<&Sealer>) -> Result<Uuid> {
        crate::work::complete_turn_in(self.0, claim, sealer)
    }

    /// Appends to a turn's output ledger.
    pub fn append_to_turn(&self, turn_id: Uuid, rec: &NewRecord) -> Result<Record> {
        crate::work::approvals::append_to_turn_in(self.0, turn_id, rec)
    }

    /// Records a tool call's approval request (and its record in the turn).
    #[allow(clippy::too_many_arguments)]
    pub fn request_approval(
        &self,
        claim: &Claim,
        call_id: &str,
        tool_name: &str,
        arguments: &Map<String, Value>,
        effect: Effect,
        author: &str,
        metadata: BTreeMap<String, String>,
    ) -> Result<Approval> {
        crate::work::approvals::request_approval_in(
            self.0, claim, call_id, tool_name, arguments, effect, author, metadata,
        )
    }

    /// Parks a claimed turn until `request_id` is decided; false if it was decided already
    /// (the turn is claimable again instead).
    pub fn park_turn(&self, claim: &Claim, request_id: Uuid) -> Result<bool> {
        crate::work::approvals::park_turn_in(self.0, claim, request_id)
    }

    /// Notes that the approved call started under `epoch`.
    pub fn mark_started(&self, request_id: Uuid, epoch: i64) -> Result<()> {
        crate::work::approvals::mark_started_in(self.0, request_id, epoch)
    }

    /// Puts a request to the approvers under `rule`, with `required` votes by `deadline_ms`.
    pub fn mark_asked(
        &self,
        request_id: Uuid,
        rule: &str,
        required: i64,
        deadline_ms: i64,
    ) -> Result<()> {
        crate::work::approvals::mark_asked_in(self.0, request_id, rule, required, deadline_ms)
    }

    /// Records an approver's vote; returns its record and the votes so far.
    pub fn record_vote(
        &self,
        a: &Approval,
        approver: (&str, &str),
        decision: Vote,
        record: &NewRecord,
        signature: &str,
    ) -> Result<(Record, i64)> {
        crate::work::approvals::record_vote_in(self.0, a, approver, decision, record, signature)
    }

    /// Raises the votes a request needs.
    pub fn raise_requirement(&self, request_id: Uuid, rule: &str, required: i64) -> Result<()> {
        crate::work::approvals::raise_requirement_in(self.0, request_id, rule, required)
    }

    /// Keeps the arguments an approver edited.
    pub fn set_edited_arguments(&self, request_id: Uuid, canonical: &str) -> Result<()> {
        crate::work::approvals::set_edited_arguments_in(self.0, request_id, canonical)
    }

    /// Decides a request by policy; returns the turn it woke, if any.
    pub fn decide_by_policy(
        &self,
        a: &Approval,
        allow: bool,
        rule: &str,
        policy_hash: &str,
        metadata: BTreeMap<String, String>,
    ) -> Result<Option<Uuid>> {
        crate::work::approvals::decide_by_policy_in(self.0, a, allow, rule, policy_hash, metadata)
    }

    /// Closes a request as `state`; returns the turn it woke, if any.
    pub fn finalize(
        &self,
        a: &Approval,
        state: ApprovalState,
        rule: &str,
        decision_record: Uuid,
    ) -> Result<Option<Uuid>> {
        crate::work::approvals::finalize_in(self.0, a, state, rule, decision_record)
    }

    /// Counts `n` refused decisions by `approver`.
    pub fn add_refusals(&self, request_id: &str, approver: &str, n: i64) -> Result<()> {
        crate::work::approvals::add_refusals_in(self.0, request_id, approver, n)
    }

    /// Records a refused decision message; true if it was recorded.
    pub fn reject(
        &self,
        author: &str,
        request: Option<&Approval>,
        approver: Option<&str>,
        reason: &str,
        message: &str,
    ) -> Result<bool> {
        crate::work::approvals::reject_in(self.0, author, request, approver, reason, message)
    }

    /// Publishes a policy; returns its hash.
    pub fn publish_policy(&self, policy: &kura_policy::Policy) -> Result<String> {
        crate::work::policy::publish_in(self.0, policy)
    }

    /// Remembers `items` taken from `source`.
    pub fn remember(
        &self,
        author: &str,
        source: &Record,
        session_id: Uuid,
        items: &[Item],
    ) -> Result<Vec<Remembered>> {
        crate::memory::remember_in(self.0, author, source, session_id, items)
    }

    /// Stores a record's embedding.
    pub fn store_vector(&self, record_id: Uuid, model: &str, vector: &[f32]) -> Result<()> {
        crate::memory::store_vector_in(self.0, record_id, model, vector)
    }
}
