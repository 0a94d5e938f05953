//! `kura up` and `kura down`: the whole stack on one machine from nothing, as Temporal's
//! `server start-dev` or `ollama serve` do — keys, config, database and a person's key made
//! once under a state directory, the bundled bus and every daemon under one supervisor
//! (`supervise`) that restarts what exits, the console and the agents' surface on loopback;
//! `kura down` stops it cleanly. Under systemd the units stay the way to run in production.

mod state;
mod supervise;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;

pub use state::State;

/// Start the whole stack on this machine (or say where it runs).
#[derive(Debug, clap::Args)]
pub struct Up {
    /// The state directory (default: $XDG_DATA_HOME/kura, or ~/.local/share/kura).
    #[arg(long, env = "KURA_UP_DIR")]
    dir: Option<PathBuf>,
    /// Print `export` lines that let a shell talk to the stack: `eval "$(kura up --env)"`.
    #[arg(long)]
    env: bool,
    /// Print the last lines of each daemon's log.
    #[arg(long)]
    logs: bool,
    /// Let a browser log in to the console and approve: the name and the key its /enrol
    /// page shows (the stack restarts to take it).
    #[arg(long, num_args = 2, value_names = ["NAME", "KEY"])]
    enrol: Vec<String>,
    /// The model: `scripted` (offline, the default) or `openai` (any OpenAI-compatible
    /// server: Ollama, vLLM, llama.cpp, a cloud API).
    #[arg(long)]
    model: Option<String>,
    /// The model server's base URL (with `--model openai`), e.g. http://127.0.0.1:11434/v1.
    #[arg(long)]
    base_url: Option<String>,
    /// The model's name on that server.
    #[arg(long)]
    model_name: Option<String>,
    /// The environment variable holding the server's API key, if it needs one.
    #[arg(long)]
    api_key_env: Option<String>,
    /// Run the supervisor in this process (what `kura up` starts in the background).
    #[arg(long, hide = true)]
    supervise: bool,
}

/// Stop what `kura up` started.
#[derive(Debug, clap::Args)]
pub struct Down {
    /// The state directory (default as `kura up`'s).
    #[arg(long, env = "KURA_UP_DIR")]
    dir: Option<PathBuf>,
}

fn default_dir(dir: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(d) = dir {
        // Absolute: the daemons and a shell from `--env` run from anywhere.
        return Ok(std::path::absolute(&d).unwrap_or(d));
    }
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .context("no state directory: give --dir, or set $HOME")?;
    Ok(data.join("kura"))
}

