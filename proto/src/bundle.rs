//! A session's proof in one file (`kura bundle`): its ledgers with their records, each
//! ledger's seal and its leaf in the seal log proved included in a signed checkpoint, and
//! the keys to check it all — checked by `kura verify --bundle` and by a static page in a
//! browser, neither with a database.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::ledger::LedgerHeader;
use crate::record::OwnedColumns;

/// This format's name.
pub const BUNDLE_FORMAT: &str = "kura.bundle.v1";

/// A session, provable offline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// Always [`BUNDLE_FORMAT`].
    pub format: String,
    /// The session.
    pub session_id: String,
    /// Its label.
    pub label: String,
    /// The signed checkpoint (a C2SP signed note) every ledger is proved included in.
    pub checkpoint: String,
    /// The log's verifier key (`name+keyid+base64`), as the bundle's maker pinned it: a
    /// checker compares it with the one it trusts.
    pub log_key: String,
    /// Names for sealing keys (nkey → name), from the maker's keyring (its claim: a checker
    /// holds seals to its own keyring).
    #[serde(default)]
    pub sealers: BTreeMap<String, String>,
    /// The seal-log index from which every ledger is sealed with a signature (`None`: from
    /// the start).
    #[serde(default)]
    pub signed_from: Option<u64>,
    /// The ledgers, the session's own and the ancestors they grew from, oldest first.
    pub ledgers: Vec<BundledLedger>,
}

/// One sealed ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundledLedger {
    /// What its hash commits to besides its root and size.
    pub header: LedgerHeader,
    /// Its Merkle root over its records' leaves.
    pub root_hash: String,
    /// Its chained hash.
    pub ledger_hash: String,
    /// Its records in order, every stored column (a redacted one's leaf kept instead).
    pub records: Vec<BundledRecord>,
    /// Its seal: the sealing key (an nkey) and its Ed25519 signature (base64) over
    /// `kura.seal.v1\n<ledger_hash>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<(String, String)>,
    /// Its leaf in the seal log: index, leaf data (RFC 8785 JSON), audit path to the
    /// checkpoint's root (hex).
    pub seal_log: (u64, String, Vec<String>),
}

/// One record: its columns, or for a record erased under a signed redaction, its kept leaf.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BundledRecord {
    /// Every stored column.
    Whole(OwnedColumns),
    /// Erased: the leaf its columns had (hex).
    Redacted {
        /// Its id.
        record_id: String,
        /// The leaf hash kept.
        redacted_leaf: String,
    },
}
