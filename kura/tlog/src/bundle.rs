//! Checking a session's bundle (`kura verify --bundle`) with no database: every record's
//! hash and leaf, each ledger's Merkle root and chained hash, its parents' hashes, its seal,
//! its leaf in the seal log and that leaf's inclusion in the signed checkpoint — each
//! failure named, as the browser verifier names them.

use std::collections::HashMap;

use base64::Engine as _;
use proto::bundle::{BUNDLE_FORMAT, Bundle, BundledRecord};

/// One thing that does not hold.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// Which check: `log_key`, `checkpoint_signature`, `record_hash`, `content_not_canonical`,
    /// `record_leaf`, `merkle_root`, `ledger_hash`, `parent_hash`, `seal_signature`,
    /// `sealer_unknown`, `seal_log_leaf`, `seal_log_inclusion`.
    pub check: &'static str,
    /// The record, ledger or checkpoint at fault.
    pub id: String,
    /// What was found.
    pub detail: String,
}

/// What a check of a bundle found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Checked {
    /// Ledgers checked.
    pub ledgers: usize,
    /// Records checked (a redacted one's kept leaf counts).
    pub records: usize,
    /// The checkpoint's origin and size, when its signature verified.
    pub checkpoint: Option<(String, u64)>,
    /// Records whose content was erased under a redaction (their kept leaves checked).
    pub redacted: usize,
    /// Every failure.
    pub problems: Vec<Problem>,
}

impl Checked {
    fn fail(&mut self, check: &'static str, id: &str, detail: impl Into<String>) {
        self.problems.push(Problem {
            check,
            id: id.to_owned(),
            detail: detail.into(),
        });
    }
}

/// Checks `b`; its checkpoint against `trusted` (the log key the checker trusts), else
/// against the key the bundle names (said: the checker should compare it).
pub fn verify(b: &Bundle, trusted: Option<&str>) -> Checked {
    let mut out = Checked::default();
    if b.format != BUNDLE_FORMAT {
        out.fail("format", &b.format, format!("not a {BUNDLE_FORMAT} bundle"));
        return out;
    }
    if let Some(t) = trusted.filter(|t| t.trim() != b.log_key.trim()) {
        out.fail(
            "log_key",
            "checkpoint",
            format!(
                "the bundle's log key is {}, not the one trusted ({t})",
                b.log_key
            ),
        );
    }
    let cp = match crate::checkpoint::open(&b.checkpoint, trusted.unwrap_or(&b.log_key)) {
        Ok(cp) => Some(cp),
        Err(e) => {
            out.fail("checkpoint_signature", "checkpoint", e.to_string());
            None
        }
    };
    out.checkpoint = cp.as_ref().map(|c| (c.origin.clone(), c.size));
    let hashes: HashMap<&str, &str> = b
        .ledgers
        .iter()
        .map(|l| (l.header.ledger_id.as_str(), l.ledger_hash.as_str()))
        .collect();
    coverage(&mut out, b, &hashes);
    for l in &b.ledgers {
        out.ledgers += 1;
        ledger(&mut out, b, l, &hashes);
        if l.seal.is_none() && b.signed_from.is_some_and(|from| l.seal_log.0 >= from) {
            out.fail(
                "sealer_missing",
                &l.header.ledger_id,
                "sealed without a signature after sealing began to be signed",
            );
        }
        if let Some(cp) = &cp {
            seal_log(&mut out, l, cp);
        }
    }
    out
}

/// Each record's hash checked, and its leaf (a redacted one's kept leaf).
fn leaves(out: &mut Checked, records: &[BundledRecord]) -> Vec<[u8; 32]> {
    let mut leaves = Vec::with_capacity(records.len());
    for r in records {
        out.records += 1;
        match r {
            BundledRecord::Whole(c) => {
                let cols = c.as_columns();
                if !cols.hash_matches() {
                    match cols.recompute_hash() {
                        Ok(h) if h.eq_ignore_ascii_case(&c.hash) => out.fail(
                            "content_not_canonical",
                            &c.record_id,
                            "the content is not in its RFC 8785 form",
                        ),
                        _ => out.fail(
                            "record_hash",
                            &c.record_id,
                            "the record's content, type or author does not hash to its hash",
                        ),
                    }
                }
                leaves.push(cols.leaf_hash());
            }
            BundledRecord::Redacted {
                record_id,
                redacted_leaf,
            } => {
                out.redacted += 1;
                match hex::decode(redacted_leaf)
                    .ok()
                    .and_then(|b| <[u8; 32]>::try_from(b).ok())
                {
                    Some(h) => leaves.push(h),
                    None => out.fail(
                        "record_leaf",
                        record_id,
                        "the kept leaf of a redacted record is not a 32-byte hex hash",
                    ),
                }
            }
        }
    }
    leaves
}

