//! The `openai` provider: any OpenAI-compatible `/chat/completions` server with tool calling
//! (Ollama, llama.cpp, vLLM, ...). Tool names are sent with `_` for `.` (`fs_read`), as
//! function names may not contain dots.

use proto::content::{ToolCallContent, call_id_of};
use proto::record::RecordType;
use serde::Serialize;
use serde_json::{Map, Value};

use super::bounded::excerpt;
use super::{Provider, ProviderConfig, ProviderError, Step, TurnInput, content_text};
use crate::http::MAX_QUOTE;

/// A chat-completions client.
pub struct OpenAi {
    server: crate::http::Server,
}

impl OpenAi {
    /// A client for `config`.
    pub fn new(config: &ProviderConfig, handle: tokio::runtime::Handle) -> anyhow::Result<OpenAi> {
        Ok(OpenAi {
            server: crate::http::Server::new(config, "chat/completions", handle)?,
        })
    }
}

pub(crate) fn wire_name(tool: &str) -> String {
    tool.replace('.', "_")
}

/// One function call in an assistant message.
#[derive(Debug, Serialize)]
struct WireCall {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction,
}

/// A function call's name (wire spelling) and its arguments as JSON text.
#[derive(Debug, Serialize)]
struct WireFunction {
    name: String,
    arguments: String,
}

/// A chat message: system, user, assistant (text and/or calls) or a tool's result.
#[derive(Debug, Serialize)]
struct Message {
    role: &'static str,
    /// Always sent; `null` for an assistant message that only calls tools.
    content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
}

impl Message {
    fn new(role: &'static str, content: Option<String>) -> Message {
        Message {
            role,
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A tool as the model sees it.
#[derive(Debug, Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireToolFunction<'a>,
}

#[derive(Debug, Serialize)]
struct WireToolFunction<'a> {
    name: String,
    description: &'a str,
    parameters: &'a Value,
}

/// A `/chat/completions` request.
#[derive(Debug, Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<Message>,
    /// Absent when no tool is offered (OpenAI refuses an empty list).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    /// What is left of the budgets: an answer cannot overshoot them by a whole reply.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
}

/// The assistant message a `tool.call` record becomes part of.
fn wire_call(content: &Value) -> WireCall {
    let call = ToolCallContent::read(content);
    WireCall {
        id: call_id_of(content).unwrap_or("").to_owned(),
        kind: "function",
        function: WireFunction {
            name: wire_name(call.as_ref().map_or("", |c| c.tool_name.as_str())),
            arguments: call.map_or_else(|| "{}".into(), |c| Value::Object(c.arguments).to_string()),
        },
    }
}

/// The request body for this turn so far.
/// `user` is the context as the renderer made it.
pub fn request_body(model: &str, system: &str, user: &str, input: &TurnInput<'_>) -> Value {
    let mut messages = vec![
        Message::new("system", Some(system.to_owned())),
        Message::new("user", Some(user.to_owned())),
    ];
    // Group thoughts and calls into assistant messages; each result follows as a tool message.
    let mut pending: Option<Message> = None;
    let flush = |pending: &mut Option<Message>, messages: &mut Vec<Message>| {
        if let Some(m) = pending.take() {
            messages.push(m);
        }
    };
    for r in input.history {
        match r.record_type {
            RecordType::AgentThought => {
                flush(&mut pending, &mut messages);
                pending = Some(Message::new("assistant", Some(content_text(r))));
            }
            RecordType::ToolCall => {
                let m = pending.get_or_insert_with(|| Message::new("assistant", None));
                m.tool_calls.push(wire_call(&r.content));
            }
            RecordType::AgentPlan => {
                // The plan was a call to the plan tool; it is shown as what was said.
                flush(&mut pending, &mut messages);
                let text = format!("planned: {}", r.content);
                messages.push(Message::new("assistant", Some(text)));
                // Not left as the last word: a request ending with the assistant's own words
                // asks the model to go on with them.
                messages.push(Message::new("user", Some(crate::AFTER_PLAN.into())));
            }
            RecordType::ToolResult => {
                flush(&mut pending, &mut messages);
                // The result as recorded, less the pairing id (which travels beside it).
                let mut content = r.content.clone();
                if let Some(o) = content.as_object_mut() {
                    o.remove("call_id");
                }
                let mut m = Message::new("tool", Some(content.to_string()));
                m.tool_call_id = Some(call_id_of(&r.content).unwrap_or("").to_owned());
                messages.push(m);
            }
            _ => {}
        }
    }
    flush(&mut pending, &mut messages);
    let tools: Vec<WireTool<'_>> = input
        .tools
        .iter()
        .map(|t| WireTool {
            kind: "function",
            function: WireToolFunction {
                name: wire_name(&t.name),
                description: &t.description,
                parameters: &t.parameters,
            },
        })
        .collect();
    let tool_choice = (!tools.is_empty()).then_some("auto");
    let request = ChatRequest {
        model,
        messages,
        tools,
        tool_choice,
        max_tokens: input.max_tokens,
    };
    // Strings, numbers and maps with string keys: serializing cannot fail.
    serde_json::to_value(&request).unwrap_or(Value::Null)
}

