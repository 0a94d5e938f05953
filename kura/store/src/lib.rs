//! Kura's store: the SQLite file every Kura process shares and the only source of truth —
//! records, ledgers, sessions, the memory index (and the schema of the work tables
//! `kura-work` keeps) — and the reports read from it
//! (verify, proofs). Synchronous by design: no async runtime, no NATS. Writes go
//! through [`Store::write`] and the named operations of its [`Tx`]; the transparency log
//! (seal log, checkpoints, witnesses) is `kura_tlog`'s, run over [`SealLog`] (its
//! `LogStorage` on these tables) and appended to inside the seal.

pub mod branch;
mod cached;
pub mod error;
pub mod proof;
pub mod redact;
#[cfg(test)]
#[path = "tests/redact.rs"]
mod redact_tests;
pub mod replica;
#[cfg(test)]
#[path = "tests/replica.rs"]
mod replica_tests;
mod seal_log;
#[cfg(test)]
#[path = "tests/seallog.rs"]
mod seallog_tests;
pub mod store;
pub mod time;
mod tx;
pub mod verify;

pub use cached::Cached;
pub use error::{ConflictKind, Result, StoreError};
pub use seal_log::{SealLog, seal_log_size_read_only};
pub use store::{Store, StoreOptions, Synchronous};
pub use tx::{Db, Tx};
