//! Inclusion proofs: show that a record sits in a sealed ledger, checkable offline (the
//! checking is `kura_tlog::proof`'s).

use proto::ledger::LedgerState;
use proto::merkle;
use proto::proof::InclusionProof;
use proto::{LedgerId, RecordId};

use crate::error::{Result, StoreError};
use crate::store::Store;

/// Builds the inclusion proof of `record_id` in the sealed ledger `ledger_id` (first
/// position if the record appears more than once).
pub fn prove(store: &Store, record_id: RecordId, ledger_id: LedgerId) -> Result<InclusionProof> {
    let ledger = store.read_ledger(ledger_id)?;
    store.read_record(record_id)?;
    let (LedgerState::Sealed, Some(root_hash), Some(ledger_hash), Some(sealed_at)) = (
        ledger.state,
        ledger.root_hash.clone(),
        ledger.ledger_hash.clone(),
        ledger.sealed_at.clone(),
    ) else {
        return Err(StoreError::Invalid(format!(
            "ledger {ledger_id} is still open: seal it before proving membership"
        )));
    };
    let members = store.members(ledger_id)?;
    let rid = record_id.to_string();
    let index = members
        .iter()
        .position(|m| m.columns.record_id == rid)
        .ok_or_else(|| {
            StoreError::Invalid(format!("record {record_id} is not in ledger {ledger_id}"))
        })?;
    // A redacted member's leaf is the one kept when its content was erased.
    let redacted = crate::redact::redactions(store)?;
    let leaves: Vec<merkle::Hash> = members
        .iter()
        .map(|m| match redacted.get(&m.columns.record_id) {
            Some(d) => merkle::decode_hash(&d.leaf_hash).unwrap_or_default(),
            None => m.columns.as_columns().leaf_hash(),
        })
        .collect();
    let path = merkle::audit_path(&leaves, index).unwrap_or_default();
    let conn = store.conn();
    let parents = crate::store::parent_refs_pub(conn, &ledger.parent_ids)?;
    Ok(InclusionProof {
        format: InclusionProof::FORMAT.into(),
        ledger_id: ledger_id.to_string(),
        ledger_hash,
        ledger: crate::store::header_pub(&ledger, parents, &sealed_at),
        root_hash,
        tree_size: members.len(),
        leaf_index: index,
        record: members[index].columns.clone(),
        audit_path: path.iter().map(hex::encode).collect(),
        seal_log: None,
        redacted: redacted.get(&rid).map(|d| proto::proof::RedactedLeaf {
            leaf_hash: d.leaf_hash.clone(),
            redaction: d.redaction.clone(),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreOptions;
    use proto::record::{Content, NewRecord, RecordType};

    #[test]
    fn every_member_of_every_size_proves_against_the_sealed_root() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s =
            Store::create(dir.path().join("p.db"), &StoreOptions::default()).expect("create");
        let session = s.create_session("p").expect("session");
        for size in [1usize, 2, 3, 5, 8, 13] {
            let l = s.open_ledger(session.session_id, "l", &[]).expect("open");
            let mut ids = Vec::new();
            for i in 0..size {
                let rec = NewRecord::new(
                    RecordType::AgentThought,
                    Content::text(format!("{size}/{i}")),
                    "agent:p",
                );
                ids.push(
                    s.append(l.ledger_id, &rec)
                        .expect("append")
                        .record
                        .record_id,
                );
            }
            let (sealed, _) = s.seal_ledger(l.ledger_id).expect("seal");
            for (i, id) in ids.iter().enumerate() {
                let p = prove(&s, *id, l.ledger_id).expect("prove");
                assert_eq!((p.leaf_index, p.tree_size), (i, size));
                p.verify(sealed.ledger_hash.as_deref())
                    .expect("proof verifies");
            }
        }
    }

    #[test]
    fn store_handles_are_send() {
        fn assert_send<T: Send>() {}
        assert_send::<Store>();
    }
}
