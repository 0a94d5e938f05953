//! RFC 6962 Merkle trees (leaf = H(0x00‖d), node = H(0x01‖l‖r)) on `rs_merkle`, with inclusion proofs.

use rs_merkle::{Hasher, MerkleProof, MerkleTree};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A 32-byte SHA-256 digest.
pub type Hash = [u8; 32];

/// `rs_merkle` hasher with RFC 6962 interior-node domain separation. The odd node at the
/// end of a level is carried up unchanged, which makes `rs_merkle`'s bottom-up tree equal
/// to RFC 6962's recursive definition.
#[derive(Clone, Debug)]
pub struct Rfc6962;

impl Hasher for Rfc6962 {
    type Hash = Hash;

    fn hash(data: &[u8]) -> Hash {
        Sha256::digest(data).into()
    }

    fn concat_and_hash(left: &Hash, right: Option<&Hash>) -> Hash {
        match right {
            Some(right) => {
                let mut h = Sha256::new();
                h.update([0x01]);
                h.update(left);
                h.update(right);
                h.finalize().into()
            }
            None => *left,
        }
    }
}

/// RFC 6962 leaf hash: SHA-256(0x00 ‖ data).
pub fn leaf_hash(data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0x00]);
    h.update(data);
    h.finalize().into()
}

/// RFC 6962 root over already-hashed leaves. The empty tree's root is SHA-256 of nothing.
pub fn root(leaf_hashes: &[Hash]) -> Hash {
    if leaf_hashes.is_empty() {
        return Sha256::digest([]).into();
    }
    MerkleTree::<Rfc6962>::from_leaves(leaf_hashes)
        .root()
        .unwrap_or_else(|| Sha256::digest([]).into())
}

/// The audit path (sibling hashes, leaf upwards) for the leaf at `index`, or `None` if
/// `index` is out of range.
pub fn audit_path(leaf_hashes: &[Hash], index: usize) -> Option<Vec<Hash>> {
    if index >= leaf_hashes.len() {
        return None;
    }
    let tree = MerkleTree::<Rfc6962>::from_leaves(leaf_hashes);
    Some(tree.proof(&[index]).proof_hashes().to_vec())
}

/// Length of the RFC 6962 audit path for leaf `index` in a tree of `size` leaves.
fn expected_path_len(index: usize, size: usize) -> usize {
    if size <= 1 {
        return 0;
    }
    let k = size.next_power_of_two() / 2; // largest power of two < size
    if index < k {
        1 + expected_path_len(index, k)
    } else {
        1 + expected_path_len(index - k, size - k)
    }
}

/// Why an inclusion proof was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The leaf index is not inside the tree.
    #[error("leaf index {index} is outside a tree of {size} leaves")]
    IndexOutOfRange {
        /// Claimed index.
        index: usize,
        /// Claimed tree size.
        size: usize,
    },
    /// The path has the wrong number of hashes for this index and size.
    #[error("audit path has {got} hashes; a leaf at {index} of {size} needs {want}")]
    WrongPathLength {
        /// Claimed index.
        index: usize,
        /// Claimed size.
        size: usize,
        /// Hashes supplied.
        got: usize,
        /// Hashes required.
        want: usize,
    },
    /// The path does not lead to the claimed root.
    #[error("audit path leads to root {computed}, not the expected {expected}")]
    RootMismatch {
        /// Root the path actually produces.
        computed: String,
        /// Root the proof claims.
        expected: String,
    },
}

/// Checks that `leaf` sits at `index` in the tree of `size` leaves whose root is `root`.
pub fn verify_inclusion(
    leaf: &Hash,
    index: usize,
    size: usize,
    path: &[Hash],
    root: &Hash,
) -> Result<(), ProofError> {
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    let want = expected_path_len(index, size);
    if path.len() != want {
        return Err(ProofError::WrongPathLength {
            index,
            size,
            got: path.len(),
            want,
        });
    }
    let computed = MerkleProof::<Rfc6962>::new(path.to_vec())
        .root(&[index], &[*leaf], size)
        .map(hex::encode)
        .unwrap_or_else(|_| "<none>".into());
    if computed == hex::encode(root) {
        Ok(())
    } else {
        Err(ProofError::RootMismatch {
            computed,
            expected: hex::encode(root),
        })
    }
}

