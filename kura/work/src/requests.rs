//! Session requests: the queue people submit instructions to, and where each request stands.

use kura_store::store::parse_id;
use kura_store::{Cached, Db, Result, Store, StoreError, Tx, time};
use proto::record::{Content, NewRecord, Record, RecordType};
use proto::{LedgerId, RecordId, RoleName, SessionId};
use rusqlite::{OptionalExtension, params};
use serde::Serialize;

/// A submitted request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Request {
    /// Its place in minato's queue.
    pub request_seq: i64,
    /// The `task.instruction` record.
    pub record_id: RecordId,
    /// The session it continues (or, once accepted, the session it started).
    pub session_id: Option<SessionId>,
}

/// A queued request as read by the consumer that accepts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// Its place in the queue.
    pub request_seq: i64,
    /// The `task.instruction` record.
    pub record_id: RecordId,
    /// The session it continues, if any.
    pub session_id: Option<SessionId>,
    /// The role it names (`minato submit --role`, or a plan step's).
    pub role: Option<RoleName>,
    /// The parents of its first context, when they are not its session's head (a plan
    /// step's: the plan ledger, or the outputs of the steps it waits on).
    pub parents: Option<Vec<LedgerId>>,
    /// Records its first context carries after the instruction (the deliverables of the
    /// steps it waits on).
    pub members: Vec<RecordId>,
}

/// Writes the `task.instruction` and queues it for minato, in one transaction.
pub fn submit(
    store: &mut Store,
    instruction: &str,
    author: &str,
    session: Option<SessionId>,
) -> Result<Request> {
    submit_replay(store, instruction, author, session, None)
}

/// [`submit`] for a turn that replays the recorded turn whose output ledger is
/// `replay.of` (see [`crate::Replay`]).
pub fn submit_replay(
    store: &mut Store,
    instruction: &str,
    author: &str,
    session: Option<SessionId>,
    replay: Option<crate::Replay>,
) -> Result<Request> {
    submit_as(store, instruction, author, session, replay, Ask::default())
}

/// What a request asks for besides its instruction: the role that does it and what must
/// pass its deliverable.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ask<'a> {
    /// The role (`[roster]`); none: routed.
    pub role: Option<&'a str>,
    /// The validator.
    pub validator: Option<&'a proto::plan::Validator>,
}

/// [`submit_replay`] for work that names its role or validator.
pub fn submit_as(
    store: &mut Store,
    instruction: &str,
    author: &str,
    session: Option<SessionId>,
    replay: Option<crate::Replay>,
    ask: Ask<'_>,
) -> Result<Request> {
    if instruction.trim().is_empty() {
        return Err(StoreError::Invalid("the instruction is empty".into()));
    }
    let validator = match ask.validator {
        Some(v) => {
            v.check().map_err(|e| StoreError::Invalid(e.to_string()))?;
            Some(serde_json::to_string(v).map_err(|e| StoreError::Invalid(e.to_string()))?)
        }
        None => None,
    };
    let role = ask.role;
    let rec = NewRecord::new(
        RecordType::TaskInstruction,
        Content::text(instruction),
        author,
    );
    store.write(|tx| {
        if let Some(s) = session {
            tx.read_session(s)?;
        }
        let stored = tx.write_record(&rec)?;
        tx.sql().execute_cached(
"INSERT INTO requests (record_id, session_id, created_at, replay_of, replay_live, replay_rerun, role, validator)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                stored.record_id.to_string(),
                session.map(|s| s.to_string()),
                time::now(),
                replay.map(|r| r.of.to_string()),
                replay.is_some_and(|r| r.live),
                replay.is_some_and(|r| r.rerun),
                role,
                validator,
            ],
        )?;
        Ok(Request {
            request_seq: tx.sql().last_insert_rowid(),
            record_id: stored.record_id,
            session_id: session,
        })
    })
}

