//! Minato's policy over the work tables: how a request becomes a session turn (context
//! packing, memory hits) and what follows a completed turn (the completion rule). One
//! transaction per unit of work, each advancing minato's cursor in the same transaction.

use kura_memory as memory;
use kura_plan::RosterConfig;
use kura_store::Store;
use kura_store::Tx;
use kura_store::error::{Result, StoreError};
use kura_tlog::sealer::Sealer;
use kura_work::WorkTx;
use kura_work::plans::{self, PLANNER, Planned, Progress, StepOf};
use kura_work::verdicts;
use kura_work::{TurnKind, last_plan, role_of};
use kura_work::{
    cursor, last_deliverable, next_done_turn_after, next_request_after, next_turn_seq,
    request_instruction, request_replays, set_cursor,
};
use proto::SessionStatus;
use proto::consumers::{MINATO_COMPLETIONS, MINATO_REQUESTS};
use proto::content::DeliverableContent;
use proto::plan::{PlanContent, RouteContent, VerdictContent};
use proto::record::{Content, NewRecord, Record, RecordType};
use proto::{LedgerId, RecordId, RoleName, SessionId, TurnId};

/// A request minato turned into a session turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The request.
    pub request_seq: i64,
    /// The (new or continued) session.
    pub session_id: SessionId,
    /// The first turn, ready for dispatch.
    pub turn_id: TurnId,
}

/// What minato decided after a turn completed: turns to dispatch, sessions complete, and
/// whether plan steps wait for the request consumer (their sub-sessions' requests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    /// Turns ready for dispatch, with their sessions.
    pub next: Vec<(SessionId, TurnId)>,
    /// Sessions now complete.
    pub complete: Vec<SessionId>,
    /// Plan steps started: their requests wait for the request consumer.
    pub steps_started: usize,
}

fn instruction_text(tx: &Tx<'_>, record_id: RecordId) -> Result<String> {
    let v = tx.read_record(record_id)?.content;
    Ok(proto::content::text_of(&v)
        .map(str::to_owned)
        .unwrap_or_default())
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

/// The memory a turn's context carries for its instruction (`kura_memory::for_context`).
fn memory_for(
    tx: &Tx<'_>,
    instruction: RecordId,
    session: SessionId,
    hits: usize,
) -> Result<Vec<RecordId>> {
    let query = instruction_text(tx, instruction)?;
    Ok(memory::for_context(tx, &query, Some(session), hits)?
        .into_iter()
        .map(|h| h.record.record_id)
        .collect())
}

/// A turn to file: where, as what, on what.
struct NewTurn<'a> {
    session_id: SessionId,
    request_seq: i64,
    parents: &'a [LedgerId],
    /// The instruction first, then what else the context carries.
    members: &'a [RecordId],
    role: Option<&'a str>,
}

/// Packs and seals a turn's context ledger — the given members (instruction, previous
/// deliverable), then the top memory hits for the instruction — and files a pending turn.
fn new_turn(
    tx: &Tx<'_>,
    t: &NewTurn<'_>,
    memory_hits: usize,
    sealer: Option<&Sealer>,
) -> Result<TurnId> {
    let (session_id, request_seq, parents, members) =
        (t.session_id, t.request_seq, t.parents, t.members);
    let seq = next_turn_seq(tx, session_id)?;
    let ctx = tx.open_ledger(session_id, &format!("turn-{seq}-ctx"), parents)?;
    let mut all = members.to_vec();
    if let Some(instruction) = members.first() {
        let memory = memory_for(tx, *instruction, session_id, memory_hits)?;
        // Where each fact was learned, shown beside it (a note in the sealed context).
        let sources = memory::sources(tx, &memory)?;
        if !sources.is_empty() {
            let note = proto::prompt::MemorySources::new(sources).to_value();
            let rec = NewRecord::new(RecordType::SysContext, Content::Json(note), PLANNER);
            all.push(tx.write_record(&rec)?.record_id);
        }
        all.extend(memory);
    }
    for m in &all {
        tx.append_existing(ctx.ledger_id, *m)?;
    }
    tx.seal(ctx.ledger_id, sealer)?;
    let turn = tx.insert_turn(session_id, seq, request_seq, ctx.ledger_id)?;
    if t.role.is_some() {
        plans::set_turn_role(tx, turn, t.role)?;
    }
    Ok(turn)
}

