//! The `command` provider: runs a configured program with the turn's context as JSON on
//! stdin and takes its stdout as the deliverable (a non-zero exit fails the turn). Stdin is
//! fed while stdout is read, the timeout covers the whole exchange, and the program sees an
//! empty environment plus what the config names.

use proto::SessionId;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Map;

use super::bounded::{excerpt, read_head};
use super::{Provider, ProviderConfig, ProviderError, Step, TurnInput};

/// Largest deliverable taken from the program's stdout.
const MAX_STDOUT: usize = 1024 * 1024;

/// Stderr quoted in an error.
const MAX_STDERR: usize = 2048;

/// A program as a model.
pub struct CommandProvider {
    /// argv.
    argv: Vec<String>,
    /// Kill after this long.
    timeout: Duration,
    /// Its whole environment.
    env: BTreeMap<String, String>,
}

impl CommandProvider {
    /// From config; the command must be set.
    pub fn new(config: &ProviderConfig) -> anyhow::Result<CommandProvider> {
        if config.command.is_empty() {
            anyhow::bail!("provider.command is empty: give the program's argv");
        }
        let mut env =
            BTreeMap::from([("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())]);
        for name in &config.command_pass_env {
            if let Some(v) = std::env::var_os(name).and_then(|v| v.into_string().ok()) {
                env.insert(name.clone(), v);
            }
        }
        env.extend(config.command_env.clone());
        Ok(CommandProvider {
            argv: config.command.clone(),
            timeout: Duration::from_millis(config.timeout_ms.max(1)),
            env,
        })
    }
}

/// What the program reads on stdin: the turn, its instruction, the previous turn's output
/// (`null` in the first turn), the sealed context's records, and `prompt`: the context as
/// every provider shows it to a model ([`crate::render::user_message`]).
#[derive(Debug, serde::Serialize)]
struct CommandInput<'a> {
    session_id: SessionId,
    turn: i64,
    instruction: String,
    previous_deliverable: Option<String>,
    prompt: String,
    /// What is left of the token budgets (`null`: none).
    max_tokens: Option<u64>,
    context: &'a [proto::record::Record],
}

impl Provider for CommandProvider {
    fn next(&self, input: &TurnInput<'_>) -> Result<Vec<Step>, ProviderError> {
        let stdin = serde_json::to_string(&CommandInput {
            session_id: input.session_id,
            turn: input.seq,
            instruction: input.instruction(),
            previous_deliverable: input.previous_deliverable(),
            prompt: crate::render::user_message(input.context),
            max_tokens: input.max_tokens,
            context: input.context,
        })
        .map_err(|e| ProviderError::Fatal(format!("cannot write the turn's input: {e}")))?;
        let program = &self.argv[0];
        let mut child = Command::new(program)
            .args(&self.argv[1..])
            .env_clear()
            .envs(&self.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| ProviderError::Fatal(format!("cannot start {program}: {e}")))?;
        // Feed stdin on its own thread: a program that answers before reading all of it (or
        // never reads it) must not block us once the pipe is full.
        if let Some(mut w) = child.stdin.take() {
            std::thread::spawn(move || {
                let _ = w.write_all(stdin.as_bytes());
            });
        }
        let spawn_reader = |r: Option<Box<dyn std::io::Read + Send>>, keep: usize| {
            let (tx, rx) = mpsc::channel();
            if let Some(r) = r {
                std::thread::spawn(move || {
                    let _ = tx.send(read_head(r, keep));
                });
            }
            rx
        };
        let out = spawn_reader(
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            MAX_STDOUT + 1,
        );
        let err = spawn_reader(
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            MAX_STDERR,
        );
        let group = i32::try_from(child.id()).unwrap_or(0);
        let (done_tx, done) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = done_tx.send(child.wait());
        });
        let status = match done.recv_timeout(self.timeout) {
            Ok(s) => s.map_err(|e| ProviderError::Fatal(e.to_string()))?,
            Err(_) => {
                kill_group(group);
                let _ = done.recv();
                return Err(ProviderError::Transient(format!(
                    "{program} timed out after {} ms",
                    self.timeout.as_millis()
                )));
            }
        };
        kill_group(group);
        let grace = Duration::from_secs(2);
        let (stdout, stdout_total) = out
            .recv_timeout(grace)
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let (stderr, _) = err
            .recv_timeout(grace)
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        if !status.success() {
            return Err(ProviderError::Fatal(format!(
                "{program} failed ({status}): {}",
                excerpt(String::from_utf8_lossy(&stderr).trim(), MAX_STDERR)
            )));
        }
        if stdout_total > MAX_STDOUT as u64 {
            return Err(ProviderError::Fatal(format!(
                "{program} wrote {stdout_total} bytes; a deliverable may be at most {MAX_STDOUT}"
            )));
        }
        Ok(vec![Step::Deliver {
            text: String::from_utf8_lossy(&stdout).trim().to_owned(),
            is_final: true,
            extra: Map::new(),
        }])
    }
}

