//! Checking a proof's ledger → checkpoint link offline: the seal-log leaf, its audit path
//! and the signed checkpoint it leads to (the record → ledger part is proto's).

use proto::proof::InclusionProof;

use crate::error::{Result, invalid};

/// What a checked chain ends in: the checkpoint the ledger is included in.
#[derive(Debug, Clone, PartialEq)]
pub struct Chained {
    /// The log's name.
    pub origin: String,
    /// The checkpoint's tree size.
    pub size: u64,
    /// The ledger's leaf index.
    pub leaf_index: u64,
}

/// Checks the ledger → checkpoint link of `proof` offline (the record → ledger part is
/// [`InclusionProof::verify`]): the leaf names this ledger and its hash, the audit path
/// leads from the leaf to the checkpoint's root, and the checkpoint is signed by `vkey`.
pub fn verify_link(proof: &InclusionProof, vkey: &str) -> Result<Chained> {
    let link = proof.seal_log.as_ref().ok_or_else(|| {
        invalid("the proof has no seal-log link (make it with `kura prove --checkpoint`)")
    })?;
    let cp = crate::checkpoint::open(&link.checkpoint, vkey)?;
    let leaf: serde_json::Value = serde_json::from_str(&link.leaf_data)
        .map_err(|e| invalid(format!("the seal-log leaf is not JSON: {e}")))?;
    let names = |k: &str, want: &str| leaf.get(k).and_then(|v| v.as_str()) == Some(want);
    if !names("ledger_id", &proof.ledger_id)
        || !leaf
            .get("ledger_hash")
            .and_then(|v| v.as_str())
            .is_some_and(|h| h.eq_ignore_ascii_case(&proof.ledger_hash))
    {
        return Err(invalid(
            "the seal-log leaf is for another ledger or another ledger hash",
        ));
    }
    let mut path = Vec::with_capacity(link.audit_path.len());
    for h in &link.audit_path {
        let bytes: [u8; 32] = hex::decode(h)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| invalid("a seal-log audit path entry is not a 32-byte hex hash"))?;
        path.push(tlog_tiles::Hash(bytes));
    }
    let leaf_hash = tlog_tiles::record_hash(link.leaf_data.as_bytes());
    tlog_tiles::check_record(&path, cp.size, cp.root, link.leaf_index, leaf_hash).map_err(
        |_| {
            invalid(format!(
                "the ledger's leaf {} is not in checkpoint {} of size {}",
                link.leaf_index, cp.origin, cp.size
            ))
        },
    )?;
    Ok(Chained {
        origin: cp.origin,
        size: cp.size,
        leaf_index: link.leaf_index,
    })
}
