//! `kura hook install claude-code` and `kura hook doctor claude-code`: Claude Code set up to
//! be recorded and gated by Kura in one command — its hooks merged into `settings.json`
//! (idempotent, the user's other hooks kept, the old file backed up), Kura's MCP server
//! registered for a project — and a check of everything the hooks need: `kura` on the PATH,
//! timeouts that leave the hook room to refuse, the token, and `kura serve` answering it.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::{Map, Value};

use crate::AgentArgs;
use crate::settings::{DEFAULT_WAIT_S, Finding, MARGIN_S, check};

/// `kura hook …`.
#[derive(Debug, clap::Subcommand)]
pub enum HookCmd {
    /// What Claude Code's hooks run: record and gate one hook event.
    #[command(name = "claude-code")]
    ClaudeCode(crate::hook::Hook),
    /// Set Claude Code up: merge Kura's hooks into its settings and register Kura's MCP
    /// server (for a project; else print the command that does it).
    Install(Install),
    /// Check what Claude Code's hooks need: kura on the PATH, the hooks' timeouts, the
    /// token and `kura serve` answering it (exit 1 when something is wrong).
    Doctor(Doctor),
    /// Write a session the agent had before Kura watched it (its transcript) into the
    /// database, as a session of its own, every record marked imported.
    Import(crate::import::Import),
}

impl HookCmd {
    /// Runs the command; `say` writes one whole message to stdout. An import writes to the
    /// database: the caller opens it and runs [`crate::import::Import::run`].
    pub fn run(self, say: impl FnMut(&str) -> std::io::Result<()>) -> anyhow::Result<()> {
        match self {
            HookCmd::ClaudeCode(h) => h.run(say),
            HookCmd::Install(i) => i.run(say),
            HookCmd::Doctor(d) => d.run(say),
            HookCmd::Import(_) => {
                anyhow::bail!("kura hook import writes to a database: run it as `kura hook import`")
            }
        }
    }
}

/// The agents `install` and `doctor` know.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Agent {
    /// Anthropic's Claude Code.
    ClaudeCode,
}

/// Where Claude Code's settings are.
#[derive(Debug, clap::Args)]
pub struct Where {
    /// The agent to set up.
    #[arg(value_enum)]
    agent: Agent,
    /// A project: its `.claude/settings.json` (and `.mcp.json`); default: the user's
    /// `~/.claude/settings.json`.
    #[arg(long, value_name = "DIR", conflicts_with = "settings")]
    project: Option<PathBuf>,
    /// The settings file itself.
    #[arg(long, value_name = "FILE")]
    settings: Option<PathBuf>,
}

impl Where {
    fn settings_file(&self) -> anyhow::Result<PathBuf> {
        let Agent::ClaudeCode = self.agent;
        if let Some(f) = &self.settings {
            return Ok(f.clone());
        }
        if let Some(p) = &self.project {
            return Ok(p.join(".claude/settings.json"));
        }
        let home = std::env::var_os("HOME").context(
            "no HOME: name the settings file with --settings or a project with --project",
        )?;
        Ok(PathBuf::from(home).join(".claude/settings.json"))
    }
}

/// `kura hook install claude-code`.
#[derive(Debug, clap::Args)]
pub struct Install {
    #[command(flatten)]
    at: Where,
    /// How long PreToolUse waits for a person (seconds); its timeout is set 60 s above.
    #[arg(long, default_value_t = DEFAULT_WAIT_S)]
    wait: u64,
    #[command(flatten)]
    agent_args: AgentArgs,
}

/// Kura's hook for each of Claude Code's events: (event, matcher, timeout seconds).
fn events(wait: u64) -> [(&'static str, bool, u64); 4] {
    [
        ("UserPromptSubmit", false, 30),
        (
            "PreToolUse",
            true,
            wait.saturating_add(60).max(wait + MARGIN_S),
        ),
        ("PostToolUse", true, 60),
        ("Stop", false, 60),
    ]
}

/// Whether a hook command is Kura's for `event`.
fn is_kura(command: &str, event: &str) -> bool {
    let words: Vec<&str> = command.split_whitespace().collect();
    words
        .windows(3)
        .any(|w| w[0] == "hook" && w[1] == "claude-code" && w[2] == event)
}

/// Merges Kura's hooks into `settings` (an object): each event's Kura hook set to `ours`,
/// anything else left as it was. Returns what changed, by event.
pub fn merge(settings: &mut Map<String, Value>, wait: u64, args: &str) -> Vec<String> {
    let mut changed = Vec::new();
    let hooks = settings
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()));
    if !hooks.is_object() {
        *hooks = Value::Object(Map::new());
        changed.push("hooks (was not an object)".to_owned());
    }
    let Some(hooks) = hooks.as_object_mut() else {
        return changed;
    };
    for (event, matcher, timeout) in events(wait) {
        let wait_arg = if event == "PreToolUse" {
            format!(" --wait {wait}")
        } else {
            String::new()
        };
        let command = format!("kura hook claude-code {event}{wait_arg}{args}");
        let mut ours = Map::new();
        ours.insert("type".into(), "command".into());
        ours.insert("command".into(), command.clone().into());
        ours.insert("timeout".into(), timeout.into());
        let entries = hooks
            .entry(event)
            .or_insert_with(|| Value::Array(Vec::new()));
        if !entries.is_array() {
            *entries = Value::Array(Vec::new());
        }
        let Some(entries) = entries.as_array_mut() else {
            continue;
        };
        let found = entries.iter_mut().find_map(|e| {
            e.get_mut("hooks")?.as_array_mut()?.iter_mut().find(|h| {
                h.get("command")
                    .and_then(Value::as_str)
                    .is_some_and(|c| is_kura(c, event))
            })
        });
        match found {
            Some(h) if *h == Value::Object(ours.clone()) => {}
            Some(h) => {
                *h = Value::Object(ours);
                changed.push(format!("{event} (updated)"));
            }
            None => {
                let mut entry = Map::new();
                if matcher {
                    entry.insert("matcher".into(), "*".into());
                }
                entry.insert("hooks".into(), Value::Array(vec![Value::Object(ours)]));
                entries.push(Value::Object(entry));
                changed.push(format!("{event} (added)"));
            }
        }
    }
    changed
}

