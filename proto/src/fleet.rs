//! Replication between Pis: the subjects, stream, buckets and message bodies a Pi publishes
//! its sealed history with, and that every receiver re-verifies before it writes anything.
//!
//! Not a doorbell: these subjects are their own tree (`kura.repl.v1.<pi>.…`, apart from the
//! `oclaw.v1` doorbells), carry sealed bytes, and no daemon acts on them until a receiver has
//! recomputed every hash and checked the origin's signed checkpoint (PROTOCOL.md, "A fleet").

use serde::{Deserialize, Serialize};

use crate::record::OwnedColumns;
use crate::{LedgerId, SessionId};

/// The replication subjects' prefix.
pub const SUBJECT_PREFIX: &str = "kura.repl.v1";
/// The hub's JetStream domain: a Pi's own server runs no JetStream, and its clients reach the
/// hub's through the leaf connection as `$JS.hub.API.…`.
pub const DOMAIN: &str = "hub";
/// The prefix of each Pi's JetStream stream, `KURA_REPL_<pi>` (see [`stream`]).
pub const STREAM_PREFIX: &str = "KURA_REPL_";
/// The key-value bucket of signed checkpoints (key `<pi>`) and cosignatures
/// (key `<pi>.cosig.<witness>`).
pub const CHECKPOINTS_BUCKET: &str = "kura_checkpoints";
/// The prefix of each Pi's object store for bodies too large for one message,
/// `kura_objects_<pi>` (see [`objects_bucket`]).
pub const OBJECTS_PREFIX: &str = "kura_objects_";

/// `pi`'s own stream. One stream per Pi, not one shared: JetStream drops a repeated
/// `Nats-Msg-Id` across a whole stream, so in a shared one a Pi could pre-empt another's
/// ids; and the hub can give each Pi its own quota.
pub fn stream(pi: &str) -> String {
    format!("{STREAM_PREFIX}{pi}")
}

/// `pi`'s own object store: only `pi` may write it (so no other Pi can replace a body).
pub fn objects_bucket(pi: &str) -> String {
    format!("{OBJECTS_PREFIX}{pi}")
}
/// A body larger than this goes to the object store, and its message points at it: the
/// Pi's bus takes at most 64 KiB per message (doorbells are tiny; replication bodies are
/// not), so a body and its headers always fit.
pub const INLINE_MAX: usize = 48 * 1024;
/// Chunks of an object (below the bus's 64 KiB message limit).
pub const OBJECT_CHUNK: usize = 32 * 1024;
/// The largest object a receiver fetches: a ledger's member list or one record, with room.
pub const OBJECT_MAX: usize = 64 * 1024 * 1024;

/// A Pi's name in the fleet is one subject token: 1–64 of `a-z 0-9 -`, starting with a
/// letter or digit (it is also a file name, `replicas/<pi>.db`, and a KV key).
pub fn check_pi_name(name: &str) -> Result<(), PiNameError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(PiNameError(name.to_owned()))
    }
}

/// A fleet name that cannot be a subject token, file name and key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Pi name {0:?}: use 1-64 of a-z, 0-9 and '-', not starting with '-'")]
pub struct PiNameError(pub String);

/// `kura.repl.v1.<pi>.>`: everything `pi` publishes.
pub fn pi_subjects(pi: &str) -> String {
    format!("{SUBJECT_PREFIX}.{pi}.>")
}

/// `kura.repl.v1.<pi>.record`: the records of `pi`'s sealed ledgers, each once.
pub fn record_subject(pi: &str) -> String {
    format!("{SUBJECT_PREFIX}.{pi}.record")
}

/// `kura.repl.v1.<pi>.ledger`: `pi`'s sealed ledgers in seal-log order, one per leaf.
pub fn ledger_subject(pi: &str) -> String {
    format!("{SUBJECT_PREFIX}.{pi}.ledger")
}

/// The KV key of a witness's cosignature over `pi`'s checkpoint.
pub fn cosignature_key(pi: &str, witness: &str) -> String {
    format!("{pi}.cosig.{witness}")
}

/// A record, every column exactly as stored on the origin (the leaf covers them all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplRecord {
    /// The stored columns.
    pub columns: OwnedColumns,
    /// For a record whose content the origin erased: its kept leaf and the signed redaction
    /// (the columns then hold the tombstone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted: Option<crate::proof::RedactedLeaf>,
}

/// Who sealed a ledger: the sealer's public nkey and its signature over the ledger hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplSeal {
    /// The sealer's public nkey (`U…`).
    pub sealer: String,
    /// base64 Ed25519 over `kura.seal.v1\n` ‖ ledger hash.
    pub signature: String,
}

/// A sealed ledger at its place in the origin's seal log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplLedger {
    /// Its seal-log leaf index on the origin (0, 1, 2, … with no gap).
    pub index: u64,
    /// The ledger.
    pub ledger_id: LedgerId,
    /// Its session.
    pub session_id: SessionId,
    /// The session's label (not committed to by any hash: shown, never trusted).
    pub session_label: String,
    /// The ledger's label.
    pub label: String,
    /// Its parents, in order.
    pub parent_ids: Vec<LedgerId>,
    /// The member records' hashes, in position order.
    pub members: Vec<String>,
    /// The root the origin stored.
    pub root_hash: String,
    /// The ledger hash the origin stored (the seal-log leaf commits to it).
    pub ledger_hash: String,
    /// When it was opened.
    pub created_at: String,
    /// When it was sealed.
    pub sealed_at: String,
    /// Who sealed it, when signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<ReplSeal>,
    /// When this ledger ends a batch: the origin's signed checkpoint of its first
    /// `index + 1` leaves, so a receiver can verify without waiting for the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
}

/// A message body on a replication subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ReplMessage {
    /// A record (on `…record`).
    Record(ReplRecord),
    /// A sealed ledger (on `…ledger`).
    Ledger(ReplLedger),
    /// A body too large for a message, in the object store: fetch it, check its SHA-256,
    /// and read it as the [`ReplMessage`] it holds.
    Object {
        /// The object's name in the origin's object store ([`objects_bucket`]).
        name: String,
        /// Lowercase hex SHA-256 of the body.
        sha256: String,
        /// The body's size in bytes.
        size: u64,
    },
}

/// The `Nats-Msg-Id` of a record (JetStream drops a repeat inside its duplicate window).
pub fn record_msg_id(pi: &str, hash: &str) -> String {
    format!("{pi}.record.{hash}")
}

/// The `Nats-Msg-Id` of a ledger at seal-log index `index` with ledger hash `hash`: the same
/// ledger published again is a duplicate, and nobody can take its id ahead of it (the hash
/// of a ledger not sealed yet is unknown).
pub fn ledger_msg_id(pi: &str, index: u64, hash: &str) -> String {
    format!("{pi}.ledger.{index}.{hash}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pi_names_are_one_safe_token() {
        for good in ["pi-a", "kitchen", "p1", "a"] {
            assert!(check_pi_name(good).is_ok(), "{good}");
        }
        let long = "a".repeat(65);
        for bad in [
            "",
            "-a",
            "Pi",
            "a.b",
            "a*",
            "a>",
            "a b",
            "../x",
            long.as_str(),
        ] {
            assert!(check_pi_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_unknown_field_or_kind_is_refused() {
        assert!(serde_json::from_str::<ReplMessage>(r#"{"kind":"other"}"#).is_err());
        let obj = r#"{"kind":"object","name":"x","sha256":"00","size":1,"extra":1}"#;
        assert!(serde_json::from_str::<ReplMessage>(obj).is_err());
    }
}
