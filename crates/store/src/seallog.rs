//! The seal log: every sealed ledger, in seal order, as a leaf of one RFC 6962 log per
//! store, kept the way Go's tlog and C2SP tlog-tiles keep one (the hash of every complete
//! subtree by stored-hash index; the math is `tlog_tiles`'), so an append writes about two
//! hashes however long the log is and a proof reads about log2(n) of them.
//!
//! A leaf's data is the RFC 8785 JSON `{"ledger_hash","ledger_id","session_id"}` of a
//! sealed ledger. Session heads are sealed ledgers, so every head a ref log ever named is a
//! leaf; a rewind (the head moved back to an older ledger) adds no leaf — it names one the
//! log already holds, and the ref log's own chain records the move.

use crate::cached::Cached;
use rusqlite::{Connection, OptionalExtension, params};
use tlog_tiles::{Hash, HashReader};
use uuid::Uuid;

use crate::error::{Result, StoreError};

/// The leaf data of a sealed ledger.
pub fn leaf_data(ledger_id: Uuid, session_id: Uuid, ledger_hash: &str) -> String {
    let v = serde_json::json!({
        "ledger_hash": ledger_hash,
        "ledger_id": ledger_id.to_string(),
        "session_id": session_id.to_string(),
    });
    // Three strings always canonicalise; the fallback is never reached.
    proto::canonical::canonical_json(&v).unwrap_or_default()
}

/// Reads stored hashes from the database.
struct Stored<'a>(&'a Connection);

fn missing(what: impl std::fmt::Display) -> tlog_tiles::Error {
    tlog_tiles::Error::InvalidInput(format!("stored hash {what}"))
}

impl HashReader for Stored<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> std::result::Result<Vec<Hash>, tlog_tiles::Error> {
        let mut stmt = self
            .0
            .prepare_cached("SELECT hash FROM seal_log_hashes WHERE hash_index = ?1")
            .map_err(missing)?;
        indexes
            .iter()
            .map(|&i| {
                let at = i64::try_from(i).map_err(|_| missing(i))?;
                let bytes: Vec<u8> = stmt
                    .query_row([at], |r| r.get(0))
                    .map_err(|e| missing(format!("{i}: {e}")))?;
                let arr: [u8; 32] = bytes.try_into().map_err(|_| missing(i))?;
                Ok(Hash(arr))
            })
            .collect()
    }
}

/// Hashes computed in memory, for checking the stored ones.
struct InMemory<'a>(&'a [Hash]);

impl HashReader for InMemory<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> std::result::Result<Vec<Hash>, tlog_tiles::Error> {
        indexes
            .iter()
            .map(|&i| {
                usize::try_from(i)
                    .ok()
                    .and_then(|i| self.0.get(i).copied())
                    .ok_or_else(|| missing(i))
            })
            .collect()
    }
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        what: "seal log",
        id: String::new(),
        detail: e.to_string(),
    }
}

/// More leaves than any store will seal (2^40); an index beyond it is corruption.
const MAX_LEAVES: i64 = 1 << 40;

/// Leaves in the log.
pub fn size_in(conn: &Connection) -> Result<u64> {
    let max: Option<i64> =
        conn.query_row_cached("SELECT max(leaf_index) FROM seal_log_leaves", [], |r| {
            r.get(0)
        })?;
    // A database someone crafted may claim any index; the tlog arithmetic must never see
    // one near the integer limits.
    match max {
        None => Ok(0),
        Some(m) if (0..MAX_LEAVES).contains(&m) => Ok(m as u64 + 1),
        Some(m) => Err(corrupt(format!("leaf index {m} is out of range"))),
    }
}

/// Appends a sealed ledger as the next leaf (inside the sealing transaction).
pub fn append_in(
    conn: &Connection,
    ledger_id: Uuid,
    session_id: Uuid,
    ledger_hash: &str,
) -> Result<u64> {
    let n = size_in(conn)?;
    let data = leaf_data(ledger_id, session_id, ledger_hash);
    let hashes = tlog_tiles::stored_hashes(n, data.as_bytes(), &Stored(conn)).map_err(corrupt)?;
    conn.execute_cached(
        "INSERT INTO seal_log_leaves (leaf_index, ledger_id, leaf_data) VALUES (?1, ?2, ?3)",
        params![n as i64, ledger_id.to_string(), data],
    )?;
    let start = tlog_tiles::stored_hash_index(0, n);
    let mut stmt =
        conn.prepare_cached("INSERT INTO seal_log_hashes (hash_index, hash) VALUES (?1, ?2)")?;
    for (k, h) in hashes.iter().enumerate() {
        stmt.execute(params![(start + k as u64) as i64, &h.0[..]])?;
    }
    Ok(n)
}

