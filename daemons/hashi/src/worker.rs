//! The agent loop for one claimed turn: resume from the records already written, ask the
//! provider for the next steps, record each one durably (under the fence) before and after
//! acting, seal, ring.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kura_model::{Provider, ProviderError, Step, ToolSpec, TurnInput};
use kura_policy::{Policy, Verdict};
use kura_runtime::{Bus, Stop};
use kura_store::store::append_in;
use kura_store::work::approvals::{
    ApprovalState, approval, approval_for_call, decide_by_policy_in, mark_started_in, park_turn_in,
    request_approval_in,
};
use kura_store::work::policy;
use kura_store::work::{
    Claim, claim_next, complete_turn_in, fenced, now_ms, release, release_failed, renew,
};
use kura_store::{Store, StoreError};
use proto::doorbell::{ToolApprove, WorkerComplete};
use proto::record::{NewRecord, Record, RecordType, ToolStatus};
use serde_json::{Map, Value, json};

use crate::replay::Recorded;
use crate::tools::{Effect, Refusal, Toolbox, excerpt, fit};
use crate::{Approvals, WorkerConfig};

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
    /// The tools as the model sees them.
    pub specs: Arc<[ToolSpec]>,
    /// How often a transient provider failure is retried within one step.
    pub retries: u32,
    /// For ringing `evt.worker.complete`.
    pub bus: Bus,
    /// Set on shutdown: release the turn and stop.
    pub stop: Stop,
    /// Records of this turn not yet committed: they become durable together with the next
    /// commit the turn needs anyway (before a tool runs, before the model is asked again
    /// after a side effect, with the seal), instead of one fsync each.
    pub staged: Vec<NewRecord>,
    /// The policy aegis published, by hash, parsed once.
    pub policy: Option<(String, Arc<Policy>)>,
}

/// How a turn ended for this worker.
enum End {
    /// Sealed and marked done.
    Completed(uuid::Uuid),
    /// Given back on shutdown.
    Released,
    /// Parked until people decide an approval request.
    Parked(uuid::Uuid),
}

/// How a tool call step ended.
enum CallEnd {
    /// Its result is recorded; the loop goes on.
    Done,
    /// It waits for people; the turn is parked.
    Parked(uuid::Uuid),
}

/// Largest tool result stored: a record holds 4 MiB of canonical JSON, and the rest of the
/// result record (status, call id) must fit beside it.
const MAX_RESULT_BYTES: usize = 1024 * 1024;

/// Largest tool call recorded (and so run): what a record holds, less room for the rest.
const MAX_CALL_BYTES: usize = 3 * 1024 * 1024;

/// Longest quote of an outsider's text (a model server's error body, a tool's error) in a
/// record or a log line.
const MAX_QUOTE_BYTES: usize = 2048;

/// Whether an error is the fence refusing a stale worker.
fn is_fenced(e: &StoreError) -> bool {
    matches!(e, StoreError::Fenced { .. })
}

/// Tool calls this turn has made so far.
fn tool_calls(history: &[Record]) -> usize {
    history
        .iter()
        .filter(|r| r.record_type == RecordType::ToolCall)
        .count()
}

