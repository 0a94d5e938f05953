//! The `anthropic` provider: Anthropic's Messages API (`POST <base_url>/messages`) with
//! tool use, on the one renderer (the context as the first user message). Tool names are
//! sent with `_` for `.`, as the API allows only letters, digits, `_` and `-`.

use proto::content::{ToolCallContent, call_id_of};
use proto::record::RecordType;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::bounded::excerpt;
use crate::http::MAX_QUOTE;
use crate::openai::{json_kind, wire_name};
use crate::{Provider, ProviderConfig, ProviderError, Step, TurnInput, content_text};

/// The API version this provider speaks (the `anthropic-version` header).
const API_VERSION: &str = "2023-06-01";

/// A Messages API client.
pub struct Anthropic {
    server: crate::http::Server,
    /// The most tokens an answer may take when no budget says less.
    max_tokens: u64,
}

impl Anthropic {
    /// A client for `config`.
    pub fn new(
        config: &ProviderConfig,
        handle: tokio::runtime::Handle,
    ) -> anyhow::Result<Anthropic> {
        Ok(Anthropic {
            server: crate::http::Server::new(config, "messages", handle)?,
            max_tokens: config.max_tokens.max(1),
        })
    }
}

/// A content block of a message.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    /// Text.
    Text { text: String },
    /// A tool the model called (`input`: its arguments).
    ToolUse {
        id: String,
        name: String,
        input: Map<String, Value>,
    },
    /// What a tool returned, as JSON text.
    ToolResult {
        tool_use_id: String,
        content: String,
    },
}

/// A message: its role and blocks.
#[derive(Debug, Serialize)]
struct Message {
    role: &'static str,
    content: Vec<Block>,
}

/// A tool as the model is offered it.
#[derive(Debug, Serialize)]
struct WireTool<'a> {
    name: String,
    description: &'a str,
    input_schema: &'a Value,
}

/// A Messages API request.
#[derive(Debug, Serialize)]
struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u64,
    system: &'a str,
    messages: Vec<Message>,
    /// Absent when no tool is offered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
}

/// Appends a block to the last message when it has `role`, else opens a message: the API
/// wants user and assistant to alternate, with a turn's tool results in one user message.
fn push(messages: &mut Vec<Message>, role: &'static str, block: Block) {
    match messages.last_mut() {
        Some(last) if last.role == role => last.content.push(block),
        _ => messages.push(Message {
            role,
            content: vec![block],
        }),
    }
}

/// The request body for this turn so far (rendering rule `anthropic-messages/1`), asking
/// for at most `max_tokens`; `user` is the context as the renderer made it.
pub fn request_body(
    model: &str,
    system: &str,
    max_tokens: u64,
    user: &str,
    input: &TurnInput<'_>,
) -> Value {
    let text = |t: String| Block::Text { text: t };
    let mut messages = vec![Message {
        role: "user",
        content: vec![text(user.to_owned())],
    }];
    for r in input.history {
        match r.record_type {
            RecordType::AgentThought => push(&mut messages, "assistant", text(content_text(r))),
            RecordType::AgentPlan => {
                push(
                    &mut messages,
                    "assistant",
                    text(format!("planned: {}", r.content)),
                );
                // A last assistant message is a prefill the model would continue.
                push(&mut messages, "user", text(crate::AFTER_PLAN.to_owned()));
            }
            RecordType::ToolCall => {
                let call = ToolCallContent::read(&r.content);
                let block = Block::ToolUse {
                    id: call_id_of(&r.content).unwrap_or("").to_owned(),
                    name: wire_name(call.as_ref().map_or("", |c| c.tool_name.as_str())),
                    input: call.map(|c| c.arguments).unwrap_or_default(),
                };
                push(&mut messages, "assistant", block);
            }
            RecordType::ToolResult => {
                let mut content = r.content.clone();
                if let Some(o) = content.as_object_mut() {
                    o.remove("call_id");
                }
                let block = Block::ToolResult {
                    tool_use_id: call_id_of(&r.content).unwrap_or("").to_owned(),
                    content: content.to_string(),
                };
                push(&mut messages, "user", block);
            }
            _ => {}
        }
    }
    let tools = input
        .tools
        .iter()
        .map(|t| WireTool {
            name: wire_name(&t.name),
            description: &t.description,
            input_schema: &t.parameters,
        })
        .collect();
    let request = MessagesRequest {
        model,
        max_tokens,
        system,
        messages,
        tools,
    };
    // Strings, numbers and maps with string keys: serializing cannot fail.
    serde_json::to_value(&request).unwrap_or(Value::Null)
}

