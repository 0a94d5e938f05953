//! RFC 6962 Merkle trees (leaf = H(0x00‖d), node = H(0x01‖l‖r)) on `rs_merkle`, with inclusion proofs.

use rs_merkle::{Hasher, MerkleProof, MerkleTree};
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
}
