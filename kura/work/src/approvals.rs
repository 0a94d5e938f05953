//! Approval work state: hashi files a request for each tool call, aegis decides it (policy
//! or people), and a turn that must wait for people is parked (`waiting`) without holding a
//! worker, then made claimable again when the decision lands.

use kura_store::store::parse_id;
use kura_store::{Cached, ConflictKind, Db, Result, StoreError, Tx, time};
use proto::content::{ApprovalRequestContent, PolicyDecisionContent, RejectionContent};
use proto::record::{NewRecord, RecordType};
use proto::{CallId, LedgerId, RecordId, RequestId, SessionId, TurnId};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::{Map, Value};

pub use proto::{ApprovalState, Effect, Outcome, Vote};

use super::turns::Claim;

/// An approval row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Approval {
    /// Queue position (aegis scans in this order).
    pub approval_seq: i64,
    /// The `approval.request` record's id.
    pub request_id: RequestId,
    /// That record's content hash: what an approver's signature covers.
    pub request_hash: String,
    /// The waiting turn.
    pub turn_id: TurnId,
    /// Its session.
    pub session_id: SessionId,
    /// The tool call's id.
    pub call_id: CallId,
    /// The tool.
    pub tool_name: String,
    /// Its effect class.
    pub effect: Effect,
    /// Where the request is.
    pub state: ApprovalState,
    /// The rule that decided (or asked).
    pub rule: Option<String>,
    /// Approvals needed.
    pub required: i64,
    /// When an unanswered ask expires (unix ms).
    pub deadline_ms: Option<i64>,
    /// The epoch of the worker that started running the approved call, if one did.
    pub started_epoch: Option<i64>,
    /// When it was filed.
    pub created_at: String,
    /// Canonical JSON of the arguments people approved instead of the requested ones.
    pub edited_arguments: Option<String>,
}

const COLUMNS: &str = "approval_seq, request_id, request_hash, turn_id, session_id, call_id, tool_name, \
                       effect, state, rule, required, deadline_ms, started_epoch, created_at, \
                       edited_arguments";

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Approval>> {
    let ids: (String, String, String) = (r.get(1)?, r.get(3)?, r.get(4)?);
    let a = (|| -> Result<Approval> {
        Ok(Approval {
            approval_seq: r.get(0)?,
            request_id: parse_id(&ids.0)?,
            request_hash: r.get(2)?,
            turn_id: parse_id(&ids.1)?,
            session_id: parse_id(&ids.2)?,
            call_id: r.get(5)?,
            tool_name: r.get(6)?,
            effect: r.get(7)?,
            state: r.get(8)?,
            rule: r.get(9)?,
            required: r.get(10)?,
            deadline_ms: r.get(11)?,
            started_epoch: r.get(12)?,
            created_at: r.get(13)?,
            edited_arguments: r.get(14)?,
        })
    })();
    Ok(a)
}

fn one(conn: &Connection, filter: &str, arg: &str) -> Result<Option<Approval>> {
    let sql = format!("SELECT {COLUMNS} FROM approvals WHERE {filter}");
    conn.prepare_cached(&sql)?
        .query_row([arg], from_row)
        .optional()?
        .transpose()
}

/// The record that decided request `request_id`, once it is decided.
pub fn decision_record(conn: &impl Db, request_id: RequestId) -> Result<Option<RecordId>> {
    let id: Option<Option<String>> = conn
        .sql()
        .prepare_cached("SELECT decision_record_id FROM approvals WHERE request_id = ?1")?
        .query_row([request_id.to_string()], |r| r.get(0))
        .optional()?;
    id.flatten().as_deref().map(parse_id).transpose()
}

/// Reads an approval by request id.
pub fn approval(conn: &impl Db, request_id: RequestId) -> Result<Option<Approval>> {
    let conn = conn.sql();
    one(conn, "request_id = ?1", &request_id.to_string())
}

/// The approval filed for a tool call of `turn_id`, if any. A call id is unique within a
/// turn, not across turns: a replay reuses the recorded turn's call ids.
pub fn approval_for_call(
    conn: &impl Db,
    turn_id: TurnId,
    call_id: &CallId,
) -> Result<Option<Approval>> {
    let conn = conn.sql();
    let sql = format!("SELECT {COLUMNS} FROM approvals WHERE turn_id = ?1 AND call_id = ?2");
    conn.prepare_cached(&sql)?
        .query_row(params![turn_id.to_string(), call_id], from_row)
        .optional()?
        .transpose()
}

