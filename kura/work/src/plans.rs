//! A plan's progress over the work tables: filed from a checked `agent.plan`, each step
//! started as a sub-session (a request minato accepts like any other, with its role and its
//! first context's parents), each finished step moving the plan on — every change in the
//! caller's transaction, beside the completion that caused it.

use kura_store::store::parse_id;
use kura_store::{Cached, Db, Result, StoreError, Tx, time};
use proto::plan::PlanContent;
use proto::record::{Content, NewRecord, Record, RecordType};
use proto::{LedgerId, PlanId, RecordId, RoleName, SessionId, StepState, TurnId};
use rusqlite::{OptionalExtension, params};

/// Who writes the records minato makes of a plan (each step's instruction, a plan's end).
pub const PLANNER: &str = "agent:minato";

/// Where a session stands in a plan, if it is one of its steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepOf {
    /// The plan.
    pub plan_id: PlanId,
    /// The step's id.
    pub step: String,
    /// How deep its plan is nested (1: a top-level session's).
    pub nesting: i64,
    /// The request the whole tree serves.
    pub root_seq: i64,
}

/// What a finished step did to its plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Steps were started (their sub-sessions' requests wait for minato), or others still run.
    Going {
        /// Steps started now.
        started: usize,
    },
    /// Every step is done: the planning session goes on, its context joining their outputs.
    Done(Ended),
    /// A step failed and nothing runs any more: the plan ends with what was done.
    Failed(Ended),
}

/// A plan that ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// The planning session.
    pub session_id: SessionId,
    /// Its request.
    pub request_seq: i64,
    /// The planning turn's role.
    pub role: Option<RoleName>,
    /// The plan's ledger (the planning turn's output).
    pub plan_ledger: LedgerId,
    /// Every finished step's last output, in plan order.
    pub outputs: Vec<LedgerId>,
    /// Every finished step's deliverable, in plan order.
    pub deliverables: Vec<RecordId>,
    /// One line per step: its id, its state, and its deliverable's first words.
    pub summary: Vec<String>,
    /// The instructions of the steps that never started (the plan's end seals them, so
    /// no record is left in no ledger).
    pub unstarted: Vec<RecordId>,
}

/// The running plan step whose request `request_seq` is, if any: a step session continued
/// later by hand, or a step already finished, moves no plan.
pub fn step_of(conn: &impl Db, request_seq: i64) -> Result<Option<StepOf>> {
    Ok(conn
        .sql()
        .prepare_cached(
            "SELECT s.plan_id, s.step, p.nesting, p.root_seq FROM plan_steps s
               JOIN plans p ON p.plan_id = s.plan_id
              WHERE s.request_seq = ?1 AND s.state = 'running'",
        )?
        .query_row([request_seq], |r| {
            Ok(StepOf {
                plan_id: r.get(0)?,
                step: r.get(1)?,
                nesting: r.get(2)?,
                root_seq: r.get(3)?,
            })
        })
        .optional()?)
}

/// The step sessions of every plan filed in `session`, and of plans inside them (each as
/// "step id", its session), at most `max` sessions — what `kura log --graph` draws with it.
pub fn step_sessions(
    conn: &impl Db,
    session: SessionId,
    max: usize,
) -> Result<Vec<(String, SessionId)>> {
    let mut out: Vec<(String, SessionId)> = Vec::new();
    let mut todo = vec![session];
    while let Some(s) = todo.pop() {
        let mut stmt = conn.sql().prepare_cached(
            "SELECT st.step, st.session_id FROM plan_steps st JOIN plans p ON p.plan_id = st.plan_id
              WHERE p.session_id = ?1 AND st.session_id IS NOT NULL ORDER BY p.created_at, st.ord",
        )?;
        let rows = stmt.query_map([s.to_string()], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?;
        for row in rows {
            let (step, id) = row?;
            if out.len() >= max {
                return Ok(out);
            }
            let id: SessionId = parse_id(&id)?;
            if id != session && !out.iter().any(|(_, o)| *o == id) {
                out.push((step, id));
                todo.push(id);
            }
        }
    }
    Ok(out)
}

/// Turns taken so far by the request `root_seq` and every plan step under it, a started
/// step not yet accepted counting the first turn it is owed (so nothing files a turn it
/// would then take past the tree's limit).
pub fn turns_of_tree(conn: &impl Db, root_seq: i64) -> Result<i64> {
    Ok(conn.sql().query_row(
        "SELECT (SELECT count(*) FROM turns WHERE request_seq = ?1 OR request_seq IN
                  (SELECT s.request_seq FROM plan_steps s JOIN plans p ON p.plan_id = s.plan_id
                    WHERE p.root_seq = ?1))
              + (SELECT count(*) FROM plan_steps s JOIN plans p ON p.plan_id = s.plan_id
                  WHERE p.root_seq = ?1 AND s.state = 'running' AND NOT EXISTS
                    (SELECT 1 FROM turns t WHERE t.request_seq = s.request_seq))",
        [root_seq],
        |r| r.get(0),
    )?)
}

