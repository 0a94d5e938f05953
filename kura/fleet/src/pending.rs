//! What a receiver holds of an origin's history until a signed checkpoint covers it: the
//! records and ledgers read so far (bounded in bytes) and the checkpoints seen, and which of
//! those checkpoints the held ledgers now fully cover.
//!
//! Only a checkpoint is signed by the origin; ledger and record messages are not. So a
//! message that does not fit is dropped (the hub, or anyone who can write the stream, may
//! have put it there: a delay, not the origin's doing), and only a signed checkpoint that
//! contradicts what the replica verified is evidence against the origin.

use std::collections::{BTreeMap, HashMap};

use kura_tlog::checkpoint::Signed;
use proto::OwnedColumns;
use proto::fleet::ReplLedger;

/// Checkpoints held at most (the newest are kept).
const MAX_CHECKPOINTS: usize = 64;

/// A checkpoint as received: the note and what its signature says.
pub(crate) type Checkpoint = (String, Signed);

/// The held part of an origin's history.
#[derive(Default)]
pub(crate) struct Pending {
    /// Records by content hash (each a candidate: checked against its ledger's root).
    pub records: HashMap<String, OwnedColumns>,
    /// For records the origin redacted: the kept leaf and the redaction, by content hash.
    pub redacted: HashMap<String, proto::proof::RedactedLeaf>,
    /// Ledgers by seal-log index, with the stream sequence they came at.
    pub ledgers: BTreeMap<u64, (u64, ReplLedger)>,
    /// Signed checkpoints by size.
    pub checkpoints: BTreeMap<u64, Checkpoint>,
    /// Bytes held (bodies as decoded).
    pub bytes: u64,
    /// The last checkpoint (size, root) found consistent with what the replica holds.
    pub checked: Option<(u64, [u8; 32])>,
}

impl Pending {
    /// Keeps a signed checkpoint (a different one of the same size replaces none: the
    /// first stays, and the replica's check decides).
    pub fn checkpoint(&mut self, cp: Checkpoint) {
        self.checkpoints.entry(cp.1.size).or_insert(cp);
        while self.checkpoints.len() > MAX_CHECKPOINTS {
            self.checkpoints.pop_first();
        }
    }

    /// The newest checkpoint's size, if any.
    pub fn newest(&self) -> Option<u64> {
        self.checkpoints.last_key_value().map(|(s, _)| *s)
    }

    /// Checkpoints of at most `size` leaves, oldest first (to hold against the replica),
    /// taken out.
    pub fn take_covered(&mut self, size: u64) -> Vec<Checkpoint> {
        let keep = self.checkpoints.split_off(&size.saturating_add(1));
        std::mem::replace(&mut self.checkpoints, keep)
            .into_values()
            .collect()
    }

    /// The largest checkpoint beyond `size` whose ledgers from `size` on are all held, with
    /// every member record held or `stored`.
    pub fn ready(&self, size: u64, stored: impl Fn(&str) -> bool) -> Option<&Checkpoint> {
        // Leaves size..held are all here with their records.
        let mut held = size;
        while let Some((_, l)) = self.ledgers.get(&held) {
            if !l
                .members
                .iter()
                .all(|h| self.records.contains_key(h) || stored(h))
            {
                break;
            }
            held += 1;
        }
        if held <= size {
            return None;
        }
        self.checkpoints
            .range(size + 1..=held)
            .next_back()
            .map(|(_, cp)| cp)
    }

    /// Forgets what a write of the first `size` leaves used.
    pub fn applied(&mut self, size: u64) {
        let done = self.ledgers.split_off(&size);
        let used: Vec<String> = std::mem::replace(&mut self.ledgers, done)
            .into_values()
            .flat_map(|(_, l)| l.members)
            .collect();
        for h in used {
            self.records.remove(&h);
            self.redacted.remove(&h);
        }
        self.bytes = self
            .records
            .values()
            .map(|r| r.content.len() as u64 + 200)
            .sum::<u64>()
            + self.ledgers.len() as u64 * 1024;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(index: u64, members: &[&str]) -> (u64, ReplLedger) {
        let l: ReplLedger = serde_json::from_value(serde_json::json!({
            "index": index, "ledger_id": uuid::Uuid::now_v7(), "session_id": uuid::Uuid::now_v7(),
            "session_label": "s", "label": "l", "parent_ids": [], "members": members,
            "root_hash": "", "ledger_hash": "", "created_at": "", "sealed_at": ""
        }))
        .expect("ledger");
        (index, l)
    }

    fn cp(size: u64) -> Checkpoint {
        (
            format!("note {size}"),
            Signed {
                origin: "o".into(),
                size,
                root: tlog_tiles::Hash([0; 32]),
            },
        )
    }

    /// Broke: with nothing held past the replica, the range of checkpoints was empty and
    /// backwards, and the receiver thread panicked.
    #[test]
    fn nothing_held_is_nothing_ready_not_a_panic() {
        let mut p = Pending::default();
        p.checkpoint(cp(5));
        assert!(p.ready(3, |_| true).is_none());
        assert!(p.ready(u64::MAX - 1, |_| true).is_none());
        assert!(p.take_covered(u64::MAX).len() == 1);
    }

    #[test]
    fn the_largest_fully_held_checkpoint_is_ready_and_a_missing_record_waits() {
        let mut p = Pending::default();
        for i in 2..6 {
            let (i, l) = ledger(i, &["r"]);
            p.ledgers.insert(i, (i, l));
        }
        p.checkpoint(cp(4));
        p.checkpoint(cp(6));
        p.checkpoint(cp(9));
        assert_eq!(p.ready(2, |_| true).map(|c| c.1.size), Some(6));
        assert!(
            p.ready(2, |_| false).is_none(),
            "record r is neither held nor stored"
        );
        p.applied(6);
        assert!(p.ledgers.is_empty());
    }
}
