//! The one gate: whether a tool call may run is ruled here and nowhere else — hashi's calls,
//! an outside agent's declarations, aegis's rulings and every later decision (a person's
//! approval or edit, a resumed call, a re-run). Path arguments in their one normal form; the
//! writs the call's turn runs under, checked and debited once and held again whenever the
//! call is decided later; the published policy; the request and its ruling in one commit.

use std::collections::BTreeMap;

use kura_policy::path::{self, NotNormal, PathError};
use kura_policy::writ::{Issuer, WritError};
use kura_policy::{Policy, Ruling, Verdict};
use kura_store::store::parse_id;
use kura_store::{Cached, Db, Result, Tx};
use proto::content::{ApprovalRequestContent, MAX_ANSWER_BYTES, PERSON_ASK};
use proto::{ApprovalState, Effect, SessionId, TurnId};
use proto::{CallId, WritId};
use rusqlite::OptionalExtension;
use serde_json::{Map, Value};

use crate::approvals::{self, Approval};
use crate::turns::Claim;
use crate::writs;

/// Plans nest a few deep (`[roster.limits] max_nesting`); the bound is for a corrupt store.
const MAX_PLANNERS: usize = 16;

/// A tool call as the gate rules on it: its arguments in their one normal form.
#[derive(Debug, Clone, PartialEq)]
pub struct GateCall {
    tool: String,
    effect: Effect,
    arguments: Map<String, Value>,
    /// Why a path argument has no normal form, if one has none: the call is refused.
    unnormal: Option<PathError>,
}

impl GateCall {
    /// The call `tool` with `effect` (this Kura's class for it, never the caller's word) on
    /// `arguments` as the caller spelled them.
    pub fn new(tool: &str, effect: Effect, mut arguments: Map<String, Value>) -> GateCall {
        let unnormal = path::normalize_args(&mut arguments).err();
        GateCall {
            tool: tool.to_owned(),
            effect,
            arguments,
            unnormal,
        }
    }

    /// The tool.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// Its effect class.
    pub fn effect(&self) -> Effect {
        self.effect
    }

    /// The arguments in normal form: what is ruled on, recorded, signed and run.
    pub fn arguments(&self) -> &Map<String, Value> {
        &self.arguments
    }

    fn policy_call<'a>(&'a self, args: &'a Value, ctx: &'a Context) -> kura_policy::Call<'a> {
        kura_policy::Call {
            tool: &self.tool,
            effect: self.effect,
            args,
            session: &ctx.session,
            author: &ctx.author,
            on_behalf_of: ctx.on_behalf_of.as_deref(),
        }
    }
}

/// The writs a turn's calls run under; every one must allow a call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnWrits(Vec<WritId>);

impl TurnWrits {
    /// These writs (a test's, or a caller that resolved them itself).
    pub fn of(ids: Vec<WritId>) -> TurnWrits {
        let mut w = TurnWrits::default();
        ids.into_iter().for_each(|id| w.push(id));
        w
    }

    /// The writ ids, the one that binds the work first, a role's narrowing after it.
    pub fn ids(&self) -> &[WritId] {
        &self.0
    }

    /// The writ that binds the work (the first), if any.
    pub fn primary(&self) -> Option<WritId> {
        self.0.first().copied()
    }

    /// True when no writ binds the turn.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn push(&mut self, id: WritId) {
        if !self.0.contains(&id) {
            self.0.push(id);
        }
    }
}

/// The writs the turn `turn` runs under ([`writs_for`] with its session, role, submitter
/// and agent).
pub fn writs_of_turn(conn: &impl Db, turn: TurnId) -> Result<TurnWrits> {
    writs_of_turn_at(conn, turn, 0)
}