/// Reads a JSON object from `file`: an absent file is an empty object.
fn read_object(file: &Path) -> anyhow::Result<(Map<String, Value>, Option<String>)> {
    match std::fs::read_to_string(file) {
        Ok(text) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(m)) => Ok((m, Some(text))),
            _ => anyhow::bail!(
                "{} is not a JSON object: fix or move it, then run this again",
                file.display()
            ),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((Map::new(), None)),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", file.display())),
    }
}

/// Writes `value` to `file` whole (a temporary file renamed over it), keeping the old text as
/// `<file>.kura-backup` when there was one.
fn write_object(file: &Path, value: &Map<String, Value>, old: Option<&str>) -> anyhow::Result<()> {
    let dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    if let Some(old) = old {
        let mut backup = file.as_os_str().to_owned();
        backup.push(".kura-backup");
        std::fs::write(&backup, old)
            .with_context(|| format!("cannot back up {}", file.display()))?;
    }
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, text.as_bytes())?;
    tmp.persist(file).map_err(|e| e.error)?;
    Ok(())
}

impl Install {
    fn run(self, mut say: impl FnMut(&str) -> std::io::Result<()>) -> anyhow::Result<()> {
        let file = self.at.settings_file()?;
        let mut args = String::new();
        if let Some(t) = &self.agent_args.token_file {
            args.push_str(&format!(" --token-file {}", t.display()));
        }
        if self.agent_args.url != crate::DEFAULT_URL {
            args.push_str(&format!(" --url {}", self.agent_args.url));
        }
        let (mut settings, old) = read_object(&file)?;
        let changed = merge(&mut settings, self.wait, &args);
        if changed.is_empty() {
            say(&format!(
                "{}: Kura's hooks are already set up",
                file.display()
            ))?;
        } else {
            write_object(&file, &settings, old.as_deref())?;
            let backup = if old.is_some() {
                " (the old file kept as .kura-backup)"
            } else {
                ""
            };
            say(&format!(
                "{}: {}{backup}",
                file.display(),
                changed.join(", ")
            ))?;
        }
        for f in check(&Value::Object(settings)) {
            say(&f.said)?;
        }
        match &self.at.project {
            Some(dir) => self.register_mcp(dir, &args, &mut say),
            None => say(&format!(
                "Kura's MCP tools for every project: claude mcp add kura -- kura mcp{args}"
            ))
            .map_err(Into::into),
        }
    }

    /// Registers `kura mcp` as the project's MCP server `kura` (`.mcp.json`).
    fn register_mcp(
        &self,
        dir: &Path,
        args: &str,
        say: &mut impl FnMut(&str) -> std::io::Result<()>,
    ) -> anyhow::Result<()> {
        let file = dir.join(".mcp.json");
        let (mut mcp, old) = read_object(&file)?;
        let mut ours = Map::new();
        ours.insert("command".into(), "kura".into());
        let argv: Vec<Value> = std::iter::once("mcp")
            .chain(args.split_whitespace())
            .map(Value::from)
            .collect();
        ours.insert("args".into(), Value::Array(argv));
        let servers = mcp
            .entry("mcpServers")
            .or_insert_with(|| Value::Object(Map::new()));
        if !servers.is_object() {
            *servers = Value::Object(Map::new());
        }
        let Some(servers) = servers.as_object_mut() else {
            return Ok(());
        };
        if servers.get("kura") == Some(&Value::Object(ours.clone())) {
            say(&format!(
                "{}: Kura's MCP server is already registered",
                file.display()
            ))?;
            return Ok(());
        }
        servers.insert("kura".into(), Value::Object(ours));
        write_object(&file, &mcp, old.as_deref())?;
        say(&format!(
            "{}: Kura's MCP server registered as \"kura\"",
            file.display()
        ))?;
        Ok(())
    }
}

