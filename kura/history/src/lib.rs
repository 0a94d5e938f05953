//! Kura's history as a user handles it, over the store's public seam: forks (a session grown
//! from a sealed ledger here, or continued from another Pi's verified replica) and a diff of
//! two ledgers, an inclusion proof linked to a signed checkpoint, and what a model was sent
//! read back for its rebuild ([`prompt`]). Rewinding a head and
//! building a proof stay in the store, beside the ref log and the hashes they need.

pub mod bundle;
pub mod diff;
pub mod fork;
pub mod import;
pub mod prompt;
pub mod proof;
pub mod records;
pub mod sessions;
pub mod transcript;
pub mod ungated;
pub mod workspace;
pub mod workspace_cmd;

/// The object store the workspace functions read and write (one crate up for the CLI).
pub use kura_objects as objects;
