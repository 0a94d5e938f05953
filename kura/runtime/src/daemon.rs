//! One daemon lifecycle for every Kura daemon: connect the bus, beat, run each registered
//! consumer on its own thread with its own store handle, and on shutdown stop them in order
//! (wake and join the consumers, drain the bus, mark the daemon stopped). `kura serve` runs on
//! it too, with a bus only when it needs one ([`Daemon::start_bus_optional`]) and a scheduler
//! thread of its own ([`Daemon::thread`]).

use std::future::Future;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use kura_store::Store;
use kura_work::ops::Detail;
use serde::de::DeserializeOwned;

use crate::heartbeat::Heartbeat;
use crate::{Bus, Common, Stop, Waker, consumer_loop, wake_pair};

/// A running daemon: its bus, heartbeat and consumer threads. `B` is [`Bus`] for the four
/// bus daemons and `Option<Bus>` for `kura serve`, whose bus is optional.
pub struct Daemon<B = Bus> {
    /// `minato`, `hashi`, ...
    kind: &'static str,
    /// Shared settings.
    common: Common,
    /// This process's name in logs, leases and `kura status`.
    instance: String,
    /// The doorbell bus (reconnecting in the background).
    bus: B,
    /// Marks the daemon alive in SQLite (shared with threads that set its detail).
    heartbeat: Option<Arc<Heartbeat>>,
    /// Set on shutdown; wakes every sleeper.
    stop: Stop,
    /// One per consumer, to wake it for shutdown.
    wakers: Vec<Waker>,
    /// The consumer threads.
    threads: Vec<JoinHandle<()>>,
}

/// What a daemon holds as its bus: one, or maybe one.
pub trait BusSlot {
    /// The bus, if there is one.
    fn get(&self) -> Option<&Bus>;
}

impl BusSlot for Bus {
    fn get(&self) -> Option<&Bus> {
        Some(self)
    }
}

impl BusSlot for Option<Bus> {
    fn get(&self) -> Option<&Bus> {
        self.as_ref()
    }
}

impl Daemon {
    /// Connects the bus (returning at once even if NATS is down) and starts the heartbeat.
    pub async fn start(kind: &'static str, common: &Common) -> anyhow::Result<Daemon> {
        let instance = common.instance_name(kind);
        let bus = Bus::connect(common, &instance).await?;
        Ok(Daemon::assemble(kind, common, instance, bus))
    }

    /// The bus, to ring doorbells and serve requests.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }
}

impl Daemon<Option<Bus>> {
    /// Like [`Daemon::start`], but connects the bus only when `connect` (`kura serve` needs
    /// one only to witness for peers or to serve the console).
    pub async fn start_bus_optional(
        kind: &'static str,
        common: &Common,
        connect: bool,
    ) -> anyhow::Result<Self> {
        let instance = common.instance_name(kind);
        let bus = match connect {
            true => Some(Bus::connect(common, &instance).await?),
            false => None,
        };
        Ok(Daemon::assemble(kind, common, instance, bus))
    }

    /// The bus, if one was connected.
    pub fn bus(&self) -> Option<&Bus> {
        self.bus.as_ref()
    }
}

impl<B: BusSlot> Daemon<B> {
    /// Starts the heartbeat beside `bus`.
    fn assemble(kind: &'static str, common: &Common, instance: String, bus: B) -> Self {
        let heartbeat = Heartbeat::start(common, kind, &instance, bus.get().cloned());
        Daemon {
            kind,
            common: common.clone(),
            instance,
            bus,
            heartbeat: Some(Arc::new(heartbeat)),
            stop: Stop::new(),
            wakers: Vec::new(),
            threads: Vec::new(),
        }
    }

    /// Sets what `kura status` shows beside this daemon (hashi: its tool sandbox).
    pub fn set_detail(&self, detail: impl Into<Detail>) {
        if let Some(h) = &self.heartbeat {
            h.set_detail(detail.into());
        }
    }

    /// [`Daemon::set_detail`] for a thread of the daemon's own. Hold it only in a thread the
    /// daemon joins ([`Daemon::thread`]): the heartbeat is marked stopped once no one else does.
    pub fn detail_setter(&self) -> impl Fn(Detail) + Send + Sync + 'static {
        let heartbeat = self.heartbeat.clone();
        move |detail| {
            if let Some(h) = &heartbeat {
                h.set_detail(detail);
            }
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
        if let Some(bus) = self.bus.get() {
            bus.wake_on_connect(waker.clone());
        }
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
        let Some(bus) = self.bus.get() else {
            anyhow::bail!("{} has no bus to hear doorbells on", self.kind);
        };
        bus.doorbells::<T, _>(subject, queue, move |_| wakers.iter().for_each(Waker::wake))
            .await?;
        Ok(())
    }

    /// Runs `body` on a thread named `name` that the daemon joins on shutdown; `body` gets
    /// the stop signal and must return soon after it is set (its sleeps wake at once).
    pub fn thread(
        &mut self,
        name: &str,
        body: impl FnOnce(Stop) + Send + 'static,
    ) -> anyhow::Result<()> {
        let stop = self.stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || body(stop))?;
        self.threads.push(thread);
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
        if let Some(bus) = self.bus.get() {
            bus.close().await;
        }
        // The threads holding a share of it are joined: this is the last.
        if let Some(h) = self.heartbeat.take().and_then(Arc::into_inner) {
            tokio::task::spawn_blocking(move || h.stop()).await?;
        }
        tracing::info!("{} stopped", self.kind);
        Ok(())
    }
}