fn writs_of_turn_at(conn: &impl Db, turn: TurnId, depth: usize) -> Result<TurnWrits> {
    let row: Option<(String, Option<String>, Option<String>)> = conn
        .sql()
        .query_row_cached(
            "SELECT session_id, role, agent FROM turns WHERE turn_id = ?1",
            [turn.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let Some((session, role, agent)) = row else {
        return Ok(TurnWrits::default());
    };
    let session: SessionId = parse_id(&session)?;
    if let Some(agent) = agent {
        // An outside agent's turn: its session's writ, else its own.
        let mut w = TurnWrits::default();
        if let Some(s) = writs::held_by(conn, session, Some(&agent))? {
            w.push(s.writ.body.id);
        }
        return Ok(w);
    }
    let submitter = crate::turn_submitter(conn, turn)?;
    writs_for_at(conn, session, role.as_deref(), submitter.as_deref(), depth)
}

/// The writs work in `session` run as `role` for `submitter` runs under: the newest writ
/// granted to the session; else, for a plan step, the writs its planning turn ran under;
/// else the submitter's. A role's own writ (`role:<name>`) always narrows whatever else
/// binds — a planner never sheds its writ by naming a role for a step, and naming a role
/// never widens a writ. Once a holder was granted one it stays bound by its newest, revoked
/// or expired.
pub fn writs_for(
    conn: &impl Db,
    session: SessionId,
    role: Option<&str>,
    submitter: Option<&str>,
) -> Result<TurnWrits> {
    writs_for_at(conn, session, role, submitter, 0)
}

fn writs_for_at(
    conn: &impl Db,
    session: SessionId,
    role: Option<&str>,
    submitter: Option<&str>,
    depth: usize,
) -> Result<TurnWrits> {
    let mut out = TurnWrits::default();
    if let Some(w) = writs::held_by(conn, session, None)? {
        out.push(w.writ.body.id);
    } else if let Some(planner) = planning_turn(conn, session)?
        && depth < MAX_PLANNERS
    {
        out = writs_of_turn_at(conn, planner, depth + 1)?;
    } else if let Some(s) = submitter
        && let Some(w) = writs::newest(conn, s)?
    {
        out.push(w.writ.body.id);
    }
    if let Some(r) = role
        && let Some(w) = writs::newest(conn, &format!("role:{r}"))?
    {
        out.push(w.writ.body.id);
    }
    Ok(out)
}

/// The turn that planned step session `session`, if it is one.
fn planning_turn(conn: &impl Db, session: SessionId) -> Result<Option<TurnId>> {
    let id: Option<String> = conn
        .sql()
        .query_row_cached(
            "SELECT p.turn_id FROM plan_steps s JOIN plans p ON p.plan_id = s.plan_id
              WHERE s.session_id = ?1",
            [session.to_string()],
            |r| r.get(0),
        )
        .optional()?;
    id.as_deref().map(parse_id).transpose()
}

/// The gate for a worker that files no requests (`[worker] approvals = "off"`): a path
/// with no normal form refused, then the writs checked and debited ([`check_writs`]); no
/// policy and no people, since nothing is filed for them to rule on.
pub fn check_unfiled(
    tx: &Tx<'_>,
    writs: &TurnWrits,
    issuers: &[Issuer],
    call: &GateCall,
) -> Result<std::result::Result<(), Refusal>> {
    if let Some(e) = &call.unnormal {
        return Ok(Err(Refusal::Path(e.clone())));
    }
    Ok(check_writs(tx, writs, issuers, call)?.map_err(Refusal::Writ))
}

/// Checks `call` under every writ of `writs` and, when all allow it, debits it on each (in
/// the caller's transaction). A refusal is counted on the writ that refused.
pub fn check_writs(
    tx: &Tx<'_>,
    writs: &TurnWrits,
    issuers: &[Issuer],
    call: &GateCall,
) -> Result<std::result::Result<(), WritError>> {
    let now = crate::now_ms();
    let mut chains = Vec::with_capacity(writs.0.len());
    for id in &writs.0 {
        match writs::judge_call(
            tx,
            *id,
            issuers,
            &call.tool,
            call.effect,
            &call.arguments,
            now,
        )? {
            Ok(chain) => chains.push(chain),
            Err(e) => return Ok(Err(e)),
        }
    }
    // Two writs of a turn may share a parent: each writ is charged once.
    let mut charged = std::collections::BTreeSet::new();
    let once: Vec<_> = chains
        .into_iter()
        .flatten()
        .filter(|w| charged.insert(w.writ.body.id))
        .collect();
    writs::debit_call(tx, &once, now)?;
    Ok(Ok(()))
}

/// The first of `writs` that no longer allows `call` (revoked, expired, out of scope),
/// and why; budgets already spent are not charged again.
fn first_refusal(
    conn: &impl Db,
    writs: &TurnWrits,
    issuers: &[Issuer],
    call: &GateCall,
) -> Result<Option<(WritId, WritError)>> {
    let now = crate::now_ms();
    for id in &writs.0 {
        let (tool, args) = (&call.tool, &call.arguments);
        if let Err(e) = writs::recheck_call(conn, *id, issuers, tool, call.effect, args, now)? {
            return Ok(Some((*id, e)));
        }
    }
    Ok(None)
}

/// Holds a call checked earlier to its writs again, on the arguments that will run (a
/// person's edit, a resumed or re-run call): revoked, expired, or out of scope refuses it —
/// budgets already spent are not charged twice. A refusal is counted on the writ.
pub fn hold(
    tx: &Tx<'_>,
    writs: &TurnWrits,
    issuers: &[Issuer],
    call: &GateCall,
) -> Result<std::result::Result<(), WritError>> {
    match first_refusal(tx, writs, issuers, call)? {
        Some((id, e)) => {
            writs::count_refusal(tx, id)?;
            Ok(Err(e))
        }
        None => Ok(Ok(())),
    }
}

/// [`hold`] outside a transaction: a read-only verdict (nothing counted).
pub fn holds(
    conn: &impl Db,
    writs: &TurnWrits,
    issuers: &[Issuer],
    call: &GateCall,
) -> Result<std::result::Result<(), WritError>> {
    Ok(first_refusal(conn, writs, issuers, call)?.map_or(Ok(()), |(_, e)| Err(e)))
}

/// Why the gate refuses a call: each is recorded as the request's decision, in these words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// A writ the turn runs under does not allow it (or no longer does).
    #[error("refused by writ: {0}")]
    Writ(WritError),
    /// A path argument has no normal form (it climbs above its start, or holds a NUL).
    #[error("refused: {0}")]
    Path(PathError),
    /// The published policy denies it.
    #[error("denied by policy ({0})")]
    Policy(String),
}

impl Refusal {
    /// The rule its decision record names.
    pub fn rule(&self) -> String {
        match self {
            Refusal::Writ(e) => proto::text::excerpt(&format!("writ: {e}"), 512),
            Refusal::Path(e) => proto::text::excerpt(&format!("path: {e}"), 512),
            Refusal::Policy(rule) => rule.clone(),
        }
    }
}

/// How a call was ruled when it was filed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ruled {
    /// The published policy allows it: it may run now (marked started).
    Allowed {
        /// The rule that allowed it.
        rule: String,
    },
    /// Refused, and recorded as the request's decision.
    Refused(Refusal),
    /// Up to aegis, and to people when its policy asks.
    Pending,
}