/// How a request's role is chosen.
enum Routed {
    /// No roster and no role named: work runs as before.
    Unrouted,
    /// The role, and the `task.route` record saying why.
    Role(RoleName, RecordId),
    /// No name or keyword decided: the router role's turn picks (the roster for it to
    /// choose from is this `sys.context` record).
    ByRouter(RoleName, RecordId),
}

/// The role a request runs as — only when a roster is configured or the request names a
/// role (without one, work runs as before).
fn route(
    tx: &Tx<'_>,
    roster: &RosterConfig,
    named: Option<&str>,
    instruction: &str,
) -> Result<Routed> {
    if roster.roles.is_empty() && named.is_none() {
        return Ok(Routed::Unrouted);
    }
    let (role, reason, decided) = roster.route_how(named, instruction);
    if let (false, Some(router)) = (decided, roster.router_role.as_deref()) {
        let roles: Vec<serde_json::Value> = roster
            .roles
            .iter()
            .map(|r| {
                serde_json::json!({
                    "name": r.name,
                    "keywords": r.keywords,
                    "system_prompt": r.system_prompt,
                })
            })
            .collect();
        let text = "Pick the role that should do this task. Deliver only its name.";
        let content = serde_json::json!({"text": text, "roles": roles});
        let rec = NewRecord::new(RecordType::SysContext, Content::Json(content), PLANNER);
        return Ok(Routed::ByRouter(
            router.into(),
            tx.write_record(&rec)?.record_id,
        ));
    }
    Ok(Routed::Role(role.clone(), route_record(tx, role, reason)?))
}

/// The role the turn whose output is `ledger` ran as.
fn recorded_role(tx: &Tx<'_>, ledger: LedgerId) -> Result<Option<RoleName>> {
    kura_work::role_of_output(tx, ledger)
}

/// A `task.route` record: the role chosen and why.
fn route_record(tx: &Tx<'_>, role: RoleName, reason: String) -> Result<RecordId> {
    let content = serde_json::to_value(RouteContent { role, reason })
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let rec = NewRecord::new(RecordType::TaskRoute, Content::Json(content), PLANNER);
    Ok(tx.write_record(&rec)?.record_id)
}

/// Turns the next queued request into a session (new or continued) with a sealed context
/// ledger and a pending turn; `None` when the queue is empty.
pub fn accept_next_request(
    store: &mut Store,
    roster: &RosterConfig,
    memory_hits: usize,
) -> Result<Option<Accepted>> {
    let sealer = store.sealer().cloned();
    store.write(|tx| {
        let pos = cursor(tx, MINATO_REQUESTS)?;
        let Some(q) = next_request_after(tx, pos)? else {
            return Ok(None);
        };
        let session = match q.session_id {
            Some(s) => {
                let s = tx.read_session(s)?;
                tx.set_session_status(s.session_id, SessionStatus::Active)?;
                s
            }
            None => tx.create_session(&label_from(&instruction_text(tx, q.record_id)?))?,
        };
        let parents: Vec<LedgerId> = match q.parents {
            Some(p) => p,
            None => session.head_ledger_id.into_iter().collect(),
        };
        let text = instruction_text(tx, q.record_id)?;
        let mut members = vec![q.record_id];
        // A replay runs as the turn it replays ran (or as the role it names, a replayed
        // plan's step): it is never routed anew (a router's turn would file a live turn
        // after it).
        let recorded_role = match plans::request_replay(tx, q.request_seq)? {
            Some(r) if q.role.is_none() => Some(recorded_role(tx, r.of)?),
            _ => None,
        };
        let routed = match recorded_role {
            Some(None) => Routed::Unrouted,
            Some(Some(role)) => {
                let why = route_record(tx, role.clone(), "the role of the turn it replays".into())?;
                Routed::Role(role, why)
            }
            None => route(tx, roster, q.role.as_deref(), &text)?,
        };
        let (role, routing) = match routed {
            Routed::Unrouted => (None, false),
            Routed::Role(role, why) => {
                members.push(why);
                (Some(role), false)
            }
            Routed::ByRouter(router, choices) => {
                members.push(choices);
                (Some(router), true)
            }
        };
        members.extend(q.members.iter().copied());
        let turn_id = new_turn(
            tx,
            &NewTurn {
                session_id: session.session_id,
                request_seq: q.request_seq,
                parents: &parents,
                members: &members,
                role: role.as_deref(),
            },
            memory_hits,
            sealer.as_ref(),
        )?;
        if routing {
            plans::mark_routing(tx, turn_id)?;
        }
        tx.mark_accepted(q.request_seq, session.session_id)?;
        set_cursor(tx, MINATO_REQUESTS, q.request_seq)?;
        Ok(Some(Accepted {
            request_seq: q.request_seq,
            session_id: session.session_id,
            turn_id,
        }))
    })
}

