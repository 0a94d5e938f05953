//! A call's way from its `tool.call` record to its result: the published policy at once, else
//! aegis and a person (the turn parks rather than hold a worker); a replay's recorded result
//! served instead of a side effect run again; the tool run and its `tool.result` recorded.

use super::*;
use kura_work::WorkTx;
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
    call_id: &str,
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
        call_id: &str,
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
        content.insert("call_id".into(), Value::String(call_id.to_owned()));
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

    /// The part of a call after its `tool.call` record: writ, policy, approval, run, result.
    pub(super) fn approve_and_run(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        name: &str,
        arguments: &Map<String, Value>,
        call_id: &str,
    ) -> kura_store::Result<CallEnd> {
        // The writ first: before the static policy, before aegis, before anything runs —
        // checked and debited in the commit that makes the call durable (and, on the common
        // path, files its approval request: one fsync, not two).
        let writ = self.writ_check(name, arguments);
        let checked = match self.tools.check(name) {
            Ok(_) if !self.role.allows(name) => Err(format!(
                "role {} may not call {name:?} (its [roster] tools)",
                self.role.name
            )),
            Ok(tool) => Ok(tool),
            Err(Refusal::Unknown) => Err(format!("unknown tool {name:?}")),
            Err(Refusal::Denied(rule)) => Err(format!("denied by policy ({rule})")),
        };
        let outcome = match checked {
            Ok(_) if self.config.approvals == Approvals::Off => {
                let rerun = claim.replay.is_some_and(|r| r.rerun)
                    && self.tools.effect_of(name, arguments) != Effect::Read;
                let verdict = self.commit(claim, history, |tx| writ.check(tx))?;
                if let Err(e) = verdict {
                    return self.refused_by_writ(claim, history, call_id, &writ, e);
                }
                if rerun {
                    Err(ToolError::Refused(
                        "a re-run of a side effect needs a person, and this worker has approvals \
                         off ([worker] approvals); not run"
                            .into(),
                    ))
                } else {
                    self.run_tool(claim, name, arguments, call_id)
                }
            }
            Ok(_) => match self.ask_approval(claim, history, &writ, call_id)? {
                Ok(end) => return Ok(end),
                Err(refusal) => Err(refusal),
            },
            Err(refusal) => {
                let verdict = self.commit(claim, history, |tx| writ.check(tx))?;
                if let Err(e) = verdict {
                    return self.refused_by_writ(claim, history, call_id, &writ, e);
                }
                Err(ToolError::Refused(refusal))
            }
        };
        self.record_result(claim, history, call_id, outcome)?;
        Ok(CallEnd::Done)
    }

    /// This call under the turn's writ, to be checked inside a commit.
    fn writ_check<'a>(&self, name: &'a str, arguments: &'a Map<String, Value>) -> WritCheck<'a> {
        WritCheck {
            writ: self.writ.clone(),
            issuers: self.issuers.clone(),
            name,
            effect: self.tools.effect_of(name, arguments),
            arguments,
        }
    }

    /// Records why the writ refused the call (a `sys.error`, then a refused `tool.result`);
    /// the refusal was counted in the commit that checked it.
    fn refused_by_writ(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        call_id: &str,
        writ: &WritCheck<'_>,
        e: kura_policy::writ::WritError,
    ) -> kura_store::Result<CallEnd> {
        let (tool, error) = (
            self.secrets.scrub(writ.name),
            self.secrets.scrub(&e.to_string()).into_owned(),
        );
        tracing::warn!(turn_id = %claim.turn_id, writ = ?writ.writ, tool = %excerpt(&tool, 256), %error, "call refused by its writ");
        let refusal = format!("refused by writ: {e}");
        let error = TextContent::new(&refusal).to_value();
        let e = self.record(claim, RecordType::SysError, error, &[]);
        self.append(claim, history, e)?;
        self.record_result(claim, history, call_id, Err(ToolError::Refused(refusal)))?;
        Ok(CallEnd::Done)
    }

    /// Files the approval request and has it decided: by the published policy in the same
    /// commit, else by aegis (briefly awaited). Runs an approved call (`Ok`), says why a
    /// denied one is not run (`Err`), or parks the turn when people must decide.
    fn ask_approval(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        writ: &WritCheck<'_>,
        call_id: &str,
    ) -> kura_store::Result<Result<CallEnd, ToolError>> {
        let (name, arguments, effect) = (writ.name, writ.arguments, writ.effect);
        let meta = self
            .record(claim, RecordType::ApprovalRequest, Value::Null, &[])
            .metadata;
        let author = self.config.author.clone();
        // A side effect a replay asks to repeat goes to people, whatever the policy.
        let rerun = claim.replay.is_some_and(|r| r.rerun) && effect != Effect::Read;
        let published = if rerun {
            None
        } else {
            self.published_policy()?
        };
        let session = claim.session_id.to_string();
        // One commit: what the model said, the call, its writ's check and debit, the
        // request — and, when the published policy allows or denies it, the decision (and
        // for an allowed call the mark that it is starting). Only `ask` needs aegis and a
        // person.
        let filed = self.commit(claim, history, |tx| {
            if let Err(e) = writ.check(tx)? {
                return Ok(Err(e));
            }
            let a = tx.request_approval(
                claim,
                call_id,
                name,
                arguments,
                effect,
                &author,
                meta.clone(),
            )?;
            let Some((hash, p)) = published else {
                return Ok(Ok((a, None)));
            };
            // aegis may have published another policy since it was read.
            if policy::current_hash(tx)?.as_deref() != Some(hash.as_str()) {
                return Ok(Ok((a, None)));
            }
            let args = Value::Object(arguments.clone());
            let submitter = kura_work::turn_submitter(tx, claim.turn_id)?;
            let ruling = p.evaluate(&kura_policy::Call {
                tool: name,
                effect: effect.as_str(),
                args: &args,
                session: &session,
                author: &author,
                on_behalf_of: submitter.as_deref(),
            });
            let allow = match ruling.verdict {
                Verdict::Ask => return Ok(Ok((a, None))),
                v => v == Verdict::Allow,
            };
            tx.decide_by_policy(&a, allow, &ruling.rule, &hash, meta)?;
            if allow {
                tx.mark_started(a.request_id, claim.epoch)?;
            }
            Ok(Ok((a, Some((allow, ruling.rule)))))
        })?;
        let (request, ruled) = match filed {
            Ok(filed) => filed,
            Err(e) => {
                return self
                    .refused_by_writ(claim, history, call_id, writ, e)
                    .map(Ok);
            }
        };
        let decided = match ruled {
            Some((true, _)) => {
                let outcome = self.run_tool(claim, name, arguments, call_id);
                self.record_result(claim, history, call_id, outcome)?;
                return Ok(Ok(CallEnd::Done));
            }
            Some((false, rule)) => Some(Decided::Denied { rule }),
            None => self.await_decision(request.request_id)?,
        };
        match decided {
            Some(Decided::Approved { edited, .. }) => self
                .run_approved(
                    claim,
                    history,
                    request.request_id,
                    name,
                    arguments,
                    call_id,
                    edited.as_deref(),
                )
                .map(Ok),
            Some(Decided::Denied { rule }) => {
                Ok(Err(ToolError::Refused(format!("denied by aegis ({rule})"))))
            }
            None => {
                let parked =
                    self.commit(claim, history, |tx| tx.park_turn(claim, request.request_id))?;
                if !parked {
                    tracing::info!(turn_id = %claim.turn_id, request_id = %request.request_id,
                        "decided while parking; the turn is claimable again");
                }
                Ok(Ok(CallEnd::Parked(request.request_id)))
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
        call_id: &str,
        edited: Option<&str>,
    ) -> kura_store::Result<CallEnd> {
        // Decided later than it was checked: the writ is held to it again — revoked or
        // expired meanwhile, or arguments an approver edited outside its scope, and it
        // does not run.
        if let Some(writ) = self.writ.clone() {
            let args = match self.edited_arguments(edited) {
                Ok(Some(a)) => a,
                _ => arguments.clone(),
            };
            let effect = self.tools.effect_of(name, &args);
            let verdict = kura_work::writs::recheck_call(
                &self.store,
                &writ,
                &self.issuers,
                name,
                effect,
                &args,
                now_ms(),
            )?;
            if let Err(e) = verdict {
                self.commit(claim, history, |tx| {
                    kura_work::writs::count_refusal(tx, &writ)
                })?;
                let refusal = format!("refused by writ: {e}");
                let error = TextContent::new(&refusal).to_value();
                let rec = self.record(claim, RecordType::SysError, error, &[]);
                self.append(claim, history, rec)?;
                self.record_result(claim, history, call_id, Err(ToolError::Refused(refusal)))?;
                return Ok(CallEnd::Done);
            }
        }
        self.commit(claim, history, |tx| {
            tx.mark_started(request_id, claim.epoch)
        })?;
        let (outcome, edit) = match self.edited_arguments(edited) {
            Ok(Some(args)) => (self.run_tool(claim, name, &args, call_id), Some(args)),
            Ok(None) => (self.run_tool(claim, name, arguments, call_id), None),
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
        let mut normal = args.clone();
        self.tools.normalize_args(&mut normal);
        if normal != args {
            return Err(ToolError::Refused(format!(
                "the edited arguments are not in normal form (it is {}); not run",
                excerpt(&Value::Object(normal).to_string(), 512)
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

    pub(super) fn run_tool(
        &self,
        claim: &Claim,
        name: &str,
        arguments: &Map<String, Value>,
        call_id: &str,
    ) -> Result<Value, ToolError> {
        let tool = self
            .tools
            .get(name)
            .ok_or_else(|| ToolError::Refused(format!("unknown tool {name:?}")))?;
        self.tools
            .workspace(&claim.session_id.to_string())
            .and_then(|ws| tool.run(&ws.for_call(call_id), arguments))
    }

    pub(super) fn record_result(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        call_id: &str,
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

/// One call under the turn's writ (if it has one), checked and debited inside the commit
/// that makes the call durable.
pub(super) struct WritCheck<'a> {
    writ: Option<String>,
    issuers: Arc<[kura_policy::writ::Issuer]>,
    name: &'a str,
    effect: Effect,
    arguments: &'a Map<String, Value>,
}

impl WritCheck<'_> {
    /// The writ's verdict on the call (a refusal counted on it); no writ, no check.
    fn check(
        &self,
        tx: &kura_store::Tx<'_>,
    ) -> kura_store::Result<Result<(), kura_policy::writ::WritError>> {
        let Some(writ) = &self.writ else {
            return Ok(Ok(()));
        };
        kura_work::writs::check_call(
            tx,
            writ,
            &self.issuers,
            self.name,
            self.effect,
            self.arguments,
            now_ms(),
        )
    }
}
