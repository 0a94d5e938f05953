//! Connections: a bounded number, each closed when it idles. Descriptors are what an
//! unauthenticated client can take from `kura serve` without sending a byte, so the console
//! holds at most [`MAX_CONNECTIONS`]; a newcomer over the limit displaces the oldest
//! connection that has not yet sent a request, and hyper closes any connection that takes
//! longer than [`HEADER_TIMEOUT`] to send a request's headers (a new one, or the next on a
//! kept-alive one).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// At most this many connections at once: well below the unit's `LimitNOFILE`, leaving
/// descriptors for the database, the bus and the witnesses.
pub const MAX_CONNECTIONS: usize = 512;
/// A request's headers must arrive within this (and a kept-alive connection is closed when
/// no next request starts within it).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A request (its body read and its answer made) must finish within this, or it is answered
/// 408 and the connection closed: a body trickled a byte at a time would otherwise hold a
/// slot for ever. The live event stream is the one exception.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

struct Entry {
    served: Arc<AtomicBool>,
    evict: Arc<Notify>,
}

/// The open connections, oldest first.
#[derive(Default)]
pub struct Slots {
    open: Mutex<(u64, BTreeMap<u64, Entry>)>,
}

/// One admitted connection; dropping it frees the slot.
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    /// Set once the connection has sent a request: it is then no longer displaced.
    pub served: Arc<AtomicBool>,
    evict: Arc<Notify>,
}

impl Slots {
    /// A slot for a new connection, displacing the oldest one that never sent a request when
    /// all are taken; `None` when every open connection is in use (the newcomer is dropped).
    pub fn admit(self: &Arc<Self>) -> Option<Slot> {
        let mut guard = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let (next, open) = &mut *guard;
        if open.len() >= MAX_CONNECTIONS {
            let idle = open
                .iter()
                .find(|(_, e)| !e.served.load(Ordering::Relaxed))
                .map(|(id, _)| *id)?;
            if let Some(e) = open.remove(&idle) {
                e.evict.notify_one();
            }
        }
        *next += 1;
        let (served, evict) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
        open.insert(
            *next,
            Entry {
                served: served.clone(),
                evict: evict.clone(),
            },
        );
        Some(Slot {
            slots: self.clone(),
            id: *next,
            served,
            evict,
        })
    }
}

impl Slot {
    /// Resolves when a newcomer displaced this connection.
    pub async fn displaced(&self) {
        self.evict.notified().await
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut guard = self.slots.open.lock().unwrap_or_else(|p| p.into_inner());
        guard.1.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_house_displaces_the_oldest_idle_connection_only() {
        let slots = Arc::new(Slots::default());
        let mut held: Vec<Slot> = (0..MAX_CONNECTIONS)
            .map(|_| slots.admit().expect("room"))
            .collect();
        held[0].served.store(true, Ordering::Relaxed);
        let newcomer = slots.admit().expect("displaces one");
        {
            let open = &slots.open.lock().expect("lock").1;
            assert_eq!(open.len(), MAX_CONNECTIONS);
            assert!(open.contains_key(&held[0].id), "a served connection stays");
            assert!(!open.contains_key(&held[1].id), "the oldest idle one goes");
            assert!(open.contains_key(&newcomer.id));
        }
        held.clear();
        drop(newcomer);
        assert!(slots.open.lock().expect("lock").1.is_empty());
    }
}
