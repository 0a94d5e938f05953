//! Mikado, the soul: starts and supervises the bundled `nats-server` (generated config,
//! loopback by default, restarted with backoff if it dies, stopped on exit; left alone when
//! an external NATS is configured), and turns what agents deliver into memory.

pub mod memory;
mod supervisor;

use std::future::Future;

use kura::Store;
use kura::runtime::{Bus, Stop, consumer_loop, wake_pair};
use proto::doorbell::WorkerComplete;
use serde::{Deserialize, Serialize};

pub use supervisor::supervise;

/// Mikado's configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Settings shared by every daemon (`nats_url` says where the server listens).
    pub common: kura::runtime::Common,
    /// The bundled server.
    pub nats: NatsConfig,
    /// Memory extraction.
    pub memory: memory::MemoryConfig,
}

/// How the bundled nats-server runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NatsConfig {
    /// `embedded`: mikado runs the bundled server at `common.nats_url`; `external`: someone
    /// else runs NATS and mikado leaves it alone.
    pub mode: String,
    /// Path of the nats-server binary; empty means `$NATS_SERVER_BIN`, then next to our own
    /// binaries, then `$PATH`.
    pub binary: String,
    /// Longest wait between restarts of a server that keeps dying.
    pub max_backoff_ms: u64,
    /// Where the generated server config is written; empty means the system temp dir.
    pub config_dir: String,
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig {
            mode: "embedded".into(),
            binary: String::new(),
            max_backoff_ms: 5000,
            config_dir: String::new(),
        }
    }
}

/// Runs mikado until `shutdown` resolves.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let server = {
        let config = config.clone();
        let stopped = stopped.clone();
        tokio::spawn(async move {
            match config.nats.mode.as_str() {
                "embedded" => supervise(&config, stopped()).await,
                "external" => {
                    tracing::info!(url = %config.common.nats_url, "external NATS configured; not starting nats-server");
                    stopped().await;
                    Ok(())
                }
                other => {
                    anyhow::bail!("nats.mode must be \"embedded\" or \"external\", not {other:?}")
                }
            }
        })
    };
    let memory = if config.memory.enabled {
        Some(start_memory(&config).await?)
    } else {
        None
    };
    let name = config.common.instance_name("mikado");
    let heartbeat = kura::runtime::heartbeat::Heartbeat::start(
        &config.common,
        "mikado",
        &name,
        memory.as_ref().map(|m| m.3.clone()),
    );
    tokio::pin!(server);
    let result = tokio::select! {
        r = &mut server => r.map_err(anyhow::Error::from).and_then(|r| r),
        _ = shutdown => {
            let _ = stop_tx.send(true);
            server.await.map_err(anyhow::Error::from).and_then(|r| r)
        }
    };
    if let Some((stop, waker, thread, bus)) = memory {
        stop.set();
        waker.wake();
        tokio::task::spawn_blocking(move || drop(thread.join())).await?;
        bus.close().await;
    }
    tokio::task::spawn_blocking(move || heartbeat.stop()).await?;
    tracing::info!("mikado stopped");
    result
}

/// Starts the memory extraction thread (it waits for the database if it does not exist yet).
async fn start_memory(
    config: &Config,
) -> anyhow::Result<(Stop, kura::runtime::Waker, std::thread::JoinHandle<()>, Bus)> {
    let common = config.common.clone();
    let options = common.store_options()?;
    let (waker, rx) = wake_pair();
    let bus = Bus::connect(
        &common,
        &common.instance_name("mikado"),
        vec![waker.clone()],
    )
    .await?;
    let w = waker.clone();
    bus.doorbells::<WorkerComplete, _>(bus.subjects.worker_complete(), None, move |_| w.wake())
        .await?;
    let handle = tokio::runtime::Handle::current();
    let model = memory::Extractor::model(&config.memory, handle.clone())?;
    let (stop, b, mem) = (Stop::new(), bus.clone(), config.memory.clone());
    let s = stop.clone();
    let thread = std::thread::Builder::new()
        .name("mikado-memory".into())
        .spawn(move || {
            let mut extractor: Option<memory::Extractor> = None;
            consumer_loop(memory::CONSUMER, &rx, common.poll_interval(), &s, || {
                if extractor.is_none() {
                    let store = Store::open(&common.db, &options)?;
                    extractor = Some(memory::Extractor {
                        store,
                        model: model.clone(),
                        config: mem.clone(),
                        bus: b.clone(),
                        handle: handle.clone(),
                    });
                }
                match extractor.as_mut() {
                    Some(x) => x.step(),
                    None => Ok(false),
                }
            })
        })?;
    Ok((stop, waker, thread, bus))
}