/// What a completion decision needs besides the store.
#[derive(Debug, Clone)]
pub struct Rules<'a> {
    /// A session ends after this many turns.
    pub max_turns: i64,
    /// Memory hits per context.
    pub memory_hits: usize,
    /// Roles and plan bounds.
    pub roster: &'a RosterConfig,
    /// Failed verdicts before work is ended with the last one.
    pub max_validations: i64,
}

/// Decides what follows the next completed turn: a plan it delivered starts its first steps;
/// else the session completes (a final deliverable, or `max_turns` reached) or the next
/// turn's context is packed (the previous output as parent). A completed plan step moves
/// its plan on: the next steps start, or the planning session joins their outputs.
pub fn decide_next_completion(store: &mut Store, rules: &Rules<'_>) -> Result<Option<Decision>> {
    let sealer = store.sealer().cloned();
    store.write(|tx| {
        let pos = cursor(tx, MINATO_COMPLETIONS)?;
        let Some((t, done_seq)) = next_done_turn_after(tx, pos)? else {
            return Ok(None);
        };
        let decision = decide(tx, rules, &t, sealer.as_ref())?;
        set_cursor(tx, MINATO_COMPLETIONS, done_seq)?;
        Ok(Some(decision))
    })
}

fn decide(
    tx: &Tx<'_>,
    rules: &Rules<'_>,
    t: &kura_work::Turn,
    sealer: Option<&Sealer>,
) -> Result<Decision> {
    let output = t.output_ledger_id.ok_or_else(|| StoreError::Corrupt {
        what: "turn",
        id: t.turn_id.to_string(),
        detail: "done but has no output ledger".into(),
    })?;
    let deliverable = last_deliverable(tx, output)?;
    match TurnKind::of(tx, t.turn_id, t.request_seq)? {
        TurnKind::Routing => after_routing(tx, rules, t, output, deliverable.as_ref(), sealer),
        TurnKind::Validation { judged } => {
            let step = plans::step_of(tx, t.request_seq)?;
            let judged = Judged {
                output,
                said: deliverable.as_ref(),
                judged,
            };
            after_verdict(tx, rules, t, &judged, step.as_ref(), sealer)
        }
        kind => {
            let step = plans::step_of(tx, t.request_seq)?;
            let done = Done {
                t,
                root_seq: step.as_ref().map_or(t.request_seq, |s| s.root_seq),
                step,
                output,
                deliverable,
            };
            after_work(tx, rules, done, &kind, sealer)
        }
    }
}

/// A finished turn of work, as `decide` read it.
struct Done<'a> {
    t: &'a kura_work::Turn,
    step: Option<StepOf>,
    root_seq: i64,
    output: LedgerId,
    deliverable: Option<Record>,
}

