//! Ledger diff: which records (by content hash) are only in A, only in B, or in both.

use std::collections::HashSet;

use proto::LedgerId;
use proto::record::Record;
use serde::Serialize;

use kura_store::{Result, Store};

/// The result of comparing two ledgers, each list in ledger order.
#[derive(Debug, Clone, Serialize)]
pub struct LedgerDiff {
    /// The first ledger.
    pub ledger_a: LedgerId,
    /// The second ledger.
    pub ledger_b: LedgerId,
    /// Records whose hash appears only in A.
    pub only_a: Vec<Record>,
    /// Records whose hash appears only in B.
    pub only_b: Vec<Record>,
    /// Records whose hash appears in both (A's order).
    pub both: Vec<Record>,
}

/// Compares two ledgers by record hash.
pub fn diff(store: &Store, a: LedgerId, b: LedgerId) -> Result<LedgerDiff> {
    let ra = store.hydrate(a)?;
    let rb = store.hydrate(b)?;
    let ha: HashSet<&str> = ra.iter().map(|r| r.hash.as_str()).collect();
    let hb: HashSet<&str> = rb.iter().map(|r| r.hash.as_str()).collect();
    let mut seen = HashSet::new();
    let mut only_a = Vec::new();
    let mut both = Vec::new();
    for r in &ra {
        if !seen.insert(r.hash.as_str()) {
            continue;
        }
        if hb.contains(r.hash.as_str()) {
            both.push(r.clone());
        } else {
            only_a.push(r.clone());
        }
    }
    let mut seen_b = HashSet::new();
    let only_b = rb
        .iter()
        .filter(|r| !ha.contains(r.hash.as_str()) && seen_b.insert(r.hash.as_str()))
        .cloned()
        .collect();
    Ok(LedgerDiff {
        ledger_a: a,
        ledger_b: b,
        only_a,
        only_b,
        both,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_store::StoreOptions;
    use proto::record::{Content, NewRecord, RecordType};

    #[test]
    fn diff_by_hash_keeps_order_and_counts_repeats_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s =
            Store::create(dir.path().join("d.db"), &StoreOptions::default()).expect("create");
        let session = s.create_session("d").expect("session");
        let t = |x: &str| NewRecord::new(RecordType::AgentThought, Content::text(x), "agent:t");
        let a = s.open_ledger(session.session_id, "a", &[]).expect("open");
        let b = s.open_ledger(session.session_id, "b", &[]).expect("open");
        for x in ["shared", "only-a", "shared", "also-a"] {
            s.append(a.ledger_id, &t(x)).expect("append");
        }
        for x in ["new-b", "shared"] {
            s.append(b.ledger_id, &t(x)).expect("append");
        }
        let d = diff(&s, a.ledger_id, b.ledger_id).expect("diff");
        let texts = |rs: &[Record]| {
            rs.iter()
                .map(|r| r.content["text"].clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(texts(&d.only_a), ["only-a", "also-a"]);
        assert_eq!(texts(&d.only_b), ["new-b"]);
        assert_eq!(texts(&d.both), ["shared"]);
        let same = diff(&s, a.ledger_id, a.ledger_id).expect("self diff");
        assert!(same.only_a.is_empty() && same.only_b.is_empty());
        assert!(diff(&s, a.ledger_id, proto::LedgerId::new()).is_err());
    }
}
