//! The daemon runtime shared by every Kura daemon: config, logging, NATS doorbells, wake-ups,
//! the recovery loop, one daemon lifecycle, heartbeats and the bundled nats-server lookup —
//! written once, used by all.

pub mod ask;
pub mod bus;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod explain;
pub mod heartbeat;
pub mod identity;
pub mod logging;
pub mod natsbin;
pub mod person;
pub mod wake;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use bus::{Bus, Reply, Stats};
pub use config::{ConfigError, load, to_toml};
pub use daemon::Daemon;
pub use wake::{Stop, WakeRx, Waker, consumer_loop, wake_pair};

/// Settings every daemon shares (the `[common]` table; `KURA_DB`, `KURA_NATS_URL`, ... in
/// the environment).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Common {
    /// The Kura database file all daemons share; the source of truth.
    pub db: PathBuf,
    /// Where the NATS doorbell server is; daemons work (by polling) even when it is down.
    pub nats_url: String,
    /// Subject prefix, so two installations can share one NATS.
    pub subject_prefix: String,
    /// This process's NATS nkey seed file (0600). Unset: `$CREDENTIALS_DIRECTORY/nats.nk`
    /// when systemd hands one over, else none (and an authenticating server refuses us).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_seed: Option<PathBuf>,
    /// The bus CA to pin (TLS is then required). Unset: `nats-ca.pem` beside the seed file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_ca: Option<PathBuf>,
    /// How often each consumer scans SQLite for missed work even without a doorbell.
    pub poll_interval_ms: u64,
    /// Commit durability: `full` (default), `normal` or `off`.
    pub synchronous: kura_store::Synchronous,
    /// This instance's name in logs and leases; unset means `<daemon>-<pid>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

impl Default for Common {
    fn default() -> Self {
        Common {
            db: PathBuf::from("kura.db"),
            nats_url: "nats://127.0.0.1:4222".into(),
            subject_prefix: proto::subjects::DEFAULT_PREFIX.into(),
            nats_seed: None,
            nats_ca: None,
            poll_interval_ms: 5000,
            synchronous: kura_store::Synchronous::Full,
            instance: None,
        }
    }
}

impl Common {
    /// The poll interval as a duration (at least 10 ms).
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms.max(10))
    }

    /// Store options from these settings.
    pub fn store_options(&self) -> anyhow::Result<kura_store::StoreOptions> {
        // The daemon's statement key (its seed's own key, never the bus key derived from it)
        // signs every ledger it seals (`kura verify` checks it against identities.toml).
        let sealer = match self.seed_file() {
            Some(path) => Some(kura_tlog::sealer::Sealer::new(std::sync::Arc::new(
                identity::read_seed(&path)?,
            ))?),
            None => None,
        };
        Ok(kura_store::StoreOptions {
            synchronous: self.synchronous,
            sealer,
            ..kura_store::StoreOptions::default()
        })
    }

    /// The instance name, `<daemon>-<pid>` unless configured.
    pub fn instance_name(&self, daemon: &str) -> String {
        match &self.instance {
            Some(name) if !name.is_empty() => name.clone(),
            _ => format!("{daemon}-{}", std::process::id()),
        }
    }

    /// The seed file in use: configured, or handed over by systemd.
    pub fn seed_file(&self) -> Option<PathBuf> {
        self.nats_seed.clone().or_else(|| {
            std::env::var_os("CREDENTIALS_DIRECTORY")
                .map(|d| PathBuf::from(d).join(identity::SEED_CREDENTIAL))
                .filter(|p| p.exists())
        })
    }

    /// The CA file to pin: configured, or `nats-ca.pem` beside the seed file.
    pub fn ca_file(&self, seed: Option<&std::path::Path>) -> Option<PathBuf> {
        self.nats_ca.clone().or_else(|| {
            seed.and_then(std::path::Path::parent)
                .map(|d| d.join(identity::CA_FILE))
                .filter(|p| p.exists())
        })
    }

    /// Subject builder for the configured prefix.
    pub fn subjects(&self) -> Result<proto::subjects::Subjects, proto::subjects::SubjectError> {
        proto::subjects::Subjects::new(&self.subject_prefix)
    }
}

/// Resolves when the process receives SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
                _ = int.recv() => tracing::info!("SIGINT: shutting down"),
            }
        }
        _ => {
            // Without signal handlers, fall back to Ctrl-C only.
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// What every daemon's `main` does before `run`: logging, config, a tokio runtime.
/// Config errors come back as `Err` (the caller prints them and exits 2).
pub fn start<C>(
    name: &str,
    config: Option<&std::path::Path>,
) -> anyhow::Result<(C, tokio::runtime::Runtime)>
where
    C: Serialize + serde::de::DeserializeOwned + Default,
{
    start_with(name, config, "info")
}

/// [`start`] with the default log level for `RUST_LOG`-less runs (`warn` for clients).
pub fn start_with<C>(
    name: &str,
    config: Option<&std::path::Path>,
    level: &str,
) -> anyhow::Result<(C, tokio::runtime::Runtime)>
where
    C: Serialize + serde::de::DeserializeOwned + Default,
{
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.worker_threads(2).thread_name(name);
    start_on(name, config, level, runtime)
}

/// [`start_with`] for a person's command that only talks to the bus (`aegis approve`): one
/// thread drives the connection and the request, so no worker threads are started, no reply
/// crosses threads and nothing is joined at exit — a fresh process is what the person waits
/// for. A command that blocks on SQLite while connecting (`minato submit`) keeps
/// [`start_with`]'s worker threads.
pub fn start_client<C>(
    name: &str,
    config: Option<&std::path::Path>,
) -> anyhow::Result<(C, tokio::runtime::Runtime)>
where
    C: Serialize + serde::de::DeserializeOwned + Default,
{
    start_on(
        name,
        config,
        "warn",
        tokio::runtime::Builder::new_current_thread(),
    )
}

fn start_on<C>(
    name: &str,
    config: Option<&std::path::Path>,
    level: &str,
    mut runtime: tokio::runtime::Builder,
) -> anyhow::Result<(C, tokio::runtime::Runtime)>
where
    C: Serialize + serde::de::DeserializeOwned + Default,
{
    logging::init_with(name, level);
    let config: C = load(config)?;
    Ok((config, runtime.enable_all().build()?))
}

/// The `run` subcommand of every daemon: set up logging, config and a runtime, run until
/// SIGTERM/SIGINT. Exit 0 on a clean stop, 2 for config errors, 1 if the daemon failed.
pub fn run_daemon<C, F, Fut>(
    name: &str,
    config: Option<&std::path::Path>,
    run: F,
) -> std::process::ExitCode
where
    C: Serialize + serde::de::DeserializeOwned + Default,
    F: FnOnce(C, cli::Shutdown) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let (config, rt) = match start::<C>(name, config) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("{name}: error: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    match rt.block_on(run(config, Box::pin(shutdown_signal()))) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
