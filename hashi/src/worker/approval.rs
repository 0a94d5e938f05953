//! A call's way from its `tool.call` record to its result: the published policy at once, else
//! aegis and a person (the turn parks rather than hold a worker); a replay's recorded result
//! served instead of a side effect run again; the tool run and its `tool.result` recorded.

use super::*;
use kura_work::WorkTx;
use kura_work::gate::{self, GateCall};
use proto::RequestId;
use proto::content::Rerun;

/// What aegis (or the published policy) decided on a request a turn waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decided {
    /// The call may run: with the arguments people edited (canonical JSON), if they did.
    Approved {
        /// The rule it was decided under.
        #[allow(dead_code)]
        rule: String,
        /// Edited arguments, canonical JSON.
        edited: Option<String>,
    },
    /// The call must not run.
    Denied {
        /// The rule it was decided under.
        rule: String,
    },
}

/// A tool's outcome as a `tool.result`: what it returned, or why it failed, each cut to
/// what a record holds.
pub(super) fn result_content(
    outcome: Result<Value, ToolError>,
    call_id: &CallId,
) -> ToolResultContent {
    match outcome {
        Ok(v) => ToolResultContent::success(fit(v, MAX_RESULT_BYTES), call_id),
        Err(e) => ToolResultContent::error(excerpt(&e.to_string(), MAX_RESULT_BYTES), call_id),
    }
}

impl Worker {
    /// A replay's side-effecting call: never run again. The recorded result is served,
    /// naming the record it replays; a call the recorded turn did not make is refused.
    pub(super) fn serve_recorded(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        call_id: &CallId,
        recorded: Option<Record>,
    ) -> kura_store::Result<CallEnd> {
        let Some(r) = recorded else {
            let refusal = "a replay never runs a side effect again, and the recorded turn has no \
                           result for this call; not run";
            let why = ToolError::Refused(refusal.into());
            self.record_result(claim, history, call_id, Err(why))?;
            return Ok(CallEnd::Done);
        };
        // The recorded result is served as it was recorded, whatever its shape (it may have
        // been written by hand or by an older Kura): only the call it answers and the record
        // it replays are added.
        let mut content = r.content.as_object().cloned().unwrap_or_default();
        // The files move as the recorded call moved them, checked against where it began.
        if let Some(files) = &self.files
            && let Some(recorded) = kura_history::workspace::change_of(&r)
            && let Ok(ws) = self.tools.workspace(&claim.session_id.to_string())
            && let Some(followed) = files.follow(&ws, &recorded)
            && let Ok(v) = serde_json::to_value(followed)
        {
            content.insert("workspace".into(), v);
        }
        content.insert("call_id".into(), Value::String(call_id.to_string()));
        content.insert("replayed".into(), Value::String(r.record_id.to_string()));
        let served = self.record(
            claim,
            RecordType::ToolResult,
            Value::Object(content),
            &[("replays", r.record_id.to_string())],
        );
        self.append(claim, history, served)?;
        Ok(CallEnd::Done)
    }

