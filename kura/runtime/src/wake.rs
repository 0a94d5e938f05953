//! Wake-ups and the recovery loop: every consumer scans SQLite on start, on each doorbell or
//! reconnect, and every poll interval; a doorbell only makes it sooner.

use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

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

/// A shared stop signal: setting it wakes everyone sleeping on it, so a stop never waits
/// out a sleep.
#[derive(Clone, Debug, Default)]
pub struct Stop(Arc<(Mutex<bool>, Condvar)>);

impl Stop {
    /// A signal that is not set.
    pub fn new() -> Self {
        Stop::default()
    }

    /// Sets it and wakes every [`Stop::sleep`].
    pub fn set(&self) {
        let (flag, cv) = &*self.0;
        *flag.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
    }

    /// Whether it is set.
    pub fn is_set(&self) -> bool {
        *self.0.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleeps for `d` unless set meanwhile; true when it is set (stop now).
    pub fn sleep(&self, d: Duration) -> bool {
        let (flag, cv) = &*self.0;
        let deadline = Instant::now() + d;
        let mut set = flag.lock().unwrap_or_else(|p| p.into_inner());
        while !*set {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            set = cv
                .wait_timeout(set, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        true
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
    use std::sync::atomic::{AtomicUsize, Ordering};

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

#[cfg(test)]
mod stop_tests {
    use super::*;

    #[test]
    fn setting_stop_wakes_a_sleeper_at_once() {
        let stop = Stop::new();
        assert!(
            !stop.sleep(Duration::from_millis(1)),
            "not set: sleeps it out"
        );
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            let start = Instant::now();
            (s.sleep(Duration::from_secs(60)), start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(20));
        stop.set();
        let (stopped, took) = t.join().expect("sleeper");
        assert!(stopped);
        assert!(took < Duration::from_secs(30), "woken, not timed out");
        assert!(
            stop.sleep(Duration::from_secs(60)),
            "already set: returns at once"
        );
    }
}
