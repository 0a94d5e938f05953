//! The one gate as outside agents meet it, with real counterparts: the official Python `mcp`
//! client, the JSON routes and Claude Code's hook payloads with absolute paths. A path in any
//! spelling meets the rule for its normal form; a person's approval after the writ was
//! revoked never lets the call run; an `ask` reaches a waiting agent by its doorbell, with no
//! permission the bus refuses.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use kura_runtime::identity::Role;
use kura_testkit::stack::Stack;
use kura_testkit::{bin, free_port};
use serde_json::Value;

use crate::agents::{aegis_approve, agent_stack_under, mcp_python, post};

const MINUTE: Duration = Duration::from_secs(60);

/// A project Claude Code works in: its secrets denied, the rest of it allowed, the rest of
/// the disk asked of a person.
const POLICY: &str = "[defaults]\nread = \"allow\"\nwrite = \"ask\"\nexternal = \"ask\"\n\n\
[[rules]]\nname = \"secrets\"\nargs = { file_path = \"/home/ana/proj/secrets/*\" }\ndecision = \"deny\"\n\n\
[[rules]]\nname = \"project\"\nargs = { file_path = \"/home/ana/proj/*\" }\ndecision = \"allow\"\n";

/// Each spelling, how the gate must rule on it, and the rule that decides.
const SPELLINGS: [(&str, &str, &str); 5] = [
    ("/home/ana/proj//secrets/key", "deny", "secrets"),
    ("/home/ana/proj/./secrets/key", "deny", "secrets"),
    ("/home/ana/proj/src/../secrets/key", "deny", "secrets"),
    ("/home/ana/proj/../.bashrc", "ask", ""),
    ("/home/ana/proj/./notes.md", "allow", "project"),
];

fn check(via: &str, path: &str, d: &Value) {
    let (_, want, rule) = SPELLINGS
        .iter()
        .find(|(p, _, _)| *p == path)
        .expect("a spelling of the table");
    assert_eq!(d["decision"].as_str(), Some(*want), "{via} {path}: {d}");
    if !rule.is_empty() {
        assert_eq!(d["rule"].as_str(), Some(*rule), "{via} {path}: {d}");
    }
    let normal = kura_policy::path::normal(path).expect("normal");
    assert_eq!(
        d["arguments"]["file_path"].as_str(),
        Some(normal.as_str()),
        "{via} {path}: the answer names the spelling ruled on: {d}"
    );
}

