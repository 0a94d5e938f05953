//! Heartbeats: every daemon notes in SQLite that it is alive and whether it reaches NATS,
//! so `kura status` can tell what is up without asking anyone over the network.

use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::params;

use super::{Bus, Common, Stop};
use crate::Store;

/// How often a daemon beats; `kura status` calls it down after three missed beats.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// A running heartbeat; [`Heartbeat::stop`] marks the daemon stopped.
pub struct Heartbeat {
    /// Stops the thread.
    stop: Stop,
    /// The thread.
    thread: Option<JoinHandle<()>>,
}

fn beat(
    store: &mut Store,
    instance: &str,
    kind: &str,
    started: &str,
    connected: bool,
    stopped: bool,
) -> crate::Result<()> {
    store.write(|tx| {
        tx.execute(
            "INSERT INTO daemons (instance, kind, pid, started_at, heartbeat_ms, nats_connected, stopped)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (instance) DO UPDATE SET kind = excluded.kind, pid = excluded.pid,
               started_at = excluded.started_at, heartbeat_ms = excluded.heartbeat_ms,
               nats_connected = excluded.nats_connected, stopped = excluded.stopped",
            params![instance, kind, std::process::id(), started, crate::work::now_ms(), connected, stopped],
        )?;
        Ok(())
    })
}

impl Heartbeat {
    /// Starts beating for `kind`/`instance` (every [`INTERVAL`], and at once).
    pub fn start(common: &Common, kind: &str, instance: &str, bus: Option<Bus>) -> Heartbeat {
        let stop = Stop::new();
        let (s, common, kind, instance) = (
            stop.clone(),
            common.clone(),
            kind.to_owned(),
            instance.to_owned(),
        );
        let thread = std::thread::Builder::new()
            .name(format!("{kind}-heartbeat"))
            .spawn(move || {
                let started = crate::time::now();
                let mut store: Option<Store> = None;
                let connected = |bus: &Option<Bus>| bus.as_ref().is_some_and(Bus::is_connected);
                loop {
                    if store.is_none() {
                        store = common
                            .store_options()
                            .ok()
                            .and_then(|o| Store::open(&common.db, &o).ok());
                    }
                    let was = connected(&bus);
                    if let Some(st) = store.as_mut()
                        && let Err(e) = beat(st, &instance, &kind, &started, was, false)
                    {
                        tracing::warn!(error = %e, "heartbeat not recorded");
                    }
                    // Beat again at once when the NATS connection comes or goes.
                    let mut waited = Duration::ZERO;
                    while waited < INTERVAL && !s.is_set() && connected(&bus) == was {
                        std::thread::sleep(Duration::from_millis(50));
                        waited += Duration::from_millis(50);
                    }
                    if s.is_set() {
                        if let Some(st) = store.as_mut() {
                            let _ = beat(st, &instance, &kind, &started, false, true);
                        }
                        return;
                    }
                }
            })
            .ok();
        Heartbeat { stop, thread }
    }

    /// Marks the daemon stopped and ends the thread.
    pub fn stop(mut self) {
        self.stop.set();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
