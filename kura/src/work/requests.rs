//! Session requests and turn decisions: what minato does, one transaction per unit of work,
//! each advancing minato's cursor in the same transaction.

use proto::record::{Content, NewRecord, Record, RecordType};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use uuid::Uuid;

use super::cursor::{cursor, set_cursor};
use super::turns::turn;
use crate::error::{Result, StoreError};
use crate::store::{
    Store, append_existing_in, create_session_in, open_ledger_in, parse_id, read_session_in,
    seal_in,
};
use crate::time;

/// minato's cursor over `requests`.
pub const REQUESTS_CONSUMER: &str = "minato.requests";
/// minato's cursor over completed turns.
pub const COMPLETIONS_CONSUMER: &str = "minato.completions";

/// A submitted request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Request {
    /// Its place in minato's queue.
    pub request_seq: i64,
    /// The `task.instruction` record.
    pub record_id: Uuid,
    /// The session it continues (or, once accepted, the session it started).
    pub session_id: Option<Uuid>,
}

/// A request minato turned into a session turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The request.
    pub request_seq: i64,
    /// The (new or continued) session.
    pub session_id: Uuid,
    /// The first turn, ready for dispatch.
    pub turn_id: Uuid,
}

/// What minato decided after a turn completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Another turn is ready for dispatch.
    Next {
        /// The session.
        session_id: Uuid,
        /// The new turn.
        turn_id: Uuid,
    },
    /// The session is complete.
    Complete {
        /// The session.
        session_id: Uuid,
    },
}

/// Writes the `task.instruction` and queues it for minato, in one transaction.
pub fn submit(
    store: &mut Store,
    instruction: &str,
    author: &str,
    session: Option<Uuid>,
) -> Result<Request> {
    if instruction.trim().is_empty() {
        return Err(StoreError::Invalid("the instruction is empty".into()));
    }
    let rec = NewRecord::new(
        RecordType::TaskInstruction,
        Content::text(instruction),
        author,
    );
    store.write(|tx| {
        if let Some(s) = session {
            read_session_in(tx, s)?;
        }
        let stored = crate::store::write_record_in(tx, &rec)?;
        tx.execute(
            "INSERT INTO requests (record_id, session_id, created_at) VALUES (?1, ?2, ?3)",
            params![
                stored.record_id.to_string(),
                session.map(|s| s.to_string()),
                time::now()
            ],
        )?;
        Ok(Request {
            request_seq: tx.last_insert_rowid(),
            record_id: stored.record_id,
            session_id: session,
        })
    })
}

fn label_from(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let label: String = one_line.chars().take(60).collect();
    if label.is_empty() {
        "session".into()
    } else {
        label
    }
}

/// The top memory hits for an instruction (superseded decisions left out).
fn memory_for(tx: &Connection, instruction: Uuid, hits: usize) -> Result<Vec<Uuid>> {
    if hits == 0 {
        return Ok(vec![]);
    }
    let text: String = tx.query_row(
        "SELECT content FROM records WHERE record_id = ?1",
        [instruction.to_string()],
        |r| r.get(0),
    )?;
    let query = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("text").and_then(|t| t.as_str()).map(str::to_owned))
        .unwrap_or_default();
    let found = crate::memory::search(
        tx,
        &crate::memory::Search {
            query,
            limit: hits,
            ..Default::default()
        },
    )?;
    Ok(found
        .into_iter()
        .filter(|h| !h.superseded)
        .map(|h| h.record.record_id)
        .collect())
}

/// Inserts a pending turn after packing and sealing its context ledger: the given members
/// (instruction, previous deliverable), then the top memory hits for the instruction.
fn new_turn(
    tx: &Connection,
    session_id: Uuid,
    request_seq: i64,
    parents: &[Uuid],
    members: &[Uuid],
    memory_hits: usize,
) -> Result<Uuid> {
    let seq: i64 = tx.query_row(
        "SELECT COALESCE(MAX(seq), 0) + 1 FROM turns WHERE session_id = ?1",
        [session_id.to_string()],
        |r| r.get(0),
    )?;
    let ctx = open_ledger_in(tx, session_id, &format!("turn-{seq}-ctx"), parents)?;
    let mut all = members.to_vec();
    if let Some(instruction) = members.first() {
        all.extend(memory_for(tx, *instruction, memory_hits)?);
    }
    for m in &all {
        append_existing_in(tx, ctx.ledger_id, *m)?;
    }
    seal_in(tx, ctx.ledger_id)?;
    let turn_id = proto::new_id();
    tx.execute(
        "INSERT INTO turns (turn_id, session_id, seq, request_seq, context_ledger_id, state, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6)",
        params![
            turn_id.to_string(),
            session_id.to_string(),
            seq,
            request_seq,
            ctx.ledger_id.to_string(),
            time::now()
        ],
    )?;
    Ok(turn_id)
}