/// Files a request inside a fenced transaction: an `approval.request` record (the call, its
/// arguments, effect, turn and session) in the turn's output ledger, and a `pending` row.
#[allow(clippy::too_many_arguments)]
pub(crate) fn request_approval(
    tx: &Tx<'_>,
    claim: &Claim,
    call_id: &CallId,
    tool_name: &str,
    arguments: &Map<String, Value>,
    effect: Effect,
    author: &str,
    metadata: std::collections::BTreeMap<String, String>,
) -> Result<Approval> {
    let content = ApprovalRequestContent {
        call_id: call_id.clone(),
        tool_name: tool_name.to_owned(),
        arguments: arguments.clone(),
        effect,
        turn_id: claim.turn_id,
        session_id: claim.session_id,
        // A replay's side effect asked about again: aegis sends it to people whatever the
        // policy, and the person sees which recorded turn it repeats.
        rerun_of: claim
            .replay
            .filter(|r| r.rerun && effect != Effect::Read)
            .map(|r| r.of),
    };
    let rec = NewRecord {
        record_type: RecordType::ApprovalRequest,
        content: content.to_value(),
        author_id: author.to_owned(),
        metadata,
    };
    let a = tx.append(claim.output_ledger_id, &rec)?;
    tx.sql().execute_cached(
"INSERT INTO approvals (request_id, request_hash, turn_id, session_id, call_id, tool_name, effect, state, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            a.record.record_id.to_string(),
            a.record.hash,
            claim.turn_id.to_string(),
            claim.session_id.to_string(),
            call_id,
            tool_name,
            effect,
            ApprovalState::Pending,
            time::now()
        ],
    )?;
    approval(tx, a.record.record_id.as_request())?.ok_or_else(|| StoreError::Corrupt {
        what: "approval",
        id: a.record.record_id.to_string(),
        detail: "row vanished inside its own transaction".into(),
    })
}

/// Parks a claimed turn until `request_id` is decided, freeing its worker (fenced by caller).
/// Returns `false` when the request was already decided: the turn is then claimable again
/// at once instead of parked.
pub(crate) fn park_turn(tx: &Tx<'_>, claim: &Claim, request_id: RequestId) -> Result<bool> {
    // The decision may have landed after the worker last looked and before this transaction:
    // `finalize` then found the turn still running and woke nobody. Parking it now would
    // leave it waiting forever on a decided request (the fault suite caught exactly that
    // once in 300 kills), so a decided request makes the turn claimable instead.
    let state: Option<ApprovalState> = tx
        .sql()
        .prepare_cached("SELECT state FROM approvals WHERE request_id = ?1")?
        .query_row([request_id.to_string()], |r| r.get(0))
        .optional()?;
    let decided = state.is_some_and(ApprovalState::is_decided);
    tx.sql()
        .prepare_cached(
            "UPDATE turns SET state = CASE WHEN ?3 THEN 'pending' ELSE 'waiting' END,
                waiting_on = CASE WHEN ?3 THEN NULL ELSE ?2 END,
                lease_owner = NULL, lease_until_ms = NULL, attempts = 0
          WHERE turn_id = ?1",
        )?
        .execute(params![
            claim.turn_id.to_string(),
            request_id.to_string(),
            decided
        ])?;
    Ok(!decided)
}

/// Notes that the approved call is about to run under `epoch` (fenced by caller), so a
/// successor knows it may have taken effect.
pub(crate) fn mark_started(tx: &Tx<'_>, request_id: RequestId, epoch: i64) -> Result<()> {
    tx.sql()
        .prepare_cached("UPDATE approvals SET started_epoch = ?2 WHERE request_id = ?1")?
        .execute(params![request_id.to_string(), epoch])?;
    Ok(())
}

/// The oldest approval policy has not looked at yet.
pub fn next_pending(conn: &impl Db) -> Result<Option<Approval>> {
    let conn = conn.sql();
    let sql = format!(
        "SELECT {COLUMNS} FROM approvals WHERE state = 'pending' ORDER BY approval_seq LIMIT 1"
    );
    conn.prepare_cached(&sql)?
        .query_row([], from_row)
        .optional()?
        .transpose()
}

