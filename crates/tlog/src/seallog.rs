//! The seal log: every sealed ledger, in seal order, as a leaf of one RFC 6962 log per
//! store, kept the way Go's tlog and C2SP tlog-tiles keep one (the hash of every complete
//! subtree by stored-hash index; the math is `tlog_tiles`'), so an append writes about two
//! hashes however long the log is and a proof reads about log2(n) of them.
//!
//! A leaf's data is the RFC 8785 JSON `{"ledger_hash","ledger_id","session_id"}` of a
//! sealed ledger. Session heads are sealed ledgers, so every head a ref log ever named is a
//! leaf; a rewind (the head moved back to an older ledger) adds no leaf — it names one the
//! log already holds, and the ref log's own chain records the move.

use proto::{LedgerId, SessionId};

#[cfg(feature = "sqlite")]
mod stored;
#[cfg(feature = "sqlite")]
pub use stored::{
    append_in, backfill_in, check_in, consistency_proof_in, inclusion_proof_in, leaf_of_in,
    root_in, size_in,
};

/// The leaf data of a sealed ledger.
pub fn leaf_data(ledger_id: LedgerId, session_id: SessionId, ledger_hash: &str) -> String {
    let v = serde_json::json!({
        "ledger_hash": ledger_hash,
        "ledger_id": ledger_id.to_string(),
        "session_id": session_id.to_string(),
    });
    // Three strings always canonicalise; the fallback is never reached.
    proto::canonical::canonical_json(&v).unwrap_or_default()
}
