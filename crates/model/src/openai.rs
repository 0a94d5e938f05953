//! The `openai` provider: any OpenAI-compatible `/chat/completions` server with tool calling
//! (Ollama, llama.cpp, vLLM, ...). Tool names are sent with `_` for `.` (`fs_read`), as
//! function names may not contain dots.

use std::time::Duration;

use proto::record::RecordType;
use serde_json::{Map, Value, json};

use super::bounded::excerpt;
use super::{Provider, ProviderConfig, ProviderError, Step, TurnInput, content_text};

/// A chat-completions client.
pub struct OpenAi {
    /// HTTP client with the configured timeout.
    http: reqwest::Client,
    /// `<base_url>/chat/completions`.
    url: String,
    /// Model name.
    model: String,
    /// Bearer token, if configured.
    api_key: Option<String>,
    /// System prompt.
    system: String,
    /// The runtime the worker thread blocks on for HTTP.
    handle: tokio::runtime::Handle,
}

impl OpenAi {
    /// A client for `config`.
    pub fn new(config: &ProviderConfig, handle: tokio::runtime::Handle) -> anyhow::Result<OpenAi> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(config.timeout_ms.max(1)))
            .build()?;
        Ok(OpenAi {
            http,
            url: format!("{}/chat/completions", config.base_url.trim_end_matches('/')),
            model: config.model.clone(),
            api_key: config
                .api_key_env
                .as_deref()
                .and_then(|name| std::env::var(name).ok())
                .filter(|k| !k.is_empty()),
            system: config.system_prompt.clone(),
            handle,
        })
    }
}

fn wire_name(tool: &str) -> String {
    tool.replace('.', "_")
}

/// The request body for this turn so far.
pub fn request_body(model: &str, system: &str, input: &TurnInput<'_>) -> Value {
    let mut user = input.instruction();
    if let Some(prev) = input.previous_deliverable() {
        user.push_str("\n\nYour output from the previous turn:\n");
        user.push_str(&prev);
    }
    let mut messages = vec![
        json!({"role": "system", "content": system}),
        json!({"role": "user", "content": user}),
    ];
    // Group thoughts and calls into assistant messages; each result follows as a tool message.
    let mut pending: Option<Map<String, Value>> = None;
    let flush = |pending: &mut Option<Map<String, Value>>, messages: &mut Vec<Value>| {
        if let Some(m) = pending.take() {
            messages.push(Value::Object(m));
        }
    };
    for r in input.history {
        match r.record_type {
            RecordType::AgentThought => {
                flush(&mut pending, &mut messages);
                let mut m = Map::new();
                m.insert("role".into(), json!("assistant"));
                m.insert("content".into(), json!(content_text(r)));
                pending = Some(m);
            }
            RecordType::ToolCall => {
                let m = pending.get_or_insert_with(|| {
                    let mut m = Map::new();
                    m.insert("role".into(), json!("assistant"));
                    m.insert("content".into(), Value::Null);
                    m
                });
                let call = json!({
                    "id": r.content.get("call_id").cloned().unwrap_or(json!("")),
                    "type": "function",
                    "function": {
                        "name": wire_name(r.content.get("tool_name").and_then(Value::as_str).unwrap_or("")),
                        "arguments": r.content.get("arguments").map(Value::to_string).unwrap_or_else(|| "{}".into()),
                    }
                });
                match m.get_mut("tool_calls").and_then(Value::as_array_mut) {
                    Some(calls) => calls.push(call),
                    None => {
                        m.insert("tool_calls".into(), json!([call]));
                    }
                }
            }
            RecordType::ToolResult => {
                flush(&mut pending, &mut messages);
                let mut content = r.content.clone();
                if let Some(o) = content.as_object_mut() {
                    o.remove("call_id");
                }
                messages.push(json!({
                    "role": "tool",
                    "tool_call_id": r.content.get("call_id").cloned().unwrap_or(json!("")),
                    "content": content.to_string(),
                }));
            }
            _ => {}
        }
    }
    flush(&mut pending, &mut messages);
    let tools: Vec<Value> = input
        .tools
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {
                "name": wire_name(&t.name), "description": t.description, "parameters": t.parameters
            }})
        })
        .collect();
    json!({"model": model, "messages": messages, "tools": tools, "tool_choice": "auto"})
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
        steps.push(Step::Deliver {
            text: content,
            is_final: true,
            extra: Map::new(),
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
            .unwrap_or(json!({}));
        let arguments = match raw {
            Value::String(s) => serde_json::from_str::<Value>(&s).ok(),
            other => Some(other),
        }
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default();
        steps.push(Step::ToolCall { name, arguments });
    }
    Ok(steps)
}

/// Largest response body read.
const MAX_BODY: usize = 8 * 1024 * 1024;
/// Most of an error body read (only a quote of it is kept).
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Most of a body quoted in an error.
const MAX_QUOTE: usize = 2048;

/// Reads at most `limit` + 1 bytes of the body, as text.
async fn read_body(mut resp: reqwest::Response, limit: usize) -> Result<String, ProviderError> {
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| ProviderError::Transient(e.to_string()))?
    {
        body.extend_from_slice(&chunk[..chunk.len().min(limit + 1 - body.len())]);
        if body.len() > limit {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

impl Provider for OpenAi {
    fn next(&self, input: &TurnInput<'_>) -> Result<Vec<Step>, ProviderError> {
        let body = request_body(&self.model, &self.system, input);
        let response: Value = self.handle.block_on(async {
            let mut req = self.http.post(&self.url).json(&body);
            if let Some(key) = &self.api_key {
                req = req.bearer_auth(key);
            }
            let resp = req
                .send()
                .await
                .map_err(|e| ProviderError::Transient(format!("{}: {e}", self.url)))?;
            let status = resp.status();
            // An error body is only quoted, so little of it is read; a success body is
            // bounded too (a server streaming gigabytes must not exhaust a Pi's memory).
            let limit = if status.is_success() {
                MAX_BODY
            } else {
                MAX_ERROR_BODY
            };
            let text = read_body(resp, limit).await?;
            let quote = || excerpt(&text, MAX_QUOTE);
            if status.is_server_error() || status.as_u16() == 429 {
                return Err(ProviderError::Transient(format!(
                    "{}: HTTP {status}: {}",
                    self.url,
                    quote()
                )));
            }
            if !status.is_success() {
                return Err(ProviderError::Fatal(format!(
                    "{}: HTTP {status}: {}",
                    self.url,
                    quote()
                )));
            }
            if text.len() > MAX_BODY {
                return Err(ProviderError::Fatal(format!(
                    "{}: response larger than {MAX_BODY} bytes",
                    self.url
                )));
            }
            serde_json::from_str(&text)
                .map_err(|e| ProviderError::Fatal(format!("response is not JSON: {e}")))
        })?;
        parse_response(&response, input)
    }
}