/// A call to file: the turn it is in, who asks, and what rules it.
pub struct Filing<'a> {
    /// The claimed turn (hashi's) or the agent's open turn.
    pub claim: &'a Claim,
    /// The call's id in the turn.
    pub call_id: &'a CallId,
    /// The call.
    pub call: &'a GateCall,
    /// Who files it: `agent:hashi`, `agent:<name>`.
    pub author: &'a str,
    /// Metadata for the request and its decision records.
    pub metadata: BTreeMap<String, String>,
    /// The writs the turn runs under ([`writs_of_turn`]).
    pub writs: &'a TurnWrits,
    /// Who may grant writs (`[writs] issuers`).
    pub issuers: &'a [Issuer],
    /// The published policy as the caller read it (hash, policy): applied only if it is
    /// still the one in force.
    pub policy: Option<(&'a str, &'a Policy)>,
}

/// A filed request and how it was ruled.
#[derive(Debug, Clone)]
pub struct Filed {
    /// The request.
    pub approval: Approval,
    /// Its ruling so far.
    pub ruled: Ruled,
}

/// Who asks, where: what a policy's `session` and `author` rules see.
struct Context {
    session: String,
    author: String,
    on_behalf_of: Option<String>,
}

impl Context {
    fn of(conn: &impl Db, session: SessionId, turn: TurnId, author: &str) -> Result<Context> {
        Ok(Context {
            session: session.to_string(),
            author: author.to_owned(),
            on_behalf_of: crate::turn_submitter(conn, turn)?,
        })
    }
}