/// Whether what is staged must be on record before the model is asked again (a model may
/// take minutes). A side effect's result must: lost, it would leave the call's outcome
/// unknown. A read's result need not: a worker lost before the next commit leaves the call
/// unanswered and the next worker runs the read again (`resolve_dangling_calls`), so it
/// rides with the next commit the turn needs — the next call, or the end — as thoughts do.
fn must_be_durable_before_asking(staged: &[NewRecord], history: &[Record]) -> bool {
    let read_call = |call_id: Option<&str>| {
        call_id.is_some_and(|id| {
            history.iter().any(|r| {
                r.record_type == RecordType::ToolCall
                    && r.content.get("call_id").and_then(Value::as_str) == Some(id)
                    && r.metadata.get("effect").map(String::as_str) == Some(Effect::Read.as_str())
            })
        })
    };
    staged.iter().any(|r| match r.record_type {
        RecordType::AgentThought => false,
        RecordType::ToolResult => !read_call(r.content.get("call_id").and_then(Value::as_str)),
        _ => true,
    })
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
        // Set when the turn ends: wakes the renewal thread at once instead of at its next
        // renewal.
        let done = Stop::new();
        let mut renew_store = self
            .renew_store
            .take()
            .ok_or_else(|| anyhow::anyhow!("renewal store handle missing"))?;
        let result = std::thread::scope(|scope| {
            let (lost_r, done_r, claim_r) = (lost.clone(), done.clone(), claim.clone());
            let renew_store = &mut renew_store;
            scope.spawn(move || {
                let every = Duration::from_millis((lease as u64 / 3).max(10));
                while !done_r.sleep(every) {
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
            done.set();
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
            Ok(End::Parked(request_id)) => {
                tracing::info!(turn_id = %claim.turn_id, %request_id, "turn parked until the approval request is decided")
            }
            Err(e) if is_fenced(&e) => {
                tracing::warn!(turn_id = %claim.turn_id, "another worker took this turn over; stopping")
            }
            Err(e) => {
                // This attempt failed: back off so other turns go first, and count it.
                let error = excerpt(&e.to_string(), MAX_QUOTE_BYTES);
                let shift = claim.attempt.clamp(1, 7) - 1;
                let backoff = self
                    .config
                    .retry_backoff_ms
                    .saturating_mul(1 << shift)
                    .min(60_000);
                let retry_at = now_ms() + i64::try_from(backoff).unwrap_or(60_000);
                if let Err(e2) = release_failed(&mut self.store, &claim, &error, retry_at) {
                    tracing::warn!(turn_id = %claim.turn_id, error = %e2, "could not give the failed turn back; its lease will run out");
                }
                tracing::error!(turn_id = %claim.turn_id, attempt = claim.attempt, %error, backoff_ms = backoff, "turn attempt failed");
                return Ok(true);
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

    /// Stages a record for the turn's next commit (see [`Worker::commit`]); `history` shows
    /// it at once, provisionally (no id or hash yet), so the model and the step count see it.
    /// Nothing waits on a staged record: nobody has been told of it, and a worker lost before
    /// the commit leaves the turn to be resumed from what was committed.
    fn append(
        &mut self,
        _claim: &Claim,
        history: &mut Vec<Record>,
        rec: NewRecord,
    ) -> kura_store::Result<()> {
        history.push(Record {
            record_id: uuid::Uuid::nil(),
            hash: String::new(),
            record_type: rec.record_type,
            content: rec.content.clone(),
            author_id: rec.author_id.clone(),
            metadata: rec.metadata.clone(),
            created_at: String::new(),
        });
        self.staged.push(rec);
        Ok(())
    }

    /// Commits the staged records and `f` in one transaction under the fence, and keeps
    /// `history` in step. A tool runs only after the commit that holds its call.
    fn commit<T>(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        f: impl FnOnce(&kura_store::Transaction<'_>) -> kura_store::Result<T>,
    ) -> kura_store::Result<T> {
        let staged = std::mem::take(&mut self.staged);
        let (appended, out) = fenced(&mut self.store, claim, |tx| {
            let mut records = Vec::with_capacity(staged.len());
            for rec in &staged {
                records.push(append_in(tx, claim.output_ledger_id, rec)?.record);
            }
            Ok((records, f(tx)?))
        })?;
        // The provisional entries make way for the records as stored.
        history.truncate(history.len().saturating_sub(appended.len()));
        history.extend(appended);
        Ok(out)
    }

    /// Commits what is staged, if anything.
    fn flush(&mut self, claim: &Claim, history: &mut Vec<Record>) -> kura_store::Result<()> {
        if self.staged.is_empty() {
            return Ok(());
        }
        self.commit(claim, history, |_| Ok(()))
    }

    /// The policy aegis published, if any (re-read only when its hash changes).
    fn published_policy(&mut self) -> kura_store::Result<Option<(String, Arc<Policy>)>> {
        let Some(hash) = policy::current_hash(self.store.conn())? else {
            return Ok(None);
        };
        if self.policy.as_ref().is_none_or(|(h, _)| *h != hash) {
            self.policy = policy::load(self.store.conn(), &hash)?.map(|p| (hash, Arc::new(p)));
        }
        Ok(self.policy.clone())
    }

    /// Commits what is staged with the turn's seal and completion: one commit ends a turn.
    fn complete(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
    ) -> kura_store::Result<uuid::Uuid> {
        let sealer = self.store.sealer().cloned();
        self.commit(claim, history, |tx| {
            complete_turn_in(tx, claim, sealer.as_ref())
        })
    }

    fn run_turn(&mut self, claim: &Claim, lost: &AtomicBool) -> kura_store::Result<End> {
        self.staged.clear();
        let context = self.store.hydrate(claim.context_ledger_id)?;
        let mut history = self.store.hydrate(claim.output_ledger_id)?;
        if claim.attempt > i64::from(self.config.max_attempts.max(1)) {
            // Earlier attempts all failed (or their workers died): end the turn, briefly.
            let last = claim
                .last_error
                .as_deref()
                .unwrap_or("its worker stopped without a word");
            let msg = format!(
                "gave up after {} failed attempts; the last: {}",
                claim.attempt - 1,
                excerpt(last, MAX_QUOTE_BYTES)
            );
            self.fail(claim, &mut history, &msg)?;
            let ledger = self.complete(claim, &mut history)?;
            return Ok(End::Completed(ledger));
        }
        if claim.resumed
            && let CallEnd::Parked(request) = self.resolve_dangling_calls(claim, &mut history)?
        {
            return Ok(End::Parked(request));
        }
        let mut recorded = match claim.replay {
            Some(r) => Some(Recorded::load(&self.store, r)?),
            None => None,
        };
        let mut delivered = history
            .iter()
            .any(|r| r.record_type == RecordType::TaskDeliverable);
        while !delivered {
            if lost.load(Ordering::SeqCst) {
                return Err(StoreError::Fenced {
                    turn_id: claim.turn_id.to_string(),
                    held_epoch: claim.epoch,
                    current_epoch: -1,
                });
            }
            if must_be_durable_before_asking(&self.staged, &history) {
                self.flush(claim, &mut history)?;
            }
            if self.stop.is_set() {
                self.flush(claim, &mut history)?;
                release(&mut self.store, claim)?;
                return Ok(End::Released);
            }
            let input = TurnInput {
                session_id: claim.session_id,
                seq: claim.seq,
                context: &context,
                history: &history,
                tools: &self.specs,
            };
            if input.steps_taken() >= self.config.max_steps {
                let msg = format!("step limit of {} reached", self.config.max_steps);
                self.fail(claim, &mut history, &msg)?;
                break;
            }
            // A replay that is not live takes every step from the record.
            let asked = match recorded.as_ref().filter(|r| !r.replay.live) {
                Some(r) => r.step(input.steps_taken()).map(|s| vec![s]),
                None => self
                    .ask(&input)
                    .map_err(|e| format!("model provider failed: {e}")),
            };
            let steps = match asked {
                Ok(s) => s,
                Err(e) => {
                    let msg = excerpt(&e, MAX_QUOTE_BYTES);
                    self.fail(claim, &mut history, &msg)?;
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
                        // The limit counts tool calls, not model responses: one response
                        // with a hundred calls runs no more than the limit allows.
                        if tool_calls(&history) >= self.config.max_steps {
                            let msg = format!(
                                "step limit of {} tool calls reached",
                                self.config.max_steps
                            );
                            self.fail(claim, &mut history, &msg)?;
                            delivered = true;
                            break;
                        }
                        if let CallEnd::Parked(request) = self.call_tool(
                            claim,
                            &mut history,
                            &name,
                            arguments,
                            recorded.as_mut(),
                        )? {
                            return Ok(End::Parked(request));
                        }
                    }
                    Step::Deliver {
                        text,
                        is_final,
                        extra,
                    } => {
                        let mut content = extra;
                        content.insert("text".into(), json!(text));
                        content.insert("final".into(), json!(is_final));
                        let r = self.record(
                            claim,
                            RecordType::TaskDeliverable,
                            Value::Object(content),
                            &[],
                        );
                        self.append(claim, &mut history, r)?;
                        delivered = true;
                        break;
                    }
                }
            }
        }
        let ledger = self.complete(claim, &mut history)?;
        Ok(End::Completed(ledger))
    }

    /// Asks the provider, retrying transient failures with backoff.
    fn ask(&self, input: &TurnInput<'_>) -> Result<Vec<Step>, ProviderError> {
        let mut attempt = 0u32;
        loop {
            match self.provider.next(input) {
                Err(ProviderError::Transient(e)) if attempt < self.retries => {
                    attempt += 1;
                    tracing::warn!(error = %excerpt(&e.to_string(), MAX_QUOTE_BYTES), attempt, "model provider failed; retrying");
                    // A stop during the backoff ends it at once; the turn is then released.
                    if self
                        .stop
                        .sleep(Duration::from_millis(200 * u64::from(attempt)))
                    {
                        return Err(ProviderError::Transient(e));
                    }
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
    ) -> kura_store::Result<()> {
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

    /// Records the call durably, asks for approval (static policy, then aegis), runs it if
    /// allowed, records the result — or parks the turn when people must decide.
    fn call_tool(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        name: &str,
        mut arguments: Map<String, Value>,
        recorded: Option<&mut Recorded>,
    ) -> kura_store::Result<CallEnd> {
        // Policy, record and tool all see the one normalised spelling of each path.
        let as_given = arguments.clone();
        self.tools.normalize_args(&mut arguments);
        // In a replay: the recorded call this one replays, if any (its id and result).
        let replaying = recorded.is_some();
        let rerun = recorded.as_ref().is_some_and(|r| r.replay.rerun);
        let k = tool_calls(history);
        let matched = recorded.and_then(|r| {
            let live = r.replay.live;
            r.match_call(k, name, &arguments).map(|c| {
                c.used = true;
                (c.call_id.clone(), c.result.clone(), live)
            })
        });
        // Replaying the recorded steps reuses the recorded call id, so the call record is
        // the recorded one (same content, same hash).
        let call_id = match &matched {
            Some((id, _, false)) if !id.is_empty() => id.clone(),
            _ => proto::new_id().to_string(),
        };
        let effect = self
            .tools
            .get(name)
            .map(|t| t.effect().as_str())
            .unwrap_or("unknown");
        let shown_name = excerpt(name, 256);
        let mut content =
            json!({"tool_name": shown_name, "arguments": arguments, "call_id": call_id});
        if as_given != arguments {
            content["arguments_as_given"] = Value::Object(as_given);
        }
        let size = content.to_string().len();
        if size > MAX_CALL_BYTES {
            // Too big to record, so it is not run either: what runs is always on record.
            let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
                content.to_string().as_bytes(),
            ));
            let call = self.record(
                claim,
                RecordType::ToolCall,
                json!({"tool_name": shown_name, "arguments": {}, "call_id": call_id,
                       "arguments_omitted": {"bytes": size, "sha256": digest}}),
                &[("effect", effect.to_owned())],
            );
            self.append(claim, history, call)?;
            let refusal = format!(
                "the call is {size} bytes, more than a record holds ({MAX_CALL_BYTES}); it was not run"
            );
            self.record_result(claim, history, &call_id, Err(refusal), Map::new())?;
            return Ok(CallEnd::Done);
        }
        let call = self.record(
            claim,
            RecordType::ToolCall,
            content,
            &[("effect", effect.to_owned())],
        );
        self.append(claim, history, call)?;
        let reads = self
            .tools
            .get(name)
            .is_some_and(|t| t.effect() == Effect::Read);
        // With `--rerun` the call goes to aegis, which asks a person whatever the policy.
        if replaying && !reads && !rerun {
            return self.serve_recorded(claim, history, &call_id, matched.and_then(|m| m.1));
        }
        self.approve_and_run(claim, history, name, &arguments, &call_id)
    }

    /// A replay's side-effecting call: never run again. The recorded result is served,
    /// naming the record it replays; a call the recorded turn did not make is refused.
    fn serve_recorded(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        call_id: &str,
        recorded: Option<Record>,
    ) -> kura_store::Result<CallEnd> {
        let Some(r) = recorded else {
            let refusal = "a replay never runs a side effect again, and the recorded turn has no \
                           result for this call; not run";
            self.record_result(claim, history, call_id, Err(refusal.into()), Map::new())?;
            return Ok(CallEnd::Done);
        };
        let mut content = r.content.as_object().cloned().unwrap_or_default();
        content.insert("call_id".into(), json!(call_id));
        content.insert("replayed".into(), json!(r.record_id));
        let served = self.record(
            claim,
            RecordType::ToolResult,
            Value::Object(content),
            &[("replays", r.record_id.to_string())],
        );
        self.append(claim, history, served)?;
        Ok(CallEnd::Done)
    }

    /// The part of a call after its `tool.call` record: policy, approval, run, result.
    fn approve_and_run(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        name: &str,
        arguments: &Map<String, Value>,
        call_id: &str,
    ) -> kura_store::Result<CallEnd> {
        let outcome = match self.tools.check(name) {
            Err(Refusal::Unknown) => Err(format!("unknown tool {name:?}")),
            Err(Refusal::Denied(rule)) => Err(format!("denied by policy ({rule})")),
            Ok(tool)
                if self.config.approvals == Approvals::Off
                    && claim.replay.is_some_and(|r| r.rerun)
                    && tool.effect() != Effect::Read =>
            {
                Err(
                    "a re-run of a side effect needs a person, and this worker has approvals \
                     off ([worker] approvals); not run"
                        .into(),
                )
            }
            Ok(_) if self.config.approvals == Approvals::Off => {
                self.flush(claim, history)?;
                self.run_tool(claim, name, arguments, call_id)
            }
            Ok(tool) => {
                let effect = tool.effect();
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
                // One commit: what the model said, the call, the request — and, when the
                // published policy allows or denies it, the decision (and for an allowed
                // call the mark that it is starting). Only `ask` needs aegis and a person.
                let (request, ruled) = self.commit(claim, history, |tx| {
                    let a = request_approval_in(
                        tx,
                        claim,
                        call_id,
                        name,
                        arguments,
                        effect,
                        &author,
                        meta.clone(),
                    )?;
                    let Some((hash, p)) = published else {
                        return Ok((a, None));
                    };
                    // aegis may have published another policy since it was read.
                    if policy::current_hash(tx)?.as_deref() != Some(hash.as_str()) {
                        return Ok((a, None));
                    }
                    let args = Value::Object(arguments.clone());
                    let ruling = p.evaluate(name, effect.as_str(), &args, &session);
                    let allow = match ruling.verdict {
                        Verdict::Ask => return Ok((a, None)),
                        v => v == Verdict::Allow,
                    };
                    decide_by_policy_in(tx, &a, allow, &ruling.rule, &hash, meta)?;
                    if allow {
                        mark_started_in(tx, a.request_id, claim.epoch)?;
                    }
                    Ok((a, Some((allow, ruling.rule))))
                })?;
                let decided = match ruled {
                    Some((true, _)) => {
                        let outcome = self.run_tool(claim, name, arguments, call_id);
                        self.record_result(claim, history, call_id, outcome, Map::new())?;
                        return Ok(CallEnd::Done);
                    }
                    Some((false, rule)) => Some((false, rule, None)),
                    None => self.await_decision(request.request_id)?,
                };
                match decided {
                    Some((true, _, edited)) => {
                        return self.run_approved(
                            claim,
                            history,
                            request.request_id,
                            name,
                            arguments,
                            call_id,
                            edited.as_deref(),
                        );
                    }
                    Some((false, rule, _)) => Err(format!("denied by aegis ({rule})")),
                    None => {
                        let parked = self.commit(claim, history, |tx| {
                            park_turn_in(tx, claim, request.request_id)
                        })?;
                        if !parked {
                            tracing::info!(turn_id = %claim.turn_id, request_id = %request.request_id,
                                "decided while parking; the turn is claimable again");
                        }
                        return Ok(CallEnd::Parked(request.request_id));
                    }
                }
            }
        };
        self.record_result(claim, history, call_id, outcome, Map::new())?;
        Ok(CallEnd::Done)
    }

    /// Runs a call people (or policy) approved: with the arguments they edited, if they
    /// did — the decision record that binds them is already in the ledger — else as asked.
    #[allow(clippy::too_many_arguments)]
    fn run_approved(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        request_id: uuid::Uuid,
        name: &str,
        arguments: &Map<String, Value>,
        call_id: &str,
        edited: Option<&str>,
    ) -> kura_store::Result<CallEnd> {
        self.commit(claim, history, |tx| {
            mark_started_in(tx, request_id, claim.epoch)
        })?;
        let (outcome, edit) = match self.edited_arguments(edited) {
            Ok(Some(args)) => (self.run_tool(claim, name, &args, call_id), Some(args)),
            Ok(None) => (self.run_tool(claim, name, arguments, call_id), None),
            Err(why) => (Err(why), None),
        };
        let mut how = Map::new();
        if let Some(args) = edit {
            // What ran, beside the call the model asked for: the ledger shows both.
            how.insert("arguments_edited".into(), Value::Object(args));
        }
        if claim.replay.is_some_and(|r| r.rerun) {
            // A re-run is a new run: its result names the approval it ran under, so it is a
            // record of its own, never the recorded run's (identical records are stored once).
            how.insert("rerun".into(), json!({"approval_request": request_id}));
        }
        self.record_result(claim, history, call_id, outcome, how)?;
        Ok(CallEnd::Done)
    }

    /// Edited arguments as the tool will take them. They must already be in normal form:
    /// aegis ruled on exactly this spelling, so a path hashi would respell is refused.
    fn edited_arguments(&self, edited: Option<&str>) -> Result<Option<Map<String, Value>>, String> {
        let Some(text) = edited else { return Ok(None) };
        let args: Map<String, Value> = serde_json::from_str(text)
            .map_err(|e| format!("the edited arguments cannot be read: {e}"))?;
        let mut normal = args.clone();
        self.tools.normalize_args(&mut normal);
        if normal != args {
            return Err(format!(
                "the edited arguments are not in normal form (it is {}); not run",
                excerpt(&Value::Object(normal).to_string(), 512)
            ));
        }
        Ok(Some(args))
    }

    /// Asks aegis and waits (briefly) for allow/deny; `None` when it is up to people (or
    /// aegis did not answer in time): the turn is then parked rather than holding a worker.
    fn await_decision(
        &mut self,
        request_id: uuid::Uuid,
    ) -> kura_store::Result<Option<(bool, String, Option<String>)>> {
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
        let a = approval(self.store.conn(), request_id)?.ok_or_else(|| StoreError::Corrupt {
            what: "approval",
            id: request_id.to_string(),
            detail: "vanished while its turn waited".into(),
        })?;
        Ok(match a.state {
            ApprovalState::Approved => Some((true, a.rule.unwrap_or_default(), a.edited_arguments)),
            ApprovalState::Denied => Some((false, a.rule.unwrap_or_default(), None)),
            ApprovalState::Asked | ApprovalState::Pending => None,
        })
    }

    fn run_tool(
        &self,
        claim: &Claim,
        name: &str,
        arguments: &Map<String, Value>,
        call_id: &str,
    ) -> Result<Value, String> {
        let tool = self
            .tools
            .get(name)
            .ok_or_else(|| format!("unknown tool {name:?}"))?;
        self.tools
            .workspace(&claim.session_id.to_string())
            .and_then(|ws| tool.run(&ws.for_call(call_id), arguments))
    }

    fn record_result(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        call_id: &str,
        outcome: Result<Value, String>,
        how: Map<String, Value>,
    ) -> kura_store::Result<()> {
        // Whatever a tool returned, the record fits: a result too big to store would fail
        // this turn on every attempt.
        let mut content = match outcome {
            Ok(v) => {
                json!({"status": ToolStatus::Success, "result": fit(v, MAX_RESULT_BYTES), "call_id": call_id})
            }
            Err(e) => {
                json!({"status": ToolStatus::Error, "error": excerpt(&e, MAX_RESULT_BYTES), "call_id": call_id})
            }
        };
        // How it ran (edited arguments, a replay's re-run) beside what it returned.
        if let Value::Object(c) = &mut content {
            c.extend(how);
        }
        let result = self.record(claim, RecordType::ToolResult, content, &[]);
        self.append(claim, history, result)
    }

    /// After a takeover or an approval: a call with no result runs if it provably never
    /// started (its approval came through and nobody began it, or approvals are on and it
    /// was never even requested); otherwise it is re-run only if it only reads, and a write
    /// or external call gets a result saying its outcome is unknown — never repeated.
    fn resolve_dangling_calls(
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
                    let parked = self.commit(claim, history, |tx| park_turn_in(tx, claim, id))?;
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
