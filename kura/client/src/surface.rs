//! The agent surface as a client beside an outside agent uses it: one operation on `kura
//! serve`'s JSON routes, and the one client-side path from declaring a call to knowing
//! whether it may run — what `kura hook` and `kura mcp-proxy` both do before a call, so
//! neither reads Kura's ruling its own way (the ruling itself is the gate's, in `kura serve`).

use std::time::{Duration, Instant};

use proto::agent::{
    Decision, DeclareCall, Declared, EndTurn, Ended, RecordStep, Recorded, StepType, WaitDecision,
    WithdrawCall,
};
use proto::{ApprovalState, CallId, TurnId, Verdict};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::{AgentArgs, CallError, call};

/// A tool's result is recorded up to this many bytes of JSON (the rest is cut, and says so).
pub const MAX_RESULT: usize = 32 * 1024;

/// The longest one `wait_decision` is asked to wait (the surface's own bound is 8 s).
const WAIT_SLICE_MS: u64 = 8_000;

/// `kura serve`'s agent surface, with the agent's token.
pub struct Kura {
    args: AgentArgs,
    client: reqwest::Client,
    token: String,
}

/// What Kura ruled on a declared call, once a person decided when asked.
#[derive(Debug)]
pub struct Gate {
    /// The declaration's answer (its call id, its arguments in normal form).
    pub declared: Declared,
    /// Whether it may run.
    pub ruling: Ruling,
}

/// How a call that ran came out, as its `tool.result` records it.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It returned this.
    Success(Value),
    /// It failed (or was refused, or cut off), saying why.
    Error(String),
}

/// Whether a declared call may run.
#[derive(Debug, Clone, PartialEq)]
pub enum Ruling {
    /// Run it: with a person's edited arguments when there are some; `asked` when a person
    /// approved it (else Kura's policy allowed it).
    Run {
        /// A person's edit.
        edit: Option<Map<String, Value>>,
        /// Whether a person approved it.
        asked: bool,
    },
    /// Do not run it; why, for the agent.
    Refused(String),
}

impl Gate {
    /// The arguments in the normal form Kura ruled on, when that differs from what the agent
    /// asked (a respelled path): what must run instead.
    pub fn respelled(&self, asked: &Map<String, Value>) -> Option<Map<String, Value>> {
        let ruled = &self.declared.arguments;
        (!ruled.is_empty() && ruled != asked).then(|| ruled.clone())
    }

    /// What runs when the ruling is to run: a person's edit, else what Kura ruled on.
    pub fn to_run(&self, asked: &Map<String, Value>) -> Option<Map<String, Value>> {
        match &self.ruling {
            Ruling::Run { edit: Some(e), .. } => Some(e.clone()),
            Ruling::Run { edit: None, .. } => {
                Some(self.respelled(asked).unwrap_or_else(|| asked.clone()))
            }
            Ruling::Refused(_) => None,
        }
    }
}

impl Kura {
    /// The surface `args` names, with its token.
    pub fn new(args: &AgentArgs) -> anyhow::Result<Self> {
        Ok(Kura {
            args: args.clone(),
            client: args.client()?,
            token: args.token()?,
        })
    }

    /// One operation.
    pub async fn call<Req: Serialize, Resp: serde::de::DeserializeOwned>(
        &self,
        op: &str,
        req: &Req,
    ) -> anyhow::Result<Resp> {
        call(&self.client, &self.args, &self.token, op, req)
            .await
            .map_err(|e: CallError| anyhow::anyhow!(e))
    }

    /// Declares `tool` with `arguments` in `turn` and, when Kura asks a person, waits for the
    /// decision — never past `wait`: then the request is withdrawn (unless a person decided
    /// in the meantime, when that decision stands) and the call refused.
    pub async fn gate(
        &self,
        turn: TurnId,
        tool: &str,
        arguments: Map<String, Value>,
        wait: Duration,
    ) -> anyhow::Result<Gate> {
        let declare = DeclareCall {
            turn_id: turn,
            tool: tool.to_owned(),
            arguments,
        };
        let declared: Declared = self.call("declare_call", &declare).await?;
        let rule = declared.rule.clone().unwrap_or_default();
        let ruling = match declared.decision {
            Verdict::Allow => Ruling::Run {
                edit: declared.edited_arguments.clone(),
                asked: false,
            },
            Verdict::Deny => Ruling::Refused(format!(
                "Kura's policy denies {tool} (rule {rule}); it was not run"
            )),
            Verdict::Ask => self.wait(&declared, tool, wait).await?,
        };
        Ok(Gate { declared, ruling })
    }

