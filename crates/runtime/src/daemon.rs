//! One daemon lifecycle for every Kura daemon: connect the bus, beat, run each registered
//! consumer on its own thread with its own store handle, and on shutdown stop them in order
//! (wake and join the consumers, drain the bus, mark the daemon stopped).

use std::future::Future;
use std::thread::JoinHandle;
use std::time::Duration;

use kura_store::Store;
use serde::de::DeserializeOwned;

use crate::heartbeat::Heartbeat;
use crate::{Bus, Common, Stop, Waker, consumer_loop, wake_pair};

/// A running daemon: its bus, heartbeat and consumer threads.
pub struct Daemon {
    /// `minato`, `hashi`, ...
    kind: &'static str,
    /// Shared settings.
    common: Common,
    /// This process's name in logs, leases and `kura status`.
    instance: String,
    /// The doorbell bus (reconnecting in the background).
    bus: Bus,
    /// Marks the daemon alive in SQLite.
    heartbeat: Option<Heartbeat>,
    /// Set on shutdown; wakes every sleeper.
    stop: Stop,
    /// One per consumer, to wake it for shutdown.
    wakers: Vec<Waker>,
    /// The consumer threads.
    threads: Vec<JoinHandle<()>>,
}

impl Daemon {
    /// Connects the bus (returning at once even if NATS is down) and starts the heartbeat.
    pub async fn start(kind: &'static str, common: &Common) -> anyhow::Result<Daemon> {
        let instance = common.instance_name(kind);
        let bus = Bus::connect(common, &instance).await?;
        let heartbeat = Heartbeat::start(common, kind, &instance, Some(bus.clone()));
        Ok(Daemon {
            kind,
            common: common.clone(),
            instance,
            bus,
            heartbeat: Some(heartbeat),
            stop: Stop::new(),
            wakers: Vec::new(),
            threads: Vec::new(),
        })
    }

    /// The bus, to ring doorbells and serve requests.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// Sets what `kura status` shows beside this daemon (hashi: its tool sandbox).
    pub fn set_detail(&self, text: impl Into<String>) {
        if let Some(h) = &self.heartbeat {
            h.set_detail(text.into());
        }
    }

    /// The instance name.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The stop signal (set on shutdown), for long steps that should end early.
    pub fn stop_signal(&self) -> Stop {
        self.stop.clone()
    }

    /// A store handle of its own (each consumer thread gets one).
    pub fn open_store(&self) -> anyhow::Result<Store> {
        Ok(Store::open(&self.common.db, &self.common.store_options()?)?)
    }

    /// Runs `step` on a thread named `name` in the recovery loop: at start, on every NATS
    /// (re)connect, on a wake from the returned [`Waker`] (hook doorbells to it with
    /// [`Daemon::wake_on`]) and every `poll`. `step` does at most one unit of work in its own
    /// transaction and says whether it found any.
    pub fn consumer(
        &mut self,
        name: &str,
        poll: Duration,
        mut step: impl FnMut() -> anyhow::Result<bool> + Send + 'static,
    ) -> anyhow::Result<Waker> {
        let (waker, rx) = wake_pair();
        self.bus.wake_on_connect(waker.clone());
        let (stop, label) = (self.stop.clone(), name.to_owned());
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || consumer_loop(&label, &rx, poll, &stop, &mut step))?;
        self.wakers.push(waker.clone());
        self.threads.push(thread);
        Ok(waker)
    }

    /// Wakes `wakers` on every valid doorbell of type `T` on `subject` (in queue group
    /// `queue` if given); anything else on the subject is logged and counted.
    pub async fn wake_on<T>(
        &self,
        subject: String,
        queue: Option<String>,
        wakers: Vec<Waker>,
    ) -> anyhow::Result<()>
    where
        T: DeserializeOwned + Send + 'static,
    {
        self.bus
            .doorbells::<T, _>(subject, queue, move |_| wakers.iter().for_each(Waker::wake))
            .await?;
        Ok(())
    }

    /// Waits for `shutdown`, then stops in order: consumers (woken, joined), bus (flushed
    /// and drained), heartbeat (marked stopped).
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        tracing::info!(
            instance = %self.instance,
            db = %self.common.db.display(),
            nats = %self.common.nats_url,
            consumers = self.threads.len(),
            "{} running",
            self.kind
        );
        shutdown.await;
        self.stop.set();
        self.wakers.iter().for_each(Waker::wake);
        let threads = std::mem::take(&mut self.threads);
        tokio::task::spawn_blocking(move || threads.into_iter().for_each(|t| drop(t.join())))
            .await?;
        self.bus.close().await;
        if let Some(h) = self.heartbeat.take() {
            tokio::task::spawn_blocking(move || h.stop()).await?;
        }
        tracing::info!("{} stopped", self.kind);
        Ok(())
    }
}
