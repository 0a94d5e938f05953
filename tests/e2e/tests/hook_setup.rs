//! Claude Code set up in one command: `kura hook install claude-code` merges Kura's hooks into
//! a settings file that already has the user's own (kept, backed up, idempotent) and
//! registers Kura's MCP server for a project; `kura hook doctor claude-code` checks the PATH,
//! the timeouts, the token and `kura serve` answering it — and says what is wrong.

use std::process::Command;

use kura_testkit::{bin, free_port};
use serde_json::{Value, json};

/// `kura ARGS` with `kura` on the PATH; (exit code, output).
fn kura(args: &[&str], envs: &[(&str, &str)]) -> (i32, String) {
    let dir = bin("kura").parent().expect("bin dir").to_path_buf();
    let path = format!("{}:/usr/bin:/bin", dir.display());
    let out = Command::new(bin("kura"))
        .args(args)
        .env("PATH", path)
        .envs(envs.iter().copied())
        .output()
        .expect("kura");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn kura_hook_install_sets_claude_code_up_and_doctor_checks_it() {
    let project = tempfile::tempdir().expect("project");
    let settings = project.path().join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().expect("dir")).expect("dir");
    let mine = json!({"hooks": {"PostToolUse": [{"matcher": "Edit", "hooks": [{"type": "command", "command": "cargo fmt"}]}]}});
    std::fs::write(&settings, mine.to_string()).expect("settings");
    let dir = project.path().display().to_string();
    let (code, out) = kura(&["hook", "install", "claude-code", "--project", &dir], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("PreToolUse (added)"), "{out}");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&settings).expect("read")).expect("json");
    let post = written["hooks"]["PostToolUse"].as_array().expect("array");
    assert!(
        post.iter().any(|e| e["hooks"][0]["command"] == "cargo fmt"),
        "the user's hook is kept: {written}"
    );
    let backup = project.path().join(".claude/settings.json.kura-backup");
    assert_eq!(
        std::fs::read_to_string(backup).expect("backup"),
        mine.to_string()
    );
    let mcp: Value = serde_json::from_str(
        &std::fs::read_to_string(project.path().join(".mcp.json")).expect("mcp"),
    )
    .expect("json");
    assert_eq!(mcp["mcpServers"]["kura"]["args"][0], "mcp", "{mcp}");
    let (code, again) = kura(&["hook", "install", "claude-code", "--project", &dir], &[]);
    assert_eq!(code, 0, "{again}");
    assert!(again.contains("already set up"), "idempotent: {again}");

    // The doctor, first with a token kura serve does not know, then with the agent's.
    let port = free_port();
    let (_s, token) = crate::agents::agent_stack_with(port, &[]);
    let url = format!("http://127.0.0.1:{port}");
    let doctor = |token: &str| {
        kura(
            &[
                "hook",
                "doctor",
                "claude-code",
                "--project",
                &dir,
                "--url",
                &url,
            ],
            &[("KURA_AGENT_TOKEN", token)],
        )
    };
    let (code, out) = doctor("kura_agent_unknown");
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL") && out.contains("refused the token"),
        "{out}"
    );
    let (code, out) = doctor(&token);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("kura is on the PATH") && out.contains("answers this agent's token"),
        "{out}"
    );
}
