//! After a takeover or an approval: what to do with a call that has no result — run it if it
//! provably never started, re-run it if it only reads, else record that its outcome is
//! unknown (a side effect is never repeated).

use super::*;

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
        let answered: Vec<String> = history
            .iter()
            .filter(|r| r.record_type == RecordType::ToolResult)
            .filter_map(|r| {
                r.content
                    .get("call_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect();
        let dangling: Vec<Record> = history
            .iter()
            .filter(|r| r.record_type == RecordType::ToolCall)
            .filter(|r| {
                r.content
                    .get("call_id")
                    .and_then(Value::as_str)
                    .is_some_and(|id| !answered.iter().any(|a| a == id))
            })
            .cloned()
            .collect();
        for call in dangling {
            let name = call
                .content
                .get("tool_name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let call_id = call
                .content
                .get("call_id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let args = call
                .content
                .get("arguments")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let approval = approval_for_call(self.store.conn(), claim.turn_id, &call_id)?;
            let never_started = match &approval {
                Some(a) => a.started_epoch.is_none(),
                None => self.config.approvals != Approvals::Off,
            };
            match approval.as_ref().map(|a| a.state) {
                Some(ApprovalState::Pending | ApprovalState::Asked) => {
                    let id = approval.as_ref().map(|a| a.request_id).unwrap_or_default();
                    let parked = self.commit(claim, history, |tx| tx.park_turn(claim, id))?;
                    if !parked {
                        tracing::info!(turn_id = %claim.turn_id, request_id = %id,
                            "decided while parking; the turn is claimable again");
                    }
                    return Ok(CallEnd::Parked(id));
                }
                Some(ApprovalState::Denied) => {
                    let rule = approval
                        .as_ref()
                        .and_then(|a| a.rule.clone())
                        .unwrap_or_default();
                    self.record_result(
                        claim,
                        history,
                        &call_id,
                        Err(format!("denied by aegis ({rule})")),
                        Map::new(),
                    )?;
                    continue;
                }
                Some(ApprovalState::Approved) if never_started => {
                    let id = approval.as_ref().map(|a| a.request_id).unwrap_or_default();
                    let edited = approval.as_ref().and_then(|a| a.edited_arguments.clone());
                    self.run_approved(
                        claim,
                        history,
                        id,
                        &name,
                        &args,
                        &call_id,
                        edited.as_deref(),
                    )?;
                    continue;
                }
                None if never_started => {
                    // Approvals are on and the request was never filed: the tool never ran.
                    if let CallEnd::Parked(id) =
                        self.approve_and_run(claim, history, &name, &args, &call_id)?
                    {
                        return Ok(CallEnd::Parked(id));
                    }
                    continue;
                }
                _ => {}
            }
            let read_only = self
                .tools
                .get(&name)
                .is_some_and(|t| t.effect() == Effect::Read);
            let (outcome, status) = if read_only {
                self.flush(claim, history)?;
                tracing::info!(turn_id = %claim.turn_id, tool = %name, "re-running a read-only call the previous worker left unanswered");
                (self.run_tool(claim, &name, &args, &call_id), None)
            } else {
                tracing::warn!(turn_id = %claim.turn_id, tool = %name, "previous worker died during a side-effecting call; recording the outcome as unknown, not re-running");
                (Err(String::new()), Some(()))
            };
            let content = match (status, outcome) {
                (Some(()), _) => json!({
                    "status": ToolStatus::Unknown,
                    "error": "the worker running this call was lost; whether it took effect is unknown, and it was not run again",
                    "call_id": call_id,
                }),
                (None, Ok(v)) => json!({
                    "status": ToolStatus::Success, "result": fit(v, MAX_RESULT_BYTES), "call_id": call_id,
                }),
                (None, Err(e)) => json!({
                    "status": ToolStatus::Error, "error": excerpt(&e, MAX_RESULT_BYTES), "call_id": call_id,
                }),
            };
            let r = self.record(
                claim,
                RecordType::ToolResult,
                content,
                &[("resumed", "true".into())],
            );
            self.append(claim, history, r)?;
        }
        Ok(CallEnd::Done)
    }
}
