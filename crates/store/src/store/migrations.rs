//! Numbered schema migrations, compiled into the binary and applied on open.

use rusqlite::Connection;
use rusqlite_migration::{M, Migrations};

use crate::error::{Result, StoreError};

/// Every migration, in order. Never edit one that has shipped: add the next number.
const MIGRATIONS: &[M<'static>] = &[
    // 001: records, ledgers, members, sessions, ref log and the immutability triggers.
    M::up(include_str!("../../migrations/001_records_ledgers.sql")),
    // 002: work state: session requests, turns with leases and fencing epochs, cursors.
    M::up(include_str!("../../migrations/002_work.sql")),
    // 003: approvals: requests, signed votes, rejections (aegis).
    M::up(include_str!("../../migrations/003_approvals.sql")),
    // 004: memory: graph edges, sessions, the FTS5 index and embeddings (mikado).
    M::up(include_str!("../../migrations/004_memory.sql")),
    // 005: operations: daemon heartbeats, integrity sweeps and backups.
    M::up(include_str!("../../migrations/005_ops.sql")),
    // 006: failed attempts and backoff of turns; a daemon's self-reported detail.
    M::up(include_str!("../../migrations/006_attempts.sql")),
];

/// Brings the schema up to date; refuses databases written by a newer Kura.
pub fn apply(conn: &mut Connection) -> Result<()> {
    let version: usize = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > MIGRATIONS.len() {
        return Err(StoreError::Invalid(format!(
            "database schema version {version} is newer than this kura understands ({}); upgrade kura",
            MIGRATIONS.len()
        )));
    }
    if version < MIGRATIONS.len() {
        Migrations::from_slice(MIGRATIONS).to_latest(conn)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_valid() {
        assert!(Migrations::from_slice(MIGRATIONS).validate().is_ok());
    }
}
