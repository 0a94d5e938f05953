//! What a finished turn was, read once — a router's, a validator's, an outside agent's, a
//! replay or live work — so the code deciding what follows matches on one value instead of
//! asking the tables again at each step.

use kura_store::store::parse_id;
use kura_store::{Cached, Db, Result};
use proto::record::Record;
use proto::{LedgerId, PlanId, RecordId, RoleName, TurnId};
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
        plan: Option<(PlanId, Replay)>,
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
    pub fn runs_plans(&self) -> Option<Option<(PlanId, Replay)>> {
        match self {
            TurnKind::Work => Some(None),
            TurnKind::Replay { plan: Some(p) } => Some(Some(*p)),
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

/// The role the turn whose output is `ledger` ran as.
pub fn role_of_output(conn: &impl Db, ledger: LedgerId) -> Result<Option<RoleName>> {
    Ok(conn
        .sql()
        .query_row_cached(
            "SELECT role FROM turns WHERE output_ledger_id = ?1",
            [ledger.to_string()],
            |r| r.get(0),
        )
        .optional()?
        .flatten())
}

/// The role turn `seq` of `session` ran as.
pub fn role_at(conn: &impl Db, session: proto::SessionId, seq: i64) -> Result<Option<RoleName>> {
    Ok(conn
        .sql()
        .query_row_cached(
            "SELECT role FROM turns WHERE session_id = ?1 AND seq = ?2",
            rusqlite::params![session.to_string(), seq],
            |r| r.get(0),
        )
        .optional()?
        .flatten())
}

/// What one ledger's model answers spent, summed from the usage its records carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerUsage {
    /// Model answers.
    pub answers: i64,
    /// The models that answered, comma-separated.
    pub models: String,
    /// Prompt tokens.
    pub tokens_in: i64,
    /// Completion tokens.
    pub tokens_out: i64,
    /// Money by the price table, millionths.
    pub money_micros: i64,
}

/// [`LedgerUsage`] of `ledger`, summed in SQLite (no record is read into memory).
pub fn ledger_usage(conn: &impl Db, ledger: LedgerId) -> Result<LedgerUsage> {
    Ok(conn.sql().query_row_cached(
        "SELECT count(*), group_concat(DISTINCT json_extract(r.metadata, '$.model')),
                coalesce(sum(CAST(json_extract(r.metadata, '$.tokens_in') AS INTEGER)), 0),
                coalesce(sum(CAST(json_extract(r.metadata, '$.tokens_out') AS INTEGER)), 0),
                coalesce(sum(CAST(json_extract(r.metadata, '$.money_micros') AS INTEGER)), 0)
           FROM ledger_records m JOIN records r ON r.record_id = m.record_id
          WHERE m.ledger_id = ?1 AND json_extract(r.metadata, '$.model') IS NOT NULL",
        [ledger.to_string()],
        |r| {
            Ok(LedgerUsage {
                answers: r.get(0)?,
                models: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                tokens_in: r.get(2)?,
                tokens_out: r.get(3)?,
                money_micros: r.get(4)?,
            })
        },
    )?)
}
