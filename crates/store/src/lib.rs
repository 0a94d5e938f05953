//! Kura's store: the SQLite file every Kura process shares and the only source of truth —
//! records, ledgers, sessions, work tables, the memory index — and the reports read from it
//! (verify, diff, proofs, git export). Synchronous by design: no async runtime, no NATS.

pub mod branch;
mod cached;
pub mod checkpoint;
pub mod cosign;
pub mod diff;
pub mod error;
pub mod export;
pub mod memory;
pub mod ops;
pub mod proof;
pub mod sealer;
pub mod seallog;
pub mod store;
pub mod time;
pub mod verify;
pub mod witness;
pub mod work;

pub use error::{ConflictKind, Result, StoreError};
/// The transaction type of [`Store::write`] and the `*_in` functions, for callers that compose them.
pub use rusqlite::Transaction;
pub use store::{Store, StoreOptions, Synchronous};
