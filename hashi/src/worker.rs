//! The agent loop for one claimed turn: resume from the records already written, ask the
//! provider for the next steps, record each one durably (under the fence) before and after
//! acting, seal, ring.

mod approval;
mod resume;

use kura_work::WorkTx;
use proto::{CallId, RecordId};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kura_model::{Provider, ProviderError, Step, ToolSpec, TurnInput};
use kura_policy::Policy;
use kura_runtime::{Bus, Stop};
use kura_store::{Store, StoreError};
use kura_work::approvals::{ApprovalState, approval, approval_for_call};
use kura_work::policy;
use kura_work::{Claim, claim_next, fenced, now_ms, release, release_failed, renew};
use proto::content::{
    DeliverableContent, OmittedArguments, TextContent, ToolCallContent, ToolResultContent,
    call_id_of,
};
use proto::doorbell::{ToolApprove, WorkerComplete};
use proto::record::{NewRecord, Record, RecordType};
use serde_json::{Map, Value};

use crate::replay::Recorded;
use crate::tools::{Effect, Refusal, ToolError, Toolbox, excerpt, fit};
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
    /// The model (the current turn's role's).
    pub provider: Arc<dyn Provider>,
    /// The tools.
    pub tools: Arc<Toolbox>,
    /// The tools as the model sees them (the current turn's role's).
    pub specs: Arc<[ToolSpec]>,
    /// Every role this worker runs (`[roster]`).
    pub roles: Arc<crate::roles::Roles>,
    /// The current turn's role.
    pub role: crate::roles::RoleRun,
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
    /// Who may grant writs (`[writs] issuers`).
    pub issuers: Arc<[kura_policy::writ::Issuer]>,
    /// The writ this turn runs under (its id), when its session or submitter holds one.
    pub writs: kura_work::gate::TurnWrits,
    /// Model usage not yet debited: it is debited on the session and the writ with the
    /// commit that makes the answer's records durable (one transaction).
    pub spent: Vec<proto::writ::Usage>,
    /// The last answer's usage, put on the first record it produces.
    pub usage_note: Option<proto::writ::Usage>,
    /// How often the last answer was retried (busy or unreachable server), said on its
    /// first record.
    pub retries_note: u32,
    /// The model's mistakes in a row (a malformed call, a tool it is not offered): the
    /// first is told to it, the second ends the turn as its error.
    pub mistakes: u32,
    /// Replaced by markers in every record and log line.
    pub secrets: Arc<crate::secrets::Secrets>,
    /// The object store side effects' trees go to (`None`: `[files] record = false`).
    pub files: Option<Arc<crate::Files>>,
    /// The last side effect's attested change, put on the `tool.result` staged next.
    pub changed: Option<proto::workspace::WorkspaceChange>,
}

/// The longest `Retry-After` a worker waits out within a step (a server asking for more
/// ends the step: the turn's lease and the people waiting should not hang on it).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(120);

/// A tool name as a record holds it: at most 256 bytes, and a call that had none says so (a
/// `tool.call` record needs a name).
fn shown_tool(name: &str) -> String {
    match name.trim() {
        "" => "(no name)".to_owned(),
        _ => excerpt(name, 256),
    }
}

/// How a turn ended for this worker.
enum End {
    /// Sealed and marked done.
    Completed(proto::LedgerId),
    /// Given back on shutdown.
    Released,
    /// Parked until people decide an approval request.
    Parked(proto::RequestId),
}

/// How a tool call step ended.
enum CallEnd {
    /// Its result is recorded; the loop goes on.
    Done,
    /// It waits for people; the turn is parked.
    Parked(proto::RequestId),
}