/// A self-contained inclusion proof, as `kura prove` prints it and `kura verify-proof` reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InclusionProof {
    /// Always `kura.inclusion.v1`.
    pub format: String,
    /// The ledger whose root this proves membership in.
    pub ledger_id: String,
    /// The ledger's chained hash, so the proof can be tied to a session head.
    pub ledger_hash: String,
    /// The rest of what the ledger hash commits to, so it can be recomputed offline.
    pub ledger: crate::ledger::LedgerHeader,
    /// The ledger's RFC 6962 root (hex).
    pub root_hash: String,
    /// Number of leaves (records) in the ledger.
    pub tree_size: usize,
    /// Position of the record in the ledger.
    pub leaf_index: usize,
    /// The record's raw columns; the leaf is recomputed from these.
    pub record: crate::record::OwnedColumns,
    /// Sibling hashes from the leaf up (hex).
    pub audit_path: Vec<String>,
    /// The next link, when asked for: the ledger's leaf in the store's seal log, proved
    /// included in a signed checkpoint (checked with the log's verifier key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal_log: Option<SealLogLink>,
}

/// Ledger → checkpoint: the ledger's seal-log leaf and its RFC 6962 inclusion proof in the
/// tree a signed checkpoint commits to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealLogLink {
    /// The leaf's position in the seal log.
    pub leaf_index: u64,
    /// The leaf's data: RFC 8785 JSON of `{ledger_hash, ledger_id, session_id}`.
    pub leaf_data: String,
    /// Sibling hashes from the leaf up to the checkpoint's root (hex).
    pub audit_path: Vec<String>,
    /// The signed checkpoint (a c2sp.org/signed-note with a tlog-checkpoint body).
    pub checkpoint: String,
}

impl InclusionProof {
    /// The format tag this version writes and accepts.
    pub const FORMAT: &'static str = "kura.inclusion.v1";