/// The supervisor's pid, when one runs for `dir`.
fn running(dir: &Path) -> Option<rustix::process::Pid> {
    let pid: i32 = std::fs::read_to_string(dir.join("up.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    // A pid file outliving its process may name another program now.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let ours = cmdline.split(|b| *b == 0).any(|a| a == b"--supervise");
    ours.then(|| rustix::process::Pid::from_raw(pid)).flatten()
}

/// Whether the console answers.
fn console_answers(port: u16) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let ask = format!("GET /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    let mut head = [0u8; 12];
    s.write_all(ask.as_bytes()).is_ok()
        && s.read_exact(&mut head).is_ok()
        && head.starts_with(b"HTTP/1.1 200")
}

impl Up {
    /// Runs `kura up`; `say` writes one whole message to stdout.
    pub fn run(self, mut say: impl FnMut(&str) -> std::io::Result<()>) -> anyhow::Result<()> {
        let dir = default_dir(self.dir.clone())?;
        if self.supervise {
            return supervise_here(&dir);
        }
        if self.env {
            let state = State::open_or_make(&dir)?;
            let seed = dir.join("keys/submit.nk").display().to_string();
            let quote = |v: &str| format!("'{}'", v.replace('\'', "'\\''"));
            for (k, v) in state
                .env()
                .into_iter()
                .chain([("KURA_NATS_SEED".into(), seed)])
            {
                say(&format!("export {k}={}", quote(&v)))?;
            }
            return Ok(());
        }
        if self.logs {
            return logs(&dir, &mut say);
        }
        let mut state = State::open_or_make(&dir)?;
        let changed = self.configure(&mut state)?;
        if let Some(pid) = running(&dir) {
            if !changed {
                return Ok(say(&summary(&state, "Kura is already up"))?);
            }
            stop(&dir, pid)?;
        }
        start(&dir, &state)?;
        Ok(say(&summary(&state, "Kura is up"))?)
    }

    /// Takes `--enrol` and the model options into the state; whether anything changed.
    fn configure(&self, state: &mut State) -> anyhow::Result<bool> {
        let mut changed = false;
        if let [name, key] = self.enrol.as_slice() {
            check_enrol(name, key, &state.chosen.person)?;
            state.chosen.browsers.retain(|(n, _)| n != name);
            state
                .chosen
                .browsers
                .push((name.clone(), key.to_lowercase()));
            changed = true;
        }
        if let Some(m) = &self.model {
            let mut model = vec![("KURA_PROVIDER__KIND".to_owned(), m.clone())];
            match m.as_str() {
                "scripted" => model.clear(),
                "openai" => {
                    let url = self
                        .base_url
                        .clone()
                        .context("--model openai needs --base-url")?;
                    let name = self
                        .model_name
                        .clone()
                        .context("--model openai needs --model-name")?;
                    model.push(("KURA_PROVIDER__BASE_URL".into(), url));
                    model.push(("KURA_PROVIDER__MODEL".into(), name));
                    if let Some(k) = &self.api_key_env {
                        model.push(("KURA_PROVIDER__API_KEY_ENV".into(), k.clone()));
                    }
                }
                other => anyhow::bail!("--model is scripted or openai, not {other:?}"),
            }
            state.chosen.model = model;
            changed = true;
        }
        if changed {
            state.save()?;
        }
        Ok(changed)
    }
}

/// Refuses a browser `kura up --enrol` could not start with: a name that is not a plain one,
/// the name of this person's own command-line key (aegis takes one key per approver, and
/// would not start), or a key that is not an Ed25519 public key (the console would not).
fn check_enrol(name: &str, key: &str, person: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        !name.is_empty()
            && name.len() <= 40
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "--enrol NAME KEY: a name of letters, digits, - and _"
    );
    anyhow::ensure!(
        name != person,
        "--enrol NAME KEY: {person} is already the name of your command-line key (person.key); \
         give the browser a name of its own, such as {person}-laptop"
    );
    let bytes: Option<[u8; 32]> = hex::decode(key).ok().and_then(|b| b.try_into().ok());
    let valid = bytes.is_some_and(|b| ed25519_dalek::VerifyingKey::from_bytes(&b).is_ok());
    anyhow::ensure!(
        valid,
        "--enrol NAME KEY: the key is the 64 hex digits the console's /enrol page shows (an \
         Ed25519 public key); copy it again"
    );
    Ok(())
}

/// Starts the supervisor in the background and waits for the console to answer.
fn start(dir: &Path, state: &State) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt as _;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("logs").join("up.log"))?;
    let me = std::env::current_exe().context("cannot find the kura binary")?;
    std::process::Command::new(me)
        .args(["up", "--supervise", "--dir"])
        .arg(dir)
        // Its own process group: the shell's Ctrl-C or hang-up does not reach it.
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .context("cannot start the supervisor")?;
    let deadline = Instant::now() + Duration::from_secs(90);
    while !console_answers(state.chosen.console_port) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the console did not answer within 90 s: see `kura up --logs` ({})",
            dir.join("logs").display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

fn supervise_here(dir: &Path) -> anyhow::Result<()> {
    let state = State::open_or_make(dir)?;
    // One supervisor per state directory, however many `kura up` race to start one.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("up.lock"))?;
    if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        return Ok(());
    }
    std::fs::write(dir.join("up.pid"), std::process::id().to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let out = rt.block_on(supervise::run(state));
    let _ = std::fs::remove_file(dir.join("up.pid"));
    out
}

