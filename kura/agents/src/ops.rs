//! The operations an outside agent may run, one method each, over the store: the MCP tools
//! and the HTTP routes both call these, so the two surfaces cannot drift. Every write is one
//! transaction (nothing half-written) authored by the agent the token named.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kura_memory::{self as memory, MemoryTx as _, Search};
use kura_store::{Store, StoreError};
use kura_work::WorkTx;
use kura_work::agents::{
    AgentSession, AgentStart, agent_claim, open_agent_turn, open_agent_turns, turn_agent,
};
use kura_work::gate::{self, GateCall};
use kura_work::{approvals, policy};
use proto::agent::*;
use proto::doorbell::{ToolApprove, WorkerComplete};
use proto::record::{Content, NewRecord, RecordType};
use proto::{ApprovalState, CallId, Effect, RecordId, ToolCallContent, Verdict};
use serde_json::{Map, Value};

use crate::limits::Limits;
use crate::{AgentsConfig, Caller, GatewayError};

/// How long `wait_decision` may hold one call (HTTP requests must finish within 10 s).
pub const MAX_WAIT: Duration = Duration::from_secs(8);
/// A label's length cap (Unicode scalar values).
const MAX_LABEL: usize = 200;

/// The operations, over `kura serve`'s store and bus.
pub struct Gateway {
    pub(crate) config: AgentsConfig,
    store: Mutex<Store>,
    pub(crate) bus: Option<kura_runtime::Bus>,
    pub(crate) limits: Limits,
    /// Who may grant writs: an agent's calls are checked against its writ before policy.
    people: Vec<kura_policy::writ::Issuer>,
    /// Rung by the decision and completion doorbells: waiters look at SQLite again.
    pub(crate) wakeup: std::sync::Arc<crate::wake::Wakeup>,
}

pub(crate) fn store_error(e: StoreError) -> GatewayError {
    match e {
        StoreError::NotFound { kind, id } => GatewayError::NotFound(format!("no {kind} {id}")),
        StoreError::Invalid(m) => GatewayError::Invalid(m),
        StoreError::InvalidId(id) => GatewayError::Invalid(format!("{id:?} is not an id")),
        StoreError::Record(e) => GatewayError::Invalid(e.to_string()),
        StoreError::Fenced { turn_id, .. } => {
            GatewayError::Invalid(format!("turn {turn_id} is not running; start a new one"))
        }
        other => GatewayError::Internal(other.to_string()),
    }
}

impl Gateway {
    /// A gateway writing to `store` (whose sealer seals the agents' ledgers) and ringing
    /// aegis, minato and mikado on `bus` when there is one.
    pub fn new(config: AgentsConfig, store: Store, bus: Option<kura_runtime::Bus>) -> Self {
        let limits = Limits::new(config.records_per_minute);
        Gateway {
            config,
            store: Mutex::new(store),
            bus,
            limits,
            people: Vec::new(),
            wakeup: Default::default(),
        }
    }

    /// Listens for the doorbells that answer a waiting agent (a decision, a finished
    /// session or turn) on the gateway's bus; without one, waits poll SQLite.
    pub async fn listen(&self) -> anyhow::Result<()> {
        let Some(bus) = &self.bus else { return Ok(()) };
        let s = &bus.subjects;
        let w = self.wakeup.clone();
        bus.doorbells::<proto::doorbell::ApprovalDecided, _>(
            s.approval_decided(),
            None,
            move |_| w.ring(),
        )
        .await?;
        let w = self.wakeup.clone();
        bus.doorbells::<proto::doorbell::SessionComplete, _>(
            s.session_complete(),
            None,
            move |_| w.ring(),
        )
        .await?;
        Ok(())
    }

    /// Whether a doorbell can wake a waiter now.
    pub(crate) fn bus_up(&self) -> bool {
        self.bus.as_ref().is_some_and(|b| b.is_connected())
    }

    /// The largest request body the HTTP routes read: a record at its bound (measured as
    /// JSON, as the body carries it) plus room for the envelope.
    pub fn max_body(&self) -> usize {
        self.config.max_record_bytes.saturating_add(64 * 1024)
    }

