//! Replaying a recorded turn (`minato replay`): its steps come back from the record, so a
//! replay checks that the code reproduces the ledger; and whatever decides the steps, a side
//! effect the recorded turn had is never run again — its recorded result is served, marked
//! as a replay and naming the record it replays.

use kura_model::Step;
use kura_store::Store;
use kura_work::Replay;
use proto::content::{ToolCallContent, call_id_of, text_of};
use proto::record::{Record, RecordType};
use proto::{CallId, LedgerId};
use serde_json::{Map, Value};

/// A replay asked for a step past the recorded turn's last.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the recorded turn (ledger {ledger}) has no step {step}")]
pub struct NoStep {
    /// The recorded turn's output ledger.
    pub ledger: LedgerId,
    /// The step asked for (1-based).
    pub step: usize,
}

/// A recorded tool call and, if it got one, its result.
pub struct RecordedCall {
    pub call_id: CallId,
    pub name: String,
    pub arguments: Map<String, Value>,
    pub result: Option<Record>,
    /// Taken by a live replay's call already (each recorded side effect serves once).
    pub used: bool,
}

/// The turn being replayed.
pub struct Recorded {
    pub replay: Replay,
    /// Its thoughts, calls and deliverable, in order.
    pub steps: Vec<Step>,
    pub calls: Vec<RecordedCall>,
}

impl Recorded {
    /// The first change the recorded turn's side effects made to the files.
    pub fn first_change(&self) -> Option<proto::workspace::WorkspaceChange> {
        self.calls
            .iter()
            .filter_map(|c| c.result.as_ref())
            .find_map(kura_history::workspace::change_of)
    }

    /// Reads the recorded turn's output ledger.
    pub fn load(store: &Store, replay: Replay) -> kura_store::Result<Recorded> {
        let records = store.hydrate(replay.of)?;
        let mut steps = Vec::new();
        let mut calls: Vec<RecordedCall> = Vec::new();
        for r in &records {
            let text = || text_of(&r.content).unwrap_or("").to_owned();
            match r.record_type {
                RecordType::AgentThought => steps.push(Step::Thought(text())),
                RecordType::ToolCall => {
                    let call = ToolCallContent::read(&r.content);
                    // A call that could not run is replayed as the mistake it was, never run.
                    if let Some(why) = call.as_ref().and_then(|c| c.malformed.clone()) {
                        let name = call.map(|c| c.tool_name).unwrap_or_default();
                        steps.push(Step::Malformed {
                            name: name.clone(),
                            why,
                        });
                        // It stands among the calls (the replay counts it as one), matched by
                        // nothing.
                        calls.push(RecordedCall {
                            call_id: CallId::default(),
                            name,
                            arguments: Map::new(),
                            result: None,
                            used: true,
                        });
                        continue;
                    }
                    let name = call
                        .as_ref()
                        .map(|c| c.tool_name.clone())
                        .unwrap_or_default();
                    // What the model asked, as given: the worker normalises it again.
                    let as_given = call
                        .as_ref()
                        .and_then(|c| c.arguments_as_given.clone().or(Some(c.arguments.clone())))
                        .unwrap_or_default();
                    steps.push(Step::ToolCall {
                        name: name.clone(),
                        arguments: as_given,
                    });
                    calls.push(RecordedCall {
                        call_id: CallId::from(call_id_of(&r.content).unwrap_or("")),
                        name,
                        arguments: call.map(|c| c.arguments).unwrap_or_default(),
                        result: None,
                        used: false,
                    });
                }
                RecordType::ToolResult => {
                    let id = call_id_of(&r.content);
                    if let Some(c) = calls.iter_mut().find(|c| Some(c.call_id.as_str()) == id) {
                        c.result = Some(r.clone());
                    }
                }
                RecordType::AgentPlan => {
                    // A plan that no longer parses is replayed as the thought it was.
                    match serde_json::from_value(r.content.clone()) {
                        Ok(plan) => steps.push(Step::Plan(plan)),
                        Err(_) => steps.push(Step::Thought(text())),
                    }
                }
                RecordType::TaskDeliverable => {
                    let mut extra = r.content.as_object().cloned().unwrap_or_default();
                    extra.remove("text");
                    let is_final = extra
                        .remove("final")
                        .and_then(|v| v.as_bool())
                        .unwrap_or(true);
                    steps.push(Step::Deliver {
                        text: text(),
                        is_final,
                        extra,
                    });
                }
                _ => {}
            }
        }
        Ok(Recorded {
            replay,
            steps,
            calls,
        })
    }

    /// The recorded step after `taken` steps, for a replay that is not live.
    pub fn step(&self, taken: usize) -> Result<Step, NoStep> {
        self.steps.get(taken).cloned().ok_or(NoStep {
            ledger: self.replay.of,
            step: taken + 1,
        })
    }

    /// The recorded call the `k`-th call of this turn replays: the `k`-th recorded one when
    /// the steps are the recorded ones; for a live replay, the first unused recorded call
    /// of the same tool with the same (normalised) arguments.
    pub fn match_call(
        &mut self,
        k: usize,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Option<&mut RecordedCall> {
        if self.replay.live {
            self.calls
                .iter_mut()
                .find(|c| !c.used && c.name == name && &c.arguments == arguments)
        } else {
            self.calls.get_mut(k)
        }
    }
}
