//! The CLI runner: the real `kura` binary on a database in a temp directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// The one way tests run the real `kura` binary: on a database (or none), with only the
/// environment the test gives it — none of `KURA_DB`, `KURA_SYNCHRONOUS`,
/// `KURA_SERVE_CONFIG`, `KURA_LOG_VERIFIER` or `KURA_KEYRING` leaks in from the machine.
#[derive(Debug, Clone, Default)]
pub struct Cli {
    db: Option<PathBuf>,
    dir: Option<PathBuf>,
    env: Vec<(String, String)>,
}

/// Variables a test's `kura` never inherits (each test sets what it means).
const UNSET: &[&str] = &[
    "KURA_DB",
    "KURA_SYNCHRONOUS",
    "KURA_SERVE_CONFIG",
    "KURA_LOG_VERIFIER",
    "KURA_KEYRING",
];

impl Cli {
    /// `kura --db DB …`.
    pub fn on(db: &Path) -> Cli {
        Cli {
            db: Some(db.to_path_buf()),
            ..Cli::default()
        }
    }

    /// `kura …` with no database (a hub's set-up, a key).
    pub fn bare() -> Cli {
        Cli::default()
    }

    /// Runs from `dir`.
    pub fn in_dir(mut self, dir: &Path) -> Cli {
        self.dir = Some(dir.to_path_buf());
        self
    }

    /// Sets `key` to `value` for every run.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Cli {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Sets each of `vars` for every run.
    pub fn envs(mut self, vars: &[(String, String)]) -> Cli {
        self.env.extend(vars.iter().cloned());
        self
    }

    /// The command, not yet run.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        if let Some(db) = &self.db {
            c.arg("--db").arg(db);
        }
        c.args(args);
        if let Some(dir) = &self.dir {
            c.current_dir(dir);
        }
        for k in UNSET {
            c.env_remove(k);
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    /// Runs and returns the output, whatever the exit code.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args)
            .stdin(Stdio::null())
            .output()
            .expect("run kura")
    }

    /// Runs, asserts exit 0, returns trimmed stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kura {args:?} failed ({:?}):\n{}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Runs with --json, asserts exit 0, parses stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        serde_json::from_str(&self.ok(&all)).expect("JSON output")
    }

    /// Runs, asserts exit `code`, returns (stdout, stderr).
    pub fn fails(&self, code: i32, args: &[&str]) -> (String, String) {
        let out = self.run(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            out.status.code(),
            Some(code),
            "kura {args:?}: expected exit {code}\nstdout: {stdout}\nstderr: {stderr}"
        );
        (stdout, stderr)
    }
}

/// A temp directory with a Kura database path in it.
pub struct Kura {
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
}

/// The `kura` binary.
pub fn bin() -> PathBuf {
    crate::bin("kura")
}

impl Default for Kura {
    fn default() -> Self {
        Kura::new()
    }
}

impl Kura {
    /// A fresh, initialized database.
    pub fn new() -> Kura {
        let k = Kura::uninit();
        k.ok(&["init"]);
        k
    }

    /// A temp directory with no database yet.
    pub fn uninit() -> Kura {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("kura.db");
        Kura { dir, db }
    }

    /// The runner on this database, run from its temp directory.
    pub fn cli(&self) -> Cli {
        Cli::on(&self.db).in_dir(self.dir.path())
    }

    /// The command, not yet run.
    pub fn cmd(&self, args: &[&str]) -> Command {
        self.cli().cmd(args)
    }