/// The first request after `position` in the queue, if any.
pub fn next_request_after(conn: &impl Db, position: i64) -> Result<Option<Queued>> {
    let conn = conn.sql();
    type Row = (
        i64,
        String,
        Option<String>,
        Option<RoleName>,
        Option<String>,
        Option<String>,
    );
    let row: Option<Row> = conn
        .prepare_cached(
            // An outside agent's request is accepted when it is filed (crate::agents).
            "SELECT request_seq, record_id, session_id, role, parents, members FROM requests
              WHERE request_seq > ?1 AND agent IS NULL ORDER BY request_seq LIMIT 1",
        )?
        .query_row([position], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .optional()?;
    row.map(
        |(request_seq, record_id, session, role, parents, members)| {
            Ok(Queued {
                request_seq,
                record_id: parse_id(&record_id)?,
                session_id: session.as_deref().map(parse_id).transpose()?,
                role,
                parents: parents.as_deref().map(ids).transpose()?,
                members: members.as_deref().map(ids).transpose()?.unwrap_or_default(),
            })
        },
    )
    .transpose()
}

/// Ids from a JSON list of their texts.
pub(crate) fn ids<T: From<uuid::Uuid>>(json: &str) -> Result<Vec<T>> {
    let texts: Vec<String> = serde_json::from_str(json).map_err(|e| StoreError::Corrupt {
        what: "request",
        id: json.chars().take(80).collect(),
        detail: format!("not a list of ids: {e}"),
    })?;
    texts.iter().map(|t| parse_id(t)).collect()
}

/// Marks a request accepted into `session_id`.
pub(crate) fn mark_accepted(tx: &Tx<'_>, request_seq: i64, session_id: SessionId) -> Result<()> {
    tx.sql().execute_cached(
        "UPDATE requests SET session_id = ?2, accepted_at = ?3 WHERE request_seq = ?1",
        params![request_seq, session_id.to_string(), time::now()],
    )?;
    Ok(())
}

/// The instruction record of a request.
pub fn request_instruction(conn: &impl Db, request_seq: i64) -> Result<RecordId> {
    let conn = conn.sql();
    let id: String = conn.query_row_cached(
        "SELECT record_id FROM requests WHERE request_seq = ?1",
        [request_seq],
        |r| r.get(0),
    )?;
    parse_id(&id)
}

/// Whether request `request_seq` replays a recorded turn: a replay has exactly the recorded
/// turns, so its session never grows a live turn after it, whatever its deliverable says.
pub fn request_replays(conn: &impl Db, request_seq: i64) -> Result<bool> {
    let conn = conn.sql();
    Ok(conn.query_row_cached(
        "SELECT replay_of IS NOT NULL FROM requests WHERE request_seq = ?1",
        [request_seq],
        |r| r.get(0),
    )?)
}

/// The last `task.deliverable` in a ledger, if any.
pub fn last_deliverable(conn: &impl Db, ledger_id: LedgerId) -> Result<Option<Record>> {
    let conn = conn.sql();
    let sql = "SELECT r.record_id
                 FROM ledger_records m JOIN records r ON r.record_id = m.record_id
                WHERE m.ledger_id = ?1 AND r.record_type = 'task.deliverable'
                ORDER BY m.position DESC LIMIT 1";
    let id: Option<String> = conn
        .prepare_cached(sql)?
        .query_row([ledger_id.to_string()], |r| r.get(0))
        .optional()?;
    id.map(|id| kura_store::store::read_record(conn, parse_id(&id)?))
        .transpose()
}

/// Where a request stands, for `minato submit --wait`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestStatus {
    /// The session, once accepted.
    pub session_id: Option<SessionId>,
    /// True when the session completed the work of this request.
    pub complete: bool,
    /// The final deliverable, once complete.
    pub deliverable: Option<Record>,
}

/// Who submitted request `request_seq` (its instruction's author); `NotFound` if none.
pub fn request_submitter(conn: &impl Db, request_seq: i64) -> Result<String> {
    conn.sql()
        .query_row(
            "SELECT r.author_id FROM requests q JOIN records r ON r.record_id = q.record_id
              WHERE q.request_seq = ?1",
            [request_seq],
            |r| r.get(0),
        )
        .optional()?
        .ok_or(StoreError::NotFound {
            kind: "request",
            id: request_seq.to_string(),
        })
}

/// Who submitted the request turn `turn_id` serves (its instruction's author).
pub fn turn_submitter(conn: &impl Db, turn_id: proto::TurnId) -> Result<Option<String>> {
    Ok(conn
        .sql()
        .prepare_cached(
            // A plan step's work is done on behalf of whoever submitted the request its
            // plan serves (its instruction is minato's, from the model's plan).
            "SELECT r.author_id FROM turns t
               JOIN requests q ON q.request_seq = coalesce(
                    (SELECT p.root_seq FROM plan_steps s JOIN plans p ON p.plan_id = s.plan_id
                      WHERE s.request_seq = t.request_seq), t.request_seq)
               JOIN records r ON r.record_id = q.record_id WHERE t.turn_id = ?1",
        )?
        .query_row([turn_id.to_string()], |r| r.get(0))
        .optional()?)
}