    /// How many of `agent`'s calls a bound refused so far (for logs and tests).
    pub fn refusals(&self, agent: &str) -> u64 {
        self.limits.refusals(agent)
    }

    pub(crate) fn with_store<T>(
        &self,
        f: impl FnOnce(&mut Store) -> Result<T, GatewayError>,
    ) -> Result<T, GatewayError> {
        let mut store = self
            .store
            .lock()
            .map_err(|_| GatewayError::Internal("the gateway's store lock is poisoned".into()))?;
        f(&mut store)
    }

    /// A record by `caller`, with where it came from in its metadata.
    pub(crate) fn record(
        &self,
        caller: &Caller,
        t: RecordType,
        content: Content,
    ) -> Result<NewRecord, GatewayError> {
        let mut r = NewRecord::new(t, content, caller.author());
        r.metadata = BTreeMap::from([
            ("via".to_owned(), caller.via.to_owned()),
            ("client".to_owned(), caller.client.clone()),
        ]);
        let size = serde_json::to_vec(&r.content)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if size > self.config.max_record_bytes {
            self.limits.refused(&caller.agent);
            return Err(GatewayError::TooLarge(format!(
                "the record is {size} bytes; this Kura takes at most {} ([agents] max_record_bytes)",
                self.config.max_record_bytes
            )));
        }
        self.limits.take(&caller.agent)?;
        Ok(r)
    }

    /// Starts a turn: the instruction, the memory found for it (sealed as the context), and
    /// an open output ledger.
    pub fn start_session(
        &self,
        caller: &Caller,
        req: StartSession,
    ) -> Result<Started, GatewayError> {
        if req.instruction.trim().is_empty() {
            return Err(GatewayError::Invalid("the instruction is empty".into()));
        }
        let label = match &req.label {
            Some(l) if l.chars().count() > MAX_LABEL => {
                return Err(GatewayError::Invalid(format!(
                    "the label is over {MAX_LABEL} characters"
                )));
            }
            Some(l) if !l.trim().is_empty() => l.trim().to_owned(),
            _ => req
                .instruction
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .chars()
                .take(60)
                .collect(),
        };
        if req.session_id.is_some() && req.from_ledger.is_some() {
            return Err(GatewayError::Invalid(
                "give session_id or from_ledger, not both".into(),
            ));
        }
        let rec = self.record(
            caller,
            RecordType::TaskInstruction,
            Content::text(req.instruction.clone()),
        )?;
        let author = caller.author();
        let hits = self.config.memory_hits;
        self.with_store(|store| {
            if open_agent_turns(store, &author).map_err(store_error)? >= self.config.open_sessions {
                self.limits.refused(&caller.agent);
                return Err(GatewayError::Limited(format!(
                    "agent {} has {} turns open already ([agents] open_sessions); end one first",
                    caller.agent, self.config.open_sessions
                )));
            }
            let session = match (req.session_id, req.from_ledger) {
                (Some(s), _) => AgentSession::Continue(s),
                (None, Some(l)) => {
                    // Only the agent's own history: a fork's context is what it forks.
                    crate::reads::own_ledger(store, caller, l)?;
                    AgentSession::Forked(
                        kura_history::fork::fork(store, l, &label)
                            .map_err(store_error)?
                            .0
                            .session_id,
                    )
                }
                (None, None) => AgentSession::New(&label),
            };
            let sealer = store.sealer().cloned();
            store
                .write(|tx| {
                    let instruction = tx.write_record(&rec)?;
                    let found = memory_hits(tx, &req.instruction, hits)?;
                    let ids: Vec<RecordId> = found.iter().map(|m| m.record_id).collect();
                    let start = AgentStart {
                        agent: &author,
                        instruction: instruction.record_id,
                        session,
                        memory: &ids,
                    };
                    let claim = open_agent_turn(tx, &start, sealer.as_ref())?;
                    Ok(Started {
                        session_id: claim.session_id,
                        turn_id: claim.turn_id,
                        context_ledger_id: claim.context_ledger_id,
                        output_ledger_id: claim.output_ledger_id,
                        memory: found,
                        workspace: None,
                    })
                })
                .map(|mut started| {
                    // The files it starts from (a fork's: its origin's), read after the commit.
                    started.workspace =
                        kura_history::workspace::tree_at(store, started.context_ledger_id)
                            .ok()
                            .flatten();
                    started
                })
                .map_err(store_error)
        })
    }

