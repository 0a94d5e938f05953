//! `kura hook claude-code --check-settings FILE`: whether Claude Code's settings leave each
//! Kura PreToolUse hook room to refuse. Claude Code kills a hook at its `timeout` (60 s when
//! none is given) and then runs the tool ungated, so the hook's `--wait` must end a margin
//! before it.

use serde_json::Value;

/// Seconds the hook needs between its `--wait` ending and Claude Code's timeout: to answer
/// the refusal and exit.
pub const MARGIN_S: u64 = 10;
/// Claude Code's timeout for a command hook that names none.
pub const DEFAULT_TIMEOUT_S: u64 = 60;
/// The hook's `--wait` when the command gives none.
pub const DEFAULT_WAIT_S: u64 = 540;

/// One Kura PreToolUse hook found, or the absence of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Whether it leaves the margin.
    pub ok: bool,
    /// What was found, and what to change when it is not ok.
    pub said: String,
}

/// The findings for Claude Code's settings `settings` (the parsed JSON of settings.json).
pub fn check(settings: &Value) -> Vec<Finding> {
    let mut out = Vec::new();
    let entries = settings
        .pointer("/hooks/PreToolUse")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for entry in entries {
        let hooks = entry.get("hooks").and_then(Value::as_array);
        for hook in hooks.map(Vec::as_slice).unwrap_or_default() {
            let Some(command) = hook.get("command").and_then(Value::as_str) else {
                continue;
            };
            let words: Vec<&str> = command.split_whitespace().collect();
            let is_kura = words
                .windows(3)
                .any(|w| w[0] == "hook" && w[1] == "claude-code" && w[2] == "PreToolUse");
            if !is_kura {
                continue;
            }
            let wait = wait_of(&words).unwrap_or(DEFAULT_WAIT_S);
            let timeout = hook
                .get("timeout")
                .and_then(Value::as_u64)
                .unwrap_or(DEFAULT_TIMEOUT_S);
            let ok = wait.saturating_add(MARGIN_S) <= timeout;
            let said = if ok {
                format!(
                    "ok: `{command}` waits {wait} s, {} s before its timeout of {timeout} s",
                    timeout - wait
                )
            } else {
                format!(
                    "`{command}` waits {wait} s but Claude Code kills it at {timeout} s{}, and then runs the tool ungated: \
                     set \"timeout\" to at least {} or pass --wait {}",
                    if hook.get("timeout").is_none() {
                        " (its default)"
                    } else {
                        ""
                    },
                    wait + MARGIN_S,
                    timeout.saturating_sub(MARGIN_S)
                )
            };
            out.push(Finding { ok, said });
        }
    }
    if out.is_empty() {
        out.push(Finding {
            ok: false,
            said: "no `kura hook claude-code PreToolUse` under hooks.PreToolUse: Claude Code's tool calls are not gated by Kura (README: Claude Code)".into(),
        });
    }
    out
}

/// The `--wait` a command gives (`--wait N` or `--wait=N`).
fn wait_of(words: &[&str]) -> Option<u64> {
    words
        .iter()
        .enumerate()
        .find_map(|(i, w)| match w.strip_prefix("--wait") {
            Some("") => words.get(i + 1).and_then(|n| n.parse().ok()),
            Some(rest) => rest.strip_prefix('=').and_then(|n| n.parse().ok()),
            None => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pre(command: &str, timeout: Option<u64>) -> Value {
        let mut hook = serde_json::json!({"type": "command", "command": command});
        if let Some(t) = timeout {
            hook["timeout"] = t.into();
        }
        serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]}})
    }

    /// README's settings are what a newcomer copies: they must leave the margin.
    #[test]
    fn the_settings_readme_shows_leave_the_hook_room_to_refuse() {
        let readme = include_str!("../../../README.md");
        let start = readme
            .find("```json\n{\n  \"hooks\"")
            .expect("README shows the hooks");
        let block = &readme[start + 8..];
        let json = &block[..block.find("```").expect("the block ends")];
        let settings: Value = serde_json::from_str(json).expect("README's settings parse");
        let found = check(&settings);
        assert!(found.iter().all(|f| f.ok), "{found:?}");
    }

    /// Issue 35 (4): a `--wait` near the hook's timeout let Claude Code kill the hook and run
    /// the call ungated. The check says so, and what to set.
    #[test]
    fn a_wait_too_close_to_the_timeout_is_found() {
        let f = check(&pre("kura hook claude-code PreToolUse --wait 12", Some(15)));
        assert!(!f[0].ok && f[0].said.contains("at least 22"), "{f:?}");
        let f = check(&pre("kura hook claude-code PreToolUse", None));
        assert!(!f[0].ok && f[0].said.contains("(its default)"), "{f:?}");
        let f = check(&pre(
            "/usr/bin/kura hook claude-code PreToolUse --wait=20",
            Some(30),
        ));
        assert!(f[0].ok, "{f:?}");
        let f = check(&serde_json::json!({"hooks": {}}));
        assert!(!f[0].ok && f[0].said.contains("not gated"), "{f:?}");
    }
}