/// The bytes sent in `frame` (rule `openai-chat/1`): [`request_body`] as compact JSON.
pub(crate) fn body_bytes(
    frame: &proto::prompt::Frame,
    user: &str,
    input: &TurnInput<'_>,
) -> Vec<u8> {
    // A `Value` always serializes.
    serde_json::to_vec(&request_body(&frame.model, &frame.system, user, input)).unwrap_or_default()
}

/// Reads a chat-completions response into steps.
pub fn parse_response(body: &Value, input: &TurnInput<'_>) -> Result<Vec<Step>, ProviderError> {
    let message = body.pointer("/choices/0/message").ok_or_else(|| {
        ProviderError::Fatal(format!(
            "response has no choices[0].message: {}",
            excerpt(&body.to_string(), MAX_QUOTE)
        ))
    })?;
    let content = message
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_owned();
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut steps = Vec::new();
    if calls.is_empty() {
        // An answer cut at `max_tokens` is delivered as what it is, marked, never as whole.
        let mut extra = Map::new();
        if body
            .pointer("/choices/0/finish_reason")
            .and_then(Value::as_str)
            == Some("length")
        {
            extra.insert("cut_off".into(), Value::String(crate::CUT_OFF.into()));
        }
        steps.push(Step::Deliver {
            text: content,
            is_final: true,
            extra,
        });
        return Ok(steps);
    }
    if !content.is_empty() {
        steps.push(Step::Thought(content));
    }
    for call in calls {
        let wire = call
            .pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let name = input
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .find(|n| wire_name(n) == wire)
            .map(str::to_owned)
            .unwrap_or_else(|| wire.to_owned());
        let raw = call
            .pointer("/function/arguments")
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default()));
        // Arguments that do not read as one JSON object are the model's mistake, told to it:
        // never run as `{}`.
        let arguments = match raw {
            Value::String(s) if s.trim().is_empty() => Ok(Value::Object(Map::new())),
            Value::String(s) => serde_json::from_str::<Value>(&s).map_err(|e| e.to_string()),
            other => Ok(other),
        }
        .and_then(|v| match v {
            Value::Object(m) => Ok(m),
            other => Err(format!(
                "a JSON {} where an object belongs",
                json_kind(&other)
            )),
        });
        let arguments = match (wire.is_empty(), arguments) {
            (true, _) => {
                steps.push(Step::Malformed {
                    name: String::new(),
                    why: "a tool call with no function name".into(),
                });
                continue;
            }
            (false, Err(e)) => {
                steps.push(Step::Malformed {
                    name,
                    why: format!("its arguments are not a JSON object ({})", excerpt(&e, 200)),
                });
                continue;
            }
            (false, Ok(m)) => m,
        };
        if name == crate::PLAN_TOOL {
            // A plan is recorded for minato to check, never run; one that does not parse is
            // said as a thought, so the model sees why.
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

/// The JSON type of `v`, in words.
pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// What a response says it cost: the model it names (else the one asked for, a bounded
/// quote of either) and `usage.prompt_tokens` / `completion_tokens` (absent counts 0).
pub fn usage_of(
    body: &Value,
    asked: &str,
    prices: &std::collections::BTreeMap<String, super::Price>,
) -> proto::writ::Usage {
    let tokens = |k: &str| {
        body.pointer(&format!("/usage/{k}"))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let named = body.get("model").and_then(Value::as_str);
    crate::priced(
        "openai",
        named,
        asked,
        (tokens("prompt_tokens"), tokens("completion_tokens")),
        prices,
    )
}

impl Provider for OpenAi {
    fn next(&self, input: &TurnInput<'_>) -> Result<Vec<Step>, ProviderError> {
        self.answer(input).map(|a| a.steps)
    }

    fn answer(&self, input: &TurnInput<'_>) -> Result<super::Answer, ProviderError> {
        let (response, sent) = self.server.ask(
            proto::prompt::OPENAI_CHAT_V1,
            None,
            input,
            |req, key| match key {
                Some(key) => req.bearer_auth(key),
                None => req,
            },
        )?;
        Ok(super::Answer {
            steps: parse_response(&response, input)?,
            usage: Some(usage_of(&response, &self.server.model, &self.server.prices)),
            prompt: Some(sent),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ToolSpec;
    use proto::record::Record;
    use proto::{RecordId, SessionId};
    use serde_json::json;
    use std::collections::BTreeMap;

    /// The body the provider sends for `input` (model `m`, system `be brief`), as JSON: the
    /// one build path, the renderer's text included.
    fn sent_body(input: &TurnInput<'_>) -> Value {
        let frame = proto::prompt::Frame {
            rule: proto::prompt::OPENAI_CHAT_V1.into(),
            model: "m".into(),
            system: "be brief".into(),
            tools: input.tools.to_vec(),
            max_tokens: input.max_tokens,
            prompt_tokens: None,
        };
        let (body, _) = crate::prompt::build(&frame, input.context, input.history)
            .unwrap_or_else(|e| panic!("build: {e}"));
        serde_json::from_slice(&body).unwrap_or_default()
    }

    /// Found in review: an answer cut at `max_tokens` was recorded as whole, and a request
    /// with no tools sent `tools: []`, which OpenAI refuses.
    #[test]
    fn a_cut_off_answer_is_marked_and_no_tools_means_no_tools_key() {
        let context = [record(RecordType::TaskInstruction, json!({"text": "x"}))];
        let input = TurnInput {
            session_id: SessionId::from(uuid::Uuid::nil()),
            seq: 1,
            context: &context,
            history: &[],
            tools: &[],
            max_tokens: None,
        };
        let body = sent_body(&input);
        assert!(
            body.get("tools").is_none() && body.get("tool_choice").is_none(),
            "{body}"
        );
        let cut = json!({"choices": [{"message": {"content": "half an ans"}, "finish_reason": "length"}]});
        let steps = parse_response(&cut, &input).unwrap_or_default();
        assert!(
            matches!(&steps[..], [Step::Deliver { extra, .. }] if extra.contains_key("cut_off")),
            "{steps:?}"
        );
        let whole = json!({"choices": [{"message": {"content": "all"}, "finish_reason": "stop"}]});
        let steps = parse_response(&whole, &input).unwrap_or_default();
        assert!(matches!(&steps[..], [Step::Deliver { extra, .. }] if extra.is_empty()));
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates_and_ignores_junk() {
        use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(RETRY_AFTER, HeaderValue::from_static(v));
            crate::http::retry_after(&h, now)
        };
        assert_eq!(with("7"), Some(Duration::from_secs(7)));
        // RFC 9110's example date, 120 s after `now`.
        assert_eq!(
            with("Wed, 21 Oct 2015 07:30:00 GMT"),
            Some(Duration::from_secs(120))
        );
        assert_eq!(with("Wed, 21 Oct 2015 07:00:00 GMT"), Some(Duration::ZERO));
        assert_eq!(with("soon"), None);
        assert_eq!(crate::http::retry_after(&HeaderMap::new(), now), None);
    }

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

    /// Issue 36: the request a real model got held only the instruction and the last
    /// deliverable: the memory in its context ledger and a join's other outputs never
    /// reached it. The user message is the one renderer's.
    #[test]
    fn a_real_models_request_carries_the_memory_and_every_joined_output() {
        let context = [
            record(
                RecordType::TaskInstruction,
                json!({"text": "sum up x and y"}),
            ),
            record(RecordType::TaskDeliverable, json!({"text": "x: 3 errors"})),
            record(RecordType::TaskDeliverable, json!({"text": "y: all clear"})),
            record(RecordType::MemoryFact, json!({"text": "errors go to ana"})),
        ];
        let input = TurnInput {
            session_id: SessionId::from(uuid::Uuid::nil()),
            seq: 1,
            context: &context,
            history: &[],
            tools: &[],
            max_tokens: None,
        };
        let body = sent_body(&input);
        assert!(body.get("max_tokens").is_none(), "no budget, no bound");
        let bounded = TurnInput {
            max_tokens: Some(40),
            ..input
        };
        assert_eq!(sent_body(&bounded)["max_tokens"], 40);
        let user = body["messages"][1]["content"].as_str().unwrap_or_default();
        for part in [
            "sum up x and y",
            "x: 3 errors",
            "y: all clear",
            "errors go to ana",
        ] {
            assert!(
                user.contains(part),
                "{part:?} not shown to the model:\n{user}"
            );
        }
        assert_eq!(user, crate::render::user_message(&context));
    }

    /// The typed request is the JSON the hand-built one was.
    #[test]
    fn request_body_is_the_chat_completions_shape() {
        let context = [record(
            RecordType::TaskInstruction,
            json!({"text": "count the files"}),
        )];
        let history = [
            record(RecordType::AgentThought, json!({"text": "listing"})),
            record(
                RecordType::ToolCall,
                json!({"tool_name": "fs.list", "arguments": {"path": "."}, "call_id": "c1"}),
            ),
            record(
                RecordType::ToolCall,
                json!({"tool_name": "fs.read", "arguments": {"path": "a"}, "call_id": "c2"}),
            ),
            record(
                RecordType::ToolResult,
                json!({"status": "success", "result": ["a"], "call_id": "c1"}),
            ),
            record(
                RecordType::ToolCall,
                json!({"tool_name": "fs.read", "arguments": {"path": "b"}, "call_id": "c3"}),
            ),
        ];
        let tools = [ToolSpec {
            name: "fs.list".into(),
            description: "List".into(),
            parameters: json!({"type": "object"}),
        }];
        let input = TurnInput {
            session_id: SessionId::from(uuid::Uuid::nil()),
            seq: 1,
            context: &context,
            history: &history,
            tools: &tools,
            max_tokens: None,
        };
        let call = |id: &str, name: &str, args: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
        let expected = json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "count the files"},
                {"role": "assistant", "content": "listing", "tool_calls": [
                    call("c1", "fs_list", r#"{"path":"."}"#),
                    call("c2", "fs_read", r#"{"path":"a"}"#),
                ]},
                {"role": "tool", "tool_call_id": "c1",
                 "content": json!({"status": "success", "result": ["a"]}).to_string()},
                {"role": "assistant", "content": null, "tool_calls": [
                    call("c3", "fs_read", r#"{"path":"b"}"#),
                ]},
            ],
            "tools": [{"type": "function", "function": {
                "name": "fs_list", "description": "List", "parameters": {"type": "object"}
            }}],
            "tool_choice": "auto",
        });
        assert_eq!(sent_body(&input), expected);
    }

    /// A role offered the plan tool plans with a call to it: recorded as a plan, never run;
    /// one not offered it cannot (the call stays an unknown tool's, which hashi refuses).
    #[test]
    fn a_call_to_the_plan_tool_is_a_plan() {
        let context = [record(
            RecordType::TaskInstruction,
            json!({"text": "look at three"}),
        )];
        let args = r#"{"steps": [{"id": "a", "instruction": "look at a"}, {"id": "b", "instruction": "sum up", "after": ["a"]}]}"#;
        let body = json!({"choices": [{"message": {"content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "kura_plan", "arguments": args}}
        ]}}]});
        let offered = [crate::plan_spec()];
        let input = TurnInput {
            session_id: SessionId::from(uuid::Uuid::nil()),
            seq: 1,
            context: &context,
            history: &[],
            tools: &offered,
            max_tokens: None,
        };
        match parse_response(&body, &input).expect("steps").as_slice() {
            [Step::Plan(p)] => {
                assert_eq!(p.steps.len(), 2);
                assert_eq!(p.steps[1].after, ["a"]);
            }
            other => panic!("{other:?}"),
        }
        let input = TurnInput {
            tools: &[],
            max_tokens: None,
            ..input
        };
        match parse_response(&body, &input).expect("steps").as_slice() {
            [Step::ToolCall { name, .. }] => assert_eq!(name, "kura_plan"),
            other => panic!("{other:?}"),
        }
    }
}
