//! Turns an outside agent drives over MCP or HTTP: its request is filed already accepted, so
//! minato never takes it up, and its turn is never claimable by a hashi worker; yet both live
//! in the same tables, so aegis's approvals, minato's completion rule, mikado's memory and the
//! console treat the agent's work like any turn.

use kura_store::store::parse_id;
use kura_store::{Cached, Db, Result, StoreError, Tx, time};
use kura_tlog::sealer::Sealer;
use proto::{RecordId, SessionId, SessionStatus, TurnId, TurnState};
use rusqlite::{OptionalExtension, params};

use crate::turns::{Claim, next_turn_seq, turn};

/// Which session an agent's turn belongs to.
#[derive(Debug, Clone, Copy)]
pub enum AgentSession<'a> {
    /// A new session with this label.
    New(&'a str),
    /// The agent's own session, continued (another's is refused as not found).
    Continue(SessionId),
    /// A session just forked (from any sealed ledger) for this agent.
    Forked(SessionId),
}

/// What an agent's new turn starts from.
#[derive(Debug, Clone)]
pub struct AgentStart<'a> {
    /// The agent, as records name it: `agent:<name>`.
    pub agent: &'a str,
    /// The stored `task.instruction`.
    pub instruction: RecordId,
    /// Its session.
    pub session: AgentSession<'a>,
    /// Memory found for the instruction, packed into the context after it.
    pub memory: &'a [RecordId],
}

/// Files `start.instruction` as an accepted request of the agent and opens its turn, in the
/// caller's transaction: the session (new or continued), the sealed context ledger (the
/// instruction, then the memory), and the open output ledger the agent writes to. The turn
/// runs under the agent's claim, with no lease to expire: nobody else takes it over.
pub fn open_agent_turn(
    tx: &Tx<'_>,
    start: &AgentStart<'_>,
    sealer: Option<&Sealer>,
) -> Result<Claim> {
    let session = match start.session {
        AgentSession::Continue(s) if session_agent(tx, s)?.as_deref() != Some(start.agent) => {
            return Err(StoreError::NotFound {
                kind: "session of this agent",
                id: s.to_string(),
            });
        }
        AgentSession::Continue(s) | AgentSession::Forked(s) => {
            let s = tx.read_session(s)?;
            tx.set_session_status(s.session_id, SessionStatus::Active)?;
            s
        }
        AgentSession::New(label) => tx.create_session(label)?,
    };
    let now = time::now();
    tx.sql().execute_cached(
        "INSERT INTO requests (record_id, session_id, created_at, accepted_at, agent)
         VALUES (?1, ?2, ?3, ?3, ?4)",
        params![
            start.instruction.to_string(),
            session.session_id.to_string(),
            now,
            start.agent
        ],
    )?;
    let request_seq = tx.sql().last_insert_rowid();
    let seq = next_turn_seq(tx, session.session_id)?;
    let parents: Vec<_> = session.head_ledger_id.into_iter().collect();
    let ctx = tx.open_ledger(session.session_id, &format!("turn-{seq}-ctx"), &parents)?;
    tx.append_existing(ctx.ledger_id, start.instruction)?;
    for m in start.memory {
        if *m != start.instruction {
            tx.append_existing(ctx.ledger_id, *m)?;
        }
    }
    tx.seal(ctx.ledger_id, sealer)?;
    let out = tx.open_ledger(
        session.session_id,
        &format!("turn-{seq}-out"),
        &[ctx.ledger_id],
    )?;
    let turn_id = TurnId::new();
    tx.sql().execute_cached(
        "INSERT INTO turns (turn_id, session_id, seq, request_seq, context_ledger_id,
                            output_ledger_id, state, epoch, lease_owner, claims, attempts,
                            created_at, agent)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', 1, ?7, 1, 1, ?8, ?7)",
        params![
            turn_id.to_string(),
            session.session_id.to_string(),
            seq,
            request_seq,
            ctx.ledger_id.to_string(),
            out.ledger_id.to_string(),
            start.agent,
            now
        ],
    )?;
    Ok(Claim {
        turn_id,
        session_id: session.session_id,
        seq,
        epoch: 1,
        owner: start.agent.to_owned(),
        context_ledger_id: ctx.ledger_id,
        output_ledger_id: out.ledger_id,
        resumed: false,
        attempt: 1,
        last_error: None,
        replay: None,
        role: None,
        validate_command: None,
    })
}

