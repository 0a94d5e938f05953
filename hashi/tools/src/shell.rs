//! `shell.run {argv}`: runs an allowlisted program in the workspace, no shell in between,
//! inside the kernel sandbox (see `crate::sandbox`), with `KURA_SESSION_ID` and
//! `KURA_CALL_ID` set so its outside effects can be made idempotent.

use crate::ToolError;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use proto::content::{ProgramExit, to_json};
use serde_json::{Map, Value, json};

use super::output::{KEEP_BYTES, capture};
use super::quota::Guard;
use super::{Effect, Tool, Workspace};
use crate::sandbox::{self, Limits, SandboxMode, SandboxState};

/// After the program has exited, how long its output pipes may stay open (a descendant that
/// escaped the process group could hold them forever).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// `shell.run`.
pub struct Run {
    /// Program names that may run.
    pub allowlist: Vec<String>,
    /// Kill after this long.
    pub timeout: Duration,
    /// The `hashi` binary, re-executed as `hashi sandbox-exec`.
    pub helper: PathBuf,
    /// Landlock or off.
    pub mode: SandboxMode,
    /// What the probe at start-up found.
    pub state: SandboxState,
    /// Extra read-only paths.
    pub read_only: Vec<PathBuf>,
    /// Extra writable paths.
    pub read_write: Vec<PathBuf>,
    /// Whether a policy rule grants this tool network access.
    pub network: bool,
    /// rlimits of the child.
    pub limits: Limits,
}

impl Run {
    /// The program and its arguments: a non-empty list of strings without NUL bytes, the
    /// program on the allowlist.
    fn argv(&self, args: &Map<String, Value>) -> Result<Vec<String>, ToolError> {
        let argv: Vec<String> = args
            .get("argv")
            .and_then(Value::as_array)
            .and_then(|a| {
                a.iter()
                    .map(|v| v.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
            })
            .filter(|a| !a.is_empty())
            .ok_or_else(|| {
                ToolError::Arguments(
                    "argument \"argv\" (a non-empty list of strings) is required".into(),
                )
            })?;
        if argv.iter().any(|a| a.contains('\0')) {
            return Err(ToolError::Arguments(
                "argv may not contain NUL bytes".into(),
            ));
        }
        if !self.allowlist.iter().any(|p| p == &argv[0]) {
            return Err(ToolError::Refused(format!(
                "program {:?} is not in the shell allowlist",
                argv[0]
            )));
        }
        Ok(argv)
    }

    /// Starts the program in the sandbox, in the workspace, with a clean environment and
    /// both output streams piped.
    fn spawn(
        &self,
        ws: &Workspace,
        argv: &[String],
        limits: Limits,
    ) -> Result<std::process::Child, ToolError> {
        let mut cmd = sandbox::command(
            &self.helper,
            self.mode,
            ws.root(),
            (&self.read_only, &self.read_write),
            self.network,
            limits,
            argv,
        );
        cmd.current_dir(ws.root())
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", ws.root())
            .env("TMPDIR", ws.root())
            .env("LANG", "C.UTF-8")
            .env("KURA_SESSION_ID", ws.session());
        if let Some(call_id) = ws.call_id() {
            // An idempotency key for whatever the program does outside.
            cmd.env("KURA_CALL_ID", call_id.as_str());
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ToolError::Failed(format!("cannot start {}: {e}", argv[0])))
    }

    /// Waits for the program, measuring the workspace as it runs: past the quota (or the
    /// timeout) the whole group is stopped. Its exit status (`None` when stopped), and
    /// whether it was stopped for passing the quota.
    fn wait(
        &self,
        ws: &Workspace,
        guard: &Guard,
        exited: &mpsc::Receiver<std::io::Result<std::process::ExitStatus>>,
        kill_group: impl Fn(),
    ) -> Result<(Option<std::process::ExitStatus>, bool), ToolError> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(guard.every());
            match exited.recv_timeout(wait) {
                Ok(s) => return Ok((Some(s.map_err(|e| e.to_string())?), false)),
                Err(mpsc::RecvTimeoutError::Timeout)
                    if Instant::now() < deadline && !guard.passed(ws) => {}
                Err(_) => {
                    let passed_quota = Instant::now() < deadline;
                    kill_group();
                    let _ = exited.recv();
                    return Ok((None, passed_quota));
                }
            }
        }
    }

    fn refuse_unconfined(&self) -> Result<(), ToolError> {
        match &self.state {
            SandboxState::Landlock(_) | SandboxState::Off => Ok(()),
            SandboxState::Unavailable(why) => Err(ToolError::Refused(format!(
                "shell.run is refused: the tool sandbox is unavailable on this host ({why}); \
                 an operator may set tools.sandbox = \"off\" to run tools unconfined"
            ))),
        }
    }
}

impl Tool for Run {
    fn name(&self) -> &str {
        "shell.run"
    }
    fn effect(&self) -> Effect {
        Effect::External
    }
    fn description(&self) -> &str {
        "Run an allowlisted program (argv list, no shell) in the workspace."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"argv": {"type": "array", "items": {"type": "string"}}}, "required": ["argv"]})
    }
    fn run(&self, ws: &Workspace, args: &Map<String, Value>) -> Result<Value, ToolError> {
        let argv = self.argv(args)?;
        self.refuse_unconfined()?;
        let (guard, left) = Guard::before_run(ws)?;
        let limits = Limits {
            file_bytes: self.limits.file_bytes.min(left),
            ..self.limits
        };
        let mut child = self.spawn(ws, &argv, limits)?;
        let group = i32::try_from(child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw);
        let readers = [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        ]
        .map(|stream| {
            let (tx, rx) = mpsc::channel();
            if let Some(s) = stream {
                std::thread::spawn(move || {
                    let _ = tx.send(capture(s, KEEP_BYTES));
                });
            }
            rx
        });
        let (exited_tx, exited) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = exited_tx.send(child.wait());
        });
        let kill_group = || {
            if let Some(g) = group {
                // ESRCH: everything already gone.
                let _ = rustix::process::kill_process_group(g, rustix::process::Signal::KILL);
            }
        };
        let (status, passed_quota) = self.wait(ws, &guard, &exited, kill_group)?;
        // Background descendants do not outlive the call.
        kill_group();
        let [out, err] = readers.map(|rx| {
            rx.recv_timeout(DRAIN_GRACE)
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default()
        });
        // A run can pass the quota between two checks, or just before it exits.
        if passed_quota || guard.passed(ws) {
            return Err(ToolError::Quota(guard.roll_back(ws)));
        }
        let Some(status) = status else {
            return Err(ToolError::Failed(format!(
                "timed out after {} ms",
                self.timeout.as_millis()
            )));
        };
        let exit = ProgramExit {
            exit_code: status.code(),
            signal: std::os::unix::process::ExitStatusExt::signal(&status),
        };
        let mut result = match to_json(&exit) {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        out.fields("stdout", &mut result);
        err.fields("stderr", &mut result);
        Ok(Value::Object(result))
    }
}
