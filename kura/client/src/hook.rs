//! `kura hook claude-code <event>`: binds Claude Code to Kura through its hooks, without the
//! agent's cooperation. It reads the hook's JSON on stdin (as Claude Code's hook reference
//! specifies) and maps UserPromptSubmit to a new turn, PreToolUse to a declared call (exit 2
//! with the reason when Kura denies it, a wait for a person when Kura asks), PostToolUse to
//! the call's `tool.result`, and Stop to the deliverable. Kura records and gates what the
//! agent declares; it cannot confine what the agent's own process then does.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use proto::agent::{StartSession, Started};
use proto::{CallId, SessionId, TurnId};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::AgentArgs;
use crate::surface::{Kura, Outcome, Ruling};

/// The most of a hook payload read from stdin.
const MAX_PAYLOAD: u64 = 4 << 20;

/// Record and gate an outside agent through its hooks.
#[derive(Debug, clap::Args)]
pub struct Hook {
    /// The hook event, as the agent names it.
    #[arg(value_enum, required_unless_present = "check_settings")]
    event: Option<HookEvent>,
    /// Instead of handling an event: check that the agent's settings file (Claude Code's
    /// settings.json) leaves each PreToolUse hook room to refuse before its timeout.
    #[arg(long, value_name = "FILE")]
    check_settings: Option<PathBuf>,
    /// How long PreToolUse waits for a person before refusing the call (seconds; keep it
    /// below the hook's own timeout, after which Claude Code would run the tool).
    #[arg(long, default_value_t = 540)]
    wait: u64,
    /// Where the hook remembers each agent session's Kura turn (default:
    /// $XDG_STATE_HOME/kura/hooks or ~/.local/state/kura/hooks).
    #[arg(long, env = "KURA_HOOK_STATE")]
    state_dir: Option<PathBuf>,
    #[command(flatten)]
    agent_args: AgentArgs,
}

/// Claude Code's hook events Kura maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "PascalCase")]
enum HookEvent {
    /// A prompt: a new Kura turn (in the same Kura session as the agent session's last).
    UserPromptSubmit,
    /// A tool about to run: declared to Kura, which allows, denies or asks a person.
    PreToolUse,
    /// A tool that ran: its result recorded.
    PostToolUse,
    /// The agent stopped: the turn ends with its last message as the deliverable.
    Stop,
}

/// `--check-settings FILE`: one line per Kura PreToolUse hook found in Claude Code's
/// settings; exit 1 when one would be killed before it can refuse (or none is there).
fn check_settings(
    file: &std::path::Path,
    say: &mut impl FnMut(&str) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    let mut text = String::new();
    std::fs::File::open(file)
        .with_context(|| format!("cannot read {}", file.display()))?
        .take(MAX_PAYLOAD)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read {}", file.display()))?;
    let settings: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not Claude Code's settings JSON", file.display()))?;
    let found = crate::settings::check(&settings);
    for f in &found {
        say(&proto::text::escape_controls(&f.said))?;
    }
    if found.iter().any(|f| !f.ok) {
        std::process::exit(1);
    }
    Ok(())
}

/// The fields of Claude Code's hook input that Kura uses (others are ignored).
#[derive(Debug, Deserialize)]
struct Input {
    session_id: String,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    tool_name: Option<String>,
    #[serde(default)]
    tool_input: Option<Value>,
    #[serde(default)]
    tool_response: Option<Value>,
    #[serde(default)]
    tool_use_id: Option<String>,
    #[serde(default)]
    last_assistant_message: Option<String>,
    #[serde(default)]
    transcript_path: Option<String>,
}

/// What the hook remembers per agent session.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct State {
    session: Option<SessionId>,
    turn: Option<TurnId>,
    /// tool_use_id -> Kura call id.
    calls: BTreeMap<String, CallId>,
    /// Every tool_use_id Kura knows of in this agent session (declared, or reported
    /// ungated), oldest first: a call in the transcript that is not here ran ungated.
    #[serde(default)]
    known: Vec<String>,
}

/// The most tool_use ids remembered per agent session (then the oldest half is forgotten:
/// a transcript scan reads only the tail anyway).
const MAX_KNOWN: usize = 20_000;

/// How much of a transcript the Stop hook reads for calls that ran undeclared.
const TRANSCRIPT_TAIL: u64 = 8 << 20;

/// PreToolUse's answer when a person edited the arguments (Claude Code's hook output).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PreToolOutput {
    hook_specific_output: PreToolDecision,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PreToolDecision {
    hook_event_name: &'static str,
    permission_decision: &'static str,
    permission_decision_reason: String,
    updated_input: Map<String, Value>,
}