/// What follows a turn of work: its plan's steps, its validator, the session's end, or
/// another turn.
fn after_work(
    tx: &Tx<'_>,
    rules: &Rules<'_>,
    mut done: Done<'_>,
    kind: &TurnKind,
    sealer: Option<&Sealer>,
) -> Result<Decision> {
    if let Some(replaying) = kind.runs_plans()
        && let Some(plan) = last_plan(tx, done.output)?
    {
        match planned(tx, rules, &done, &plan, replaying, sealer)? {
            Ok(decision) => return Ok(decision),
            Err(refused) => done.output = refused,
        }
    }
    let (t, output) = (done.t, done.output);
    // A deliverable says `"final": false` to ask for another turn; anything else ends
    // the session.
    let is_final = done
        .deliverable
        .as_ref()
        .is_none_or(|d| proto::content::final_of(&d.content) != Some(false));
    // A request whose work planned is bounded as one tree of turns.
    let tree_over = plans::has_plans(tx, done.root_seq)?
        && plans::turns_of_tree(tx, done.root_seq)? >= rules.roster.limits.max_turns;
    let over = t.seq >= rules.max_turns || tree_over;
    if tree_over && !is_final && !kind.replays() {
        // Work that wanted another turn the tree has not got ends failed, saying so.
        let why = format!("this work wanted another turn, but {}", tree_limit(rules));
        let end = end_failed(tx, t.session_id, output, "out-of-turns", &why, sealer)?;
        let mut decision = Decision {
            complete: vec![t.session_id],
            ..Decision::default()
        };
        if let Some(of) = &done.step {
            let max = tree_max(rules);
            let progress = plans::finish_step(tx, of, end.0, Some(&end.1), max)?;
            plan_moved(tx, rules, progress, &mut decision, sealer)?;
        }
        return Ok(decision);
    }
    if !kind.replays()
        && let Some(decision) = to_validator(tx, rules, &done, (is_final, over, tree_over), sealer)?
    {
        return Ok(decision);
    }
    let mut decision = Decision::default();
    if is_final || kind.replays() || over {
        tx.set_session_status(t.session_id, SessionStatus::Complete)?;
        decision.complete.push(t.session_id);
        if let Some(of) = &done.step {
            let progress =
                plans::finish_step(tx, of, output, done.deliverable.as_ref(), tree_max(rules))?;
            plan_moved(tx, rules, progress, &mut decision, sealer)?;
        }
        return Ok(decision);
    }
    let mut members = vec![request_instruction(tx, t.request_seq)?];
    members.extend(done.deliverable.map(|d| d.record_id));
    let role = role_of(tx, t.turn_id)?;
    let next = new_turn(
        tx,
        &NewTurn {
            session_id: t.session_id,
            request_seq: t.request_seq,
            parents: &[output],
            members: &members,
            role: role.as_deref(),
        },
        rules.memory_hits,
        sealer,
    )?;
    decision.next.push((t.session_id, next));
    Ok(decision)
}

/// A turn's plan: its steps filed as work when it passes every check (`Ok`), else the
/// refusal recorded and the ledger holding it, the session's new head (`Err`).
fn planned(
    tx: &Tx<'_>,
    rules: &Rules<'_>,
    done: &Done<'_>,
    plan: &Record,
    replays: Option<(proto::PlanId, kura_work::Replay)>,
    sealer: Option<&Sealer>,
) -> Result<std::result::Result<Decision, LedgerId>> {
    let t = done.t;
    let nesting = done.step.as_ref().map_or(1, |s| {
        usize::try_from(s.nesting)
            .unwrap_or(usize::MAX)
            .saturating_add(1)
    });
    match checked_plan(tx, rules.roster, plan, nesting, done.root_seq)? {
        Ok(content) => {
            let steps_started = plans::file(
                tx,
                &Planned {
                    record: plan,
                    plan: &content,
                    session_id: t.session_id,
                    turn_id: t.turn_id,
                    output: done.output,
                    request_seq: t.request_seq,
                    nesting: i64::try_from(nesting).unwrap_or(i64::MAX),
                    root_seq: done.root_seq,
                    replays,
                },
                tree_max(rules),
            )?;
            Ok(Ok(Decision {
                steps_started,
                ..Decision::default()
            }))
        }
        Err(why) => Ok(Err(refuse_plan(
            tx,
            t.session_id,
            done.output,
            &why,
            sealer,
        )?)),
    }
}

