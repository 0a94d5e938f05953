//! What wakes an outside agent's wait: the decision and completion doorbells `kura serve`
//! hears, with SQLite polled only as the fallback when the bus is down.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How often a waiter looks at SQLite when no doorbell can come (the bus is down or absent):
/// the wait that answered in 50 ms before doorbells existed.
const POLL_WITHOUT_BUS: Duration = Duration::from_millis(50);
/// How long a waiter trusts the doorbell before it looks anyway: a doorbell is a hint, and
/// one lost on the way must cost a short delay, never the whole wait.
const POLL_WITH_BUS: Duration = Duration::from_millis(500);

/// A counter bumped by every doorbell that may answer a waiter; waiters sleep on it.
#[derive(Debug, Default)]
pub struct Wakeup {
    rung: Mutex<u64>,
    bell: Condvar,
}

impl Wakeup {
    /// A doorbell rang: every waiter looks again.
    pub fn ring(&self) {
        let mut n = self.rung.lock().unwrap_or_else(|p| p.into_inner());
        *n = n.wrapping_add(1);
        self.bell.notify_all();
    }

    /// Where the counter stands: take it before looking at SQLite, then [`Wakeup::wait`]
    /// from it, so a ring between the look and the wait is never missed.
    pub fn mark(&self) -> u64 {
        *self.rung.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleeps until a ring after `mark`, the poll interval or `deadline`, whichever is first.
    /// `bus_up` says whether a doorbell can come at all.
    pub fn wait(&self, mark: u64, deadline: Instant, bus_up: bool) {
        let poll = if bus_up {
            POLL_WITH_BUS
        } else {
            POLL_WITHOUT_BUS
        };
        let until = deadline.min(Instant::now() + poll);
        let mut n = self.rung.lock().unwrap_or_else(|p| p.into_inner());
        while *n == mark {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            n = match self.bell.wait_timeout(n, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_ring_wakes_a_waiter_and_one_before_the_wait_is_not_missed() {
        let w = Arc::new(Wakeup::default());
        let far = Instant::now() + Duration::from_secs(30);
        // Rung between the look and the wait: the wait returns at once.
        let mark = w.mark();
        w.ring();
        let t = Instant::now();
        w.wait(mark, far, true);
        assert!(
            t.elapsed() < POLL_WITH_BUS,
            "a ring before the wait was missed"
        );
        // Rung while waiting: woken.
        let mark = w.mark();
        let ringer = {
            let w = w.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                w.ring();
            })
        };
        w.wait(mark, far, true);
        assert_ne!(w.mark(), mark, "returned before the ring, not woken by it");
        ringer.join().expect("ringer");
    }
}
