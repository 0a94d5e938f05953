//! Kura: the SQLite record/ledger store behind every Kura process, plus its reports
//! (verify, diff, proofs, git export) used by the `kura` command line.

pub mod bench;
pub mod diff;
pub mod error;
pub mod export;
pub mod memory;
pub mod ops;
pub mod proof;
pub mod runtime;
pub mod store;
pub mod time;
pub mod verify;
pub mod work;

pub use error::{Result, StoreError};
pub use store::{Store, StoreOptions, Synchronous};