/// Turns the next queued request into a session (new or continued) with a sealed context
/// ledger and a pending turn; `None` when the queue is empty.
pub fn accept_next_request(store: &mut Store, memory_hits: usize) -> Result<Option<Accepted>> {
    store.write(|tx| {
        let pos = cursor(tx, REQUESTS_CONSUMER)?;
        let row: Option<(i64, String, Option<String>)> = tx
            .prepare_cached(
                "SELECT request_seq, record_id, session_id FROM requests
                  WHERE request_seq > ?1 ORDER BY request_seq LIMIT 1",
            )?
            .query_row([pos], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        let Some((request_seq, record_id, session)) = row else {
            return Ok(None);
        };
        let record_id = parse_id(&record_id)?;
        let session = match session {
            Some(s) => {
                let s = read_session_in(tx, parse_id(&s)?)?;
                tx.execute(
                    "UPDATE sessions SET status = 'active' WHERE session_id = ?1",
                    [s.session_id.to_string()],
                )?;
                s
            }
            None => {
                let text: String = tx.query_row(
                    "SELECT content FROM records WHERE record_id = ?1",
                    [record_id.to_string()],
                    |r| r.get(0),
                )?;
                let text = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v.get("text").and_then(|t| t.as_str()).map(str::to_owned))
                    .unwrap_or_default();
                create_session_in(tx, &label_from(&text))?
            }
        };
        let parents: Vec<Uuid> = session.head_ledger_id.into_iter().collect();
        let turn_id = new_turn(
            tx,
            session.session_id,
            request_seq,
            &parents,
            &[record_id],
            memory_hits,
        )?;
        tx.execute(
            "UPDATE requests SET session_id = ?2, accepted_at = ?3 WHERE request_seq = ?1",
            params![request_seq, session.session_id.to_string(), time::now()],
        )?;
        set_cursor(tx, REQUESTS_CONSUMER, request_seq)?;
        Ok(Some(Accepted {
            request_seq,
            session_id: session.session_id,
            turn_id,
        }))
    })
}

/// The last `task.deliverable` in a ledger, if any.
pub fn last_deliverable(conn: &Connection, ledger_id: Uuid) -> Result<Option<Record>> {
    let sql = "SELECT r.record_id, r.hash, r.record_type, r.content, r.author_id, r.metadata, r.created_at
                 FROM ledger_records m JOIN records r ON r.record_id = m.record_id
                WHERE m.ledger_id = ?1 AND r.record_type = 'task.deliverable'
                ORDER BY m.position DESC LIMIT 1";
    conn.prepare_cached(sql)?
        .query_row([ledger_id.to_string()], crate::store::record_from_row_pub)
        .optional()?
        .transpose()
}

/// Decides what follows the next completed turn: complete the session (a final deliverable,
/// or `max_turns` reached) or pack the next turn's context (the previous output as parent).
pub fn decide_next_completion(
    store: &mut Store,
    max_turns: i64,
    memory_hits: usize,
) -> Result<Option<Decision>> {
    store.write(|tx| {
        let pos = cursor(tx, COMPLETIONS_CONSUMER)?;
        let row: Option<(String, i64)> = tx
            .prepare_cached(
                "SELECT turn_id, done_seq FROM turns WHERE done_seq > ?1 ORDER BY done_seq LIMIT 1",
            )?
            .query_row([pos], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let Some((turn_id, done_seq)) = row else {
            return Ok(None);
        };
        let t = turn(tx, parse_id(&turn_id)?)?;
        let output = t.output_ledger_id.ok_or_else(|| {
            StoreError::Invalid(format!("done turn {turn_id} has no output ledger"))
        })?;
        let deliverable = last_deliverable(tx, output)?;
        let is_final = deliverable
            .as_ref()
            .is_none_or(|d| d.content.get("final").and_then(|f| f.as_bool()) != Some(false));
        let decision = if is_final || t.seq >= max_turns {
            tx.execute(
                "UPDATE sessions SET status = 'complete' WHERE session_id = ?1",
                [t.session_id.to_string()],
            )?;
            Decision::Complete {
                session_id: t.session_id,
            }
        } else {
            let instruction: String = tx.query_row(
                "SELECT record_id FROM requests WHERE request_seq = ?1",
                [t.request_seq],
                |r| r.get(0),
            )?;
            let mut members = vec![parse_id(&instruction)?];
            members.extend(deliverable.map(|d| d.record_id));
            let next = new_turn(
                tx,
                t.session_id,
                t.request_seq,
                &[output],
                &members,
                memory_hits,
            )?;
            Decision::Next {
                session_id: t.session_id,
                turn_id: next,
            }
        };
        set_cursor(tx, COMPLETIONS_CONSUMER, done_seq)?;
        Ok(Some(decision))
    })
}

/// Where a request stands, for `minato submit --wait`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestStatus {
    /// The session, once accepted.
    pub session_id: Option<Uuid>,
    /// True when the session completed the work of this request.
    pub complete: bool,
    /// The final deliverable, once complete.
    pub deliverable: Option<Record>,
}

/// Reads a request's status.
pub fn request_status(conn: &Connection, request_seq: i64) -> Result<RequestStatus> {
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
    let Some(session) = session.as_deref().map(parse_id).transpose()? else {
        return Ok(RequestStatus {
            session_id: None,
            complete: false,
            deliverable: None,
        });
    };
    let status: String = conn.query_row(
        "SELECT status FROM sessions WHERE session_id = ?1",
        [session.to_string()],
        |r| r.get(0),
    )?;
    let open_turns: i64 = conn.query_row(
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
    let complete = status == "complete" && open_turns == 0 && last_output.is_some();
    let deliverable = match (complete, last_output) {
        (true, Some(o)) => last_deliverable(conn, parse_id(&o)?)?,
        _ => None,
    };
    Ok(RequestStatus {
        session_id: Some(session),
        complete,
        deliverable,
    })
}