    /// Records a step into the turn's output ledger.
    pub fn record_step(&self, caller: &Caller, req: RecordStep) -> Result<Recorded, GatewayError> {
        // Only the four step types parse (calls go through declare_call, deliverables
        // through end_turn).
        let t = RecordType::from(req.record_type);
        let content = match req.content {
            Value::String(_) if t == RecordType::ToolResult => {
                return Err(GatewayError::Invalid(
                    "a tool.result is an object: {\"call_id\": (from declare_call), \"status\": \"success\" \
                     or \"error\", \"result\": … or \"error\": \"…\"}"
                        .into(),
                ));
            }
            Value::String(s) => Content::text(s),
            // What a tool did to Kura's workspaces is attested by hashi alone: a tree an agent
            // named would be restored for a fork as if Kura had seen it.
            Value::Object(m) if t == RecordType::ToolResult && m.contains_key("workspace") => {
                return Err(GatewayError::Invalid(
                    "a tool.result's \"workspace\" is attested by Kura's executor, never recorded by an agent".into(),
                ));
            }
            v @ Value::Object(_) => {
                Content::parse(t, v).map_err(|e| GatewayError::Invalid(e.to_string()))?
            }
            _ => {
                return Err(GatewayError::Invalid(
                    "content is a string or a JSON object".into(),
                ));
            }
        };
        let rec = self.record(caller, t, content)?;
        self.append(caller, req.turn_id, &rec)
    }

    fn append(
        &self,
        caller: &Caller,
        turn: proto::TurnId,
        rec: &NewRecord,
    ) -> Result<Recorded, GatewayError> {
        self.with_store(|store| {
            let claim = agent_claim(store, &caller.author(), turn).map_err(store_error)?;
            let out = claim.output_ledger_id;
            let a =
                kura_work::fenced(store, &claim, |tx| tx.append(out, rec)).map_err(store_error)?;
            Ok(Recorded {
                record_id: a.record.record_id,
                hash: a.record.hash,
                position: a.position,
            })
        })
    }

    /// The people whose writs bind agents here (`[writs] issuers`).
    pub fn with_people(mut self, people: Vec<kura_policy::writ::Issuer>) -> Self {
        self.people = people;
        self
    }

