//! `kura bundle`: a session's proof in one file — its ledgers and their ancestors, every
//! record's stored columns, each seal, and each ledger's leaf in the seal log proved
//! included in a signed checkpoint — for `kura verify --bundle` or a browser.

use std::collections::{BTreeMap, HashSet};

use kura_store::{Result, Store, StoreError};
use kura_tlog::storage::LogStorage as _;
use proto::bundle::{BUNDLE_FORMAT, Bundle, BundledLedger, BundledRecord};
use proto::ledger::{LedgerHeader, LedgerState, ParentRef};
use proto::{LedgerId, SessionId};

/// The bundle of `session`, every ledger proved included in the checkpoint `note` (signed
/// by `vkey`); `sealers` names sealing keys.
pub fn build(
    store: &Store,
    session: SessionId,
    note: &str,
    vkey: &str,
    sealers: BTreeMap<String, String>,
) -> Result<Bundle> {
    let cp = kura_tlog::checkpoint::open(note, vkey)?;
    let log = store.seal_log();
    if let Err(why) = kura_tlog::checkpoint::extends(&log, &cp)? {
        return Err(StoreError::Invalid(format!(
            "the store does not extend that checkpoint: {why}"
        )));
    }
    let s = store.read_session(session)?;
    // The session's sealed ledgers and every ancestor they grew from.
    let mut ids: HashSet<LedgerId> = HashSet::new();
    for l in store.session_ledgers(session)? {
        if l.state == LedgerState::Sealed {
            ids.extend(kura_store::branch::ancestors(store, l.ledger_id)?);
        }
    }
    let redacted = kura_store::redact::redactions(store)?;
    let mut ledgers = Vec::new();
    for id in ids {
        let l = store.read_ledger(id)?;
        let (Some(root_hash), Some(ledger_hash), Some(sealed_at)) = (
            l.root_hash.clone(),
            l.ledger_hash.clone(),
            l.sealed_at.clone(),
        ) else {
            continue;
        };
        let (index, leaf) = log.leaf_of(id)?.ok_or_else(|| {
            StoreError::Invalid(format!("ledger {id} has no leaf in the seal log"))
        })?;
        if index >= cp.size {
            return Err(StoreError::Invalid(format!(
                "ledger {id} was sealed after the checkpoint (leaf {index}, size {}): sign a newer one (`kura checkpoint`) first",
                cp.size
            )));
        }
        let path = kura_tlog::seallog::inclusion_proof(&log, index, cp.size)?;
        let mut parents = Vec::new();
        for p in &l.parent_ids {
            let hash = store.read_ledger(*p)?.ledger_hash.unwrap_or_default();
            parents.push(ParentRef {
                ledger_id: p.to_string(),
                ledger_hash: hash,
            });
        }
        let records = store
            .members(id)?
            .into_iter()
            .map(|m| match redacted.get(&m.columns.record_id) {
                Some(r) => BundledRecord::Redacted {
                    record_id: m.columns.record_id,
                    redacted_leaf: r.leaf_hash.clone(),
                },
                None => BundledRecord::Whole(m.columns),
            })
            .collect();
        let seal = log
            .seal_of(&id.to_string())?
            .and_then(|r| Some((r.sealer?, r.signature?)));
        ledgers.push((
            index,
            BundledLedger {
                header: LedgerHeader {
                    ledger_id: id.to_string(),
                    session_id: l.session_id.to_string(),
                    label: l.label,
                    parents,
                    created_at: l.created_at,
                    sealed_at,
                },
                root_hash,
                ledger_hash,
                records,
                seal,
                seal_log: (index, leaf, path.iter().map(|h| hex::encode(h.0)).collect()),
            },
        ));
    }
    ledgers.sort_by_key(|(i, _)| *i);
    Ok(Bundle {
        format: BUNDLE_FORMAT.into(),
        session_id: session.to_string(),
        label: s.label,
        checkpoint: note.to_owned(),
        log_key: vkey.to_owned(),
        sealers,
        signed_from: log.signing_since()?.map(|n| n.max(0) as u64),
        ledgers: ledgers.into_iter().map(|(_, l)| l).collect(),
    })
}
