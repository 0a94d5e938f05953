//! Ledger diff: which records (by content hash) are only in A, only in B, or in both.

use std::collections::HashSet;

use proto::record::Record;
use serde::Serialize;
use uuid::Uuid;

use crate::error::Result;
use crate::store::Store;

/// The result of comparing two ledgers, each list in ledger order.
#[derive(Debug, Clone, Serialize)]
pub struct LedgerDiff {
    /// The first ledger.
    pub ledger_a: Uuid,
    /// The second ledger.
    pub ledger_b: Uuid,
    /// Records whose hash appears only in A.
    pub only_a: Vec<Record>,
    /// Records whose hash appears only in B.
    pub only_b: Vec<Record>,
    /// Records whose hash appears in both (A's order).
    pub both: Vec<Record>,
}

/// Compares two ledgers by record hash.
pub fn diff(store: &Store, a: Uuid, b: Uuid) -> Result<LedgerDiff> {
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