/// The bundle is the session it names: at least one of its ledgers is the session's, no
/// ledger twice, every other one an ancestor of those, every parent there.
fn coverage(out: &mut Checked, b: &Bundle, hashes: &HashMap<&str, &str>) {
    if hashes.len() != b.ledgers.len() {
        out.fail(
            "duplicate_ledger",
            &b.session_id,
            "a ledger is in the bundle twice",
        );
    }
    let own: Vec<&str> = b
        .ledgers
        .iter()
        .filter(|l| l.header.session_id == b.session_id)
        .map(|l| l.header.ledger_id.as_str())
        .collect();
    if own.is_empty() {
        out.fail(
            "session",
            &b.session_id,
            "no ledger of the session the bundle names",
        );
    }
    let by_id: HashMap<&str, &proto::bundle::BundledLedger> = b
        .ledgers
        .iter()
        .map(|l| (l.header.ledger_id.as_str(), l))
        .collect();
    let mut reached: std::collections::HashSet<&str> = own.iter().copied().collect();
    let mut todo = own;
    while let Some(id) = todo.pop() {
        for p in by_id
            .get(id)
            .map(|l| l.header.parents.as_slice())
            .unwrap_or_default()
        {
            if !by_id.contains_key(p.ledger_id.as_str()) {
                out.fail(
                    "parent_missing",
                    id,
                    format!("its parent {} is not in the bundle", p.ledger_id),
                );
            } else if reached.insert(p.ledger_id.as_str()) {
                todo.push(p.ledger_id.as_str());
            }
        }
    }
    for l in &b.ledgers {
        if !reached.contains(l.header.ledger_id.as_str()) {
            out.fail(
                "unrelated_ledger",
                &l.header.ledger_id,
                "neither the session's nor an ancestor of its ledgers",
            );
        }
    }
}

/// One ledger: its records, root, chained hash, parents and seal.
fn ledger(
    out: &mut Checked,
    b: &Bundle,
    l: &proto::bundle::BundledLedger,
    hashes: &HashMap<&str, &str>,
) {
    let id = l.header.ledger_id.as_str();
    let leaves = leaves(out, &l.records);
    let root = hex::encode(proto::merkle::root(&leaves));
    if !root.eq_ignore_ascii_case(&l.root_hash) {
        out.fail(
            "merkle_root",
            id,
            format!("the records' leaves make root {root}, not {}", l.root_hash),
        );
    }
    let hash = l.header.ledger_hash(l.records.len() as u64, &l.root_hash);
    if !hash.eq_ignore_ascii_case(&l.ledger_hash) {
        out.fail(
            "ledger_hash",
            id,
            format!("the ledger hashes to {hash}, not {}", l.ledger_hash),
        );
    }
    for p in &l.header.parents {
        if let Some(h) = hashes
            .get(p.ledger_id.as_str())
            .filter(|h| !h.eq_ignore_ascii_case(&p.ledger_hash))
        {
            out.fail(
                "parent_hash",
                id,
                format!(
                    "parent {} has hash {h}, not the {} this ledger commits to",
                    p.ledger_id, p.ledger_hash
                ),
            );
        }
    }
    if let Some((sealer, sig)) = &l.seal {
        let verified = nkeys::KeyPair::from_public_key(sealer)
            .map_err(|e| e.to_string())
            .and_then(|k| {
                let sig = base64::engine::general_purpose::STANDARD
                    .decode(sig)
                    .map_err(|e| e.to_string())?;
                k.verify(&crate::sealer::signing_bytes(&l.ledger_hash), &sig)
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = verified {
            out.fail(
                "seal_signature",
                id,
                format!("the seal by {sealer} does not verify: {e}"),
            );
        } else if !b.sealers.is_empty() && !b.sealers.contains_key(sealer) {
            out.fail(
                "sealer_unknown",
                id,
                format!("sealed by {sealer}, a key the bundle's keyring does not name"),
            );
        }
    }
}

/// The ledger's leaf in the seal log names it, and is included in the checkpoint.
fn seal_log(out: &mut Checked, l: &proto::bundle::BundledLedger, cp: &crate::checkpoint::Signed) {
    let id = l.header.ledger_id.as_str();
    let (index, data, path) = &l.seal_log;
    let leaf: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
    let names = |k: &str, want: &str| {
        leaf.get(k)
            .and_then(|v| v.as_str())
            .is_some_and(|v| v.eq_ignore_ascii_case(want))
    };
    if !names("ledger_id", id)
        || !names("ledger_hash", &l.ledger_hash)
        || !names("session_id", &l.header.session_id)
    {
        out.fail(
            "seal_log_leaf",
            id,
            "the seal-log leaf names another ledger, hash or session",
        );
        return;
    }
    let path: Option<Vec<tlog_tiles::Hash>> = path
        .iter()
        .map(|h| {
            hex::decode(h)
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .map(tlog_tiles::Hash)
        })
        .collect();
    let included = path.is_some_and(|p| {
        tlog_tiles::check_record(
            &p,
            cp.size,
            cp.root,
            *index,
            tlog_tiles::record_hash(data.as_bytes()),
        )
        .is_ok()
    });
    if !included {
        out.fail(
            "seal_log_inclusion",
            id,
            format!(
                "leaf {index} is not in the checkpoint's tree of {} leaves",
                cp.size
            ),
        );
    }
}