    /// Waits for a person's decision on a declared call.
    async fn wait(
        &self,
        declared: &Declared,
        tool: &str,
        wait: Duration,
    ) -> anyhow::Result<Ruling> {
        let deadline = Instant::now() + wait;
        let approved = |d: Decision| Ruling::Run {
            edit: d.edited_arguments,
            asked: true,
        };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
            let req = WaitDecision {
                request_id: declared.request_id,
                timeout_ms: Some(ms.min(WAIT_SLICE_MS)),
            };
            let d: Decision = match self.call("wait_decision", &req).await {
                Ok(d) => d,
                Err(e) => {
                    // The call will not run: taken back (best effort), so nobody approves
                    // it later for nothing.
                    let withdraw = WithdrawCall {
                        request_id: declared.request_id,
                    };
                    let _: Option<Decision> = self.call("withdraw_call", &withdraw).await.ok();
                    return Err(e);
                }
            };
            match d.state {
                ApprovalState::Approved => return Ok(approved(d)),
                ApprovalState::Denied => {
                    return Ok(Ruling::Refused(format!(
                        "a person (or Kura's rule {}) denied {tool}; it was not run",
                        d.rule.unwrap_or_default()
                    )));
                }
                _ if Instant::now() >= deadline => {
                    // Withdrawn, so nobody approves a call that will never run — unless a
                    // person decided it in the meantime: then that decision stands.
                    let withdraw = WithdrawCall {
                        request_id: declared.request_id,
                    };
                    let now: Option<Decision> = self.call("withdraw_call", &withdraw).await.ok();
                    if let Some(d) = now.filter(|d| d.state == ApprovalState::Approved) {
                        return Ok(approved(d));
                    }
                    return Ok(Ruling::Refused(format!(
                        "nobody decided on {tool} within {} s (Kura request {}, now withdrawn); it was not run",
                        wait.as_secs(),
                        declared.request_id
                    )));
                }
                _ => {}
            }
        }
    }

    /// Records a call's outcome as its `tool.result` (a result cut at [`MAX_RESULT`]).
    pub async fn record_result(
        &self,
        turn: TurnId,
        call_id: Option<&CallId>,
        outcome: Outcome,
    ) -> anyhow::Result<()> {
        let mut content = Map::new();
        match outcome {
            Outcome::Success(v) => {
                content.insert("status".into(), "success".into());
                content.insert("result".into(), bounded(v));
            }
            Outcome::Error(why) => {
                content.insert("status".into(), "error".into());
                content.insert(
                    "error".into(),
                    proto::text::excerpt(&why, MAX_RESULT).into(),
                );
            }
        }
        if let Some(c) = call_id {
            content.insert("call_id".into(), c.as_str().into());
        }
        let step = RecordStep {
            turn_id: turn,
            record_type: StepType::ToolResult,
            content: Value::Object(content),
        };
        let _: Recorded = self.call("record_step", &step).await?;
        Ok(())
    }

    /// Reports a call that ran without being declared (recorded once per `agent_call_id`).
    pub async fn report_ungated(
        &self,
        turn: TurnId,
        tool: &str,
        arguments: Map<String, Value>,
        agent_call_id: &str,
        result: Option<Value>,
        noticed_by: &str,
    ) -> anyhow::Result<()> {
        let req = proto::agent::ReportUngated {
            turn_id: turn,
            tool: proto::text::excerpt(tool, 200),
            arguments,
            agent_call_id: agent_call_id.to_owned(),
            result: result.map(bounded),
            noticed_by: noticed_by.to_owned(),
        };
        let _: Recorded = self.call("report_ungated", &req).await?;
        Ok(())
    }

    /// Ends `turn` with `deliverable`.
    pub async fn end(&self, turn: TurnId, deliverable: &str) -> anyhow::Result<Ended> {
        let text = if deliverable.trim().is_empty() {
            "(no message)"
        } else {
            deliverable
        };
        let end = EndTurn {
            turn_id: turn,
            deliverable: text.to_owned(),
        };
        self.call("end_turn", &end).await
    }
}

/// A tool response as recorded: whole when small, else its first part as text, marked cut.
pub fn bounded(v: Value) -> Value {
    proto::text::bounded_json(v, MAX_RESULT)
}