fn evaluate(policy: &Policy, call: &GateCall, ctx: &Context) -> Ruling {
    let args = Value::Object(call.arguments.clone());
    let mut ruling = policy.evaluate(&call.policy_call(&args, ctx));
    // A question is put to people whatever the policy allows: only a person answers it (a
    // policy may still deny it, or name who is asked).
    if call.tool == PERSON_ASK && ruling.verdict == Verdict::Allow {
        ruling.verdict = Verdict::Ask;
        ruling.rule = QUESTIONS_GO_TO_PEOPLE.to_owned();
    }
    ruling
}

/// The rule a question is asked of people by, whatever the policy allows.
pub const QUESTIONS_GO_TO_PEOPLE: &str = "questions-go-to-people";

/// A question that carries its own answer: refused when filed (only a person's signed edit
/// may add one).
fn self_answered(call: &GateCall) -> Option<Refusal> {
    (call.tool == PERSON_ASK && call.arguments.contains_key("answer"))
        .then(|| Refusal::Policy("a question is answered by a person, not by its asker".to_owned()))
}

/// What is wrong with a person's answer to a question, if anything: it is a string within
/// bounds, one of the choices when the question offers some.
fn answer_fault(args: &Map<String, Value>) -> Option<String> {
    let Some(Value::String(answer)) = args.get("answer") else {
        return Some("an answer to a question is its `answer` argument, a string".into());
    };
    if answer.len() > MAX_ANSWER_BYTES {
        return Some(format!("an answer is at most {MAX_ANSWER_BYTES} bytes"));
    }
    match args.get("choices").and_then(Value::as_array) {
        Some(c) if !c.is_empty() && !c.iter().any(|x| x.as_str() == Some(answer)) => {
            Some("the answer is not one of the question's choices".into())
        }
        _ => None,
    }
}

/// Files a call: its `approval.request` (arguments in normal form) in the turn's output
/// ledger, its writs checked and debited, and — when the path, a writ or the published
/// policy decides — its decision, all in the caller's transaction. An allowed call is
/// marked started under the claim's epoch. Only `ask` (or a replay's re-run, or no
/// published policy) is left to aegis.
pub fn file(tx: &Tx<'_>, f: &Filing<'_>) -> Result<Filed> {
    let call = f.call;
    let a = approvals::request_approval(
        tx,
        f.claim,
        f.call_id,
        &call.tool,
        &call.arguments,
        call.effect,
        f.author,
        f.metadata.clone(),
    )?;
    let hash = f.policy.map_or("none", |(h, _)| h);
    let refusal = match &call.unnormal {
        Some(e) => Some(Refusal::Path(e.clone())),
        None => check_writs(tx, f.writs, f.issuers, call)?
            .err()
            .map(Refusal::Writ)
            .or_else(|| self_answered(call)),
    };
    if let Some(r) = refusal {
        approvals::decide_by_policy(tx, &a, false, &r.rule(), hash, f.metadata.clone())?;
        return Ok(Filed {
            approval: a,
            ruled: Ruled::Refused(r),
        });
    }
    // A side effect a replay asks to repeat goes to people, whatever the policy.
    let rerun = f.claim.replay.is_some_and(|r| r.rerun) && call.effect != Effect::Read;
    let pending = Filed {
        approval: a.clone(),
        ruled: Ruled::Pending,
    };
    let Some((hash, policy)) = f.policy.filter(|_| !rerun) else {
        return Ok(pending);
    };
    // aegis may have published another policy since the caller read it.
    if crate::policy::current_hash(tx)?.as_deref() != Some(hash) {
        return Ok(pending);
    }
    let ctx = Context::of(tx, f.claim.session_id, f.claim.turn_id, f.author)?;
    let ruling = evaluate(policy, call, &ctx);
    let ruled = match ruling.verdict {
        Verdict::Ask => return Ok(pending),
        Verdict::Allow => {
            approvals::decide_by_policy(tx, &a, true, &ruling.rule, hash, f.metadata.clone())?;
            approvals::mark_started(tx, a.request_id, f.claim.epoch)?;
            Ruled::Allowed { rule: ruling.rule }
        }
        Verdict::Deny => {
            approvals::decide_by_policy(tx, &a, false, &ruling.rule, hash, f.metadata.clone())?;
            Ruled::Refused(Refusal::Policy(ruling.rule))
        }
    };
    Ok(Filed { approval: a, ruled })
}

