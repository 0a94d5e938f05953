//! Rate limit on refused decisions: per request and approver, only a few refusals per
//! window touch the database; the rest are counted in memory and added to the stored count
//! later in one write. A flood of forgeries then costs aegis almost no disk writes, and
//! never a lock a real decision waits behind for long. Not per connection: core NATS does
//! not tell a responder who published, so the key is what the message claims; the store's
//! caps bound what any sender can write regardless, and the bus admits only listed keys.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Refusals per key and window that are written at once.
const PER_WINDOW: u32 = 5;
/// The window.
const WINDOW: Duration = Duration::from_secs(10);
/// Keys kept in memory at most; past it, everything is written (the store bounds it).
const MAX_KEYS: usize = 10_000;

/// (request id or "", approver as named in the message).
pub type Key = (String, String);

#[derive(Debug)]
struct Bucket {
    window_start: Instant,
    in_window: u32,
    unwritten: i64,
}

/// Which refusals are written now, and how many wait to be added.
#[derive(Debug, Default)]
pub struct Limiter {
    buckets: HashMap<Key, Bucket>,
}

impl Limiter {
    /// Whether a refusal for `key` at `now` goes to the database now; if not, it is counted
    /// here until [`Limiter::drain`].
    pub fn admit(&mut self, key: &Key, now: Instant) -> bool {
        if !self.buckets.contains_key(key) && self.buckets.len() >= MAX_KEYS {
            return true;
        }
        let b = self.buckets.entry(key.clone()).or_insert(Bucket {
            window_start: now,
            in_window: 0,
            unwritten: 0,
        });
        if now.duration_since(b.window_start) >= WINDOW {
            b.window_start = now;
            b.in_window = 0;
        }
        if b.in_window < PER_WINDOW {
            b.in_window += 1;
            true
        } else {
            b.unwritten += 1;
            false
        }
    }

    /// The counts not yet written, emptied; quiet keys are forgotten.
    pub fn drain(&mut self, now: Instant) -> Vec<(Key, i64)> {
        let out: Vec<(Key, i64)> = self
            .buckets
            .iter_mut()
            .filter(|(_, b)| b.unwritten > 0)
            .map(|(k, b)| (k.clone(), std::mem::take(&mut b.unwritten)))
            .collect();
        self.buckets
            .retain(|_, b| b.unwritten > 0 || now.duration_since(b.window_start) < WINDOW);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_per_window_then_counted_in_memory() {
        let mut l = Limiter::default();
        let key = ("r".to_owned(), "user:eve".to_owned());
        let t0 = Instant::now();
        let admitted = (0..100).filter(|_| l.admit(&key, t0)).count();
        assert_eq!(admitted, PER_WINDOW as usize);
        assert_eq!(
            l.drain(t0),
            vec![(key.clone(), 100 - i64::from(PER_WINDOW))]
        );
        assert!(l.drain(t0).is_empty(), "drained once");
        assert!(l.admit(&key, t0 + WINDOW), "a new window admits again");
        let other = ("r".to_owned(), "user:ana".to_owned());
        assert!(l.admit(&other, t0), "keys are separate");
    }
}
