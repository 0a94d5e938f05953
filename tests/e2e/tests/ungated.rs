//! Calls that ran without Kura's gate (issue 39, ★): Claude Code's PreToolUse hook missing,
//! its PostToolUse still reporting the call — and a call both hooks missed, found in the
//! transcript at Stop — are recorded as ungated and raise an alarm in `kura status`, the
//! console and aegis's notices; an old transcript imported is history, marked imported,
//! and raises none.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kura_testkit::bin;
use kura_testkit::console::http;
use kura_testkit::free_port;
use serde_json::Value;

use crate::agents::{agent_stack_with, hook, receiver};

const MINUTE: Duration = Duration::from_secs(60);

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("agents/claude-code")
        .join(name)
}

/// Ungated calls on record, by tool name.
fn ungated(s: &kura_testkit::stack::Stack) -> Vec<String> {
    kura_history::ungated::since(&s.store(), "1970-01-01T00:00:00Z", 100)
        .expect("ungated")
        .into_iter()
        .map(|u| u.tool)
        .collect()
}

#[test]
fn a_call_no_pretooluse_hook_declared_is_recorded_ungated_and_raises_the_alarm() {
    let (hook_port, notices) = receiver();
    let port = free_port();
    let (mut s, token) = agent_stack_with(
        port,
        &[
            (
                "KURA_AEGIS__NOTIFY__WEBHOOKS",
                format!("[{{ url = \"http://127.0.0.1:{hook_port}/hook\" }}]"),
            ),
            (
                "KURA_AEGIS__NOTIFY__CONSOLE_URL",
                format!("http://127.0.0.1:{port}"),
            ),
        ],
    );
    let (code, _, err) = hook(&s, port, &token, "UserPromptSubmit", "UserPromptSubmit");
    assert_eq!(code, 0, "{err}");
    // Attack: an agent naming a workspace tree in its own result (a fork would restore it as
    // if Kura had seen it) is refused.
    let turn: String = s
        .store()
        .conn()
        .query_row(
            "SELECT turn_id FROM turns WHERE agent = 'agent:laptop'",
            [],
            |r| r.get(0),
        )
        .expect("the hook's turn");
    let forged = serde_json::json!({"turn_id": turn, "record_type": "tool.result", "content": {
        "status": "success", "result": "ok",
        "workspace": {"before": "4b825dc642cb6eb9a060e54bf8d69288fbee4904", "after": "4b825dc642cb6eb9a060e54bf8d69288fbee4904"}}});
    let (status, said) =
        crate::agents::post(port, "record_step", Some(&token), &forged.to_string());
    assert_eq!(status, 400, "{said}");
    assert!(
        said["error"]
            .as_str()
            .is_some_and(|e| e.contains("attested by Kura's executor")),
        "{said}"
    );
    // The PreToolUse hook was removed: Claude Code ran the Write, PostToolUse reports it.
    let (code, _, err) = hook(&s, port, &token, "PostToolUse", "PostToolUse");
    assert_eq!(code, 0, "{err}");
    assert_eq!(ungated(&s), ["Write"]);

    // People hear of it.
    let (_, body) = notices
        .recv_timeout(MINUTE)
        .unwrap_or_else(|e| panic!("the ungated notice: {e}\n{}", s.log("aegis")));
    let notice: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(notice["event"], "call.ungated", "{notice}");
    assert_eq!(notice["tool"], "Write");
    assert_eq!(notice["by"], "agent:laptop");
    assert_eq!(notice["noticed_by"], "PostToolUse");
    assert_eq!(notice["link"], format!("http://127.0.0.1:{port}/status"));
    // `kura status` and the console say so.
    let status = s.cli().ok(&["status"]);
    assert!(
        status.starts_with("ALARM: 1 tool call(s) ran ungated")
            && status.contains("Write by agent:laptop"),
        "{status}"
    );
    let json = s.cli().json(&["status"]);
    assert_eq!(json["ungated"]["newest"][0]["tool"], "Write", "{json}");
    assert_eq!(json["ungated"]["count"], 1, "{json}");
    let cookie =
        kura_testkit::console::login(port, &ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]));
    let (code, _, page) = http(port, "GET", "/status", &[("Cookie", cookie.as_str())], "");
    assert_eq!(code, 200);
    assert!(
        page.contains("ALARM: 1 tool call(s) ran ungated") && page.contains("<code>Write</code>"),
        "{page}"
    );

    // At Stop, the transcript shows a Bash call neither hook saw: reported too; the Write,
    // already on record, is not reported twice.
    let stop = s.path("Stop-with-transcript.json");
    let mut payload: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("Stop.json")).expect("stop"))
            .expect("json");
    payload["transcript_path"] = Value::from(fixture("transcript.jsonl").display().to_string());
    std::fs::write(&stop, payload.to_string()).expect("payload");
    let out = Command::new(bin("kura"))
        .args(["hook", "claude-code", "Stop", "--state-dir"])
        .arg(s.path("hooks"))
        .env("KURA_AGENT_URL", format!("http://127.0.0.1:{port}"))
        .env("KURA_AGENT_TOKEN", &token)
        .stdin(std::fs::File::open(&stop).expect("stop"))
        .output()
        .expect("kura hook");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut found = ungated(&s);
    found.sort();
    assert_eq!(found, ["Bash", "Write"]);
    let store = s.store();
    let bash = store
        .query(&kura_store::store::Query {
            record_type: Some(proto::record::RecordType::ToolCall),
            ..Default::default()
        })
        .expect("query")
        .into_iter()
        .find(|r| r.content["tool_name"] == "Bash")
        .expect("the Bash call");
    assert!(
        bash.content["ungated"]
            .as_str()
            .is_some_and(|w| w.contains("noticed by transcript")),
        "{}",
        bash.content
    );

    // An old transcript imported: its own session, every call marked imported, no alarm.
    let operator = s.nats.seed(kura_runtime::identity::Role::Operator);
    let said = s.cli().ok(&[
        "hook",
        "import",
        "claude-code",
        fixture("transcript.jsonl").to_str().expect("utf8"),
        "--sealer-key",
        operator.to_str().expect("utf8"),
    ]);
    assert!(
        said.contains("1 turns") && said.contains("2 tool calls, marked imported"),
        "{said}"
    );
    assert_eq!(ungated(&s).len(), 2, "an import raises no alarm");
    let imported: Vec<_> = s
        .store()
        .query(&kura_store::store::Query {
            record_type: Some(proto::record::RecordType::ToolCall),
            ..Default::default()
        })
        .expect("query")
        .into_iter()
        .filter(|r| r.content.get("imported").is_some())
        .collect();
    assert_eq!(imported.len(), 2);
    assert!(
        imported
            .iter()
            .all(|r| r.metadata.get("imported").map(String::as_str) == Some("claude-code"))
    );
    s.verify_all();
    s.shutdown_cleanly();
}
