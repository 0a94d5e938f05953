//! The agent loop for one claimed turn: resume from the records already written, ask the
//! provider for the next steps, record each one durably (under the fence) before and after
//! acting, seal, ring.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kura::Store;
use kura::runtime::{Bus, Stop};
use kura::store::append_in;
use kura::work::{Claim, claim_next, complete_turn, fenced, now_ms, release, renew};
use proto::doorbell::WorkerComplete;
use proto::record::{NewRecord, Record, RecordType, ToolStatus};
use serde_json::{Map, Value, json};

use crate::WorkerConfig;
use crate::provider::{Provider, ProviderError, Step, TurnInput};
use crate::tools::{Effect, Refusal, Toolbox};

/// One worker thread's state.
pub struct Worker {
    /// Its store handle (the agent loop's writes).
    pub store: Store,
    /// A second handle for lease renewal, which runs beside the loop (lent to the renewal
    /// thread while a turn runs).
    pub renew_store: Option<Store>,
    /// Its name in leases and record metadata.
    pub owner: String,
    /// Lease, step limit, author.
    pub config: WorkerConfig,
    /// The model.
    pub provider: Arc<dyn Provider>,
    /// The tools.
    pub tools: Arc<Toolbox>,
    /// For ringing `evt.worker.complete`.
    pub bus: Bus,
    /// Set on shutdown: release the turn and stop.
    pub stop: Stop,
}

/// How a turn ended for this worker.
enum End {
    /// Sealed and marked done.
    Completed(uuid::Uuid),
    /// Given back on shutdown.
    Released,
}

/// Whether an error is the fence refusing a stale worker.
fn is_fenced(e: &kura::StoreError) -> bool {
    e.to_string().starts_with("fenced:")
}

impl Worker {
    /// One unit of work: claim a turn and run it to the end. `Ok(false)` when none is claimable.
    pub fn step(&mut self) -> anyhow::Result<bool> {
        let lease = i64::try_from(self.config.lease_ms).unwrap_or(i64::MAX);
        let Some(claim) = claim_next(&mut self.store, &self.owner, lease, now_ms())? else {
            return Ok(false);
        };
        tracing::info!(turn_id = %claim.turn_id, session_id = %claim.session_id, epoch = claim.epoch, resumed = claim.resumed, "claimed turn");
        let lost = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let mut renew_store = self
            .renew_store
            .take()
            .ok_or_else(|| anyhow::anyhow!("renewal store handle missing"))?;
        let result = std::thread::scope(|scope| {
            let (lost_r, done_r, claim_r) = (lost.clone(), done.clone(), claim.clone());
            let renew_store = &mut renew_store;
            scope.spawn(move || {
                let every = Duration::from_millis((lease as u64 / 3).max(10));
                'outer: loop {
                    let mut waited = Duration::ZERO;
                    while waited < every {
                        if done_r.load(Ordering::SeqCst) {
                            break 'outer;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                        waited += Duration::from_millis(10);
                    }
                    if let Err(e) = renew(renew_store, &claim_r, lease, now_ms()) {
                        tracing::warn!(turn_id = %claim_r.turn_id, error = %e, "lease renewal failed");
                        if is_fenced(&e) {
                            lost_r.store(true, Ordering::SeqCst);
                            break;
                        }
                    }
                }
            });
            let r = self.run_turn(&claim, &lost);
            done.store(true, Ordering::SeqCst);
            r
        });
        self.renew_store = Some(renew_store);
        match result {
            Ok(End::Completed(ledger_id)) => {
                tracing::info!(turn_id = %claim.turn_id, %ledger_id, "turn complete");
                self.bus.ring(
                    self.bus.subjects.worker_complete(),
                    &WorkerComplete {
                        turn_id: claim.turn_id,
                        ledger_id,
                    },
                );
            }
            Ok(End::Released) => {
                tracing::info!(turn_id = %claim.turn_id, "turn released for another worker")
            }
            Err(e) if is_fenced(&e) => {
                tracing::warn!(turn_id = %claim.turn_id, "another worker took this turn over; stopping")
            }
            Err(e) => {
                let _ = release(&mut self.store, &claim);
                return Err(anyhow::Error::new(e).context(format!("turn {}", claim.turn_id)));
            }
        }
        Ok(true)
    }

    fn record(
        &self,
        claim: &Claim,
        t: RecordType,
        content: Value,
        extra: &[(&str, String)],
    ) -> NewRecord {
        let mut metadata = BTreeMap::new();
        metadata.insert("turn_id".into(), claim.turn_id.to_string());
        metadata.insert("epoch".into(), claim.epoch.to_string());
        metadata.insert("worker".into(), self.owner.clone());
        for (k, v) in extra {
            metadata.insert((*k).to_owned(), v.clone());
        }
        NewRecord {
            record_type: t,
            content,
            author_id: self.config.author.clone(),
            metadata,
        }
    }

    /// Appends under the fence and keeps `history` in step.
    fn append(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        rec: NewRecord,
    ) -> kura::Result<()> {
        let a = fenced(&mut self.store, claim, |tx| {
            append_in(tx, claim.output_ledger_id, &rec)
        })?;
        history.push(a.record);
        Ok(())
    }

