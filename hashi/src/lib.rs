//! Hashi, the executor: claims turns in SQLite (lease + fencing epoch), runs the agent loop
//! (model provider + tools), writes each step as its own durable record in the turn's
//! output ledger, seals it and rings `evt.worker.complete`.

pub mod provider;
pub mod tools;
mod worker;

use std::future::Future;
use std::sync::Arc;
use std::thread;

use kura::Store;
use kura::runtime::{Bus, Common, Stop, consumer_loop, wake_pair};
use proto::doorbell::WorkerDispatch;
use serde::{Deserialize, Serialize};

pub use worker::Worker;

/// Hashi's configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Settings shared by every daemon.
    pub common: Common,
    /// The worker loop.
    pub worker: WorkerConfig,
    /// The model.
    pub provider: provider::ProviderConfig,
    /// The tools and their policy.
    pub tools: tools::ToolsConfig,
}

/// How turns are worked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// Turns this process works on at once (one thread each).
    pub workers: usize,
    /// A claimed turn is taken over by another worker this long after its last renewal.
    pub lease_ms: u64,
    /// A turn stops (with a `sys.error`) after this many steps.
    pub max_steps: usize,
    /// Author id of the records hashi writes.
    pub author: String,
    /// `aegis`: every tool call is approved by aegis first (policy, or people); `off`: only
    /// the static `tools.allow`/`tools.deny` apply.
    pub approvals: String,
    /// How long a worker waits for aegis's allow/deny before parking the turn.
    pub approval_wait_ms: u64,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            workers: 1,
            lease_ms: 30_000,
            max_steps: 32,
            author: "agent:hashi".into(),
            approvals: "aegis".into(),
            approval_wait_ms: 3000,
        }
    }
}

/// Runs the daemon until `shutdown` resolves.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let common = config.common.clone();
    let options = common.store_options()?;
    let name = common.instance_name("hashi");
    let provider: Arc<dyn provider::Provider> = Arc::from(provider::build(
        &config.provider,
        tokio::runtime::Handle::current(),
    )?);
    let toolbox = Arc::new(tools::Toolbox::new(config.tools.clone()));
    let n = config.worker.workers.max(1);
    let pairs: Vec<_> = (0..n).map(|_| wake_pair()).collect();
    let wakers: Vec<_> = pairs.iter().map(|(w, _)| w.clone()).collect();
    let bus = Bus::connect(&common, &name, wakers.clone()).await?;
    let heartbeat =
        kura::runtime::heartbeat::Heartbeat::start(&common, "hashi", &name, Some(bus.clone()));
    let ws = wakers.clone();
    bus.doorbells::<WorkerDispatch, _>(
        bus.subjects.worker_dispatch(),
        Some("hashi".into()),
        move |_| ws.iter().for_each(|w| w.wake()),
    )
    .await?;

    let stop = Stop::new();
    let mut threads = Vec::new();
    for (i, (_, rx)) in pairs.into_iter().enumerate() {
        let owner = if n == 1 {
            name.clone()
        } else {
            format!("{name}/{i}")
        };
        let mut worker = Worker {
            store: Store::open(&common.db, &options)?,
            renew_store: Some(Store::open(&common.db, &options)?),
            owner: owner.clone(),
            config: config.worker.clone(),
            provider: provider.clone(),
            tools: toolbox.clone(),
            bus: bus.clone(),
            stop: stop.clone(),
        };
        let (stop, poll) = (stop.clone(), common.poll_interval());
        threads.push(
            thread::Builder::new()
                .name(owner.clone())
                .spawn(move || consumer_loop(&owner, &rx, poll, &stop, || worker.step()))?,
        );
    }
    tracing::info!(db = %common.db.display(), nats = %common.nats_url, workers = n, provider = %config.provider.kind, "hashi running");
    shutdown.await;
    stop.set();
    wakers.iter().for_each(|w| w.wake());
    tokio::task::spawn_blocking(move || threads.into_iter().for_each(|t| drop(t.join()))).await?;
    bus.close().await;
    tokio::task::spawn_blocking(move || heartbeat.stop()).await?;
    tracing::info!("hashi stopped");
    Ok(())
}
