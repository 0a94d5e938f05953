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
    /// Ledgers by seal-log index, each with the stream sequence it came at: one per index
    /// as the origin published it, more when someone else put another there (unsigned, so
    /// none is dropped for arriving first: the signed checkpoint decides which one is the
    /// origin's).
    pub ledgers: BTreeMap<u64, Vec<(u64, ReplLedger)>>,
    /// Signed checkpoints by size.
    pub checkpoints: BTreeMap<u64, Checkpoint>,
    /// Bytes held (bodies as decoded).
    pub bytes: u64,
    /// The last checkpoint (size, root) found consistent with what the replica holds.
    pub checked: Option<(u64, [u8; 32])>,
}

/// Most ledger combinations a batch is tried with at once when rivals share an index (the
/// next ones are tried the next time, never one twice).
pub(crate) const MAX_TRIES: usize = 16;
/// Most refused combinations held (32 bytes each): past it the receiver stops trying rival
/// ledgers for that batch and says so — the hub is then withholding the origin's own.
pub(crate) const MAX_REFUSED: usize = 65_536;

/// The digest a way of filling a batch is remembered by.
pub(crate) fn digest(seqs: impl IntoIterator<Item = u64>) -> [u8; 32] {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for s in seqs {
        h.update(s.to_be_bytes());
    }
    h.finalize().into()
}

impl Pending {
    /// Holds a ledger that came at stream sequence `seq`; returns the sequences of other
    /// ledgers already held at its index with another hash (its rivals).
    pub fn ledger(&mut self, seq: u64, l: ReplLedger) -> Vec<u64> {
        let at = self.ledgers.entry(l.index).or_default();
        if at.iter().any(|(_, h)| h.ledger_hash == l.ledger_hash) {
            return Vec::new();
        }
        let rivals = at.iter().map(|(s, _)| *s).collect();
        at.push((seq, l));
        rivals
    }

    /// Whether every member of `l` is held or `stored`.
    fn complete(&self, l: &ReplLedger, stored: &impl Fn(&str) -> bool) -> bool {
        l.members
            .iter()
            .all(|h| self.records.contains_key(h) || stored(h))
    }

    /// The ways to fill leaves `from..to` with held ledgers whose records are all here and
    /// that were not refused before, at most [`MAX_TRIES`]: at each leaf the ledgers
    /// `preferred` (a seal the origin's key made) first, then those that came first.
    pub fn batches(
        &self,
        from: u64,
        to: u64,
        stored: impl Fn(&str) -> bool,
        preferred: impl Fn(&ReplLedger) -> bool,
        refused: &std::collections::HashSet<[u8; 32]>,
    ) -> Vec<Vec<&(u64, ReplLedger)>> {
        let mut choices: Vec<Vec<&(u64, ReplLedger)>> = Vec::new();
        for i in from..to {
            let mut viable: Vec<_> = self
                .ledgers
                .get(&i)
                .into_iter()
                .flatten()
                .filter(|(_, l)| self.complete(l, &stored))
                .collect();
            if viable.is_empty() {
                return Vec::new();
            }
            // A stable sort: among equals, arrival order stays.
            viable.sort_by_key(|(_, l)| !preferred(l));
            choices.push(viable);
        }
        let mut out = Vec::new();
        let mut pick = vec![0usize; choices.len()];
        // Refused combinations are skipped, but the walk over them is bounded too.
        let mut walked = 0usize;
        while out.len() < MAX_TRIES && walked < refused.len() + MAX_TRIES {
            walked += 1;
            let batch: Vec<_> = pick.iter().zip(&choices).map(|(&k, c)| c[k]).collect();
            if !refused.contains(&digest(batch.iter().map(|(s, _)| *s))) {
                out.push(batch);
            }
            // The next combination, the last index turning fastest.
            let mut i = choices.len();
            loop {
                if i == 0 {
                    return out;
                }
                i -= 1;
                pick[i] += 1;
                if pick[i] < choices[i].len() {
                    break;
                }
                pick[i] = 0;
            }
        }
        out
    }

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
        while let Some(at) = self.ledgers.get(&held) {
            if !at.iter().any(|(_, l)| self.complete(l, &stored)) {
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
            .flatten()
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
            + self.ledgers.values().map(Vec::len).sum::<usize>() as u64 * 1024;
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
            p.ledger(i, l);
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

    /// Regression (issue 35 item 15): a ledger someone else put at an index before the
    /// origin's own was kept and the origin's dropped unseen, so the batch never verified
    /// and the replica stalled for good. Both are held; the batches try the first-come
    /// first, then its rival; one whose records never come is not tried at all.
    #[test]
    fn a_rival_ledger_at_an_index_is_held_beside_the_first_and_both_are_tried() {
        let mut p = Pending::default();
        let (_, first) = ledger(0, &["a"]);
        let (_, mut forged) = ledger(1, &["ghost"]);
        forged.ledger_hash = "f".into();
        let (_, mut real) = ledger(1, &["b"]);
        real.ledger_hash = "r".into();
        let (_, mut other) = ledger(1, &["a"]);
        other.ledger_hash = "o".into();
        assert!(p.ledger(10, first).is_empty());
        assert!(p.ledger(11, forged).is_empty());
        assert_eq!(
            p.ledger(12, real.clone()),
            vec![11],
            "the rival is named by its sequence"
        );
        assert!(
            p.ledger(13, real).is_empty(),
            "the same ledger again is no rival"
        );
        assert_eq!(p.ledger(14, other), vec![11, 12]);
        p.checkpoint(cp(2));
        let stored = |h: &str| h == "a" || h == "b";
        assert_eq!(
            p.ready(0, stored).map(|c| c.1.size),
            Some(2),
            "the forged ledger's missing record does not hold the batch back"
        );
        let none = std::collections::HashSet::new();
        let tries: Vec<Vec<u64>> = p
            .batches(0, 2, stored, |_| false, &none)
            .iter()
            .map(|b| b.iter().map(|(s, _)| *s).collect())
            .collect();
        assert_eq!(tries, vec![vec![10, 12], vec![10, 14]]);
        // Review: one the origin sealed is tried first, and one refused is not tried again.
        let sealed = |l: &ReplLedger| l.ledger_hash == "o";
        let first: Vec<u64> = p.batches(0, 2, stored, sealed, &none)[0]
            .iter()
            .map(|(s, _)| *s)
            .collect();
        assert_eq!(first, vec![10, 14]);
        let refused = std::collections::HashSet::from([digest([10, 14])]);
        let left: Vec<Vec<u64>> = p
            .batches(0, 2, stored, sealed, &refused)
            .iter()
            .map(|b| b.iter().map(|(s, _)| *s).collect())
            .collect();
        assert_eq!(left, vec![vec![10, 12]]);
        p.applied(2);
        assert!(p.ledgers.is_empty());
    }
}