    /// Declares a tool call: `tool.call` and `approval.request` in the turn, ruled on by the
    /// published policy in the same commit when it allows or denies; else aegis is asked.
    pub fn declare_call(
        &self,
        caller: &Caller,
        req: DeclareCall,
    ) -> Result<Declared, GatewayError> {
        if req.tool.is_empty() || req.tool.len() > 200 {
            return Err(GatewayError::Invalid(
                "tool is a name of 1-200 bytes".into(),
            ));
        }
        // The effect class is this Kura's, never the agent's: unknown tools are external.
        let effect = self
            .config
            .tool_effects
            .get(&req.tool)
            .copied()
            .unwrap_or(Effect::External);
        let call_id = CallId::new(format!("call-{}", proto::new_id()));
        let call = ToolCallContent::new(req.tool.clone(), req.arguments.clone(), &call_id);
        let rec = self.record(caller, RecordType::ToolCall, Content::ToolCall(call))?;
        let author = caller.author();
        let call = GateCall::new(&req.tool, effect, req.arguments.clone());
        let filed = self.with_store(|store| {
            let claim = agent_claim(store, &author, req.turn_id).map_err(store_error)?;
            let published = match policy::current_hash(store).map_err(store_error)? {
                Some(h) => policy::load(store, &h)
                    .map_err(store_error)?
                    .map(|p| (h, p)),
                None => None,
            };
            // The agent's writ (its session's, else its own), named by the call.
            let writs = gate::writs_of_turn(store, claim.turn_id).map_err(store_error)?;
            let mut rec = rec.clone();
            if let (Some(id), Some(content)) = (writs.primary(), rec.content.as_object_mut()) {
                content.insert("writ".into(), Value::String(id.to_string()));
            }
            let filing = gate::Filing {
                claim: &claim,
                call_id: &call_id,
                call: &call,
                author: &author,
                metadata: rec.metadata.clone(),
                writs: &writs,
                issuers: &self.people,
                policy: published.as_ref().map(|(h, p)| (h.as_str(), p)),
            };
            let filed = kura_work::fenced(store, &claim, |tx| {
                tx.append(claim.output_ledger_id, &rec)?;
                gate::file(tx, &filing)
            })
            .map_err(store_error)?;
            Ok(filed)
        })?;
        let request_id = filed.approval.request_id;
        let decision = match filed.ruled {
            gate::Ruled::Allowed { rule } => (Verdict::Allow, Some(rule)),
            gate::Ruled::Refused(r) => (Verdict::Deny, Some(r.rule())),
            _ => {
                // aegis rules on it (and asks people when its policy says so): rung, never
                // waited for — the agent waits with `wait_decision`, woken by the decision.
                // With no bus aegis finds the request on its next poll.
                if let Some(bus) = &self.bus {
                    bus.ring(bus.subjects.tool_approve(), &ToolApprove { request_id });
                }
                // A decision that landed meanwhile (a person who was quick) is answered
                // with its edited arguments, never as a bare allow.
                let a =
                    self.with_store(|s| approvals::approval(s, request_id).map_err(store_error))?;
                match a.map(|a| (a.state, a.rule, a.edited_arguments)) {
                    Some((ApprovalState::Approved, rule, edited)) => {
                        return Ok(Declared {
                            request_id,
                            call_id,
                            decision: Verdict::Allow,
                            rule,
                            effect,
                            arguments: call.arguments().clone(),
                            edited_arguments: parse_edit(edited.as_deref())?,
                        });
                    }
                    Some((ApprovalState::Denied, rule, _)) => (Verdict::Deny, rule),
                    Some((_, rule, _)) => (Verdict::Ask, rule),
                    None => (Verdict::Ask, None),
                }
            }
        };
        Ok(Declared {
            request_id,
            call_id,
            decision: decision.0,
            rule: decision.1,
            effect,
            arguments: call.arguments().clone(),
            edited_arguments: None,
        })
    }

    /// Puts a question to people: a `person.ask` call declared in the turn, which the gate
    /// always asks people about; the answer is the approval's `answer` argument.
    pub fn ask_person(&self, caller: &Caller, req: AskPerson) -> Result<Declared, GatewayError> {
        if req.question.trim().is_empty() || req.question.len() > 16 * 1024 {
            return Err(GatewayError::Invalid(
                "a question is 1 byte to 16 KiB of text".into(),
            ));
        }
        let mut arguments = Map::new();
        arguments.insert("question".into(), req.question.into());
        if !req.choices.is_empty() {
            arguments.insert("choices".into(), req.choices.into());
        }
        let declare = DeclareCall {
            turn_id: req.turn_id,
            tool: proto::content::PERSON_ASK.to_owned(),
            arguments,
        };
        self.declare_call(caller, declare)
    }

    /// Where a request of this agent stands, waiting up to [`MAX_WAIT`] for a decision.
    pub fn wait_decision(
        &self,
        caller: &Caller,
        req: WaitDecision,
    ) -> Result<Decision, GatewayError> {
        let _slot = self.limits.wait(&caller.agent)?;
        let wait = Duration::from_millis(req.timeout_ms.unwrap_or(5_000)).min(MAX_WAIT);
        let deadline = Instant::now() + wait;
        let author = caller.author();
        loop {
            let mark = self.wakeup.mark();
            let (a, record) = self.with_store(|s| {
                let a = approvals::approval(s, req.request_id)
                    .map_err(store_error)?
                    .filter(|a| {
                        turn_agent(s, a.turn_id).ok().flatten().as_deref() == Some(author.as_str())
                    })
                    .ok_or_else(|| {
                        GatewayError::NotFound(format!(
                            "no request {} of this agent",
                            req.request_id
                        ))
                    })?;
                let record = approvals::decision_record(s, req.request_id).map_err(store_error)?;
                Ok((a, record))
            })?;
            if a.state.is_decided() || Instant::now() >= deadline {
                let edited = parse_edit(a.edited_arguments.as_deref())?;
                if a.tool_name == proto::content::PERSON_ASK && a.state == ApprovalState::Approved {
                    self.record_answer(caller, &a)?;
                }
                return Ok(Decision {
                    request_id: a.request_id,
                    state: a.state,
                    rule: a.rule,
                    edited_arguments: edited,
                    decision_record_id: record,
                });
            }
            self.wakeup.wait(mark, deadline, self.bus_up());
        }
    }