/// The request tree's turn limit.
fn tree_max(rules: &Rules<'_>) -> i64 {
    rules.roster.limits.max_turns
}

/// Why work was cut short by its request tree's turn limit.
fn tree_limit(rules: &Rules<'_>) -> String {
    format!(
        "the request's tree of turns reached its limit of {} ([roster.limits] max_turns)",
        tree_max(rules)
    )
}

/// Whether request `root_seq`'s tree has no turn left.
fn tree_spent(tx: &Tx<'_>, rules: &Rules<'_>, root_seq: i64) -> Result<bool> {
    Ok(plans::turns_of_tree(tx, root_seq)? >= tree_max(rules))
}

/// Work that is done goes to its validator first, if its request names one; work that ran
/// out of turns before one could judge it ends failed, never passed unjudged. `None` when
/// no validator has a say.
fn to_validator(
    tx: &Tx<'_>,
    rules: &Rules<'_>,
    done: &Done<'_>,
    (is_final, over, tree_over): (bool, bool, bool),
    sealer: Option<&Sealer>,
) -> Result<Option<Decision>> {
    let (t, output) = (done.t, done.output);
    let Some(v) = verdicts::request_validator(tx, t.request_seq)? else {
        return Ok(None);
    };
    let Some(d) = done.deliverable.as_ref().filter(|d| !is_error(d)) else {
        return Ok(None);
    };
    let mut decision = Decision::default();
    if is_final && !tree_over {
        // The validator is told it judges, and what (a model would otherwise read the
        // deliverable as its own previous output).
        let note = NewRecord::new(
            RecordType::SysContext,
            Content::Json(serde_json::json!({
                "text": "You judge the deliverable below against the task above. Answer `pass` or `fail` first, then why.",
                "validates": d.record_id,
            })),
            PLANNER,
        );
        let note = tx.write_record(&note)?.record_id;
        let members = [request_instruction(tx, t.request_seq)?, note, d.record_id];
        let next = new_turn(
            tx,
            &NewTurn {
                session_id: t.session_id,
                request_seq: t.request_seq,
                parents: &[output],
                members: &members,
                role: v.role.as_deref(),
            },
            0,
            sealer,
        )?;
        verdicts::mark_validation(tx, next, d.record_id)?;
        decision.next.push((t.session_id, next));
        return Ok(Some(decision));
    }
    if !(is_final || over) {
        return Ok(None);
    }
    let why = format!(
        "the work ran out of turns before its validator ({}) could pass it",
        v.by()
    );
    let end = end_failed(tx, t.session_id, output, "unvalidated", &why, sealer)?;
    decision.complete.push(t.session_id);
    if let Some(of) = &done.step {
        let progress = plans::finish_step(tx, of, end.0, Some(&end.1), tree_max(rules))?;
        plan_moved(tx, rules, progress, &mut decision, sealer)?;
    }
    Ok(Some(decision))
}

/// The plan's content if it passes every check (shape, roles, cycle, bounds, the request's
/// turns), else why not.
fn checked_plan(
    tx: &Tx<'_>,
    roster: &RosterConfig,
    plan: &Record,
    nesting: usize,
    root_seq: i64,
) -> Result<std::result::Result<PlanContent, kura_plan::PlanError>> {
    let content: PlanContent = match serde_json::from_value(plan.content.clone()) {
        Ok(c) => c,
        Err(e) => {
            let why = proto::text::excerpt(&e.to_string(), 200);
            return Ok(Err(kura_plan::PlanError::NotAPlan(why)));
        }
    };
    if let Err(e) = kura_plan::check(&content, roster, nesting) {
        return Ok(Err(e));
    }
    // A step that names no role is the default role's, not routed by keyword.
    let mut content = content;
    for step in &mut content.steps {
        step.role.get_or_insert_with(|| roster.default_role.clone());
    }
    let used = plans::turns_of_tree(tx, root_seq)?;
    let max = roster.limits.max_turns;
    if used.saturating_add(content.steps.len() as i64) > max {
        return Ok(Err(kura_plan::PlanError::TooManyTurns {
            used,
            steps: content.steps.len(),
            max,
        }));
    }
    Ok(Ok(content))
}