    /// The part of a call after its `tool.call` record: the gate (writ, policy, people),
    /// then the run and its result.
    pub(super) fn approve_and_run(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        name: &str,
        arguments: &Map<String, Value>,
        call_id: &CallId,
    ) -> kura_store::Result<CallEnd> {
        let call = GateCall::new(
            name,
            self.tools.effect_of(name, arguments),
            arguments.clone(),
        );
        let offered = match self.tools.check(name) {
            Ok(_) if !self.role.allows(name) => Err(format!(
                "role {} may not call {name:?} (its [roster] tools)",
                self.role.name
            )),
            Ok(tool) => Ok(tool),
            Err(Refusal::Unknown) => Err(format!("unknown tool {name:?}")),
            Err(Refusal::Denied(rule)) => Err(format!("denied by policy ({rule})")),
        };
        let outcome = match offered {
            Ok(_) if self.config.approvals == Approvals::Off => {
                // No requests are filed: the gate's path and writ checks, in the call's commit.
                let (writs, issuers) = (self.writs.clone(), self.issuers.clone());
                let verdict = self.commit(claim, history, |tx| {
                    gate::check_unfiled(tx, &writs, &issuers, &call)
                })?;
                if let Err(refusal) = verdict {
                    return self.refused(claim, history, call_id, refusal);
                }
                if claim.replay.is_some_and(|r| r.rerun) && call.effect() != Effect::Read {
                    Err(ToolError::Refused(
                        "a re-run of a side effect needs a person, and this worker has approvals \
                         off ([worker] approvals); not run"
                            .into(),
                    ))
                } else {
                    self.run_tool(claim, name, call.arguments(), call_id)
                }
            }
            Ok(_) => match self.ask_approval(claim, history, &call, call_id)? {
                Ok(end) => return Ok(end),
                Err(refusal) => Err(refusal),
            },
            Err(refusal) => Err(ToolError::Refused(refusal)),
        };
        self.record_result(claim, history, call_id, outcome)?;
        Ok(CallEnd::Done)
    }

    /// Records why the gate refused the call (a `sys.error`, then a refused `tool.result`);
    /// the refusal was counted and recorded in the commit that ruled on it.
    fn refused(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        call_id: &CallId,
        refusal: gate::Refusal,
    ) -> kura_store::Result<CallEnd> {
        let refusal = self.secrets.scrub(&refusal.to_string()).into_owned();
        tracing::warn!(turn_id = %claim.turn_id, writs = ?self.writs.ids(), %refusal, "call refused by the gate");
        let error = TextContent::new(&refusal).to_value();
        let e = self.record(claim, RecordType::SysError, error, &[]);
        self.append(claim, history, e)?;
        self.record_result(claim, history, call_id, Err(ToolError::Refused(refusal)))?;
        Ok(CallEnd::Done)
    }

    /// Files the call at the gate and has it decided: by its path, its writs or the
    /// published policy in the same commit, else by aegis (briefly awaited). Runs an
    /// approved call (`Ok`), says why a denied one is not run (`Err`), or parks the turn
    /// when people must decide.
    fn ask_approval(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        call: &GateCall,
        call_id: &CallId,
    ) -> kura_store::Result<Result<CallEnd, ToolError>> {
        let metadata = self
            .record(claim, RecordType::ApprovalRequest, Value::Null, &[])
            .metadata;
        let author = self.config.author.clone();
        let published = self.published_policy()?;
        let (writs, issuers) = (self.writs.clone(), self.issuers.clone());
        // One commit: what the model said, the call, its writs' check and debit, the
        // request — and its ruling when the path, a writ or the published policy decides.
        let filed = self.commit(claim, history, |tx| {
            gate::file(
                tx,
                &gate::Filing {
                    claim,
                    call_id,
                    call,
                    author: &author,
                    metadata,
                    writs: &writs,
                    issuers: &issuers,
                    policy: published.as_ref().map(|(h, p)| (h.as_str(), &**p)),
                },
            )
        })?;
        let request = filed.approval.request_id;
        let decided = match filed.ruled {
            gate::Ruled::Allowed { .. } => {
                let outcome = self.run_tool(claim, call.tool(), call.arguments(), call_id);
                self.record_result(claim, history, call_id, outcome)?;
                return Ok(Ok(CallEnd::Done));
            }
            gate::Ruled::Refused(r @ gate::Refusal::Policy(_)) => {
                return Ok(Err(ToolError::Refused(r.to_string())));
            }
            gate::Ruled::Refused(r) => return self.refused(claim, history, call_id, r).map(Ok),
            gate::Ruled::Pending => self.await_decision(request)?,
            _ => None,
        };
        let args = call.arguments();
        match decided {
            Some(Decided::Approved { edited, .. }) => self
                .run_approved(
                    claim,
                    history,
                    request,
                    call.tool(),
                    args,
                    call_id,
                    edited.as_deref(),
                )
                .map(Ok),
            Some(Decided::Denied { rule }) => {
                Ok(Err(ToolError::Refused(format!("denied by aegis ({rule})"))))
            }
            None => {
                let parked = self.commit(claim, history, |tx| tx.park_turn(claim, request))?;
                if !parked {
                    tracing::info!(turn_id = %claim.turn_id, request_id = %request,
                        "decided while parking; the turn is claimable again");
                }
                Ok(Ok(CallEnd::Parked(request)))
            }
        }
    }