/// The call a filed request asks to run, as the gate ruled on it (its stored arguments,
/// respelled in normal form should an older Kura have filed another spelling).
pub fn requested_call(conn: &impl Db, a: &Approval) -> Result<GateCall> {
    let content = approvals::request_content(conn, a.request_id)?;
    // Never ruled on as a call with no arguments: a path rule would not see its paths.
    let args = ApprovalRequestContent::read(&content)
        .ok_or_else(|| kura_store::StoreError::Corrupt {
            what: "approval request",
            id: a.request_id.to_string(),
            detail: "its stored content is not an approval request; nothing is ruled on".into(),
        })?
        .arguments;
    Ok(GateCall::new(&a.tool_name, a.effect, args))
}

/// What aegis's ruling on a pending request did: its new state, and a parked turn to wake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AegisRuling {
    /// Where the request is now (`asked`, `approved` or `denied`).
    pub state: ApprovalState,
    /// The rule that decided or asked.
    pub rule: String,
    /// A parked turn that can run again.
    pub woke: Option<TurnId>,
}

/// aegis's ruling on a pending request, by the policy it holds: its path and its turn's
/// writs held again (revoked or expired since it was filed refuses it), then the policy —
/// `ask` puts it to people until `deadline_ms`, `allow`/`deny` decide it.
pub fn rule_pending(
    tx: &Tx<'_>,
    a: &Approval,
    policy: &Policy,
    issuers: &[Issuer],
    deadline_ms: i64,
) -> Result<AegisRuling> {
    let call = requested_call(tx, a)?;
    let author = approvals::request_author(tx, a.request_id)?;
    let (hash, _) = policy
        .canonical()
        .map_err(|e| kura_store::StoreError::Invalid(e.to_string()))?;
    let refusal = match &call.unnormal {
        Some(e) => Some(Refusal::Path(e.clone())),
        None => hold(tx, &writs_of_turn(tx, a.turn_id)?, issuers, &call)?
            .err()
            .map(Refusal::Writ)
            .or_else(|| self_answered(&call)),
    };
    if let Some(r) = refusal {
        let rule = r.rule();
        let woke = approvals::decide_by_policy(tx, a, false, &rule, &hash, BTreeMap::new())?;
        return Ok(AegisRuling {
            state: ApprovalState::Denied,
            rule,
            woke,
        });
    }
    let ctx = Context::of(tx, a.session_id, a.turn_id, &author)?;
    let mut ruling = evaluate(policy, &call, &ctx);
    let content = approvals::request_content(tx, a.request_id)?;
    if ApprovalRequestContent::read(&content).is_some_and(|r| r.rerun_of.is_some()) {
        ruling = ruling.for_rerun();
    }
    let (state, woke) = match ruling.verdict {
        Verdict::Ask => {
            approvals::mark_asked(
                tx,
                a.request_id,
                &ruling.rule,
                ruling.approvers,
                deadline_ms,
            )?;
            (ApprovalState::Asked, None)
        }
        v => {
            let allow = v == Verdict::Allow;
            let woke =
                approvals::decide_by_policy(tx, a, allow, &ruling.rule, &hash, BTreeMap::new())?;
            let state = if allow {
                ApprovalState::Approved
            } else {
                ApprovalState::Denied
            };
            (state, woke)
        }
    };
    Ok(AegisRuling {
        state,
        rule: ruling.rule,
        woke,
    })
}

