//! After a takeover or an approval: what to do with a call that has no result — run it if it
//! provably never started, re-run it if it only reads, else record that its outcome is
//! unknown (a side effect is never repeated).

use super::*;
use kura_work::WorkTx;

/// A `tool.call` of this turn with no `tool.result`: what it asked for.
struct Dangling {
    name: String,
    call_id: CallId,
    args: Map<String, Value>,
}

/// The calls in `history` that have a `call_id` no result answers, in order.
fn dangling_calls(history: &[Record]) -> Vec<Dangling> {
    let answered: Vec<&str> = history
        .iter()
        .filter(|r| r.record_type == RecordType::ToolResult)
        .filter_map(|r| call_id_of(&r.content))
        .collect();
    history
        .iter()
        .filter(|r| r.record_type == RecordType::ToolCall)
        .filter(|r| call_id_of(&r.content).is_some_and(|id| !answered.contains(&id)))
        .map(|r| {
            let call = ToolCallContent::read(&r.content);
            Dangling {
                name: call
                    .as_ref()
                    .map(|c| c.tool_name.clone())
                    .unwrap_or_default(),
                call_id: CallId::from(call_id_of(&r.content).unwrap_or("")),
                args: call.map(|c| c.arguments).unwrap_or_default(),
            }
        })
        .collect()
}

/// What a worker lost during a side effect leaves on record: nobody knows what happened.
const LOST: &str = "the worker running this call was lost; whether it took effect is unknown, \
                    and it was not run again";

impl Worker {
    /// After a takeover or an approval: a call with no result runs if it provably never
    /// started (its approval came through and nobody began it, or approvals are on and it
    /// was never even requested); otherwise it is re-run only if it only reads, and a write
    /// or external call gets a result saying its outcome is unknown — never repeated.
    pub(super) fn resolve_dangling_calls(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
    ) -> kura_store::Result<CallEnd> {
        for call in dangling_calls(history) {
            if let CallEnd::Parked(id) = self.resolve_call(claim, history, &call)? {
                return Ok(CallEnd::Parked(id));
            }
        }
        Ok(CallEnd::Done)
    }

    /// One dangling call: by its approval's state if it has one, else re-run or recorded
    /// as unknown.
    fn resolve_call(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        call: &Dangling,
    ) -> kura_store::Result<CallEnd> {
        let (name, call_id, args) = (&call.name, &call.call_id, &call.args);
        let approval = approval_for_call(&self.store, claim.turn_id, call_id)?;
        let never_started = match &approval {
            Some(a) => a.started_epoch.is_none(),
            None => self.config.approvals != Approvals::Off,
        };
        match approval.as_ref() {
            Some(a) if matches!(a.state, ApprovalState::Pending | ApprovalState::Asked) => {
                let id = a.request_id;
                let parked = self.commit(claim, history, |tx| tx.park_turn(claim, id))?;
                if !parked {
                    tracing::info!(turn_id = %claim.turn_id, request_id = %id,
                        "decided while parking; the turn is claimable again");
                }
                return Ok(CallEnd::Parked(id));
            }
            Some(a) if a.state == ApprovalState::Denied => {
                let rule = a.rule.clone().unwrap_or_default();
                self.record_result(
                    claim,
                    history,
                    call_id,
                    Err(ToolError::Refused(format!("denied by aegis ({rule})"))),
                )?;
                return Ok(CallEnd::Done);
            }
            Some(a) if a.state == ApprovalState::Approved && never_started => {
                let (id, edited) = (a.request_id, a.edited_arguments.clone());
                self.run_approved(claim, history, id, name, args, call_id, edited.as_deref())?;
                return Ok(CallEnd::Done);
            }
            None if never_started => {
                // Approvals are on and the request was never filed: the tool never ran.
                return self.approve_and_run(claim, history, name, args, call_id);
            }
            _ => {}
        }
        self.rerun_read_or_record_lost(claim, history, call)?;
        Ok(CallEnd::Done)
    }

    /// A started call with no result: re-run if it only reads, else its outcome is unknown.
    fn rerun_read_or_record_lost(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        call: &Dangling,
    ) -> kura_store::Result<()> {
        let read_only = self
            .tools
            .get(&call.name)
            .is_some_and(|t| t.effect() == Effect::Read);
        // A read re-run is a new run: its writ is held to it again (revoked meanwhile, or a
        // refusal the dead worker never recorded).
        // Held and run in the one normal form.
        let again = kura_work::gate::GateCall::new(&call.name, Effect::Read, call.args.clone());
        let refused = if read_only {
            kura_work::gate::holds(&self.store, &self.writs, &self.issuers, &again)?.err()
        } else {
            None
        };
        let content = if let Some(e) = refused {
            ToolResultContent::error(format!("refused by writ: {e}"), &call.call_id)
        } else if read_only {
            self.flush(claim, history)?;
            tracing::info!(turn_id = %claim.turn_id, tool = %call.name, "re-running a read-only call the previous worker left unanswered");
            let outcome = self.run_tool(claim, &call.name, again.arguments(), &call.call_id);
            approval::result_content(outcome, &call.call_id)
        } else {
            tracing::warn!(turn_id = %claim.turn_id, tool = %call.name, "previous worker died during a side-effecting call; recording the outcome as unknown, not re-running");
            let mut lost = ToolResultContent::unknown(LOST, &call.call_id);
            // What the files did across it is known, if not who did it.
            if let Some(files) = &self.files
                && let Ok(ws) = self.tools.workspace(&claim.session_id.to_string())
            {
                lost.workspace = files.across_lost(&ws, claim.output_ledger_id);
            }
            lost
        };
        let r = self.record(
            claim,
            RecordType::ToolResult,
            content.to_value(),
            &[("resumed", "true".into())],
        );
        self.append(claim, history, r)
    }
}