    /// A question's answer as its call's `tool.result`, authored by the person who signed
    /// it — once, however often the agent asks where the question stands.
    fn record_answer(&self, caller: &Caller, a: &approvals::Approval) -> Result<(), GatewayError> {
        let answer = parse_edit(a.edited_arguments.as_deref())?
            .and_then(|e| e.get("answer").cloned())
            .unwrap_or(Value::Null);
        self.with_store(|store| {
            let claim = agent_claim(store, &caller.author(), a.turn_id).map_err(store_error)?;
            let recorded = store
                .hydrate(claim.output_ledger_id)
                .map_err(store_error)?
                .iter()
                .any(|r| {
                    r.record_type == RecordType::ToolResult
                        && proto::content::call_id_of(&r.content) == Some(a.call_id.as_str())
                });
            if recorded {
                return Ok(());
            }
            let by = approvals::votes(store, a.request_id)
                .map_err(store_error)?
                .into_iter()
                .find(|(_, v)| v == "approve")
                .map(|(who, _)| {
                    if who.contains(':') {
                        who
                    } else {
                        format!("user:{who}")
                    }
                })
                .unwrap_or_else(|| "user:unknown".to_owned());
            let mut result = Map::new();
            result.insert("answer".into(), answer);
            let content = proto::ToolResultContent::success(Value::Object(result), &a.call_id);
            let rec = NewRecord {
                record_type: RecordType::ToolResult,
                content: content.to_value(),
                author_id: by,
                metadata: Default::default(),
            };
            let out = claim.output_ledger_id;
            kura_work::fenced(store, &claim, |tx| tx.append(out, &rec)).map_err(store_error)?;
            Ok(())
        })
    }

    /// Takes back a call of this agent's that it will not run: an undecided request is
    /// denied in its name ([`gate::withdraw`]); a decided one is answered as it stands.
    pub fn withdraw_call(
        &self,
        caller: &Caller,
        req: WithdrawCall,
    ) -> Result<Decision, GatewayError> {
        let author = caller.author();
        self.with_store(|s| {
            let mine = |s: &Store| -> Result<approvals::Approval, GatewayError> {
                approvals::approval(s, req.request_id)
                    .map_err(store_error)?
                    .filter(|a| {
                        turn_agent(s, a.turn_id).ok().flatten().as_deref() == Some(author.as_str())
                    })
                    .ok_or_else(|| {
                        GatewayError::NotFound(format!(
                            "no request {} of this agent",
                            req.request_id
                        ))
                    })
            };
            let a = mine(s)?;
            match s.write(|tx| gate::withdraw(tx, &a, &author)) {
                // A person decided in the meantime: that decision stands, and is answered.
                Ok(_) | Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(store_error(e)),
            }
            let a = mine(s)?;
            let record = approvals::decision_record(s, req.request_id).map_err(store_error)?;
            Ok(Decision {
                request_id: a.request_id,
                state: a.state,
                rule: a.rule,
                // An approval with an edit runs the edit, never the declared call.
                edited_arguments: parse_edit(a.edited_arguments.as_deref())?,
                decision_record_id: record,
            })
        })
    }