/// Records why a plan was refused (a `sys.error` in a sealed ledger on the planning turn's
/// output); returns that ledger, the session's new head.
fn refuse_plan(
    tx: &Tx<'_>,
    session: SessionId,
    output: LedgerId,
    why: &kura_plan::PlanError,
    sealer: Option<&Sealer>,
) -> Result<LedgerId> {
    tracing::warn!(%session, %why, "plan refused");
    let text = format!("plan refused: {why}");
    let rec = NewRecord::new(RecordType::SysError, Content::text(&text), PLANNER);
    let l = tx.open_ledger(session, "plan-refused", &[output])?;
    tx.append(l.ledger_id, &rec)?;
    tx.seal(l.ledger_id, sealer)?;
    Ok(l.ledger_id)
}

/// What a finished step did to its plan, turned into work: the planning session's next
/// turn joining every step's output, or its partial deliverable when a step failed.
fn plan_moved(
    tx: &Tx<'_>,
    rules: &Rules<'_>,
    progress: Progress,
    decision: &mut Decision,
    sealer: Option<&Sealer>,
) -> Result<()> {
    match progress {
        Progress::Going { started } => decision.steps_started += started,
        // A replay's planning session is done with its plan: the replay goes on with the
        // recorded session's next turn, its own request.
        Progress::Done(end) if request_replays(tx, end.request_seq)? => {
            tx.set_session_status(end.session_id, SessionStatus::Complete)?;
            decision.complete.push(end.session_id);
            let said = last_deliverable(tx, end.plan_ledger)?;
            outer_step_done(tx, rules, &end, end.plan_ledger, said, decision, sealer)?;
        }
        Progress::Done(end) if tree_spent(tx, rules, root_of(tx, end.request_seq)?)? => {
            let why = format!(
                "every step is done, but {} before the plan's results could be joined: {}",
                tree_limit(rules),
                end.summary.join("; ")
            );
            let session = end.session_id;
            plans::mark_failed(tx, end.plan_ledger)?;
            let l = end_failed(tx, session, end.plan_ledger, "out-of-turns", &why, sealer)?;
            decision.complete.push(session);
            outer_step_done(tx, rules, &end, l.0, Some(l.1), decision, sealer)?;
        }
        Progress::Done(end) => {
            let mut members = vec![request_instruction(tx, end.request_seq)?];
            members.extend(end.deliverables.iter().copied());
            let next = new_turn(
                tx,
                &NewTurn {
                    session_id: end.session_id,
                    request_seq: end.request_seq,
                    parents: &end.outputs,
                    members: &members,
                    role: end.role.as_deref(),
                },
                rules.memory_hits,
                sealer,
            )?;
            decision.next.push((end.session_id, next));
        }
        Progress::Failed(end) => {
            let cut = if tree_spent(tx, rules, root_of(tx, end.request_seq)?)? {
                format!(" ({})", tree_limit(rules))
            } else {
                String::new()
            };
            let text = format!(
                "the plan ended without finishing{cut}: {}",
                end.summary.join("; ")
            );
            let content = Content::Json(DeliverableContent::failed(text).to_value());
            let rec = NewRecord::new(RecordType::TaskDeliverable, content, PLANNER);
            let mut parents = vec![end.plan_ledger];
            parents.extend(end.outputs.iter().filter(|o| **o != end.plan_ledger));
            let l = tx.open_ledger(end.session_id, "plan-ended", &parents)?;
            for skipped in &end.unstarted {
                tx.append_existing(l.ledger_id, *skipped)?;
            }
            let said = tx.append(l.ledger_id, &rec)?.record;
            tx.seal(l.ledger_id, sealer)?;
            tx.set_session_status(end.session_id, SessionStatus::Failed)?;
            decision.complete.push(end.session_id);
            outer_step_done(tx, rules, &end, l.ledger_id, Some(said), decision, sealer)?;
        }
    }
    Ok(())
}

