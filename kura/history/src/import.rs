//! An agent's session from before Kura watched it, written in after the fact: each prompt a
//! turn (its context ledger holding the prompt, its output the agent's words, each tool use
//! and its result, and its last words as the deliverable), every tool call marked imported
//! with the transcript's SHA-256 — history to read and verify, never calls anyone ruled on.

use kura_store::{Result, Store, StoreError};
use proto::ToolCallContent;
use proto::content::{DeliverableContent, TextContent, ToolResultContent};
use proto::record::{NewRecord, RecordType};
use proto::{CallId, LedgerId, SessionId};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::transcript::{Step, Transcript};

/// What an import wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Imported {
    /// The new session.
    pub session_id: SessionId,
    /// Its turns (one per prompt).
    pub turns: usize,
    /// Records written.
    pub records: usize,
    /// Tool calls among them.
    pub calls: usize,
}

/// The largest result text kept per call (the rest is cut, saying so).
const MAX_RESULT: usize = 64 << 10;

/// Writes `t` (read from a file whose bytes hash to `source`) as a new session `label`,
/// every record by `author`.
pub fn claude_code(
    store: &mut Store,
    t: &Transcript,
    label: &str,
    source: &str,
    author: &str,
) -> Result<Imported> {
    let turns = turns_of(&t.steps);
    if turns.is_empty() {
        return Err(StoreError::Invalid(
            "the transcript holds no prompt (is it Claude Code's .jsonl?)".into(),
        ));
    }
    let marked = format!(
        "imported from a Claude Code transcript (sha256 {source}); nobody ruled on it when it ran"
    );
    let meta = |r: &mut NewRecord| {
        r.metadata.insert("imported".into(), "claude-code".into());
        r.metadata.insert("source_sha256".into(), source.to_owned());
    };
    let sealer = store.sealer().cloned();
    let session = store.write(|tx| tx.create_session(label))?;
    let mut done = Imported {
        session_id: session.session_id,
        turns: 0,
        records: 0,
        calls: 0,
    };
    let mut head = None::<LedgerId>;
    // A commit per turn: a long transcript holds the live stack's writers up no longer than
    // one turn's records take.
    for (n, (prompt, steps)) in turns.iter().enumerate() {
        let out_id = store.write(|tx| {
            let parents: Vec<LedgerId> = head.into_iter().collect();
            let ctx =
                tx.open_ledger(session.session_id, &format!("turn-{}-ctx", n + 1), &parents)?;
            let text = proto::text::excerpt(prompt, MAX_TEXT);
            let mut rec = NewRecord::new(
                RecordType::TaskInstruction,
                proto::record::Content::text(text),
                author.to_owned(),
            );
            meta(&mut rec);
            tx.append(ctx.ledger_id, &rec)?;
            tx.seal(ctx.ledger_id, sealer.as_ref())?;
            let out = tx.open_ledger(
                session.session_id,
                &format!("turn-{}-out", n + 1),
                &[ctx.ledger_id],
            )?;
            let mut last = String::new();
            for r in records_of(steps, &marked, &mut last) {
                let mut r = NewRecord {
                    author_id: author.to_owned(),
                    ..r
                };
                meta(&mut r);
                done.calls += usize::from(r.record_type == RecordType::ToolCall);
                tx.append(out.ledger_id, &r)?;
                done.records += 1;
            }
            let said = if last.trim().is_empty() {
                "(the transcript has no words for this turn)".to_owned()
            } else {
                last
            };
            let said = proto::text::excerpt(&said, MAX_TEXT);
            let mut d = NewRecord::new(
                RecordType::TaskDeliverable,
                proto::record::Content::Json(
                    DeliverableContent::new(said, true, Map::new()).to_value(),
                ),
                author.to_owned(),
            );
            meta(&mut d);
            tx.append(out.ledger_id, &d)?;
            tx.seal(out.ledger_id, sealer.as_ref())?;
            Ok(out.ledger_id)
        })?;
        done.records += 2;
        done.turns += 1;
        head = Some(out_id);
    }
    Ok(done)
}

/// The most text one imported record keeps (the rest is cut, saying so).
const MAX_TEXT: usize = 256 << 10;

/// The most of a call's input kept (past it: its size and hash).
const MAX_INPUT: usize = 256 << 10;

/// The prompts and the steps after each (steps before the first prompt join the first).
fn turns_of(steps: &[Step]) -> Vec<(String, Vec<&Step>)> {
    let mut turns: Vec<(String, Vec<&Step>)> = Vec::new();
    let mut before = Vec::new();
    for s in steps {
        match s {
            Step::Prompt(p) if !p.trim().is_empty() => {
                turns.push((p.clone(), std::mem::take(&mut before)));
            }
            Step::Prompt(_) => {}
            other => match turns.last_mut() {
                Some(t) => t.1.push(other),
                None => before.push(other),
            },
        }
    }
    turns
}

/// The records of one turn's steps (`last`: the last words the agent said).
fn records_of(steps: &[&Step], marked: &str, last: &mut String) -> Vec<NewRecord> {
    let mut out = Vec::new();
    for s in steps {
        match s {
            Step::Said(text) if !text.trim().is_empty() => {
                *last = text.clone();
                out.push(record(
                    RecordType::AgentThought,
                    TextContent::new(proto::text::excerpt(text, MAX_TEXT)).to_value(),
                ));
            }
            Step::ToolUse { id, name, input } => {
                let text = serde_json::to_string(input).unwrap_or_default();
                let (args, omitted) = if text.len() > MAX_INPUT {
                    let sha256 = hex::encode(Sha256::digest(text.as_bytes()));
                    let o = proto::content::OmittedArguments {
                        bytes: text.len() as u64,
                        sha256,
                    };
                    (Map::new(), Some(o))
                } else {
                    (input.clone(), None)
                };
                let mut call =
                    ToolCallContent::new(proto::text::excerpt(name, 200), args, call_id(id));
                call.arguments_omitted = omitted;
                call.imported = Some(marked.to_owned());
                out.push(record(RecordType::ToolCall, call.to_value()));
            }
            Step::ToolResult {
                id,
                content,
                is_error,
            } => {
                let text = match content {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let text = proto::text::excerpt(&text, MAX_RESULT);
                let r = if *is_error {
                    ToolResultContent::error(text, call_id(id))
                } else {
                    ToolResultContent::success(Value::String(text), call_id(id))
                };
                out.push(record(RecordType::ToolResult, r.to_value()));
            }
            _ => {}
        }
    }
    out
}

fn call_id(tool_use_id: &str) -> CallId {
    let d = hex::encode(Sha256::digest(tool_use_id.as_bytes()));
    CallId::new(format!("imported-{}", &d[..32]))
}

fn record(t: RecordType, content: Value) -> NewRecord {
    NewRecord {
        record_type: t,
        content,
        author_id: String::new(),
        metadata: Default::default(),
    }
}