/// The planning turn's facts a plan is filed with.
#[derive(Debug, Clone)]
pub struct Planned<'a> {
    /// The `agent.plan` record.
    pub record: &'a Record,
    /// Its content, parsed.
    pub plan: &'a PlanContent,
    /// The planning session and turn, its output and request.
    pub session_id: SessionId,
    /// The turn that planned.
    pub turn_id: TurnId,
    /// Its output ledger (the plan ledger).
    pub output: LedgerId,
    /// Its request.
    pub request_seq: i64,
    /// 1 for a top-level session's plan, one more per plan it is inside.
    pub nesting: i64,
    /// The request the whole tree serves.
    pub root_seq: i64,
    /// A replay's: the recorded plan whose steps its steps replay, and how.
    pub replays: Option<(PlanId, crate::Replay)>,
}

/// The recorded turn request `request_seq` replays, if it is a replay.
pub fn request_replay(conn: &impl Db, request_seq: i64) -> Result<Option<crate::Replay>> {
    let row: Option<(Option<String>, bool, bool)> = conn
        .sql()
        .query_row_cached(
            "SELECT replay_of, replay_live, replay_rerun FROM requests WHERE request_seq = ?1",
            [request_seq],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    match row {
        Some((Some(of), live, rerun)) => Ok(Some(crate::Replay {
            of: parse_id(&of)?,
            live,
            rerun,
        })),
        _ => Ok(None),
    }
}

/// The plan filed for the recorded planning turn whose output is `ledger`, if any.
pub fn plan_of_output(conn: &impl Db, ledger: LedgerId) -> Result<Option<PlanId>> {
    Ok(conn
        .sql()
        .query_row_cached(
            "SELECT plan_id FROM plans WHERE ledger_id = ?1",
            [ledger.to_string()],
            |r| r.get(0),
        )
        .optional()?)
}

/// Files a checked plan and starts every step that waits on nothing; returns how many.
/// `tree_max` is the request tree's turn limit (`[roster.limits] max_turns`).
pub fn file(tx: &Tx<'_>, p: &Planned<'_>, tree_max: i64) -> Result<usize> {
    let plan_id = PlanId::new();
    tx.sql().execute_cached(
        "INSERT INTO plans (plan_id, record_id, session_id, turn_id, ledger_id, request_seq,
                            nesting, root_seq, state, created_at, replays, replay_live, replay_rerun)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'running', ?9, ?10, ?11, ?12)",
        params![
            plan_id,
            p.record.record_id.to_string(),
            p.session_id.to_string(),
            p.turn_id.to_string(),
            p.output.to_string(),
            p.request_seq,
            p.nesting,
            p.root_seq,
            time::now(),
            p.replays.as_ref().map(|r| r.0),
            p.replays.as_ref().is_some_and(|r| r.1.live),
            p.replays.as_ref().is_some_and(|r| r.1.rerun)
        ],
    )?;
    for (ord, s) in p.plan.steps.iter().enumerate() {
        let rec = NewRecord::new(
            RecordType::TaskInstruction,
            Content::text(&s.instruction),
            PLANNER,
        );
        let instruction = tx.write_record(&rec)?.record_id;
        tx.sql().execute_cached(
            "INSERT INTO plan_steps (plan_id, step, ord, role, after, instruction, state, validator)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'waiting', ?7)",
            params![
                plan_id,
                s.id,
                ord as i64,
                s.role,
                to_json(&s.after)?,
                instruction.to_string(),
                s.validator.as_ref().map(to_json).transpose()?
            ],
        )?;
    }
    start_ready(tx, plan_id, p.root_seq, tree_max)
}

