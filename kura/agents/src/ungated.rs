//! A call that ran without being declared (the agent's PreToolUse hook was missing, killed or
//! timed out): recorded as the agent reported it, marked ungated, with its result — once per
//! call, however often it is noticed. Nobody ruled on it; `kura status`, the console and
//! aegis's notices raise the alarm from these records.

use kura_work::agents::agent_claim;
use proto::agent::{Recorded, ReportUngated};
use proto::content::{ToolResultContent, call_id_of};
use proto::record::{Content, RecordType};
use proto::{CallId, ToolCallContent};
use sha2::{Digest, Sha256};

use crate::ops::{Gateway, store_error};
use crate::{Caller, GatewayError};

/// The most of an ungated call's result recorded (as an agent's own results are).
const MAX_RESULT: usize = 32 * 1024;

/// The most of its arguments recorded (past it: their size and hash).
const MAX_ARGUMENTS: usize = 64 * 1024;

/// Where an ungated call can be noticed.
pub const NOTICED_BY: [&str; 2] = ["PostToolUse", "transcript"];

impl Gateway {
    /// Records a call that already ran undeclared, and its result.
    pub fn report_ungated(
        &self,
        caller: &Caller,
        req: ReportUngated,
    ) -> Result<Recorded, GatewayError> {
        if req.tool.is_empty() || req.tool.len() > 200 {
            return Err(GatewayError::Invalid(
                "tool is a name of 1-200 bytes".into(),
            ));
        }
        if req.agent_call_id.is_empty() || req.agent_call_id.len() > 200 {
            return Err(GatewayError::Invalid(
                "agent_call_id is the agent's id for the call, 1-200 bytes".into(),
            ));
        }
        if !NOTICED_BY.contains(&req.noticed_by.as_str()) {
            return Err(GatewayError::Invalid(format!(
                "noticed_by is one of {NOTICED_BY:?}"
            )));
        }
        // The agent's id only through its hash: the same call reported twice pairs the same.
        let digest = hex::encode(Sha256::digest(req.agent_call_id.as_bytes()));
        let call_id = CallId::new(format!("ungated-{}", &digest[..32]));
        let author = caller.author();
        // Reported before (noticed twice): the record there is the answer, and costs the
        // agent none of its rate.
        let known = self.with_store(|store| {
            let claim = agent_claim(store, &author, req.turn_id).map_err(store_error)?;
            Ok(store
                .hydrate(claim.output_ledger_id)
                .map_err(store_error)?
                .into_iter()
                .enumerate()
                .find(|(_, r)| {
                    r.record_type == RecordType::ToolCall
                        && call_id_of(&r.content) == Some(call_id.as_str())
                }))
        })?;
        if let Some((position, r)) = known {
            return Ok(Recorded {
                record_id: r.record_id,
                hash: r.hash,
                position: position as u64,
            });
        }
        // Arguments past what a record should hold (a large file's Write) are named by size
        // and hash: the call is still on record, and still an alarm.
        let text = serde_json::to_string(&req.arguments).unwrap_or_default();
        let (arguments, omitted) = if text.len() > MAX_ARGUMENTS {
            let sha256 = hex::encode(Sha256::digest(text.as_bytes()));
            let o = proto::content::OmittedArguments {
                bytes: text.len() as u64,
                sha256,
            };
            (serde_json::Map::new(), Some(o))
        } else {
            (req.arguments.clone(), None)
        };
        let mut call = ToolCallContent::new(req.tool.clone(), arguments, &call_id);
        call.arguments_omitted = omitted;
        call.ungated = Some(format!(
            "ran without being declared to Kura (noticed by {}): the agent's PreToolUse hook was \
             missing, killed or timed out, so nobody ruled on it",
            req.noticed_by
        ));
        let call = self.record(caller, RecordType::ToolCall, Content::ToolCall(call))?;
        let result = match req.result {
            Some(v) => {
                ToolResultContent::success(proto::text::bounded_json(v, MAX_RESULT), &call_id)
            }
            None => {
                ToolResultContent::unknown("the agent did not report what it returned", &call_id)
            }
        };
        let result = self.record(caller, RecordType::ToolResult, Content::ToolResult(result))?;
        self.with_store(|store| {
            let claim = agent_claim(store, &author, req.turn_id).map_err(store_error)?;
            let out = claim.output_ledger_id;
            let a = kura_work::fenced(store, &claim, |tx| {
                let a = tx.append(out, &call)?;
                tx.append(out, &result)?;
                Ok(a)
            })
            .map_err(store_error)?;
            tracing::warn!(agent = %caller.agent, tool = %req.tool, record_id = %a.record.record_id, "a tool call ran ungated");
            Ok(Recorded {
                record_id: a.record.record_id,
                hash: a.record.hash,
                position: a.position,
            })
        })
    }
}