    /// Runs and returns the output, whatever the exit code.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cli().run(args)
    }

    /// Runs, asserts exit 0, returns trimmed stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        self.cli().ok(args)
    }

    /// Runs with --json, asserts exit 0, parses stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        self.cli().json(args)
    }

    /// Runs, asserts exit `code`, returns (stdout, stderr).
    pub fn fails(&self, code: i32, args: &[&str]) -> (String, String) {
        self.cli().fails(code, args)
    }

    /// A sealed ledger in `session` holding one deliverable `text`; returns the ledger id.
    pub fn seal_text(&self, session: &str, label: &str, text: &str) -> String {
        let ledger = self.ok(&["ledger", "open", "--session", session, "--label", label]);
        self.ok(&[
            "record",
            "add",
            "--ledger",
            &ledger,
            "--type",
            "task.deliverable",
            "--author",
            "agent:hashi",
            "--text",
            text,
        ]);
        self.ok(&["ledger", "seal", &ledger]);
        ledger
    }

    /// Makes a note key `file` named `name` in the temp directory (`witness`: a witness's
    /// key); returns its path and the verifier key `kura` printed for it.
    pub fn note_key(&self, file: &str, name: &str, witness: bool) -> (PathBuf, String) {
        let key = self.dir.path().join(file);
        let path = key.to_str().expect("utf8 path");
        let mut args = vec!["log-key", "init", "--out", path, "--name", name];
        if witness {
            args.push("--witness");
        }
        let out = self.ok(&args);
        let vkey = out.lines().last().expect("vkey").trim().to_owned();
        assert!(vkey.starts_with(&format!("{name}+")), "{out}");
        (key, vkey)
    }

    /// Every row of every Kura table, as text: equal fingerprints mean an unchanged store.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.db)
    }

    /// Opens the database directly (bypassing Kura), for tampering.
    pub fn raw(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(&self.db).expect("raw open")
    }

    /// Drops every trigger, as an attacker with file access would.
    pub fn drop_triggers(&self) -> rusqlite::Connection {
        let c = self.raw();
        let names: Vec<String> = c
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'trigger'")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert!(!names.is_empty());
        for n in names {
            c.execute_batch(&format!("DROP TRIGGER {n}"))
                .expect("drop trigger");
        }
        c
    }

    /// Opens a ledger labelled `label` in `session`, after `parent` if given; its id.
    pub fn open_ledger(&self, session: &str, label: &str, parent: Option<&str>) -> String {
        let mut args = vec!["ledger", "open", "--session", session, "--label", label];
        if let Some(p) = parent {
            args.extend(["--parent", p]);
        }
        self.ok(&args)
    }

    /// Adds a record of `record_type` by `author` to `ledger`: `how` is `--text` or
    /// `--content` (then `body` is JSON), `extra` any further arguments; its id.
    pub fn add(
        &self,
        ledger: &str,
        record_type: &str,
        author: &str,
        (how, body): (&str, &str),
        extra: &[&str],
    ) -> String {
        let mut args = vec![
            "record",
            "add",
            "--ledger",
            ledger,
            "--type",
            record_type,
            "--author",
            author,
            how,
            body,
        ];
        args.extend(extra);
        self.ok(&args)
    }

    /// A session with two sealed turns (context, output, context, output), returning ids.
    pub fn demo_session(&self) -> Demo {
        let session = self.ok(&["session", "new", "--label", "demo"]);
        let ctx1 = self.open_ledger(&session, "turn-1-ctx", None);
        let instr = self.add(
            &ctx1,
            "task.instruction",
            "user:oles",
            ("--text", "count the files"),
            &[],
        );
        self.ok(&["ledger", "seal", &ctx1]);
        let out1 = self.open_ledger(&session, "turn-1-out", Some(&ctx1));
        let thought = self.add(
            &out1,
            "agent.thought",
            "agent:hashi",
            ("--text", "I will list them"),
            &["--meta", "step=1"],
        );
        let call = self.add(
            &out1,
            "tool.call",
            "agent:hashi",
            (
                "--content",
                r#"{"tool_name":"fs.list","arguments":{"path":"."}}"#,
            ),
            &[],
        );
        let result = self.add(
            &out1,
            "tool.result",
            "tool:fs",
            ("--content", r#"{"status":"success","result":["a","b"]}"#),
            &[],
        );
        let deliv = self.add(
            &out1,
            "task.deliverable",
            "agent:hashi",
            ("--text", "two files"),
            &[],
        );
        self.ok(&["ledger", "seal", &out1]);
        let ctx2 = self.open_ledger(&session, "turn-2-ctx", Some(&out1));
        self.add(
            &ctx2,
            "task.instruction",
            "user:oles",
            ("--text", "now name them"),
            &[],
        );
        self.ok(&["ledger", "seal", &ctx2]);
        let out2 = self.open_ledger(&session, "turn-2-out", Some(&ctx2));
        self.add(
            &out2,
            "task.deliverable",
            "agent:hashi",
            ("--text", "a and b"),
            &[],
        );
        self.ok(&["ledger", "seal", &out2]);
        Demo {
            session,
            ctx1,
            out1,
            ctx2,
            out2,
            instr,
            thought,
            call,
            result,
            deliv,
        }
    }
}

/// Ids of the demo session.
pub struct Demo {
    pub session: String,
    pub ctx1: String,
    pub out1: String,
    pub ctx2: String,
    pub out2: String,
    pub instr: String,
    pub thought: String,
    pub call: String,
    pub result: String,
    pub deliv: String,
}

pub fn fingerprint(db: &Path) -> String {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open read-only");
    let mut text = String::new();
    for table in [
        "records",
        "ledgers",
        "ledger_records",
        "sessions",
        "session_reflog",
    ] {
        let mut stmt = c
            .prepare(&format!("SELECT * FROM {table} ORDER BY 1, 2"))
            .expect("prepare");
        let n = stmt.column_count();
        let mut rows = stmt.query([]).expect("query");
        while let Some(r) = rows.next().expect("row") {
            for i in 0..n {
                let v: rusqlite::types::Value = r.get(i).expect("value");
                text.push_str(&format!("{v:?}|"));
            }
            text.push('\n');
        }
    }
    text
}