/// Approvals waiting for people, oldest first.
pub fn asked(conn: &impl Db) -> Result<Vec<Approval>> {
    let conn = conn.sql();
    let sql =
        format!("SELECT {COLUMNS} FROM approvals WHERE state = 'asked' ORDER BY approval_seq");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([], from_row)?;
    let mut out = Vec::new();
    for r in rows {
        out.push(r??);
    }
    Ok(out)
}

/// How many requests are waiting for people (the console's badge).
pub fn asked_count(conn: &impl Db) -> Result<i64> {
    Ok(conn.sql().query_row_cached(
        "SELECT count(*) FROM approvals WHERE state = 'asked'",
        [],
        |r| r.get(0),
    )?)
}

/// Marks an approval as waiting for `required` people under `rule`.
pub(crate) fn mark_asked(
    tx: &Tx<'_>,
    request_id: RequestId,
    rule: &str,
    required: i64,
    deadline_ms: i64,
) -> Result<()> {
    tx.sql().execute_cached(
"UPDATE approvals SET state = 'asked', rule = ?2, required = ?3, deadline_ms = ?4 WHERE request_id = ?1 AND state = 'pending'",
        params![request_id.to_string(), rule, required, deadline_ms],
    )?;
    Ok(())
}

/// Output ledger of a turn.
fn output_ledger(conn: &Connection, turn_id: TurnId) -> Result<LedgerId> {
    let out: Option<String> = conn.query_row_cached(
        "SELECT output_ledger_id FROM turns WHERE turn_id = ?1",
        [turn_id.to_string()],
        |r| r.get(0),
    )?;
    parse_id(out.as_deref().unwrap_or(""))
}

/// Appends a record to the turn's output ledger (decisions, votes, rejections).
pub(crate) fn append_to_turn(
    tx: &Tx<'_>,
    turn_id: TurnId,
    rec: &NewRecord,
) -> Result<proto::Record> {
    Ok(tx.append(output_ledger(tx.sql(), turn_id)?, rec)?.record)
}

/// Records a vote (its record built by the caller, appended here) and returns the record
/// and how many votes of that kind the request now has. A second vote by the same approver
/// is refused.
pub(crate) fn record_vote(
    tx: &Tx<'_>,
    a: &Approval,
    (approver, public_key): (&str, &str),
    decision: Vote,
    record: &NewRecord,
    signature: &str,
) -> Result<(proto::Record, i64)> {
    // One vote per person and per key: a key trusted under two names still votes once.
    let exists: Option<i64> = tx
        .sql()
        .query_row(
            "SELECT 1 FROM approval_votes
              WHERE request_id = ?1 AND (approver = ?2 OR lower(public_key) = lower(?3))",
            params![a.request_id.to_string(), approver, public_key],
            |r| r.get(0),
        )
        .optional()?;
    if exists.is_some() {
        return Err(StoreError::Conflict {
            kind: ConflictKind::DuplicateVote,
            id: a.request_id.to_string(),
        });
    }
    let rec = append_to_turn(tx, a.turn_id, record)?;
    tx.sql().execute_cached(
"INSERT INTO approval_votes (request_id, approver, decision, record_id, signature, public_key)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![a.request_id.to_string(), approver, decision, rec.record_id.to_string(), signature, public_key],
    )?;
    // M of N counts distinct keys.
    let n = tx.sql().query_row_cached(
        "SELECT count(DISTINCT lower(COALESCE(public_key, approver))) FROM approval_votes
          WHERE request_id = ?1 AND decision = ?2",
        params![a.request_id.to_string(), decision],
        |r| r.get(0),
    )?;
    Ok((rec, n))
}

