//! Numbered schema migrations, compiled into the binary and applied on open.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use rusqlite::Connection;
use rusqlite_migration::{M, Migrations};
use sha2::{Digest, Sha256};

use crate::error::{Result, StoreError};

/// Every migration, in order. Never edit one that has shipped: add the next number.
fn migrations() -> Vec<M<'static>> {
    vec![
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
        // 007: votes carry their key (M-of-N counts keys); refusals counted, a few recorded.
        M::up(include_str!("../../migrations/007_votes_by_key.sql")),
        // 008: the seal log (RFC 6962, tlog layout); existing sealed ledgers backfilled in seal order.
        M::up_with_hook(
            include_str!("../../migrations/008_seal_log.sql"),
            |tx: &rusqlite::Transaction| {
                crate::seallog::backfill_in(tx)
                    .map(drop)
                    .map_err(|e| rusqlite_migration::HookError::Hook(e.to_string()))
            },
        ),
        // 009: who sealed each ledger: the sealer's nkey and its signature over the ledger hash.
        M::up(include_str!("../../migrations/009_sealers.sql")),
        // 010: arguments a person approved instead of the requested ones.
        M::up(include_str!("../../migrations/010_edited_arguments.sql")),
        // 011: requests that replay a recorded turn (its output ledger, recorded or live).
        M::up(include_str!("../../migrations/011_replay.sql")),
        // 012: the policy aegis rules by, so hashi can apply allow and deny rules at once.
        M::up(include_str!("../../migrations/012_policies.sql")),
    ]
}

/// How many migrations there are (the current schema version).
fn latest() -> usize {
    migrations().len()
}

/// One schema object: (type, name, table, SQL text).
type SchemaRow = (String, String, String, Option<String>);

/// SHA-256 of the latest version's schema ([`schema_digest`] of [`expected_schema`]).
/// Opening an up-to-date database compares against it instead of building the expected
/// schema in memory — that build runs every migration and costs a short-lived CLI (`minato
/// submit`, `kura log`) milliseconds. A mismatch is not a verdict: it falls back to the full
/// comparison. `the_latest_schema_digest_is_current` fails with the new value when a
/// migration is added.
const LATEST_SCHEMA_SHA256: &str =
    "a1d4d3be849bb6586bc1f78fd478d4a5e650e714e7e609d2c0bd9571e4b3f5c3";

/// A digest of schema rows that no two different row lists share: every field is
/// length-prefixed, and a NULL SQL text differs from an empty one.
fn schema_digest(rows: &[SchemaRow]) -> String {
    let mut h = Sha256::new();
    let mut field = |f: Option<&str>| match f {
        None => h.update([0u8]),
        Some(t) => {
            h.update([1u8]);
            h.update((t.len() as u64).to_be_bytes());
            h.update(t.as_bytes());
        }
    };
    for (t, n, tbl, sql) in rows {
        field(Some(t));
        field(Some(n));
        field(Some(tbl));
        field(sql.as_deref());
    }
    hex::encode(h.finalize())
}

/// The schema a database at `version` must have, exactly: what the first `version`
/// migrations make, built once per version in memory.
fn expected_schema(version: usize) -> Result<Vec<SchemaRow>> {
    static CACHE: Mutex<BTreeMap<usize, Vec<SchemaRow>>> = Mutex::new(BTreeMap::new());
    if let Some(rows) = CACHE.lock().ok().and_then(|c| c.get(&version).cloned()) {
        return Ok(rows);
    }
    let mut mem = Connection::open_in_memory()?;
    if version > 0 {
        let mut all = migrations();
        all.truncate(version);
        Migrations::new(all).to_latest(&mut mem)?;
    }
    let rows = schema_of(&mem)?;
    if let Ok(mut c) = CACHE.lock() {
        c.insert(version, rows.clone());
    }
    Ok(rows)
}