    /// Checks the proof end to end: the record's content hash, its leaf, the audit path to
    /// `root_hash`, the ledger hash over (header, size, root) — and, when given, that
    /// `trusted` (a root hash or a ledger hash the verifier got elsewhere) is what the proof
    /// leads to.
    pub fn verify(&self, trusted: Option<&str>) -> Result<(), String> {
        if self.format != Self::FORMAT {
            return Err(format!("unknown proof format {:?}", self.format));
        }
        if self.ledger.ledger_id != self.ledger_id {
            return Err("ledger header is for another ledger".into());
        }
        let recomputed_ledger = self
            .ledger
            .ledger_hash(self.tree_size as u64, &self.root_hash);
        if !recomputed_ledger.eq_ignore_ascii_case(&self.ledger_hash) {
            return Err(format!(
                "ledger hash over this header, size {} and root is {recomputed_ledger}, not {}",
                self.tree_size, self.ledger_hash
            ));
        }
        let cols = self.record.as_columns();
        let recomputed = cols.recompute_hash()?;
        if recomputed != self.record.hash {
            return Err(format!(
                "record {} content hash is {recomputed}, but the proof says {}",
                self.record.record_id, self.record.hash
            ));
        }
        if let Some(trusted) = trusted
            && !trusted.eq_ignore_ascii_case(&self.root_hash)
            && !trusted.eq_ignore_ascii_case(&self.ledger_hash)
        {
            return Err(format!(
                "proof leads to root {} / ledger hash {}, neither is the trusted {trusted}",
                self.root_hash, self.ledger_hash
            ));
        }
        let root = decode_hash(&self.root_hash).ok_or("root_hash is not 32 bytes of hex")?;
        let path = self
            .audit_path
            .iter()
            .map(|h| {
                decode_hash(h)
                    .ok_or_else(|| format!("audit path entry {h:?} is not 32 bytes of hex"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let leaf = leaf_hash(&cols.leaf_bytes());
        verify_inclusion(&leaf, self.leaf_index, self.tree_size, &path, &root)
            .map_err(|e| e.to_string())
    }
}

/// Parses 64 hex characters into a digest.
pub fn decode_hash(text: &str) -> Option<Hash> {
    let bytes = hex::decode(text).ok()?;
    bytes.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Vectors {
        leaves_hex: Vec<String>,
        roots_by_size: Vec<String>,
        inclusion: Vec<Inclusion>,
    }

    #[derive(Deserialize)]
    struct Inclusion {
        leaf_index: usize,
        tree_size: usize,
        leaf_hash: String,
        root: String,
        audit_path: Vec<String>,
    }

    fn vectors() -> Vectors {
        serde_json::from_str(include_str!("../tests/data/rfc6962.json")).expect("test vectors")
    }

    fn leaves(v: &Vectors) -> Vec<Hash> {
        v.leaves_hex
            .iter()
            .map(|h| leaf_hash(&hex::decode(h).expect("hex")))
            .collect()
    }

    #[test]
    fn roots_match_rfc6962_vectors_for_sizes_0_to_8() {
        let v = vectors();
        let all = leaves(&v);
        assert_eq!(v.roots_by_size.len(), 9);
        for (size, expected) in v.roots_by_size.iter().enumerate() {
            assert_eq!(&hex::encode(root(&all[..size])), expected, "size {size}");
        }
    }

    #[test]
    fn audit_paths_match_rfc6962_vectors_and_verify() {
        let v = vectors();
        let all = leaves(&v);
        assert!(!v.inclusion.is_empty());
        for case in &v.inclusion {
            let tree = &all[..case.tree_size];
            assert_eq!(hex::encode(tree[case.leaf_index]), case.leaf_hash);
            let path = audit_path(tree, case.leaf_index).expect("in range");
            let path_hex: Vec<String> = path.iter().map(hex::encode).collect();
            assert_eq!(
                path_hex, case.audit_path,
                "index {} size {}",
                case.leaf_index, case.tree_size
            );
            let root = decode_hash(&case.root).expect("root hex");
            verify_inclusion(
                &tree[case.leaf_index],
                case.leaf_index,
                case.tree_size,
                &path,
                &root,
            )
            .expect("genuine proof verifies");
        }
    }

    #[test]
    fn forged_proofs_are_rejected() {
        let v = vectors();
        let all = leaves(&v);
        let tree = &all[..7];
        let r = root(tree);
        let path = audit_path(tree, 2).expect("in range");

        // Wrong index: the same path claimed for a neighbour.
        assert!(matches!(
            verify_inclusion(&tree[2], 3, 7, &path, &r),
            Err(ProofError::RootMismatch { .. })
        ));
        // Another leaf presented with this leaf's path.
        assert!(matches!(
            verify_inclusion(&tree[3], 2, 7, &path, &r),
            Err(ProofError::RootMismatch { .. })
        ));
        // Duplicated leaf: the leaf hash appended to its own path.
        let mut dup = path.clone();
        dup.push(tree[2]);
        assert!(matches!(
            verify_inclusion(&tree[2], 2, 7, &dup, &r),
            Err(ProofError::WrongPathLength { .. })
        ));
        // Wrong size, smaller and larger. (Sizes 5..=8 give leaf 2 the same path shape, so
        // RFC 6962 alone cannot tell them apart: Kura binds the size through the ledger hash,
        // which `InclusionProof::verify` checks — see `proof_with_wrong_size_fails_ledger_hash`.)
        for size in [3, 4, 9, 16, 17] {
            assert!(
                verify_inclusion(&tree[2], 2, size, &path, &r).is_err(),
                "size {size} accepted"
            );
        }
        // Index beyond the tree.
        assert!(matches!(
            verify_inclusion(&tree[2], 7, 7, &path, &r),
            Err(ProofError::IndexOutOfRange { .. })
        ));
        // A flipped bit in a sibling.
        let mut flipped = path.clone();
        flipped[0][0] ^= 1;
        assert!(matches!(
            verify_inclusion(&tree[2], 2, 7, &flipped, &r),
            Err(ProofError::RootMismatch { .. })
        ));
        // A tree where leaf 2 is duplicated into slot 3 must not let slot-3 proofs pass for 2.
        let mut dup_tree = tree.to_vec();
        dup_tree[3] = dup_tree[2];
        let dup_root = root(&dup_tree);
        let p3 = audit_path(&dup_tree, 3).expect("in range");
        assert!(verify_inclusion(&dup_tree[3], 3, 7, &p3, &dup_root).is_ok());
        assert!(verify_inclusion(&dup_tree[2], 3, 7, &p3, &r).is_err());
    }

    #[test]
    fn every_leaf_of_every_size_up_to_40_proves() {
        let all: Vec<Hash> = (0u32..40).map(|i| leaf_hash(&i.to_be_bytes())).collect();
        for size in 1..=all.len() {
            let tree = &all[..size];
            let r = root(tree);
            for i in 0..size {
                let p = audit_path(tree, i).expect("in range");
                assert_eq!(p.len(), expected_path_len(i, size));
                verify_inclusion(&tree[i], i, size, &p, &r).expect("verifies");
            }
        }
    }

    fn sample_proof() -> InclusionProof {
        use crate::record::{NewRecord, RecordType};
        let mut leaves = Vec::new();
        let mut cols = Vec::new();
        for i in 0..7 {
            let rec = NewRecord::new(
                RecordType::AgentThought,
                crate::record::Content::text(format!("step {i}")),
                "agent:test",
            );
            let parts = rec.validate().expect("valid");
            let c = crate::record::OwnedColumns {
                record_id: format!("00000000-0000-7000-8000-00000000000{i}"),
                hash: parts.hash,
                record_type: "agent.thought".into(),
                content: parts.content,
                author_id: "agent:test".into(),
                metadata: parts.metadata,
                created_at: "2026-11-21T00:00:00.000000Z".into(),
            };
            leaves.push(leaf_hash(&c.as_columns().leaf_bytes()));
            cols.push(c);
        }
        let r = hex::encode(root(&leaves));
        let header = crate::ledger::LedgerHeader {
            ledger_id: "L".into(),
            session_id: "S".into(),
            label: "turn".into(),
            parents: vec![],
            created_at: "t0".into(),
            sealed_at: "t1".into(),
        };
        InclusionProof {
            format: InclusionProof::FORMAT.into(),
            ledger_id: "L".into(),
            ledger_hash: header.ledger_hash(7, &r),
            ledger: header,
            root_hash: r,
            tree_size: 7,
            leaf_index: 2,
            record: cols[2].clone(),
            audit_path: audit_path(&leaves, 2)
                .expect("in range")
                .iter()
                .map(hex::encode)
                .collect(),
            seal_log: None,
        }
    }

    #[test]
    fn genuine_inclusion_proof_verifies_against_root_or_ledger_hash() {
        let p = sample_proof();
        p.verify(None).expect("verifies");
        p.verify(Some(&p.root_hash.clone())).expect("trusted root");
        p.verify(Some(&p.ledger_hash.clone()))
            .expect("trusted ledger hash");
        let err = p.verify(Some(&"0".repeat(64))).expect_err("untrusted root");
        assert!(err.contains("neither is the trusted"), "{err}");
    }

    #[test]
    fn proof_with_wrong_size_fails_ledger_hash() {
        let mut p = sample_proof();
        p.tree_size = 8; // same path shape as 7 for leaf 2
        let err = p.verify(None).expect_err("wrong size");
        assert!(
            err.contains("ledger hash over this header, size 8"),
            "{err}"
        );
    }

    #[test]
    fn proof_with_tampered_record_fails() {
        let mut p = sample_proof();
        p.record.metadata = r#"{"k":"v"}"#.into();
        let err = p.verify(None).expect_err("tampered metadata");
        assert!(err.contains("audit path leads to root"), "{err}");
        let mut p = sample_proof();
        p.record.content = r#"{"text":"step 9"}"#.into();
        let err = p.verify(None).expect_err("tampered content");
        assert!(err.contains("content hash is"), "{err}");
        let mut p = sample_proof();
        p.leaf_index = 3;
        assert!(p.verify(None).is_err(), "wrong index");
    }
}