impl Hook {
    /// Maps one hook call. Exit 2 (with the reason on stderr) only when a call must not run.
    /// `say` writes one whole message to stdout.
    pub fn run(self, mut say: impl FnMut(&str) -> std::io::Result<()>) -> anyhow::Result<()> {
        if let Some(file) = &self.check_settings {
            return check_settings(file, &mut say);
        }
        let Some(event) = self.event else {
            anyhow::bail!("name the hook event: UserPromptSubmit, PreToolUse, PostToolUse or Stop");
        };
        let mut raw = String::new();
        std::io::stdin()
            .take(MAX_PAYLOAD)
            .read_to_string(&mut raw)
            .context("reading the hook's JSON on stdin")?;
        let input: Input =
            serde_json::from_str(&raw).context("the hook's stdin is not Claude Code hook JSON")?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        match rt.block_on(self.map(event, &input)) {
            Ok(Some(answer)) => {
                say(&answer)?;
                Ok(())
            }
            Ok(None) => Ok(()),
            // Exit 2 blocks: only a tool call is ever refused. For the other events exit 2
            // would erase the prompt or keep the agent from stopping, so a failure there is
            // reported (exit 1: Claude Code shows it and goes on).
            Err(Refuse(why)) => {
                eprintln!("{why}");
                std::process::exit(if event == HookEvent::PreToolUse { 2 } else { 1 });
            }
        }
    }

    async fn map(&self, event: HookEvent, input: &Input) -> Result<Option<String>, Refuse> {
        let file = self
            .state_file(&input.session_id)
            .map_err(Refuse::from_err)?;
        let mut state = load(&file);
        let before = state.clone();
        let kura = Kura::new(&self.agent_args).map_err(|e| self.failed(e))?;
        // Kura's own tools (`kura mcp`) record themselves: declaring them again would gate
        // every Kura call on Kura.
        let own = input
            .tool_name
            .as_deref()
            .is_some_and(|t| t.starts_with("mcp__kura__"));
        if own && matches!(event, HookEvent::PreToolUse | HookEvent::PostToolUse) {
            return Ok(None);
        }
        let answer: Result<Option<String>, Refuse> = async {
            Ok(match event {
                HookEvent::UserPromptSubmit => {
                    if let Some(turn) = state.turn.take() {
                        let _ = kura
                            .end(turn, "(the next prompt began before this turn stopped)")
                            .await;
                    }
                    let prompt = input.prompt.clone().unwrap_or_default();
                    let started = start(&kura, &mut state, input, &prompt)
                        .await
                        .map_err(|e| self.failed(e))?;
                    state.turn = Some(started.turn_id);
                    None
                }
                HookEvent::PreToolUse => self.pre_tool(&kura, &mut state, input).await?,
                HookEvent::PostToolUse => {
                    let turn = turn(&kura, &mut state, input)
                        .await
                        .map_err(|e| self.failed(e))?;
                    let call_id = input
                        .tool_use_id
                        .as_ref()
                        .and_then(|u| state.calls.remove(u));
                    let result = input.tool_response.clone().unwrap_or(Value::Null);
                    match (call_id, &input.tool_use_id) {
                        // It ran, and Kura never saw it declared: the PreToolUse hook was
                        // missing, killed or timed out.
                        (None, Some(id)) if !state.known.contains(id) => {
                            let tool = input.tool_name.clone().unwrap_or_default();
                            let args = match &input.tool_input {
                                Some(Value::Object(m)) => m.clone(),
                                _ => Map::new(),
                            };
                            kura.report_ungated(turn, &tool, args, id, Some(result), "PostToolUse")
                                .await
                                .map_err(|e| self.failed(e))?;
                            know(&mut state, id);
                        }
                        (call_id, _) => kura
                            .record_result(turn, call_id.as_ref(), Outcome::Success(result))
                            .await
                            .map_err(|e| self.failed(e))?,
                    }
                    None
                }
                HookEvent::Stop => {
                    // Best effort: the turn ends whether or not the transcript can be read.
                    if let (Some(turn), Some(path)) = (state.turn, &input.transcript_path)
                        && let Err(e) = ungated_in_transcript(&kura, &mut state, turn, path).await
                    {
                        eprintln!("kura hook: calls in the transcript were not checked: {e:#}");
                    }
                    if let Some(turn) = state.turn.take() {
                        let text = input
                            .last_assistant_message
                            .clone()
                            .unwrap_or_else(|| "(Claude Code stopped)".into());
                        kura.end(turn, &text).await.map_err(|e| self.failed(e))?;
                        state.calls.clear();
                    }
                    None
                }
            })
        }
        .await;
        // Saved whatever happened: a turn started (or ended) before a refusal or a failure
        // must be remembered, or the next call would open another.
        save(&file, &before, &state).map_err(Refuse::from_err)?;
        answer
    }

