//! A fake OpenAI-compatible chat-completions server on loopback (the one true outside
//! boundary): real HTTP/1.1, the real request and response shapes, `usage` reported; what the
//! assistant says is the test's `answer` function of the request body.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;

use serde_json::{Value, json};

/// Starts the server; returns its base URL (`http://127.0.0.1:<port>/v1`). `answer` gets the
/// request body and returns the assistant message; every response reports `usage` of
/// `prompt_tokens` / `completion_tokens`.
pub fn start(
    usage: (u64, u64),
    answer: impl Fn(&Value) -> Value + Send + Sync + 'static,
) -> String {
    start_raw(move |body, _| {
        let message = answer(body);
        let finish = if message.get("tool_calls").is_some() {
            "tool_calls"
        } else {
            "stop"
        };
        let response = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1,
                      "total_tokens": usage.0 + usage.1}
        });
        (200, response.to_string())
    })
}

/// Starts a server whose every answer is `respond(body, authorization header)`: an HTTP status
/// and a body.
pub fn start_raw(
    respond: impl Fn(&Value, &str) -> (u16, String) + Send + Sync + 'static,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let respond = Arc::new(respond);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let respond = respond.clone();
            std::thread::spawn(move || serve(stream, &*respond));
        }
    });
    format!("http://127.0.0.1:{port}/v1")
}

fn serve(mut stream: std::net::TcpStream, respond: &dyn Fn(&Value, &str) -> (u16, String)) {
    let Ok(clone) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(clone);
    let mut line = String::new();
    let (mut len, mut auth) = (0usize, String::new());
    if reader.read_line(&mut line).is_err() {
        return;
    }
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim_end().is_empty() {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("authorization:") {
            auth = h["authorization:".len()..].trim().to_owned();
        }
    }
    let mut body = vec![0; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (status, response) = respond(&body, &auth);
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        response.len(),
        response
    );
}

/// The first user message's text (the instruction, as the provider sends it).
pub fn instruction(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned()
}

/// Whether the conversation already holds a tool's result.
pub fn has_tool_result(body: &Value) -> bool {
    body["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"))
}

/// An assistant message calling `tool` (wire name, `fs_read`) with `args`.
pub fn call(tool: &str, args: Value) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": tool, "arguments": args.to_string()}
    }]})
}

/// An assistant message that answers `text`.
pub fn say(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}