    /// Runs a call people (or policy) approved: with the arguments they edited, if they
    /// did — the decision record that binds them is already in the ledger — else as asked.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_approved(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        request_id: RequestId,
        name: &str,
        arguments: &Map<String, Value>,
        call_id: &CallId,
        edited: Option<&str>,
    ) -> kura_store::Result<CallEnd> {
        let edit = self.edited_arguments(edited);
        // People ruled on the call's effect class as requested; hashi also classes a call by
        // its arguments (`[[tools.irreversible]]`), so an edit may not raise it.
        if let Ok(Some(args)) = &edit {
            let (asked, edited) = (
                self.tools.effect_of(name, arguments),
                self.tools.effect_of(name, args),
            );
            if edited.rank() > asked.rank() {
                let why = format!(
                    "the edit raises the call's effect class from {asked} to {edited}: people \
                     approved a {asked} call; not run (ask for it as a call of its own)"
                );
                let content = result_content(Err(ToolError::Refused(why)), call_id);
                self.append_result(claim, history, content)?;
                return Ok(CallEnd::Done);
            }
        }
        // Decided later than it was filed: the gate holds the turn's writs to what will run
        // (revoked or expired meanwhile, or an edit outside their scope, and it does not).
        let runs = match &edit {
            Ok(Some(a)) => a.clone(),
            _ => arguments.clone(),
        };
        let call = GateCall::new(name, self.tools.effect_of(name, &runs), runs);
        let (writs, issuers) = (self.writs.clone(), self.issuers.clone());
        let held = self.commit(claim, history, |tx| {
            let held = gate::hold(tx, &writs, &issuers, &call)?;
            if held.is_ok() {
                tx.mark_started(request_id, claim.epoch)?;
            }
            Ok(held)
        })?;
        if let Err(e) = held {
            return self.refused(claim, history, call_id, gate::Refusal::Writ(e));
        }
        let (outcome, edit) = match edit {
            Ok(Some(args)) => (self.run_tool(claim, name, &args, call_id), Some(args)),
            // What was held to the writs, in normal form, is what runs.
            Ok(None) => (self.run_tool(claim, name, call.arguments(), call_id), None),
            Err(why) => (Err(why), None),
        };
        let mut content = result_content(outcome, call_id);
        // What ran, beside the call the model asked for: the ledger shows both.
        content.arguments_edited = edit;
        if claim.replay.is_some_and(|r| r.rerun) {
            // A re-run is a new run: its result names the approval it ran under, so it is a
            // record of its own, never the recorded run's (identical records are stored once).
            content.rerun = Some(Rerun {
                approval_request: request_id,
            });
        }
        if name == proto::content::PERSON_ASK && content.status == proto::ToolStatus::Success {
            // The answer is the person's word, authored by whoever signed it.
            let by = kura_work::approvals::votes(&self.store, request_id)?
                .into_iter()
                .find(|(_, v)| v == "approve")
                .map(|(who, _)| who);
            if let Some(who) = by {
                let mut result =
                    self.record(claim, RecordType::ToolResult, content.to_value(), &[]);
                result.author_id = if who.contains(':') {
                    who
                } else {
                    format!("user:{who}")
                };
                return self.append(claim, history, result).map(|()| CallEnd::Done);
            }
        }
        self.append_result(claim, history, content)?;
        Ok(CallEnd::Done)
    }

    /// Edited arguments as the tool will take them. They must already be in normal form:
    /// aegis ruled on exactly this spelling, so a path hashi would respell is refused.
    pub(super) fn edited_arguments(
        &self,
        edited: Option<&str>,
    ) -> Result<Option<Map<String, Value>>, ToolError> {
        let Some(text) = edited else { return Ok(None) };
        let args: Map<String, Value> = serde_json::from_str(text).map_err(|e| {
            ToolError::Arguments(format!("the edited arguments cannot be read: {e}"))
        })?;
        if let Err(e) = kura_policy::path::check_normal_args(&args) {
            return Err(ToolError::Refused(format!(
                "the edited arguments: {}; not run",
                excerpt(&e.to_string(), 512)
            )));
        }
        Ok(Some(args))
    }

    /// Asks aegis and waits (briefly) for allow/deny; `None` when it is up to people (or
    /// aegis did not answer in time): the turn is then parked rather than holding a worker.
    pub(super) fn await_decision(
        &mut self,
        request_id: RequestId,
    ) -> kura_store::Result<Option<Decided>> {
        // With NATS down nobody can be rung: look once (aegis may already have decided by
        // polling) and park at once, so the worker moves on instead of sitting out the wait
        // for every call — aegis decides parked requests on its next poll.
        let connected = self.bus.is_connected();
        let wait = if connected {
            Duration::from_millis(self.config.approval_wait_ms)
        } else {
            Duration::ZERO
        };
        let answered = connected
            && self.bus.ring_and_wait(
                self.bus.subjects.tool_approve(),
                &ToolApprove { request_id },
                wait,
            );
        if connected && !answered {
            tracing::debug!(%request_id, "aegis did not answer in time; parking");
        }
        // aegis answers after it has recorded its ruling, so one look tells: decided, or up
        // to people (or aegis is away) — then the turn parks and frees this worker.
        let a = approval(&self.store, request_id)?.ok_or_else(|| StoreError::Corrupt {
            what: "approval",
            id: request_id.to_string(),
            detail: "vanished while its turn waited".into(),
        })?;
        Ok(match a.state {
            ApprovalState::Approved => Some(Decided::Approved {
                rule: a.rule.unwrap_or_default(),
                edited: a.edited_arguments,
            }),
            ApprovalState::Denied => Some(Decided::Denied {
                rule: a.rule.unwrap_or_default(),
            }),
            ApprovalState::Asked | ApprovalState::Pending => None,
        })
    }

    /// Runs the tool; a side effect between two records of the workspace's tree (its objects
    /// durable before the result that names them), kept for the result in `changed`.
    pub(super) fn run_tool(
        &mut self,
        claim: &Claim,
        name: &str,
        arguments: &Map<String, Value>,
        call_id: &CallId,
    ) -> Result<Value, ToolError> {
        let tool = self
            .tools
            .get(name)
            .ok_or_else(|| ToolError::Refused(format!("unknown tool {name:?}")))?;
        let ws = self.tools.workspace(&claim.session_id.to_string())?;
        let files = self
            .files
            .clone()
            .filter(|_| self.tools.effect_of(name, arguments) != Effect::Read);
        let Some(files) = files else {
            return tool.run(&ws.for_call(call_id), arguments);
        };
        let (before, held) = files.before(&ws)?;
        let outcome = tool.run(&ws.clone().for_call(call_id), arguments);
        self.changed = files.after(&ws, before, claim.output_ledger_id);
        drop(held);
        outcome
    }

    pub(super) fn record_result(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        call_id: &CallId,
        outcome: Result<Value, ToolError>,
    ) -> kura_store::Result<()> {
        // Whatever a tool returned, the record fits: a result too big to store would fail
        // this turn on every attempt.
        self.append_result(claim, history, result_content(outcome, call_id))
    }

    /// Stages a `tool.result`.
    pub(super) fn append_result(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        content: ToolResultContent,
    ) -> kura_store::Result<()> {
        let result = self.record(claim, RecordType::ToolResult, content.to_value(), &[]);
        self.append(claim, history, result)
    }
}
