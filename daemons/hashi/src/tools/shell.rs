//! `shell.run {argv}`: runs an allowlisted program in the workspace, no shell in between,
//! with `KURA_SESSION_ID` and `KURA_CALL_ID` set so its outside effects can be made idempotent.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::{Effect, Tool, Workspace};

/// Output kept per stream.
const MAX_OUTPUT: usize = 64 * 1024;

/// `shell.run`.
pub struct Run {
    /// Program names that may run.
    pub allowlist: Vec<String>,
    /// Kill after this long.
    pub timeout: Duration,
}

fn read_capped(mut r: impl std::io::Read) -> String {
    let mut buf = Vec::new();
    let _ = r.by_ref().take(MAX_OUTPUT as u64).read_to_end(&mut buf);
    // Drain the rest so the child never blocks on a full pipe.
    let _ = std::io::copy(&mut r, &mut std::io::sink());
    String::from_utf8_lossy(&buf).into_owned()
}

impl Tool for Run {
    fn name(&self) -> &'static str {
        "shell.run"
    }
    fn effect(&self) -> Effect {
        Effect::External
    }
    fn description(&self) -> &'static str {
        "Run an allowlisted program (argv list, no shell) in the workspace."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"argv": {"type": "array", "items": {"type": "string"}}}, "required": ["argv"]})
    }
    fn run(&self, ws: &Workspace, args: &Map<String, Value>) -> Result<Value, String> {
        let argv: Vec<String> = args
            .get("argv")
            .and_then(Value::as_array)
            .and_then(|a| {
                a.iter()
                    .map(|v| v.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
            })
            .filter(|a| !a.is_empty())
            .ok_or("argument \"argv\" (a non-empty list of strings) is required")?;
        if !self.allowlist.iter().any(|p| p == &argv[0]) {
            return Err(format!(
                "program {:?} is not in the shell allowlist",
                argv[0]
            ));
        }
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .current_dir(ws.root())
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", ws.root())
            .env("KURA_SESSION_ID", ws.session());
        if let Some(call_id) = ws.call_id() {
            // An idempotency key for whatever the program does outside.
            cmd.env("KURA_CALL_ID", call_id);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", argv[0]))?;
        let out = child
            .stdout
            .take()
            .map(|s| std::thread::spawn(move || read_capped(s)));
        let err = child
            .stderr
            .take()
            .map(|s| std::thread::spawn(move || read_capped(s)));
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait().map_err(|e| e.to_string())? {
                Some(s) => break Some(s),
                None if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        let stdout = out.and_then(|h| h.join().ok()).unwrap_or_default();
        let stderr = err.and_then(|h| h.join().ok()).unwrap_or_default();
        match status {
            None => Err(format!("timed out after {} ms", self.timeout.as_millis())),
            Some(s) => Ok(json!({"exit_code": s.code(), "stdout": stdout, "stderr": stderr})),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowlist_timeout_and_output() {
        let root = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::open(root.path(), "s").expect("ws");
        let run = Run {
            allowlist: vec!["echo".into(), "sleep".into()],
            timeout: Duration::from_millis(300),
        };
        let args = |v: Value| v.as_object().cloned().expect("object");
        let r = run
            .run(&ws, &args(json!({"argv": ["echo", "hi there"]})))
            .expect("echo");
        assert_eq!(r["stdout"], "hi there\n");
        assert_eq!(r["exit_code"], 0);
        let err = run
            .run(&ws, &args(json!({"argv": ["rm", "-rf", "/"]})))
            .expect_err("not allowed");
        assert!(err.contains("not in the shell allowlist"), "{err}");
        let err = run
            .run(&ws, &args(json!({"argv": ["sleep", "5"]})))
            .expect_err("timeout");
        assert!(err.contains("timed out"), "{err}");
        assert!(run.run(&ws, &args(json!({"argv": []}))).is_err());
        let run = Run {
            allowlist: vec!["sh".into()],
            timeout: Duration::from_secs(10),
        };
        let r = run
            .run(
                &ws.clone().for_call("c-42"),
                &args(json!({"argv": ["sh", "-c", "echo $KURA_SESSION_ID $KURA_CALL_ID"]})),
            )
            .expect("sh");
        assert_eq!(r["stdout"], "s c-42\n");
        assert!(run.run(&ws, &args(json!({"argv": "echo hi"}))).is_err());
    }
}
