//! What a finished turn was, read once — a router's, a validator's, an outside agent's, a
//! replay or live work — so the code deciding what follows matches on one value instead of
//! asking the tables again at each step.

use kura_store::store::parse_id;
use kura_store::{Cached, Db, Result};
use proto::record::Record;
use proto::{LedgerId, RecordId, TurnId};
use rusqlite::OptionalExtension;

use crate::{Replay, plans, verdicts};

/// What a finished turn was.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TurnKind {
    /// A router's: its deliverable picks the role the work runs as.
    Routing,
    /// A validator's, judging this record.
    Validation {
        /// The deliverable judged.
        judged: RecordId,
    },
    /// An outside agent's: a plan it records is history, never work for hashi.
    Agent {
        /// Its request is a replay.
        replays: bool,
    },
    /// A replay of a recorded turn: it replays the recorded plan's steps if that turn
    /// planned, and is otherwise one recorded turn with nothing after it.
    Replay {
        /// The recorded plan (its id) and the replay's terms, when the recorded turn planned.
        plan: Option<(String, Replay)>,
    },
    /// Live work: it may plan, go to its validator, or ask for another turn.
    Work,
}

impl TurnKind {
    /// Reads what `turn` (of request `request_seq`) was.
    pub fn of(conn: &impl Db, turn: TurnId, request_seq: i64) -> Result<TurnKind> {
        if plans::is_routing(conn, turn)? {
            return Ok(TurnKind::Routing);
        }
        if let Some(judged) = verdicts::judged_by(conn, turn)? {
            return Ok(TurnKind::Validation { judged });
        }
        let replays = crate::request_replays(conn, request_seq)?;
        if plans::is_agent_turn(conn, turn)? {
            return Ok(TurnKind::Agent { replays });
        }
        if !replays {
            return Ok(TurnKind::Work);
        }
        let plan = match plans::request_replay(conn, request_seq)? {
            Some(r) => plans::plan_of_output(conn, r.of)?.map(|p| (p, r)),
            None => None,
        };
        Ok(TurnKind::Replay { plan })
    }

    /// Whether its request replays a recorded one (no live turn may follow it).
    pub fn replays(&self) -> bool {
        matches!(
            self,
            TurnKind::Replay { .. } | TurnKind::Agent { replays: true }
        )
    }

    /// Whether a plan it recorded becomes work: `Some` with the recorded plan a replay
    /// replays (`None` for live work), `None` when its plans are not minato's to run.
    pub fn runs_plans(&self) -> Option<Option<(String, Replay)>> {
        match self {
            TurnKind::Work => Some(None),
            TurnKind::Replay { plan: Some(p) } => Some(Some(p.clone())),
            _ => None,
        }
    }
}

/// The role a turn runs as, if it was given one.
pub fn role_of(conn: &impl Db, turn: TurnId) -> Result<Option<String>> {
    Ok(conn.sql().query_row_cached(
        "SELECT role FROM turns WHERE turn_id = ?1",
        [turn.to_string()],
        |r| r.get(0),
    )?)
}

/// The last `agent.plan` in a ledger, if any.
pub fn last_plan(conn: &impl Db, ledger: LedgerId) -> Result<Option<Record>> {
    let found: Option<String> = conn
        .sql()
        .prepare_cached(
            "SELECT r.record_id FROM ledger_records m JOIN records r ON r.record_id = m.record_id
              WHERE m.ledger_id = ?1 AND r.record_type = 'agent.plan'
              ORDER BY m.position DESC LIMIT 1",
        )?
        .query_row([ledger.to_string()], |r| r.get(0))
        .optional()?;
    found
        .map(|id: String| kura_store::store::read_record(conn, parse_id(&id)?))
        .transpose()
}
