//! The supervisor `kura up` leaves running: the bundled bus first (mikado), then aegis,
//! minato, hashi and `kura serve`, each with its own log; a daemon that exits is started
//! again after a backoff that doubles (1 s to 30 s, back to 1 s once it has run a minute);
//! SIGTERM stops them in the reverse order, each given 20 s to finish its work.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::process::{Child, Command};

use crate::state::{State, bin};

/// The daemons, in the order they start: (name, binary, arguments, bus seed).
const DAEMONS: [(&str, &str, &str, &str); 5] = [
    ("mikado", "mikado", "run", "mikado"),
    ("aegis", "aegis", "run", "aegis"),
    ("minato", "minato", "run", "minato"),
    ("hashi", "hashi", "run", "hashi"),
    ("serve", "kura", "serve", "serve"),
];

/// How long a stopping daemon may take before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(20);

struct Running {
    child: Child,
    started: Instant,
    backoff: Duration,
}

fn spawn(state: &State, name: &str) -> anyhow::Result<Child> {
    let (_, binary, arg, seed) = DAEMONS
        .iter()
        .find(|d| d.0 == name)
        .context("no such daemon")?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(state.dir.join("logs").join(format!("{name}.log")))
        .context("cannot open the daemon's log")?;
    let mut cmd = Command::new(bin(binary));
    cmd.arg(arg)
        .envs(state.env())
        .env(
            "KURA_NATS_SEED",
            state.dir.join("keys").join(format!("{seed}.nk")),
        )
        .env("KURA_INSTANCE", name)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(false);
    cmd.spawn()
        .with_context(|| format!("cannot start {name} ({})", bin(binary).display()))
}

/// Waits until the bus answers on its port (mikado starts it), at most 30 s.
async fn bus_up(state: &State) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(("127.0.0.1", state.chosen.nats_port))
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the stack until SIGTERM (or SIGINT).
pub async fn run(state: State) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut running: HashMap<&str, Running> = HashMap::new();
    for (name, ..) in DAEMONS {
        let child = match spawn(&state, name) {
            Ok(c) => c,
            Err(e) => {
                // Nothing half-started is left behind.
                stop_all(&mut running).await;
                return Err(e);
            }
        };
        running.insert(
            name,
            Running {
                child,
                started: Instant::now(),
                backoff: Duration::from_secs(1),
            },
        );
        if name == "mikado" {
            bus_up(&state).await;
        }
    }
    let mut restart_at: HashMap<&str, Instant> = HashMap::new();
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        for (name, ..) in DAEMONS {
            if let Some(at) = restart_at.get(name).copied() {
                if Instant::now() >= at {
                    restart_at.remove(name);
                    match spawn(&state, name) {
                        Ok(child) => {
                            let r = running.get_mut(name).context("a daemon's place")?;
                            r.child = child;
                            r.started = Instant::now();
                            eprintln!("kura up: {name} started again");
                        }
                        Err(e) => {
                            eprintln!("kura up: {e:#}");
                            restart_at.insert(name, Instant::now() + Duration::from_secs(30));
                        }
                    }
                }
                continue;
            }
            let Some(r) = running.get_mut(name) else {
                continue;
            };
            if let Ok(Some(status)) = r.child.try_wait() {
                // A daemon that ran a minute is trusted again: its next restart is quick.
                if r.started.elapsed() > Duration::from_secs(60) {
                    r.backoff = Duration::from_secs(1);
                }
                eprintln!(
                    "kura up: {name} exited ({status}); starting it again in {} s",
                    r.backoff.as_secs()
                );
                restart_at.insert(name, Instant::now() + r.backoff);
                r.backoff = (r.backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
    stop_all(&mut running).await;
    Ok(())
}

/// SIGTERM to each daemon, the last started first; a daemon still up after [`STOP_GRACE`]
/// is killed.
async fn stop_all(running: &mut HashMap<&str, Running>) {
    for (name, ..) in DAEMONS.iter().rev() {
        let Some(r) = running.get_mut(name) else {
            continue;
        };
        if let Some(pid) = r
            .child
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        match tokio::time::timeout(STOP_GRACE, r.child.wait()).await {
            Ok(_) => {}
            Err(_) => {
                eprintln!(
                    "kura up: {name} did not stop in {} s; killed",
                    STOP_GRACE.as_secs()
                );
                let _ = r.child.kill().await;
            }
        }
    }
}