/// Reads a request's status.
pub fn request_status(conn: &impl Db, request_seq: i64) -> Result<RequestStatus> {
    let conn = conn.sql();
    let session: Option<Option<String>> = conn
        .query_row(
            "SELECT session_id FROM requests WHERE request_seq = ?1",
            [request_seq],
            |r| r.get(0),
        )
        .optional()?;
    let Some(session) = session else {
        return Err(StoreError::NotFound {
            kind: "request",
            id: request_seq.to_string(),
        });
    };
    let Some(session) = session.as_deref().map(parse_id::<SessionId>).transpose()? else {
        return Ok(RequestStatus {
            session_id: None,
            complete: false,
            deliverable: None,
        });
    };
    let status: proto::SessionStatus = conn.query_row_cached(
        "SELECT status FROM sessions WHERE session_id = ?1",
        [session.to_string()],
        |r| r.get(0),
    )?;
    let open_turns: i64 = conn.query_row_cached(
        "SELECT count(*) FROM turns WHERE request_seq = ?1 AND state != 'done'",
        [request_seq],
        |r| r.get(0),
    )?;
    let last_output: Option<String> = conn
        .query_row(
            "SELECT output_ledger_id FROM turns WHERE request_seq = ?1 AND state = 'done' ORDER BY seq DESC LIMIT 1",
            [request_seq],
            |r| r.get(0),
        )
        .optional()?
        .flatten();
    // Ended, passed or failed: the waiting is over either way.
    let complete = status.is_ended() && open_turns == 0 && last_output.is_some();
    // What minato wrote last for the session's latest request (a verdict that passed, a plan
    // that ended) stands on its head; the last turn's output may be a validator's.
    let (head, latest): (Option<String>, i64) = conn.query_row_cached(
        "SELECT s.head_ledger_id, (SELECT max(request_seq) FROM requests WHERE session_id = s.session_id)
           FROM sessions s WHERE s.session_id = ?1",
        [session.to_string()],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let deliverable = match (complete, last_output) {
        (true, Some(o)) => {
            let from_head = match head.filter(|_| latest == request_seq) {
                Some(h) => last_deliverable(conn, parse_id(&h)?)?,
                None => None,
            };
            match from_head {
                Some(d) => Some(d),
                None => last_deliverable(conn, parse_id(&o)?)?,
            }
        }
        _ => None,
    };
    Ok(RequestStatus {
        session_id: Some(session),
        complete,
        deliverable,
    })
}

/// A finished turn as `minato replay` needs it.
#[derive(Debug, Clone)]
pub struct RecordedTurn {
    /// Its number in the session.
    pub seq: i64,
    /// Its sealed context.
    pub context_ledger_id: LedgerId,
    /// Its sealed output.
    pub output_ledger_id: LedgerId,
    /// The instruction's text and author (resubmitted as is, it is the same record).
    pub instruction: String,
    /// Who gave it.
    pub author: String,
}

/// `session_id`'s finished turns, in order.
pub fn recorded_turns(conn: &impl Db, session_id: SessionId) -> Result<Vec<RecordedTurn>> {
    let conn = conn.sql();
    let mut stmt = conn.prepare_cached(
        "SELECT t.seq, t.context_ledger_id, t.output_ledger_id, i.content, i.author_id
           FROM turns t JOIN requests q ON q.request_seq = t.request_seq
           JOIN records i ON i.record_id = q.record_id
          WHERE t.session_id = ?1 AND t.state = 'done' AND t.output_ledger_id IS NOT NULL
          ORDER BY t.seq",
    )?;
    let rows = stmt.query_map([session_id.to_string()], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, String>(4)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (seq, ctx, output, content, author) = row?;
        let text = serde_json::from_str::<serde_json::Value>(&content)
            .ok()
            .and_then(|v| v.get("text").and_then(|t| t.as_str()).map(str::to_owned))
            .unwrap_or_default();
        out.push(RecordedTurn {
            seq,
            context_ledger_id: parse_id(&ctx)?,
            output_ledger_id: parse_id(&output)?,
            instruction: text,
            author,
        });
    }
    Ok(out)
}
