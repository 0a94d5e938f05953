//! Claude Code's transcript (`~/.claude/projects/<dir>/<session>.jsonl`, one JSON object a
//! line) read as the steps Kura records: the person's prompts, the assistant's words, each
//! tool use and its result. Lines it does not know (summaries, file snapshots, thinking) are
//! skipped; a line that is not JSON is counted, never fatal. Used by the Stop hook to find
//! calls that ran undeclared, and by `kura hook import` to backfill a whole session.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;

use serde_json::{Map, Value};

/// One step of a transcript, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// What the person typed.
    Prompt(String),
    /// What the assistant said.
    Said(String),
    /// A tool the assistant used: Claude Code's id for it, its name, its input.
    ToolUse {
        /// `tool_use_id`.
        id: String,
        /// The tool's name.
        name: String,
        /// Its input.
        input: Map<String, Value>,
    },
    /// A tool's result.
    ToolResult {
        /// The `tool_use_id` it answers.
        id: String,
        /// What it returned.
        content: Value,
        /// Whether it failed.
        is_error: bool,
    },
}

/// A transcript read: its steps, and lines skipped as not JSON.
#[derive(Debug, Default)]
pub struct Transcript {
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Lines that were not JSON objects.
    pub unreadable: usize,
}

/// Reads at most the last `max_bytes` of the transcript at `path` (a cut first line is
/// skipped).
pub fn read(path: &Path, max_bytes: u64) -> std::io::Result<Transcript> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let from = len.saturating_sub(max_bytes);
    f.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    f.take(max_bytes).read_to_end(&mut bytes)?;
    Ok(parse(&bytes, from > 0))
}

/// Reads transcript bytes (`cut`: the first line may be cut, and is skipped).
pub fn parse(bytes: &[u8], cut: bool) -> Transcript {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.lines();
    if cut {
        lines.next();
    }
    let mut out = Transcript::default();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(entry)) => steps_of(&entry, &mut out.steps),
            _ => out.unreadable += 1,
        }
    }
    out
}

/// The steps one transcript line holds.
fn steps_of(entry: &Map<String, Value>, out: &mut Vec<Step>) {
    let kind = entry.get("type").and_then(Value::as_str).unwrap_or("");
    // A subagent's side conversation is its own (Task tool): its calls ran in its context.
    if entry.get("isSidechain").and_then(Value::as_bool) == Some(true) {
        return;
    }
    let Some(message) = entry.get("message") else {
        return;
    };
    match (kind, message.get("content")) {
        ("user", Some(Value::String(text))) => out.push(Step::Prompt(text.clone())),
        ("user", Some(Value::Array(blocks))) => {
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = b.get("text").and_then(Value::as_str).unwrap_or("");
                        out.push(Step::Prompt(text.to_owned()));
                    }
                    Some("tool_result") => out.push(Step::ToolResult {
                        id: text_of(b, "tool_use_id"),
                        content: b.get("content").cloned().unwrap_or(Value::Null),
                        is_error: b.get("is_error").and_then(Value::as_bool) == Some(true),
                    }),
                    _ => {}
                }
            }
        }
        ("assistant", Some(Value::Array(blocks))) => {
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => out.push(Step::Said(text_of(b, "text"))),
                    Some("tool_use") => out.push(Step::ToolUse {
                        id: text_of(b, "id"),
                        name: text_of(b, "name"),
                        input: b
                            .get("input")
                            .and_then(Value::as_object)
                            .cloned()
                            .unwrap_or_default(),
                    }),
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

fn text_of(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_owned()
}

/// The result the transcript holds for tool use `id`.
pub fn result_of<'a>(steps: &'a [Step], id: &str) -> Option<(&'a Value, bool)> {
    steps.iter().find_map(|s| match s {
        Step::ToolResult {
            id: i,
            content,
            is_error,
        } if i == id => Some((content, *is_error)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transcript as Claude Code writes it (the shapes of its JSONL lines).
    #[test]
    fn a_claude_code_transcript_reads_as_prompts_words_calls_and_results() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.jsonl");
        let lines = [
            r#"{"type":"summary","summary":"Fix the build","leafUuid":"x"}"#,
            r#"{"type":"user","message":{"role":"user","content":"fix the build"},"uuid":"u1","sessionId":"s"}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"Looking."},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"cargo build"}}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"error[E0308]","is_error":true}]}}"#,
            r#"{"type":"assistant","isSidechain":true,"message":{"role":"assistant","content":[{"type":"tool_use","id":"toolu_side","name":"Read","input":{}}]}}"#,
            "not json",
        ];
        std::fs::write(&path, lines.join("\n")).expect("write");
        let t = read(&path, 1 << 20).expect("read");
        assert_eq!(t.unreadable, 1);
        assert_eq!(t.steps.len(), 4, "{:?}", t.steps);
        assert_eq!(t.steps[0], Step::Prompt("fix the build".into()));
        assert!(
            matches!(&t.steps[2], Step::ToolUse { id, name, .. } if id == "toolu_1" && name == "Bash")
        );
        assert_eq!(result_of(&t.steps, "toolu_1").map(|r| r.1), Some(true));
        // Only the tail: a cut first line is skipped, not misread.
        let tail = read(&path, 40).expect("tail");
        assert!(tail.steps.is_empty());
    }
}
