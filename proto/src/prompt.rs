//! Prompt provenance on the record: before a model's answer, its turn's output ledger holds a
//! `model.prompt` record ([`PromptContent`]): the SHA-256 of the exact request body the
//! provider sent, the frame it was built in (the rendering rule, model, system prompt,
//! tools, `max_tokens`, the prompt budget), what was cut to fit, and what the answer cost. In the content, so the
//! record hash and the sealed ledger cover all of it. With the turn's sealed context ledger
//! and the records before it in the output ledger, the body can be rebuilt byte for byte
//! and checked against the hash (`kura show --prompt`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The rendering rule of the OpenAI-compatible chat-completions request (PROTOCOL.md,
/// "What a model is shown"). A change to the request's bytes gets a new rule.
pub const OPENAI_CHAT_V1: &str = "openai-chat/1";
/// The rendering rule of the Anthropic Messages request.
pub const ANTHROPIC_MESSAGES_V1: &str = "anthropic-messages/1";

/// What a request was built from besides the records: enough to build it again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Frame {
    /// The rendering rule (e.g. [`OPENAI_CHAT_V1`]).
    pub rule: String,
    /// The model asked.
    pub model: String,
    /// The system prompt.
    pub system: String,
    /// The tools offered, in the order sent, with Kura's names (`fs.write`).
    pub tools: Vec<ToolSpec>,
    /// The `max_tokens` sent (what was left of the budgets), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The prompt budget the context was rendered within (tokens), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
}

/// A tool as a model is offered it: plain data, so a provider needs no tool implementation,
/// and recorded in the [`Frame`] as it was offered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// Its name, e.g. `fs.write`.
    pub name: String,
    /// Its description.
    pub description: String,
    /// JSON schema of its arguments.
    pub parameters: Value,
}

/// What a provider sent: the body's hash and its frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    /// Lowercase hex SHA-256 of the body.
    pub sha256: String,
    /// What it was built from besides the records.
    pub frame: Frame,
    /// The context records the renderer left out or cut to fit the prompt budget, first
    /// cut first.
    pub cut: Vec<crate::RecordId>,
}

/// A `model.prompt` record's content: a [`Sent`] as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptContent {
    /// Lowercase hex SHA-256 of the request body sent.
    pub sha256: String,
    /// What it was built from besides the records.
    pub frame: Frame,
    /// The context records left out or cut to fit the prompt budget, first cut first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cut: Vec<crate::RecordId>,
    /// What the answer cost, when the provider said (here as well as on the answer's first
    /// record: records are content-addressed, and two alike answers are one record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::writ::Usage>,
    /// How often the request was retried before it was answered.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl PromptContent {
    /// The content of the record for `sent`, answered at `usage` after `retries`.
    pub fn of(sent: &Sent, usage: Option<crate::writ::Usage>, retries: u32) -> PromptContent {
        PromptContent {
            sha256: sent.sha256.clone(),
            frame: sent.frame.clone(),
            cut: sent.cut.clone(),
            usage,
            retries,
        }
    }

    /// As a record's content.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Reads a `model.prompt` record's content.
    pub fn read(content: &Value) -> Result<PromptContent, serde_json::Error> {
        serde_json::from_value(content.clone())
    }
}

/// Lowercase hex SHA-256 of `body`.
pub fn sha256_hex(body: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(body))
}

/// A `sys.context` note in a turn's context: where each packed memory record came from (the
/// label of the session it was learned in), so the model sees it beside each fact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySources {
    /// What the note is.
    pub text: String,
    /// Memory record id → the label of the session it was learned in.
    pub memory_sources: std::collections::BTreeMap<crate::RecordId, String>,
}

impl MemorySources {
    /// The note for `sources`.
    pub fn new(sources: impl IntoIterator<Item = (crate::RecordId, String)>) -> MemorySources {
        MemorySources {
            text: "Where the remembered facts come from.".into(),
            memory_sources: sources.into_iter().collect(),
        }
    }

    /// As a record's content.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// A `sys.context` record's content, if it is this note.
    pub fn read(content: &Value) -> Option<MemorySources> {
        content.get("memory_sources")?;
        serde_json::from_value(content.clone()).ok()
    }
}