/// The stored `approval.request` record of a request, as stored: its type, author and
/// canonical content (what a person's client verifies against the request's hash).
pub fn request_record(
    conn: &impl Db,
    request_id: RequestId,
) -> Result<Option<(String, String, String)>> {
    Ok(conn
        .sql()
        .prepare_cached(
            "SELECT r.record_type, r.author_id, r.content FROM records r
               JOIN approvals a ON a.request_id = r.record_id
              WHERE a.request_id = ?1",
        )?
        .query_row([request_id.to_string()], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()?)
}

/// How many distinct keys have approved `request_id` so far.
pub fn approvals_so_far(conn: &impl Db, request_id: RequestId) -> Result<i64> {
    let conn = conn.sql();
    Ok(conn.query_row_cached(
        "SELECT count(DISTINCT lower(COALESCE(public_key, approver))) FROM approval_votes
          WHERE request_id = ?1 AND decision = 'approve'",
        [request_id.to_string()],
        |r| r.get(0),
    )?)
}

/// Who has voted on `request_id`, in order: (author id, vote).
pub fn votes(conn: &impl Db, request_id: RequestId) -> Result<Vec<(String, String)>> {
    let conn = conn.sql();
    let mut stmt = conn.prepare_cached(
        "SELECT approver, decision FROM approval_votes WHERE request_id = ?1 ORDER BY rowid",
    )?;
    let rows = stmt.query_map([request_id.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Puts an asked request under `rule` with `required` approvals: an approval edited the
/// call into a stricter rule's reach. Never lowers the quorum.
pub(crate) fn raise_requirement(
    tx: &Tx<'_>,
    request_id: RequestId,
    rule: &str,
    required: i64,
) -> Result<()> {
    tx.sql().execute_cached(
        "UPDATE approvals SET rule = ?2, required = MAX(required, ?3) \
         WHERE request_id = ?1 AND state = 'asked'",
        params![request_id.to_string(), rule, required],
    )?;
    Ok(())
}

/// Binds `request_id` to edited arguments (canonical JSON) while it is still asked.
pub(crate) fn set_edited_arguments(
    tx: &Tx<'_>,
    request_id: RequestId,
    canonical: &str,
) -> Result<()> {
    tx.sql().execute_cached(
        "UPDATE approvals SET edited_arguments = ?2 WHERE request_id = ?1 AND state = 'asked'",
        params![request_id.to_string(), canonical],
    )?;
    Ok(())
}

/// Who policy decisions are by, whichever daemon applied the published policy (aegis, or
/// hashi in the transaction that recorded the call; the record's metadata names the worker).
pub(crate) const POLICY_AUTHOR: &str = "sys:aegis";

/// Decides `a` by the policy `policy_hash` in force: an `approval.decision` naming the rule
/// and the policy, and the request's new state; returns a parked turn this wakes.
pub(crate) fn decide_by_policy(
    tx: &Tx<'_>,
    a: &Approval,
    allow: bool,
    rule: &str,
    policy_hash: &str,
    metadata: std::collections::BTreeMap<String, String>,
) -> Result<Option<TurnId>> {
    let (state, outcome) = if allow {
        (ApprovalState::Approved, Outcome::Allow)
    } else {
        (ApprovalState::Denied, Outcome::Deny)
    };
    let rec = NewRecord {
        record_type: RecordType::ApprovalDecision,
        content: PolicyDecisionContent {
            request_id: a.request_id,
            outcome,
            rule: rule.to_owned(),
            by: "policy".to_owned(),
            policy: policy_hash.to_owned(),
        }
        .to_value(),
        author_id: POLICY_AUTHOR.to_owned(),
        metadata,
    };
    let rec = append_to_turn(tx, a.turn_id, &rec)?;
    finalize(tx, a, state, rule, rec.record_id)
}

/// Finalizes a request (`approved` or `denied`; `decision_record` is the record that
/// decided it, already in the ledger) and makes a turn parked on it claimable again.
/// Returns the turn id when it was parked (to re-dispatch).
pub(crate) fn finalize(
    tx: &Tx<'_>,
    a: &Approval,
    state: ApprovalState,
    rule: &str,
    decision_record: RecordId,
) -> Result<Option<TurnId>> {
    let changed = tx.sql().execute_cached(
"UPDATE approvals SET state = ?2, rule = COALESCE(rule, ?3), decision_record_id = ?4, decided_at = ?5
          WHERE request_id = ?1 AND state IN ('pending', 'asked')",
        params![a.request_id.to_string(), state, rule, decision_record.to_string(), time::now()],
    )?;
    if changed == 0 {
        return Err(StoreError::Conflict {
            kind: ConflictKind::AlreadyDecided,
            id: a.request_id.to_string(),
        });
    }
    let woke = tx.sql().execute_cached(
"UPDATE turns SET state = 'pending', waiting_on = NULL WHERE turn_id = ?1 AND state = 'waiting' AND waiting_on = ?2",
        params![a.turn_id.to_string(), a.request_id.to_string()],
    )?;
    Ok((woke > 0).then_some(a.turn_id))
}

/// Records a refused decision message: a row always, and a `sys.error` record by `author`
/// in the turn's ledger when the request is known and its ledger still open.
/// Adds `n` refusals (counted elsewhere first, e.g. by a rate limit) for `request_id` (""
/// for unknown requests) and `approver`.
pub(crate) fn add_refusals(tx: &Tx<'_>, request_id: &str, approver: &str, n: i64) -> Result<()> {
    tx.sql().execute_cached(
        "INSERT INTO approval_rejection_counts (request_id, approver, refused) VALUES (?1, ?2, ?3)
         ON CONFLICT (request_id, approver) DO UPDATE SET refused = refused + excluded.refused",
        params![request_id, approver, n],
    )?;
    Ok(())
}

/// Refusals recorded in full (a table row, and a `sys.error` record in the turn's ledger)
/// per request and approver; the rest only count.
pub(crate) const RECORDED_REJECTIONS: i64 = 3;

/// Refusals kept as rows for decisions naming no known request, in all.
pub(crate) const RECORDED_UNKNOWN: i64 = 100;

/// Records a refused decision: every one is counted; the first [`RECORDED_REJECTIONS`] per
/// request and approver (`None` standing for every name the caller does not trust, so a
/// sender cannot multiply rows by inventing names), and [`RECORDED_UNKNOWN`] naming no known
/// request, are kept as rows and `sys.error` records, so a flood of forgeries cannot grow the
/// store without bound. Returns whether this one was recorded in full.
pub(crate) fn reject(
    tx: &Tx<'_>,
    author: &str,
    request: Option<&Approval>,
    approver: Option<&str>,
    reason: &str,
    message: &str,
) -> Result<bool> {
    let key = request
        .map(|a| a.request_id.to_string())
        .unwrap_or_default();
    let who: String = approver.unwrap_or("").chars().take(200).collect();
    add_refusals(tx, &key, &who, 1)?;
    let recorded: i64 = match request {
        Some(a) => tx.sql().query_row_cached(
            "SELECT count(*) FROM approval_rejections WHERE request_id = ?1 AND approver IS ?2",
            params![a.request_id.to_string(), approver],
            |r| r.get(0),
        )?,
        None => tx.sql().query_row_cached(
            "SELECT count(*) FROM approval_rejections WHERE request_id IS NULL",
            [],
            |r| r.get(0),
        )?,
    };
    let limit = if request.is_some() {
        RECORDED_REJECTIONS
    } else {
        RECORDED_UNKNOWN
    };
    if recorded >= limit {
        return Ok(false);
    }
    tx.sql().execute_cached(
"INSERT INTO approval_rejections (request_id, approver, reason, message, at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![request.map(|a| a.request_id.to_string()), approver, reason, message, time::now()],
    )?;
    if let Some(a) = request {
        let rec = NewRecord {
            record_type: RecordType::SysError,
            // The refused message and the time make each rejection its own record.
            content: RejectionContent {
                text: format!("rejected approval decision: {reason}"),
                request_id: a.request_id,
                approver: approver.map(str::to_owned),
                message: message.to_owned(),
                at: time::now(),
            }
            .to_value(),
            author_id: author.to_owned(),
            metadata: Default::default(),
        };
        // The ledger may be sealed already (decided long ago); the row is enough then.
        match append_to_turn(tx, a.turn_id, &rec) {
            Ok(_) | Err(StoreError::Sealed(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// The arguments of a request (from its record), for `aegis pending`.
pub fn request_arguments(conn: &impl Db, request_id: RequestId) -> Result<Value> {
    let conn = conn.sql();
    Ok(request_content(conn, request_id)?
        .get("arguments")
        .cloned()
        .unwrap_or(Value::Null))
}

/// Who filed the request (the `approval.request` record's author: hashi's worker, or an
/// outside agent as `agent:<name>`), for rules with an `author` glob.
pub fn request_author(conn: &impl Db, request_id: RequestId) -> Result<String> {
    Ok(conn.sql().query_row_cached(
        "SELECT author_id FROM records WHERE record_id = ?1",
        [request_id.to_string()],
        |r| r.get(0),
    )?)
}

/// The `approval.request` record's content.
pub fn request_content(conn: &impl Db, request_id: RequestId) -> Result<Value> {
    let conn = conn.sql();
    let content: String = conn.query_row_cached(
        "SELECT content FROM records WHERE record_id = ?1",
        [request_id.to_string()],
        |r| r.get(0),
    )?;
    let v: Value = serde_json::from_str(&content).map_err(|e| StoreError::Corrupt {
        what: "record",
        id: request_id.to_string(),
        detail: format!("content is not JSON: {e}"),
    })?;
    Ok(v)
}