    /// Ends the turn: the deliverable (final), the output sealed, minato and mikado rung.
    pub fn end_turn(&self, caller: &Caller, req: EndTurn) -> Result<Ended, GatewayError> {
        let deliverable =
            proto::content::DeliverableContent::new(req.deliverable, true, Map::new());
        let content = Content::Json(deliverable.to_value());
        let rec = self.record(caller, RecordType::TaskDeliverable, content)?;
        let author = caller.author();
        let (claim, ledger) = self.with_store(|store| {
            let claim = agent_claim(store, &author, req.turn_id).map_err(store_error)?;
            let sealer = store.sealer().cloned();
            let out = kura_work::fenced(store, &claim, |tx| {
                tx.append(claim.output_ledger_id, &rec)?;
                tx.complete_turn(&claim, sealer.as_ref())
            })
            .map_err(store_error)?;
            let ledger = store.read_ledger(out).map_err(store_error)?;
            Ok((claim, ledger))
        })?;
        if let Some(bus) = &self.bus {
            bus.ring(
                bus.subjects.worker_complete(),
                &WorkerComplete {
                    turn_id: claim.turn_id,
                    ledger_id: claim.output_ledger_id,
                },
            );
        }
        Ok(Ended {
            session_id: claim.session_id,
            output_ledger_id: claim.output_ledger_id,
            ledger_hash: ledger.ledger_hash.unwrap_or_default(),
        })
    }

    /// Remembers a fact or decision: indexed for search as it is stored.
    pub fn remember(&self, caller: &Caller, req: Remember) -> Result<Recorded, GatewayError> {
        let t = RecordType::from(req.kind);
        if req.text.trim().is_empty() {
            return Err(GatewayError::Invalid("the text is empty".into()));
        }
        let rec = self.record(caller, t, Content::text(req.text))?;
        match req.turn_id {
            Some(turn) => self.append(caller, turn, &rec),
            None => self.with_store(|store| {
                // Memory outside a turn is sealed at once, in the agent's memory session.
                let sealer = store.sealer().cloned();
                let r = store
                    .write(|tx| {
                        let r = tx.write_record(&rec)?;
                        tx.seal_memory(&caller.author(), &[r.record_id], None, sealer.as_ref())?;
                        Ok(r)
                    })
                    .map_err(store_error)?;
                Ok(Recorded {
                    record_id: r.record_id,
                    hash: r.hash,
                    position: 0,
                })
            }),
        }
    }

    /// Searches memory; with a turn, what was returned is noted in it (a `sys.context`
    /// naming the query and the records), so the ledger shows what the agent was shown.
    pub fn search(&self, caller: &Caller, req: SearchMemory) -> Result<Found, GatewayError> {
        let limit = req.limit.unwrap_or(5).clamp(1, 50);
        if req.query.len() > 4096 {
            return Err(GatewayError::Invalid("the query is over 4096 bytes".into()));
        }
        let hits = self.with_store(|store| {
            store
                .write(|tx| memory_hits(tx, &req.query, limit))
                .map_err(store_error)
        })?;
        if let Some(turn) = req.turn_id {
            let ids: Vec<Value> = hits
                .iter()
                .map(|h| Value::String(h.record_id.to_string()))
                .collect();
            let mut noted = Map::new();
            noted.insert("memory_search".into(), Value::String(req.query.clone()));
            noted.insert("returned".into(), Value::Array(ids));
            let rec = self.record(
                caller,
                RecordType::SysContext,
                Content::Json(Value::Object(noted)),
            )?;
            self.append(caller, turn, &rec)?;
        }
        Ok(Found { hits })
    }
}

/// A person's edit as stored (canonical JSON), as the agent's wire carries it.
fn parse_edit(edited: Option<&str>) -> Result<Option<Map<String, Value>>, GatewayError> {
    edited
        .map(|text| {
            serde_json::from_str::<Map<String, Value>>(text).map_err(|e| {
                GatewayError::Internal(format!("the edited arguments cannot be read: {e}"))
            })
        })
        .transpose()
}

/// The top memory hits for `query`, superseded decisions left out.
fn memory_hits(
    tx: &kura_store::Tx<'_>,
    query: &str,
    limit: usize,
) -> kura_store::Result<Vec<Remembered>> {
    if limit == 0 || query.trim().is_empty() {
        return Ok(vec![]);
    }
    let found = memory::search(
        tx,
        &Search {
            query: query.to_owned(),
            limit,
            ..Default::default()
        },
    )?;
    Ok(found
        .into_iter()
        .filter(|h| !h.superseded)
        .map(|h| Remembered {
            record_id: h.record.record_id,
            record_type: h.record.record_type,
            text: proto::content::text_of(&h.record.content)
                .unwrap_or_default()
                .to_owned(),
        })
        .collect())
}