/// Kills the program's process group: it and whatever it started.
fn kill_group(pgid: i32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use proto::record::{Record, RecordType};
    use serde_json::json;

    use super::*;

    fn provider(
        argv: &[&str],
        timeout_ms: u64,
        tweak: impl FnOnce(&mut ProviderConfig),
    ) -> CommandProvider {
        let mut config = ProviderConfig {
            command: argv.iter().map(|s| s.to_string()).collect(),
            timeout_ms,
            ..ProviderConfig::default()
        };
        tweak(&mut config);
        CommandProvider::new(&config).expect("provider")
    }

    fn context(bytes: usize) -> Vec<Record> {
        vec![Record {
            record_id: proto::RecordId::new(),
            hash: String::new(),
            record_type: RecordType::TaskInstruction,
            content: json!({"text": "x".repeat(bytes)}),
            author_id: "user:test".into(),
            metadata: Default::default(),
            created_at: String::new(),
        }]
    }

    fn ask(p: &CommandProvider, ctx: &[Record]) -> Result<Vec<Step>, ProviderError> {
        p.next(&TurnInput {
            session_id: proto::SessionId::new(),
            seq: 1,
            context: ctx,
            history: &[],
            tools: &[],
            max_tokens: None,
        })
    }

    fn text(steps: &[Step]) -> &str {
        match steps {
            [Step::Deliver { text, .. }] => text,
            other => panic!("expected one deliverable, got {other:?}"),
        }
    }

    /// Attack: a provider program that never reads stdin hung the worker once the context
    /// passed the pipe buffer (~64 KiB), because all of stdin was written before stdout was
    /// read and the timeout only started after that write.
    #[test]
    fn command_provider_that_ignores_stdin_does_not_hang() {
        let p = provider(&["sh", "-c", "echo answered"], 20_000, |_| {});
        let ctx = context(1 << 20);
        let steps = ask(&p, &ctx).expect("answered");
        assert_eq!(text(&steps), "answered");

        // One that neither reads nor exits is cut off by the timeout, whole exchange included.
        let p = provider(&["sleep", "30"], 300, |_| {});
        let started = Instant::now();
        let err = ask(&p, &ctx).expect_err("timed out");
        assert!(
            matches!(err, ProviderError::Transient(ref m) if m.contains("timed out")),
            "{err:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the timeout did not cover the write"
        );
    }

    /// Attack: the provider program inherited hashi's whole environment (API keys included).
    #[test]
    fn command_provider_sees_only_the_configured_environment() {
        let p = provider(&["sh", "-c", "env | sort"], 20_000, |c| {
            c.command_env.insert("MODEL".into(), "tiny".into());
            c.command_pass_env.push("HOME".into());
        });
        let ctx = context(10);
        let steps = ask(&p, &ctx).expect("ran");
        let names: Vec<&str> = text(&steps)
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .filter(|k| *k != "PWD" && *k != "SHLVL" && *k != "_")
            .collect();
        let mut want = vec!["MODEL", "PATH"];
        if std::env::var_os("HOME").is_some() {
            want.insert(0, "HOME");
        }
        assert_eq!(names, want);
    }

    #[test]
    fn command_provider_bounds_what_it_quotes() {
        let p = provider(
            &[
                "sh",
                "-c",
                "head -c 100000 /dev/zero | tr '\\0' e >&2; exit 3",
            ],
            20_000,
            |_| {},
        );
        let err = ask(&p, &context(10)).expect_err("failed");
        assert!(
            err.to_string().len() < 4096,
            "{} bytes",
            err.to_string().len()
        );
    }
}
