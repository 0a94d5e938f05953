//! Model providers behind one trait: `scripted` (deterministic steps from a file: the
//! offline default), `openai` (any OpenAI-compatible chat-completions server with tool
//! calling) and `command` (a program that reads the context on stdin); plus embeddings.

mod anthropic;
pub mod bounded;
mod command;
mod embed;
mod http;
mod openai;
pub mod prompt;
pub mod render;
mod scripted;

pub use embed::{EmbedError, embed};
use proto::SessionId;

use proto::record::{Record, RecordType};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use proto::prompt::ToolSpec;

/// One thing the agent does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Reasoning to record.
    Thought(String),
    /// A tool to call.
    ToolCall {
        /// Tool name, e.g. `fs.write`.
        name: String,
        /// Its arguments.
        arguments: Map<String, Value>,
    },
    /// A tool call that cannot be run as the model wrote it (no name, arguments that are
    /// not a JSON object): recorded with why, and the model is told so once before a second
    /// one in a row ends the turn as its error.
    Malformed {
        /// The tool name as the model wrote it (perhaps empty).
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// A plan (an `agent.plan` record): minato runs its steps as sub-sessions once the
    /// turn is done, then gives the session its next turn with their outputs.
    Plan(proto::plan::PlanContent),
    /// The turn's output; `is_final: false` asks minato for another turn.
    Deliver {
        /// The deliverable text.
        text: String,
        /// Whether the session's work is done.
        is_final: bool,
        /// Structured extras kept in the deliverable (e.g. `facts`, `decisions` lists that
        /// mikado turns into memory).
        extra: Map<String, Value>,
    },
}

/// Said in a deliverable's `cut_off` when the model's answer ended at `max_tokens` (what was
/// left of the budgets, or the configured bound): the text is what it wrote, not whole.
pub const CUT_OFF: &str = "the answer reached max_tokens and was cut off";

/// What the model is told after a plan of its own (as the user): the plan is recorded and
/// runs when the turn ends, so the turn's answer is what it delivers now.
pub const AFTER_PLAN: &str = "The plan is recorded: its steps run when this turn ends, and their outputs come in your next turn. Deliver now.";

/// The pseudo-tool a role that may plan is offered (`[[roster.roles]] plans = true`): a call
/// to it is the model's plan, recorded as an `agent.plan`, never run.
pub const PLAN_TOOL: &str = "kura.plan";

/// [`PLAN_TOOL`] as the model sees it.
pub fn plan_spec() -> ToolSpec {
    ToolSpec {
        name: PLAN_TOOL.into(),
        description: "Split the task into steps that other roles do, independent ones at the \
                      same time; each step waits for the steps named in `after`, whose results \
                      it gets. Then deliver."
            .into(),
        parameters: serde_json::json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "what the plan is for, one line"},
                "steps": {"type": "array", "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "description": "letters, digits, _ or -"},
                        "role": {"type": "string"},
                        "instruction": {"type": "string"},
                        "after": {"type": "array", "items": {"type": "string"}}
                    },
                    "required": ["id", "instruction"]
                }}
            },
            "required": ["steps"]
        }),
    }
}

/// What a provider sees.
pub struct TurnInput<'a> {
    /// The session.
    pub session_id: SessionId,
    /// Turn number in the session (1-based).
    pub seq: i64,
    /// The sealed context ledger's records.
    pub context: &'a [Record],
    /// What this turn has written so far (thoughts, calls, results).
    pub history: &'a [Record],
    /// The tools it may call.
    pub tools: &'a [ToolSpec],
    /// Most tokens the answer may take: what is left of the session's and the writs' token
    /// budgets (a provider passes it on as `max_tokens`); `None`: no budget bounds it.
    pub max_tokens: Option<u64>,
}

