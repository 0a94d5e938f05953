//! One sealed turn as OpenTelemetry spans, by the GenAI semantic conventions: the turn an
//! `invoke_agent` span, each model answer (its `model.prompt` record) a `chat` span with the
//! model and its tokens, each tool call an `execute_tool` span ending at its result — every
//! one carrying the record's hash, the ledger's hash and a link to its proof. Ids are
//! derived from Kura's, so exporting a turn twice gives the same trace.

use std::borrow::Cow;
use std::time::SystemTime;

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use proto::content::{ToolCallContent, call_id_of};
use proto::ledger::Ledger;
use proto::prompt::PromptContent;
use proto::record::{Record, RecordType};
use sha2::{Digest, Sha256};

fn time(stored: &str) -> SystemTime {
    humantime::parse_rfc3339_weak(stored).unwrap_or(SystemTime::UNIX_EPOCH)
}

fn span_id(of: &str) -> SpanId {
    let d = Sha256::digest(of.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    SpanId::from_bytes(b)
}

struct Turn<'a> {
    trace: TraceId,
    root: SpanId,
    ledger: &'a Ledger,
    console: Option<&'a str>,
}

impl Turn<'_> {
    fn span(
        &self,
        id: SpanId,
        parent: SpanId,
        name: String,
        (start, end): (SystemTime, SystemTime),
        mut attributes: Vec<KeyValue>,
        link: String,
    ) -> SpanData {
        attributes.push(KeyValue::new(
            "gen_ai.conversation.id",
            self.ledger.session_id.to_string(),
        ));
        attributes.push(KeyValue::new(
            "kura.ledger.id",
            self.ledger.ledger_id.to_string(),
        ));
        attributes.push(KeyValue::new(
            "kura.ledger.hash",
            self.ledger.ledger_hash.clone().unwrap_or_default(),
        ));
        if let Some(c) = self.console {
            attributes.push(KeyValue::new(
                "kura.proof.url",
                format!("{}{link}", c.trim_end_matches('/')),
            ));
        }
        SpanData {
            span_context: SpanContext::new(
                self.trace,
                id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: parent,
            parent_span_is_remote: false,
            span_kind: if parent == SpanId::INVALID {
                SpanKind::Server
            } else {
                SpanKind::Internal
            },
            name: Cow::Owned(name),
            start_time: start,
            end_time: end.max(start),
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: InstrumentationScope::builder("kura").build(),
        }
    }
}

/// The spans of the sealed output ledger `ledger` holding `records`; proofs linked under
/// `console` when given.
pub fn spans_of(ledger: &Ledger, records: &[Record], console: Option<&str>) -> Vec<SpanData> {
    let Some(first) = records.first() else {
        return Vec::new();
    };
    let turn = Turn {
        trace: TraceId::from_bytes(*uuid::Uuid::from(ledger.ledger_id).as_bytes()),
        root: span_id(&ledger.ledger_id.to_string()),
        ledger,
        console,
    };
    let end = ledger
        .sealed_at
        .as_deref()
        .map(time)
        .unwrap_or_else(|| time(&first.created_at));
    let agent = records
        .iter()
        .map(|r| r.author_id.as_str())
        .find(|a| a.starts_with("agent:"))
        .unwrap_or("agent:kura");
    let mut out = vec![turn.span(
        turn.root,
        SpanId::INVALID,
        format!("invoke_agent {agent}"),
        (time(&first.created_at), end),
        vec![
            KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            KeyValue::new("gen_ai.agent.name", agent.to_owned()),
        ],
        format!("/s/{}", ledger.session_id),
    )];
    for (i, r) in records.iter().enumerate() {
        let next_at = records.get(i + 1).map_or(end, |n| time(&n.created_at));
        let attributes = vec![
            KeyValue::new("kura.record.id", r.record_id.to_string()),
            KeyValue::new("kura.record.hash", r.hash.clone()),
        ];
        let link = format!("/r/{}", r.record_id);
        match r.record_type {
            RecordType::ModelPrompt => out.push(chat(
                &turn,
                r,
                (time(&r.created_at), next_at),
                attributes,
                link,
            )),
            RecordType::ToolCall => {
                out.extend(tool(&turn, &records[i..], r, next_at, attributes, link))
            }
            _ => {}
        }
    }
    out
}

/// A model answer's `chat` span, from what it was sent to its answer.
fn chat(
    turn: &Turn<'_>,
    r: &Record,
    at: (SystemTime, SystemTime),
    mut attributes: Vec<KeyValue>,
    link: String,
) -> SpanData {
    let usage = serde_json::from_value::<PromptContent>(r.content.clone())
        .ok()
        .and_then(|p| p.usage);
    attributes.push(KeyValue::new("gen_ai.operation.name", "chat"));
    let model = usage
        .as_ref()
        .map_or_else(|| "unknown".to_owned(), |u| u.model.clone());
    if let Some(u) = &usage {
        attributes.push(KeyValue::new("gen_ai.provider.name", u.provider.clone()));
        attributes.push(KeyValue::new("gen_ai.response.model", u.model.clone()));
        attributes.push(KeyValue::new(
            "gen_ai.usage.input_tokens",
            u.tokens_in as i64,
        ));
        attributes.push(KeyValue::new(
            "gen_ai.usage.output_tokens",
            u.tokens_out as i64,
        ));
    }
    turn.span(
        span_id(&r.record_id.to_string()),
        turn.root,
        format!("chat {model}"),
        at,
        attributes,
        link,
    )
}

/// A tool call's `execute_tool` span, ending at its result (among `rest`, the records from
/// the call on).
fn tool(
    turn: &Turn<'_>,
    rest: &[Record],
    r: &Record,
    next_at: SystemTime,
    mut attributes: Vec<KeyValue>,
    link: String,
) -> Option<SpanData> {
    let call = ToolCallContent::read(&r.content)?;
    let call_id = call
        .call_id
        .as_ref()
        .map(|c| c.to_string())
        .unwrap_or_default();
    let done = rest.iter().find(|x| {
        x.record_type == RecordType::ToolResult && call_id_of(&x.content) == Some(call_id.as_str())
    });
    attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
    attributes.push(KeyValue::new("gen_ai.tool.name", call.tool_name.clone()));
    attributes.push(KeyValue::new("gen_ai.tool.call.id", call_id.clone()));
    if let Some(d) = done {
        attributes.push(KeyValue::new("kura.result.hash", d.hash.clone()));
    }
    let stop = done.map_or(next_at, |d| time(&d.created_at));
    let name = format!("execute_tool {}", call.tool_name);
    Some(turn.span(
        span_id(&r.record_id.to_string()),
        turn.root,
        name,
        (time(&r.created_at), stop),
        attributes,
        link,
    ))
}
