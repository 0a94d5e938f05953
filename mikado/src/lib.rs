//! Mikado, the soul: starts and supervises the bundled `nats-server` (generated config,
//! loopback by default, restarted with backoff if it dies, stopped on exit; left alone when
//! an external NATS is configured), and turns what agents deliver into memory.

mod extract;
pub mod memory;
mod supervisor;

use std::future::Future;
use std::path::PathBuf;

use kura_runtime::Daemon;
use kura_store::Store;
use proto::doorbell::WorkerComplete;
use serde::{Deserialize, Serialize};

pub use supervisor::supervise;

/// Mikado's configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Settings shared by every daemon (`nats_url` says where the server listens).
    pub common: kura_runtime::Common,
    /// The bundled server.
    pub nats: NatsConfig,
    /// Memory extraction.
    pub memory: memory::MemoryConfig,
}

/// How the bundled nats-server runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NatsConfig {
    /// `embedded`: mikado runs the bundled server at `common.nats_url`; `external`: someone
    /// else runs NATS and mikado leaves it alone.
    pub mode: NatsMode,
    /// Path of the nats-server binary; unset means `$NATS_SERVER_BIN`, then next to our own
    /// binaries, then `$PATH`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binary: Option<PathBuf>,
    /// Longest wait between restarts of a server that keeps dying.
    pub max_backoff_ms: u64,
    /// Where the generated server config is written (a fresh private file); unset means the
    /// database's directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_dir: Option<PathBuf>,
    /// The bus keys (`identities.toml`, `nats-server.pem`, `nats-server-key.pem`, as `kura
    /// keys init` writes them); unset means systemd's `$CREDENTIALS_DIRECTORY`. The server
    /// admits only the nkeys listed there, and only over TLS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys_dir: Option<PathBuf>,
    /// The address the server listens on, when not `common.nats_url`'s host (e.g. `0.0.0.0`
    /// so a laptop on the LAN can approve while the daemons use loopback). Always TLS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// A fleet's hub to join as a leaf node (`kura fleet add-pi` prints this block).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hub: Option<kura_runtime::identity::HubLink>,
}

/// Who runs the NATS server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NatsMode {
    /// mikado runs and supervises the bundled server.
    Embedded,
    /// Someone else does; mikado leaves it alone.
    External,
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig {
            mode: NatsMode::Embedded,
            binary: None,
            max_backoff_ms: 5000,
            config_dir: None,
            keys_dir: None,
            listen: None,
            hub: None,
        }
    }
}

/// Runs mikado until `shutdown` resolves: the server supervisor, and (when enabled) the
/// memory consumer through the shared daemon lifecycle.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server = {
        let config = config.clone();
        let mut rx = stop_rx.clone();
        let stopped = async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        tokio::spawn(async move {
            match config.nats.mode {
                NatsMode::Embedded => supervise(&config, stopped).await,
                NatsMode::External => {
                    tracing::info!(url = %config.common.nats_url, "external NATS configured; not starting nats-server");
                    stopped.await;
                    Ok(())
                }
            }
        })
    };
    let mut daemon = Daemon::start("mikado", &config.common).await?;
    if config.memory.enabled {
        start_memory(&mut daemon, &config).await?;
    }
    // The daemon stops on the signal or when the server supervisor gives up, whichever
    // comes first; the supervisor is told to stop after the consumers.
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<anyhow::Error>();
    let server = tokio::spawn(async move {
        match server.await.map_err(anyhow::Error::from).and_then(|r| r) {
            Ok(()) => {}
            Err(e) => {
                let _ = failed_tx.send(e);
            }
        }
    });
    let failure = std::sync::Arc::new(std::sync::Mutex::new(None));
    let f = failure.clone();
    daemon
        .run(async move {
            tokio::select! {
                _ = shutdown => {}
                Ok(e) = failed_rx => {
                    *f.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                }
            }
        })
        .await?;
    let _ = stop_tx.send(true);
    let _ = server.await;
    match failure.lock().unwrap_or_else(|p| p.into_inner()).take() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Registers the memory extraction consumer (it waits for the database if it does not
/// exist yet).
async fn start_memory(daemon: &mut Daemon, config: &Config) -> anyhow::Result<()> {
    let common = config.common.clone();
    let handle = tokio::runtime::Handle::current();
    let model = memory::Extractor::model(&config.memory, handle.clone())?;
    let (bus, mem) = (daemon.bus().clone(), config.memory.clone());
    let mut extractor: Option<memory::Extractor> = None;
    let waker = daemon.consumer(memory::CONSUMER, common.poll_interval(), move || {
        if extractor.is_none() {
            let store = Store::open(&common.db, &common.store_options()?)?;
            extractor = Some(memory::Extractor {
                store,
                model: model.clone(),
                config: mem.clone(),
                bus: bus.clone(),
                handle: handle.clone(),
            });
        }
        match extractor.as_mut() {
            Some(x) => x.step(),
            None => Ok(false),
        }
    })?;
    let subject = daemon.bus().subjects.worker_complete();
    daemon
        .wake_on::<WorkerComplete>(subject, None, vec![waker])
        .await
}