/// Attack (issue 34, High): an outside agent spells an absolute path so a deny rule misses it
/// (`//`, `/./`, `/../`) or the project's allow rule takes a file outside the project. Over
/// the JSON routes, over MCP with the official client and through Claude Code's hook, every
/// spelling meets the rule for its normal form.
#[test]
fn an_outside_agents_path_in_any_spelling_meets_the_rule_for_its_normal_form() {
    let port = free_port();
    let (s, token) = agent_stack_under(POLICY, port, &[]);
    // The JSON routes.
    let (_, started) = post(
        port,
        "start_session",
        Some(&token),
        r#"{"instruction": "edit"}"#,
    );
    let turn = started["turn_id"].as_str().expect("turn").to_owned();
    for (path, _, _) in SPELLINGS {
        let body =
            serde_json::json!({"turn_id": turn, "tool": "Write", "arguments": {"file_path": path}});
        let (status, d) = post(port, "declare_call", Some(&token), &body.to_string());
        assert_eq!(status, 200, "{d}");
        check("http", path, &d);
    }
    // The official MCP client.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/mcp_declare.py");
    let out = Command::new(mcp_python())
        .arg(&script)
        .arg(format!("http://127.0.0.1:{port}/mcp"))
        .arg(&token)
        .arg("Write")
        .args(SPELLINGS.iter().map(|(p, _, _)| *p))
        .output()
        .expect("mcp_declare.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), SPELLINGS.len(), "{lines:?}");
    for l in &lines {
        check("mcp", l["path"].as_str().expect("path"), &l["result"]);
    }
    // Claude Code's hook: the secret in another spelling is refused (exit 2), the project's
    // file runs as ruled (its normal form handed back as updatedInput).
    let hook = |path: &str| {
        let payload = serde_json::json!({
            "session_id": "gate-1", "cwd": "/home/ana/proj", "permission_mode": "default",
            "hook_event_name": "PreToolUse", "tool_name": "Write",
            "tool_input": {"file_path": path, "content": "x"}, "tool_use_id": "toolu_gate"
        });
        let mut child = Command::new(bin("kura"))
            .args([
                "hook",
                "claude-code",
                "PreToolUse",
                "--wait",
                "5",
                "--state-dir",
            ])
            .arg(s.path("hooks"))
            .env("KURA_AGENT_URL", format!("http://127.0.0.1:{port}"))
            .env("KURA_AGENT_TOKEN", &token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kura hook");
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(payload.to_string().as_bytes())
            .expect("payload");
        child.wait_with_output().expect("hook")
    };
    let out = hook("/home/ana/proj//secrets/key");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("secrets"), "{err}");
    let out = hook("/home/ana/proj/./notes.md");
    assert_eq!(out.status.code(), Some(0));
    let answer: Value = serde_json::from_slice(&out.stdout).expect("hook output");
    assert_eq!(
        answer["hookSpecificOutput"]["updatedInput"]["file_path"], "/home/ana/proj/notes.md",
        "{answer}"
    );
    s.verify_all();
}

/// Grants agent `laptop` a writ for writes under the project; returns its id.
fn grant_project_writ(s: &Stack, issuers: &str, key_file: &Path) -> String {
    let out = Command::new(bin("kura"))
        .args([
            "writ",
            "grant",
            "--holder",
            "agent:laptop",
            "--tool",
            "Write",
        ])
        .args(["--path", "/home/user/my-project/*", "--ceiling", "write"])
        .arg("--key")
        .arg(key_file)
        .arg("--sealer-key")
        .arg(s.nats.seed(Role::Operator))
        .arg("--db")
        .arg(&s.db)
        .env("KURA_WRITS__ISSUERS", issuers)
        .output()
        .expect("kura writ grant");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Attack (issue 34, Medium): Claude Code waits on a write a person must approve; the writ
/// that allowed it is revoked; then the person approves. The approval is held to the writ:
/// the request is denied and the hook exits 2, so Claude Code does not run it. And the `ask`
/// reached aegis and the waiting hook by their doorbells: no daemon's bus identity was
/// refused a subject it rang.
#[test]
fn an_approval_after_the_writ_was_revoked_makes_the_hook_exit_2() {
    let port = free_port();
    let bo = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]);
    let public = hex::encode(bo.verifying_key().as_bytes());
    let issuers = format!("[{{name = \"bo\", public_key = \"{public}\"}}]");
    let (s, token) = agent_stack_under(
        "[defaults]\nwrite = \"ask\"\n",
        port,
        &[("KURA_WRITS__ISSUERS", issuers.clone())],
    );
    let key_file = s.path("bo.key");
    let key = serde_json::json!({"name": "bo", "secret_key": hex::encode(bo.to_bytes()), "public_key": public});
    std::fs::write(&key_file, key.to_string()).expect("key file");
    std::fs::set_permissions(
        &key_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("0600");
    let writ = grant_project_writ(&s, &issuers, &key_file);
    let waiting = {
        let (dir, tok) = (s.path("hooks"), token.clone());
        std::thread::spawn(move || {
            let payload = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("agents/claude-code/PreToolUse-ask.json");
            Command::new(bin("kura"))
                .args(["hook", "claude-code", "PreToolUse", "--wait", "60"])
                .arg("--state-dir")
                .arg(dir)
                .env("KURA_AGENT_URL", format!("http://127.0.0.1:{port}"))
                .env("KURA_AGENT_TOKEN", tok)
                .stdin(std::fs::File::open(payload).expect("fixture"))
                .output()
                .expect("kura hook")
        })
    };
    let mut asked = None;
    s.wait_until("the write asked of people", MINUTE, |st| {
        asked = kura_work::approvals::asked(st)
            .ok()
            .and_then(|a| a.into_iter().find(|a| a.tool_name == "Write"));
        asked.is_some()
    });
    let request = asked.expect("asked").request_id;
    let out = Command::new(bin("kura"))
        .args(["writ", "revoke", &writ, "--reason", "the project is done"])
        .arg("--key")
        .arg(&key_file)
        .arg("--sealer-key")
        .arg(s.nats.seed(Role::Operator))
        .arg("--db")
        .arg(&s.db)
        .env("KURA_WRITS__ISSUERS", &issuers)
        .output()
        .expect("kura writ revoke");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, said) = aegis_approve(&s, &request.to_string());
    assert!(said.contains("refused by writ"), "{said}");
    let ran = waiting.join().expect("hook thread");
    let err = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(2), "{err}");
    assert!(err.contains("denied"), "{err}");
    let store = s.store();
    let a = kura_work::approvals::approval(&store, request)
        .expect("read")
        .expect("row");
    assert_eq!(a.state, kura_work::approvals::ApprovalState::Denied);
    let decision = kura_work::approvals::decision_record(&store, request)
        .expect("read")
        .expect("decided");
    let decision = store.read_record(decision).expect("record");
    assert!(
        decision.content["rule"]
            .as_str()
            .is_some_and(|r| r.contains("revoked")),
        "the decision names the writ: {}",
        decision.content
    );
    let logs = s.logs();
    assert!(
        !logs.to_lowercase().contains("permissions violation"),
        "a daemon rang a subject its identity may not publish:\n{logs}"
    );
    s.verify_all();
}
