//! The process stack: a real nats-server, the real daemon binaries as separate processes,
//! one real SQLite file in a temp dir; everything killed on drop.

use proto::SessionId;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::{NatsServer, bin};
use kura_runtime::bus::Credentials;
use kura_runtime::identity::Role;
use kura_store::{Store, StoreOptions};
use kura_work::{RequestStatus, request_status};

/// Which binary runs a daemon instance (`hashi-2` → `hashi`; `serve` → `kura serve`).
pub fn binary(instance: &str) -> &'static str {
    match instance.split('-').next().unwrap_or("") {
        "hashi" => "hashi",
        "aegis" => "aegis",
        "mikado" => "mikado",
        "serve" => "kura",
        _ => "minato",
    }
}

/// The bus identity a daemon instance (or `submit`) connects as.
pub fn role(instance: &str) -> Role {
    if instance.starts_with("submit") {
        return Role::Submit;
    }
    match binary(instance) {
        "hashi" => Role::Hashi,
        "aegis" => Role::Aegis,
        "mikado" => Role::Mikado,
        "kura" => Role::Serve,
        _ => Role::Minato,
    }
}

/// The root key of an `aegis keygen` key file (the same Ed25519 secret; it signs decisions,
/// and the bus key is derived from it).
pub fn approver_key(key_file: &std::path::Path) -> nkeys::KeyPair {
    let text = std::fs::read_to_string(key_file).expect("key file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("key json");
    let secret: [u8; 32] = hex::decode(v["secret_key"].as_str().expect("secret"))
        .expect("hex")
        .try_into()
        .expect("32 bytes");
    kura_runtime::identity::root_key_from_secret(secret).expect("nkey")
}

/// A running stack.
pub struct Stack {
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
    pub nats: NatsServer,
    pub children: Vec<(String, Child)>,
    pub extra_env: Vec<(String, String)>,
    /// Leave the temp directory (database, logs) on disk when dropped, for a post-mortem.
    pub keep_files: bool,
}

impl Stack {
    /// A database, a nats-server and a scripted-provider script; no daemons yet.
    pub fn new(script: &str) -> Stack {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("kura.db");
        Store::create(&db, &StoreOptions::default()).expect("create db");
        std::fs::write(dir.path().join("script.json"), script).expect("script");
        // Unless a test sets its own policy, aegis allows every call.
        std::fs::write(
            dir.path().join("policy.toml"),
            "[defaults]\nread = \"allow\"\nwrite = \"allow\"\nexternal = \"allow\"\n",
        )
        .expect("policy");
        Stack {
            dir,
            db,
            nats: NatsServer::start(),
            children: Vec::new(),
            extra_env: Vec::new(),
            keep_files: false,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Sets `cmd`'s environment as this stack runs `instance` (its own `extra_env` last).
    pub fn env(&self, cmd: &mut Command, instance: &str) {
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("KURA_")) {
            cmd.env_remove(k);
        }
        cmd.env("KURA_DB", &self.db)
            .env("KURA_NATS_URL", self.nats.url())
            .env("KURA_NATS_SEED", self.nats.seed(role(instance)))
            .env("KURA_NATS_CA", self.nats.ca())
            .env("KURA_NATS__KEYS_DIR", self.nats.keys_dir())
            .env("KURA_AEGIS__REPLY_KEY", self.nats.signer(Role::Aegis))
            .env("KURA_POLL_INTERVAL_MS", "200")
            .env("KURA_INSTANCE", instance)
            .env("KURA_PROVIDER__SCRIPT", self.path("script.json"))
            .env("KURA_TOOLS__WORKSPACE_ROOT", self.path("ws"))
            .env("KURA_WORKER__LEASE_MS", "1500")
            .env("KURA_AEGIS__POLICY", self.path("policy.toml"))
            .env("RUST_LOG", "info");
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
    }

    /// Starts `<binary> run` as `instance`, logging to `<instance>.log` (appended to, so a
    /// restarted daemon keeps its earlier log).
    pub fn spawn(&mut self, binary: &str, instance: &str) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path(&format!("{instance}.log")))
            .expect("log file");
        let mut cmd = Command::new(bin(binary));
        // `kura` is the fifth daemon: `kura serve`.
        cmd.arg(if binary == "kura" { "serve" } else { "run" })
            .stdout(Stdio::null())
            .stderr(log)
            .stdin(Stdio::null());
        self.env(&mut cmd, instance);
        let child = cmd.spawn().expect("spawn daemon");
        self.children.retain(|(n, _)| n != instance);
        self.children.push((instance.to_owned(), child));
    }

    /// `aegis keygen --name NAME` into this stack's directory, then [`Stack::add_approver`];
    /// returns the key file.
    pub fn new_approver(&self, name: &str) -> PathBuf {
        let key = self.path(&format!("{name}.key"));
        let out = Command::new(bin("aegis"))
            .args(["keygen", "--name", name, "--key"])
            .arg(&key)
            .output()
            .expect("aegis keygen");
        assert!(out.status.success(), "aegis keygen {name}");
        self.add_approver(name, &key);
        key
    }

    /// [`Stack::new_approver`], and aegis trusts the person's signatures
    /// (`KURA_AEGIS__APPROVERS`, this person alone); returns the key file.
    pub fn trusted_approver(&mut self, name: &str) -> PathBuf {
        let key = self.new_approver(name);
        let k: serde_json::Value = std::fs::read_to_string(&key)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .expect("the key file aegis keygen wrote");
        let public = k["public_key"].as_str().expect("its public key");
        self.extra_env.push((
            "KURA_AEGIS__APPROVERS".into(),
            format!("[{{ name = \"{name}\", public_key = \"{public}\" }}]"),
        ));
        key
    }

    /// Lets the person whose `aegis keygen` key file is `key_file` onto the bus as an
    /// approver named `name` (the server reloads; returns once they can connect).
    pub fn add_approver(&self, name: &str, key_file: &std::path::Path) {
        self.nats
            .add_approver(name, &approver_key(key_file))
            .expect("add approver");
    }

    /// The bus credentials of the person whose key file is `key_file`.
    pub fn approver_credentials(&self, key_file: &std::path::Path) -> Credentials {
        Credentials {
            key: Some(std::sync::Arc::new(approver_key(key_file))),
            ca: Some(self.nats.ca()),
        }
    }

    /// Runs `kura verify --all`; returns whether it passed and what it printed.
    pub fn verify_report(&self) -> (bool, String) {
        let out = Command::new(bin("kura"))
            .args(["verify", "--all"])
            .arg("--db")
            .arg(&self.db)
            .output()
            .expect("kura verify");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// Daemons that have exited (name, status), without waiting.
    pub fn exited(&mut self) -> Vec<(String, ExitStatus)> {
        self.children
            .iter_mut()
            .filter_map(|(n, c)| c.try_wait().ok().flatten().map(|s| (n.clone(), s)))
            .collect()
    }

    /// `minato submit` (no wait); returns the request number.
    pub fn submit(&self, instruction: &str) -> i64 {
        self.submit_with(instruction, &[])
    }

    /// `minato submit` with more arguments (`--session S`, `--from L`); returns the request
    /// number.
    pub fn submit_with(&self, instruction: &str, extra: &[&str]) -> i64 {
        let mut cmd = Command::new(bin("minato"));
        cmd.args(["submit", instruction, "--json"]).args(extra);
        self.env(&mut cmd, "submit");
        let out = cmd.output().expect("submit");
        assert!(
            out.status.success(),
            "submit failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        v["request_seq"].as_i64().expect("request_seq")
    }

    /// Runs `minato submit --wait`, returning (exit status, stdout).
    pub fn submit_and_wait(&self, instruction: &str) -> (ExitStatus, String) {
        let mut cmd = Command::new(bin("minato"));
        cmd.args(["submit", instruction, "--wait", "--timeout", "60"]);
        self.env(&mut cmd, "submit");
        let out = cmd.output().expect("submit");
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// Polls SQLite until the request's session is complete.
    pub fn wait_complete(&self, request_seq: i64, timeout: Duration) -> RequestStatus {
        let store = Store::open(&self.db, &StoreOptions::default()).expect("open");
        let deadline = Instant::now() + timeout;
        loop {
            let st = request_status(store.conn(), request_seq).expect("status");
            if st.complete {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "request {request_seq} did not complete in {timeout:?}: {st:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Polls until `f` (given a store) is true.
    pub fn wait_until(&self, what: &str, timeout: Duration, mut f: impl FnMut(&Store) -> bool) {
        let store = Store::open(&self.db, &StoreOptions::default()).expect("open");
        let deadline = Instant::now() + timeout;
        while !f(&store) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal` (e.g. "KILL", "TERM") to a daemon.
    pub fn signal(&mut self, instance: &str, signal: &str) {
        let (_, child) = self
            .children
            .iter()
            .find(|(n, _)| n == instance)
            .expect("no such daemon");
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{signal} {instance}");
    }

    /// Waits for a daemon to exit and returns its status.
    pub fn wait_exit(&mut self, instance: &str, timeout: Duration) -> ExitStatus {
        let (_, child) = self
            .children
            .iter_mut()
            .find(|(n, _)| n == instance)
            .expect("no such daemon");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = child.try_wait().expect("try_wait") {
                return s;
            }
            assert!(Instant::now() < deadline, "{instance} did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Asserts every daemon is still running (none crashed).
    pub fn assert_all_running(&mut self) {
        for (name, child) in &mut self.children {
            assert!(
                child.try_wait().expect("try_wait").is_none(),
                "{name} exited unexpectedly"
            );
        }
    }

    /// Stops every daemon with SIGTERM and asserts each exits 0.
    pub fn shutdown_cleanly(&mut self) {
        let names: Vec<String> = self.children.iter().map(|(n, _)| n.clone()).collect();
        for n in &names {
            self.signal(n, "TERM");
        }
        for n in &names {
            let status = self.wait_exit(n, Duration::from_secs(15));
            assert_eq!(
                status.code(),
                Some(0),
                "{n} did not exit 0 on SIGTERM\n{}",
                self.log(n)
            );
        }
    }

    /// Waits until a daemon's log contains `needle`.
    pub fn wait_log(&self, instance: &str, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.log(instance).contains(needle) {
            assert!(
                Instant::now() < deadline,
                "{instance} never logged {needle:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self, instance: &str) -> String {
        std::fs::read_to_string(self.path(&format!("{instance}.log"))).unwrap_or_default()
    }

    pub fn logs(&self) -> String {
        self.children
            .iter()
            .map(|(n, _)| format!("--- {n}\n{}", self.log(n)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `kura verify --all` must pass, with every seal signed by one of the stack's keys.
    pub fn verify_all(&self) {
        let out = Command::new(bin("kura"))
            .args(["verify", "--all"])
            .arg("--db")
            .arg(&self.db)
            .arg("--keyring")
            .arg(
                self.nats
                    .keys_dir()
                    .join(kura_runtime::identity::IDENTITIES_FILE),
            )
            .output()
            .expect("kura verify");
        assert!(
            out.status.success(),
            "kura verify failed:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    /// The `kura` runner on this stack's database, with the stack's extra environment.
    pub fn cli(&self) -> crate::cli::Cli {
        crate::cli::Cli::on(&self.db).envs(&self.extra_env)
    }

    pub fn store(&self) -> Store {
        Store::open(&self.db, &StoreOptions::default()).expect("open")
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        if self.keep_files
            && let Ok(fresh) = tempfile::TempDir::new()
        {
            let _ = std::mem::replace(&mut self.dir, fresh).keep();
        }
    }
}

/// Rows of (record_type, content, metadata) for every record in a session's output ledgers.
pub fn session_records(store: &Store, session: SessionId) -> Vec<proto::Record> {
    let mut out = Vec::new();
    let mut ledgers = store.session_ledgers(session).expect("ledgers");
    ledgers.reverse();
    for l in ledgers.iter().filter(|l| l.label.ends_with("-out")) {
        out.extend(store.hydrate(l.ledger_id).expect("hydrate"));
    }
    out
}

/// Number of records in the store (to prove something did not write).
pub fn session_records_count(s: &Stack) -> i64 {
    s.store()
        .conn()
        .query_row("SELECT (SELECT count(*) FROM records) + (SELECT count(*) FROM turns) + (SELECT count(*) FROM requests)", [], |r| r.get(0))
        .expect("count")
}