/// `kura hook doctor claude-code`.
#[derive(Debug, clap::Args)]
pub struct Doctor {
    #[command(flatten)]
    at: Where,
    #[command(flatten)]
    agent_args: AgentArgs,
}

impl Doctor {
    fn run(self, mut say: impl FnMut(&str) -> std::io::Result<()>) -> anyhow::Result<()> {
        let mut ok = true;
        let mut report = |good: bool, line: String| -> std::io::Result<()> {
            ok &= good;
            say(&format!("{} {line}", if good { "ok:  " } else { "FAIL:" }))
        };
        let on_path = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join("kura").is_file()))
            .unwrap_or(false);
        report(
            on_path,
            if on_path {
                "kura is on the PATH Claude Code's hooks run with".into()
            } else {
                "kura is not on the PATH: a hook Claude Code cannot start lets the call run ungated (cargo install --path kura/cli, or the package)".into()
            },
        )?;
        let file = self.at.settings_file()?;
        match read_object(&file) {
            Ok((settings, Some(_))) => {
                for f in check(&Value::Object(settings)) {
                    report(f.ok, f.said)?;
                }
            }
            Ok((_, None)) => report(
                false,
                format!(
                    "{} does not exist: run kura hook install claude-code",
                    file.display()
                ),
            )?,
            Err(e) => report(false, format!("{e:#}"))?,
        }
        match self.agent_args.token() {
            Ok(token) => {
                let reached = reach(&self.agent_args, &token);
                report(reached.ok, reached.said)?;
            }
            Err(e) => report(false, format!("{e:#}"))?,
        }
        if !ok {
            std::process::exit(1);
        }
        Ok(())
    }
}

/// Whether `kura serve` answers the token: an authenticated read of a record that does not
/// exist is "not found" to a known agent, "unauthorized" to anyone else.
fn reach(args: &AgentArgs, token: &str) -> Finding {
    let failed = |said: String| Finding { ok: false, said };
    let client = match args.client() {
        Ok(c) => c,
        Err(e) => return failed(format!("{e:#}")),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return failed(e.to_string()),
    };
    let req = proto::agent::ShowRecord {
        record_id: proto::RecordId::new(),
    };
    let asked: Result<proto::agent::Records, crate::CallError> =
        rt.block_on(crate::call(&client, args, token, "show_record", &req));
    let answers = Finding {
        ok: true,
        said: format!("kura serve at {} answers this agent's token", args.url),
    };
    match asked {
        Ok(_) => answers,
        Err(crate::CallError::Refused { kind, .. }) if kind == "not_found" => answers,
        Err(crate::CallError::Refused { kind, message, .. }) => failed(format!(
            "kura serve at {} refused the token ({kind}: {message}): issue one with kura keys add-agent",
            args.url
        )),
        Err(e) => failed(format!("{e}: is kura serve running, and is --url right?")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    /// The user's own hooks stay; Kura's are added once, and a second install changes
    /// nothing; what it writes leaves PreToolUse room to refuse.
    #[test]
    fn install_merges_kuras_hooks_beside_the_users_and_is_idempotent() {
        let mut s = settings(serde_json::json!({
            "model": "opus",
            "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "lint-bash"}]}]}
        }));
        let first = merge(&mut s, DEFAULT_WAIT_S, "");
        assert_eq!(first.len(), 4, "{first:?}");
        assert_eq!(s["model"], "opus");
        let pre = s["hooks"]["PreToolUse"].as_array().expect("array");
        assert_eq!(
            pre[0]["hooks"][0]["command"], "lint-bash",
            "the user's hook is kept"
        );
        assert_eq!(pre.len(), 2);
        assert!(
            merge(&mut s, DEFAULT_WAIT_S, "").is_empty(),
            "a second install changes nothing"
        );
        assert!(check(&Value::Object(s)).iter().all(|f| f.ok));
    }

    /// A Kura hook with a timeout that would let Claude Code kill it is set right, not
    /// duplicated.
    #[test]
    fn install_fixes_a_kura_hook_that_claude_code_would_kill_before_it_refuses() {
        let mut s = settings(serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "*",
            "hooks": [{"type": "command", "command": "kura hook claude-code PreToolUse", "timeout": 30}]}]}}));
        assert!(!check(&Value::Object(s.clone())).iter().all(|f| f.ok));
        let changed = merge(&mut s, 120, " --url http://pi:8480");
        assert!(
            changed.contains(&"PreToolUse (updated)".to_owned()),
            "{changed:?}"
        );
        let pre = s["hooks"]["PreToolUse"].as_array().expect("array");
        assert_eq!(pre.len(), 1, "updated in place");
        assert_eq!(
            pre[0]["hooks"][0]["command"],
            "kura hook claude-code PreToolUse --wait 120 --url http://pi:8480"
        );
        assert!(check(&Value::Object(s)).iter().all(|f| f.ok));
    }
}