/// The JSON text a plan row keeps.
fn to_json<T: serde::Serialize + ?Sized>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| StoreError::Invalid(e.to_string()))
}

/// One step row.
struct StepRow {
    step: String,
    role: Option<RoleName>,
    after: Vec<String>,
    instruction: RecordId,
    state: StepState,
    output: Option<LedgerId>,
    deliverable: Option<RecordId>,
    validator: Option<String>,
}

fn steps(tx: &Tx<'_>, plan_id: PlanId) -> Result<Vec<StepRow>> {
    let mut stmt = tx.sql().prepare_cached(
        "SELECT step, role, after, instruction, state, output_id, deliverable_id, validator
           FROM plan_steps WHERE plan_id = ?1 ORDER BY ord",
    )?;
    let rows = stmt.query_map([plan_id], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, Option<RoleName>>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, StepState>(4)?,
            r.get::<_, Option<String>>(5)?,
            r.get::<_, Option<String>>(6)?,
            r.get::<_, Option<String>>(7)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (step, role, after, instruction, state, output, deliverable, validator) = row?;
        out.push(StepRow {
            step,
            role,
            after: serde_json::from_str(&after).map_err(|e| StoreError::Corrupt {
                what: "plan step",
                id: plan_id.to_string(),
                detail: format!("after: {e}"),
            })?,
            instruction: parse_id(&instruction)?,
            state,
            output: output.as_deref().map(parse_id).transpose()?,
            deliverable: deliverable.as_deref().map(parse_id).transpose()?,
            validator,
        });
    }
    Ok(out)
}

