//! Kura's transparency log: the seal log's leaves and RFC 6962 proofs, C2SP signed-note
//! checkpoints, cosignatures and witnesses, and the sealers' signatures over ledger hashes.
//!
//! The default build is the verifying half and links no SQLite: note and checkpoint parsing
//! and signing, cosignature verification, proof checking over hashes ([`proof::verify_link`]),
//! [`seallog::leaf_data`], [`sealer::signing_bytes`] and the [`sealer::Keyring`], and the
//! witness's file-based state. The log's algorithms over stored rows (append, roots, proofs,
//! checks, signing the next checkpoint) take a [`storage::LogStorage`]; the store implements
//! it over its database and calls [`seallog::append`] inside its sealing transaction.

pub mod bundle;
pub mod checkpoint;
pub mod cosign;
pub mod error;
pub mod proof;
pub mod sealer;
pub mod seallog;
pub mod storage;
pub mod witness;

pub use error::{Result, TlogError};