/// What one model response's steps did to the turn.
enum Steps {
    /// The turn goes on: ask the model again.
    Continue,
    /// A deliverable (or a failure) ended it.
    Delivered,
    /// It waits for people.
    Parked(proto::RequestId),
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
                    && call_id_of(&r.content) == Some(id)
                    && r.metadata.get("effect").map(String::as_str) == Some(Effect::Read.as_str())
            })
        })
    };
    staged.iter().any(|r| match r.record_type {
        RecordType::AgentThought => false,
        RecordType::ToolResult => !read_call(call_id_of(&r.content)),
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
        // The MCP servers this turn started end with it.
        self.tools.end_session(&claim.session_id.to_string());
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
                let error = excerpt(&self.secrets.scrub(&e.to_string()), MAX_QUOTE_BYTES);
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
        let mut rec = rec;
        // A side effect's result carries what it did to the files (already there when a
        // replay serves a recorded one).
        if rec.record_type == RecordType::ToolResult
            && let Some(change) = self.changed.take()
            && let Value::Object(m) = &mut rec.content
            && !m.contains_key("workspace")
            && let Ok(v) = serde_json::to_value(change)
        {
            m.insert("workspace".into(), v);
        }
        // The first record of a model's answer says which model gave it and what it cost.
        if let Some(u) = self.usage_note.take() {
            for (k, v) in [
                ("provider", u.provider.clone()),
                ("model", u.model.clone()),
                ("tokens_in", u.tokens_in.to_string()),
                ("tokens_out", u.tokens_out.to_string()),
                ("money_micros", u.money_micros.to_string()),
            ] {
                rec.metadata.insert(k.into(), v);
            }
        }
        if self.retries_note > 0 {
            let n = std::mem::take(&mut self.retries_note);
            rec.metadata.insert("model_retries".into(), n.to_string());
        }
        // No secret reaches a record: the model's words, a tool's output, an error.
        self.secrets.scrub_value(&mut rec.content);
        for v in rec.metadata.values_mut() {
            if let std::borrow::Cow::Owned(clean) = self.secrets.scrub(v) {
                *v = clean;
            }
        }
        // The model is shown this record later as the store will keep it (RFC 8785 JSON, where
        // `1.0` is `1`), so a prompt rebuilt from the store is byte for byte the one sent.
        let as_stored = rec
            .validate()
            .ok()
            .and_then(|p| serde_json::from_str(&p.content).ok())
            .unwrap_or_else(|| rec.content.clone());
        history.push(Record {
            record_id: RecordId::from(uuid::Uuid::nil()),
            hash: String::new(),
            record_type: rec.record_type,
            content: as_stored,
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
        f: impl FnOnce(&kura_store::Tx<'_>) -> kura_store::Result<T>,
    ) -> kura_store::Result<T> {
        let staged = std::mem::take(&mut self.staged);
        let spent = std::mem::take(&mut self.spent);
        let writs = self.writs.clone();
        let (appended, out) = fenced(&mut self.store, claim, |tx| {
            let mut records = Vec::with_capacity(staged.len());
            for rec in &staged {
                records.push(tx.append(claim.output_ledger_id, rec)?.record);
            }
            for usage in &spent {
                kura_work::writs::debit_usage(tx, claim.session_id, writs.ids(), usage)?;
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
        if self.staged.is_empty() && self.spent.is_empty() {
            return Ok(());
        }
        self.commit(claim, history, |_| Ok(()))
    }

    /// The policy aegis published, if any (re-read only when its hash changes).
    fn published_policy(&mut self) -> kura_store::Result<Option<(String, Arc<Policy>)>> {
        let Some(hash) = policy::current_hash(&self.store)? else {
            return Ok(None);
        };
        if self.policy.as_ref().is_none_or(|(h, _)| *h != hash) {
            self.policy = policy::load(&self.store, &hash)?.map(|p| (hash, Arc::new(p)));
        }
        Ok(self.policy.clone())
    }

    /// Commits what is staged with the turn's seal and completion: one commit ends a turn.
    fn complete(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
    ) -> kura_store::Result<proto::LedgerId> {
        let sealer = self.store.sealer().cloned();
        self.commit(claim, history, |tx| {
            tx.complete_turn(claim, sealer.as_ref())
        })
    }

    /// Earlier attempts all failed (or their workers died): ends the turn, briefly.
    fn give_up(&mut self, claim: &Claim, history: &mut Vec<Record>) -> kura_store::Result<End> {
        let last = claim
            .last_error
            .as_deref()
            .unwrap_or("its worker stopped without a word");
        let msg = format!(
            "gave up after {} failed attempts; the last: {}",
            claim.attempt - 1,
            excerpt(last, MAX_QUOTE_BYTES)
        );
        self.fail(claim, history, &msg)?;
        let ledger = self.complete(claim, history)?;
        Ok(End::Completed(ledger))
    }

    /// The turn's role: its model, its tools. One this worker lacks ends the turn (`Err`: why).
    fn take_role(&mut self, claim: &Claim) -> Result<(), crate::roles::UnknownRole> {
        let role = self.roles.get(claim.role.as_deref())?.clone();
        self.provider = role.provider.clone();
        self.specs = role.specs.clone();
        self.role = role;
        Ok(())
    }

    fn run_turn(&mut self, claim: &Claim, lost: &AtomicBool) -> kura_store::Result<End> {
        self.staged.clear();
        self.spent.clear();
        self.usage_note = None;
        self.mistakes = 0;
        // The writs the turn runs under: its session's, its planner's or its submitter's,
        // narrowed by its role's.
        self.writs = kura_work::gate::writs_of_turn(&self.store, claim.turn_id)?;
        let context = self.store.hydrate(claim.context_ledger_id)?;
        let mut history = self.store.hydrate(claim.output_ledger_id)?;
        if claim.attempt > i64::from(self.config.max_attempts.max(1)) {
            return self.give_up(claim, &mut history);
        }
        if let Err(why) = self.take_role(claim) {
            self.fail(claim, &mut history, &why.to_string())?;
            let ledger = self.complete(claim, &mut history)?;
            return Ok(End::Completed(ledger));
        }
        self.changed = None;
        // A session new to this workspace starts with the files of the ledger it grew from.
        if let Some(files) = &self.files
            && let Ok(ws) = self.tools.workspace(&claim.session_id.to_string())
        {
            files.align(&self.store, &ws, claim.context_ledger_id);
        }
        if claim.resumed
            && let CallEnd::Parked(request) = self.resolve_dangling_calls(claim, &mut history)?
        {
            return Ok(End::Parked(request));
        }
        if let Some(argv) = claim.validate_command.clone() {
            return self.validate_by_command(claim, &mut history, argv);
        }
        let mut recorded = match claim.replay {
            Some(r) => Some(Recorded::load(&self.store, r)?),
            None => None,
        };
        // A replayed turn starts from the files its recorded turn started from.
        if let (Some(files), Some(r)) = (&self.files, &recorded)
            && let Some(start) = r.first_change()
            && let Ok(ws) = self.tools.workspace(&claim.session_id.to_string())
        {
            files.start_at(
                &ws,
                &start.before,
                "a replayed turn starts from its recorded files",
            );
        }
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
            let offline = recorded.as_ref().is_some_and(|r| !r.replay.live);
            if !offline && let Some(why) = self.budget_ended(claim)? {
                self.fail(claim, &mut history, &why)?;
                break;
            }
            let Some(steps) = self.next_steps(claim, &context, &mut history, recorded.as_ref())?
            else {
                break;
            };
            match self.take_steps(claim, &mut history, steps, recorded.as_mut())? {
                Steps::Continue => {}
                Steps::Delivered => delivered = true,
                Steps::Parked(request) => return Ok(End::Parked(request)),
            }
        }
        let ledger = self.complete(claim, &mut history)?;
        Ok(End::Completed(ledger))
    }

    /// A validation turn whose validator is a command: it runs as a `shell.run` call (the
    /// policy, the sandbox and the turn's writ hold it like any call), then the verdict is
    /// delivered — exit 0 passes. A resumed turn runs nothing twice: a recorded call is not
    /// made again.
    fn validate_by_command(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        argv: Vec<String>,
    ) -> kura_store::Result<End> {
        let delivered = history
            .iter()
            .any(|r| r.record_type == RecordType::TaskDeliverable);
        if !delivered {
            if !history
                .iter()
                .any(|r| r.record_type == RecordType::ToolCall)
            {
                let mut args = Map::new();
                args.insert("argv".into(), Value::from(argv));
                if let CallEnd::Parked(r) =
                    self.call_tool(claim, history, "shell.run", args, None)?
                {
                    return Ok(End::Parked(r));
                }
            }
            let result = history
                .iter()
                .rev()
                .find(|r| r.record_type == RecordType::ToolResult);
            let (pass, text) = command_verdict(result);
            let mut extra = Map::new();
            extra.insert(
                "verdict".into(),
                Value::from(if pass { "pass" } else { "fail" }),
            );
            let content = DeliverableContent::new(text, true, extra).to_value();
            let r = self.record(claim, RecordType::TaskDeliverable, content, &[]);
            self.append(claim, history, r)?;
        }
        let ledger = self.complete(claim, history)?;
        Ok(End::Completed(ledger))
    }

    /// Records and acts on one model response's steps, in order, until one delivers, fails
    /// the turn or parks it.
    fn take_steps(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        steps: Vec<Step>,
        mut recorded: Option<&mut Recorded>,
    ) -> kura_store::Result<Steps> {
        // An answer's mistakes count once: the model is told of each, and it is the next
        // answer that gets one chance to correct them. A replay from the record counts none:
        // it repeats what happened, one step at a time.
        let mut counted = recorded.as_ref().is_some_and(|r| !r.replay.live);
        for step in steps {
            match step {
                Step::Thought(t) => {
                    let content = TextContent::new(t).to_value();
                    let r = self.record(claim, RecordType::AgentThought, content, &[]);
                    self.append(claim, history, r)?;
                }
                Step::ToolCall { name, arguments } => {
                    // The limit counts tool calls, not model responses: one response
                    // with a hundred calls runs no more than the limit allows.
                    if tool_calls(history) >= self.config.max_steps {
                        let msg =
                            format!("step limit of {} tool calls reached", self.config.max_steps);
                        self.fail(claim, history, &msg)?;
                        return Ok(Steps::Delivered);
                    }
                    // A tool it is not offered is refused with a result it reads (in
                    // `call_tool`); a second mistake in a row is the model's error.
                    let offered = self.tools.get(&name).is_some() && self.role.allows(&name);
                    if !offered
                        && !std::mem::replace(&mut counted, true)
                        && self.mistaken(
                            claim,
                            history,
                            &format!("called {:?}, a tool it is not offered", excerpt(&name, 256)),
                        )?
                    {
                        return Ok(Steps::Delivered);
                    }
                    if offered {
                        self.mistakes = 0;
                    }
                    if let CallEnd::Parked(request) =
                        self.call_tool(claim, history, &name, arguments, recorded.as_deref_mut())?
                    {
                        return Ok(Steps::Parked(request));
                    }
                }
                Step::Malformed { name, why } => {
                    if !std::mem::replace(&mut counted, true)
                        && self.mistaken(
                            claim,
                            history,
                            &format!("wrote a tool call that cannot run: {why}"),
                        )?
                    {
                        return Ok(Steps::Delivered);
                    }
                    // Recorded and answered like any refused call, so the model reads why.
                    let call_id = CallId::new(proto::new_id().to_string());
                    let mut call = ToolCallContent::new(shown_tool(&name), Map::new(), &call_id);
                    call.malformed = Some(excerpt(&why, 512));
                    let r = self.record(
                        claim,
                        RecordType::ToolCall,
                        call.to_value(),
                        &[("effect", "unknown".to_owned())],
                    );
                    self.append(claim, history, r)?;
                    let told = format!(
                        "not run: {why}; call a tool you are offered, with its arguments as one JSON object"
                    );
                    self.record_result(claim, history, &call_id, Err(ToolError::Refused(told)))?;
                }
                Step::Plan(plan) => {
                    // Recorded as given; minato checks it (roles, cycle, bounds) when the
                    // turn is done, and records a refusal.
                    let content = serde_json::to_value(&plan).unwrap_or(Value::Null);
                    let r = self.record(claim, RecordType::AgentPlan, content, &[]);
                    self.append(claim, history, r)?;
                }
                Step::Deliver {
                    text,
                    is_final,
                    extra,
                } => {
                    let content = DeliverableContent::new(text, is_final, extra).to_value();
                    let r = self.record(claim, RecordType::TaskDeliverable, content, &[]);
                    self.append(claim, history, r)?;
                    return Ok(Steps::Delivered);
                }
            }
        }
        Ok(Steps::Continue)
    }

    /// Counts one model mistake (`what` it did); the second in a row ends the turn with it
    /// recorded as the model's error (true), the first is only counted (the refusal the model
    /// reads is its one chance to correct itself).
    fn mistaken(
        &mut self,
        claim: &Claim,
        history: &mut Vec<Record>,
        what: &str,
    ) -> kura_store::Result<bool> {
        self.mistakes += 1;
        if self.mistakes < 2 {
            return Ok(false);
        }
        let msg = format!("the model's error: it {what}, again after being told");
        self.fail(claim, history, &msg)?;
        Ok(true)
    }

    /// Which budget, if any, forbids asking the model again: the session's (`[worker]
    /// session_tokens`, `session_money_micros`) or its writ's (tokens, money, wall time,
    /// expiry, revocation). Counts what is spent but not yet committed.
    fn budget_ended(&mut self, claim: &Claim) -> kura_store::Result<Option<String>> {
        let used =
            kura_work::writs::session_usage(&self.store, claim.session_id)?.unwrap_or_default();
        let (tokens, money) = self
            .spent
            .iter()
            .fold((used.1 + used.2, used.3), |(t, m), u| {
                (
                    t.saturating_add(u.tokens()),
                    m.saturating_add(u.money_micros),
                )
            });
        let (t_max, m_max) = (self.config.session_tokens, self.config.session_money_micros);
        if t_max > 0 && tokens >= t_max {
            return Ok(Some(format!(
                "the session's token budget ended the run ({tokens} of {t_max} tokens spent)"
            )));
        }
        if m_max > 0 && money >= m_max {
            return Ok(Some(format!(
                "the session's money budget ended the run ({money} of {m_max} millionths spent)"
            )));
        }
        // Usage staged for the next commit counts as spent already (no commit of its own).
        let pending = kura_policy::writ::Spent {
            tokens: self.spent.iter().map(|u| u.tokens()).sum(),
            money_micros: self.spent.iter().map(|u| u.money_micros).sum(),
            ..Default::default()
        };
        for writ in self.writs.ids() {
            let verdict = kura_work::writs::check_model_step_pending(
                &self.store,
                *writ,
                &self.issuers,
                now_ms(),
                pending,
            )?;
            if let Err(e) = verdict {
                return Ok(Some(format!("its writ ended the run: {e}")));
            }
        }
        Ok(None)
    }

    /// What is left of the session's token budget (`[worker] session_tokens`) and of every
    /// token budget of the writs the turn runs under, counting what is spent but not yet
    /// committed: the most the next answer may take. `None` when no budget limits tokens.
    fn tokens_left(&self, claim: &Claim) -> kura_store::Result<Option<u64>> {
        let used =
            kura_work::writs::session_usage(&self.store, claim.session_id)?.unwrap_or_default();
        let pending: u64 = self.spent.iter().map(|u| u.tokens()).sum();
        let spent = used.1.saturating_add(used.2).saturating_add(pending);
        let t_max = self.config.session_tokens;
        let mut left = (t_max > 0).then(|| t_max.saturating_sub(spent));
        let staged = kura_policy::writ::Spent {
            tokens: pending,
            ..Default::default()
        };
        for writ in self.writs.ids() {
            let w =
                kura_work::writs::tokens_left(&self.store, *writ, &self.issuers, now_ms(), staged)?;
            left = match (left, w) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(left)
    }

    /// The model's next steps (or, in a replay that is not live, the recorded one); `None`
    /// when the turn ended instead (the step limit, the model's failure: recorded). What the
    /// model was sent stands before what it answered (a `model.prompt`); the answer's cost
    /// and retries go on the answer's own first record.
    fn next_steps(
        &mut self,
        claim: &Claim,
        context: &[Record],
        history: &mut Vec<Record>,
        recorded: Option<&Recorded>,
    ) -> kura_store::Result<Option<Vec<Step>>> {
        let input = TurnInput {
            session_id: claim.session_id,
            seq: claim.seq,
            context,
            history,
            tools: &self.specs,
            max_tokens: self.tokens_left(claim)?,
        };
        let taken = input.steps_taken();
        if taken >= self.config.max_steps {
            let msg = format!("step limit of {} reached", self.config.max_steps);
            self.fail(claim, history, &msg)?;
            return Ok(None);
        }
        let mut retries = 0;
        let asked = match recorded.filter(|r| !r.replay.live) {
            Some(r) => r
                .step(taken)
                .map(|s| (vec![s], None, None))
                .map_err(|e| e.to_string()),
            None => self
                .ask(&input, &mut retries)
                .map(|a| (a.steps, a.usage, a.prompt))
                .map_err(|e| format!("model provider failed: {e}")),
        };
        let (steps, usage, prompt) = match asked {
            Ok(a) => a,
            Err(e) => {
                self.fail(claim, history, &excerpt(&e, MAX_QUOTE_BYTES))?;
                return Ok(None);
            }
        };
        if let Some(sent) = &prompt {
            let content = proto::prompt::PromptContent::of(sent, usage.clone(), retries).to_value();
            let r = self.record(claim, RecordType::ModelPrompt, content, &[]);
            self.append(claim, history, r)?;
        }
        self.spent.extend(usage.clone());
        self.usage_note = usage;
        self.retries_note = retries;
        Ok(Some(steps))
    }

    /// Asks the provider, retrying a busy or unreachable server with backoff (doubling from
    /// 500 ms) and never sooner than its `Retry-After`; a server asking for more than
    /// [`MAX_RETRY_AFTER`] ends the step instead of holding the worker. The retries are
    /// counted on the answer's first record.
    fn ask(
        &self,
        input: &TurnInput<'_>,
        attempt: &mut u32,
    ) -> Result<kura_model::Answer, ProviderError> {
        loop {
            let (e, asked) = match self.provider.answer(input) {
                Err(ProviderError::Transient(e)) => (e, None),
                Err(ProviderError::Busy { why, retry_after }) => (why, retry_after),
                other => return other,
            };
            if *attempt >= self.retries {
                return Err(ProviderError::Transient(format!(
                    "{e} (after {attempt} retries)"
                )));
            }
            if let Some(wait) = asked.filter(|w| *w > MAX_RETRY_AFTER) {
                return Err(ProviderError::Fatal(format!(
                    "{e}; the server asks to wait {} s (Retry-After), more than hashi holds a turn for ({} s)",
                    wait.as_secs(),
                    MAX_RETRY_AFTER.as_secs()
                )));
            }
            *attempt += 1;
            let backoff = Duration::from_millis(500u64 << (*attempt - 1).min(6));
            let wait = asked.map_or(backoff, |a| a.max(backoff));
            tracing::warn!(error = %excerpt(&self.secrets.scrub(&e), MAX_QUOTE_BYTES), attempt, wait_ms = wait.as_millis() as u64, "model provider failed; retrying");
            // A stop during the backoff ends it at once; the turn is then released.
            if self.stop.sleep(wait) {
                return Err(ProviderError::Transient(e));
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
        let message = &*self.secrets.scrub(message);
        tracing::error!(turn_id = %claim.turn_id, %message, "turn failed");
        let error = TextContent::new(message).to_value();
        let e = self.record(claim, RecordType::SysError, error, &[]);
        self.append(claim, history, e)?;
        let failed = DeliverableContent::failed(format!("the turn failed: {message}"));
        let d = self.record(claim, RecordType::TaskDeliverable, failed.to_value(), &[]);
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
        // A secret the model put in the arguments is replaced before anything sees them:
        // what runs is what is recorded, and neither holds the secret.
        let mut scrubbed = Value::Object(std::mem::take(&mut arguments));
        self.secrets.scrub_value(&mut scrubbed);
        if let Value::Object(m) = scrubbed {
            arguments = m;
        }
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
            _ => CallId::new(proto::new_id().to_string()),
        };
        let effect = match self.tools.get(name) {
            Some(_) => self.tools.effect_of(name, &arguments).as_str(),
            None => "unknown",
        };
        let shown_name = excerpt(name, 256);
        let mut typed = ToolCallContent::new(shown_name.clone(), arguments.clone(), &call_id);
        typed.writ = self.writs.primary().map(|w| w.to_string());
        if as_given != arguments {
            typed.arguments_as_given = Some(as_given);
        }
        let content = typed.to_value();
        let size = content.to_string().len();
        if size > MAX_CALL_BYTES {
            // Too big to record, so it is not run either: what runs is always on record.
            let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
                content.to_string().as_bytes(),
            ));
            let call = self.record(
                claim,
                RecordType::ToolCall,
                ToolCallContent {
                    arguments_omitted: Some(OmittedArguments {
                        bytes: size as u64,
                        sha256: digest,
                    }),
                    ..ToolCallContent::new(shown_name, Map::new(), &call_id)
                }
                .to_value(),
                &[("effect", effect.to_owned())],
            );
            self.append(claim, history, call)?;
            let refusal = format!(
                "the call is {size} bytes, more than a record holds ({MAX_CALL_BYTES}); it was not run"
            );
            self.record_result(claim, history, &call_id, Err(ToolError::Refused(refusal)))?;
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
}

/// A validator command's verdict from its `tool.result`: exit 0 passes; the text says the
/// exit and the output's last lines.
fn command_verdict(result: Option<&Record>) -> (bool, String) {
    let Some(r) = result else {
        return (false, "the validator command has no result".into());
    };
    if let Some(e) = r.content.get("error").and_then(Value::as_str) {
        return (
            false,
            format!("the validator command did not run: {}", excerpt(e, 2000)),
        );
    }
    let out = r.content.get("result").cloned().unwrap_or(Value::Null);
    let code = out.get("exit_code").and_then(Value::as_i64);
    let tail = |k: &str| {
        let text = out.get(k).and_then(Value::as_str).unwrap_or("");
        let start = text.len().saturating_sub(1500);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        text[start..].trim().to_owned()
    };
    let (stdout, stderr) = (tail("stdout"), tail("stderr"));
    let said = [stdout, stderr]
        .into_iter()
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    match code {
        Some(0) => (true, format!("pass: exit 0\n{said}").trim().to_owned()),
        Some(c) => (false, format!("fail: exit {c}\n{said}").trim().to_owned()),
        None => (
            false,
            format!("fail: stopped by a signal\n{said}")
                .trim()
                .to_owned(),
        ),
    }
}
