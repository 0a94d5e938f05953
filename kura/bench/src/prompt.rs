//! What showing a model its context costs a step: a turn's step (its record committed
//! durably, as hashi commits each step) with and without the prompt work a real provider adds
//! — rendering the sealed context within its budget, building the request, hashing it and
//! listing what was cut — on the 10th turn of a session whose context holds 20 memory facts.

use std::time::Instant;

use kura_store::Synchronous;
use proto::prompt::{Frame, OPENAI_CHAT_V1, ToolSpec, sha256_hex};
use proto::record::{Content, NewRecord, Record, RecordType};

use crate::storage::{kura_db, median, rate};
use crate::{Figure, Sizes};

/// Memory facts in the context.
const FACTS: usize = 20;
/// The turn measured (its context carries the 9th turn's deliverable).
const TURN: usize = 10;

fn record(t: RecordType, text: String) -> Record {
    Record {
        record_id: proto::RecordId::new(),
        hash: String::new(),
        record_type: t,
        content: proto::content::TextContent::new(text).to_value(),
        author_id: "agent:bench".into(),
        metadata: Default::default(),
        created_at: String::new(),
    }
}

/// The 10th turn's context: the instruction, the 9th turn's deliverable, 20 facts.
fn context() -> Vec<Record> {
    let mut c = vec![
        record(
            RecordType::TaskInstruction,
            "Plan the week's meals from what the pantry holds and what we ate".into(),
        ),
        record(
            RecordType::TaskDeliverable,
            format!(
                "turn {}: {}",
                TURN - 1,
                "a draft plan for Monday to Wednesday, with a shopping list of six items. "
                    .repeat(6)
            ),
        ),
    ];
    c.extend((0..FACTS).map(|i| {
        record(
            RecordType::MemoryFact,
            format!("fact {i}: the pantry holds rice, miso and nori; dinner on day {i} was soup"),
        )
    }));
    c
}

/// Runs `steps` steps, each committing a record durably and, when `prompt` is set, doing the
/// provider's prompt work first; returns steps/s.
fn steps(
    store: &mut kura_store::Store,
    ledger: proto::LedgerId,
    n: usize,
    prompt: Option<(&Frame, &[Record])>,
) -> anyhow::Result<f64> {
    let mut history: Vec<Record> = Vec::new();
    let t = Instant::now();
    for i in 0..n {
        if let Some((frame, context)) = prompt {
            // What a provider does per step: build (render within the budget, list the cut,
            // serialize) and hash.
            let (body, cut) = kura_model::prompt::build(
                frame,
                context,
                &history[history.len().saturating_sub(6)..],
            )?;
            std::hint::black_box((sha256_hex(&body), cut));
        }
        let r = NewRecord::new(
            RecordType::AgentThought,
            Content::text(format!("step {i}: compared the pantry with the plan")),
            "agent:bench",
        );
        let stored = store.append(ledger, &r)?.record;
        history.push(stored);
    }
    Ok(rate(n, t.elapsed()))
}

/// The figures: a step's rate with the prompt work beside the same step without it, and the
/// size of the prompt the 10th turn sends beside its budget.
pub fn figures(dir: &std::path::Path, s: &Sizes) -> anyhow::Result<Vec<Figure>> {
    let n = s.durable.max(50);
    let (mut store, ledger) = kura_db(dir, "prompt.db", Synchronous::Full)?;
    let context = context();
    let frame = Frame {
        rule: OPENAI_CHAT_V1.into(),
        model: "llama3.2".into(),
        system: "You are a careful agent. Use the tools to do the task, then answer.".into(),
        tools: ["fs.read", "fs.write", "fs.list", "shell.run"]
            .iter()
            .map(|n| ToolSpec {
                name: (*n).into(),
                description: format!("{n}: one line for the model"),
                // A tool's schema, as the model sees a small one.
                parameters: serde_json::Value::Object(serde_json::Map::from_iter([(
                    "type".to_owned(),
                    serde_json::Value::String("object".into()),
                )])),
            })
            .collect(),
        max_tokens: Some(2_000),
        prompt_tokens: Some(3_000),
    };
    let (mut with, mut without) = (Vec::new(), Vec::new());
    // Alternate rounds so both see the same disk weather.
    for _ in 0..3 {
        without.push(steps(&mut store, ledger, n, None)?);
        with.push(steps(&mut store, ledger, n, Some((&frame, &context)))?);
    }
    let (with, without) = (median(with), median(without));
    let body = kura_model::prompt::rebuild(&frame, &context, &[])?;
    let tokens = body.len().div_ceil(4) as f64;
    let rendered = kura_model::render::render(&context, None).text;
    Ok(vec![
        Figure::ratio(
            "a model step with its prompt rendered, built and hashed (turn 10, 20 memory facts)",
            "steps/s",
            with,
            "the same step without the prompt work (durable commit, synchronous=FULL)",
            without,
            "step time <= 1.05x (ratio >= 0.95)",
            |_, ratio| ratio >= 0.95,
        ),
        Figure::ratio(
            "the 10th turn's request (20 memory facts, 4 tools), estimated tokens",
            "tokens",
            tokens,
            "its context text alone",
            rendered.len().div_ceil(4) as f64,
            "<= the openai prompt budget (3 000) plus tools",
            |v, _| v <= 4_096.0,
        ),
    ])
}