fn stop(dir: &Path, pid: rustix::process::Pid) -> anyhow::Result<()> {
    rustix::process::kill_process(pid, rustix::process::Signal::TERM)
        .context("cannot signal the supervisor")?;
    let deadline = Instant::now() + Duration::from_secs(150);
    while running(dir).is_some() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the stack did not stop within 150 s (pid {})",
            pid.as_raw_nonzero()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn logs(dir: &Path, say: &mut impl FnMut(&str) -> std::io::Result<()>) -> anyhow::Result<()> {
    for name in ["up", "mikado", "aegis", "minato", "hashi", "serve"] {
        let path = dir.join("logs").join(format!("{name}.log"));
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        say(&format!(
            "== {} (last {} lines)",
            path.display(),
            lines.len().min(20)
        ))?;
        for l in &lines[lines.len().saturating_sub(20)..] {
            say(l)?;
        }
    }
    Ok(())
}

fn summary(state: &State, headline: &str) -> String {
    let url = state.console_url();
    let d = state.dir.display();
    format!(
        "{headline}: the bus, mikado, aegis, minato, hashi and kura serve, state in {d}\n\
         \n  console   {url}   (on this machine; enrol your browser at {url}/enrol,\n\
         \x20           then `kura up --enrol NAME KEY` with the key it shows)\n\
         \x20 agents    {url}/mcp and {url}/agent/v1/*   (tokens: kura keys add-agent --dir {d}/keys)\n\
         \x20 approver  {} (key {d}/person.key)\n\
         \nNext:\n\
         \x20 eval \"$(kura up --env)\"                       # this shell talks to it\n\
         \x20 minato submit \"Make a shopping list\" --wait   # a session, on the {} model\n\
         \x20 kura log $(kura session list --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0][\"session_id\"])')\n\
         \nLogs: kura up --logs. Stop: kura down.",
        state.chosen.person,
        if state.chosen.model.is_empty() {
            "scripted (offline)"
        } else {
            "configured"
        }
    )
}

impl Down {
    /// Stops the stack (nothing to do when none runs).
    pub fn run(self, mut say: impl FnMut(&str) -> std::io::Result<()>) -> anyhow::Result<()> {
        let dir = default_dir(self.dir)?;
        match running(&dir) {
            Some(pid) => {
                stop(&dir, pid)?;
                Ok(say(&format!(
                    "Kura is down (state kept in {})",
                    dir.display()
                ))?)
            }
            None => {
                // A supervisor killed outright leaves its daemons in its process group.
                let group = std::fs::read_to_string(dir.join("up.pid"))
                    .ok()
                    .and_then(|p| p.trim().parse::<i32>().ok())
                    .and_then(rustix::process::Pid::from_raw);
                if let Some(g) = group
                    && rustix::process::kill_process_group(g, rustix::process::Signal::TERM).is_ok()
                {
                    let _ = std::fs::remove_file(dir.join("up.pid"));
                    return Ok(say(&format!(
                        "Kura's supervisor was gone; its daemons were told to stop ({})",
                        dir.display()
                    ))?);
                }
                Ok(say(&format!("Kura is not running from {}", dir.display()))?)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_enrol;

    /// A key the console's /enrol page could show: a real Ed25519 public key.
    const KEY: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

    #[test]
    fn a_browser_enrolled_under_the_persons_own_name_is_refused_not_a_stack_that_never_starts() {
        let e = check_enrol("alice", KEY, "alice").expect_err("refused");
        assert!(e.to_string().contains("alice-laptop"), "{e}");
        assert!(check_enrol("alice-laptop", KEY, "alice").is_ok());
    }

    #[test]
    fn an_enrolled_key_that_is_not_an_ed25519_public_key_is_refused_before_anything_restarts() {
        // 64 hex digits, but no point on the curve: the console would refuse to start on it.
        let not_a_point = "ab".repeat(32);
        for key in [not_a_point.as_str(), "abc", &KEY[..62], "zz"] {
            let e = check_enrol("phone", key, "alice").expect_err(key);
            assert!(e.to_string().contains("Ed25519"), "{e}");
        }
        let e = check_enrol("a b", KEY, "alice").expect_err("a name with a space");
        assert!(e.to_string().contains("letters, digits"), "{e}");
    }
}
