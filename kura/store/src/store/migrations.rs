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
                kura_tlog::seallog::backfill(&crate::SealLog(tx))
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
        // 013: record hashes stored as 32 bytes; the records table rebuilt (foreign keys off).
        // Every row is copied, so no reference breaks; no `foreign_key_check`, because a
        // tampered file that already lacks a referenced record must still open for `verify`.
        M::up(include_str!("../../migrations/013_compact_hashes.sql")),
        // 014: memory records stored before every writer indexed them, indexed for search.
        M::up(include_str!(
            "../../migrations/014_memory_from_anywhere.sql"
        )),
        // 015: requests and turns an outside agent drives (minato and hashi leave them alone).
        M::up(include_str!("../../migrations/015_agent_turns.sql")),
        // 016: the fleet's outbox cursor and a replica's verified position.
        M::up(include_str!("../../migrations/016_fleet.sql")),
        // 017: writs and what was spent under them; model usage per session.
        M::up(include_str!("../../migrations/017_writs.sql")),
        // 018: roles and plans: the role a turn runs as, a plan's steps and their progress.
        M::up(include_str!("../../migrations/018_plans.sql")),
        // 019: memory in sealed ledgers (each writer's memory session); the records an earlier
        // release left in no ledger, listed.
        M::up(include_str!("../../migrations/019_sealed_memory.sql")),
        M::up(include_str!("../../migrations/020_daemon_alarm.sql")),
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
    "930de31fdac1cafa029d2d3216846c1578383357d1a1e947311852e5a1b8b44b";

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
pub(crate) fn check_schema(conn: &Connection, path: &Path) -> Result<Vec<(String, String)>> {
    // Version and schema from one snapshot: another process may be migrating the file, and
    // each of its migrations commits the schema and the version together.
    let (version, actual) = {
        let snapshot = conn.unchecked_transaction()?;
        let version: usize = snapshot.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let actual = schema_of(&snapshot)?;
        snapshot.commit()?;
        (version, actual)
    };
    if version > latest() {
        // `apply` explains that one.
        return Ok(vec![]);
    }
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

/// Brings the schema up to date; refuses databases written by a newer Kura. Until
/// `deadline`, a migration that fails because another process applied it first (every daemon
/// opens the store at once after an upgrade) is not an error: the version is read again and
/// the rest taken from there. Each failure means the version moved on, so this ends.
pub(crate) fn apply(conn: &mut Connection, deadline: std::time::Instant) -> Result<()> {
    loop {
        let version: usize = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version > latest() {
            return Err(StoreError::Invalid(format!(
                "database schema version {version} is newer than this kura understands ({}); upgrade kura",
                latest()
            )));
        }
        if version == latest() {
            return Ok(());
        }
        // 013 rebuilds `records`, which other tables reference: SQLite's way to rebuild a
        // table is with foreign keys off (the pragma is ignored inside a transaction, so it
        // is set around the migrations).
        conn.pragma_update(None, "foreign_keys", "OFF")?;
        let migrated = Migrations::new(migrations()).to_latest(conn);
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let Err(e) = migrated else { return Ok(()) };
        let now: usize = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if now <= version || std::time::Instant::now() >= deadline {
            return Err(e.into());
        }
    }
}

/// Undoes migrations 015 to 020 on a test database (the daemons' alarm, memory homes, plans, writs, the fleet, the agent columns), as the first step of going
/// back to any older version.
#[cfg(test)]
pub(crate) fn back_to_version_14(conn: &Connection) {
    conn.execute_batch(
        "ALTER TABLE daemons DROP COLUMN alarm;
         DROP TABLE loose_legacy;
         DROP TABLE memory_homes;
         DROP TABLE plan_steps;
         DROP TABLE plans;
         ALTER TABLE sessions DROP COLUMN verdict;
         ALTER TABLE turns DROP COLUMN validates;
         ALTER TABLE turns DROP COLUMN routing;
         ALTER TABLE requests DROP COLUMN validations;
         ALTER TABLE requests DROP COLUMN validator;
         ALTER TABLE requests DROP COLUMN members;
         ALTER TABLE requests DROP COLUMN parents;
         ALTER TABLE requests DROP COLUMN role;
         ALTER TABLE turns DROP COLUMN role;
         DROP TRIGGER records_no_update;
         CREATE TRIGGER records_no_update BEFORE UPDATE ON records
BEGIN SELECT RAISE(ABORT, 'kura: records are immutable'); END;
         DROP TABLE redactions;
         DROP TABLE writs;
         DROP TABLE authority;
         DROP TABLE session_usage;
         DROP TABLE fleet_outbox;
         DROP TABLE fleet_inbox;
         DROP INDEX idx_turns_agent;
         ALTER TABLE turns DROP COLUMN agent;
         ALTER TABLE requests DROP COLUMN agent;
         PRAGMA user_version = 14",
    )
    .expect("back to version 14");
}

/// Undoes migrations 013 to 015 on a test database: `records` back to hex TEXT hashes, with
/// the exact statements of 001, so tests can build the store an older Kura left behind.
#[cfg(test)]
pub(crate) fn back_to_text_hashes(conn: &Connection) {
    back_to_version_14(conn);
    let v001 = include_str!("../../migrations/001_records_ledgers.sql");
    let ours = |stmt: &&str| {
        let body = stmt
            .lines()
            .skip_while(|l| l.trim().is_empty() || l.starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        [
            "CREATE TABLE records (",
            "CREATE INDEX idx_records_",
            "CREATE TRIGGER records_no_",
        ]
        .iter()
        .any(|p| body.starts_with(p))
    };
    let recreate: Vec<String> = v001
        .split(";\n")
        .filter(ours)
        .map(|s| format!("{s};"))
        .collect();
    assert_eq!(recreate.len(), 6, "001's records statements");
    conn.execute_batch(
        "PRAGMA foreign_keys = OFF; PRAGMA legacy_alter_table = ON;
         ALTER TABLE records RENAME TO records_blob;",
    )
    .expect("rename");
    conn.execute_batch(&recreate[0]).expect("table");
    conn.execute_batch(
        "INSERT INTO records SELECT record_id, lower(hex(hash)), record_type, content,
                author_id, metadata, created_at FROM records_blob ORDER BY rowid;
         DROP TABLE records_blob;",
    )
    .expect("copy");
    conn.execute_batch(&recreate[1..].join("\n"))
        .expect("indexes and triggers");
    conn.execute_batch("PRAGMA legacy_alter_table = OFF; PRAGMA foreign_keys = ON")
        .expect("pragmas");
}

/// Undoes migrations 008 to 013 on a test database: what a version-7 store looks like, so
/// 008 onwards run as on a real older store.
#[cfg(test)]
pub(crate) fn back_to_version_7(conn: &Connection) {
    back_to_text_hashes(conn);
    conn.execute_batch(
        "DROP TABLE ledger_seals; DROP TABLE ledger_seals_since;
         DROP TABLE seal_log_leaves; DROP TABLE seal_log_hashes;
         ALTER TABLE approvals DROP COLUMN edited_arguments;
         ALTER TABLE requests DROP COLUMN replay_of;
         ALTER TABLE requests DROP COLUMN replay_live;
         ALTER TABLE requests DROP COLUMN replay_rerun;
         DROP TABLE policy_current; DROP TABLE policies;
         PRAGMA user_version = 7",
    )
    .expect("back to version 7");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store at `dir/k.db` with one sealed ledger of thoughts saying `texts`.
    fn sealed_store(
        dir: &Path,
        texts: &[&str],
    ) -> (crate::Store, proto::LedgerId, Vec<proto::Record>) {
        let mut store = crate::Store::create(dir.join("k.db"), &crate::StoreOptions::default())
            .expect("create");
        let session = store.create_session("s").expect("session").session_id;
        let ledger = store
            .open_ledger(session, "l", &[])
            .expect("open")
            .ledger_id;
        let records = texts
            .iter()
            .map(|t| {
                let r = proto::NewRecord::new(
                    proto::RecordType::AgentThought,
                    proto::Content::text(*t),
                    "agent:test",
                );
                store.append(ledger, &r).expect("append").record
            })
            .collect();
        store.seal_ledger(ledger).expect("seal");
        (store, ledger, records)
    }

    /// A store written before 013 (hex TEXT hashes) opens, is migrated, and every record
    /// reads and verifies as before: leaves cover the hex form, so nothing sealed changes.
    #[test]
    fn migration_013_stores_hashes_as_bytes_and_keeps_every_seal_valid() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("k.db");
        let steps = ["step 0", "step 1", "step 2", "step 3", "step 4"];
        let (store, ledger, _) = sealed_store(dir.path(), &steps);
        let sealed = store.read_ledger(ledger).expect("ledger");
        let before = store.hydrate(ledger).expect("read");
        back_to_text_hashes(store.conn());
        store
            .conn()
            .execute_batch("PRAGMA user_version = 12")
            .expect("version");
        let kind: String = store
            .conn()
            .query_row("SELECT typeof(hash) FROM records LIMIT 1", [], |r| r.get(0))
            .expect("type");
        assert_eq!(kind, "text", "the helper builds a pre-013 store");
        drop(store);

        let store = crate::Store::open(&path, &crate::StoreOptions::default()).expect("migrate");
        let (kind, len): (String, i64) = store
            .conn()
            .query_row(
                "SELECT typeof(hash), length(hash) FROM records LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("type");
        assert_eq!((kind.as_str(), len), ("blob", 32));
        assert_eq!(store.hydrate(ledger).expect("read"), before);
        assert_eq!(store.read_ledger(ledger).expect("ledger"), sealed);
        let report =
            crate::verify::verify(&store, &crate::verify::Scope::All, None, None).expect("verify");
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert_eq!(report.records_checked, 5);
        assert!(
            check_schema(store.conn(), &path)
                .expect("schema")
                .is_empty()
        );
    }

    /// Fault: after an upgrade, systemd starts every daemon at once on the older store, and
    /// they all open it together. Each must come up on the migrated schema; none may fail
    /// because another applied a migration first ("table seal_log_leaves already exists").
    #[test]
    fn daemons_opening_an_older_store_together_all_come_up() {
        for _ in 0..5 {
            let dir = tempfile::tempdir().expect("dir");
            let path = dir.path().join("k.db");
            let (store, _, _) = sealed_store(dir.path(), &["a", "b"]);
            back_to_version_7(store.conn());
            drop(store);
            let start = std::sync::Arc::new(std::sync::Barrier::new(4));
            let openers: Vec<_> = (0..4)
                .map(|_| {
                    let (start, path) = (start.clone(), path.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        crate::Store::open(&path, &crate::StoreOptions::default()).map(drop)
                    })
                })
                .collect();
            for o in openers {
                o.join()
                    .expect("opener thread")
                    .expect("every opener comes up");
            }
            let store = crate::Store::open(&path, &crate::StoreOptions::default()).expect("open");
            let report = crate::verify::verify(&store, &crate::verify::Scope::All, None, None)
                .expect("verify");
            assert!(report.problems.is_empty(), "{:?}", report.problems);
        }
    }

    /// Attack: an older store someone edited outside SQLite's guards (a member's record
    /// deleted with foreign keys off) still opens after 013, so `verify` can name it.
    #[test]
    fn a_pre_013_store_missing_a_referenced_record_still_opens_for_verify() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("k.db");
        let (store, _, records) = sealed_store(dir.path(), &["gone"]);
        let gone = records[0].record_id;
        back_to_text_hashes(store.conn());
        store
            .conn()
            .execute_batch(
                "PRAGMA foreign_keys = OFF; DROP TRIGGER records_no_delete;
                 PRAGMA user_version = 12;",
            )
            .expect("tamper");
        store
            .conn()
            .execute(
                "DELETE FROM records WHERE record_id = ?1",
                [gone.to_string()],
            )
            .expect("delete");
        drop(store);
        let store = crate::Store::open(&path, &crate::StoreOptions::default()).expect("opens");
        let report =
            crate::verify::verify(&store, &crate::verify::Scope::All, None, None).expect("verify");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.check == "member_missing" && p.detail.contains(&gone.to_string())),
            "{:?}",
            report.problems
        );
    }

    /// Attack: a TEXT value that spells the right digits where the 32 bytes belong is not
    /// taken as the hash (only a tampered file can hold one); verify names the record.
    #[test]
    fn a_text_hash_in_the_bytes_column_is_reported_by_verify() {
        let dir = tempfile::tempdir().expect("dir");
        let (store, _, records) = sealed_store(dir.path(), &["hello"]);
        let rec = &records[0];
        store
            .conn()
            .execute_batch("DROP TRIGGER records_no_update")
            .expect("drop trigger");
        store
            .conn()
            .execute(
                "UPDATE records SET hash = lower(hex(hash)) WHERE record_id = ?1",
                [rec.record_id.to_string()],
            )
            .expect("tamper");
        let report =
            crate::verify::verify(&store, &crate::verify::Scope::All, None, None).expect("verify");
        let id = rec.record_id.to_string();
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.id == id && p.check == "record_hash"),
            "{:?}",
            report.problems
        );
    }

    /// A memory fact stored before every writer indexed memory (a person's `kura record add`)
    /// is indexed by migration 014, once; other records are not.
    #[test]
    fn migration_014_indexes_memory_stored_before_it() {
        use proto::record::{Content, NewRecord, RecordType};
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("m.db");
        let mut store =
            crate::Store::create(&path, &crate::StoreOptions::default()).expect("create");
        let fact = NewRecord::new(
            RecordType::MemoryFact,
            Content::text("the spare key is under the blue pot"),
            "user:oles",
        );
        let thought = NewRecord::new(RecordType::AgentThought, Content::text("pot"), "agent:x");
        store.write_record(&fact).expect("fact");
        store.write_record(&thought).expect("thought");
        // What a version-13 store looked like: the fact never indexed.
        store
            .conn()
            .execute_batch("DELETE FROM kb")
            .expect("unindex");
        back_to_version_14(store.conn());
        store
            .conn()
            .execute_batch("PRAGMA user_version = 13")
            .expect("unindex");
        drop(store);
        let store = crate::Store::open(&path, &crate::StoreOptions::default()).expect("migrate");
        let rows: Vec<(String, String)> = store
            .conn()
            .prepare("SELECT text, record_type FROM kb")
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows");
        assert_eq!(
            rows,
            [(
                "the spare key is under the blue pot".to_owned(),
                "memory.fact".to_owned()
            )]
        );
    }

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
