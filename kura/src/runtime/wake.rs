//! Wake-ups and the recovery loop: every consumer scans SQLite on start, on each doorbell or
//! reconnect, and every poll interval; a doorbell only makes it sooner.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

/// Wakes one consumer early. Cheap to clone; wake-ups coalesce (a pending wake is enough).
#[derive(Clone, Debug)]
pub struct Waker {
    /// Capacity-1 channel: one pending wake-up is all a consumer needs.
    tx: SyncSender<()>,
}

impl Waker {
    /// Asks the consumer to scan now.
    pub fn wake(&self) {
        match self.tx.try_send(()) {
            Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
        }
    }
}

/// The consumer's side of a [`Waker`].
#[derive(Debug)]
pub struct WakeRx {
    /// Receives wake-ups.
    rx: Receiver<()>,
}

impl WakeRx {
    /// Waits for a wake-up or the timeout; true if woken.
    pub fn wait(&self, timeout: Duration) -> bool {
        match self.rx.recv_timeout(timeout) {
            Ok(()) => true,
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => false,
        }
    }
}

/// A connected waker and receiver.
pub fn wake_pair() -> (Waker, WakeRx) {
    let (tx, rx) = sync_channel(1);
    (Waker { tx }, WakeRx { rx })
}

/// A shared stop flag for consumer threads.
#[derive(Clone, Debug, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    /// A flag that is not set.
    pub fn new() -> Self {
        Stop::default()
    }
    /// Sets it.
    pub fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// Whether it is set.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// The recovery loop, run on a consumer's own thread. `step` does at most one unit of work
/// (in its own transaction, advancing its cursor in that transaction) and returns whether it
/// found any; the loop drains work, then sleeps until woken or `poll` passes, until `stop`.
pub fn consumer_loop(
    name: &str,
    wake: &WakeRx,
    poll: Duration,
    stop: &Stop,
    mut step: impl FnMut() -> anyhow::Result<bool>,
) {
    let mut failures = 0u32;
    while !stop.is_set() {
        match step() {
            Ok(true) => {
                failures = 0;
                continue;
            }
            Ok(false) => failures = 0,
            Err(e) => {
                failures = failures.saturating_add(1);
                tracing::error!(consumer = name, error = %format!("{e:#}"), "work step failed; will retry");
            }
        }
        if stop.is_set() {
            break;
        }
        // After an error, back off a little (but never longer than the poll interval).
        let wait = if failures > 0 {
            poll.min(Duration::from_millis(100 * u64::from(failures.min(20))))
        } else {
            poll
        };
        wake.wait(wait);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn wakes_coalesce_and_the_loop_stops() {
        let (w, rx) = wake_pair();
        w.wake();
        w.wake();
        assert!(rx.wait(Duration::from_millis(1)));
        assert!(
            !rx.wait(Duration::from_millis(1)),
            "two wakes coalesce into one"
        );

        let stop = Stop::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            consumer_loop("t", &rx, Duration::from_secs(60), &s, || {
                let n = c.fetch_add(1, Ordering::SeqCst);
                Ok(n < 3) // three units of work, then idle
            })
        });
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            4,
            "drained 3 units, then one empty scan"
        );
        w.wake();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            5,
            "a wake-up scans again at once"
        );
        stop.set();
        w.wake();
        t.join().expect("loop ends");
    }
}