/// The request whose tree request `request_seq` is in: its plan's root, or itself.
fn root_of(tx: &Tx<'_>, request_seq: i64) -> Result<i64> {
    Ok(plans::step_of(tx, request_seq)?.map_or(request_seq, |s| s.root_seq))
}

/// A plan that ended inside a step of another plan ends that step too (with what it
/// delivered), so the outer plan moves on rather than wait for ever.
fn outer_step_done(
    tx: &Tx<'_>,
    rules: &Rules<'_>,
    end: &plans::Ended,
    ledger: LedgerId,
    said: Option<Record>,
    decision: &mut Decision,
    sealer: Option<&Sealer>,
) -> Result<()> {
    let Some(of) = plans::step_of(tx, end.request_seq)? else {
        return Ok(());
    };
    let progress = plans::finish_step(tx, &of, ledger, said.as_ref(), tree_max(rules))?;
    plan_moved(tx, rules, progress, decision, sealer)
}

/// Ends a session with a failed deliverable saying `why`, in a sealed ledger on `output`;
/// returns that ledger and the deliverable.
fn end_failed(
    tx: &Tx<'_>,
    session: SessionId,
    output: LedgerId,
    label: &str,
    why: &str,
    sealer: Option<&Sealer>,
) -> Result<(LedgerId, Record)> {
    let content = Content::Json(DeliverableContent::failed(why.to_owned()).to_value());
    let rec = NewRecord::new(RecordType::TaskDeliverable, content, PLANNER);
    let l = tx.open_ledger(session, label, &[output])?;
    let said = tx.append(l.ledger_id, &rec)?.record;
    tx.seal(l.ledger_id, sealer)?;
    tx.set_session_status(session, SessionStatus::Failed)?;
    Ok((l.ledger_id, said))
}

fn is_error(d: &Record) -> bool {
    d.content.get("error").and_then(serde_json::Value::as_bool) == Some(true)
}

/// A validation turn's outcome: its output, what the validator said, what it judged.
struct Judged<'a> {
    output: LedgerId,
    said: Option<&'a Record>,
    judged: RecordId,
}

/// Whether the validator passed the deliverable, and its words: `"verdict": "pass"` (or,
/// without a verdict field, a text that starts with "pass"); anything else fails.
fn verdict_of(said: Option<&Record>) -> (bool, String) {
    let Some(d) = said else {
        return (false, "the validator delivered nothing".into());
    };
    let text = proto::content::text_of(&d.content).unwrap_or_default();
    let reason: String = text.chars().take(2000).collect();
    if is_error(d) {
        return (false, reason);
    }
    let pass = match d.content.get("verdict").and_then(serde_json::Value::as_str) {
        Some(v) => v.eq_ignore_ascii_case("pass"),
        None => text.trim_start().to_lowercase().starts_with("pass"),
    };
    (pass, reason)
}

