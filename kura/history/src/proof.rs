//! Linking an inclusion proof (built by the store's `proof::prove`) to a signed checkpoint:
//! the ledger's leaf in the seal log, proved included in the checkpoint's tree, so the proof
//! checks against the log key alone.

use kura_store::store::parse_id;
use kura_store::{Result, Store, StoreError};
use proto::proof::{InclusionProof, SealLogLink};

/// Adds the next link to `proof`: its ledger's leaf in the seal log, proved included in the
/// tree of the signed checkpoint `note` (whose signature `vkey` must check). A ledger
/// sealed after the checkpoint cannot be linked to it yet.
pub fn link_to_checkpoint(
    store: &Store,
    proof: &mut InclusionProof,
    note: &str,
    vkey: &str,
) -> Result<()> {
    let cp = kura_tlog::checkpoint::open(note, vkey)?;
    let ledger_id = parse_id(&proof.ledger_id)?;
    let log = store.seal_log();
    let (index, leaf_data) =
        kura_tlog::storage::LogStorage::leaf_of(&log, ledger_id)?.ok_or_else(|| {
            StoreError::Invalid(format!("ledger {ledger_id} has no leaf in the seal log"))
        })?;
    if index >= cp.size {
        return Err(StoreError::Invalid(format!(
            "ledger {ledger_id} was sealed after that checkpoint (leaf {index}, checkpoint size {}); wait for the next checkpoint",
            cp.size
        )));
    }
    if let Err(why) = kura_tlog::checkpoint::extends(&log, &cp)? {
        return Err(StoreError::Invalid(format!(
            "the store does not extend that checkpoint: {why}"
        )));
    }
    let path = kura_tlog::seallog::inclusion_proof(&log, index, cp.size)?;
    proof.seal_log = Some(SealLogLink {
        leaf_index: index,
        leaf_data,
        audit_path: path.iter().map(|h| hex::encode(h.0)).collect(),
        checkpoint: note.to_owned(),
    });
    Ok(())
}