/// Why a person's edit of a call may not stand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EditRefusal {
    /// Not in normal form: the person signs exactly what runs.
    #[error("the edited arguments: {0}")]
    NotNormal(NotNormal),
    /// Outside a writ the call's turn runs under.
    #[error("the edited arguments are outside the call's writ: {0}")]
    Writ(WritError),
    /// Denied by policy.
    #[error("the edited arguments are denied by policy ({0})")]
    Policy(String),
}

/// The gate's ruling on a person's edit of request `a`'s arguments, exactly as they will
/// run: in normal form, within the turn's writs (counted when not), not denied by `policy`.
/// The ruling says which rule (and quorum) the edited call falls under.
pub fn rule_edit(
    tx: &Tx<'_>,
    a: &Approval,
    args: &Map<String, Value>,
    policy: &Policy,
    issuers: &[Issuer],
) -> Result<std::result::Result<Ruling, EditRefusal>> {
    if let Err(e) = path::check_normal_args(args) {
        return Ok(Err(EditRefusal::NotNormal(e)));
    }
    let call = GateCall::new(&a.tool_name, a.effect, args.clone());
    if let Err(e) = hold(tx, &writs_of_turn(tx, a.turn_id)?, issuers, &call)? {
        return Ok(Err(EditRefusal::Writ(e)));
    }
    if call.tool == PERSON_ASK
        && let Some(why) = answer_fault(args)
    {
        return Ok(Err(EditRefusal::Policy(why)));
    }
    let author = approvals::request_author(tx, a.request_id)?;
    let ctx = Context::of(tx, a.session_id, a.turn_id, &author)?;
    let ruling = evaluate(policy, &call, &ctx);
    if ruling.verdict == Verdict::Deny {
        return Ok(Err(EditRefusal::Policy(ruling.rule)));
    }
    Ok(Ok(ruling))
}

/// An agent takes back a call it declared and will not run (its hook stopped waiting): a
/// request nobody has decided is denied — `by` the agent, recorded as its decision in the
/// call's turn — so nobody approves a call that will never run. Returns where it stands.
pub fn withdraw(tx: &Tx<'_>, a: &Approval, by: &str) -> Result<ApprovalState> {
    if a.state.is_decided() {
        return Ok(a.state);
    }
    let rule = "withdrawn";
    let content = proto::content::ExpiryContent {
        request_id: a.request_id,
        outcome: proto::Outcome::Deny,
        rule: rule.to_owned(),
        by: by.to_owned(),
        reason: "withdrawn by its agent: it stopped waiting and did not run the call".into(),
    };
    let record = proto::record::NewRecord {
        record_type: proto::record::RecordType::ApprovalDecision,
        content: content.to_value(),
        author_id: "sys:kura".into(),
        metadata: BTreeMap::new(),
    };
    let rec = approvals::append_to_turn(tx, a.turn_id, &record)?;
    approvals::finalize(tx, a, ApprovalState::Denied, rule, rec.record_id)?;
    Ok(ApprovalState::Denied)
}

/// A person approves request `a` as it stands (or with the edit already bound to it): its
/// turn's writs are held to the arguments that will run. When they no longer allow it
/// (revoked, expired), the request is denied by the writ — recorded as its decision, the
/// refusal counted — and the refusal returned; nobody's approval can run it.
pub fn hold_approval(
    tx: &Tx<'_>,
    a: &Approval,
    issuers: &[Issuer],
    policy_hash: &str,
) -> Result<std::result::Result<(), (Refusal, Option<TurnId>)>> {
    let call = match &a.edited_arguments {
        Some(text) => match serde_json::from_str::<Map<String, Value>>(text) {
            Ok(args) => GateCall::new(&a.tool_name, a.effect, args),
            Err(e) => {
                return Err(kura_store::StoreError::Corrupt {
                    what: "approval",
                    id: a.request_id.to_string(),
                    detail: format!("edited arguments unreadable: {e}"),
                });
            }
        },
        None => requested_call(tx, a)?,
    };
    if let Err(e) = hold(tx, &writs_of_turn(tx, a.turn_id)?, issuers, &call)? {
        let r = Refusal::Writ(e);
        let woke =
            approvals::decide_by_policy(tx, a, false, &r.rule(), policy_hash, BTreeMap::new())?;
        return Ok(Err((r, woke)));
    }
    Ok(Ok(()))
}