    /// Declares the call; `None` lets Claude Code's own permission flow go on (Kura allowed
    /// it, or a person approved it as it was); an edit comes back as `updatedInput`.
    async fn pre_tool(
        &self,
        kura: &Kura,
        state: &mut State,
        input: &Input,
    ) -> Result<Option<String>, Refuse> {
        let tool = input.tool_name.clone().unwrap_or_default();
        let arguments = match input.tool_input.clone() {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let turn = turn(kura, state, input).await.map_err(|e| self.failed(e))?;
        // Never past --wait: a hook Claude Code kills lets the call run ungated.
        let wait = Duration::from_secs(self.wait);
        let gate = kura
            .gate(turn, &tool, arguments.clone(), wait)
            .await
            .map_err(|e| self.failed(e))?;
        if let Some(u) = &input.tool_use_id {
            state.calls.insert(u.clone(), gate.declared.call_id.clone());
            know(state, u);
        }
        // What runs is what Kura ruled on: a person's edit, else the declared arguments in
        // their normal form when Kura respelled a path.
        let ruled = gate.respelled(&arguments);
        match gate.ruling {
            Ruling::Run {
                edit: Some(edit), ..
            } => run_instead(Some(edit), EDITED, "allow"),
            // Kura's policy allowed it: Claude Code's own flow still has its say.
            Ruling::Run { edit: None, asked } => {
                run_instead(ruled, RESPELLED, if asked { "allow" } else { "ask" })
            }
            Ruling::Refused(why) => Err(Refuse(why)),
        }
    }

    fn failed(&self, e: anyhow::Error) -> Refuse {
        let _ = self;
        Refuse(format!("kura hook: {e:#}"))
    }

    fn state_file(&self, session: &str) -> anyhow::Result<PathBuf> {
        let dir = match &self.state_dir {
            Some(d) => d.clone(),
            None => std::env::var_os("XDG_STATE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
                .context("no state directory: set --state-dir or $HOME")?
                .join("kura/hooks"),
        };
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        // The agent's session id names the file only through its hash: it cannot reach
        // outside the directory whatever it holds.
        Ok(dir.join(format!(
            "claude-code-{}.json",
            hex::encode(Sha256::digest(session.as_bytes()))
        )))
    }
}

/// Why the call runs with other arguments: a person's edit.
const EDITED: &str = "a person approved it in Kura with edited arguments";
/// ... or its paths in the normal form Kura ruled on.
const RESPELLED: &str = "Kura ruled on its paths in normal form; it runs as ruled";

/// Claude Code's answer when the call must run with other arguments than it asked (`None`:
/// its own permission flow goes on with the call as asked).
fn run_instead(
    args: Option<Map<String, Value>>,
    why: &str,
    decision: &'static str,
) -> Result<Option<String>, Refuse> {
    let Some(updated_input) = args else {
        return Ok(None);
    };
    let out = PreToolOutput {
        hook_specific_output: PreToolDecision {
            hook_event_name: "PreToolUse",
            permission_decision: decision,
            permission_decision_reason: why.into(),
            updated_input,
        },
    };
    serde_json::to_string(&out)
        .map(Some)
        .map_err(|e| Refuse(e.to_string()))
}

/// Why a hook refuses (exit 2) or fails.
struct Refuse(String);

impl Refuse {
    fn from_err(e: anyhow::Error) -> Self {
        Refuse(format!("kura hook: {e:#}"))
    }
}

/// Remembers that Kura knows of tool use `id`.
fn know(state: &mut State, id: &str) {
    if state.known.iter().any(|k| k == id) {
        return;
    }
    if state.known.len() >= MAX_KNOWN {
        state.known.drain(..MAX_KNOWN / 2);
    }
    state.known.push(id.to_owned());
}

/// At Stop: every tool use in the transcript's tail that Kura never saw (neither declared
/// nor reported) ran ungated — both its hooks were missing or killed. Kura's own tools
/// record themselves.
async fn ungated_in_transcript(
    kura: &Kura,
    state: &mut State,
    turn: TurnId,
    path: &str,
) -> anyhow::Result<()> {
    let path = std::path::Path::new(path);
    // A FIFO (or anything but a file) named as the transcript would hold the hook.
    anyhow::ensure!(
        std::fs::metadata(path).is_ok_and(|m| m.is_file()),
        "{} is not a file",
        path.display()
    );
    let t = kura_history::transcript::read(path, TRANSCRIPT_TAIL)
        .with_context(|| format!("cannot read the transcript {}", path.display()))?;
    let results: std::collections::HashMap<&str, &Value> = t
        .steps
        .iter()
        .filter_map(|s| match s {
            kura_history::transcript::Step::ToolResult { id, content, .. } => {
                Some((id.as_str(), content))
            }
            _ => None,
        })
        .collect();
    let mut failed = None;
    for step in &t.steps {
        let kura_history::transcript::Step::ToolUse { id, name, input } = step else {
            continue;
        };
        if id.is_empty() || name.starts_with("mcp__kura__") || state.known.iter().any(|k| k == id) {
            continue;
        }
        let result = results.get(id.as_str()).map(|v| (*v).clone());
        // Each call on its own: one refused (too large, the rate limit) hides no other.
        match kura
            .report_ungated(turn, name, input.clone(), id, result, "transcript")
            .await
        {
            Ok(()) => know(state, id),
            Err(e) => failed = Some(e),
        }
    }
    failed.map_or(Ok(()), Err)
}

/// The hook's state for an agent session (empty when there is none yet).
fn load(file: &std::path::Path) -> State {
    std::fs::read(file)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Saves what this run changed (`before` → `now`) over what is on disk now: hooks for
/// parallel calls run at once (one may wait minutes for a person), and a whole-file write
/// would drop another's declared call — whose result would then be reported ungated.
fn save(file: &std::path::Path, before: &State, now: &State) -> anyhow::Result<()> {
    if before == now {
        return Ok(());
    }
    let dir = file.parent().unwrap_or(std::path::Path::new("."));
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(file.with_extension("lock"))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)?;
    let mut merged = load(file);
    if now.session != before.session {
        merged.session = now.session;
    }
    if now.turn != before.turn {
        merged.turn = now.turn;
    }
    for (k, v) in &now.calls {
        if before.calls.get(k) != Some(v) {
            merged.calls.insert(k.clone(), v.clone());
        }
    }
    for k in before.calls.keys().filter(|k| !now.calls.contains_key(*k)) {
        merged.calls.remove(k);
    }
    for k in now.known.iter().filter(|k| !before.known.contains(k)) {
        know(&mut merged, k);
    }
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    serde_json::to_writer(&mut tmp, &merged)?;
    tmp.persist(file).map_err(|e| e.error)?;
    Ok(())
}

/// A new turn for `instruction`, in the agent session's Kura session when it has one.
async fn start(
    kura: &Kura,
    state: &mut State,
    input: &Input,
    instruction: &str,
) -> anyhow::Result<Started> {
    let label = input
        .cwd
        .as_deref()
        .and_then(|c| std::path::Path::new(c).file_name())
        .map(|n| format!("claude-code: {}", n.to_string_lossy()));
    let instruction = if instruction.trim().is_empty() {
        "(an empty prompt)"
    } else {
        instruction
    };
    let req = StartSession {
        instruction: instruction.to_owned(),
        label,
        session_id: state.session,
        from_ledger: None,
    };
    let started: Started = match kura.call("start_session", &req).await {
        Ok(s) => s,
        // The Kura session is gone or not this agent's (a new token?): start afresh.
        Err(_) if state.session.is_some() => {
            let fresh = StartSession {
                session_id: None,
                ..req
            };
            kura.call("start_session", &fresh).await?
        }
        Err(e) => return Err(e),
    };
    state.session = Some(started.session_id);
    Ok(started)
}

/// The open turn, started when the hooks were installed mid-session.
async fn turn(kura: &Kura, state: &mut State, input: &Input) -> anyhow::Result<TurnId> {
    if let Some(t) = state.turn {
        return Ok(t);
    }
    let started = start(
        kura,
        state,
        input,
        "(a Claude Code session whose prompt Kura did not see)",
    )
    .await?;
    state.turn = Some(started.turn_id);
    Ok(started.turn_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Claude Code reads exactly these keys from a PreToolUse hook (its hooks reference):
    /// a misspelt one would be ignored, and the unedited call would run.
    #[test]
    fn an_edit_is_answered_in_claude_codes_pre_tool_use_shape() {
        let mut edited = Map::new();
        edited.insert("command".into(), "ls build".into());
        let out = PreToolOutput {
            hook_specific_output: PreToolDecision {
                hook_event_name: "PreToolUse",
                permission_decision: "allow",
                permission_decision_reason: "why".into(),
                updated_input: edited,
            },
        };
        let v = serde_json::to_value(&out).expect("json");
        assert_eq!(
            v,
            serde_json::json!({"hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "allow",
                "permissionDecisionReason": "why",
                "updatedInput": {"command": "ls build"}
            }})
        );
    }

    #[test]
    fn a_large_tool_response_is_cut_and_says_so() {
        use crate::surface::{MAX_RESULT, bounded};
        let small = serde_json::json!({"ok": true});
        assert_eq!(bounded(small.clone()), small);
        let big = Value::String("é".repeat(MAX_RESULT));
        let cut = bounded(big);
        let text = cut.as_str().expect("text");
        assert!(
            text.len() < MAX_RESULT + 100 && text.contains("[cut:"),
            "{}",
            text.len()
        );
    }
}