/// Fills the log from the ledgers sealed before it existed, in seal order (migration 008).
pub fn backfill_in(conn: &Connection) -> Result<u64> {
    let mut stmt = conn.prepare(
        "SELECT ledger_id, session_id, ledger_hash FROM ledgers
          WHERE state = 'sealed' ORDER BY sealed_at, ledger_id",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut n = 0;
    for (ledger, session, hash) in rows {
        let (Ok(l), Ok(s), Some(h)) = (ledger.parse(), session.parse(), hash) else {
            return Err(corrupt(format!("ledger {ledger} cannot be logged")));
        };
        append_in(conn, l, s, &h)?;
        n += 1;
    }
    Ok(n)
}

/// The root hash of the first `size` leaves.
pub fn root_in(conn: &Connection, size: u64) -> Result<Hash> {
    let have = size_in(conn)?;
    if size > have {
        return Err(StoreError::Invalid(format!(
            "the seal log has {have} leaves, not {size}"
        )));
    }
    tlog_tiles::tree_hash(size, &Stored(conn)).map_err(corrupt)
}

/// An RFC 6962 consistency proof from the tree of `old` leaves to the tree of `new`.
pub fn consistency_proof_in(conn: &Connection, old: u64, new: u64) -> Result<Vec<Hash>> {
    let have = size_in(conn)?;
    if old > new || new > have {
        return Err(StoreError::Invalid(format!(
            "no proof from {old} to {new} leaves: the seal log has {have}"
        )));
    }
    if old == 0 || old == new {
        return Ok(Vec::new());
    }
    tlog_tiles::prove_tree(new, old, &Stored(conn)).map_err(corrupt)
}

/// An RFC 6962 inclusion proof of leaf `index` in the tree of `size` leaves.
pub fn inclusion_proof_in(conn: &Connection, index: u64, size: u64) -> Result<Vec<Hash>> {
    let have = size_in(conn)?;
    if index >= size || size > have {
        return Err(StoreError::Invalid(format!(
            "leaf {index} is not in a tree of {size} (the seal log has {have})"
        )));
    }
    tlog_tiles::prove_record(size, index, &Stored(conn)).map_err(corrupt)
}

/// The leaf of a sealed ledger: (index, leaf data).
pub fn leaf_of_in(conn: &Connection, ledger_id: Uuid) -> Result<Option<(u64, String)>> {
    Ok(conn
        .query_row(
            "SELECT leaf_index, leaf_data FROM seal_log_leaves WHERE ledger_id = ?1",
            [ledger_id.to_string()],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
        )
        .optional()?
        .map(|(i, d)| (u64::try_from(i).unwrap_or(0), d)))
}

/// What is wrong with the log itself: leaves that do not name their sealed ledger as it is
/// now, sealed ledgers it lacks, and stored hashes that are not what the leaves make.
/// Returns (leaf index or ledger id, check, detail) for each, the first few of a kind.
pub fn check_in(conn: &Connection) -> Result<Vec<(String, &'static str, String)>> {
    let mut problems = Vec::new();
    let mut stmt = conn.prepare(
        "SELECT s.leaf_index, s.ledger_id, s.leaf_data, l.session_id, l.ledger_hash, l.state
           FROM seal_log_leaves s LEFT JOIN ledgers l ON l.ledger_id = s.ledger_id
          ORDER BY s.leaf_index",
    )?;
    type Row = (
        i64,
        String,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
    );
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
        ))
    })?;
    let mut computed: Vec<Hash> = Vec::new();
    for (expected, row) in (0i64..).zip(rows) {
        let (index, ledger, data, session, hash, state): Row = row?;
        if index != expected {
            problems.push((
                index.to_string(),
                "seal_log_gap",
                format!("leaf {index} follows leaf {}", expected - 1),
            ));
            break;
        }
        let now = match (
            ledger.parse::<Uuid>(),
            session.as_deref().map(str::parse::<Uuid>),
            hash,
            state.as_deref(),
        ) {
            (Ok(l), Some(Ok(s)), Some(h), Some("sealed")) => Some(leaf_data(l, s, &h)),
            _ => None,
        };
        if now.as_deref() != Some(data.as_str()) && problems.len() < 20 {
            problems.push((
                ledger.clone(),
                "seal_log_leaf",
                format!(
                    "leaf {index} records {data}, but the ledger is now {}",
                    now.unwrap_or_else(|| "missing or not sealed".into())
                ),
            ));
        }
        let leaf_n = u64::try_from(index).unwrap_or(0);
        let hs = tlog_tiles::stored_hashes(leaf_n, data.as_bytes(), &InMemory(&computed))
            .map_err(corrupt)?;
        computed.extend(hs);
    }
    // Every sealed ledger is a leaf.
    let missing: Vec<String> = conn
        .prepare(
            "SELECT l.ledger_id FROM ledgers l LEFT JOIN seal_log_leaves s ON s.ledger_id = l.ledger_id
              WHERE l.state = 'sealed' AND s.ledger_id IS NULL LIMIT 20",
        )?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for id in missing {
        problems.push((
            id,
            "seal_log_missing",
            "a sealed ledger that is not in the seal log".into(),
        ));
    }
    // The stored hashes are exactly what the leaves make.
    let stored: i64 =
        conn.query_row_cached("SELECT count(*) FROM seal_log_hashes", [], |r| r.get(0))?;
    if usize::try_from(stored).ok() != Some(computed.len()) {
        problems.push((
            "seal_log".into(),
            "seal_log_hashes",
            format!("{stored} stored hashes; the leaves make {}", computed.len()),
        ));
    } else {
        let mut stmt =
            conn.prepare("SELECT hash_index, hash FROM seal_log_hashes ORDER BY hash_index")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))?;
        for (k, row) in rows.enumerate() {
            let (i, h) = row?;
            if i != k as i64 || computed.get(k).map(|c| &c.0[..]) != Some(&h[..]) {
                problems.push((
                    "seal_log".into(),
                    "seal_log_hashes",
                    format!("stored hash {i} is not what the leaves make"),
                ));
                break;
            }
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Store, StoreOptions};

    /// A store with `n` sealed (empty) ledgers.
    fn sealed(n: usize) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store =
            Store::create(dir.path().join("k.db"), &StoreOptions::default()).expect("create");
        let session = store.create_session("s").expect("session").session_id;
        for i in 0..n {
            let l = store
                .open_ledger(session, &format!("l{i}"), &[])
                .expect("open");
            store.seal_ledger(l.ledger_id).expect("seal");
        }
        (dir, store)
    }

    fn leaf_hashes(store: &Store) -> Vec<[u8; 32]> {
        let mut stmt = store
            .conn()
            .prepare("SELECT leaf_data FROM seal_log_leaves ORDER BY leaf_index")
            .expect("prepare");
        stmt.query_map([], |r| r.get::<_, String>(0))
            .expect("query")
            .map(|d| proto::merkle::leaf_hash(d.expect("row").as_bytes()))
            .collect()
    }

    /// RFC 6962 section 2.1.2's SUBPROOF, written from the RFC's text over our own
    /// (`rs_merkle`-based) subtree roots: a second implementation to hold `tlog_tiles` to.
    fn subproof(m: usize, leaves: &[[u8; 32]], complete: bool) -> Vec<[u8; 32]> {
        let n = leaves.len();
        if m == n {
            return if complete {
                vec![]
            } else {
                vec![proto::merkle::root(leaves)]
            };
        }
        let k = n.next_power_of_two() / 2;
        if m <= k {
            let mut p = subproof(m, &leaves[..k], complete);
            p.push(proto::merkle::root(&leaves[k..]));
            p
        } else {
            let mut p = subproof(m - k, &leaves[k..], false);
            p.push(proto::merkle::root(&leaves[..k]));
            p
        }
    }

    #[test]
    fn roots_and_consistency_proofs_match_an_independent_rfc_6962_implementation() {
        let (_d, store) = sealed(21);
        let leaves = leaf_hashes(&store);
        assert_eq!(leaves.len(), 21);
        for n in 1..=21u64 {
            let ours = proto::merkle::root(&leaves[..n as usize]);
            let root = root_in(store.conn(), n).expect("root");
            assert_eq!(root.0, ours, "root of {n}");
            for m in 1..n {
                let proof = consistency_proof_in(store.conn(), m, n).expect("proof");
                let want = subproof(m as usize, &leaves[..n as usize], true);
                let got: Vec<[u8; 32]> = proof.iter().map(|h| h.0).collect();
                assert_eq!(got, want, "consistency proof {m} -> {n}");
                let old = root_in(store.conn(), m).expect("old root");
                tlog_tiles::check_tree(&proof, n, root, m, old).expect("checks");
                // A proof for another old tree does not check.
                let wrong = tlog_tiles::Hash(proto::merkle::root(&leaves[..m as usize - 1]));
                assert!(m == 1 || tlog_tiles::check_tree(&proof, n, root, m, wrong).is_err());
            }
            for i in 0..n {
                let proof = inclusion_proof_in(store.conn(), i, n).expect("inclusion");
                let path =
                    proto::merkle::audit_path(&leaves[..n as usize], i as usize).expect("path");
                let got: Vec<[u8; 32]> = proof.iter().map(|h| h.0).collect();
                assert_eq!(got, path, "inclusion {i} of {n}");
            }
        }
        assert!(check_in(store.conn()).expect("check").is_empty());
    }

    #[test]
    fn every_seal_is_a_leaf_in_seal_order_and_the_log_is_append_only() {
        let (_d, store) = sealed(3);
        let rows: Vec<(i64, String)> = store
            .conn()
            .prepare(
                "SELECT s.leaf_index, l.ledger_id FROM seal_log_leaves s
                   JOIN ledgers l ON l.ledger_id = s.ledger_id ORDER BY l.sealed_at, l.ledger_id",
            )
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows");
        assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), [0, 1, 2]);
        for sql in [
            "UPDATE seal_log_leaves SET leaf_data = 'x' WHERE leaf_index = 0",
            "DELETE FROM seal_log_hashes WHERE hash_index = 0",
        ] {
            let err = store.conn().execute(sql, []).expect_err(sql);
            assert!(err.to_string().contains("append-only"), "{err}");
        }
    }

    #[test]
    fn migration_008_backfills_an_older_store_in_seal_order() {
        let (dir, store) = sealed(9);
        let before = leaf_hashes(&store);
        let root = root_in(store.conn(), 9).expect("root");
        // What a version-7 store looks like: no seal log (and none of what came after).
        crate::store::back_to_version_7(store.conn());
        drop(store);
        let store = Store::open(dir.path().join("k.db"), &StoreOptions::default()).expect("open");
        assert_eq!(leaf_hashes(&store), before);
        assert_eq!(root_in(store.conn(), 9).expect("root"), root);
        assert!(check_in(store.conn()).expect("check").is_empty());
    }

    /// Attack: a crafted database claims a leaf at the integer limit, where the tlog
    /// arithmetic would overflow: a clear error, no panic, nothing written.
    #[test]
    fn a_crafted_leaf_index_is_a_clear_error() {
        let (_d, mut store) = sealed(1);
        store
            .conn()
            .execute_batch("PRAGMA foreign_keys = OFF")
            .expect("fk");
        store
            .conn()
            .execute(
                "INSERT INTO seal_log_leaves VALUES (9223372036854775807, 'x', '{}')",
                [],
            )
            .expect("craft");
        let err = size_in(store.conn()).expect_err("out of range");
        assert!(err.is_corruption(), "{err}");
        let session = store.create_session("t").expect("session").session_id;
        let l = store.open_ledger(session, "l", &[]).expect("open");
        assert!(
            store.seal_ledger(l.ledger_id).is_err(),
            "sealing refuses too"
        );
        assert!(
            check_in(store.conn())
                .is_ok_and(|p| p.iter().any(|(_, check, _)| *check == "seal_log_gap"))
        );
    }

    /// Attack: rewrite a sealed ledger's hash (as a consistent rewrite would): the log's
    /// leaf no longer names the ledger as it is.
    #[test]
    fn a_rewritten_ledger_no_longer_matches_its_leaf() {
        let (_d, store) = sealed(4);
        let c = store.conn();
        c.execute_batch("DROP TRIGGER IF EXISTS ledgers_sealed_immutable")
            .expect("drop");
        let triggers: Vec<String> = c
            .prepare(
                "SELECT name FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = 'ledgers'",
            )
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows");
        for t in triggers {
            c.execute_batch(&format!("DROP TRIGGER {t}")).expect("drop");
        }
        c.execute(
            "UPDATE ledgers SET ledger_hash = 'ff' || substr(ledger_hash, 3)
              WHERE ledger_id = (SELECT ledger_id FROM seal_log_leaves WHERE leaf_index = 2)",
            [],
        )
        .expect("rewrite");
        let problems = check_in(c).expect("check");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].1, "seal_log_leaf");
        assert!(problems[0].2.starts_with("leaf 2 "), "{problems:?}");
    }
}