/// The agent's claim on its running turn `turn_id`: `NotFound` for a turn that is not this
/// agent's (another agent's id tells nothing), `Invalid` once it has ended.
pub fn agent_claim(db: &impl Db, agent: &str, turn_id: TurnId) -> Result<Claim> {
    if turn_agent(db, turn_id)?.as_deref() != Some(agent) {
        return Err(StoreError::NotFound {
            kind: "turn of this agent",
            id: turn_id.to_string(),
        });
    }
    let t = turn(db, turn_id)?;
    let output = match (t.state, t.output_ledger_id) {
        (TurnState::Running, Some(o)) => o,
        _ => {
            return Err(StoreError::Invalid(format!(
                "turn {turn_id} has ended; start a new one"
            )));
        }
    };
    Ok(Claim {
        turn_id,
        session_id: t.session_id,
        seq: t.seq,
        epoch: t.epoch,
        owner: agent.to_owned(),
        context_ledger_id: t.context_ledger_id,
        output_ledger_id: output,
        resumed: false,
        attempt: 1,
        last_error: None,
        replay: None,
        role: None,
        validate_command: None,
    })
}

/// The agent driving turn `turn_id`, if an agent drives it.
pub fn turn_agent(db: &impl Db, turn_id: TurnId) -> Result<Option<String>> {
    Ok(db
        .sql()
        .prepare_cached("SELECT agent FROM turns WHERE turn_id = ?1")?
        .query_row([turn_id.to_string()], |r| r.get::<_, Option<String>>(0))
        .optional()?
        .flatten())
}

/// The agent whose session `session_id` is (the one that started it), if an agent's.
pub fn session_agent(db: &impl Db, session_id: SessionId) -> Result<Option<String>> {
    Ok(db
        .sql()
        .prepare_cached(
            "SELECT agent FROM requests WHERE session_id = ?1 ORDER BY request_seq LIMIT 1",
        )?
        .query_row([session_id.to_string()], |r| r.get::<_, Option<String>>(0))
        .optional()?
        .flatten())
}

/// The agent whose session ledger `ledger_id` belongs to, if an agent's.
pub fn ledger_agent(db: &impl Db, ledger_id: proto::LedgerId) -> Result<Option<String>> {
    Ok(db
        .sql()
        .prepare_cached(
            "SELECT q.agent FROM ledgers l JOIN requests q ON q.session_id = l.session_id
              WHERE l.ledger_id = ?1 AND q.agent IS NOT NULL ORDER BY q.request_seq LIMIT 1",
        )?
        .query_row([ledger_id.to_string()], |r| r.get::<_, Option<String>>(0))
        .optional()?
        .flatten())
}

/// Whether record `record_id` is in a ledger of one of `agent`'s sessions.
pub fn record_of_agent(db: &impl Db, record_id: RecordId, agent: &str) -> Result<bool> {
    Ok(db
        .sql()
        .prepare_cached(
            "SELECT 1 FROM ledger_records m JOIN ledgers l ON l.ledger_id = m.ledger_id
               JOIN requests q ON q.session_id = l.session_id
              WHERE m.record_id = ?1 AND q.agent = ?2 LIMIT 1",
        )?
        .query_row(params![record_id.to_string(), agent], |_| Ok(()))
        .optional()?
        .is_some())
}

/// How many turns `agent` has open (started, not ended).
pub fn open_agent_turns(db: &impl Db, agent: &str) -> Result<i64> {
    Ok(db.sql().query_row_cached(
        "SELECT count(*) FROM turns WHERE agent = ?1 AND state != 'done'",
        [agent],
        |r| r.get(0),
    )?)
}

/// The running turns of `agent`, oldest first (ids only).
pub fn agent_turns(db: &impl Db, agent: &str) -> Result<Vec<TurnId>> {
    let mut stmt = db.sql().prepare_cached(
        "SELECT turn_id FROM turns WHERE agent = ?1 AND state = 'running' ORDER BY turn_id",
    )?;
    let ids = stmt
        .query_map([agent], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    ids.iter().map(|i| parse_id(i)).collect()
}
