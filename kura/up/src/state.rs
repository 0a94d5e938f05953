//! The state directory `kura up` keeps: made once (the database, the bus keys, a person's
//! key trusted on the bus and by aegis, the ports, a scripted model), then reused as is.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// What `kura up` chose the first time, kept in `up.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Chosen {
    /// The bundled bus's port (loopback).
    pub nats_port: u16,
    /// The console's and the agents' port (loopback).
    pub console_port: u16,
    /// The person `kura up` made a key for.
    pub person: String,
    /// Their approver public key (hex).
    pub person_key: String,
    /// aegis's reply-signing key (what approvers pin).
    pub aegis_signer: String,
    /// Browser keys enrolled for the console (`kura up --enrol NAME KEY`): name, key.
    #[serde(default)]
    pub browsers: Vec<(String, String)>,
    /// The model settings (`KURA_PROVIDER__*`), when not the scripted one.
    #[serde(default)]
    pub model: Vec<(String, String)>,
    /// The log key's verifier (`kura serve` signs checkpoints with `log.key`): history is
    /// anchored from the first run.
    #[serde(default)]
    pub log_verifier: Option<String>,
}

/// The state directory and what is in it.
pub struct State {
    /// The directory.
    pub dir: PathBuf,
    /// Its choices.
    pub chosen: Chosen,
}

/// A binary beside this one (the install's, or the build's `target/*/`).
pub fn bin(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from(name))
}

/// Creates `dir` for this user alone (logs, workspaces and choices are nobody else's).
fn make_private(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    check_private(dir)
}

/// Refuses a state directory another user owns or may write (its `up.json` names who
/// approves and where the console listens).
fn check_private(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    anyhow::ensure!(
        m.uid() == rustix::process::getuid().as_raw() && m.mode() & 0o022 == 0,
        "{} is not this user's alone (owned by another, or writable by others); give kura up a directory of your own (--dir)",
        dir.display()
    );
    Ok(())
}

/// A person's key (`person.key`), let onto the bus and trusted by aegis: their name (the
/// login's, when it is a plain one) and public key.
fn make_person(dir: &Path, keys: &Path) -> anyhow::Result<(String, String)> {
    let person = std::env::var("USER")
        .ok()
        .filter(|u| {
            !u.is_empty()
                && u.len() < 40
                && u.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .unwrap_or_else(|| "me".into());
    let key = dir.join("person.key");
    // A first run cut short after the key was made: nothing trusts it yet; make it anew.
    let _ = std::fs::remove_file(&key);
    let said = run(
        Command::new(bin("aegis"))
            .args(["keygen", "--name", &person, "--key"])
            .arg(&key),
        "aegis keygen",
    )?;
    let nkey = said
        .split_whitespace()
        .skip_while(|w| *w != "--nkey")
        .nth(1)
        .context("aegis keygen did not print the bus key")?
        .to_owned();
    let add = [
        "keys",
        "add-approver",
        "--name",
        &person,
        "--nkey",
        &nkey,
        "--dir",
    ];
    run(
        Command::new(bin("kura")).args(add).arg(keys),
        "kura keys add-approver",
    )?;
    let file: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&key)?)?;
    let public = file["public_key"]
        .as_str()
        .context("the person's key file has no public key")?;
    Ok((person, public.to_owned()))
}

/// The log key `kura serve` signs checkpoints with (`log.key`), under a name of its own;
/// its verifier key.
fn make_log_key(dir: &Path) -> anyhow::Result<Option<String>> {
    let log_key = dir.join("log.key");
    let _ = std::fs::remove_file(&log_key);
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let name = format!("kura.local/log/{nonce:x}");
    let said = run(
        Command::new(bin("kura"))
            .args(["log-key", "init", "--name", &name, "--out"])
            .arg(&log_key),
        "kura log-key init",
    )?;
    Ok(said
        .lines()
        .last()
        .map(|l| l.trim().to_owned())
        .filter(|l| l.contains('+')))
}

/// A string in TOML's quoting.
fn q_str(v: &str) -> String {
    toml::Value::String(v.to_owned()).to_string()
}

/// A free loopback port.
fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("cannot find a free port")?;
    Ok(l.local_addr()?.port())
}

fn run(cmd: &mut Command, what: &str) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("cannot run {what}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A small offline model to start with: it looks at the workspace and says what it was asked.
const SCRIPT: &str = r#"{"turns": [[
  {"thought": "Looking at the workspace first."},
  {"tool": "fs.list", "args": {}},
  {"deliver": "Done (the scripted model; point kura up at a real one with --model openai): {instruction}"}
]]}"#;

