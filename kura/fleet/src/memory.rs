//! An in-memory hub for the fleet core's unit tests: one Pi's stream with JetStream's rules
//! that the publisher leans on — a message id taken once (until the window is forgotten),
//! checked before the expected last sequence on the ledger subject — its checkpoint and its
//! objects. Anyone may write into it, as a hub's operator or another machine could.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use crate::port::{Hub, Objects, Sent};
use crate::{FleetError, Result};

/// What the hub holds.
#[derive(Default)]
struct Inner {
    /// (is on the ledger subject, body), at stream sequence index + 1.
    messages: Vec<(bool, Bytes)>,
    ids: HashMap<String, u64>,
    checkpoint: Option<String>,
    objects: HashMap<String, Vec<u8>>,
}

/// One Pi's place on an in-memory hub.
#[derive(Default)]
pub struct MemoryHub {
    inner: Mutex<Inner>,
}

impl MemoryHub {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Someone else puts `body` at this Pi's place, under message id `id` when given; its
    /// stream sequence.
    pub fn forge(&self, ledger_subject: bool, id: Option<&str>, body: &[u8]) -> u64 {
        let mut h = self.lock();
        h.messages
            .push((ledger_subject, Bytes::copy_from_slice(body)));
        let seq = h.messages.len() as u64;
        if let Some(id) = id {
            h.ids.insert(id.to_owned(), seq);
        }
        seq
    }

    /// The duplicate window passes: message ids are forgotten.
    pub fn forget_ids(&self) {
        self.lock().ids.clear();
    }

    /// The bodies on the ledger subject, in stream order.
    pub fn ledgers(&self) -> Vec<Bytes> {
        self.lock()
            .messages
            .iter()
            .filter(|(l, _)| *l)
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// The checkpoint put last.
    pub fn checkpoint(&self) -> Option<String> {
        self.lock().checkpoint.clone()
    }

    /// Replaces an object's bytes, as any Pi with write access to the store could.
    pub fn alter_object(&self, name: &str, body: &[u8]) {
        self.lock().objects.insert(name.to_owned(), body.to_vec());
    }

    fn last_ledger_seq(h: &Inner) -> u64 {
        h.messages
            .iter()
            .rposition(|(l, _)| *l)
            .map_or(0, |i| i as u64 + 1)
    }
}

impl Objects for MemoryHub {
    async fn holds(&self, name: &str, size: u64) -> bool {
        self.lock()
            .objects
            .get(name)
            .is_some_and(|b| b.len() as u64 == size)
    }

    async fn put(&self, name: &str, body: &[u8]) -> Result<()> {
        self.lock().objects.insert(name.to_owned(), body.to_vec());
        Ok(())
    }

    async fn get(&self, name: &str, max: u64) -> Result<Vec<u8>> {
        let h = self.lock();
        let body = h
            .objects
            .get(name)
            .ok_or_else(|| FleetError::Missing(format!("no object {name}")))?;
        Ok(body.iter().take(max as usize + 1).copied().collect())
    }
}

impl Hub for MemoryHub {
    async fn publish_leaf(
        &self,
        records: Vec<(String, Bytes)>,
        (id, body): (String, Bytes),
        after: u64,
    ) -> Result<Sent> {
        let mut h = self.lock();
        for (rid, r) in records {
            if !h.ids.contains_key(&rid) {
                h.messages.push((false, r));
                let seq = h.messages.len() as u64;
                h.ids.insert(rid, seq);
            }
        }
        // As JetStream: the message id first, then the expected last subject sequence.
        if let Some(seq) = h.ids.get(&id) {
            return Ok(Sent::Duplicate(*seq));
        }
        if MemoryHub::last_ledger_seq(&h) != after {
            return Ok(Sent::NotAfter);
        }
        h.messages.push((true, body));
        let seq = h.messages.len() as u64;
        h.ids.insert(id, seq);
        Ok(Sent::At(seq))
    }

    async fn message(&self, seq: u64) -> Result<Bytes> {
        let h = self.lock();
        seq.checked_sub(1)
            .and_then(|i| h.messages.get(i as usize))
            .map(|(_, b)| b.clone())
            .ok_or_else(|| FleetError::Hub(format!("no message at {seq}")))
    }

    async fn last_ledger(&self) -> Result<(u64, Bytes)> {
        let h = self.lock();
        let seq = MemoryHub::last_ledger_seq(&h);
        seq.checked_sub(1)
            .and_then(|i| h.messages.get(i as usize))
            .map(|(_, b)| (seq, b.clone()))
            .ok_or_else(|| FleetError::Hub("no ledger on the subject".into()))
    }

    async fn put_checkpoint(&self, note: &str) -> Result<()> {
        self.lock().checkpoint = Some(note.to_owned());
        Ok(())
    }
}
