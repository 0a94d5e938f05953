//! The `command` provider: runs a configured program with the turn's context as JSON on
//! stdin and takes its stdout as the deliverable (a non-zero exit fails the turn).

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, json};

use super::{Provider, ProviderConfig, ProviderError, Step, TurnInput};

/// A program as a model.
pub struct CommandProvider {
    /// argv.
    argv: Vec<String>,
    /// Kill after this long.
    timeout: Duration,
}

impl CommandProvider {
    /// From config; the command must be set.
    pub fn new(config: &ProviderConfig) -> anyhow::Result<CommandProvider> {
        if config.command.is_empty() {
            anyhow::bail!("provider.command is empty: give the program's argv");
        }
        Ok(CommandProvider {
            argv: config.command.clone(),
            timeout: Duration::from_millis(config.timeout_ms.max(1)),
        })
    }
}

impl Provider for CommandProvider {
    fn next(&self, input: &TurnInput<'_>) -> Result<Vec<Step>, ProviderError> {
        let stdin = json!({
            "session_id": input.session_id,
            "turn": input.seq,
            "instruction": input.instruction(),
            "previous_deliverable": input.previous_deliverable(),
            "context": input.context,
        });
        let mut child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ProviderError::Fatal(format!("cannot start {}: {e}", self.argv[0])))?;
        if let Some(mut w) = child.stdin.take() {
            let _ = w.write_all(stdin.to_string().as_bytes());
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(ProviderError::Transient(format!(
                        "{} timed out",
                        self.argv[0]
                    )));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(ProviderError::Fatal(e.to_string())),
            }
        }
        let out = child
            .wait_with_output()
            .map_err(|e| ProviderError::Fatal(e.to_string()))?;
        if !out.status.success() {
            return Err(ProviderError::Fatal(format!(
                "{} failed ({}): {}",
                self.argv[0],
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(vec![Step::Deliver {
            text: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            is_final: true,
            extra: Map::new(),
        }])
    }
}