impl State {
    /// Opens the state at `dir`, making it the first time.
    pub fn open_or_make(dir: &Path) -> anyhow::Result<State> {
        let file = dir.join("up.json");
        if let Ok(text) = std::fs::read_to_string(&file) {
            check_private(dir)?;
            let chosen = serde_json::from_str(&text).with_context(|| {
                format!("{} is not kura up's state; move it away", file.display())
            })?;
            let state = State {
                dir: dir.to_owned(),
                chosen,
            };
            state.write_serve_config()?;
            return Ok(state);
        }
        make_private(dir)?;
        std::fs::create_dir_all(dir.join("logs"))
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let db = dir.join("kura.db");
        let keys = dir.join("keys");
        let kura = bin("kura");
        run(
            Command::new(&kura).arg("--db").arg(&db).arg("init"),
            "kura init",
        )?;
        if !keys.join("identities.toml").exists() {
            run(
                Command::new(&kura)
                    .args(["keys", "init", "--dir"])
                    .arg(&keys),
                "kura keys init",
            )?;
        }
        let (person, person_key) = make_person(dir, &keys)?;
        let list: serde_json::Value = serde_json::from_str(&run(
            Command::new(&kura)
                .args(["keys", "list", "--json", "--dir"])
                .arg(&keys),
            "kura keys list",
        )?)?;
        let aegis_signer = list
            .as_array()
            .and_then(|ids| ids.iter().find(|i| i["name"] == "aegis"))
            .and_then(|i| i["signer"].as_str())
            .context("the bus identities have no aegis")?
            .to_owned();
        std::fs::write(dir.join("script.json"), SCRIPT)?;
        let log_verifier = make_log_key(dir)?;
        let chosen = Chosen {
            nats_port: free_port()?,
            console_port: free_port()?,
            person,
            person_key,
            aegis_signer,
            browsers: Vec::new(),
            model: Vec::new(),
            log_verifier,
        };
        let state = State {
            dir: dir.to_owned(),
            chosen,
        };
        state.save()?;
        state.write_serve_config()?;
        Ok(state)
    }

    /// `serve.toml` in the state directory, which `KURA_SERVE_CONFIG` names for the stack and
    /// for a shell from `--env`: `kura status`, `kura verify` and `kura checkpoint` then hold
    /// this stack's history to this stack's signed head, never to the machine's
    /// `/etc/kura/serve.toml` (a package install's, whose head is another log's and not
    /// this user's to read).
    fn write_serve_config(&self) -> anyhow::Result<()> {
        let dir = self.dir.to_str().with_context(|| {
            format!(
                "{} is not UTF-8; give kura up a directory whose name is (--dir)",
                self.dir.display()
            )
        })?;
        // TOML's own quoting: a path is any string.
        let q = |p: &str| toml::Value::String(format!("{dir}/{p}")).to_string();
        let mut text = format!(
            "# Written by kura up (made again from up.json on every start; edits are lost).\n\
             [serve]\nkeyring = {}\ncheckpoint_file = {}\n",
            q("keys/identities.toml"),
            q("kura.db.checkpoint")
        );
        if let Some(v) = &self.chosen.log_verifier {
            text.push_str(&format!("log_verifier = {}\n", q_str(v)));
        }
        let path = self.dir.join("serve.toml");
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            std::fs::write(&path, text)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(())
    }

    /// Writes `up.json`.
    pub fn save(&self) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(&self.chosen)?;
        std::fs::write(self.dir.join("up.json"), text).context("cannot write up.json")
    }

    /// The bus's address.
    pub fn nats_url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.chosen.nats_port)
    }

    /// The console's address.
    pub fn console_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.chosen.console_port)
    }

    /// What every process of this stack (and a shell talking to it) is told: the database,
    /// the bus, its CA, where workspaces are, the model, who approves.
    pub fn env(&self) -> Vec<(String, String)> {
        let model = &self.chosen.model;
        let d = |p: &str| self.dir.join(p).display().to_string();
        let c = &self.chosen;
        let approvers = std::iter::once((c.person.clone(), c.person_key.clone()))
            .chain(c.browsers.iter().cloned())
            .map(|(n, k)| format!("{{ name = \"{n}\", public_key = \"{k}\" }}"))
            .collect::<Vec<_>>()
            .join(", ");
        let users = c
            .browsers
            .iter()
            .map(|(n, k)| format!("{{ name = \"{n}\", public_key = \"{k}\" }}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut env = vec![
            ("KURA_DB".into(), d("kura.db")),
            ("KURA_NATS_URL".into(), self.nats_url()),
            ("KURA_NATS_CA".into(), d("keys/nats-ca.pem")),
            ("KURA_NATS__KEYS_DIR".into(), d("keys")),
            ("KURA_KEYS_DIR".into(), d("keys")),
            (
                "KURA_NATS__CONFIG_DIR".into(),
                self.dir.display().to_string(),
            ),
            ("KURA_TOOLS__WORKSPACE_ROOT".into(), d("workspaces")),
            ("KURA_AEGIS__REPLY_KEY".into(), c.aegis_signer.clone()),
            ("KURA_AEGIS__APPROVERS".into(), format!("[{approvers}]")),
            ("KURA_AEGIS_KEY".into(), d("person.key")),
            (
                "KURA_CONSOLE__LISTEN".into(),
                format!("127.0.0.1:{}", c.console_port),
            ),
            ("KURA_CONSOLE__USERS".into(), format!("[{users}]")),
            ("KURA_SERVE__KEYRING".into(), d("keys/identities.toml")),
            ("KURA_SERVE_CONFIG".into(), d("serve.toml")),
        ];
        if let Some(v) = &c.log_verifier {
            env.push(("KURA_SERVE__LOG_KEY".into(), d("log.key")));
            env.push(("KURA_SERVE__LOG_VERIFIER".into(), v.clone()));
            env.push(("KURA_LOG_VERIFIER".into(), v.clone()));
        }
        if model.is_empty() {
            env.push(("KURA_PROVIDER__KIND".into(), "scripted".into()));
            env.push(("KURA_PROVIDER__SCRIPT".into(), d("script.json")));
        }
        env.extend(model.iter().cloned());
        env
    }
}
