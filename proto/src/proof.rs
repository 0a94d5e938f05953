//! A self-contained inclusion proof, record → ledger (→ seal log → signed checkpoint), as
//! `kura prove` prints it and `kura verify-proof` checks it offline: the record's columns,
//! the ledger header, the audit path. Built on [`crate::merkle`], [`crate::record`] and
//! [`crate::ledger`]; none of them depends on it.

use serde::{Deserialize, Serialize};

use crate::merkle::{ProofError, decode_hash, leaf_hash, verify_inclusion};
use crate::record::RecordError;

/// A self-contained inclusion proof, as `kura prove` prints it and `kura verify-proof` reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InclusionProof {
    /// Always `kura.inclusion.v1`.
    pub format: String,
    /// The ledger whose root this proves membership in (the text the seal-log leaf names,
    /// compared as received: see [`ParentRef`](crate::ParentRef)).
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
    /// When the record's content was erased: the leaf it had and the signed redaction. The
    /// proof then proves the ledger and the record's place and hash, not its content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted: Option<RedactedLeaf>,
}

/// A redacted record's kept leaf and the redaction that erased its content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactedLeaf {
    /// The record's RFC 6962 leaf as it was appended (hex).
    pub leaf_hash: String,
    /// The signed redaction (whose signer `verify-proof` checks against trusted people).
    pub redaction: crate::writ::Redaction,
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
    pub fn verify(&self, trusted: Option<&str>) -> Result<(), InclusionError> {
        if self.format != Self::FORMAT {
            return Err(InclusionError::Format(self.format.clone()));
        }
        if self.ledger.ledger_id != self.ledger_id {
            return Err(InclusionError::OtherLedger);
        }
        let recomputed_ledger = self
            .ledger
            .ledger_hash(self.tree_size as u64, &self.root_hash);
        if !recomputed_ledger.eq_ignore_ascii_case(&self.ledger_hash) {
            return Err(InclusionError::LedgerHash {
                size: self.tree_size,
                recomputed: recomputed_ledger,
                claimed: self.ledger_hash.clone(),
            });
        }
        let cols = self.record.as_columns();
        if let Some(r) = &self.redacted {
            let b = &r.redaction.body;
            if b.record_id != self.record.record_id || b.record_hash != self.record.hash {
                return Err(InclusionError::Redaction);
            }
        }
        let recomputed = match &self.redacted {
            Some(_) => self.record.hash.clone(),
            None => cols.recompute_hash()?,
        };
        if recomputed != self.record.hash {
            return Err(InclusionError::RecordHash {
                record_id: self.record.record_id.clone(),
                recomputed,
                claimed: self.record.hash.clone(),
            });
        }
        if let Some(trusted) = trusted
            && !trusted.eq_ignore_ascii_case(&self.root_hash)
            && !trusted.eq_ignore_ascii_case(&self.ledger_hash)
        {
            return Err(InclusionError::Untrusted {
                root_hash: self.root_hash.clone(),
                ledger_hash: self.ledger_hash.clone(),
                trusted: trusted.to_owned(),
            });
        }
        let root = decode_hash(&self.root_hash).ok_or(InclusionError::RootNotHex)?;
        let path = self
            .audit_path
            .iter()
            .map(|h| decode_hash(h).ok_or_else(|| InclusionError::PathNotHex(h.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        let leaf = match &self.redacted {
            Some(r) => decode_hash(&r.leaf_hash).ok_or(InclusionError::Redaction)?,
            None => leaf_hash(&cols.leaf_bytes()),
        };
        Ok(verify_inclusion(
            &leaf,
            self.leaf_index,
            self.tree_size,
            &path,
            &root,
        )?)
    }
}

/// Why an [`InclusionProof`] does not hold.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InclusionError {
    /// Not a format this version reads.
    #[error("unknown proof format {0:?}")]
    Format(String),
    /// The header names another ledger than the proof.
    #[error("ledger header is for another ledger")]
    OtherLedger,
    /// The ledger hash over (header, size, root) is not the one the proof claims.
    #[error("ledger hash over this header, size {size} and root is {recomputed}, not {claimed}")]
    LedgerHash {
        /// The proof's tree size.
        size: usize,
        /// The hash recomputed from the proof.
        recomputed: String,
        /// The hash the proof claims.
        claimed: String,
    },
    /// A redaction that names another record or hash, or a kept leaf that is not hex.
    #[error("the proof's redaction does not match its record")]
    Redaction,
    /// The record's columns do not form a record.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The record's content hash is not the one the proof claims.
    #[error("record {record_id} content hash is {recomputed}, but the proof says {claimed}")]
    RecordHash {
        /// The record.
        record_id: String,
        /// The hash recomputed from its columns.
        recomputed: String,
        /// The hash the proof claims.
        claimed: String,
    },
    /// The proof holds, but leads to neither the trusted root nor the trusted ledger hash.
    #[error(
        "proof leads to root {root_hash} / ledger hash {ledger_hash}, neither is the trusted {trusted}"
    )]
    Untrusted {
        /// The proof's root.
        root_hash: String,
        /// The proof's ledger hash.
        ledger_hash: String,
        /// What the verifier trusts.
        trusted: String,
    },
    /// `root_hash` is not a hash.
    #[error("root_hash is not 32 bytes of hex")]
    RootNotHex,
    /// An audit path entry is not a hash.
    #[error("audit path entry {0:?} is not 32 bytes of hex")]
    PathNotHex(String),
    /// The audit path does not lead from the leaf to the root.
    #[error(transparent)]
    Path(#[from] ProofError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::{audit_path, root};

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
            redacted: None,
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
        assert!(err.to_string().contains("neither is the trusted"), "{err}");
    }

    #[test]
    fn proof_with_wrong_size_fails_ledger_hash() {
        let mut p = sample_proof();
        p.tree_size = 8; // same path shape as 7 for leaf 2
        let err = p.verify(None).expect_err("wrong size");
        assert!(
            err.to_string()
                .contains("ledger hash over this header, size 8"),
            "{err}"
        );
    }

    #[test]
    fn proof_with_tampered_record_fails() {
        let mut p = sample_proof();
        p.record.metadata = r#"{"k":"v"}"#.into();
        let err = p.verify(None).expect_err("tampered metadata");
        assert!(
            err.to_string().contains("audit path leads to root"),
            "{err}"
        );
        let mut p = sample_proof();
        p.record.content = r#"{"text":"step 9"}"#.into();
        let err = p.verify(None).expect_err("tampered content");
        assert!(err.to_string().contains("content hash is"), "{err}");
        let mut p = sample_proof();
        p.leaf_index = 3;
        assert!(p.verify(None).is_err(), "wrong index");
    }
}