/// Starts every waiting step whose steps are all done: a sub-session and a request whose
/// first context has their outputs as parents (or the plan ledger, for a first step). A
/// step the request's tree has no turn left for is not started: it and every step still
/// waiting are skipped, and the plan ends failed once what runs has finished.
fn start_ready(tx: &Tx<'_>, plan_id: PlanId, root_seq: i64, tree_max: i64) -> Result<usize> {
    let (plan_ledger, planning_session): (String, String) = tx.sql().query_row(
        "SELECT ledger_id, session_id FROM plans WHERE plan_id = ?1",
        [plan_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let label = tx.read_session(parse_id(&planning_session)?)?.label;
    let all = steps(tx, plan_id)?;
    let mut started = 0;
    for s in all.iter().filter(|s| s.state == StepState::Waiting) {
        let deps: Vec<&StepRow> = all.iter().filter(|o| s.after.contains(&o.step)).collect();
        if deps.iter().any(|d| d.state != StepState::Done) {
            continue;
        }
        if turns_of_tree(tx, root_seq)? >= tree_max {
            tx.sql().execute_cached(
                "UPDATE plan_steps SET state = 'skipped' WHERE plan_id = ?1 AND state = 'waiting'",
                [plan_id],
            )?;
            return Ok(started);
        }
        let parents: Vec<String> = if deps.is_empty() {
            vec![plan_ledger.clone()]
        } else {
            deps.iter()
                .filter_map(|d| d.output.map(|o| o.to_string()))
                .collect()
        };
        let members: Vec<String> = deps
            .iter()
            .filter_map(|d| d.deliverable.map(|r| r.to_string()))
            .collect();
        let session = tx.create_session(&step_label(&label, &s.step))?;
        tx.sql().execute_cached(
            "INSERT INTO requests (record_id, session_id, created_at, role, parents, members, validator)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                s.instruction.to_string(),
                session.session_id.to_string(),
                time::now(),
                s.role,
                to_json(&parents)?,
                to_json(&members)?,
                s.validator
            ],
        )?;
        let request_seq = tx.sql().last_insert_rowid();
        if let Some((of, live, rerun)) = replayed_step(tx, plan_id, &s.step)? {
            // A replayed plan's step replays the recorded step's turn.
            tx.sql().execute_cached(
                "UPDATE requests SET replay_of = ?2, replay_live = ?3, replay_rerun = ?4
                  WHERE request_seq = ?1",
                params![request_seq, of.to_string(), live, rerun],
            )?;
        }
        tx.sql().execute_cached(
            "UPDATE plan_steps SET state = 'running', session_id = ?3, request_seq = ?4
              WHERE plan_id = ?1 AND step = ?2",
            params![plan_id, s.step, session.session_id.to_string(), request_seq],
        )?;
        started += 1;
    }
    Ok(started)
}

/// For a replayed plan's step: the recorded step's first output (else the recorded plan's
/// own), and the replay's flags.
fn replayed_step(
    tx: &Tx<'_>,
    plan_id: PlanId,
    step: &str,
) -> Result<Option<(LedgerId, bool, bool)>> {
    let row: Option<(String, bool, bool)> = tx
        .sql()
        .query_row_cached(
            "SELECT t.output_ledger_id, p.replay_live, p.replay_rerun
               FROM plans p JOIN plan_steps s ON s.plan_id = p.replays AND s.step = ?2
               JOIN turns t ON t.session_id = s.session_id AND t.state = 'done'
              WHERE p.plan_id = ?1 AND t.output_ledger_id IS NOT NULL
              ORDER BY t.seq LIMIT 1",
            params![plan_id, step],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    if let Some((o, live, rerun)) = row {
        return Ok(Some((parse_id(&o)?, live, rerun)));
    }
    // A step the recording never ran (a live replay planned differently, or the recorded
    // plan stopped before it) replays the recorded plan's turn, which has no side effect
    // to serve: its reads run, every side effect is refused, and a replay that takes its
    // steps from the record finds none and fails the step.
    let fallback: Option<(String, bool, bool)> = tx
        .sql()
        .query_row_cached(
            "SELECT r.ledger_id, p.replay_live, p.replay_rerun
               FROM plans p JOIN plans r ON r.plan_id = p.replays WHERE p.plan_id = ?1",
            [plan_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    fallback
        .map(|(o, live, rerun)| Ok((parse_id(&o)?, live, rerun)))
        .transpose()
}

/// A step session's label: the planning session's (cut) and the step id, within the 200
/// bytes a label may have whatever the planner named things.
fn step_label(planner: &str, step: &str) -> String {
    let step: String = step.chars().take(64).collect();
    let room = 200usize.saturating_sub(step.len() + " · ".len());
    let mut head = String::new();
    for c in planner.chars().take(40) {
        if head.len() + c.len_utf8() > room {
            break;
        }
        head.push(c);
    }
    format!("{head} · {step}")
}

/// Whether any plan serves request `root_seq` (its tree of turns is then bounded as one).
pub fn has_plans(conn: &impl Db, root_seq: i64) -> Result<bool> {
    Ok(conn.sql().query_row_cached(
        "SELECT EXISTS (SELECT 1 FROM plans WHERE root_seq = ?1)",
        [root_seq],
        |r| r.get(0),
    )?)
}

/// The session that planned step session `session`, if it is one.
pub fn planner_of(conn: &impl Db, session: SessionId) -> Result<Option<SessionId>> {
    let id: Option<String> = conn
        .sql()
        .query_row_cached(
            "SELECT p.session_id FROM plan_steps s JOIN plans p ON p.plan_id = s.plan_id
              WHERE s.session_id = ?1",
            [session.to_string()],
            |r| r.get(0),
        )
        .optional()?;
    id.as_deref().map(parse_id).transpose()
}

/// Whether `turn` is an outside agent's (its plans are not minato's to run).
pub fn is_agent_turn(conn: &impl Db, turn: TurnId) -> Result<bool> {
    Ok(conn.sql().query_row_cached(
        "SELECT agent IS NOT NULL FROM turns WHERE turn_id = ?1",
        [turn.to_string()],
        |r| r.get(0),
    )?)
}

/// Records that step session `session` finished — done with `deliverable` in `output`, or
/// failed — and moves its plan on: the next steps start (while the request's tree has
/// turns left of `tree_max`), or the plan ends.
pub fn finish_step(
    tx: &Tx<'_>,
    of: &StepOf,
    output: LedgerId,
    deliverable: Option<&Record>,
    tree_max: i64,
) -> Result<Progress> {
    let failed = deliverable
        .is_none_or(|d| d.content.get("error").and_then(serde_json::Value::as_bool) == Some(true));
    tx.sql().execute_cached(
        "UPDATE plan_steps SET state = ?3, output_id = ?4, deliverable_id = ?5
          WHERE plan_id = ?1 AND step = ?2 AND state = 'running'",
        params![
            of.plan_id,
            of.step,
            if failed {
                StepState::Failed
            } else {
                StepState::Done
            },
            output.to_string(),
            deliverable.map(|d| d.record_id.to_string())
        ],
    )?;
    let plan_failed = failed
        || steps(tx, of.plan_id)?
            .iter()
            .any(|s| s.state == StepState::Failed);
    if plan_failed {
        // Nothing new starts; what runs finishes, then the plan ends with what was done.
        tx.sql().execute_cached(
            "UPDATE plan_steps SET state = 'skipped' WHERE plan_id = ?1 AND state = 'waiting'",
            [of.plan_id],
        )?;
    } else {
        let started = start_ready(tx, of.plan_id, of.root_seq, tree_max)?;
        if started > 0 {
            return Ok(Progress::Going { started });
        }
    }
    let all = steps(tx, of.plan_id)?;
    // A step skipped without a failure was cut by the tree's turn limit: the plan failed.
    let plan_failed = plan_failed || all.iter().any(|s| s.state == StepState::Skipped);
    if all
        .iter()
        .any(|s| matches!(s.state, StepState::Running | StepState::Waiting))
    {
        return Ok(Progress::Going { started: 0 });
    }
    let ended = ended(tx, of.plan_id, &all)?;
    tx.sql().execute_cached(
        "UPDATE plans SET state = ?2 WHERE plan_id = ?1",
        params![
            of.plan_id,
            if plan_failed {
                StepState::Failed
            } else {
                StepState::Done
            }
        ],
    )?;
    Ok(if plan_failed {
        Progress::Failed(ended)
    } else {
        Progress::Done(ended)
    })
}

fn ended(tx: &Tx<'_>, plan_id: PlanId, all: &[StepRow]) -> Result<Ended> {
    let (session, request_seq, ledger, turn): (String, i64, String, String) = tx.sql().query_row(
        "SELECT session_id, request_seq, ledger_id, turn_id FROM plans WHERE plan_id = ?1",
        [plan_id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    let role: Option<RoleName> =
        tx.sql()
            .query_row("SELECT role FROM turns WHERE turn_id = ?1", [&turn], |r| {
                r.get(0)
            })?;
    let mut summary = Vec::new();
    for s in all {
        let said = match s.deliverable {
            Some(d) => {
                let r = tx.read_record(d)?;
                let text = proto::content::text_of(&r.content).unwrap_or_default();
                let first: String = text.chars().take(120).collect();
                format!(": {first}")
            }
            None => String::new(),
        };
        summary.push(format!("{} ({}){said}", s.step, s.state));
    }
    Ok(Ended {
        session_id: parse_id(&session)?,
        request_seq,
        role,
        plan_ledger: parse_id(&ledger)?,
        outputs: all.iter().filter_map(|s| s.output).collect(),
        unstarted: all
            .iter()
            .filter(|s| s.state == StepState::Skipped)
            .map(|s| s.instruction)
            .collect(),
        deliverables: all.iter().filter_map(|s| s.deliverable).collect(),
        summary,
    })
}

/// Marks the plan whose ledger is `plan_ledger` failed: its steps were done, but what was to
/// follow them could not run (the request's tree had no turn left).
pub fn mark_failed(tx: &Tx<'_>, plan_ledger: LedgerId) -> Result<()> {
    tx.sql().execute_cached(
        "UPDATE plans SET state = ?2 WHERE ledger_id = ?1",
        params![plan_ledger.to_string(), StepState::Failed],
    )?;
    Ok(())
}

/// Marks `turn` as a router role's turn (its deliverable picks the request's role).
pub fn mark_routing(tx: &Tx<'_>, turn: TurnId) -> Result<()> {
    tx.sql().execute_cached(
        "UPDATE turns SET routing = 1 WHERE turn_id = ?1",
        [turn.to_string()],
    )?;
    Ok(())
}

/// Whether `turn` is a router role's turn.
pub fn is_routing(conn: &impl Db, turn: TurnId) -> Result<bool> {
    Ok(conn.sql().query_row_cached(
        "SELECT routing FROM turns WHERE turn_id = ?1",
        [turn.to_string()],
        |r| r.get(0),
    )?)
}

/// Sets the role a filed turn runs as.
pub fn set_turn_role(tx: &Tx<'_>, turn: TurnId, role: Option<&str>) -> Result<()> {
    tx.sql().execute_cached(
        "UPDATE turns SET role = ?2 WHERE turn_id = ?1",
        params![turn.to_string(), role],
    )?;
    Ok(())
}