/// The bytes sent in `frame` (rule `anthropic-messages/1`, whose `max_tokens` the frame
/// always holds: the API requires one): [`request_body`] as compact JSON.
pub(crate) fn body_bytes(
    frame: &proto::prompt::Frame,
    user: &str,
    input: &TurnInput<'_>,
) -> Vec<u8> {
    let body = request_body(
        &frame.model,
        &frame.system,
        frame.max_tokens.unwrap_or(0),
        user,
        input,
    );
    serde_json::to_vec(&body).unwrap_or_default()
}

/// Reads a Messages API response into steps: its text, then its tool uses.
pub fn parse_response(body: &Value, input: &TurnInput<'_>) -> Result<Vec<Step>, ProviderError> {
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            ProviderError::Fatal(format!(
                "response has no content blocks: {}",
                excerpt(&body.to_string(), MAX_QUOTE)
            ))
        })?;
    let text: Vec<&str> = blocks
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect();
    let text = text.join("\n").trim().to_owned();
    let uses: Vec<&Value> = blocks.iter().filter(|b| b["type"] == "tool_use").collect();
    if uses.is_empty() {
        // An answer cut at `max_tokens` is delivered as what it is, marked, never as whole.
        let mut extra = Map::new();
        if body["stop_reason"] == "max_tokens" {
            extra.insert("cut_off".into(), Value::String(crate::CUT_OFF.into()));
        }
        return Ok(vec![Step::Deliver {
            text,
            is_final: true,
            extra,
        }]);
    }
    let mut steps = Vec::new();
    if !text.is_empty() {
        steps.push(Step::Thought(text));
    }
    for u in uses {
        let wire = u["name"].as_str().unwrap_or("");
        let name = input
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .find(|n| wire_name(n) == wire)
            .map_or_else(|| wire.to_owned(), str::to_owned);
        let arguments = match &u["input"] {
            Value::Object(m) => m.clone(),
            other => {
                steps.push(Step::Malformed {
                    name,
                    why: format!(
                        "its input is a JSON {} where an object belongs",
                        json_kind(other)
                    ),
                });
                continue;
            }
        };
        if wire.is_empty() {
            steps.push(Step::Malformed {
                name,
                why: "a tool use with no name".into(),
            });
            continue;
        }
        if name == crate::PLAN_TOOL {
            match serde_json::from_value(Value::Object(arguments)) {
                Ok(plan) => steps.push(Step::Plan(plan)),
                Err(e) => steps.push(Step::Thought(format!("an unreadable plan: {e}"))),
            }
            continue;
        }
        steps.push(Step::ToolCall { name, arguments });
    }
    Ok(steps)
}

