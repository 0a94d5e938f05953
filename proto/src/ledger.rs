//! Ledgers: ordered, append-only collections of records, sealed into a hash chain like git commits.

use crate::ids::{LedgerId, SessionId};
use serde::{Deserialize, Serialize};

use crate::canonical::sha256_hex;

/// Whether records can still be appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LedgerState {
    /// Records can be appended; positions only grow.
    Open,
    /// Immutable: root and ledger hash are fixed.
    Sealed,
}

impl LedgerState {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerState::Open => "open",
            LedgerState::Sealed => "sealed",
        }
    }
}

/// A ledger as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    /// UUIDv7.
    pub ledger_id: LedgerId,
    /// The session (branch) this ledger belongs to.
    pub session_id: SessionId,
    /// Human-readable label, e.g. `turn-3-out`.
    pub label: String,
    /// Lineage, like git commit parents. Parents are always sealed.
    pub parent_ids: Vec<LedgerId>,
    /// Open or sealed.
    pub state: LedgerState,
    /// How many records are in it.
    pub record_count: u64,
    /// RFC 6962 Merkle root over the member records' leaves; set when sealed.
    pub root_hash: Option<String>,
    /// Hash committing to root, parents' ledger hashes, label, session and times; set when sealed.
    pub ledger_hash: Option<String>,
    /// When it was opened.
    pub created_at: String,
    /// When it was sealed.
    pub sealed_at: Option<String>,
}

/// A parent as the chain commits to it: its id and its own ledger hash.
///
/// Ids here (and in [`LedgerHeader`]) are the text the hash commits to, not a
/// [`LedgerId`]: `kura verify` and `kura verify-proof` hash exactly the text
/// stored or received, so a tampered id shows as a wrong hash rather than a parse error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentRef {
    /// The parent ledger's id.
    pub ledger_id: String,
    /// The parent ledger's `ledger_hash`.
    pub ledger_hash: String,
}

/// Everything a sealed ledger's hash commits to besides its root and size (its ids as the
/// committed text; see [`ParentRef`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerHeader {
    /// The ledger's id.
    pub ledger_id: String,
    /// Its session.
    pub session_id: String,
    /// Its label.
    pub label: String,
    /// Its parents, each with the parent's own ledger hash.
    pub parents: Vec<ParentRef>,
    /// When it was opened.
    pub created_at: String,
    /// When it was sealed.
    pub sealed_at: String,
}

/// What a ledger hash commits to, serialized with RFC 8785.
#[derive(Serialize)]
struct LedgerHashInput<'a> {
    kind: &'static str,
    #[serde(flatten)]
    header: &'a LedgerHeader,
    record_count: u64,
    root_hash: &'a str,
}

impl LedgerHeader {
    /// The chained hash of a sealed ledger. Because it includes every parent's ledger hash,
    /// a session head's hash commits to the session's whole history; because it includes
    /// the record count, an inclusion proof cannot lie about the tree size.
    pub fn ledger_hash(&self, record_count: u64, root_hash: &str) -> String {
        let input = LedgerHashInput {
            kind: "kura.ledger.v1",
            header: self,
            record_count,
            root_hash,
        };
        // Strings, string pairs and one integer always canonicalize.
        sha256_hex(&serde_json_canonicalizer::to_vec(&input).unwrap_or_default())
    }
}

/// Convenience form of [`LedgerHeader::ledger_hash`].
#[allow(clippy::too_many_arguments)]
pub fn ledger_hash(
    ledger_id: &str,
    session_id: &str,
    label: &str,
    parents: &[ParentRef],
    record_count: u64,
    root_hash: &str,
    created_at: &str,
    sealed_at: &str,
) -> String {
    LedgerHeader {
        ledger_id: ledger_id.into(),
        session_id: session_id.into(),
        label: label.into(),
        parents: parents.to_vec(),
        created_at: created_at.into(),
        sealed_at: sealed_at.into(),
    }
    .ledger_hash(record_count, root_hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> String {
        ledger_hash("l", "s", "lab", &[], 3, "r", "t0", "t1")
    }

    #[test]
    fn every_input_changes_the_hash() {
        let p = [ParentRef {
            ledger_id: "p".into(),
            ledger_hash: "ph".into(),
        }];
        let p2 = [ParentRef {
            ledger_id: "p".into(),
            ledger_hash: "ph2".into(),
        }];
        let h = base();
        assert_eq!(h, base());
        for other in [
            ledger_hash("l2", "s", "lab", &[], 3, "r", "t0", "t1"),
            ledger_hash("l", "s2", "lab", &[], 3, "r", "t0", "t1"),
            ledger_hash("l", "s", "lab2", &[], 3, "r", "t0", "t1"),
            ledger_hash("l", "s", "lab", &p, 3, "r", "t0", "t1"),
            ledger_hash("l", "s", "lab", &[], 4, "r", "t0", "t1"),
            ledger_hash("l", "s", "lab", &[], 3, "r2", "t0", "t1"),
            ledger_hash("l", "s", "lab", &[], 3, "r", "t2", "t1"),
            ledger_hash("l", "s", "lab", &[], 3, "r", "t0", "t2"),
        ] {
            assert_ne!(h, other);
        }
        assert_ne!(
            ledger_hash("l", "s", "lab", &p, 3, "r", "t0", "t1"),
            ledger_hash("l", "s", "lab", &p2, 3, "r", "t0", "t1"),
            "a parent's hash is part of the child's"
        );
    }
}
