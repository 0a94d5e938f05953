//! Kura's store: the SQLite file every Kura process shares and the only source of truth —
//! records, ledgers, sessions, work tables, the memory index — and the reports read from it
//! (verify, diff, proofs, git export). Synchronous by design: no async runtime, no NATS.

pub mod branch;
mod cached;
pub mod diff;
pub mod error;
pub mod export;
pub mod memory;
pub mod ops;
pub mod proof;
#[cfg(test)]
mod seallog_tests;
pub mod store;
pub mod time;
mod tx;
pub mod verify;
pub mod work;

pub use error::{ConflictKind, Result, StoreError};
pub use store::{Store, StoreOptions, Synchronous};
pub use tx::{Db, Tx};