fn schema_of(conn: &Connection) -> Result<Vec<SchemaRow>> {
    // The statistics tables `PRAGMA optimize` may add are SQLite's own, with fixed shapes.
    let mut stmt = conn.prepare(
        "SELECT type, name, tbl_name, sql FROM sqlite_schema
          WHERE name NOT IN ('sqlite_stat1', 'sqlite_stat4') ORDER BY type, name",
    )?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Refuses a database whose schema holds anything Kura's migrations do not make for its
/// version, or lacks one of its tables: a file someone crafted (a view where a table
/// belongs, a trigger on our writes, a recursive view that makes `verify` run forever) is
/// never read, let alone written. Returns the triggers and indexes that are missing — an
/// attacker who dropped the immutability triggers left the data readable, and `verify`
/// reports them.
pub fn check_schema(conn: &Connection, path: &Path) -> Result<Vec<(String, String)>> {
    let version: usize = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > latest() {
        // `apply` explains that one.
        return Ok(vec![]);
    }
    let actual = schema_of(conn)?;
    if version == latest() && schema_digest(&actual) == LATEST_SCHEMA_SHA256 {
        return Ok(vec![]);
    }
    let expected = expected_schema(version)?;
    if actual == expected {
        return Ok(vec![]);
    }
    let refuse = |odd: String| StoreError::NotKura {
        path: path.to_path_buf(),
        reason: format!("its schema is not Kura's version {version} schema ({odd})"),
    };
    if let Some((t, n, _, _)) = actual.iter().find(|row| !expected.contains(row)) {
        return Err(refuse(format!("an unexpected or altered {t} {n:?}")));
    }
    let missing: Vec<&SchemaRow> = expected
        .iter()
        .filter(|row| !actual.contains(row))
        .collect();
    if let Some((_, n, _, _)) = missing.iter().find(|(t, ..)| t == "table") {
        return Err(refuse(format!("table {n:?} is missing")));
    }
    Ok(missing
        .into_iter()
        .map(|(t, n, _, _)| (t.clone(), n.clone()))
        .collect())
}

/// Brings the schema up to date; refuses databases written by a newer Kura.
pub fn apply(conn: &mut Connection) -> Result<()> {
    let version: usize = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > latest() {
        return Err(StoreError::Invalid(format!(
            "database schema version {version} is newer than this kura understands ({}); upgrade kura",
            latest()
        )));
    }
    if version < latest() {
        Migrations::new(migrations()).to_latest(conn)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_valid() {
        assert!(Migrations::new(migrations()).validate().is_ok());
    }

    #[test]
    fn the_latest_schema_digest_is_current() {
        let rows = expected_schema(latest()).expect("schema");
        assert_eq!(
            schema_digest(&rows),
            LATEST_SCHEMA_SHA256,
            "a migration changed the schema: set LATEST_SCHEMA_SHA256 to the new digest"
        );
    }

    #[test]
    fn schema_digests_keep_fields_apart() {
        let row = |a: &str, b: &str, sql: Option<&str>| {
            vec![(
                a.to_owned(),
                b.to_owned(),
                "t".to_owned(),
                sql.map(str::to_owned),
            )]
        };
        assert_ne!(
            schema_digest(&row("ab", "c", None)),
            schema_digest(&row("a", "bc", None))
        );
        assert_ne!(
            schema_digest(&row("a", "b", None)),
            schema_digest(&row("a", "b", Some("")))
        );
    }

    /// `minato submit --wait` spent 5 ms of its 22 ms building the expected schema in memory
    /// (every migration) before its first write.
    #[test]
    fn opening_an_up_to_date_database_does_not_rebuild_its_schema() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("k.db");
        crate::Store::create(&path, &crate::StoreOptions::default()).expect("create");
        let conn = Connection::open(&path).expect("open");
        let actual = schema_of(&conn).expect("schema");
        assert_eq!(schema_digest(&actual), LATEST_SCHEMA_SHA256);
        // A schema someone altered still takes the full comparison and is refused.
        conn.execute_batch("CREATE VIEW sneaky AS SELECT 1")
            .expect("view");
        drop(conn);
        let err = crate::Store::open(&path, &crate::StoreOptions::default())
            .expect_err("an altered schema is refused");
        assert!(matches!(err, StoreError::NotKura { .. }), "{err:?}");
    }
}