/// What a response says it cost: its input tokens with the cache's (written and read, so a
/// budget counts every token the model took in) and its output tokens.
pub fn usage_of(
    body: &Value,
    asked: &str,
    prices: &std::collections::BTreeMap<String, crate::Price>,
) -> proto::writ::Usage {
    let tokens = |k: &str| {
        body.pointer(&format!("/usage/{k}"))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let tokens_in = tokens("input_tokens")
        .saturating_add(tokens("cache_creation_input_tokens"))
        .saturating_add(tokens("cache_read_input_tokens"));
    crate::priced(
        "anthropic",
        body.get("model").and_then(Value::as_str),
        asked,
        (tokens_in, tokens("output_tokens")),
        prices,
    )
}

impl Provider for Anthropic {
    fn next(&self, input: &TurnInput<'_>) -> Result<Vec<Step>, ProviderError> {
        self.answer(input).map(|a| a.steps)
    }

    fn answer(&self, input: &TurnInput<'_>) -> Result<crate::Answer, ProviderError> {
        // The configured bound; what is left of the budgets lowers it.
        let (response, sent) = self.server.ask(
            proto::prompt::ANTHROPIC_MESSAGES_V1,
            Some(self.max_tokens),
            input,
            |req, key| {
                let req = req.header("anthropic-version", API_VERSION);
                match key {
                    Some(key) => req.header("x-api-key", key),
                    None => req,
                }
            },
        )?;
        Ok(crate::Answer {
            steps: parse_response(&response, input)?,
            usage: Some(usage_of(&response, &self.server.model, &self.server.prices)),
            prompt: Some(sent),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proto::record::Record;
    use proto::{RecordId, SessionId};

    use serde_json::json;

    use super::*;

    fn record(record_type: RecordType, content: Value) -> Record {
        Record {
            record_id: RecordId::from(uuid::Uuid::nil()),
            hash: String::new(),
            record_type,
            content,
            author_id: "agent:hashi".into(),
            metadata: BTreeMap::new(),
            created_at: String::new(),
        }
    }

    fn input<'a>(context: &'a [Record], history: &'a [Record]) -> TurnInput<'a> {
        TurnInput {
            session_id: SessionId::from(uuid::Uuid::nil()),
            seq: 1,
            context,
            history,
            tools: &[],
            max_tokens: None,
        }
    }

    #[test]
    fn two_calls_and_their_results_make_one_assistant_and_one_user_message() {
        let context = [record(
            RecordType::TaskInstruction,
            json!({"text": "read a and b"}),
        )];
        let call = |id: &str, path: &str| {
            record(
                RecordType::ToolCall,
                ToolCallContent::new(
                    "fs.read".to_owned(),
                    Map::from_iter([("path".to_owned(), json!(path))]),
                    id,
                )
                .to_value(),
            )
        };
        let result = |id: &str| {
            record(
                RecordType::ToolResult,
                json!({"call_id": id, "status": "ok"}),
            )
        };
        let history = [
            record(RecordType::AgentThought, json!({"text": "both"})),
            call("c1", "a"),
            call("c2", "b"),
            result("c1"),
            result("c2"),
        ];
        let body = request_body("m", "sys", 50, "read a and b", &input(&context, &history));
        let roles: Vec<&str> = body["messages"]
            .as_array()
            .map(|m| m.iter().filter_map(|m| m["role"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(roles, ["user", "assistant", "user"]);
        assert_eq!(body["messages"][1]["content"][1]["name"], "fs_read");
        assert_eq!(body["messages"][2]["content"][1]["tool_use_id"], "c2");
        assert_eq!(body["max_tokens"], 50);
        assert!(body.get("tools").is_none(), "no tools, no empty list");
    }

    /// Found in review: after a plan the request ended with the assistant's own "planned:"
    /// text, which the Messages API takes as a prefill to continue.
    #[test]
    fn a_request_after_a_plan_ends_with_the_user_not_a_prefill() {
        let context = [record(
            RecordType::TaskInstruction,
            json!({"text": "plan it"}),
        )];
        let history = [record(RecordType::AgentPlan, json!({"steps": []}))];
        let body = request_body("m", "sys", 50, "plan it", &input(&context, &history));
        let last = body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .cloned()
            .unwrap_or_default();
        assert_eq!(last["role"], "user", "{body}");
        assert_eq!(last["content"][0]["text"], crate::AFTER_PLAN);
    }

    #[test]
    fn a_tool_use_whose_input_is_not_an_object_is_malformed_not_run() {
        let context = [record(RecordType::TaskInstruction, json!({"text": "x"}))];
        let body = json!({"content": [{"type": "tool_use", "id": "t", "name": "fs_write", "input": "rm -rf /"}]});
        let steps = parse_response(&body, &input(&context, &[])).unwrap_or_default();
        assert!(
            matches!(&steps[..], [Step::Malformed { why, .. }] if why.contains("string")),
            "{steps:?}"
        );
        assert!(parse_response(&json!({"error": "x"}), &input(&context, &[])).is_err());
    }
}