impl TurnInput<'_> {
    /// The instruction text from the context.
    pub fn instruction(&self) -> String {
        text_of(self.context, RecordType::TaskInstruction)
    }

    /// The previous turn's deliverable, if the context carries one.
    pub fn previous_deliverable(&self) -> Option<String> {
        self.context
            .iter()
            .rev()
            .find(|r| r.record_type == RecordType::TaskDeliverable)
            .map(content_text)
    }

    /// How many steps this turn has taken (the records a provider produced).
    pub fn steps_taken(&self) -> usize {
        self.history
            .iter()
            .filter(|r| {
                matches!(
                    r.record_type,
                    RecordType::AgentThought
                        | RecordType::AgentPlan
                        | RecordType::ToolCall
                        | RecordType::TaskDeliverable
                )
            })
            .count()
    }
}

/// A record's content as text (`text` field, else compact JSON).
pub fn content_text(r: &Record) -> String {
    match proto::content::text_of(&r.content) {
        Some(t) => t.to_owned(),
        None => r.content.to_string(),
    }
}

fn text_of(records: &[Record], t: RecordType) -> String {
    records
        .iter()
        .rev()
        .find(|r| r.record_type == t)
        .map(content_text)
        .unwrap_or_default()
}

/// Why a provider could not produce a step.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// A problem that may go away (server down, timeout): worth retrying.
    #[error("{0}")]
    Transient(String),
    /// The server is busy (HTTP 429 or 5xx): worth retrying, not before `retry_after` when
    /// it said so (`Retry-After`).
    #[error("{why}")]
    Busy {
        /// What the server said.
        why: String,
        /// How long it asked to be left alone.
        retry_after: Option<std::time::Duration>,
    },
    /// A problem that will not (bad script, bad response): the turn fails.
    #[error("{0}")]
    Fatal(String),
}

/// A model's answer: its steps, and what it cost when the provider says.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// What to do next.
    pub steps: Vec<Step>,
    /// The provider, model and tokens of this answer (and their price), when reported.
    pub usage: Option<proto::writ::Usage>,
    /// The hash of the request body sent and its frame, when the provider sent one.
    pub prompt: Option<proto::prompt::Sent>,
}

/// A model provider.
pub trait Provider: Send + Sync {
    /// The next step(s) given the context and this turn's history.
    fn next(&self, input: &TurnInput<'_>) -> Result<Vec<Step>, ProviderError>;

    /// [`Provider::next`] with the answer's usage (none unless the provider reports it).
    fn answer(&self, input: &TurnInput<'_>) -> Result<Answer, ProviderError> {
        Ok(Answer {
            steps: self.next(input)?,
            usage: None,
            prompt: None,
        })
    }
}

/// A model's usage: the model the server named (else the one asked for; a bounded quote),
/// the tokens in and out, and their price — the price of the model asked for when the
/// server names it otherwise (an alias), so a server cannot make its answers free by
/// renaming the model.
pub(crate) fn priced(
    provider: &str,
    named: Option<&str>,
    asked: &str,
    (tokens_in, tokens_out): (u64, u64),
    prices: &std::collections::BTreeMap<String, Price>,
) -> proto::writ::Usage {
    let model = named.filter(|m| !m.is_empty()).unwrap_or(asked);
    let price = prices.get(model).or_else(|| prices.get(asked));
    proto::writ::Usage {
        provider: provider.into(),
        model: bounded::excerpt(model, 128),
        tokens_in,
        tokens_out,
        money_micros: price.map_or(0, |p| p.cost(tokens_in, tokens_out)),
    }
}

/// What a model costs, in millionths of a currency per million tokens (`0.15` dollars per
/// million input tokens is `input = 150000`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million prompt tokens.
    pub input: u64,
    /// Per million completion tokens.
    pub output: u64,
}

impl Price {
    /// The cost of `tokens_in` and `tokens_out`, rounded up to a whole millionth.
    pub fn cost(&self, tokens_in: u64, tokens_out: u64) -> u64 {
        let micros = u128::from(tokens_in) * u128::from(self.input)
            + u128::from(tokens_out) * u128::from(self.output);
        u64::try_from(micros.div_ceil(1_000_000)).unwrap_or(u64::MAX)
    }
}

/// Which model provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Steps from a JSON script (offline, deterministic).
    Scripted,
    /// An OpenAI-compatible chat-completions server.
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
    /// A program: context JSON on stdin, deliverable on stdout.
    Command,
}