/// Records a validation turn's verdict in a sealed `verdict` ledger on its output, then: a
/// pass completes the session (the judged deliverable carried into that ledger, so it is the
/// session's last word); a fail sends the work back for another turn, told why, until
/// `max_validations` fails end it with the verdict.
fn after_verdict(
    tx: &Tx<'_>,
    rules: &Rules<'_>,
    t: &kura_work::Turn,
    j: &Judged<'_>,
    step: Option<&StepOf>,
    sealer: Option<&Sealer>,
) -> Result<Decision> {
    let by = verdicts::request_validator(tx, t.request_seq)?
        .map(|v| v.by())
        .unwrap_or_else(|| "validator".into());
    let (pass, reason) = verdict_of(j.said);
    let content = VerdictContent {
        pass,
        deliverable: j.judged.to_string(),
        by: by.clone(),
        reason: reason.clone(),
    };
    let value = serde_json::to_value(&content).map_err(|e| StoreError::Invalid(e.to_string()))?;
    let rec = NewRecord::new(RecordType::TaskVerdict, Content::Json(value), PLANNER);
    let ledger = tx.open_ledger(t.session_id, "verdict", &[j.output])?;
    let verdict = tx.append(ledger.ledger_id, &rec)?.record.record_id;
    let mut decision = Decision::default();
    let failed = if pass {
        0
    } else {
        verdicts::count_failed(tx, t.request_seq)?
    };
    let root_seq = step.map_or(t.request_seq, |s| s.root_seq);
    let tree_left = !plans::has_plans(tx, root_seq)?
        || plans::turns_of_tree(tx, root_seq)? < rules.roster.limits.max_turns;
    if !pass && failed < rules.max_validations && t.seq < rules.max_turns && tree_left {
        tx.seal(ledger.ledger_id, sealer)?;
        let members = [request_instruction(tx, t.request_seq)?, j.judged, verdict];
        let role = kura_work::role_at(tx, t.session_id, t.seq - 1)?;
        let next = new_turn(
            tx,
            &NewTurn {
                session_id: t.session_id,
                request_seq: t.request_seq,
                parents: &[ledger.ledger_id],
                members: &members,
                role: role.as_deref(),
            },
            rules.memory_hits,
            sealer,
        )?;
        decision.next.push((t.session_id, next));
        return Ok(decision);
    }
    // The session ends here, with the verdict that allowed (or refused) it.
    let last = if pass {
        tx.append_existing(ledger.ledger_id, j.judged)?;
        tx.read_record(j.judged)?
    } else {
        let text = format!(
            "the validator ({by}) failed the deliverable {failed} times; the last verdict: {reason}"
        );
        let content = Content::Json(DeliverableContent::failed(text).to_value());
        let rec = NewRecord::new(RecordType::TaskDeliverable, content, PLANNER);
        tx.append(ledger.ledger_id, &rec)?.record
    };
    tx.seal(ledger.ledger_id, sealer)?;
    verdicts::set_session_verdict(tx, t.session_id, verdict)?;
    let status = if pass {
        SessionStatus::Complete
    } else {
        SessionStatus::Failed
    };
    tx.set_session_status(t.session_id, status)?;
    decision.complete.push(t.session_id);
    if let Some(of) = step {
        let progress = plans::finish_step(tx, of, ledger.ledger_id, Some(&last), tree_max(rules))?;
        plan_moved(tx, rules, progress, &mut decision, sealer)?;
    }
    Ok(decision)
}

/// Records the role a router's turn picked (a `task.route` record in a sealed `route` ledger
/// on its output) and files the work's first turn in that role.
fn after_routing(
    tx: &Tx<'_>,
    rules: &Rules<'_>,
    t: &kura_work::Turn,
    output: LedgerId,
    said: Option<&Record>,
    sealer: Option<&Sealer>,
) -> Result<Decision> {
    let router = role_of(tx, t.turn_id)?.unwrap_or_default();
    let picked =
        said.and_then(
            |d| match d.content.get("role").and_then(serde_json::Value::as_str) {
                Some(r) => Some(r.to_owned()),
                None => proto::content::text_of(&d.content).map(str::to_owned),
            },
        );
    let (role, reason) = rules.roster.routed_by_model(&router, picked.as_deref());
    let why = route_record(tx, role.clone(), reason)?;
    let ledger = tx.open_ledger(t.session_id, "route", &[output])?;
    tx.append_existing(ledger.ledger_id, why)?;
    tx.seal(ledger.ledger_id, sealer)?;
    let members = [request_instruction(tx, t.request_seq)?, why];
    let next = new_turn(
        tx,
        &NewTurn {
            session_id: t.session_id,
            request_seq: t.request_seq,
            parents: &[ledger.ledger_id],
            members: &members,
            role: Some(&role),
        },
        rules.memory_hits,
        sealer,
    )?;
    Ok(Decision {
        next: vec![(t.session_id, next)],
        ..Decision::default()
    })
}