    fn run_turn(&mut self, claim: &Claim, lost: &AtomicBool) -> kura::Result<End> {
        let context = self.store.hydrate(claim.context_ledger_id)?;
        let mut history = self.store.hydrate(claim.output_ledger_id)?;
        if claim.resumed {
            self.resolve_dangling_calls(claim, &mut history)?;
        }
        let mut delivered = history
            .iter()
            .any(|r| r.record_type == RecordType::TaskDeliverable);
        while !delivered {
            if lost.load(Ordering::SeqCst) {
                return Err(kura::StoreError::Invalid("fenced: lease lost".into()));
            }
            if self.stop.is_set() {
                release(&mut self.store, claim)?;
                return Ok(End::Released);
            }
            let input = TurnInput {
                session_id: claim.session_id,
                seq: claim.seq,
                context: &context,
                history: &history,
                tools: &self.tools,
            };
            if input.steps_taken() >= self.config.max_steps {
                let msg = format!("step limit of {} reached", self.config.max_steps);
                self.fail(claim, &mut history, &msg)?;
                break;
            }
            let steps = match self.ask(&input) {
                Ok(s) => s,
                Err(e) => {
                    self.fail(claim, &mut history, &format!("model provider failed: {e}"))?;
                    break;
                }
            };
            for step in steps {
                match step {
                    Step::Thought(t) => {
                        let r =
                            self.record(claim, RecordType::AgentThought, json!({"text": t}), &[]);
                        self.append(claim, &mut history, r)?;
                    }
                    Step::ToolCall { name, arguments } => {
                        self.call_tool(claim, &mut history, &name, arguments)?
                    }
                    Step::Deliver { text, is_final } => {
                        let r = self.record(
                            claim,
                            RecordType::TaskDeliverable,
                            json!({"text": text, "final": is_final}),
                            &[],
                        );
                        self.append(claim, &mut history, r)?;
                        delivered = true;
                        break;
                    }
                }
            }
        }
        let ledger = complete_turn(&mut self.store, claim)?;
        Ok(End::Completed(ledger))
    }

    /// Asks the provider, retrying transient failures with backoff.
    fn ask(&self, input: &TurnInput<'_>) -> Result<Vec<Step>, ProviderError> {
        let mut attempt = 0u32;
        loop {
            match self.provider.next(input) {
                Err(ProviderError::Transient(e)) if attempt < 3 && !self.stop.is_set() => {
                    attempt += 1;
                    tracing::warn!(error = %e, attempt, "model provider failed; retrying");
                    std::thread::sleep(Duration::from_millis(200 * u64::from(attempt)));
                }
                other => return other,
            }
        }
    }

    /// Ends the turn with a `sys.error` and a final deliverable saying what went wrong.
    fn fail(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        message: &str,
    ) -> kura::Result<()> {
        tracing::error!(turn_id = %claim.turn_id, %message, "turn failed");
        let e = self.record(claim, RecordType::SysError, json!({"text": message}), &[]);
        self.append(claim, history, e)?;
        let d = self.record(
            claim,
            RecordType::TaskDeliverable,
            json!({"text": format!("the turn failed: {message}"), "final": true, "error": true}),
            &[],
        );
        self.append(claim, history, d)
    }

    /// Records the call durably, runs it (if policy allows), records the result.
    fn call_tool(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        name: &str,
        arguments: Map<String, Value>,
    ) -> kura::Result<()> {
        let call_id = proto::new_id().to_string();
        let effect = self
            .tools
            .get(name)
            .map(|t| t.effect().as_str())
            .unwrap_or("unknown");
        let call = self.record(
            claim,
            RecordType::ToolCall,
            json!({"tool_name": name, "arguments": arguments, "call_id": call_id}),
            &[("effect", effect.to_owned())],
        );
        self.append(claim, history, call)?;
        let outcome = match self.tools.check(name) {
            Err(Refusal::Unknown) => Err(format!("unknown tool {name:?}")),
            Err(Refusal::Denied(rule)) => Err(format!("denied by policy ({rule})")),
            Ok(tool) => self
                .tools
                .workspace(&claim.session_id.to_string())
                .and_then(|ws| tool.run(&ws, &arguments)),
        };
        let content = match outcome {
            Ok(v) => json!({"status": ToolStatus::Success, "result": v, "call_id": call_id}),
            Err(e) => json!({"status": ToolStatus::Error, "error": e, "call_id": call_id}),
        };
        let result = self.record(claim, RecordType::ToolResult, content, &[]);
        self.append(claim, history, result)
    }

    /// After a takeover: a call with no result is re-run only if it only reads; a write or
    /// external call gets a result saying its outcome is unknown — it is never repeated.
    fn resolve_dangling_calls(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
    ) -> kura::Result<()> {
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
                .unwrap_or("");
            let call_id = call.content.get("call_id").cloned().unwrap_or(Value::Null);
            let args = call
                .content
                .get("arguments")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let read_only = self
                .tools
                .get(name)
                .is_some_and(|t| t.effect() == Effect::Read);
            let content = if read_only {
                tracing::info!(turn_id = %claim.turn_id, tool = name, "re-running a read-only call the previous worker left unanswered");
                match self
                    .tools
                    .check(name)
                    .map_err(|_| "denied".to_owned())
                    .and_then(|t| {
                        self.tools
                            .workspace(&claim.session_id.to_string())
                            .and_then(|ws| t.run(&ws, &args))
                    }) {
                    Ok(v) => {
                        json!({"status": ToolStatus::Success, "result": v, "call_id": call_id})
                    }
                    Err(e) => json!({"status": ToolStatus::Error, "error": e, "call_id": call_id}),
                }
            } else {
                tracing::warn!(turn_id = %claim.turn_id, tool = name, "previous worker died during a side-effecting call; recording the outcome as unknown, not re-running");
                json!({
                    "status": ToolStatus::Unknown,
                    "error": "the worker running this call was lost; whether it took effect is unknown, and it was not run again",
                    "call_id": call_id,
                })
            };
            let r = self.record(
                claim,
                RecordType::ToolResult,
                content,
                &[("resumed", "true".into())],
            );
            self.append(claim, history, r)?;
        }
        Ok(())
    }
}