impl std::fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProviderKind::Scripted => "scripted",
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Command => "command",
        })
    }
}

/// Which provider, and its settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderConfig {
    /// `scripted`, `openai` or `command`.
    pub kind: ProviderKind,
    /// `scripted`: the JSON script file.
    pub script: String,
    /// `openai` and `anthropic`: the server's base URL, up to `/v1`
    /// (`https://api.anthropic.com/v1` for Anthropic's API).
    pub base_url: String,
    /// `openai` and `anthropic`: the model name.
    pub model: String,
    /// `openai` and `anthropic`: the environment variable holding the API key (unset: no
    /// key sent; `ANTHROPIC_API_KEY` is the usual one for Anthropic).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// `openai` and `anthropic`: system prompt.
    pub system_prompt: String,
    /// `openai` and `anthropic`: the most tokens the rendered context may take (estimated at
    /// 4 bytes a token); past it, memory and then a join's outputs are cut, in the order
    /// PROTOCOL.md gives, and the cut records named on the step. 0: the kind's default,
    /// 3,000 for `openai` (Ollama's default window is 2,048–4,096 tokens, and it drops the
    /// start of a longer request without a word), 60,000 for `anthropic`.
    pub prompt_tokens: u64,
    /// `anthropic`: the most tokens one answer may take (the API requires a bound); a
    /// session's or writ's budget lowers it to what is left.
    pub max_tokens: u64,
    /// `openai`, `anthropic` and `command`: give up on one call after this long.
    pub timeout_ms: u64,
    /// `command`: argv of the program (context JSON on stdin, deliverable on stdout).
    pub command: Vec<String>,
    /// `command`: the program's environment, which is otherwise empty but for
    /// `PATH=/usr/local/bin:/usr/bin:/bin`.
    pub command_env: std::collections::BTreeMap<String, String>,
    /// `command`: names of hashi's own environment variables passed on (an API key, say).
    pub command_pass_env: Vec<String>,
    /// A transient failure (server down, timeout) is retried this many times within one
    /// step before the step fails.
    pub retries: u32,
    /// Prices by model name (as the server answers it), for the money spent per step.
    pub prices: std::collections::BTreeMap<String, Price>,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        ProviderConfig {
            kind: ProviderKind::Scripted,
            script: "script.json".into(),
            base_url: "http://127.0.0.1:11434/v1".into(),
            model: "llama3.2".into(),
            api_key_env: Some("OPENAI_API_KEY".into()),
            system_prompt: "You are a careful agent. Use the tools to do the task, then answer."
                .into(),
            max_tokens: 4096,
            prompt_tokens: 0,
            timeout_ms: 120_000,
            command: vec![],
            command_env: std::collections::BTreeMap::new(),
            command_pass_env: vec![],
            retries: 3,
            prices: std::collections::BTreeMap::new(),
        }
    }
}

impl ProviderConfig {
    /// The prompt budget: `prompt_tokens`, else the kind's default.
    pub fn prompt_budget(&self) -> Option<u64> {
        (self.prompt_tokens > 0)
            .then_some(self.prompt_tokens)
            .or(match self.kind {
                ProviderKind::Openai => Some(3_000),
                ProviderKind::Anthropic => Some(60_000),
                ProviderKind::Scripted | ProviderKind::Command => None,
            })
    }
}

/// Builds the configured provider.
pub fn build(
    config: &ProviderConfig,
    handle: tokio::runtime::Handle,
) -> anyhow::Result<Box<dyn Provider>> {
    Ok(match config.kind {
        ProviderKind::Scripted => Box::new(scripted::Scripted::load(std::path::Path::new(
            &config.script,
        ))?),
        ProviderKind::Openai => Box::new(openai::OpenAi::new(config, handle)?),
        ProviderKind::Anthropic => Box::new(anthropic::Anthropic::new(config, handle)?),
        ProviderKind::Command => Box::new(command::CommandProvider::new(config)?),
    })
}
