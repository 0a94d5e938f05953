//! Heartbeats: every daemon notes in SQLite that it is alive and whether it reaches NATS,
//! so `kura status` can tell what is up without asking anyone over the network. The thread
//! sleeps on a channel: it wakes for its interval, a change of the NATS connection, or stop.

use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use kura_store::Store;
use kura_work::ops::Detail;
pub use kura_work::ops::HEARTBEAT_INTERVAL as INTERVAL;

use crate::{Bus, Common};

/// What wakes the heartbeat thread early.
enum Beat {
    /// The NATS connection came or went: beat now.
    Changed,
    /// Mark the daemon stopped and end.
    Stop,
}

/// A running heartbeat; [`Heartbeat::stop`] marks the daemon stopped.
pub struct Heartbeat {
    /// Wakes the thread (dropping it stops the thread too).
    tx: Sender<Beat>,
    /// The thread.
    thread: Option<JoinHandle<()>>,
    /// What the daemon reports about itself, written with every beat.
    detail: Arc<Mutex<Option<Detail>>>,
}

impl Heartbeat {
    /// Starts beating for `kind`/`instance` (every [`INTERVAL`], at once, and whenever the
    /// NATS connection of `bus` comes or goes).
    pub fn start(common: &Common, kind: &str, instance: &str, bus: Option<Bus>) -> Heartbeat {
        let (tx, rx) = channel::<Beat>();
        if let Some(bus) = &bus {
            let tx = tx.clone();
            bus.on_connection_change(move || {
                let _ = tx.send(Beat::Changed);
            });
        }
        let (common, kind, instance) = (common.clone(), kind.to_owned(), instance.to_owned());
        let detail = Arc::new(Mutex::new(None::<Detail>));
        let detail_t = detail.clone();
        let thread = std::thread::Builder::new()
            .name(format!("{kind}-heartbeat"))
            .spawn(move || {
                let started = kura_store::time::now();
                let mut store: Option<Store> = None;
                let connected = || bus.as_ref().is_some_and(Bus::is_connected);
                let detail = || detail_t.lock().ok().and_then(|d| d.clone());
                loop {
                    if store.is_none() {
                        store = common
                            .store_options()
                            .ok()
                            .and_then(|o| Store::open(&common.db, &o).ok());
                    }
                    if let Some(st) = store.as_mut()
                        && let Err(e) = kura_work::ops::heartbeat(
                            st,
                            &instance,
                            &kind,
                            &started,
                            connected(),
                            false,
                            detail().as_ref(),
                        )
                    {
                        tracing::warn!(error = %e, "heartbeat not recorded");
                    }
                    match rx.recv_timeout(INTERVAL) {
                        Ok(Beat::Changed) | Err(RecvTimeoutError::Timeout) => {}
                        Ok(Beat::Stop) | Err(RecvTimeoutError::Disconnected) => {
                            if let Some(st) = store.as_mut() {
                                let _ = kura_work::ops::heartbeat(
                                    st,
                                    &instance,
                                    &kind,
                                    &started,
                                    false,
                                    true,
                                    detail().as_ref(),
                                );
                            }
                            return;
                        }
                    }
                }
            })
            .ok();
        Heartbeat { tx, thread, detail }
    }

    /// Sets what the daemon reports about itself and beats at once.
    pub fn set_detail(&self, detail: Detail) {
        if let Ok(mut d) = self.detail.lock() {
            *d = Some(detail);
        }
        let _ = self.tx.send(Beat::Changed);
    }

    /// Marks the daemon stopped and ends the thread.
    pub fn stop(mut self) {
        let _ = self.tx.send(Beat::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
